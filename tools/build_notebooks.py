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

Every number below is computed live. The helpers are in `flashcore/studies/derivation.py`; all of
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
from flashcore.studies import derivation as drv
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
        print("recorded", "/".join(path.parts[-3:]))
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
        lines = [ln for ln in run["summary_lines"] if "own-bound" not in ln]
        fp8_runs = len(run["summary_lines"]) - len(lines)
        print(f"compute-sanitizer --tool {run['tool']} on {run.get('workload', 'forward')}: {run['errors']} errors/hazards, "
              f"exit {run['returncode']}  |  " + " | ".join(lines) + (f" | {fp8_runs} runs of the fp8 study (recipes and baselines)" if fp8_runs else ""))
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
transposed layout, sliding windows; then the fp8 kernel, every recipe, at S = 200) ran with PyTorch's caching allocator off, so every tensor is its own
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
## KV-cache attention (decode and chunked prefill)

`attention_with_kvcache` appends the new keys/values at each sequence's length and attends
with bottom-right causal alignment through split-KV partials and a deterministic combine. A
whole session is checked call by call against float64 under the same rule: a chunked
prefill of ragged prompts (one token up to nearly the full cache) into an empty cache, then
decode steps, with GQA and MQA. The prior reports called errors up to 1.05 on their GQA + cache
path "acceptable"; the largest error here is printed beside its bound.
"""),
    code('''
from flashcore.validate import kvcache_session
if PROFILE == "gpu":
    sessions = [dict(batch=4, hq=32, hkv=8, capacity=4096, d=128, prompt_lens=[1, 300, 2047, 4000], steps=16,
                     dtype=torch.bfloat16),
                dict(batch=2, hq=16, hkv=1, capacity=2048, d=64, prompt_lens=[5, 2000], steps=16, dtype=torch.float16)]
else:
    sessions = [dict(batch=3, hq=8, hkv=2, capacity=96, d=32, prompt_lens=[1, 40, 89], steps=4, dtype=torch.float16),
                dict(batch=2, hq=7, hkv=1, capacity=64, d=16, prompt_lens=[1, 63], steps=1, dtype=torch.float16)]
kv_reports = []
for cfg in sessions:
    reps = kvcache_session(**cfg, device=DEVICE)
    kv_reports += reps
    worst = max(reps, key=lambda r: r.ratio)
    print(f"Hq/Hkv {cfg['hq']}/{cfg['hkv']} D{cfg['d']} {str(cfg['dtype'])[6:]}: {len(reps)} calls, worst ratio "
          f"{worst.ratio:.3f} (max err {worst.max_abs_err:.2e} <= bound {worst.bound:.2e})")
'''),
    code('''
print("every KV-cache call (prefill chunks and decode steps, GQA and MQA) passes the error rule:",
      all(r.passed for r in kv_reports))
print("largest KV-cache error below the prior reports' 1.05 by more than 100x:",
      max(r.max_abs_err for r in kv_reports) < 1.05 / 100)
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
dropout (rejected with an error).
"""),
]


