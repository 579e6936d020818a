"""Write notebooks/*.ipynb from the cell sources below (unexecuted).

The notebooks are authored here so their source reviews as plain Python; `make reproduce`
executes them in place with papermill, and the executed notebooks are what is committed.
Run: python tools/build_notebooks.py [name ...]
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"

SETUP = '''\
import sys
from pathlib import Path

ROOT = Path.cwd().resolve()
while not (ROOT / "flashcore").is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))  # use this checkout's flashcore even if not installed

from flashcore.notebook import setup, table
PROFILE, DEVICE = setup(PROFILE)  # sets TRITON_INTERPRET=1 for the CPU profile
import torch
print(f"profile {PROFILE!r} on {torch.cuda.get_device_name(0) if DEVICE == 'cuda' else 'CPU (Triton interpreter)'}")'''


def md(text):
    return new_markdown_cell(text.strip("\n"))


def code(text, *, check=False, params=False):
    src = text.strip("\n")
    if check:
        src = "# NBVAL_CHECK_OUTPUT\n" + src
    cell = new_code_cell(src)
    if params:
        cell.metadata["tags"] = ["parameters"]
    return cell


# ----------------------------------------------------------------------------- 01
DERIVATION = [
    md(r"""
# 01 · From softmax to FlashAttention's tiled online softmax

Attention is $O = \mathrm{softmax}(Q K^\top \cdot s)\,V$ with $s = 1/\sqrt{D}$. Computed as
written it materialises an $S_q \times S_k$ score matrix. FlashAttention computes the same
function one key block at a time, keeping only a running maximum, a running denominator and
an unnormalised output per query row. This notebook derives that loop one step at a time and
checks each step numerically against float64, ending at the Triton kernel
(`flashcore/kernels/forward.py`), which is the last step compiled.

Every number below is computed live. The helpers are in `flashcore/derivation.py`; all of
this runs on a CPU, so both profiles print the same verdicts.
"""),
    code('''
PROFILE = "auto"      # "auto" | "gpu" | "cpu"
SEED = 0
SAVE_FIGURES = True
''', params=True),
    code(SETUP),
    code('''
import math
import matplotlib.pyplot as plt
from flashcore import derivation as drv
from flashcore.plots import save_figure
from flashcore.reference import attention_reference
from flashcore.validate import error_rule
torch.manual_seed(SEED);
'''),
    md(r"""
## 1. Softmax overflows unless the maximum is subtracted

$\mathrm{softmax}(x)_j = e^{x_j} / \sum_i e^{x_i}$. In fp32, $e^{x}$ overflows for
$x > 88.7$, and attention scores of that size are ordinary (large activations, unscaled
logits). Softmax is invariant to shifting $x$ by a constant, so subtracting the row maximum
$m$ makes every exponent $\le 0$: each term lies in $(0, 1]$ and the sum in $[1, n]$.
"""),
    code('''
x = torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1001.0, 1002.0]], dtype=torch.float32)
naive, safe = drv.naive_softmax(x), drv.safe_softmax(x)
print("naive:", naive.tolist())
print("safe: ", safe.tolist())
'''),
    code('''
print("naive softmax overflows to NaN on scores near 1000:", bool(torch.isnan(naive[1]).any()))
print("max-subtracted softmax is finite and shift-invariant:", bool(torch.isfinite(safe).all() and torch.allclose(safe[0], safe[1])))
''', check=True),
    md(r"""
## 2. The rescaling identity: softmax statistics of two blocks combine exactly

For a block $B$ keep $m_B = \max_{j\in B} x_j$ and $\ell_B = \sum_{j \in B} e^{x_j - m_B}$.
For the union of two blocks, with $m = \max(m_1, m_2)$:

$$\ell = \ell_1 e^{m_1 - m} + \ell_2 e^{m_2 - m}.$$

Both factors are $\le 1$, so the merge cannot overflow either. Applied block after block, the
statistics of a whole row are built in one pass with $O(1)$ state per row.
"""),
    code('''
x = 3 * torch.randn(4, 4096, dtype=torch.float64)
a, b = x[:, :1000], x[:, 1000:]
m1, l1 = a.amax(-1), torch.exp(a - a.amax(-1, keepdim=True)).sum(-1)
m2, l2 = b.amax(-1), torch.exp(b - b.amax(-1, keepdim=True)).sum(-1)
m, l = drv.merge_stats(m1, l1, m2, l2)
m_ref, l_ref = x.amax(-1), torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)
merge_err = float(((l - l_ref).abs() / l_ref).max())
print(f"relative error of the merged denominator: {merge_err:.1e}")
'''),
    code('''
print("merged statistics equal the one-pass ones to 1e-12:", merge_err < 1e-12 and bool(torch.equal(m, m_ref)))
''', check=True),
    md(r"""
