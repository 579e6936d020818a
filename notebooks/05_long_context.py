# %% [markdown]
# # 05 · Long context: the quadratic truth, measured to a million tokens
#
# A prior report (seed 001) called its kernel "long-context", measured S=4K 337 µs, S=16K
# 11.7 ms and a compile failure at S=32K, and cancelled the work as needing "12+ months of
# sparse/linear attention". The honest story has two halves. Exact attention costs
# $4\,S^2 D$ FLOPs per head (half that causal), and no kernel changes that. What a good kernel does
# is keep its *efficiency* flat as S grows, keep its memory linear, and not fall over at 32K
# or at $2^{31}$ elements.
#
# The measurements are bf16, D=128, B=1, H=8 (so the 1M-token point fits in seconds), from S=1K
# to 1M, with SDPA's flash, cuDNN and math backends in the same process
# (`python -m flashcore long --record`, `results/<gpu>/long_context.json`). The CPU profile
# renders that record; the correctness parts run live.
#
# **The H100 record is stale.** `long_context.json` was recorded at commit `382853b`. The
# kernel sources have changed since (its status line below names the files): `7c97b1b` (a V
# head dim different from Q/K's runs the kernels' own `HEAD_DIM_V` mode, a branch no call here
# takes, D_v = D = 128), then up to `6c8aae4` the Gluon forward's sinks and MLA head dims, the
# backward's dQ reduction and launch configs, MLA's dispatch and the launch cache, and at
# `3f5270a` and `e5df583` the paged branch of `kernels/decode.py` and MLA's atomic-mode
# backward config, and since `d8fa890` the paged small-page decode, MLA's re-swept backward configs
# and the Gluon forward's exp2 default for D=64 non-causal (this record's calls are D=128). It was
# re-recorded neither with the `6c8aae4` records nor at `f9591a6`, `d8fa890`, `65d6c6c` or
# `5403789`. Every number below that comes from this record is the kernels' as of `382853b`.

# %% tags=["parameters"]
PROFILE = "auto"  # "gpu": measure live and record; "cpu": render the record
SWEEP = "quick"  # GPU profile: "quick" (S 1K-128K, decode to 1M tokens, about a minute on
# an H100) or "full" (S 1K-1M, decode to 16M: the recorded run), -p SWEEP full
RECORD_TOPIC = "long_context"  # the full sweep records here, the quick one as <topic>_quick
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
MEASURE_SEQLENS = []  # GPU profile: lengths to use instead of the sweep's, e.g. [1024, 8192, 131072]
MEASURE_HEADS = 8

# %%
from flashcore.notebook import live_ratio, setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first

import torch

from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
from flashcore.studies import long_context as L
from flashcore.studies import report
from flashcore.studies.records import status_line_for

# %%
if SWEEP not in ("quick", "full"):
    raise ValueError(f"SWEEP must be 'quick' or 'full', got {SWEEP!r}")
topic = RECORD_TOPIC if SWEEP == "full" else f"{RECORD_TOPIC}_quick"
if PROFILE == "gpu":
    seqlens = MEASURE_SEQLENS or (
        [2**i for i in range(10, 21)] if SWEEP == "full" else [1024, 4096, 8192, 32768, 131072]
    )
    payload = L.run_long_record(
        seqlens,
        heads=MEASURE_HEADS,
        windows=(4096,),
        decode_lengths=None if SWEEP == "full" else (32768, 131072, 1048576),
    )
    write_result(
        topic,
        payload,
        command=f"notebooks/05_long_context.ipynb (PROFILE=gpu, SWEEP={SWEEP}, RECORD_TOPIC={RECORD_TOPIC})",
    )
record_key = (topic, None) if PROFILE == "gpu" else (RECORD_TOPIC, RECORDED_GPU)
record = read_result(*record_key)
sweep = record["sweep"]
print("recorded on", describe(record))
print(status_line_for(*record_key))
print("shape:", record["sweep_shape"])

# %% [markdown]
# ## 1. The quadratic law, and where the time goes
#
# Time against S on log-log axes: a slope of 2 is the quadratic law. The fit uses S ≥ 8K, where
# the launch and the ramp-up of the grid no longer matter. Each implementation's failures
# (out of memory) and points skipped because the previous one took seconds are listed in
# the table below.

