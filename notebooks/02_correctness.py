# %% [markdown]
# # 02 · Correctness: the error rule, the grid, and the prior reports' cases
#
# **What this notebook claims, and how it could fail.** The forward kernel computes exact
# attention to within twice the error that the same computation in PyTorch at the same
# precision makes, on every case of a grid built from the sizes where attention kernels break
# (lengths that are not multiples of the tile, $S_q \ne S_k$, both causal alignments, every
# GQA ratio, head dims 16–256, fp16/bf16/fp32, transposed layouts). Any case over the bound,
# any unwritten element, any NaN the reference does not have, prints `False` below.
#
# Sections: (1) the rule, and why the checks the prior reports used are weak, tested against
# planted bugs; (2) the grid, run live; (3) the recorded H100 grid; (4) the prior reports'
# failing cases revisited.

# %% tags=["parameters"]
PROFILE = "auto"  # "auto" | "gpu" | "cpu"
SWEEP = "quick"  # GPU profile: "quick" (a sample of each grid, about 2 minutes on an H100) or
# "full" (all of it: the recorded run, results/<gpu>/correctness.json), -p SWEEP full
QUICK_GRID_STRIDE = 13  # quick: every 13th case of the shuffled 450-case grid (35 cases)
QUICK_VARLEN_CASES = 12  # quick: the first 12 of the 240 varlen cases
SEED = 0
RECORD = True  # GPU profile: write results/<gpu>/correctness.json
RECORDED_GPU = "nvidia-h100-80gb-hbm3"  # which recorded GPU run sections 3 render
SAVE_FIGURES = True

# %%
from flashcore.notebook import live_error, live_ratio, setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
# %%

import matplotlib.pyplot as plt
import torch

from flashcore import validate as V
from flashcore.plots import DTYPE_COLORS, save_figure
from flashcore.reference import attention_reference
from flashcore.results import describe, read_result, write_result
from flashcore.studies.records import status_line_for

# %% [markdown]
# ## 1. The rule
#
# For each case, fresh $N(0,1)$ inputs; the output buffer is filled with NaN before the launch.
# Then
#
# $$\max|O - O_{64}| \;\le\; 2\,\max|O_\text{same} - O_{64}| + \text{floor},$$
#
# where $O_{64}$ is attention in float64 and $O_\text{same}$ is the plain PyTorch computation in
# the inputs' precision (scores, softmax and $PV$ all in fp16/bf16/fp32). The bound therefore
# scales with the dtype, the sequence length and the output's magnitude, all of which a fixed
# tolerance ignores. The floor is one unit roundoff of the dtype at the largest $|O_{64}|$, so a
# case whose baseline happens to be exact (e.g. $S_k = 1$, where the output is a copy of $V$)
# does not demand bit-exactness. NaN must occur exactly where the reference has NaN.
# Relative L2 error is recorded beside it.
#
# **Report 000** first tested `max_diff < 2e-3`, saw 0.003906 on every head count at
# $S = 512$, $D = 64$, fp16, and switched to `allclose(rtol=1e-3, atol=2e-3)` until it passed.
# What does the fp16 computation itself get wrong at that size, and what would the rule have
# allowed?

# %%
case000 = V.AttentionCase(16, 8, 8, 512, 512, 64, "float16")
q, k, v = V.make_inputs(case000, "cpu", SEED)
ref = attention_reference(q, k, v)
same = attention_reference(q, k, v, compute_dtype=q.dtype)
r000 = V.error_rule(same, ref, same)
print(
    f"fp16 PyTorch vs float64 at B=16, H=8, S=512, D=64: max |err| {r000.baseline_err:.2e}; "
    f"the rule allows {r000.bound:.2e}; largest |output| {float(ref.abs().max()):.2f}"
)
print(f"report 000's 0.003906 is {0.003906 / r000.bound:.1f}x the rule's bound")

# %%
# NBVAL_CHECK_OUTPUT
print(
    "report 000's max diff (0.003906) is within the rule's bound at its own config:",
    0.003906 <= r000.bound,
)

# %% [markdown]
# On N(0, 1) inputs at report 000's size, 0.003906 ($2^{-8}$) is more than the rule allows: it
# would have failed. A maximum difference that is the same power of two at every head count
# points at something systematic (an intermediate rounded to a coarser format, or one ulp at a
# larger magnitude) and deserved an explanation; loosening the test made it disappear instead.
#
# **Planted bugs.** Each function below is attention with one bug that real kernels have
# shipped: the tail key block dropped when $S$ is not a multiple of the tile, the causal
# diagonal one key late, probabilities rounded to bf16 in an fp16 kernel, and the online
# softmax without its rescale. Each check (the two from report 000 and the rule) is run on each
# bug at three lengths, causal and not (fp16, $B=1$, $H_q = 4$, $H_{kv} = 2$, $D = 64$, on the
# CPU, so both profiles compute the same table). `row_ratio` is a diagnostic: the rule applied
# to each query row on its own (above 1 = that row alone would fail).