## 3. Online over many blocks

The running maximum only ever rises; each time it does, the denominator accumulated so far is
multiplied by $e^{m_\text{old} - m_\text{new}} < 1$. The figure follows one row of 4096 scores
in blocks of 256: the running maximum (left) and the running denominator (right), which drops
each time the maximum jumps and ends exactly at the one-pass value.
"""),
    code('''
ms, ls = drv.online_softmax_stats(x[:1], 256)
ms = torch.stack(ms)[:, 0]; ls = torch.stack(ls)[:, 0]
fig, ax = plt.subplots(1, 2, figsize=(9, 3))
blocks = range(1, len(ms) + 1)
ax[0].step(blocks, ms, where="post"); ax[0].axhline(float(m_ref[0]), ls=":", c="k", label="row max")
ax[0].set(xlabel="key blocks seen", ylabel="running max m", title="running maximum"); ax[0].legend()
ax[1].plot(blocks, ls, marker="o", ms=3); ax[1].axhline(float(l_ref[0]), ls=":", c="k", label="one-pass value")
ax[1].set(xlabel="key blocks seen", ylabel="running denominator l", title="denominator, rescaled at each new max"); ax[1].legend()
fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "01_online_softmax")
print(f"final online denominator {float(ls[-1]):.12g} vs one-pass {float(l_ref[0]):.12g}")
'''),
    md(r"""
## 4. From softmax to attention: rescale the output too