# %%
IMPLS = L.IMPLS
save_figure(L.plot_time_vs_seqlen(sweep, IMPLS), "05_time_vs_seqlen")
for causal in (False, True):
    print(f"causal={causal}")
    print(table(L.sweep_table(sweep, causal, IMPLS), ["S"] + IMPLS))
print("(median ms / TFLOP/s)")

# %%
save_figure(L.plot_tflops_vs_seqlen(sweep, IMPLS[:3]), "05_tflops_vs_seqlen")

# %%
short = {
    r["S"]: r["timing"]["median_ms"] * 1e3
    for r in sweep
    if r["impl"] == "flashcore" and not r["causal"] and "timing" in r and r["S"] <= 4096
}
print(
    "flashcore non-causal in this record, µs per call:",
    ", ".join(f"S={s_ // 1024}K {t:.0f}" for s_, t in sorted(short.items())),
)
launch = read_result("launch", RECORDED_GPU)
print("host cost per call: notebook 03's launch record,", describe(launch))
print(status_line_for("launch", RECORDED_GPU))
for row in report.launch_table(launch):
    if row["shape"].startswith("B"):
        print(
            f"  {row['shape']}: eager wall time per call flashcore {row['flashcore eager']:.0f} µs, "
            f"SDPA default {row['sdpa default eager']:.0f} µs; flashcore's GPU time "
            f"(graph replay) {row['flashcore graph']:.0f} µs"
        )

# %% [markdown]
# The time of every exact implementation grows about 4x per doubling of S from 8K on: the time
# *is* the FLOPs (flashcore's fitted slopes are printed in section 2). What separates them is
# the constant: from 8K to 512K flashcore runs at 555-662 TFLOP/s, cuDNN at 501-678, SDPA flash
# at 234-358 (causal and non-causal). The left end of the curves is flat for another reason.
# These are back-to-back eager calls, each bracketed by CUDA events, and at S ≤ 2K a call's GPU
# work is shorter than its launch path, so the times there are launch overhead, not kernel time:
# in this record flashcore's S=1K call takes longer than its S=2K call (82 against 81 µs, first
# line above). At S=4K (115 µs, 596 TFLOP/s) the kernel's time dominates again. What a call
# costs on the host is in notebook 03's launch record (`launch.json`, commit `6c8aae4`: a later
# kernel version than this record's, and itself stale since `f9591a6`, its status line above),
# whose rows are printed above: at the smallest shape (B1 H8 S128 D64) the eager wall time per
# call is several times the GPU time, for flashcore (22 against 4 µs, graph replay) and SDPA
# alike (20.3 against 6.3 µs in that record). That is the regime of notebook 03, not of this
# one. flashcore's non-causal 1M point was skipped: its 512K call took 2.0 s (2026.832 ms), and
# the quadratic law puts the 1M call at about four times that, more than the few seconds per
# point this sweep allows.
#
# ## 2. The targets

# %%
# NBVAL_CHECK_OUTPUT
for causal in (False, True):
    at8k, at128k = (
        L.tflops_at(sweep, "flashcore", causal, 8192),
        L.tflops_at(sweep, "flashcore", causal, 131072),
    )
    print(
        f"causal={causal!s:5}: flashcore {at8k:.0f} TFLOP/s at S=8K, {at128k:.0f} at S=128K ({100 * (at128k / at8k - 1):+.1f}%); "
        f"within 5% or better: {at128k >= 0.95 * at8k}"
    )
fc = [r for r in sweep if r["impl"] == "flashcore" and "extra_bytes" in r]
print(
    f"flashcore memory beyond inputs and output, S=1K..{max(r['S'] for r in fc)}: "
    f"{sorted({r['extra_bytes'] for r in fc})} bytes"
)
print("flashcore extra memory constant in S:", len({r["extra_bytes"] for r in fc}) == 1)
slopes = [L.loglog_slope(sweep, "flashcore", c) for c in (False, True)]
print(
    f"flashcore log-log slope of time vs S (S >= 8K): non-causal {slopes[0]:.3f}, causal {slopes[1]:.3f}"
)
print(
    "flashcore time is quadratic in S (slope within 0.1 of 2):",
    all(abs(s - 2) < 0.1 for s in slopes),
)
longest = max(r["S"] for r in fc)
print(
    f"longest sequence measured: {longest} tokens ({longest // 2**20}M)"
    if longest >= 2**20
    else f"longest: {longest}"
)