# ----------------------------------------------------------------------------- 03
PERFORMANCE = [
    md(r"""
# 03 · Performance on Hopper, side by side

How fast is flashcore's forward kernel next to the attention kernels people actually call:
PyTorch SDPA's flash (FlashAttention-2), cuDNN (FA3-class), memory-efficient and math
backends, and FlexAttention compiled once per shape? Every ratio here comes from one process
on one GPU, on the same rotated inputs (`flashcore/studies/bench.py` says exactly how timing works).

The GPU profile measures and records (`RECORD_TOPIC`); the CPU profile renders the recorded
H100 run and names its device, date and commit. Nothing on this page is typed in by hand.
"""),
    code('''
PROFILE = "auto"          # "gpu" measures live and records; "cpu" renders the recorded run
RECORD_TOPIC = "perf"     # results/<gpu>/<topic>.json
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
MEASURE_HEAD_DIMS = [64, 128, 256]      # narrow the live sweep from papermill (-p ...)
MEASURE_SEQLENS = [1024, 2048, 4096, 8192, 16384]
MEASURE_DTYPES = ["bfloat16", "float16"]
MEASURE_PRIOR = True
MEASURE_DECODE = True
REPS = 60
''', params=True),
    code(SETUP + '''
from flashcore.studies import bench, report
from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
'''),
    md(r"""
## Measure (GPU profile) or load the record (CPU profile)

The live sweep is the same code as `python -m flashcore bench --suite all --record`: ceilings
first (an 8192³ bf16 matmul and a 2 GiB device copy, same process), then every shape with
every implementation. B·S is held at 16K tokens and H·D at 2048, so each point moves the
same bytes per token.
"""),
    code('''
if PROFILE == "gpu":
    from tqdm.auto import tqdm
    payload = {"method": bench.__doc__.strip(), "ceilings": bench.ceilings()}
    shapes = bench.forward_shapes(MEASURE_HEAD_DIMS, MEASURE_SEQLENS, MEASURE_DTYPES)
    payload["forward"] = [r for sh in tqdm(shapes, desc="forward") for r in
                          bench.bench_attention_shape(sh, bench.PEERS, reps=REPS)]
    payload["prior_regime"] = [r for sh in tqdm(bench.prior_report_shapes() if MEASURE_PRIOR else [], desc="prior")
                               for r in bench.bench_attention_shape(sh, [i for i in bench.PEERS if i != "sdpa_math"],
                                                                    reps=REPS, graph=True, keep_samples=True)]
    payload["decode"] = [r for sh in tqdm(bench.decode_shapes() if MEASURE_DECODE else [], desc="decode")
                         for r in bench.bench_attention_shape(sh, bench.DECODE_PEERS, reps=REPS, graph=True)]
    write_result(RECORD_TOPIC, payload, command=f"notebooks/03_performance.ipynb (PROFILE=gpu, RECORD_TOPIC={RECORD_TOPIC})")
record = read_result(RECORD_TOPIC, None if PROFILE == "gpu" else RECORDED_GPU)
print("recorded on", describe(record))
c = record["ceilings"]
print(f"ceilings in the same run: {c['matmul']['what']} {c['matmul']['tflops']:.0f} TFLOP/s, "
      f"{c['copy']['what']} {c['copy']['tbps']:.2f} TB/s")
'''),
    md(r"""
## TFLOP/s vs sequence length

FLOPs are $4 \cdot B \cdot H \cdot S_q \cdot S_k \cdot D$, counting for causal only the pairs a
query may see. The horizontal line is the matmul ceiling measured in the same run.
"""),
    code('''
for dtype in ("bfloat16", "float16"):
    if any(r["dtype"] == dtype for r in record["forward"]):
        fig = report.plot_tflops_vs_seqlen(record, dtype)
        save_figure(fig, f"03_tflops_vs_seqlen_{dtype}")
'''),
    code('''
for dtype in ("bfloat16", "float16"):
    rows = report.forward_table(record, dtype)
    if rows:
        print(dtype)
        print(table(rows, ["D", "S", "B", "H", "causal", "flashcore", "of_ceiling", "x_sdpa_flash", "x_sdpa_cudnn", "x_flex"],
                    {"flashcore": "{:.0f}", "of_ceiling": "{:.2f}", "x_sdpa_flash": "{:.2f}", "x_sdpa_cudnn": "{:.2f}",
                     "x_flex": "{:.2f}"}))
fig = report.plot_speedups(record, "bfloat16")
save_figure(fig, "03_speedups_bf16")
fig = report.plot_ceiling_fraction(record)
save_figure(fig, "03_ceiling_fraction")
'''),
    md(r"""
## The targets

D=128, S ≥ 2048, causal and non-causal: the geometric mean over those shapes of flashcore's
TFLOP/s over each peer's should be ≥ 1.3× SDPA flash and ≥ 0.9× SDPA cuDNN (the goal: beat
cuDNN). D=64 and D=256 are reported the same way.
"""),
    code('''
targets = {}
for dtype in ("bfloat16", "float16"):
    for d in (64, 128, 256):
        g = report.forward_targets(record, dtype, d)
        if g:
            targets[(dtype, d)] = g
            print(f"{dtype:>9} D{d:<3}: " + ", ".join(f"x{v:.2f} vs {k}" for k, v in sorted(g.items())))
'''),
    code('''
main = [targets[(dt, 128)] for dt in ("bfloat16", "float16") if (dt, 128) in targets]
print("D=128, S>=2048: flashcore >= 1.3x SDPA flash (geomean, bf16 and fp16):",
      all(g["sdpa_flash"] >= 1.3 for g in main))
print("D=128, S>=2048: flashcore >= 0.9x SDPA cuDNN (geomean, bf16 and fp16):",
      all(g["sdpa_cudnn"] >= 0.9 for g in main))
print("D=128, S>=2048: flashcore faster than FlexAttention (geomean, bf16):",
      targets.get(("bfloat16", 128), {}).get("flex", 0) > 1.0)
''', check=True),
    md(r"""
**Where the cuDNN target is missed, and why.** The kernel is FlashAttention-2's algorithm
with Hopper's bulk tensor copies (TMA descriptors), `wgmma` tensor-core instructions
(`HGMMA` in the SASS, notebook 06), software pipelining and an offline-tuned config per
(head dim, causal, length) bucket (`results/<gpu>/tuning.json`, `python -m flashcore tune`). It
does not have FlashAttention-3's two ingredients that cuDNN shares: ping-pong scheduling of two
consumer warpgroups (one runs its softmax while the other's GEMMs occupy the tensor cores) and
intra-warpgroup overlap of the softmax of one tile with the GEMMs of the next. On H100 the
exponentials alone cost about half as many cycles as the D=128 GEMMs (16 `MUFU.EX2` per SM per
clock against 4096 dense bf16 FLOPs), so without that overlap the kernel stalls on the
softmax for a fixed fraction of every tile. Triton 3.6's automatic warp specialization
(`tl.range(..., warp_specialize=True)`) compiled only with 8 warps here and did not beat the
plain pipelined kernel in the sweep (`tuning.json`, configs `ws-*`); with 4 warps it failed to
compile. The gap to cuDNN shrinks with sequence length (the ratio at S=16K is in the table).
"""),
    md(r"""
## The prior reports' regime: short sequences, latency per launch

The reports claimed sub-5 µs "per sequence" at S ≤ 512, "0.49 µs per head" at H=96, and
"within 4–22% of SDPA". Honest definitions: **per launch** is the time of one call; **eager**
is a Python loop of calls (CUDA events, back to back), **graph** replays the same launches
from a CUDA graph (GPU time, no Python); **host** is the CPU time one call costs before it
returns. Per sequence and per head divide the graph time by B and by B·H: a throughput, not a
latency; no single sequence finishes faster than the launch it is part of.
"""),
    code('''
rows = report.prior_table(record)
print(table(rows, ["B", "H", "S", "impl", "eager_us", "eager_p99_us", "graph_us", "host_us", "per_seq_us", "per_head_us"],
            {k: "{:.2f}" for k in ("eager_us", "eager_p99_us", "graph_us", "host_us", "per_seq_us", "per_head_us")}))
fig = report.plot_latency_distributions(record)
save_figure(fig, "03_latency_distributions")
'''),
    code('''
verdicts = report.prior_verdicts(record)
print(table(verdicts, ["B", "H", "S", "graph_ratio", "eager_ratio"], {"graph_ratio": "{:.2f}", "eager_ratio": "{:.2f}"}))
print("(ratio = fastest SDPA backend's time / flashcore's time; >= 1 means flashcore is at least as fast)")
'''),
    code('''
fc = {(r["B"], r["H"], r["S"]): r for r in report.prior_table(record) if r["impl"] == "flashcore"}
print("graph replay: flashcore at least as fast as the fastest SDPA backend at every prior-regime shape:",
      all(v["graph_ratio"] >= 1.0 for v in verdicts))
print("eager Python loop: flashcore at least as fast as the fastest SDPA backend at every prior-regime shape:",
      all(v["eager_ratio"] >= 1.0 for v in verdicts))
print("flashcore's host-side launch cost exceeds its GPU time at S=128:",
      all(r["host_us"] > r["graph_us"] for k, r in fc.items() if k[2] == 128))
print("'0.49 us per head' at H=96, S=512, B=16 reproduced (flashcore per head <= 0.49 us):",
      fc[(16, 96, 512)]["per_head_us"] <= 0.49)
''', check=True),
    md(r"""
What the table says about the reports' numbers. "Per sequence" figures under 5 µs are real
as throughput (graph time / B) for every backend, flashcore included; none of them is a
latency. At these sizes the GPU work is 5–60 µs and the eager time is set by the launch path:
flashcore's Python launcher (argument checks, Triton's argument binding and specialization,
building TMA descriptors) costs tens of microseconds of host time per call, more than PyTorch's
C++ dispatch into SDPA, so in an eager loop flashcore loses at small shapes even where its
kernel is faster. CUDA graphs (or `torch.compile` with `mode="reduce-overhead"`) remove that
cost; the graph column is the kernel-against-kernel comparison.
"""),
    md(r"""
## Decode: bytes over time

q_len 1, bf16, D=128; K and V are read once, so the figure of merit is K+V bytes over time
against the copy ceiling. `flashcore split-KV decode` is `attention_with_kvcache`
(`flashcore/kernels/decode.py`); "forward kernel (no split)" is the forward kernel on the same
inputs, to show why split-KV exists: one query row per head leaves most SMs idle.
"""),
    code('''
if record.get("decode"):
    rows = report.decode_table(record)
    print(table(rows, ["B", "Hq", "Hkv", "cache", "graph_us", "eager_us", "tbps", "of_copy", "x_sdpa_flash", "x_sdpa_cudnn"],
                {"graph_us": "{:.1f}", "eager_us": "{:.1f}", "tbps": "{:.2f}", "of_copy": "{:.2f}",
                 "x_sdpa_flash": "{:.2f}", "x_sdpa_cudnn": "{:.2f}"}))
    print("(x_peer = peer's graph time / flashcore's; >= 1 means flashcore at least as fast)")
    fig = report.plot_decode(record)
    save_figure(fig, "03_decode_bandwidth")
'''),
    code('''
rows = report.decode_table(record) if record.get("decode") else []
long = [r for r in rows if r["cache"] >= 32768]
print("decode, caches >= 32K: K+V bandwidth >= 90% of the copy ceiling at every shape:",
      bool(long) and all(r["of_copy"] >= 0.9 for r in long))
print("decode: at least as fast as SDPA flash at every shape (graph):",
      bool(rows) and all(r["x_sdpa_flash"] >= 1.0 for r in rows))
print("decode: at least as fast as SDPA cuDNN at every shape (graph):",
      bool(rows) and all(r["x_sdpa_cudnn"] >= 1.0 for r in rows))
''', check=True),
    md(r"""
Decode reaches most of the copy ceiling on long caches and is within a few percent of cuDNN,
but not ahead of it at every shape; the short-cache, batch-1 case is latency-bound and two
launches (split + combine) cost a few microseconds of GPU time that cuDNN's single kernel does
not pay. The eager column again carries flashcore's Python launch cost.
"""),
]