# %%
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
            row = {
                "bug": name,
                "S": S,
                "causal": causal,
                "max_err": rep.max_abs_err,
                "bound": rep.bound,
                "rule_rejects": not rep.passed,
                "row_ratio": rep.row_ratio,
            }
            for check, fn in V.weak_checks().items():
                row[check + " rejects"] = not fn(out, ref)
            bug_rows.append(row)
print(
    table(
        bug_rows, list(bug_rows[0]), {"max_err": "{:.2e}", "bound": "{:.2e}", "row_ratio": "{:.2f}"}
    )
)

# %%
allclose = "allclose(rtol=1e-3, atol=2e-3) rejects"
fig, ax = plt.subplots(figsize=(8, 3.6))
names = list(V.planted_bugs())
for i, name in enumerate(names):
    rows = [r for r in bug_rows if r["bug"] == name]
    xs = [i + (j - len(rows) / 2) * 0.12 for j in range(len(rows))]
    ax.scatter(
        xs,
        [r["max_err"] for r in rows],
        c=["#d62728" if r["rule_rejects"] else "#7f7f7f" for r in rows],
        marker="o",
        zorder=3,
    )
    ax.scatter(xs, [r["bound"] for r in rows], marker="_", c="k", s=120, zorder=2)
ax.axhline(2e-3, ls=":", c="#1f77b4", label="report 000's atol 2e-3")
ax.set_yscale("log")
ax.set_xticks(range(len(names)), [n.replace(" ", "\n", 2) for n in names], fontsize=8)
ax.set_ylabel("max |out - float64|")
ax.set_title("planted bugs: error (dot; red = rule rejects) vs the rule's bound (dash)")
ax.legend(loc="upper right")
fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "02_planted_bugs")

# %%
# NBVAL_CHECK_OUTPUT
label = lambda r: f"{r['bug']} @S={r['S']}{' causal' if r['causal'] else ''}"
print(
    "rejected by the rule but passed by allclose:",
    [label(r) for r in bug_rows if r["rule_rejects"] and not r[allclose]],
)
print(
    "rejected by allclose but passed by the rule:",
    [label(r) for r in bug_rows if r[allclose] and not r["rule_rejects"]],
)
print("passed by both:", [label(r) for r in bug_rows if not r["rule_rejects"] and not r[allclose]])
print(
    f"smallest row-wise ratio among the planted bugs: {min(r['row_ratio'] for r in bug_rows):.2f}"
)

# %% [markdown]
# What the table says, plainly:
#
# * The gross bugs (dropped tail block, late diagonal, missing rescale) are rejected by every
#   check, almost everywhere. A loosened tolerance is dangerous near the noise floor, not here.
# * Rounding the probabilities to bf16 in a non-causal fp16 kernel changes the output by less
#   than fp16 arithmetic itself does; no comparison against float64 can single it out, and the
#   rule does not pretend to.
# * The global rule has a blind spot of its own: its bound comes from the *largest* error of the
#   fp16 baseline, and in causal attention the first rows (which average few keys and are large)
#   set it. A bug confined to small-magnitude rows, like dropping one key from the end of a
#   causal sequence of 4097, can stay under that bound while `allclose`'s per-element tolerance
#   sees it. Applied row by row, the rule separates every planted bug (see the smallest row-wise
#   ratio above); section 3 shows where the kernel itself sits on that diagnostic. The pass/fail
#   rule stays the agreed global one; the row-wise ratio is recorded beside it for every case.

# %% [markdown]
# ## 2. The grid, live
#
# GPU profile with `SWEEP="full"`: the full grid (450 cases: fp16/bf16 at every awkward length, $S_q \ne S_k$,
# both causal alignments, GQA ratios 1–32, head dims 16–256 and padded ones, fp32, transposed
# layouts), bitwise repeatability, and views whose element offsets pass $2^{31}$; recorded to
# `results/<gpu>/correctness.json`. `SWEEP="quick"`, the default: every `QUICK_GRID_STRIDE`-th
# case of that shuffled grid (35 cases at 13: all three masks, GQA ratios 1 to 8, head dims
# 16 to 256 and two padded ones, S up to 4096, Sq != Sk, fp32 and the transposed layout
# among them), recorded as `correctness_quick.json` (its H100 record is this notebook's GPU
# profile at commit `d807aaa`, 2026-11-27: 35 cases, 0 failed, on the kernels of `d8fa890`; it
# is stale and was not re-recorded: `kernels/forward_hopper.py` has changed since, and its one
# Gluon case, D64 non-causal at S 4096, is a shape that change reaches (the emulated exps,
# section 3)). Its time
# is mostly compiling: each case with a new combination of head dim, dtype, mask and the
# integer arguments Triton specializes on (equal to 1, divisible by 16) is a new kernel, about
# a second each on the H100's host; the full grid has about 156 of them. CPU profile: the
# interpreter grid (fp16/fp32, small sizes); bf16 cannot be checked under the interpreter (its
# `tl.dot` is wrong), so bf16 is GPU-only.

# %%
if SWEEP not in ("quick", "full"):
    raise ValueError(f"SWEEP must be 'quick' or 'full', got {SWEEP!r}")