# %% [markdown]
# In this record (commit `382853b`, stale: see the top) the non-causal efficiency target is
# missed: flashcore falls from 662 TFLOP/s at S=8K to 623
# at S=128K (-5.9%), outside the 5% the check allows, and further to 587 at 256K and 555 at
# 512K. cuDNN's non-causal row falls the same way in this record (678 to 621 to 582). Why was not
# measured. Causal holds (610 to 608, -0.3%). Memory beyond inputs and output is 0 bytes at
# every length, and the time is quadratic (slopes 2.034 and 2.005).
#
# ## 3. The prior report's table, side by side
#
# The report names no batch, heads or head dim, so its numbers cannot be matched shape for
# shape. Our S ≤ 2K times are launch-bound (section 1): they say nothing about the kernel.
# What can be compared is the *growth*. From 4K to 16K its time grew 34.8× for 4× the
# tokens, more than quadratic, which is the signature of a kernel whose per-row work stops
# fitting on chip. Ours grows 15.2×, about the FLOP ratio of 16×.

# %%
print(table(L.prior_report_table(sweep), ["S", "prior_us", "flashcore", "flashcore_causal"]))
print("(µs per call; flashcore at B=1 H=8 D=128 bf16 on the recorded GPU)")
fc_nc = {
    r["S"]: r["timing"]["median_ms"]
    for r in sweep
    if r["impl"] == "flashcore" and not r["causal"] and "timing" in r
}
if 4096 in fc_nc and 16384 in fc_nc:
    print(
        f"growth 4K -> 16K: prior report {11746.0 / 337.1:.1f}x, flashcore {fc_nc[16384] / fc_nc[4096]:.1f}x (FLOP ratio 16x)"
    )

# %% [markdown]
# ## 4. What broke at 32K, and what breaks next
#
# **The 32K compile failure.** Triton caps one tile at $2^{20}$ elements. A kernel that keeps a
# row's whole key sequence in one tile (`long_context._whole_row_attention`: one program per
# query, all S keys loaded at once) needs an S × D tile. At D=64 that is exactly $2^{20}$ at 16K,
# which compiles (the 34.8× step above is what a tile that no longer fits on chip would show;
# the report's kernel was not profiled), and $2^{21}$ at 32K, which does not. This is
# the most likely reading of the report's S=32K failure. A FlashAttention kernel's tile is
# BLOCK_N × D whatever S is.

# %%
# NBVAL_CHECK_OUTPUT
for seqlen in (16384, 32768):
    ok, msg = L.tile_fits([seqlen, 64])
    print(f"one tile of S x D = {seqlen} x 64: {'fits' if ok else 'rejected: ' + msg}")
print(
    "recorded: compiling _whole_row_attention at S=32K, D=64 for sm_90:",
    record["whole_sequence_tile"]["32768"],
)

# %% [markdown]
# **The next failure: int32 offsets.** A tensor of more than $2^{31}$ elements needs 64-bit
# element offsets. A kernel that computes `row * stride` in int32 wraps around. Past $2^{32}$
# the wrapped offset is again a valid address, so it *silently reads the wrong row*. The
# record's demo (`long_context.int32_offset_demo`) reads rows of a 4.3-billion-element bf16
# matrix through the same kernel with int32 and with int64 offsets. The arithmetic itself:

# %%
row = torch.tensor([2**20 + 5], dtype=torch.int32)
print(
    f"row {row.item()} * stride 4096 in int32 = {(row * 4096).item()} (the offset of row 5); in int64 = {(row.long() * 4096).item()}"
)

# %%
# NBVAL_CHECK_OUTPUT
demo = record["int32_demo"]
print(
    table(
        [
            {"row": r, "offset": o, "expected": e, "int32 read": a, "int64 read": b}
            for r, o, e, a, b in zip(
                demo["rows"],
                demo["row_offsets"],
                demo["int32"]["expected"],
                demo["int32"]["values_read"],
                demo["int64"]["values_read"],
            )
        ],
        ["row", "offset", "expected", "int32 read", "int64 read"],
    )
)
print("(row r holds r mod 251; recorded on the GPU)")
print("int32 offsets return wrong rows past 2^32 elements:", not all(demo["int32"]["correct"]))
print("int64 offsets return every row correctly:", all(demo["int64"]["correct"]))