# ----------------------------------------------------------------------------- 06
SASS_CT = [
    md(r"""
# 06 · Constant time: the machine code and the clock

The prior reports certified their kernels "constant-time, no timing side-channels" without
looking. What can the phrase mean for attention? The time may depend on the **shapes**
(batch, heads, lengths, causal): those are public. The question is whether it depends on the
**values** in q, k, v. We look twice:

1. **SASS.** Compile every shipped kernel for sm_90 (offline, no GPU needed), build the
   basic-block graph, and classify every branch and every guarded memory access by where its
   predicate comes from: public (parameters, thread/block ids, loop counters), metadata (the
   decode kernel's cache lengths, read from memory but public), synchronization (waiting on
   asynchronous copies), or **data** (values loaded from memory or produced by the tensor
   cores). The method is in `flashcore/studies/sass.py`.
2. **Timing.** dudect: interleave launches on random inputs and on fixed special inputs, and
   test whether the two timing distributions differ (Welch's t, cropped, plus a second-order
   test).

Both methods get positive controls, deliberately leaky variants of the forward kernel that
must be flagged: one skips the rescale when the running max does not move, one skips all keys
when a query tile holds a NaN.
"""),
    code('''
PROFILE = "auto"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
MEASURE_TIMING = False     # GPU profile: re-run the timing test (about 2 minutes) and record
TIMING_N = 10000
''', params=True),
    code(SETUP + '''
from flashcore.studies import report, sass
from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
'''),
    md(r"""
## The SASS, classified

This compiles live in both profiles (about a minute on a CPU).
"""),
    code('''
sass_report = sass.analyze_variants(keep_sass=True)
print(f"compiled for {sass_report['arch']} with triton {sass_report['triton']}")
print(table(report.sass_table(sass_report), ["kernel", "role", "instr", "blocks", "br_public", "br_metadata",
                                             "br_sync", "br_data", "mem_public", "mem_metadata", "mem_data",
                                             "data_addr"]))
'''),
    md(r"""
Columns: `br_*` conditional branches by predicate class, `mem_*` guarded memory accesses by
predicate class, `data_addr` memory accesses whose address registers carry the data bit.
The analysis is a may-analysis: a register that holds data on *some* path into a block is data
there, and a write under a guard keeps the old bits, so it over-reports. What it flags needs a
look; what it does not flag is clean.
"""),
    code('''
for name, r in sass_report["kernels"].items():
    flagged = r["data_branches"] + r["data_guarded_memory"][:3]
    if flagged:
        print(f"{name}:")
        for item in flagged:
            print(f"    [{item['index']:5d}] {item['text']}")
'''),
    code('''
k = sass_report["kernels"]
shipped = {n: r for n, r in k.items() if r["role"] == "shipped"}
controls = {n: r for n, r in k.items() if r["role"] == "leaky control"}
print("every leaky control has a data-dependent branch:", all(r["branches"]["data"] > 0 for r in controls.values()))
print("shipped forward kernels (bf16/fp16, sliding window, fp8): no data-dependent branch:",
      all(r["branches"]["data"] == 0 for n, r in shipped.items() if "forward" in n))
print("decode split-KV: its conditional branches depend on the cache lengths (public metadata), not on data:",
      shipped["decode split-KV"]["branches"]["data"] == 0 and shipped["decode split-KV"]["branches"]["metadata"] > 0)
print("shipped forward kernels use warpgroup tensor-core instructions (HGMMA; QGMMA for fp8):",
      all(("QGMMA" if n.startswith("fp8") else "HGMMA") in r["opcode_histogram"] for n, r in shipped.items() if "forward" in n))
''', check=True),
    code('''
name = "forward D128 causal (TMA)"
text = sass_report["kernels"][name]["sass"]
fig = report.plot_cfg(*sass.cfg_edges(text), title=f"{name}: basic blocks and branches (sm_90)")
save_figure(fig, "06_cfg_forward_causal")
name = "control: early exit on NaN"
fig = report.plot_cfg(*sass.cfg_edges(sass_report["kernels"][name]["sass"]), title=f"{name} (sm_90)")
save_figure(fig, "06_cfg_control_nan_exit")
'''),
    code('''
# An excerpt: the main loop's mbarrier wait (sync) and a data-dependent branch of the NaN control.
lines = sass_report["kernels"]["forward D128 causal (TMA)"]["sass"].splitlines()
waits = [i for i, l in enumerate(lines) if "TRYWAIT" in l][:1]
for i in waits:
    print("\\n".join(lines[i - 2:i + 4]))
print("...")
ctrl = sass_report["kernels"]["control: early exit on NaN"]
print(ctrl["data_branches"][0]["text"], "  <- predicate derived from loaded q values")
'''),
    md(r"""
## The clock: dudect on the H100

Two classes of identical shape per test: random N(0,1) inputs and one fixed special class
(all-equal, huge magnitudes, subnormals, NaN/Inf, sparse), ≥ 10,000 launches each, randomly
interleaved, each timed with CUDA events; both classes cycle through the same number of
buffers. |t| > 4.5 is dudect's threshold. A plain cuBLAS bf16 matmul, which has no
value-dependent control flow at all, is measured the same way as a hardware reference.
"""),
    code('''
if PROFILE == "gpu" and MEASURE_TIMING:
    from flashcore.studies import timing_leak
    rows = timing_leak.run_suite(TIMING_N)
    write_result("timing_leak", {"method": timing_leak.__doc__.strip(), "threshold": timing_leak.THRESHOLD,
                                 "n_per_class": TIMING_N, "rows": rows},
                 command="notebooks/06_sass_constant_time.ipynb (PROFILE=gpu, MEASURE_TIMING=True)")
leak = read_result("timing_leak", None if (PROFILE == "gpu" and MEASURE_TIMING) else RECORDED_GPU)
print("recorded on", describe(leak))
print(table(report.leak_table(leak), ["kernel", "class", "max_abs_t", "random_us", "fixed_us", "diff_pct"],
            {"max_abs_t": "{:.1f}", "random_us": "{:.2f}", "fixed_us": "{:.2f}", "diff_pct": "{:+.2f}"}))
fig = report.plot_leak(leak)
save_figure(fig, "06_timing_test")
'''),
    code('''
lt = report.leak_table(leak)
def worst(kernel_prefix, cls=None):
    return max(r["max_abs_t"] for r in lt if r["kernel"].startswith(kernel_prefix) and (cls is None or r["class"] == cls))
def shift(kernel_prefix, cls):
    return next(r["diff_pct"] for r in lt if r["kernel"].startswith(kernel_prefix) and r["class"] == cls)
print("NaN-exit control flagged on NaN inputs (|t| > 4.5):", worst("control: early exit on NaN", "nan_inf") > 4.5)
print("skip-rescale control flagged on all-equal inputs (|t| > 4.5):", worst("control: skip rescale", "all_equal") > 4.5)
print("NaN-exit control: time shift on NaN inputs larger than 10%:", abs(shift("control: early exit on NaN", "nan_inf")) > 10)
print("cuBLAS matmul (no branches) has value-dependent time (|t| > 4.5):", worst("hardware reference") > 4.5)
print("shipped forward kernels: value-dependent time measured (|t| > 4.5):", worst("forward") > 4.5)
print("shipped forward kernels: every fixed-vs-random median shift under 5%:",
      all(abs(r["diff_pct"]) < 5 for r in lt if r["kernel"].startswith("forward")))
print("decode split-KV (memory-bound): every median shift under 0.5%:",
      all(abs(r["diff_pct"]) < 0.5 for r in lt if r["kernel"].startswith("decode")))
''', check=True),
    md(r"""
## Verdict

*Code:* no branch and no guarded memory access in the shipped forward kernels (including the
sliding-window and fp8 variants) depends on values; their data-dependent work is straight-line (selects, `MUFU.EX2`, tensor-core MMAs).
The decode kernel's branches depend on the cache lengths, which it reads from memory but which
are public shapes. The analysis flags both positive controls, so it can fail. Some guarded
memory accesses are still flagged by the conservative analysis (see the `mem_data` column);
they are listed above rather than argued away. The SASS depends on the compiler: run on
the H100 machine with triton 3.6.0 (GPU profile), the same analysis flags one data-dependent
branch in each TMA forward kernel and one in the decode kernel, which triton 3.9 does not
emit. Those have not been traced yet; the analysis over-approximates, so they may be register
reuse across paths rather than real value-dependent control flow. The code-level verdict above
holds for the triton version printed at the top of this run, not for every compiler.

*Clock:* the answer is **not** "constant time". The tensor-core kernels, flashcore's forward
kernel and a plain cuBLAS matmul alike, run measurably faster (about 1–3%) on all-equal,
subnormal or sparse inputs than on random ones, with |t| far above the threshold. No
instruction in their SASS explains it, and the memory-bound decode kernel shows at most a
marginal effect (|t| near the threshold, shifts under 0.5%), so the likely cause is the chip: a tensor core toggling fewer bits draws less power
and holds its clock. That is a hypothesis, not a measurement of power. The controls' code-level
leaks are of a different size: skipping all keys on a NaN changes the time by tens of percent.

So the prior reports' "constant-time" claim fails on the first measurement that could test
it, and the failure is not in anybody's code. A timing-sensitive deployment has to treat
attention latency on this hardware as weakly value-dependent.
"""),
]