grid = "full" if PROFILE == "gpu" else "cpu"
cases = V.correctness_grid(grid)
if PROFILE == "gpu" and SWEEP == "quick":
    # The grid is shuffled: a stride keeps every kind of case.
    grid, cases = f"full[::{QUICK_GRID_STRIDE}]", cases[::QUICK_GRID_STRIDE]
# (The CPU grid takes seconds: no progress bar, which under nbval's kernel lands in the output.)
live = V.run_grid(cases, DEVICE, base_seed=SEED, progress=PROFILE == "gpu")
summary = V.summarize(live)
determinism = V.check_determinism(V.determinism_cases(DEVICE), DEVICE)
if PROFILE == "gpu":
    print(
        f"grid {grid!r}: {summary['cases']} cases, {summary['failed']} failed, worst ratio "
        f"{summary['worst_ratio']:.3f} ({summary['worst_case']}), max rel L2 "
        f"{summary['max_rel_l2_err']:.2e}, worst row-wise ratio {summary['worst_row_ratio']:.2f}"
    )
else:  # ratios of errors a few roundings in size: their digits, and which case is the
    # worst, move with the CPU's SIMD code (see flashcore.notebook.live_ratio)
    print(
        f"grid {grid!r}: {summary['cases']} cases, {summary['failed']} failed, worst ratio "
        f"{live_ratio(summary['worst_ratio'], PROFILE)}, max rel L2 "
        f"{live_error(summary['max_rel_l2_err'], PROFILE)}"
    )
if PROFILE == "gpu":
    large = V.check_large_offsets(DEVICE)
    if RECORD:
        path = write_result(
            "correctness" if SWEEP == "full" else "correctness_quick",
            {
                "grid": grid,
                "summary": summary,
                "cases": live,
                "determinism": determinism,
                "large_offsets": large,
            },
            command=f"papermill notebooks/02_correctness.ipynb (PROFILE=gpu, SWEEP={SWEEP})",
        )
        print("recorded", "/".join(path.parts[-3:]))

# %%
# NBVAL_CHECK_OUTPUT
print("live grid: every case passes the error rule:", summary["failed"] == 0)
print(
    "live grid: repeated launches are bitwise identical:",
    all(r["bitwise_identical"] for r in determinism),
)

# %% [markdown]
# ## 3. The recorded GPU grid
#
# Rendered from `results/<gpu>/correctness.json`; the provenance line says which device, date
# and commit produced it. On the CPU profile this is the record committed from the H100 run:
# commit `65d6c6c` (2026-11-27, the kernels with MLA's 192/128 backward on launch configs of
# its own, the paged decode's small-page read, and the Gluon forward's D64 non-causal default
# of one exp in 8 on the FMA pipe), 450 cases, 0 failed, as at `d8fa890`, `8739133` and
# `f9591a6` before it (log `logs/correctness_65d6c6c.log`). It is stale since 2026-11-28 (its
# status line): the FP8 schedule fix (`forward_hopper.py`, a651e4a; the FP8 kernels' SASS only,
# not the bf16 kernels this grid runs) and the backward dispatch (`interface.py`, `dispatch.py`)
# came after it, and there was no device time left to re-run it.

# %%
record = read_result("correctness", RECORDED_GPU)
print(describe(record))
print(status_line_for("correctness", RECORDED_GPU))
rows = record["cases"]
groups = {}
for r in rows:
    key = (r["dtype"], "causal " + r["alignment"] if r["causal"] else "non-causal")
    groups.setdefault(key, []).append(r)