# %% [markdown]
# flashcore computes every offset in int64 (`.to(tl.int64)` before a stride multiply). The check
# that matters is the kernel itself, on a buffer where the offsets pass $2^{31}$. Below, S = 1M
# keys at D = 128, one head viewed out of a (1, S, 19, D) buffer. The last row starts at element
# 2.55·10⁹. 64 rows are checked against float64 under the error rule, the first four and
# last four included.

# %%
# NBVAL_CHECK_OUTPUT
print(
    table(
        record["large_offsets"],
        ["name", "max_element_offset", "rows_checked", "max_abs_err", "bound", "ratio", "passed"],
        {
            "max_element_offset": "{:.3e}",
            "max_abs_err": "{:.2e}",
            "bound": "{:.2e}",
            "ratio": "{:.3f}",
        },
    )
)
print(
    "offsets past 2^31 elements pass the error rule:",
    all(r["passed"] and r["max_element_offset"] > 2**31 for r in record["large_offsets"]),
)

# %% [markdown]
# ## 5. Memory
#
# Peak device memory a call allocates beyond its inputs and its output
# (`torch.cuda.max_memory_allocated`, after `reset_peak_memory_stats`). The math backend
# materialises the S × S scores and runs out of memory at S = 32K causal / 64K. SDPA's flash
# backend allocates its log-sum-exp, linear in S. flashcore allocates nothing: it writes the
# log-sum-exp only when asked.

# %%
save_figure(L.plot_memory(sweep, IMPLS), "05_memory")
for causal in (False, True):
    oom = sorted(
        {
            r["S"]
            for r in sweep
            if r["impl"] == "sdpa_math" and r["causal"] == causal and L.status(r) == "out of memory"
        }
    )
    print(
        f"math backend, causal={causal}: out of memory from S = {oom[0]}"
        if oom
        else "math never ran out"
    )

# %% [markdown]
# ## 6. Sliding windows: what "long context" can honestly mean without changing the function
#
# With `window=W` (causal) each query attends to its W most recent keys. That is still exact
# softmax attention, of a different, banded mask, and its cost is $O(S \cdot W)$: linear in S.
# The kernel skips every tile outside the band and masks only the tiles that cross its two
# edges. Correctness first, live, against the masked float64 reference:

# %%
from flashcore.validate import correctness_grid, run_grid, summarize

cases = correctness_grid("window" if PROFILE == "gpu" else "window-cpu")
live = summarize(run_grid(cases, DEVICE, progress=False))
print(
    f"live on {DEVICE}: {live['cases']} window cases, {live['failed']} failed, "
    f"worst ratio {live_ratio(live['worst_ratio'], PROFILE)}"
)
rec = record["window_correctness"]["summary"]
print(
    f"recorded on the GPU: {rec['cases']} cases (fp16/bf16, D 64-256, windows 1-5000), {rec['failed']} failed, worst ratio {rec['worst_ratio']:.3f}"
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "every sliding-window case passes the error rule (live and recorded):",
    live["failed"] == 0 and rec["failed"] == 0,
)

# %%
# NBVAL_CHECK_OUTPUT
win, full = L.window_rows(sweep)
save_figure(L.plot_window(sweep), "05_window")
# S >= 4 x window, where the band, not the causal triangle, sets the work
w_slope = L.loglog_slope(sweep, win[0]["impl"], True, min_seqlen=4 * win[0]["window"])
print(
    f"window {win[0]['window']}: log-log slope for S >= {4 * win[0]['window']} "
    + (f"{w_slope:.2f}" if w_slope is not None else "(fewer than 2 points)")
    + f"; {win[-1]['S']} tokens in {win[-1]['timing']['median_ms']:.1f} ms at {win[-1]['tflops']:.0f} TFLOP/s (of the window's FLOPs)"
)
print(
    "sliding-window time is linear in S (slope within 0.15 of 1):",
    w_slope is not None and abs(w_slope - 1) < 0.15,
)