# ----------------------------------------------------------------------------- 04
FP8 = [
    md(r"""
# 04 · FP8 attention: the negative result, measured, and what fixes it

A prior report (seed 001) cast Q, K, V to FP8 (e4m3) with no scaling, measured a 29% maximum
error, blamed the missing scale factors, and cancelled FP8 as "3–6 months" of work.
FlashAttention-3 reports FP8 at ~1 PFLOP/s on an H100 with RMSE 9.1e-3 against 2.4e-2 for a
per-tensor baseline on outlier inputs, and credits incoherent processing (a random Hadamard
rotation of Q and K) for the difference.

This notebook measures all of it on the same inputs, with one kernel
(`flashcore/kernels/fp8.py`) and four quantization recipes:

| recipe | Q, K | V | P (softmax probabilities) |
|---|---|---|---|
| `naive` | cast as is | cast as is | cast as is |
| `per_tensor` | one scale each (amax/448) | one scale | × 256 |
| `per_block` | one scale per 128 rows (per batch, head) | one scale per channel | × 256 |
| `per_block_hadamard` | rotate by $R = H\,\mathrm{diag}(\pm 1)/\sqrt{D}$, then per block | per channel | × 256 |

Errors are measured against float64 attention of the original inputs. The CPU profile runs
the error analysis live at small sizes under the Triton interpreter and renders the recorded
H100 study (`results/<gpu>/fp8.json`: larger sizes, more seeds, speed). The GPU profile runs
both live.
"""),
    code('''
PROFILE = "auto"          # "gpu": errors and speed live, recorded; "cpu": errors live, speed from the record
RECORD_TOPIC = "fp8"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
LIVE_SEQLEN = 256         # live error study: (1, LIVE_HEADS, S, 128) per distribution
LIVE_HEADS = 2
LIVE_SEEDS = 3
MEASURE_SPEED = True      # GPU profile only
''', params=True),
    code(SETUP + '''
import math
import matplotlib.pyplot as plt
from flashcore.studies import fp8_study as F
from flashcore.kernels.fp8 import quantize, random_hadamard, VARIANTS
from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
'''),
    md(r"""
## 1. The e4m3 format and its rounding error

e4m3 has 1 sign bit, 4 exponent bits (bias 7) and 3 mantissa bits; the `fn` variant has no
infinities and one NaN pattern, so its largest finite value is 448. Below every one of its
256 bit patterns is decoded, and values spread over its range are rounded to it.
"""),
    code('''
codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
finite = codes[torch.isfinite(codes)]
positive = finite[finite > 0].unique()
normals = positive[positive >= 2.0**-6]
print(f"distinct finite values: {finite.unique().numel()}, NaN patterns: {int(torch.isnan(codes).sum())}")
print(f"largest {positive.max().item():g}, smallest normal {normals.min().item():g} (2^-6), "
      f"smallest subnormal {positive.min().item():g} (2^-9)")
x = torch.logspace(-12, math.log2(440), 200_000, base=2, dtype=torch.float64)
rel = ((F.e4m3_round_trip(x) - x).abs() / x)
step = normals[1:] / normals[:-1] - 1
print(f"max relative rounding error of values in the normal range: {rel[x >= 2**-6].max().item():.4f} (2^-4 = {2**-4:.4f})")
print(f"largest relative gap between neighbouring normal values: {step.max().item():.4f} (2^-3)")
''', check=True),
    code('''
fig, ax = plt.subplots(figsize=(7, 3))
ax.loglog(x, rel.clamp_min(1e-6), lw=0.5)
ax.axhline(2**-4, color="k", ls="--", lw=0.8, label="2^-4: half a mantissa step")
ax.axvline(2**-6, color="r", ls=":", lw=0.8, label="2^-6: subnormals below")
ax.set(xlabel="|x|", ylabel="relative error of round(x)", title="e4m3 rounding error (round to nearest even)")
ax.legend(loc="lower left")
save_figure(fig, "04_e4m3_rounding")
'''),
    md(r"""
Two facts carry the rest of the notebook. Inside the normal range the relative error is at
most $2^{-4} = 6.25\%$ **whatever the scale**: a scale factor only decides which values fall
outside $[2^{-6}, 448]$, where values saturate or lose relative precision. And the
prior report's "12.3% round-trip error" on N(0,1) data matches an absolute error: values in
$[2, 4)$ are spaced 0.25 apart, so rounding moves them by up to 0.125 (a sample large enough
to reach $[4, 8)$, spaced 0.5, shows up to 0.25).
"""),
    code('''
g = torch.Generator().manual_seed(0)
z = torch.randn(1_000_000, generator=g, dtype=torch.float64)
err = (F.e4m3_round_trip(z) - z).abs()
print(f"N(0,1), 10^6 samples, unscaled round trip: max abs error {err.max().item():.3f} "
      f"(at |x| = {z.abs()[err.argmax()].item():.2f}), RMS {err.pow(2).mean().sqrt().item():.4f}")
'''),
    md(r"""
## 2. Incoherent processing in one picture

$R = H\,\mathrm{diag}(s)/\sqrt{D}$ (Sylvester Hadamard $H$, random signs $s$) is orthogonal,
so $(QR)(KR)^\top = QK^\top$ exactly. What it changes is how the entries are spread: a vector
with one large channel becomes a vector whose every entry is $\pm$ that value $/\sqrt{D}$.
The per-block scale is set by the block's largest entry, and the error of a dot product
$\sum_d q_d k_d$ in a format with relative rounding grows with $\lVert q \circ k \rVert_2$; the
rotation flattens exactly the large terms that dominate both.
"""),
    code('''
q = torch.randn(4, 128, generator=g)
q[:, 7] += 40.0                        # one "massive" channel shared by every token
rot = random_hadamard(128, seed=0)
print(f"before rotation: max |q| = {q.abs().max():.1f}, RMS = {q.pow(2).mean().sqrt():.2f}")
print(f"after rotation:  max |q| = {(q @ rot).abs().max():.1f}, RMS = {(q @ rot).pow(2).mean().sqrt():.2f}")
print("q q^T unchanged by the rotation (float64):",
      torch.allclose((q.double() @ rot.double()) @ (q.double() @ rot.double()).T, q.double() @ q.double().T, atol=1e-8))
''', check=False),
    md(r"""
## 3. Error against float64, per recipe and input distribution (live)

Three input distributions: `normal` N(0,1); `outlier`, FlashAttention-3's
N(0,1) + N(0,100)·Bernoulli(0.001); and `massive_channels`, real-looking activations with two
large channels shared by every token of q and k and v channel magnitudes spread over 100×
(`fp8_study.make_qkv`). The fp16 row is flashcore's fp16 kernel on the same inputs.

Each fp8 run is also checked against **its own** float64 reference: attention of the
dequantized inputs the kernel actually receives. The only rounding the kernel may add is p's
cast to e4m3, whose worst case is computed per element (`own_reference_bound`); a wrong block
scale or a dropped tile breaks it (`tests/test_fp8.py` plants one). Under the interpreter the
p cast is emulated in fp32 arithmetic (the interpreter's own fp32→fp8 cast truncates; the GPU
converts in hardware).
"""),
    code('''
from tqdm.auto import tqdm
live_rows = []
for dist in tqdm(F.DISTRIBUTIONS, desc="live error study"):
    for causal in (False, True):
        live_rows += F.error_rows(dist, heads=LIVE_HEADS, seqlen=LIVE_SEQLEN, head_dim=128, causal=causal,
                                  seeds=tuple(range(LIVE_SEEDS)), device=DEVICE)
live = F.summarize(live_rows)
print(f"live: B=1 H={LIVE_HEADS} S={LIVE_SEQLEN} D=128, {LIVE_SEEDS} seeds, on {DEVICE}")
print(table(live, ["dist", "causal", "impl", "rmse_median", "rmse_min", "rmse_max", "max_err", "own_bound_ratio"],
            {k: "{:.2e}" for k in ("rmse_median", "rmse_min", "rmse_max", "max_err")} | {"own_bound_ratio": "{:.2f}"}))
'''),
    code('''
fp8_live = [r for r in live_rows if r["impl"].startswith("fp8")]
print(f"every live fp8 run ({len(fp8_live)}) within its own-reference p-rounding bound:",
      all(r["own_bound_ratio"] <= 1 for r in fp8_live))
print("every live fp8 run is finite (no NaN):", all(r["nan"] == 0 for r in fp8_live))
def median_rmse(dist, impl):
    return sorted(r["rmse"] for r in live_rows if r["dist"] == dist and r["impl"] == impl)[LIVE_SEEDS]  # median of 2 x seeds
for dist in ("outlier", "massive_channels"):
    best = min(VARIANTS, key=lambda v: median_rmse(dist, f"fp8_{v}"))
    print(f"{dist}: lowest median RMSE of the four recipes (live):", best)
''', check=True),
    md(r"""
## 4. The recorded H100 study

Same code at B=1, H=8, D=128, S ∈ {1024, 4096}, five seeds per point, bf16 and fp16
baselines (`python -m flashcore fp8 --record`).
"""),
    code('''
if PROFILE == "gpu":
    from flashcore.studies import bench
    payload = {"variants": list(VARIANTS), "p_scale": F.P_SCALE, "errors": []}
    for dist in F.DISTRIBUTIONS:
        for causal in (False, True):
            for s in (1024, 4096):
                payload["errors"] += F.error_rows(dist, heads=8, seqlen=s, causal=causal, seeds=tuple(range(5)),
                                                  baselines=("bfloat16", "float16"), device="cuda")
    payload["error_summary"] = F.summarize(payload["errors"])
    if MEASURE_SPEED:
        payload["tuning"] = [t for c in (False, True) for t in F.tune_fp8(dict(B=2, H=16, S=8192, D=128, causal=c), F.FP8_TUNING_CONFIGS)]
        payload["speed"] = F.bench_fp8(F.fp8_shapes())
    write_result(RECORD_TOPIC, payload, command=f"notebooks/04_fp8.ipynb (PROFILE=gpu, RECORD_TOPIC={RECORD_TOPIC})")
record = read_result(RECORD_TOPIC, None if PROFILE == "gpu" else RECORDED_GPU)
print("recorded on", describe(record))
summary = record["error_summary"]
show = [r for r in summary if r["S"] == 4096]
print(table(show, ["dist", "causal", "impl", "rmse_median", "rmse_min", "rmse_max", "max_err", "own_bound_ratio"],
            {k: "{:.2e}" for k in ("rmse_median", "rmse_min", "rmse_max", "max_err")} | {"own_bound_ratio": "{:.2f}"}))
'''),
    code('''
impls = ["bfloat16", "fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard"]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=False)
for ax, dist in zip(axes, F.DISTRIBUTIONS):
    for j, causal in enumerate((False, True)):
        pts = [F.summary_lookup(summary, dist, causal, 4096, i) for i in impls]
        xs = [k + 0.2 * (j - 0.5) for k in range(len(impls))]
        med = [p["rmse_median"] for p in pts]
        lo = [p["rmse_median"] - p["rmse_min"] for p in pts]
        hi = [p["rmse_max"] - p["rmse_median"] for p in pts]
        ax.errorbar(xs, med, yerr=[lo, hi], fmt="o", ms=4, capsize=2, label="causal" if causal else "non-causal")
    ax.axhline(9.1e-3, color="k", ls="--", lw=0.8, label="FA3 fp8: 9.1e-3")
    ax.set_yscale("log")
    ax.set_xticks(range(len(impls)), [i.replace("fp8_", "").replace("_hadamard", "+H") for i in impls], rotation=30)
    ax.set_title(f"{dist} (S=4096, 5 seeds)")
axes[0].set_ylabel("RMSE vs float64 (median, min-max)")
axes[0].legend(fontsize=8)
save_figure(fig, "04_rmse_by_recipe")
'''),
    md(r"""
## 5. The prior report's 29%, side by side

The report gives no shape; it says the inputs were cast with no scale and that the max
error was 0.294 (and the e4m3 round trip 12.3%, matched in section 1). Our `naive` recipe is
that experiment. Its maximum error on N(0,1) inputs:
"""),
    code('''
rows = [F.summary_lookup(summary, "normal", c, s, i) for c in (False, True) for s in (1024, 4096)
        for i in ("fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard")]
print(table(rows, ["causal", "S", "impl", "rmse_median", "max_err"], {"rmse_median": "{:.2e}", "max_err": "{:.3f}"}))
naive = [r for r in rows if r["impl"] == "fp8_naive"]
for c in (False, True):
    for s in (1024, 4096):
        group = [r["rmse_median"] for r in rows if r["causal"] == c and r["S"] == s]
        print(f"causal={c!s:5} S={s}: RMSE of the four recipes within {100 * (max(group) / min(group) - 1):.1f}% of each other")
'''),
    code('''
worst_naive = max(r["max_err"] for r in naive)
print(f"naive fp8, N(0,1): worst max error {worst_naive:.3f} (prior report: 0.294); same order: {0.1 < worst_naive < 1.0}")
print("on N(0,1), scaling changes the RMSE by < 5% at every recorded shape:",
      all(max(g) / min(g) < 1.05 for g in ([r["rmse_median"] for r in rows if r["causal"] == c and r["S"] == s]
                                           for c in (False, True) for s in (1024, 4096))))
''', check=True),
    md(r"""
**Verdict on the prior report.** The size of the error is reproduced: a maximum error of a few
tenths on N(0,1) inputs, reached in the causal case, where the first queries see one or two
keys and their output is essentially one row of V, rounded. The diagnosis is **refuted**.
On these inputs the missing scale factors are not the cause: every recipe, scaled or not,
has the same RMSE within a few percent, because a scale cannot add mantissa bits. The error is
the 3-bit mantissa of e4m3 (relative rounding up to 6.25%), and most of it is p's
rounding, not the inputs' (`rmse_inputs_only` in the record). Scales matter where the range
matters, on outlier and massive-channel inputs (sections 4 and 6). The whole "scaling
infrastructure" is `quantize` in `flashcore/kernels/fp8.py`.
"""),
    md(r"""
## 6. Speed, and the error/speed trade-off

All four recipes run the same kernel. `naive` differs only in the p scale constant, and the
three scaled recipes are identical at run time, so speed is measured for `naive` and
`per_block`. The kernel takes pre-quantized inputs, as it would from an fp8 model. The cost of
`quantize` from bf16 (plain PyTorch, unfused) is listed separately. The bf16 kernel and SDPA's
backends run on the same shapes in the same process (B·S = 16K, H = 16, D = 128).
"""),
    code('''
speed = F.speed_table(record["speed"])
print(table(speed, ["causal", "S", "B", "H", "flashcore", "sdpa_flash", "sdpa_cudnn", "fp8_naive", "fp8_per_block",
                    "x_bf16", "x_cudnn", "quantize_ms_per_block", "attn_ms_per_block"],
            {k: "{:.0f}" for k in ("flashcore", "sdpa_flash", "sdpa_cudnn", "fp8_naive", "fp8_per_block")}
            | {"x_bf16": "{:.2f}", "x_cudnn": "{:.2f}", "quantize_ms_per_block": "{:.3f}", "attn_ms_per_block": "{:.3f}"}))
print("(TFLOP/s; x_bf16 = fp8 per_block / flashcore bf16; x_cudnn = fp8 per_block / SDPA cuDNN bf16)")
tuned = record.get("tuned_config")
print("fp8 launch config from the sweep in the record:", tuned)
def cfg_name(c):
    return f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}" + (" ws" if c.get("WARP_SPECIALIZE") else "")
print(table([{"config": cfg_name(t["config"]), "causal": t["causal"],
              "TFLOP/s": f"{t['tflops']:.0f}" if "tflops" in t else t["error"][:50]} for t in record.get("tuning", [])],
            ["config", "causal", "TFLOP/s"]))
print("(launch-config sweep at B=2, H=16, S=8192, D=128; ws = Triton warp specialization)")
'''),
    code('''
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for causal, ax in zip((False, True), axes):
    lines = [l for l in speed if l["causal"] == causal]
    for impl, style in (("fp8_per_block", "o-"), ("fp8_naive", "x:"), ("flashcore", "s-"), ("sdpa_cudnn", "^--"), ("sdpa_flash", "v--")):
        ax.plot([l["S"] for l in lines], [l[impl] for l in lines], style, label=impl)
    ax.set(xscale="log", xlabel="S", ylabel="TFLOP/s", title=f"D=128, {'causal' if causal else 'non-causal'}")
axes[0].legend(fontsize=8)
save_figure(fig, "04_fp8_speed")
'''),
    code('''
from flashcore.studies.bench import geomean
long = [l for l in speed if l["S"] >= 4096]
fp8_tflops = geomean([l["fp8_per_block"] for l in long])
bf16_tflops = geomean([l["flashcore"] for l in long])
e2e_tflops = geomean([l["fp8_per_block"] * l["attn_ms_per_block"] / (l["attn_ms_per_block"] + l["quantize_ms_per_block"]) for l in long])
fig, ax = plt.subplots(figsize=(6, 3.6))
for dist, marker in (("outlier", "o"), ("massive_channels", "s")):
    for impl in ("fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard"):
        r = F.summary_lookup(summary, dist, False, 4096, impl)
        ax.scatter(fp8_tflops, r["rmse_median"], marker=marker, label=f"{dist}: {impl[4:]}")
    b = F.summary_lookup(summary, dist, False, 4096, "bfloat16")
    ax.scatter(bf16_tflops, b["rmse_median"], marker=marker, color="k")
    h = F.summary_lookup(summary, dist, False, 4096, "fp8_per_block_hadamard")
    ax.scatter(e2e_tflops, h["rmse_median"], marker=marker, facecolors="none", edgecolors="gray")
ax.axhline(9.1e-3, color="k", ls="--", lw=0.8)
ax.set(yscale="log", xlabel="TFLOP/s (geomean, D=128, S>=4096; hollow: incl. quantize)", ylabel="RMSE (S=4096, non-causal)",
       title="error vs speed (black: bf16 kernel)")
ax.legend(fontsize=6, ncol=2)
save_figure(fig, "04_error_vs_speed")
print(f"geomean TFLOP/s at S>=4096: fp8 {fp8_tflops:.0f}, bf16 {bf16_tflops:.0f}, fp8 incl. unfused quantize {e2e_tflops:.0f}")
q_over_attn = [l["quantize_ms_per_block"] / l["attn_ms_per_block"] for l in speed]
print(f"unfused quantize from bf16 / fp8 attention time: {min(q_over_attn):.2f}-{max(q_over_attn):.2f}")
'''),
    md(r"""
## 7. The targets

On the H100 at D=128, S ≥ 4096: recipe 4 (per-block + Hadamard) at ≥ 1.5× flashcore's bf16
throughput, with RMSE on the outlier inputs ≤ 9.1e-3 (FlashAttention-3's figure) and ≥ 2.5×
below the per-tensor recipe.
"""),
    code('''
ratios = [l["x_bf16"] for l in long]
print(f"fp8 / bf16 throughput at D=128, S>=4096: per shape {min(ratios):.2f}-{max(ratios):.2f}, geomean {geomean(ratios):.2f}")
try:  # the same measurement in another process: how much of the spread is run-to-run noise
    other = read_result("fp8_notebook_check", RECORDED_GPU)
    o = [l["x_bf16"] for l in F.speed_table(other["speed"]) if l["S"] >= 4096]
    print(f"  repeat run ({describe(other)}): {min(o):.2f}-{max(o):.2f}, geomean {geomean(o):.2f}")
except FileNotFoundError:
    pass
print("target: >= 1.5x bf16 at every shape:", all(r >= 1.5 for r in ratios))
for causal in (False, True):
    h = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_block_hadamard")
    t = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_tensor")
    print(f"outlier inputs, S=4096, causal={causal!s:5}: RMSE per-block+Hadamard {h['rmse_median']:.2e} "
          f"(worst seed {h['rmse_max']:.2e}), per-tensor {t['rmse_median']:.2e}, ratio {t['rmse_median'] / h['rmse_median']:.2f}")
    print(f"   target RMSE <= 9.1e-3 (every seed): {h['rmse_max'] <= 9.1e-3};  target >= 2.5x below per-tensor: "
          f"{t['rmse_median'] / h['rmse_median'] >= 2.5}")
''', check=True),
    md(r"""
## Conclusion

(Numbers are from the recorded H100 run above.)

* **The prior report's number is real; its diagnosis is not.** Unscaled e4m3 attention does
  have maximum errors of a few tenths on N(0,1) inputs. Scaling does not change that: on these
  inputs all four recipes agree within a few percent. The cause is e4m3's 3-bit mantissa,
  mostly through p. FP8 was never blocked on "scaling infrastructure".
* **Where scaling and rotation matter is outliers.** On FlashAttention-3's outlier inputs
  per-block scaling helps a little. The Hadamard rotation roughly halves the RMSE (median
  8.4e-3 against per-tensor 1.9e-2 at S=4096, non-causal) and meets FA3's 9.1e-3 in
  every seed. It does not reach FA3's 2.6× gap to per-tensor: the measured ratio is 2.3×
  non-causal and 1.9× causal, so the 2.5× target is missed. On massive-channel activations
  the rotation buys about 3.5×.
* **Speed.** One fp8 kernel in Triton reaches 1.36–1.50× flashcore's bf16 throughput at
  S ≥ 4096 (geomean 1.44; ≈ 710 TFLOP/s, 1.1–1.3× cuDNN's bf16 there). No shape reaches 1.5×
  (the best is 1.497, causal S = 16K), and a repeat run spreads the ratios over 1.31–1.58 with
  the same geomean, so the target is missed; the trade-off curve above is the honest statement.
  Triton's warp specialization did not help (the `ws` rows of the sweep). FlashAttention-3's
  ~1 PFLOP/s needs what the bf16 kernel also lacks (warpgroup ping-pong, softmax/GEMM overlap),
  plus in-register fp8 layout shuffles for p. An unfused `quantize` from bf16 costs a large
  fraction of the attention time, and more than all of it at short S (ratio printed above), so
  fp8 pays only when the producer already emits fp8.
* Every fp8 output stayed within the worst-case bound of its own float64 reference (the
  p-rounding bound), live and in the record, so the errors above belong to the format, not
  to kernel bugs.
"""),
]