The output row is $o = \sum_j p_j v_j / \ell$. Keep the numerator unnormalised,
$\tilde o = \sum_j e^{x_j - m} v_j$, and when the maximum moves from $m$ to $m'$, multiply
it by the same factor $\alpha = e^{m - m'}$ as the denominator:

$$\tilde o \leftarrow \alpha\,\tilde o + P_\text{block} V_\text{block}, \qquad
\ell \leftarrow \alpha\,\ell + \textstyle\sum P_\text{block}, \qquad o = \tilde o / \ell
\text{ once at the end.}$$

That is FlashAttention-2's forward loop. Below, `tiled_attention` runs it in float64 on a
length that is not a multiple of the block; the same loop without $\alpha$ (the rescale) is a
bug that is right only while the running maximum never changes.
"""),
    code('''
S, D = 1000, 64
q, k, v = (torch.randn(S, D, dtype=torch.float64) for _ in range(3))
ref = attention_reference(q[None, None], k[None, None], v[None, None])[0, 0]
tiled = drv.tiled_attention(q, k, v, block_n=64)
broken = drv.tiled_attention(q, k, v, block_n=64, rescale=False)
tiled_err, broken_err = float((tiled - ref).abs().max()), float((broken - ref).abs().max())
print(f"tiled online softmax, max |err| vs float64 softmax attention: {tiled_err:.1e}")
print(f"same loop without the rescale:                             {broken_err:.1e}")
'''),
    code('''
print("tiled online attention equals float64 attention (max err < 1e-12):", tiled_err < 1e-12)
print("dropping the rescale breaks it (max err > 1e-2):", broken_err > 1e-2)
''', check=True),
    md(r"""
## 5. The exp2 fold

GPUs evaluate $2^x$ in one special-function instruction (`MUFU.EX2`); $e^x$ costs an extra
multiply by $\log_2 e$. Folding $\log_2 e$ into the softmax scale once,
`qk_scale = scale * 1.44269504`, makes the inner loop a single multiply and `exp2`. In exact
arithmetic nothing changes; in fp32 the folded constant and the argument are rounded
differently. The measurement below compares both paths against float64 on fp32 scores.
"""),
    code('''
scores = (8 * torch.randn(256, 512)).float()
scale = 1 / math.sqrt(128)
m32 = scores.amax(-1, keepdim=True)
exact = torch.exp((scores.double() - m32.double()) * scale)
via_exp = torch.exp((scores - m32) * scale)
via_exp2 = torch.exp2(scores * (scale * drv.LOG2E) - m32 * (scale * drv.LOG2E))
rel = lambda a: float(((a.double() - exact).abs() / exact).max())
e1, e2 = rel(via_exp), rel(via_exp2)
print(f"max relative error, exp path:  {e1:.2e}  ({e1 / 2**-24:.1f} fp32 unit roundoffs)")
print(f"max relative error, exp2 fold: {e2:.2e}  ({e2 / 2**-24:.1f} fp32 unit roundoffs)")
'''),
    code('''
print("the exp2 fold costs at most a few fp32 roundoffs (< 16):", e2 < 16 * 2**-24)
''', check=True),
    md(r"""
## 6. Why the accumulator is fp32

The output sums $S_k$ terms $p_j v_j$. With fp16 operands and an fp16 running sum, each block
adds a rounding error of about half an fp16 ulp of the running value, and the errors grow
with the number of blocks; with an fp32 running sum they stay at the level of the final
rounding to fp16. Here the products are exact (float64) and only the accumulator's dtype
differs.
"""),
    code('''
lengths = [64, 256, 1024, 4096, 16384]
acc_err = {"float16": [], "float32": []}
for n in lengths:
    s = torch.randn(32, n, dtype=torch.float64)
    p = torch.softmax(s, -1).half()
    vv = torch.randn(n, 64, dtype=torch.float64).half()
    exact = p.double() @ vv.double()
    for name, dt in (("float16", torch.float16), ("float32", torch.float32)):
        got = drv.accumulate_pv(p, vv, block_n=64, acc_dtype=dt)
        acc_err[name].append(float((got.double() - exact).norm() / exact.norm()))
fig, ax = plt.subplots(figsize=(5, 3.2))
for name, errs in acc_err.items():
    ax.loglog(lengths, errs, marker="o", label=f"{name} accumulator")
ax.set(xlabel="keys summed (S_k)", ylabel="relative L2 error of P·V", title="accumulator precision")
ax.legend(); fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "01_accumulation_error")
for n, a, b in zip(lengths, acc_err["float16"], acc_err["float32"]):
    print(f"S_k={n:6d}  fp16 acc {a:.2e}   fp32 acc {b:.2e}")
'''),
    code('''
print("fp32 accumulation beats fp16 at every length:", all(b < a for a, b in zip(acc_err["float16"], acc_err["float32"])))
print("fp16 accumulation error grows with S_k (x4 or more from 64 to 16384):", acc_err["float16"][-1] > 4 * acc_err["float16"][0])
''', check=True),
    md(r"""
## 7. The compiled loop

`flashcore.attention` is section 4's loop as a Triton kernel: a BLOCK_M × BLOCK_N tile of
scores per step on tensor cores, fp32 running statistics, `exp2` with the folded scale, and
one division at the end. Rows that see no key keep $m = -\infty$; the kernel subtracts 0
instead so $e^{-\infty - (-\infty)}$ never makes a NaN, and returns zeros for them.
It runs here on the same inputs (fp32 on CPU through the Triton interpreter, fp16 on a GPU),
judged by the error rule of notebook 02.
"""),
    code('''
from flashcore import attention
dt = torch.float16 if DEVICE == "cuda" else torch.float32
q4, k4, v4 = (t[None, None].to(device=DEVICE, dtype=dt) for t in (q, k, v))
out = attention(q4, k4, v4, causal=True)
report = error_rule(out, attention_reference(q4, k4, v4, causal=True),
                    attention_reference(q4, k4, v4, causal=True, compute_dtype=dt))
print(f"{dt}: max |err| {report.max_abs_err:.2e}, bound {report.bound:.2e}, ratio {report.ratio:.2f}")
'''),
    code('''
print("flashcore.attention passes the error rule on the derivation's input:", report.passed)
''', check=True),
]

# ----------------------------------------------------------------------------- 02
CORRECTNESS = [
    md(r"""
# 02 · Correctness: the error rule, the grid, and the prior reports' cases

**What this notebook claims, and how it could fail.** The forward kernel computes exact
attention to within twice the error that the same computation in PyTorch at the same
precision makes, on every case of a grid built from the sizes where attention kernels break
(lengths that are not multiples of the tile, $S_q \ne S_k$, both causal alignments, every
GQA ratio, head dims 16–256, fp16/bf16/fp32, transposed layouts). Any case over the bound,
any unwritten element, any NaN the reference does not have, prints `False` below.

Sections: (1) the rule, and why the checks the prior reports used are weak, tested against
planted bugs; (2) the grid, run live; (3) the recorded H100 grid; (4) the prior reports'
failing cases revisited.
"""),
    code('''
PROFILE = "auto"          # "auto" | "gpu" | "cpu"
SEED = 0
RECORD = True             # GPU profile: write results/<gpu>/correctness.json
RECORDED_GPU = "nvidia-h100-80gb-hbm3"   # which recorded GPU run sections 3 render
SAVE_FIGURES = True
''', params=True),
    code(SETUP),
    code('''
import math
import matplotlib.pyplot as plt
from flashcore import attention
from flashcore import validate as V
from flashcore.plots import DTYPE_COLORS, save_figure
from flashcore.reference import attention_reference
from flashcore.results import describe, read_result, write_result
'''),
    md(r"""
## 1. The rule

For each case, fresh $N(0,1)$ inputs; the output buffer is filled with NaN before the launch.
Then

$$\max|O - O_{64}| \;\le\; 2\,\max|O_\text{same} - O_{64}| + \text{floor},$$

where $O_{64}$ is attention in float64 and $O_\text{same}$ is the plain PyTorch computation in
the inputs' precision (scores, softmax and $PV$ all in fp16/bf16/fp32). The bound therefore
scales with the dtype, the sequence length and the output's magnitude, all of which a fixed
tolerance ignores. The floor is one unit roundoff of the dtype at the largest $|O_{64}|$, so a
case whose baseline happens to be exact (e.g. $S_k = 1$, where the output is a copy of $V$)
does not demand bit-exactness. NaN must occur exactly where the reference has NaN.
Relative L2 error is recorded beside it.

**Report 000** first tested `max_diff < 2e-3`, saw 0.003906 on every head count at
$S = 512$, $D = 64$, fp16, and switched to `allclose(rtol=1e-3, atol=2e-3)` until it passed.
What does the fp16 computation itself get wrong at that size, and what would the rule have
allowed?
"""),
    code('''
case000 = V.AttentionCase(16, 8, 8, 512, 512, 64, "float16")
q, k, v = V.make_inputs(case000, "cpu", SEED)
ref = attention_reference(q, k, v)
same = attention_reference(q, k, v, compute_dtype=q.dtype)
r000 = V.error_rule(same, ref, same)
print(f"fp16 PyTorch vs float64 at B=16, H=8, S=512, D=64: max |err| {r000.baseline_err:.2e}; "
      f"the rule allows {r000.bound:.2e}; largest |output| {float(ref.abs().max()):.2f}")
print(f"report 000's 0.003906 is {0.003906 / r000.bound:.1f}x the rule's bound")
'''),
    code('''
print("report 000's max diff (0.003906) is within the rule's bound at its own config:", 0.003906 <= r000.bound)
''', check=True),
    md(r"""
On N(0, 1) inputs at report 000's size, 0.003906 ($2^{-8}$) is more than the rule allows: it
would have failed. A maximum difference that is the same power of two at every head count
points at something systematic (an intermediate rounded to a coarser format, or one ulp at a
larger magnitude) and deserved an explanation; loosening the test made it disappear instead.

**Planted bugs.** Each function below is attention with one bug that real kernels have
shipped: the tail key block dropped when $S$ is not a multiple of the tile, the causal
diagonal one key late, probabilities rounded to bf16 in an fp16 kernel, and the online
softmax without its rescale. Each check (the two from report 000 and the rule) is run on each
bug at three lengths, causal and not (fp16, $B=1$, $H_q = 4$, $H_{kv} = 2$, $D = 64$, on the
CPU, so both profiles compute the same table). `row_ratio` is a diagnostic: the rule applied
to each query row on its own (above 1 = that row alone would fail).
"""),
    code('''
bug_rows = []
for S in (113, 1023, 4097):
    for causal in (False, True):
        case = V.AttentionCase(1, 4, 2, S, S, 64, "float16", causal)
        q, k, v = V.make_inputs(case, "cpu", SEED + S)
        ref = attention_reference(q, k, v, causal=causal)
        same = attention_reference(q, k, v, causal=causal, compute_dtype=q.dtype)
        for name, bug in V.planted_bugs().items():
            if name == "causal mask one key too late" and not causal:
                continue
            out = bug(q, k, v, causal)
            rep = V.error_rule(out, ref, same)
            row = {"bug": name, "S": S, "causal": causal, "max_err": rep.max_abs_err, "bound": rep.bound,
                   "rule_rejects": not rep.passed, "row_ratio": rep.row_ratio}
            for check, fn in V.weak_checks().items():
                row[check + " rejects"] = not fn(out, ref)
            bug_rows.append(row)
print(table(bug_rows, list(bug_rows[0]), {"max_err": "{:.2e}", "bound": "{:.2e}", "row_ratio": "{:.2f}"}))
'''),
    code('''
allclose = "allclose(rtol=1e-3, atol=2e-3) rejects"
fig, ax = plt.subplots(figsize=(8, 3.6))
names = list(V.planted_bugs())
for i, name in enumerate(names):
    rows = [r for r in bug_rows if r["bug"] == name]
    xs = [i + (j - len(rows) / 2) * 0.12 for j in range(len(rows))]
    ax.scatter(xs, [r["max_err"] for r in rows], c=["#d62728" if r["rule_rejects"] else "#7f7f7f" for r in rows],
               marker="o", zorder=3)
    ax.scatter(xs, [r["bound"] for r in rows], marker="_", c="k", s=120, zorder=2)
ax.axhline(2e-3, ls=":", c="#1f77b4", label="report 000's atol 2e-3")
ax.set_yscale("log"); ax.set_xticks(range(len(names)), [n.replace(" ", "\\n", 2) for n in names], fontsize=8)
ax.set_ylabel("max |out - float64|")
ax.set_title("planted bugs: error (dot; red = rule rejects) vs the rule's bound (dash)")
ax.legend(loc="upper right"); fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "02_planted_bugs")
'''),
    code('''
label = lambda r: f"{r['bug']} @S={r['S']}{' causal' if r['causal'] else ''}"
print("rejected by the rule but passed by allclose:", [label(r) for r in bug_rows if r["rule_rejects"] and not r[allclose]])
print("rejected by allclose but passed by the rule:", [label(r) for r in bug_rows if r[allclose] and not r["rule_rejects"]])
print("passed by both:", [label(r) for r in bug_rows if not r["rule_rejects"] and not r[allclose]])
print(f"smallest row-wise ratio among the planted bugs: {min(r['row_ratio'] for r in bug_rows):.2f}")
''', check=True),
    md(r"""
What the table says, plainly:

* The gross bugs (dropped tail block, late diagonal, missing rescale) are rejected by every
  check, almost everywhere. A loosened tolerance is dangerous near the noise floor, not here.
* Rounding the probabilities to bf16 in a non-causal fp16 kernel changes the output by less
  than fp16 arithmetic itself does; no comparison against float64 can single it out, and the
  rule does not pretend to.
* The global rule has a blind spot of its own: its bound comes from the *largest* error of the
  fp16 baseline, and in causal attention the first rows (which average few keys and are large)
  set it. A bug confined to small-magnitude rows, like dropping one key from the end of a
  causal sequence of 4097, can stay under that bound while `allclose`'s per-element tolerance
  sees it. Applied row by row, the rule separates every planted bug (see the smallest row-wise
  ratio above); section 3 shows where the kernel itself sits on that diagnostic. The pass/fail
  rule stays the agreed global one; the row-wise ratio is recorded beside it for every case.
"""),
    md(r"""
## 2. The grid, live

GPU profile: the full grid (450 cases: fp16/bf16 at every awkward length, $S_q \ne S_k$,
both causal alignments, GQA ratios 1–32, head dims 16–256 and padded ones, fp32, transposed
layouts), bitwise repeatability, and views whose element offsets pass $2^{31}$; recorded to
`results/<gpu>/correctness.json`. CPU profile: the interpreter grid (fp16/fp32, small sizes);
bf16 cannot be checked under the interpreter (its `tl.dot` is wrong), so bf16 is GPU-only.
"""),
    code('''
grid = "full" if PROFILE == "gpu" else "cpu"
live = V.run_grid(V.correctness_grid(grid), DEVICE, base_seed=SEED)
summary = V.summarize(live)
determinism = V.check_determinism(V.determinism_cases(DEVICE), DEVICE)
print(f"grid {grid!r}: {summary['cases']} cases, {summary['failed']} failed, worst ratio "
      f"{summary['worst_ratio']:.3f} ({summary['worst_case']}), max rel L2 {summary['max_rel_l2_err']:.2e}, "
      f"worst row-wise ratio {summary['worst_row_ratio']:.2f}")
if PROFILE == "gpu":
    large = V.check_large_offsets(DEVICE)
    if RECORD:
        path = write_result("correctness", {"grid": grid, "summary": summary, "cases": live,
                                            "determinism": determinism, "large_offsets": large},
                            command="papermill notebooks/02_correctness.ipynb (PROFILE=gpu)")
        print("recorded", path.relative_to(ROOT))
'''),
    code('''
print("live grid: every case passes the error rule:", summary["failed"] == 0)
print("live grid: repeated launches are bitwise identical:", all(r["bitwise_identical"] for r in determinism))
''', check=True),
    md(r"""
## 3. The recorded GPU grid

Rendered from `results/<gpu>/correctness.json`; the provenance line says which device, date
and commit produced it. On the CPU profile this is the record committed from the H100 run.
"""),
    code('''
record = read_result("correctness", RECORDED_GPU)
print(describe(record))
rows = record["cases"]
groups = {}
for r in rows:
    key = (r["dtype"], "causal " + r["alignment"] if r["causal"] else "non-causal")
    groups.setdefault(key, []).append(r)
summary_rows = [{"dtype": d, "mask": m, "cases": len(g), "worst ratio": max(r["ratio"] for r in g),
                 "worst row ratio": max(r.get("row_ratio", float("nan")) for r in g),
                 "median ratio": sorted(r["ratio"] for r in g)[len(g) // 2],
                 "max rel L2": max(r["rel_l2_err"] for r in g)} for (d, m), g in sorted(groups.items())]
print(table(summary_rows, list(summary_rows[0]), {"worst ratio": "{:.3f}", "worst row ratio": "{:.2f}", "median ratio": "{:.3f}", "max rel L2": "{:.2e}"}))
by_d = {}
for r in rows:
    by_d.setdefault(r["head_dim"], []).append(r["ratio"])
print()
print(table([{"head_dim": d, "cases": len(x), "worst ratio": max(x)} for d, x in sorted(by_d.items())],
            ["head_dim", "cases", "worst ratio"], {"worst ratio": "{:.3f}"}))
'''),
    code('''
fig, ax = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
markers = {(False, "top_left"): "o", (True, "top_left"): "^", (True, "bottom_right"): "v"}
for r in rows:
    m = markers[(r["causal"], r["alignment"])]
    ax[0].scatter(r["seqlen_k"], r["ratio"], c=DTYPE_COLORS[r["dtype"]], marker=m, s=14, alpha=0.7)
    ax[1].scatter(r["num_q_heads"] // r["num_kv_heads"], r["ratio"], c=DTYPE_COLORS[r["dtype"]], marker=m, s=14, alpha=0.7)
for a in ax:
    a.axhline(1.0, c="k", ls="--", lw=1)
    a.set_xscale("log", base=2)
ax[0].set(xlabel="S_k", ylabel="max err / bound  (fails above 1)", title="every recorded case")
ax[1].set(xlabel="GQA ratio Hq/Hkv", title="by GQA ratio")
handles = [plt.Line2D([], [], ls="", marker="o", c=c, label=d) for d, c in DTYPE_COLORS.items()]
handles += [plt.Line2D([], [], ls="", marker=m, c="grey", label=("causal " + a) if c else "non-causal") for (c, a), m in markers.items()]
ax[1].legend(handles=handles, loc="upper right", fontsize=8)
fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "02_error_ratio_grid")
'''),
    code('''
fails = sum(not r["passed"] for r in rows)
print(f"recorded GPU grid: {len(rows)} cases, {fails} fail the rule, worst ratio below 1: {max(r['ratio'] for r in rows) < 1}")
if "row_ratio" in rows[0]:
    worst_row = max(r["row_ratio"] for r in rows)
    print(f"recorded: worst row-wise ratio {worst_row:.2f}, below the smallest planted bug's "
          f"({min(b['row_ratio'] for b in bug_rows):.2f}): {worst_row < min(b['row_ratio'] for b in bug_rows)}")
print("recorded: repeated launches bitwise identical:", all(r["bitwise_identical"] for r in record["determinism"]))
print("recorded: offsets past 2^31 elements correct:", all(r["passed"] and r["max_element_offset"] > 2**31 for r in record["large_offsets"]))
''', check=True),
    code('''
try:
    san = read_result("sanitizer", RECORDED_GPU)
    print(describe(san))
    for run in san["runs"]:
        print(f"compute-sanitizer --tool {run['tool']}: {run['errors']} errors/hazards, exit {run['returncode']}  |  "
              + " | ".join(run["summary_lines"]))
    sanitizer_clean = all(r["errors"] == 0 and r["returncode"] == 0 for r in san["runs"])
except FileNotFoundError:
    sanitizer_clean = None
print("\\n".join(f"  {r['name']}: offset {r['max_element_offset']:.3e} elements, ratio {r['ratio']:.3f}" for r in record["large_offsets"]))
'''),
    code('''
print("recorded: memcheck and racecheck clean on the sanitizer sample:", sanitizer_clean)
''', check=True),
    md(r"""
The sanitizer sample (awkward lengths, both alignments, GQA, padded head dim, fp32, a
transposed layout) ran with PyTorch's caching allocator off, so every tensor is its own
allocation and a masked load that strayed past a tensor's end would be reported rather than
land silently in a neighbour's memory.

## 4. The prior reports' failing cases

Report 003 called a 0.468 maximum difference at $S = 32$ ("47% error", "block size mismatch
for small sequences") an acceptable edge case, and KV-cache errors of 0.007–1.05 "minor
precision issues". Here are the same regimes through the forward kernel: $S = 32$ and other
short lengths, and single-query / short-query attention over a longer cache with bottom-right
alignment and GQA (the shape of a KV-cache step; the dedicated split-KV decode kernel is
checked the same way when it lands).
"""),
    code('''
dt = "float16"
prior = [V.AttentionCase(4, 8, 8, 32, 32, 64, dt, False), V.AttentionCase(4, 8, 8, 32, 32, 64, dt, True),
         V.AttentionCase(4, 8, 8, 16, 16, 64, dt, True), V.AttentionCase(2, 8, 8, 48, 48, 128, dt, False),
         V.AttentionCase(2, 32, 8, 1, 200, 64, dt, True, "bottom_right"),
         V.AttentionCase(2, 32, 8, 7, 257, 64, dt, True, "bottom_right"),
         V.AttentionCase(2, 8, 1, 1, 1, 64, dt, True, "bottom_right")]
prior_rows = [V.check_case(c, DEVICE, SEED + i) for i, c in enumerate(prior)]
print(table(prior_rows, ["name", "max_abs_err", "bound", "ratio", "passed"],
            {"max_abs_err": "{:.2e}", "bound": "{:.2e}", "ratio": "{:.3f}"}))
'''),
    code('''
print("prior reports' short-sequence and cache-shaped cases all pass the rule:", all(r["passed"] for r in prior_rows))
print("largest error among them below 1% of report 003's 0.468:", max(r["max_abs_err"] for r in prior_rows) < 0.00468)
''', check=True),
    md(r"""
## Conclusion

What the verdict lines above establish, each from a measurement that printed `True` and
could have printed `False`: the forward kernel passes the error rule on every case of the live
grid and of the recorded GPU grid, repeated launches are bitwise identical, memcheck and
racecheck are clean on the sanitizer sample, and element offsets past $2^{31}$ are handled.
The rule beats the prior reports' fixed thresholds where it matters (its bound follows the
dtype and the size) but is not uniformly sharper than `allclose`: a bug confined to
small-magnitude rows can hide under a bound set by large rows, which is why the row-wise ratio
is recorded beside it.
What is not covered here: backward (flashcore is forward-only), attention masks/bias and
dropout (rejected with an error), and the decode kernel (its own notebook section once it
exists).
"""),
]

NOTEBOOKS = {"01_derivation": DERIVATION, "02_correctness": CORRECTNESS}


def build(name: str) -> Path:
    nb = new_notebook(cells=NOTEBOOKS[name])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    path = NB_DIR / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    for name in sys.argv[1:] or NOTEBOOKS:
        print("wrote", build(name))