# %% [markdown]
# ## 7. Decode with long caches
#
# One new token against a cache of up to 16M tokens (B=1, GQA 32/8, D=128, bf16: 68.72 GB of K and
# V, the largest power of two that fits next to the peers' workspace), CUDA-graph replay, so
# the time is the GPU's alone. Decode is judged by bytes: K and V are read once,
# $2 \cdot H_{kv} \cdot S_k \cdot D \cdot 2$ bytes. `diff` is the largest difference between
# a peer's output and flashcore's on the same cache. From 2M tokens on, the K tensor alone has
# at least $2^{31}$ elements.

# %%
lines = L.decode_table(record["decode"])
print(
    table(
        lines,
        ["cache_tokens", "GB", "flashcore_decode", "sdpa_flash", "sdpa_cudnn", "diff"],
        {"GB": "{:.2f}", "diff": "{:.1e}"},
    )
)
by = {
    (r["Sk"], r["impl"]): r["graph_timing"]["median_ms"]
    for r in record["decode"]
    if "graph_timing" in r
}
ratios = [
    by[(n, "sdpa_cudnn")] / by[(n, "flashcore_decode")]
    for n in sorted({k[0] for k in by})
    if (n, "sdpa_cudnn") in by
]
print(
    f"flashcore decode vs cuDNN (time ratio, >1 = flashcore faster): {min(ratios):.3f}-{max(ratios):.3f}"
)

# %% [markdown]
# From 512K tokens on, every kernel streams the cache at 3.02-3.15 TB/s (flashcore 3.11-3.15, cuDNN
# 3.09-3.13, SDPA flash 3.02-3.08). That is about the HBM read bandwidth: the copy ceiling in
# `perf.json` (3.02 TB/s, another run on the same GPU, at commit `5403789`; 3.02 at
# `d8fa890` too, and `decode.json`'s run at `65d6c6c` measured 3.02 again; both stale since
# 2026-11-28) counts a
# read and a write. flashcore's split-KV kernel is ahead of
# cuDNN at every cache length here, by 1.004x-1.023x (the line above). Long-cache decode is a solved
# problem for exact attention.
#
# ## 8. What sub-quadratic methods would trade away
#
# Linear attention, state-space layers and most sparse patterns change the *function*. They
# replace softmax over all previous tokens with a fixed-size state or a hand-picked subset, and a
# model must be trained for that function. They are not faster kernels for the same attention.
# What exact-attention kernels can offer for long inputs is what was measured here:
#
# * full attention at near-constant efficiency from 8K on (555-662 TFLOP/s, printed below;
#   non-causal drifts down 5.9% by 128K and 16% by 512K), costing S² honestly;
# * memory linear in S (inputs and output only);
# * a sliding window, which is exact attention of a banded mask at linear cost;
# * decode over multi-million-token caches at HBM bandwidth.

# %%
fc_long = [r for r in sweep if r["impl"] == "flashcore" and "tflops" in r and r["S"] >= 8192]
print(
    f"flashcore TFLOP/s for S >= 8K (causal and non-causal): {min(r['tflops'] for r in fc_long):.0f}-{max(r['tflops'] for r in fc_long):.0f}"
)
top = max(fc_long, key=lambda r: (r["S"], r["causal"]))
print(
    f"longest full-attention call: S={top['S']} causal={top['causal']}, H={top['H']}: {top['timing']['median_ms'] / 1e3:.1f} s"
)

# %% [markdown]
# ## Conclusion
#
# (Measured numbers are from `long_context.json`, commit `382853b`: stale, the kernels as of
# that commit, before the changes listed at the top; not re-recorded.)
#
# The prior report measured a real kernel problem and drew the wrong conclusion. Its kernel
# grew faster than S² and failed at 32K because its tile grew with S. Tiling the keys fixes
# both. Quadratic cost remains, and it is a property of the function, not of the kernel.
# flashcore runs 8K → 512K tokens (1M causal) at 555-662 TFLOP/s with no extra memory, is correct past
# $2^{31}$ elements, and offers the linear-cost window for models trained with one. No "12+
# months of sparse attention" were needed for any of it.