# ----------------------------------------------------------------------------- 05
LONG = [
    md(r'''
# 05 · Long context: the quadratic truth, measured to a million tokens

A prior report (seed 001) called its kernel "long-context", measured S=4K 337 µs, S=16K
11.7 ms and a compile failure at S=32K, and cancelled the work as needing "12+ months of
sparse/linear attention". The honest story has two halves. Exact attention costs
$4\,S^2 D$ FLOPs per head (half that causal), and no kernel changes that. What a good kernel does
is keep its *efficiency* flat as S grows, keep its memory linear, and not fall over at 32K
or at $2^{31}$ elements.

The measurements are bf16, D=128, B=1, H=8 (so the 1M-token point fits in seconds), from S=1K
to 1M, with SDPA's flash, cuDNN and math backends in the same process
(`python -m flashcore long --record`, `results/<gpu>/long_context.json`). The CPU profile
renders that record; the correctness parts run live.
'''),
    code('''
PROFILE = "auto"          # "gpu": measure live and record; "cpu": render the record
RECORD_TOPIC = "long_context"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
MEASURE_SEQLENS = [2**i for i in range(10, 21)]   # GPU profile: narrow with papermill -y
MEASURE_HEADS = 8
''', params=True),
    code(SETUP + '''
import math
import numpy as np
import matplotlib.pyplot as plt
from flashcore.studies import long_context as L
from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
'''),
    code('''
if PROFILE == "gpu":
    from flashcore.validate import check_large_offsets, correctness_grid, run_grid, summarize
    from flashcore.studies.bench import bench_attention_shape
    payload = {"sweep": L.bench_long_context(MEASURE_SEQLENS, heads=MEASURE_HEADS, windows=(4096,)),
               "sweep_shape": dict(B=1, H=MEASURE_HEADS, D=128, dtype="bfloat16")}
    payload["large_offsets"] = check_large_offsets("cuda", seqlen=2**20)
    payload["int32_demo"] = L.int32_offset_demo()
    rows = run_grid(correctness_grid("window"), "cuda", progress=False)
    payload["window_correctness"] = {"summary": summarize(rows), "cases": rows}
    payload["decode"] = [r for sh in L.long_decode_shapes()
                         for r in bench_attention_shape(sh, ["flashcore_decode", "sdpa_flash", "sdpa_cudnn"], reps=50, graph=True)]
    payload["whole_sequence_tile"] = {"32768": L.whole_sequence_tile_compile(32768)}
    write_result(RECORD_TOPIC, payload, command=f"notebooks/05_long_context.ipynb (PROFILE=gpu, RECORD_TOPIC={RECORD_TOPIC})")
record = read_result(RECORD_TOPIC, None if PROFILE == "gpu" else RECORDED_GPU)
sweep = record["sweep"]
print("recorded on", describe(record))
print("shape:", record["sweep_shape"])
'''),
    md(r'''
## 1. The quadratic law, and where the time goes

Time against S on log-log axes: a slope of 2 is the quadratic law. The fit uses S ≥ 8K, where
the launch and the ramp-up of the grid no longer matter. Each implementation's failures
(out of memory) and points skipped because the previous one took seconds are listed in
the table below.
'''),
    code('''
IMPLS = ["flashcore", "sdpa_flash", "sdpa_cudnn", "sdpa_math"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
for causal, ax in zip((False, True), axes):
    for impl in IMPLS:
        pts = [(r["S"], r["timing"]["median_ms"]) for r in sweep if r["impl"] == impl and r["causal"] == causal and "timing" in r]
        slope = L.loglog_slope(sweep, impl, causal)
        ax.plot(*zip(*pts), "o-", ms=3, label=f"{impl} (slope {slope:.2f})" if slope else impl)
    s_ref = np.array([8192, 2**20])
    ax.plot(s_ref, 0.3 * (s_ref / 8192) ** 2, "k:", lw=0.8, label="S^2")
    ax.set(xscale="log", yscale="log", xlabel="S (tokens)", title=f"{'causal' if causal else 'non-causal'}, B=1 H=8 D=128 bf16")
axes[0].set_ylabel("time per call (ms, median)")
axes[0].legend(fontsize=8)
save_figure(fig, "05_time_vs_seqlen")
for causal in (False, True):
    print(f"causal={causal}")
    print(table(L.sweep_table(sweep, causal, IMPLS), ["S"] + IMPLS))
print("(median ms / TFLOP/s)")
'''),
    code('''
fig, ax = plt.subplots(figsize=(7, 3.4))
for impl in IMPLS[:3]:
    for causal, style in ((False, "o-"), (True, "s--")):
        pts = [(r["S"], r["tflops"]) for r in sweep if r["impl"] == impl and r["causal"] == causal and "tflops" in r]
        ax.plot(*zip(*pts), style, ms=3, label=f"{impl}{' causal' if causal else ''}")
ax.set(xscale="log", xlabel="S (tokens)", ylabel="TFLOP/s", title="efficiency vs S (flat is the goal)")
ax.legend(fontsize=7, ncol=2)
save_figure(fig, "05_tflops_vs_seqlen")
'''),
    md(r'''
Every exact implementation has slope ≈ 2: the time *is* the FLOPs. What separates them
is the constant, and that the good ones keep it from 8K to 1M. The left end of the curves is
flat for another reason. At S ≤ 4K a call is shorter than the Python launch path (notebook 03
measures 75–128 µs of host time per flashcore call and 30–62 µs per SDPA call), and these are
back-to-back eager calls, so the times there are launch overhead, not kernel time. That is
the regime of notebook 03, not of this one. flashcore's non-causal 1M point was skipped: at
≈ 10 s per call it exceeds the few seconds per point this sweep allows.

## 2. The targets
'''),
    code('''
for causal in (False, True):
    at8k, at128k = L.tflops_at(sweep, "flashcore", causal, 8192), L.tflops_at(sweep, "flashcore", causal, 131072)
    print(f"causal={causal!s:5}: flashcore {at8k:.0f} TFLOP/s at S=8K, {at128k:.0f} at S=128K ({100 * (at128k / at8k - 1):+.1f}%); "
          f"within 5% or better: {at128k >= 0.95 * at8k}")
fc = [r for r in sweep if r["impl"] == "flashcore" and "extra_bytes" in r]
print(f"flashcore memory beyond inputs and output, S=1K..{max(r['S'] for r in fc)}: "
      f"{sorted({r['extra_bytes'] for r in fc})} bytes")
print("flashcore extra memory constant in S:", len({r["extra_bytes"] for r in fc}) == 1)
slopes = [L.loglog_slope(sweep, "flashcore", c) for c in (False, True)]
print(f"flashcore log-log slope of time vs S (S >= 8K): non-causal {slopes[0]:.3f}, causal {slopes[1]:.3f}")
print("flashcore time is quadratic in S (slope within 0.1 of 2):", all(abs(s - 2) < 0.1 for s in slopes))
longest = max(r["S"] for r in fc)
print(f"longest sequence measured: {longest} tokens ({longest // 2**20}M)" if longest >= 2**20 else f"longest: {longest}")
''', check=True),
    md(r'''
## 3. The prior report's table, side by side

The report names no batch, heads or head dim, so its numbers cannot be matched shape for
shape. Our S ≤ 4K times are launch-bound (section 1): they say nothing about the kernel. What can be compared is the *growth*. From 4K to 16K its time grew 34.8× for 4× the
tokens, more than quadratic, which is the signature of a kernel whose per-row work stops
fitting on chip. Ours grows by about the FLOP ratio, 16×.
'''),
    code('''
rows = []
for seqlen, prior_us in L.PRIOR_REPORT_US.items():
    line = {"S": seqlen, "prior_us": "compile failure" if prior_us is None else f"{prior_us:.1f}"}
    for causal in (False, True):
        r = next((r for r in sweep if r["S"] == seqlen and r["impl"] == "flashcore" and r["causal"] == causal and "timing" in r), None)
        line["flashcore_causal" if causal else "flashcore"] = f"{1e3 * r['timing']['median_ms']:.1f}" if r else "not measured"
    rows.append(line)
print(table(rows, ["S", "prior_us", "flashcore", "flashcore_causal"]))
print("(µs per call; flashcore at B=1 H=8 D=128 bf16 on the recorded GPU)")
fc_nc = {r["S"]: r["timing"]["median_ms"] for r in sweep if r["impl"] == "flashcore" and not r["causal"] and "timing" in r}
if 4096 in fc_nc and 16384 in fc_nc:
    print(f"growth 4K -> 16K: prior report {11746.0 / 337.1:.1f}x, flashcore {fc_nc[16384] / fc_nc[4096]:.1f}x (FLOP ratio 16x)")
'''),
    md(r'''
## 4. What broke at 32K, and what breaks next

**The 32K compile failure.** Triton caps one tile at $2^{20}$ elements. A kernel that keeps a
row's whole key sequence in one tile (`long_context._whole_row_attention`: one program per
query, all S keys loaded at once) needs an S × D tile. At D=64 that is exactly $2^{20}$ at 16K,
which compiles (and spills: the 35× step above), and $2^{21}$ at 32K, which does not. This is
the most likely reading of the report's S=32K failure. A FlashAttention kernel's tile is
BLOCK_N × D whatever S is.
'''),
    code('''
for seqlen in (16384, 32768):
    ok, msg = L.tile_fits([seqlen, 64])
    print(f"one tile of S x D = {seqlen} x 64: {'fits' if ok else 'rejected: ' + msg}")
print("recorded: compiling _whole_row_attention at S=32K, D=64 for sm_90:", record["whole_sequence_tile"]["32768"])
''', check=True),
    md(r'''
**The next failure: int32 offsets.** A tensor of more than $2^{31}$ elements needs 64-bit
element offsets. A kernel that computes `row * stride` in int32 wraps around. Past $2^{32}$
the wrapped offset is again a valid address, so it *silently reads the wrong row*. The
record's demo (`long_context.int32_offset_demo`) reads rows of a 4.3-billion-element bf16
matrix through the same kernel with int32 and with int64 offsets. The arithmetic itself:
'''),
    code('''
row = torch.tensor([2**20 + 5], dtype=torch.int32)
print(f"row {row.item()} * stride 4096 in int32 = {(row * 4096).item()} (the offset of row 5); in int64 = {(row.long() * 4096).item()}")
demo = record["int32_demo"]
print(table([{"row": r, "offset": o, "expected": e, "int32 read": a, "int64 read": b}
             for r, o, e, a, b in zip(demo["rows"], demo["row_offsets"], demo["int32"]["expected"],
                                      demo["int32"]["values_read"], demo["int64"]["values_read"])],
            ["row", "offset", "expected", "int32 read", "int64 read"]))
print("(row r holds r mod 251; recorded on the GPU)")
print("int32 offsets return wrong rows past 2^32 elements:", not all(demo["int32"]["correct"]))
print("int64 offsets return every row correctly:", all(demo["int64"]["correct"]))
''', check=True),
    md(r'''
flashcore computes every offset in int64 (`.to(tl.int64)` before a stride multiply). The check
that matters is the kernel itself, on a buffer where the offsets pass $2^{31}$. Below, S = 1M
keys at D = 128, one head viewed out of a (1, S, 19, D) buffer. The last row starts at element
2.55·10⁹. 64 rows are checked against float64 under the error rule, the first four and
last four included.
'''),
    code('''
print(table(record["large_offsets"], ["name", "max_element_offset", "rows_checked", "max_abs_err", "bound", "ratio", "passed"],
            {"max_element_offset": "{:.3e}", "max_abs_err": "{:.2e}", "bound": "{:.2e}", "ratio": "{:.3f}"}))
print("offsets past 2^31 elements pass the error rule:",
      all(r["passed"] and r["max_element_offset"] > 2**31 for r in record["large_offsets"]))
''', check=True),
    md(r'''
## 5. Memory

Peak device memory a call allocates beyond its inputs and its output
(`torch.cuda.max_memory_allocated`, after `reset_peak_memory_stats`). The math backend
materialises the S × S scores and runs out of memory at S = 32K causal / 64K. SDPA's flash
backend allocates its log-sum-exp, linear in S. flashcore allocates nothing: it writes the
log-sum-exp only when asked.
'''),
    code('''
fig, ax = plt.subplots(figsize=(7, 3.4))
for impl, style in zip(IMPLS, ("o-", "s:", "^--", "v-")):
    pts = [(r["S"], r["extra_bytes"] / 2**20) for r in sweep if r["impl"] == impl and not r["causal"] and "extra_bytes" in r]
    ax.plot(*zip(*pts), style, ms=4, lw=2 if impl == "flashcore" else 1, label=impl)
ax.set(xscale="log", yscale="symlog", xlabel="S (tokens)", ylabel="extra MiB (symlog)", title="memory beyond inputs + output, non-causal")
ax.set_ylim(bottom=-0.1)
ax.legend(fontsize=8)
save_figure(fig, "05_memory")
for causal in (False, True):
    oom = sorted({r["S"] for r in sweep if r["impl"] == "sdpa_math" and r["causal"] == causal and L.status(r) == "out of memory"})
    print(f"math backend, causal={causal}: out of memory from S = {oom[0]}" if oom else "math never ran out")
'''),
    md(r'''
## 6. Sliding windows: what "long context" can honestly mean without changing the function

With `window=W` (causal) each query attends to its W most recent keys. That is still exact
softmax attention, of a different, banded mask, and its cost is $O(S \cdot W)$: linear in S.
The kernel skips every tile outside the band and masks only the tiles that cross its two
edges. Correctness first, live, against the masked float64 reference:
'''),
    code('''
from flashcore.validate import correctness_grid, run_grid, summarize
cases = correctness_grid("window" if PROFILE == "gpu" else "window-cpu")
live = summarize(run_grid(cases, DEVICE, progress=False))
print(f"live on {DEVICE}: {live['cases']} window cases, {live['failed']} failed, worst ratio {live['worst_ratio']:.3f}")
rec = record["window_correctness"]["summary"]
print(f"recorded on the GPU: {rec['cases']} cases (fp16/bf16, D 64-256, windows 1-5000), {rec['failed']} failed, worst ratio {rec['worst_ratio']:.3f}")
print("every sliding-window case passes the error rule (live and recorded):", live["failed"] == 0 and rec["failed"] == 0)
''', check=True),
    code('''
win = [r for r in sweep if r["impl"].startswith("flashcore_window") and "timing" in r]
full = [r for r in sweep if r["impl"] == "flashcore" and r["causal"] and "timing" in r]
fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot([r["S"] for r in full], [r["timing"]["median_ms"] for r in full], "o-", label="causal, full")
ax.plot([r["S"] for r in win], [r["timing"]["median_ms"] for r in win], "s-", label=win[0]["impl"].replace("flashcore_", "causal, "))
ax.set(xscale="log", yscale="log", xlabel="S (tokens)", ylabel="ms", title="sliding window: linear in S")
ax.legend()
save_figure(fig, "05_window")
# S >= 4 x window, where the band, not the causal triangle, sets the work
w_slope = L.loglog_slope(sweep, win[0]["impl"], True, min_seqlen=4 * win[0]["window"])
print(f"window {win[0]['window']}: log-log slope for S >= {4 * win[0]['window']} "
      + (f"{w_slope:.2f}" if w_slope is not None else "(fewer than 2 points)")
      + f"; {win[-1]['S']} tokens in {win[-1]['timing']['median_ms']:.1f} ms at {win[-1]['tflops']:.0f} TFLOP/s (of the window's FLOPs)")
print("sliding-window time is linear in S (slope within 0.15 of 1):", w_slope is not None and abs(w_slope - 1) < 0.15)
''', check=True),
    md(r'''
## 7. Decode with long caches

One new token against a cache of up to 16M tokens (B=1, GQA 32/8, D=128, bf16: 69 GB of K and
V, the largest power of two that fits next to the peers' workspace), CUDA-graph replay, so
the time is the GPU's alone. Decode is judged by bytes: K and V are read once,
$2 \cdot H_{kv} \cdot S_k \cdot D \cdot 2$ bytes. `diff` is the largest difference between
a peer's output and flashcore's on the same cache. From 2M tokens on, the K tensor alone has
at least $2^{31}$ elements.
'''),
    code('''
from flashcore.studies.bench import kv_bytes
lines = []
for n in sorted({r["Sk"] for r in record["decode"]}):
    line = {"cache_tokens": n, "GB": kv_bytes(next(r for r in record["decode"] if r["Sk"] == n)) / 1e9}
    for r in (r for r in record["decode"] if r["Sk"] == n):
        if "graph_timing" in r:
            line[r["impl"]] = f"{1e3 * r['graph_timing']['median_ms']:.0f} us / {kv_bytes(r) / r['graph_timing']['median_ms'] / 1e9:.2f} TB/s"
        else:
            line[r["impl"]] = r.get("error", "-")
        if "max_abs_diff_vs_first" in r:
            line["diff"] = max(line.get("diff", 0.0), r["max_abs_diff_vs_first"])
    lines.append(line)
print(table(lines, ["cache_tokens", "GB", "flashcore_decode", "sdpa_flash", "sdpa_cudnn", "diff"], {"GB": "{:.2f}", "diff": "{:.1e}"}))
by = {(r["Sk"], r["impl"]): r["graph_timing"]["median_ms"] for r in record["decode"] if "graph_timing" in r}
ratios = [by[(n, "sdpa_cudnn")] / by[(n, "flashcore_decode")] for n in sorted({k[0] for k in by}) if (n, "sdpa_cudnn") in by]
print(f"flashcore decode vs cuDNN (time ratio, >1 = flashcore faster): {min(ratios):.3f}-{max(ratios):.3f}")
'''),
    md(r'''
From 512K tokens on, every kernel streams the cache at about 3.1 TB/s. That is the HBM read
bandwidth: the copy ceiling in `perf.json` (3.03 TB/s, another run on the same GPU model)
counts a read and a write. flashcore's
split-KV kernel is within a few percent of cuDNN there. Long-cache decode is a solved
problem for exact attention.

## 8. What sub-quadratic methods would trade away

Linear attention, state-space layers and most sparse patterns change the *function*. They
replace softmax over all previous tokens with a fixed-size state or a hand-picked subset, and a
model must be trained for that function. They are not faster kernels for the same attention.
What exact-attention kernels can offer for long inputs is what was measured here:

* full attention at constant efficiency (the range is printed below), costing S² honestly;
* memory linear in S (inputs and output only);
* a sliding window, which is exact attention of a banded mask at linear cost;
* decode over multi-million-token caches at HBM bandwidth.
'''),
    code('''
fc_long = [r for r in sweep if r["impl"] == "flashcore" and "tflops" in r and r["S"] >= 8192]
print(f"flashcore TFLOP/s for S >= 8K (causal and non-causal): {min(r['tflops'] for r in fc_long):.0f}-{max(r['tflops'] for r in fc_long):.0f}")
top = max(fc_long, key=lambda r: (r["S"], r["causal"]))
print(f"longest full-attention call: S={top['S']} causal={top['causal']}, H={top['H']}: {top['timing']['median_ms'] / 1e3:.1f} s")
'''),
    md(r'''
## Conclusion

The prior report measured a real kernel problem and drew the wrong conclusion. Its kernel
grew faster than S² and failed at 32K because its tile grew with S. Tiling the keys fixes
both. Quadratic cost remains, and it is a property of the function, not of the kernel.
flashcore runs 1K → 1M tokens at near-constant TFLOP/s with no extra memory, is correct past
$2^{31}$ elements, and offers the linear-cost window for models trained with one. No "12+
months of sparse attention" were needed for any of it.
'''),
]


NOTEBOOKS = {"01_derivation": DERIVATION, "04_fp8": FP8, "05_long_context": LONG, "02_correctness": CORRECTNESS,
             "03_performance": PERFORMANCE, "06_sass_constant_time": SASS_CT}


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