summary_rows = [
    {
        "dtype": d,
        "mask": m,
        "cases": len(g),
        "worst ratio": max(r["ratio"] for r in g),
        "worst row ratio": max(r.get("row_ratio", float("nan")) for r in g),
        "median ratio": sorted(r["ratio"] for r in g)[len(g) // 2],
        "max rel L2": max(r["rel_l2_err"] for r in g),
    }
    for (d, m), g in sorted(groups.items())
]
print(
    table(
        summary_rows,
        list(summary_rows[0]),
        {
            "worst ratio": "{:.3f}",
            "worst row ratio": "{:.2f}",
            "median ratio": "{:.3f}",
            "max rel L2": "{:.2e}",
        },
    )
)
by_d = {}
for r in rows:
    by_d.setdefault(r["head_dim"], []).append(r["ratio"])
print()
print(
    table(
        [{"head_dim": d, "cases": len(x), "worst ratio": max(x)} for d, x in sorted(by_d.items())],
        ["head_dim", "cases", "worst ratio"],
        {"worst ratio": "{:.3f}"},
    )
)

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
markers = {(False, "top_left"): "o", (True, "top_left"): "^", (True, "bottom_right"): "v"}
for r in rows:
    m = markers[(r["causal"], r["alignment"])]
    ax[0].scatter(r["seqlen_k"], r["ratio"], c=DTYPE_COLORS[r["dtype"]], marker=m, s=14, alpha=0.7)
    ax[1].scatter(
        r["num_q_heads"] // r["num_kv_heads"],
        r["ratio"],
        c=DTYPE_COLORS[r["dtype"]],
        marker=m,
        s=14,
        alpha=0.7,
    )
for a in ax:
    a.axhline(1.0, c="k", ls="--", lw=1)
    a.set_xscale("log", base=2)
ax[0].set(xlabel="S_k", ylabel="max err / bound  (fails above 1)", title="every recorded case")
ax[1].set(xlabel="GQA ratio Hq/Hkv", title="by GQA ratio")
handles = [plt.Line2D([], [], ls="", marker="o", c=c, label=d) for d, c in DTYPE_COLORS.items()]
handles += [
    plt.Line2D([], [], ls="", marker=m, c="grey", label=("causal " + a) if c else "non-causal")
    for (c, a), m in markers.items()
]
ax[1].legend(handles=handles, loc="upper right", fontsize=8)
fig.tight_layout()
if SAVE_FIGURES:
    save_figure(fig, "02_error_ratio_grid")

# %%
# NBVAL_CHECK_OUTPUT
fails = sum(not r["passed"] for r in rows)
print(
    f"recorded GPU grid: {len(rows)} cases, {fails} fail the rule, worst ratio below 1: {max(r['ratio'] for r in rows) < 1}"
)
if "row_ratio" in rows[0]:
    worst_row = max(r["row_ratio"] for r in rows)
    print(
        f"recorded: worst row-wise ratio {worst_row:.2f}, below the smallest planted bug's "
        f"({min(b['row_ratio'] for b in bug_rows):.2f}): {worst_row < min(b['row_ratio'] for b in bug_rows)}"
    )
print(
    "recorded: repeated launches bitwise identical:",
    all(r["bitwise_identical"] for r in record["determinism"]),
)
print(
    "recorded: offsets past 2^31 elements correct:",
    all(r["passed"] and r["max_element_offset"] > 2**31 for r in record["large_offsets"]),
)

# %% [markdown]
# Under today's dispatch 2 of these 450 cases reach the Gluon kernel: D64 non-causal at
# $S_q = S_k = 4096$, fp16 and bf16 (`dispatch.FORWARD_GLUON_FROM` sends D64 there from 4096
# causal or not (causal from 16384 until an H200 sweep at `dd61c18`; the grid has no D64 causal
# case that long); ratios 0.099 and 0.086 in the record). It serves D128/D256 once the
# shorter of $S_q$ and $S_k$ reaches 1K-2K, and in the grid's D128 and D256 cases the shorter
# one is at most 1023 (`kernel` in each row says which ran).
# The same grid was therefore also run with every case the Gluon kernel supports forced onto
# it (`FLASHCORE_FORWARD_HOPPER=always`, `correctness_gluon.json`; the others run on Triton).
#
# Since `840fd14` the Gluon forward's D64 non-causal default computes one exp in 8 on the FMA
# pipe, by a degree-3 polynomial (`EXP2_EMULATED_FULL = {64: 1}` in `kernels/forward_hopper.py`),
# on the key tiles after the first that every row sees whole; causal calls, D128, D256 and the
# FP8 mode keep every exp on the MUFU. Both records of `65d6c6c` cover it under the error rule:
# the two default-dispatch cases above, and in the forced record 44 D64 non-causal cases on the
# Gluon kernel, all passing (worst ratio 0.256), 20 of them with $S_k$ of 1023 to 4096, long
# enough for such tiles. Against the forced record of `d8fa890`, the relative L2 errors of 18
# of those 20 moved (the two with $S_q = 1$ did not) and every other Gluon case's errors are
# identical.

# %%
# NBVAL_CHECK_OUTPUT
try:
    forced = read_result("correctness_gluon", RECORDED_GPU)
    print(describe(forced))
    print(status_line_for("correctness_gluon", RECORDED_GPU))
    on_gluon = [r for r in forced["cases"] if r["kernel"] == "gluon"]
    print(
        f"forced-Gluon grid: {len(forced['cases'])} cases, {len(on_gluon)} on the Gluon kernel, "
        f"{sum(not r['passed'] for r in forced['cases'])} fail the rule; worst ratio on Gluon "
        f"{max(r['ratio'] for r in on_gluon):.2f}"
    )
    print(
        "forced-Gluon grid: every case passes, and Gluon ran some:",
        bool(on_gluon) and all(r["passed"] for r in forced["cases"]),
    )
except FileNotFoundError:
    print("forced-Gluon grid: no record")


# %%
def gluon_forward_run(run):
    """A sanitizer run of the Gluon forward (kernels/forward_hopper.py): its bf16 workloads
    and the fp8 study on its FP8 mode."""
    workload = run.get("workload", "")
    return workload.startswith("forward_hopper") or workload == "fp8_hopper"


try:
    san = read_result("sanitizer", RECORDED_GPU)
    print(describe(san))
    print(status_line_for("sanitizer", RECORDED_GPU))
    for run in san["runs"]:
        lines = [ln for ln in run["summary_lines"] if "own-bound" not in ln]
        fp8_runs = len(run["summary_lines"]) - len(lines)
        print(
            f"compute-sanitizer --tool {run['tool']} on {run.get('workload', 'forward')}: {run['errors']} errors/hazards, "
            f"exit {run['returncode']}  |  "
            + " | ".join(lines)
            + (f" | {fp8_runs} runs of the fp8 study (recipes and baselines)" if fp8_runs else "")
        )
    # The Triton kernels' families (the forward grid, fp8, the backward, varlen, decode and
    # the Gluon backward); the Gluon forward's runs (its FP8 mode's included) are judged in
    # their own cells below.
    triton_runs = [r for r in san["runs"] if not gluon_forward_run(r)]
    sanitizer_clean = all(r["errors"] == 0 and r["returncode"] == 0 for r in triton_runs)
except FileNotFoundError:
    san, sanitizer_clean = None, None
print(
    "\n".join(
        f"  {r['name']}: offset {r['max_element_offset']:.3e} elements, ratio {r['ratio']:.3f}"
        for r in record["large_offsets"]
    )
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "recorded: memcheck, racecheck and synccheck clean on every kernel family but the Gluon forward:",
    sanitizer_clean,
)

# %% [markdown]
# The Gluon Hopper kernel (`kernels/forward_hopper.py`, notebook 03) ran the same sample forced
# onto it, once on its own grid and once with 3 programs walking every work tile (the
# `forward_hopper` runs of `sanitizer.json`, listed above; a third, `forward_hopper_mla`, runs
# MLA's head dims, and a fourth, `fp8_hopper`, the fp8 study on its FP8 mode). memcheck and
# synccheck are clean; racecheck reports 5 hazards in each of the two `forward_hopper` runs and
# in the MLA run, 6 in the FP8 run (the record of `65d6c6c`; its log's racecheck summaries
# display the same 5, 5, 5 and 6; 5/5/5/8 at `d8fa890`, 5/5/5/4 at `8739133`, 5/5/4 at
# `f9591a6`, 5 in each at `6c8aae4`), and they are not in the kernel's data path. In every run
# each report pairs a read at the kernel's entry (its `def` line) with writes at that line, at
# the statement holding the `gl.warp_specialize` calls, or both (`logs/sanitize_65d6c6c.log`;
# the cells below check every reported line against the source the run compiled). Where they
# were traced to the SASS (commit `f2502d2`, 5 per run; the runs above were not traced again),
# every one pairs the worker warps' read of their partition-state byte at kernel entry
# (`LDS.U8` after `BAR.SYNC 1`) with the default warpgroup's write of that byte before the
# start and the exit of `warp_specialize` (`STS.64` followed by `BAR.SYNC 1`): the protocol
# Triton generates around
# `gl.warp_specialize` (SASS at the reported offsets: `logs/racecheck_sass_f2502d2.log` beside
# the record). None
# touches the Q buffers, the K/V ring or our mbarriers. A probe that shares nothing with the
# forward but its shape of partitions (two 4-warp consumers at 240 registers, a 1-warp producer
# at 24, one buffer handed over through an mbarrier; `tools/racecheck_warp_specialize.py`,
# since removed: `git show 3a1d646:tools/racecheck_warp_specialize.py`)
# gets a hazard at the same two places (kernel entry and the `warp_specialize` call), and one
# on its mbarrier-ordered handoff, which racecheck does not model, while giving correct output (`logs/racecheck_probe_3a1d646.log`). The
# forced 450-case grid passes on the record's kernels (`correctness_gluon.json`, its lines
# above); that record has no repeat runs, and the Gluon kernel's bitwise determinism on that
# grid was last checked at `3a1d646`. So these hazards are the
# generated start/exit protocol as racecheck sees it, not a race we can fix in the kernel;
# that racecheck is wrong about them, rather than the protocol racy, is argued from the SASS
# (each write and read is separated by `BAR.SYNC 1`), not proven.

# %%
hopper_runs = [] if san is None else [r for r in san["runs"] if gluon_forward_run(r)]
hopper_by_tool = (
    {
        tool: all(r["errors"] == 0 for r in hopper_runs if r["tool"] == tool)
        for tool in ("memcheck", "racecheck", "synccheck")
    }
    if hopper_runs
    else None
)

# %%
# NBVAL_CHECK_OUTPUT
print("recorded, Gluon kernel: clean under memcheck, racecheck, synccheck:", hopper_by_tool)

# %% [markdown]
# Where each of those racecheck reports points, checked rather than read: the sanitizer's log
# of the record's session (`logs/sanitize_<commit>.log` beside the record) names a source line
# for both sides of every report, in the kernel file the run compiled, which git returns by the
# object id in the record's fingerprint. The claim above holds if every line is the kernel's
# `def` line or the statement holding its `gl.warp_specialize` calls (reported at the `if`
# that chooses between the two- and three-consumer calls), and none is a line of the consumer
# or producer partitions, where the Q buffers, the K/V ring and our mbarriers are used.

# %%
import re

from flashcore import results as _R
from flashcore.results import RESULTS_DIR


def warp_specialize_protocol_lines(source):
    """(def line, the lines from the `if` before the first gl.warp_specialize call to the end
    of the kernel function) of _fa3_fwd_kernel in the kernel file's text ``source``."""
    lines = source.splitlines()
    start = next(i for i, l in enumerate(lines) if "def _fa3_fwd_kernel(" in l) + 1
    first_ws = next(i for i in range(start, len(lines)) if "gl.warp_specialize(" in lines[i]) + 1
    end = next(i for i in range(first_ws, len(lines)) if lines[i].startswith("    _FA3_LAUNCH"))
    return start, set(range(first_ws - 1, end + 1))


racecheck_locations = None
if san is not None:
    log = RESULTS_DIR / RECORDED_GPU / "logs" / f"sanitize_{san['provenance']['commit']}.log"
    blob = san["kernel_fingerprint"]["files"].get("flashcore/kernels/forward_hopper.py")
    source = _R.git_output(["cat-file", "-p", blob]) if blob else None
    if not log.exists() or not source:
        print(f"not checked: {'no log ' + log.name if not log.exists() else 'no git here'}")
    else:
        reported = [int(n) for n in re.findall(r"forward_hopper\.py:(\d+)", log.read_text())]
        def_line, protocol = warp_specialize_protocol_lines(source)
        outside = sorted({n for n in reported if n != def_line and n not in protocol})
        racecheck_locations = bool(reported) and not outside
        print(
            f"{log.name}: {len(reported)} source locations in racecheck reports on "
            f"forward_hopper.py, lines {sorted(set(reported))}; in the file the run compiled "
            f"(object {blob[:12]}): kernel def line {def_line}, warp_specialize statement "
            f"lines {min(protocol)}-{max(protocol)}"
        )
        print("outside those:", outside or "none")


# %%
# NBVAL_CHECK_OUTPUT
print(
    "recorded: every Gluon-forward racecheck report at the kernel's entry or its "
    "warp_specialize statement:",
    racecheck_locations,
)

# %% [markdown]
# The sanitizer sample (awkward lengths, both alignments, GQA, padded head dim, fp32, a
# transposed layout, sliding windows; then the fp8 kernel, every recipe, at S = 200; then the
# other kernel families on small awkward sizes, `flashcore/studies/sanitize_workloads.py`: the
# backward in both dQ modes with softcap and varlen, the varlen forward, decode dense and paged
# with splits, sinks, softcap and windows, the Gluon backward, and MLA's head dims on the
# forward) ran with PyTorch's caching allocator off, so every tensor is its own
# allocation and a masked load that strayed past a tensor's end would be reported rather than
# land silently in a neighbour's memory. The record is of commit `65d6c6c` (stale since the
# 2026-11-28 changes named above, its status line; the warp-specialized Gluon backward that came
# then was run under the three tools on its own, notebook 07 section 9b), so its paged decode runs (pages of 16 and 64 at D128, key tiles of 64) are of
# the block-table lookup carried one tile ahead (`3f5270a`), with the small-page read
# (`17faf1b`) at pages of 16, its `fp8_hopper` run is of the Gluon forward's FP8 mode and its
# Gluon forward runs of D=64's three-warpgroup config, but not of the emulated exps: the
# sample's one D64 non-causal case has $S_k = 239$, no whole key tile after the first. Its
# backward runs are not MLA's pair, so MLA's split tiles (`23f9d53`) and the launch configs
# they now have of their own (`65d6c6c`) are not among them.
#
# ## 4. The prior reports' failing cases
#
# Report 003 called a 0.468 maximum difference at $S = 32$ ("47% error", "block size mismatch
# for small sequences") an acceptable edge case, and KV-cache errors of 0.007–1.05 "minor
# precision issues". Here are the same regimes through the forward kernel: $S = 32$ and other
# short lengths, and single-query / short-query attention over a longer cache with bottom-right
# alignment and GQA (the shape of a KV-cache step; the dedicated split-KV decode kernel is
# checked the same way in the next section).

# %%
dt = "float16"
prior = [
    V.AttentionCase(4, 8, 8, 32, 32, 64, dt, False),
    V.AttentionCase(4, 8, 8, 32, 32, 64, dt, True),
    V.AttentionCase(4, 8, 8, 16, 16, 64, dt, True),
    V.AttentionCase(2, 8, 8, 48, 48, 128, dt, False),
    V.AttentionCase(2, 32, 8, 1, 200, 64, dt, True, "bottom_right"),
    V.AttentionCase(2, 32, 8, 7, 257, 64, dt, True, "bottom_right"),
    V.AttentionCase(2, 8, 1, 1, 1, 64, dt, True, "bottom_right"),
]
prior_rows = [V.check_case(c, DEVICE, SEED + i) for i, c in enumerate(prior)]
print(
    table(
        prior_rows,
        ["name", "max_abs_err", "bound", "ratio", "passed"],
        {"max_abs_err": "{:.2e}", "bound": "{:.2e}", "ratio": "{:.3f}"},
    )
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "prior reports' short-sequence and cache-shaped cases all pass the rule:",
    all(r["passed"] for r in prior_rows),
)
print(
    "largest error among them below 1% of report 003's 0.468:",
    max(r["max_abs_err"] for r in prior_rows) < 0.00468,
)

# %% [markdown]
# ## KV-cache attention (decode and chunked prefill)
#
# `attention_with_kvcache` appends the new keys/values at each sequence's length and attends
# with bottom-right causal alignment through split-KV partials and a deterministic combine. A
# whole session is checked call by call against float64 under the same rule: a chunked
# prefill of ragged prompts (one token up to nearly the full cache) into an empty cache, then
# decode steps, with GQA and MQA. The prior reports called errors up to 1.05 on their GQA + cache
# path "acceptable"; the largest error here is printed beside its bound.

# %%
from flashcore.validate import kvcache_session

if PROFILE == "gpu":
    sessions = [
        dict(
            batch=4,
            hq=32,
            hkv=8,
            capacity=4096,
            d=128,
            prompt_lens=[1, 300, 2047, 4000],
            steps=16,
            dtype=torch.bfloat16,
        ),
        dict(
            batch=2,
            hq=16,
            hkv=1,
            capacity=2048,
            d=64,
            prompt_lens=[5, 2000],
            steps=16,
            dtype=torch.float16,
        ),
    ]
else:
    sessions = [
        dict(
            batch=3,
            hq=8,
            hkv=2,
            capacity=96,
            d=32,
            prompt_lens=[1, 40, 89],
            steps=4,
            dtype=torch.float16,
        ),
        dict(
            batch=2,
            hq=7,
            hkv=1,
            capacity=64,
            d=16,
            prompt_lens=[1, 63],
            steps=1,
            dtype=torch.float16,
        ),
    ]
kv_reports = []
for cfg in sessions:
    reps = kvcache_session(**cfg, device=DEVICE)
    kv_reports += reps
    worst = max(reps, key=lambda r: r.ratio)
    print(
        f"Hq/Hkv {cfg['hq']}/{cfg['hkv']} D{cfg['d']} {str(cfg['dtype'])[6:]}: {len(reps)} calls, worst ratio "
        f"{worst.ratio:.3f} (max err {worst.max_abs_err:.2e} <= bound {worst.bound:.2e})"
    )

# %%
# NBVAL_CHECK_OUTPUT
print(
    "every KV-cache call (prefill chunks and decode steps, GQA and MQA) passes the error rule:",
    all(r.passed for r in kv_reports),
)
print(
    "largest KV-cache error below the prior reports' 1.05 by more than 100x:",
    max(r.max_abs_err for r in kv_reports) < 1.05 / 100,
)

# %% [markdown]
# ## Variable-length batches, windows and softcap, and a model end to end
#
# `attention_varlen` takes FlashAttention's packed layout (`cu_seqlens_q`, `cu_seqlens_k`)
# and runs the forward kernel's tile loop per sequence. The grid below draws ragged batches
# with lengths 0 and 1 among them, both causal alignments and non-causal, GQA ratios up to 8,
# sliding windows and logit softcapping; each case against the float64 reference of each
# sequence on its own, outputs poisoned with NaN before the launch. GPU profile: 240 cases
# with `SWEEP="full"`, the first `QUICK_VARLEN_CASES` otherwise (nearly every case is a kernel
# of its own to compile: its lengths, head counts and window change the specialization).

# %%
from flashcore.studies.launch import run_varlen_case, varlen_cases

if PROFILE == "gpu":
    vl_cases = varlen_cases(seed=11, count=240 if SWEEP == "full" else QUICK_VARLEN_CASES)
    vl_dtype = torch.bfloat16
else:
    vl_cases = varlen_cases(seed=11, count=24, small=True)
    vl_dtype = torch.float16
vl_results = [run_varlen_case(c, DEVICE, vl_dtype) for c in vl_cases]
print(
    f"{len(vl_results)} varlen cases ({str(vl_dtype)[6:]}), "
    f"{sum(sum(c['lens_q']) == 0 or 0 in c['lens_q'] for c in vl_cases)} with an empty sequence; "
    f"worst ratio {max(r['ratio'] for r in vl_results):.3f}"
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "every varlen case (ragged, lengths 0 and 1, both alignments, GQA, windows, softcap) "
    "passes the error rule:",
    all(r["passed"] for r in vl_results),
)

# %% [markdown]
# The op that `torch.compile` and transformers call, `torch.ops.flashcore.attention`, takes
# the window and the softcap too (through `flashcore.ops.sdpa` here). transformers'
# `sliding_window = W` means key j is visible from query i iff i - W < j <= i, the same
# number as flashcore's `window` (a test checks it against transformers' own eager model).

# %%
from flashcore.ops import sdpa as fc_sdpa
from flashcore.reference import attention_reference
from flashcore.validate import error_rule

op_reports = []
op_dtype = torch.bfloat16 if PROFILE == "gpu" else torch.float16
for seqlen, window, softcap in [(1, None, 30.0), (77, 16, None), (200, None, 5.0), (333, 64, 50.0)]:
    g = torch.Generator().manual_seed(seqlen)
    q, k, v = (
        torch.randn(2, h, seqlen, 64, generator=g).to(op_dtype).to(DEVICE) for h in (8, 2, 2)
    )
    out = fc_sdpa(q, k, v, is_causal=True, enable_gqa=True, window=window, softcap=softcap)
    opts = dict(causal=True, window=window, softcap=softcap)
    rep = error_rule(
        out,
        attention_reference(q, k, v, **opts),
        attention_reference(q, k, v, compute_dtype=op_dtype, **opts),
    )
    op_reports.append(rep)
    print(f"S={seqlen:<4} window={window} softcap={softcap}: ratio {rep.ratio:.3f}")

# %%
# NBVAL_CHECK_OUTPUT
print("op with windows and softcap passes the error rule:", all(r.passed for r in op_reports))

# %% [markdown]
# End to end, a random Llama-style model (GQA) in transformers, in float32: in bf16 the
# model's own rounding dominates and flashcore's and SDPA's logit errors come out identical,
# which checks nothing about attention. Three checks that can fail: the logits against the
# model in float64; every attention call of one forward pass, on the q, k, v that call
# received, against float64 (SDPA on the same inputs is the baseline); greedy tokens against
# SDPA's, compared up to the first step whose top-2 margin is within 10x the logits' noise.
#
# The logits and per-layer checks run on models initialised as transformers does by default
# (std 0.02), 60 of them, at most 3 failing each check; the wide-init model (0.5) is kept for
# the greedy tokens, whose margins it makes decisive. On it the float32 checks decide little:
# its scores reach |s| = 220-290, rounding them to float32 moves each softmax weight by about
# u|s|, and one call's largest error varies up to 3x between formulations that are equally
# right (SDPA's `exp(s - max)` and the kernels' `exp2` form, emulated on the same calls). There
# the 2x-SDPA bound failed 3 to 11 of 100 models per layer by CPU code path, and a softmax
# scale off by 1e-5 (relative) slipped through 51 of 60. At init 0.02 (AVX-512 CPU, three code
# paths) 0 of 60 fail either check, worst ratio 0.75; a scale off by 3e-6 fails 44 to 46 of 60
# per layer, by 1e-5 all 60 (`flashcore/studies/e2e.py`, `tests/test_ops.py`).

# %%
from flashcore.studies.e2e import checks_over_models, run_e2e

e2e = run_e2e(DEVICE, torch.float32, steps=16)
counted = checks_over_models(DEVICE)
print(  # CPU: float32 errors printed as their size; the checks are the counted ones below
    f"wide-init model, logits: max err {live_error(e2e['logits']['max_abs_err'], PROFILE)} vs sdpa "
    f"{live_error(e2e['logits']['sdpa_max_abs_err'], PROFILE)}"
    + (f" (ratio {e2e['logits']['ratio']:.3f})" if PROFILE == "gpu" else "")
    + f"; greedy steps compared {e2e['generation']['compared_steps']} of {e2e['generation']['steps']}"
)
for name in ("logits", "per_layer"):  # CPU: counts and ratios vary by code path; GPU prints them
    check = counted[name]
    print(
        f"{name} over {counted['models']} models (init {counted['initializer_range']}, "
        f"{counted['calls_per_model']} attention calls each): at most {check['max_failed']} may fail"
        + (
            f"; {len(check['failed'])} fail, worst ratio {check['worst_ratio']:.3f}"
            if PROFILE == "gpu"
            else ""
        )
    )

# %%
# NBVAL_CHECK_OUTPUT
print(
    "float32 logits and attention calls (counted over models), decided greedy tokens pass:",
    counted["logits"]["passed"],
    counted["per_layer"]["passed"],
    e2e["generation"]["identical"] and e2e["generation"]["compared_steps"] > 0,
)

# %% [markdown]
# ## Conclusion
#
# What the verdict lines above establish, each from a measurement that printed `True` and
# could have printed `False`: the forward kernel passes the error rule on every case of the live
# grid and of the recorded GPU grid, repeated launches are bitwise identical, memcheck,
# racecheck and synccheck are clean on the sanitizer sample for every kernel family but the
# Gluon forward (whose racecheck hazards, 5, 5, 5 and 6 in its four runs, its FP8 mode's
# included, all point at the kernel's entry and its warp-specialize statement, checked against
# the source above: the hand-off discussed there),
# and element offsets past $2^{31}$ are handled. Forced onto the Gluon kernel, the grid passes
# too, its D64 non-causal default with one exp in 8 emulated included.
# The rule beats the prior reports' fixed thresholds where it matters (its bound follows the
# dtype and the size) but is not uniformly sharper than `allclose`: a bug confined to
# small-magnitude rows can hide under a bound set by large rows, which is why the row-wise ratio
# is recorded beside it.
# What is not covered here: the backward (notebook 07 checks the gradients under the same rule),
# v with a head dim of its own ($D_v \ne D$: the grid's cases all have $D_v = D$; the tests in
# `tests/test_value_head_dim.py` check it under the same rule), attention masks/bias and dropout
# (rejected with an error).
