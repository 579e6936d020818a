# %% [markdown]
# # 08 · Context parallelism: exact attention over a sequence split across GPUs
#
# Past about a million tokens one GPU is too slow (notebook 05: the quadratic law) and, for
# training, too small. The standard answer is context parallelism: every GPU holds a shard of
# the sequence of Q, K and V, and the K/V shards travel around a ring of GPUs while each GPU
# attends its queries to the block in hand. Nothing is approximated: partial outputs over
# disjoint key sets merge exactly through their log-sum-exp, which flashcore's kernel already
# returns.
#
# **What this notebook claims, and how it could fail.** `flashcore.parallel.ring_attention`
# (over `torch.distributed`, one process per device) computes the same attention as one
# device, under the project's error rule against the float64 single-device reference, for
# causal (zigzag and contiguous sharding) and full attention, GQA, sliding windows and
# sequence lengths that do not divide evenly, forward and backward; planted bugs must fail
# the same check. On two GPUs (the record rendered here: two H200s) it should scale with
# efficiency ≥ 0.90 at S ≥ 512K, hide its communication behind compute, and beat PyTorch's own
# `context_parallel` around SDPA. Every verdict below prints `False` when the measurement says
# so.
#
# The two-GPU record rendered here is `results/nvidia-h200-x2/context_parallel.json` (two
# H200s, commit `dacc006`, 2026-11-30; `tools/gpu_cp.sh <out> --budget-s 330`, the full
# bench, S 128K–2M). Its status line reads current. Two earlier runs of the same bench on the
# same two H200s are kept as logs and set beside it in section 4: the previous record
# (`c481407`, 2026-11-29; `logs/context_parallel_c481407.json`), which went stale by
# `parallel.py` when the ring's backward moved to the Gluon backward per block in `1d1b8c9`
# (section 5b), and a partial re-run at `a64b0bb` (2026-11-29, after that move; S 128K and
# 256K only, its 150 s budget skipped the rest; `logs/context_parallel_a64b0bb.json`). Two
# older runs on the same two H200s are shown beside it as history, both stale (older kernels):
# `context_parallel_first_run.json` (`1a9ee8b`, the same bench; section 4's "first run"
# columns) and `context_parallel_torch_check.json` (`eb435d7`, the check of PyTorch's output
# after the fix described in section 4). The two-H100 records
# (`results/nvidia-h100-80gb-hbm3-x2/`, commit `382853b`, before the $D_v \ne D$ change) are
# stale and not rendered; `-p RECORDED_GPU nvidia-h100-80gb-hbm3-x2` renders them with their
# status lines. Sections 1, 2 and 3a run live on today's code.
#
# Sections: (1) the merge identity, derived and checked; (2) the ring and the zigzag load
# balance; (3) correctness: 2 processes live on CPU, the recorded GPU grid; (4) speed on two
# GPUs: scaling, overlap, memory, Ulysses beside the ring, and PyTorch's context parallelism;
# (5) training: the attention's forward + backward and a transformer block's training step,
# checked and timed beside PyTorch's context parallelism, before and after the ring's
# backward moved to the Gluon backward per block, and the forward + backward of the current
# record.

# %% tags=["parameters"]
PROFILE = "auto"  # "auto" | "gpu" | "cpu"
SWEEP = "quick"  # GPU profile with 2 or more GPUs: "quick" (S 128K-256K, about 2 minutes)
# or "full" (S 128K-2M, an S predicted past the bench's default 240 s budget skipped;
# the recorded run, tools/gpu_cp.sh --budget-s 330, reached 2M on two H200s), -p SWEEP full
CPU_RANKS = 2  # processes of the live CPU check (gloo, Triton interpreter)
RECORDED_GPU = "nvidia-h200-x2"  # which recorded run sections 3-4 render (two H200s)
SAVE_FIGURES = True

# %%
from flashcore.notebook import live_ratio, setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
import json
import math

import matplotlib.pyplot as plt
import torch

from flashcore import parallel as P
from flashcore.plots import save_figure
from flashcore.results import RESULTS_DIR, describe, device_slug, read_result, recorded_devices
from flashcore.studies import context_parallel as CP
from flashcore.studies import cp_report as R
from flashcore.studies.records import status_line_for

# %% [markdown]
# ## 1. The merge identity
#
# Split the keys of one query row into disjoint sets $A$ and $B$ (two GPUs' blocks). With
# scaled scores $s_j$, each partial computation returns its normalised output and its
# log-sum-exp:
#
# $$L_A = \log \sum_{j \in A} e^{s_j}, \qquad O_A = \sum_{j \in A} e^{s_j - L_A}\, v_j .$$
#
# The whole row's softmax denominator is $e^{L_A} + e^{L_B}$, so $L = \log(e^{L_A} + e^{L_B})$
# and
#
# $$O = \sum_{j \in A \cup B} e^{s_j - L} v_j = e^{L_A - L}\, O_A + e^{L_B - L}\, O_B .$$
#
# Exact, in any order, for any number of blocks. Computed as written, $e^{L_A}$ overflows
# (fp32 overflows past $L \approx 88$); subtracting $m = \max(L_A, L_B)$ first keeps both
# weights in $[0, 1]$: $L = m + \log(e^{L_A - m} + e^{L_B - m})$. A block that saw no key has
# $L = -\infty$ and weight 0; a row that saw nothing at all keeps $L = -\infty$ and output 0
# (the code substitutes $m = 0$ so that $-\infty - (-\infty)$ never makes a NaN).
# `flashcore.parallel.merge_partials` is this step. Below: three random, non-contiguous key
# subsets merged in a random order against the whole row, in float64, with scores large
# enough that the unshifted form overflows. Outputs are merged in fp32; an fp64 lse (what
# float32 inputs carry, `kernels._softmax.lse_dtype`) stays fp64 through the merge. The
# planted bug that skips the rescale of the running output is not in `flashcore.parallel`:
# the lab's `planted(...)` block (`flashcore/studies/cp_planted.py`) replaces the merge step
# for its duration, as it replaces the ring's steps in the checks of section 3.

# %%
gen = torch.Generator().manual_seed(0)
q = torch.randn(2, 4, 16, 32, generator=gen, dtype=torch.float64)
k = 30 * torch.randn(2, 4, 300, 32, generator=gen, dtype=torch.float64)  # |s| past 88
v = torch.randn(2, 4, 300, 32, generator=gen, dtype=torch.float64)
scale = 1 / math.sqrt(32)
scores = q @ k.transpose(-1, -2) * scale
whole, whole_lse = torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)
subsets = torch.randperm(300, generator=gen).chunk(3)


def partial(idx):
    """One block's normalised output and log-sum-exp over the keys ``idx``."""
    s = scores[..., idx]
    return torch.softmax(s, -1) @ v[:, :, idx], torch.logsumexp(s, -1)


out, lse = torch.zeros_like(whole), torch.full_like(whole_lse, -math.inf)  # "nothing seen yet"
for idx in subsets:
    out, lse = P.merge_partials(out, lse, *partial(idx))
naive_overflows = bool(torch.isinf(torch.exp(whole_lse.float())).any())
err = float((out.double() - whole).abs().max())
print(
    f"max |merged - whole| = {err:.2e} (outputs merged in fp32); max |lse error| = "
    f"{float((lse.double() - whole_lse).abs().max()):.2e}; exp(L) overflows fp32: {naive_overflows}"
)

# %%
# NBVAL_CHECK_OUTPUT
none = torch.full((1, 1, 3), -math.inf)
zero_out, zero_lse = P.merge_partials(torch.zeros(1, 1, 3, 4), none, torch.zeros(1, 1, 3, 4), none)
print("merge of 3 random key subsets equals the whole row (fp32 tolerance 1e-5):", err < 1e-5)
print(
    "rows that see no key stay lse=-inf, output 0, no NaN:",
    bool(torch.isneginf(zero_lse).all() and (zero_out == 0).all()),
)
first, rest = partial(subsets[0]), partial(torch.cat(subsets[1:]))
with CP.planted("merge_without_rescale"):
    bad, _ = P.merge_partials(*first, *rest)
print(
    "the planted bug (running output not rescaled) differs from the identity:",
    float((bad.double() - whole).abs().max()) > 0.1,
)

# %% [markdown]
# ## 2. The ring, and why causal attention needs the zigzag
#
# With N ranks, at step t rank r holds the K/V of rank (r − t) mod N. It posts the send of
# that block to rank r + 1 and the receive of the next one from rank r − 1
# (`torch.distributed.batch_isend_irecv`), attends its queries to the block in hand while the
# transfer runs (two buffers), then waits. After N steps every query has seen every key;
# only the Hkv key/value heads travel (GQA). Each (query chunk, key chunk) pair is either
# *full* (every query sees every key: the kernel without a mask), *masked* (the causal
# diagonal or a window's edge: the kernel with the causal mask at the pair's global offset),
# or *skipped* (the mask hides everything).
#
# Causal attention makes late queries expensive. With contiguous shards the last rank does
# 2N − 1 times the work of the first, and everyone waits for it. Zigzag sharding cuts the
# sequence into 2N chunks and gives rank r chunks r and 2N − 1 − r, one cheap and one
# expensive. The counts below are the visible (query, key) pairs each rank computes,
# computed from the same classification the ring uses (`work_per_rank`); uneven S gives the
# first S mod 2N chunks one extra row (no padding).

# %%
S_BAL = 1 << 16
work = R.work_balance(S_BAL, (2, 4, 8))
balance = {key: max(w) / min(w) for key, w in work.items()}  # max/min work per rank
fig = R.plot_work_balance(work, S_BAL)
if SAVE_FIGURES:
    save_figure(fig, "08_zigzag_balance")
plt.show()

# %%
# Which block each rank computes at each step (N = 4, causal, zigzag): the ring's schedule.
print("rank r at step t holds the K/V of rank (r - t) mod N; blocks per (query chunk, key chunk):")
schedule = R.ring_schedule(world_size=4)
print(table(schedule, list(schedule[0])))

# %%
# NBVAL_CHECK_OUTPUT
print(
    "zigzag max/min causal work per rank (N = 2, 4, 8):",
    ", ".join(f"{balance[(n, 'zigzag')]:.3f}" for n in (2, 4, 8)),
    "| contiguous:",
    ", ".join(f"{balance[(n, 'contiguous')]:.2f}" for n in (2, 4, 8)),
)
print("zigzag balanced within 1%:", all(balance[(n, "zigzag")] < 1.01 for n in (2, 4, 8)))

# %% [markdown]
# ## 3. Correctness
#
# Each rank generates the same global inputs (seeded), keeps its shard, runs the ring, and
# checks its own rows against the float64 single-device reference (every row at small S,
# sampled rows — every chunk's edges plus random ones — at long S). The ranks' error terms
# are combined into the global rule (largest error, largest same-precision error, largest
# floor), so the verdict is the rule applied to the whole output. Gradient cases gather dq,
# dk, dv and apply the gradient rule of `flashcore.validate_backward`. Planted bugs: a block
# merged without rescaling the running output, the zigzag's second chunk off by one (2N − 2 −
# r) in the masks, and a backward whose ranks drop the dK/dV accumulated before them. Each is
# planted by the lab (`CP.planted`) in every rank's own process for the duration of its case,
# by replacing one step of `flashcore.parallel` (the merge, the zigzag's chunks, the dK/dV
# accumulation); the shipped module carries none of them. A bug counts as caught when the
# rule rejects its output, not when its case raises. The GPU grid (3b) also runs
# `flashcore.parallel_ulysses` (all-to-all over heads; the `ulysses` cases) and a fourth
# planted bug in it (`ulysses_rank_order`).
#
# ### 3a. Live: 2 processes on CPU (gloo, Triton interpreter, fp16/fp32)
#
# This runs in both profiles (the GPU profile cannot run two NCCL ranks on one GPU) wherever
# Triton's interpreter can: Triton 3.6 needs numpy < 2.4, which `make env` pins; in an
# environment with a newer numpy (the GPU image has 2.5) the cell says so and skips.

# %%
from flashcore._checks import interpreter_blocker

blocker = (
    interpreter_blocker()
)  # a GPU image may carry a numpy that Triton 3.6's interpreter rejects
if blocker:
    live = None
    print(f"live CPU check skipped: {blocker}; `make test` runs it in the pinned environment")
else:
    live = CP.spawn_check(CP.cpu_grid(), world_size=CPU_RANKS)
    # ratios of float32/float16 errors a few roundings in size: their digits move with the
    # CPU's SIMD code, so they print as the side of the rule's 1 they fall on (live_ratio)
    ratio = {"ratio": lambda r: live_ratio(r, "cpu")}
    print(table(live, ["name", "rows_checked", "ratio", "passed"], ratio))
    grad_rows = [r for r in live if r.get("grad_ratios")]
    print(table(grad_rows, ["name", "grad_ratio", "grad_passed"], {"grad_ratio": ratio["ratio"]}))

# %%
# NBVAL_CHECK_OUTPUT
if live is not None:
    live_summary = CP.summarize_cases(live)
    print(
        f"{live_summary['cases']} cases on {CPU_RANKS} gloo ranks pass the error rule:",
        live_summary["failed"] == 0,
    )
    print(
        f"planted bugs caught: {live_summary['planted_bugs_caught']}/{live_summary['planted_bugs']}"
    )

# %% [markdown]
# ### 3b. Recorded: the GPU grid (two H200s; bf16 and fp16, whole outputs at S ≈ 1K–4K,
# sampled rows at S = 64K and 128K, gradients at S = 4099)

# %%
recorded = RECORDED_GPU in recorded_devices("context_parallel")
record = read_result("context_parallel", RECORDED_GPU) if recorded else None
if recorded:
    print("recorded on", describe(record), f"({record['world_size']} processes, one per GPU)")
    print(status_line_for("context_parallel", RECORDED_GPU))
    print(table(record["cases"], ["name", "rows_checked", "ratio", "passed"], {"ratio": "{:.3f}"}))
else:
    print(
        f"context parallelism has not been recorded on {RECORDED_GPU} yet "
        "(tools/gpu_cp.sh on a machine with two GPUs writes the record)"
    )

# %%
# NBVAL_CHECK_OUTPUT
if recorded:
    s = record["summary"]
    print(
        f"recorded GPU grid: {s['cases']} cases, {s['failed']} failed; planted bugs caught "
        f"{s['planted_bugs_caught']}/{s['planted_bugs']}; every case passes: {s['failed'] == 0}"
    )
else:
    print("recorded GPU grid: not recorded")

# %% [markdown]
# ## 4. Speed on two GPUs
#
# The recorded run (`tools/gpu_cp.sh`): **B = 1, Hq = 8 query heads, Hkv = 2 key/value heads
# (GQA 4), D = 128, bf16**, global S 128K to 2M within a 330 s budget (`--budget-s 330`),
# which skipped nothing (the record's `skipped` list is empty): every implementation at
# 128K-1M (the forward + backward, the ring's and PyTorch CP's, at 128K and 256K: the
# record's `train_max_s`); at 2M (the record's `cp_only_from`) only the ring, its two
# diagnostic runs and Ulysses, so 2M has no one-GPU time, no scaling efficiency and no
# PyTorch CP. Eight query heads keep the longest call (the ring at 2M, full attention) at
# about 17 s (17067.5 ms); the ratios below do not depend on the head count (all
# implementations scale linearly in it). Per S and mask, in one process group:
#
# * `flashcore_cp`: the ring (zigzag for causal, contiguous for full attention);
# * `flashcore_cp_nocomm`: the same blocks and merges with every transfer skipped;
# * `comm_only`: the N − 1 ring transfers alone;
# * `flashcore_1gpu`: `flashcore.attention` on the whole sequence, each GPU alone;
# * `flashcore_ulysses`: `flashcore.parallel_ulysses` (DeepSpeed-Ulysses: an all-to-all gives
#   each GPU the whole sequence for half the heads, 4 query and 1 key/value head, one
#   `flashcore.attention` call attends it, a second all-to-all brings the outputs back); its
#   own table below sets it beside the ring;
# * `torch_cp_cudnn`, `torch_cp_flash`: `torch.distributed.tensor.experimental.context_parallel`
#   around SDPA with the cuDNN / flash backend (its ring takes no `enable_gqa`, so K/V are
#   expanded to 8 heads and it moves 4× flashcore's bytes; causal uses its head-tail load
#   balancer, the same layout as the zigzag);
# * `flashcore_cp_fwd_bwd`: the ring forward + backward (a training step's attention; each
#   block's backward runs the Gluon backward where `flashcore.attention`'s autograd would,
#   since `1d1b8c9`: section 5b);
# * `torch_cp_cudnn_fwd_bwd`, `torch_cp_flash_fwd_bwd`: PyTorch CP's forward + backward, on
#   the same inputs (section 5c).
#
# Times are wall clock per call from a barrier to the end of the slowest rank (median of 3
# calls; one call from S = 1M, so the 1M and 2M rows are single samples). Scaling
# efficiency = T(1 GPU) / (2 · T(2 GPUs)); the hidden fraction of communication =
# 1 − (T(ring) − T(no transfers)) / T(transfers alone).
#
# In this sweep a step's K/V message is a fraction of a percent of the step's compute (ring
# attention is compute-bound once a shard holds more than about a thousand rows: the bytes
# grow with the shard, the FLOPs with its square): the transfers alone (`comm_only`) take
# 0.3-3.4 ms against 30.7 ms and more per ring call. The ring's excess over the same compute
# without transfers (`ring_overhead`, as a fraction of the ring) ranges from 0.000 to 0.033
# (S = 1M, full: 136 ms against the 1.7 ms the transfers alone take). An excess larger than
# the transfers could add even if none were hidden is not their time: run-to-run variation
# or a slowdown of the blocks while a transfer runs, which this record does not separate; so
# the sweep cannot say how much of the transfers is hidden.
# The record's *overlap probe* is the informative case: short shards (S = 16K and 64K), MHA
# (8 KV heads, 4× the bytes of GQA 4), full attention, median of 10 calls, where the
# transfers alone are a sizable fraction of the compute. On the two H200s: at S = 16K the
# transfers are not hidden (hidden fraction 0.00: the ring takes 2.17 ms against 1.90 ms
# without transfers and 0.25 ms for the transfers alone), at 64K nearly all of them are
# (0.96: 15.40 ms against 15.37 ms and 0.71 ms). So "hides its communication" is not met at
# 16K; at 64K the transfers are mostly hidden, in the record's probe and in `c481407`'s
# (0.72 there: 15.58 ms against 15.40 ms and 0.65 ms). The 64K fraction rests on an excess of
# 0.03–0.18 ms in a call of about 15 ms, about 1% of it, which one probe per run does not
# pin down further.

# %%
if PROFILE == "gpu":
    ngpu = torch.cuda.device_count()
    if ngpu < 2:
        print(
            f"the GPU profile measures context parallelism on 2 GPUs; this machine has {ngpu}: "
            "rendering the record instead"
        )
    else:  # the ranks are processes of their own: the command `cp bench` (CP.run_study)
        cmd = CP.bench_command(
            f"context_parallel_{SWEEP}", (131072, 262144) if SWEEP == "quick" else ()
        )
        print(" ".join(cmd[1:]))
        returncode, output = CP.run_bench_command(cmd, cwd="..")
        print(output)
        print(
            f"live run recorded as {device_slug()}-x2/context_parallel_{SWEEP}.json "
            f"(the figures below render the {RECORDED_GPU} record)"
        )


# %%
if recorded:
    print(
        table(
            R.speed_table(record),
            ["S", "causal", "impl", "time_ms", "tflops", "peak_mem_gib", "eff", "ring_overhead"],
            {"time_ms": "{:.1f}"},
        )
    )
    comm_ms = [r["time_ms"] for r in record["rows"] if r["impl"] == "comm_only"]
    ring_ms = [r["time_ms"] for r in record["rows"] if r["impl"] == "flashcore_cp"]
    print(
        "ring_overhead: (ring - the same compute without transfers) / ring. In this record the "
        f"transfers alone take {min(comm_ms):.1f}-{max(comm_ms):.1f} ms against "
        f"{min(ring_ms):.1f}-{max(ring_ms):.1f} ms per ring call, so this sweep cannot tell "
        "how much of them is hidden; the overlap probe below measures it at short S."
    )
    for r in record.get("skipped", []):
        print("skipped:", r)
    for r in record.get("torch_cp_checks", []):
        print("PyTorch CP output vs float64 (sampled rows; see the section below):", r)
    if record.get("overlap_probe"):
        print("\noverlap probe (MHA, full attention, short shards):")
        columns = list(R.OVERLAP_COLUMNS)
        print(table(record["overlap_probe"], columns, {c: "{:.2f}" for c in columns[1:]}))

# %%
if recorded:
    fig = R.plot_scaling(record, describe(record))
    if SAVE_FIGURES:
        save_figure(fig, "08_scaling_overlap")
    plt.show()

# %%
if recorded:
    fig = R.plot_peak_memory(record)
    if SAVE_FIGURES:
        save_figure(fig, "08_peak_memory")
    plt.show()

# %% [markdown]
# **The record beside the runs before it.** Two earlier runs of the same bench on the same
# two H200s are kept as logs. The previous record, `c481407` (2026-11-29, `--budget-s 330`,
# S 128K–2M; `logs/context_parallel_c481407.json`, `logs/cp_bench_c481407.log`), is stale by
# `parallel.py` alone: its ring ran the Triton backward on every block. A partial re-run at
# `a64b0bb` (2026-11-29, `cp bench --record --budget-s 150`, after the ring's backward moved
# to the Gluon backward; `logs/context_parallel_a64b0bb.json`, `logs/cp_bench_a64b0bb.log`)
# covered the GPU grid and S 128K and 256K; its budget skipped 512K–2M. The forward kernels
# are the same in all three runs, so the forward rows measure the run-to-run spread; the
# ring's forward + backward is the row whose code changed after `c481407`. Below: each run's
# GPU grid, and per implementation the record's time over that run's at the (S, mask) both
# timed. Against `c481407` the forward rows lie at 0.952–1.071 (the ring's at 0.952–1.028;
# the four above 1.05 are causal, three of them PyTorch CP's), the transfers alone
# (`comm_only`, calls of 0.3–3.4 ms) at 0.788–1.023, and the ring's forward + backward at
# 0.804–0.866: the Gluon backward. Against `a64b0bb` (the same backward) every row but the
# transfers alone lies at 0.956–1.034, the forward + backward at 0.986–1.016.

# %%
earlier = {}  # the runs before the record, kept as logs
for commit in ("c481407", "a64b0bb"):
    path = RESULTS_DIR / RECORDED_GPU / "logs" / f"context_parallel_{commit}.json"
    if recorded and path.exists():
        earlier[commit] = json.loads(path.read_text())
now_ms = (
    {(r["S"], r["causal"], r["impl"]): r["time_ms"] for r in record["rows"]} if recorded else {}
)
ratios = {}  # (run, impl) -> the record's time over that run's, at each shape both timed
for commit, run in earlier.items():
    s = run["summary"]
    print(f"{commit} (log):", describe(run))
    print(
        f"  GPU grid: {s['cases']} cases, {s['failed']} failed, worst ratio "
        f"{s['worst_ratio']:.3f}; planted bugs caught {s['planted_bugs_caught']}/"
        f"{s['planted_bugs']}; S timed: "
        + ", ".join(f"{S // 1024}K" for S in sorted({r["S"] for r in run["rows"]}))
    )
    for r in run["rows"]:
        key = (r["S"], r["causal"], r["impl"])
        if key in now_ms:
            ratios.setdefault((commit, r["impl"]), []).append(now_ms[key] / r["time_ms"])
if ratios:
    rows = [
        {"run": c, "impl": i, "shapes": len(xs), "min": min(xs), "max": max(xs)}
        for (c, i), xs in ratios.items()
    ]
    print("the record's time over the earlier run's (same S and mask):")
    print(table(rows, list(rows[0]), {"min": "{:.3f}", "max": "{:.3f}"}))
    ring = ratios.get(("c481407", "flashcore_cp"), [])
    fb = ratios.get(("c481407", "flashcore_cp_fwd_bwd"), [])
    fb_same = ratios.get(("a64b0bb", "flashcore_cp_fwd_bwd"), [])
    print(
        f"the ring's forward within 0.95-1.05 of c481407's at all {len(ring)} shapes:",
        bool(ring) and all(0.95 <= x <= 1.05 for x in ring),
    )
    print(
        f"its forward + backward in less time than c481407's (the Triton backward) at all "
        f"{len(fb)} shapes:",
        bool(fb) and max(fb) < 1.0,
    )
    print(
        f"its forward + backward within 0.95-1.05 of a64b0bb's (the Gluon backward) at all "
        f"{len(fb_same)} shapes:",
        bool(fb_same) and all(0.95 <= x <= 1.05 for x in fb_same),
    )
else:
    print(f"no earlier run kept as a log for {RECORDED_GPU}")

# %% [markdown]
# ### Targets, shape by shape
#
# The targets: scaling efficiency ≥ 0.90 at every S ≥ 512K, causal and full; the ring at
# least as fast as PyTorch's `context_parallel` + SDPA cuDNN at every S ≥ 256K. Each row below
# is one measured shape of the record. The "first run" columns come from
# `context_parallel_first_run.json`, an earlier run of the same bench on the same two H200s
# (commit `1a9ee8b`, 2026-11-22; stale: older kernels), so a difference between the columns
# mixes run-to-run spread with the kernel changes since. In that run PyTorch CP was timed
# causal only (its load balancer then refused non-causal calls: that record's `skipped`),
# so its non-causal column prints `-`. Efficiency needs a one-GPU time, which the record
# has up to 1M: the efficiency target is checked at 512K and 1M, and the 2M rows print `-`
# (neither one GPU nor PyTorch CP was timed there). The last two columns set the ring's
# forward + backward beside PyTorch CP + cuDNN's where the record timed both, 256K in this
# table's range (section 5c has 128K too).


# %%
if recorded:
    try:
        first = read_result("context_parallel_first_run", RECORDED_GPU)
    except FileNotFoundError:
        first = None
    now = R.target_rows(record)
    before = {(r["S"], r["causal"]): r for r in R.target_rows(first)} if first else {}
    shape_rows = R.target_table(now, before)
    print("record:", describe(record))
    print(status_line_for("context_parallel", RECORDED_GPU))
    if first:
        print("first run:", describe(first))
        print(status_line_for("context_parallel_first_run", RECORDED_GPU))
    print(table(shape_rows, list(shape_rows[0])))

# %%
# NBVAL_CHECK_OUTPUT
if recorded:
    effs = [r for r in now if r["eff"] is not None]
    low = [r for r in effs if r["eff"] < 0.90]
    print(
        f"scaling efficiency >= 0.90 at every measured S >= 512K, causal and full: "
        f"{len(effs) - len(low)}/{len(effs)} shapes, all: {bool(effs) and not low} "
        f"(min {min((r['eff'] for r in effs), default=float('nan')):.3f})"
    )
    for r in record.get("skipped", []):
        print(f"  not measured: S={r['S'] // 1024}K (skipped: {r['reason']})")
    first_effs = [r["eff"] for r in before.values() if r["eff"] is not None]
    if first_effs:
        print(
            f"  first run: {sum(e >= 0.90 for e in first_effs)}/{len(first_effs)} shapes, "
            f"min {min(first_effs):.3f}"
        )
    xs = [r for r in now if r["x_torch_cudnn"] is not None]
    slow = [r for r in xs if r["x_torch_cudnn"] < 1.0]
    print(
        f"flashcore ring >= 1.0x PyTorch context_parallel + SDPA cuDNN at every measured "
        f"S >= 256K: {len(xs) - len(slow)}/{len(xs)} shapes, all: {bool(xs) and not slow}"
    )
    for r in slow:
        print(
            f"  missed: S={r['S']} {'causal' if r['causal'] else 'full'}, {r['x_torch_cudnn']:.3f}x"
        )
    first_xs = [r["x_torch_cudnn"] for r in before.values() if r["x_torch_cudnn"] is not None]
    if first_xs:
        print(
            f"  first run: {sum(x >= 1.0 for x in first_xs)}/{len(first_xs)} shapes "
            f"(causal only), min {min(first_xs):.3f}x"
        )
    else:
        print(f"  first run: none recorded on {RECORDED_GPU}")
else:
    print("speed targets: not recorded")

# %% [markdown]
# ### PyTorch's output under the same rule, and what went wrong with the first check
#
# The first GPU record of these checks (two H200s, commit `7c5d50e`, 2026-11-22; it was then
# `results/nvidia-h200-x2/context_parallel.json`, which the current record replaced: git
# history keeps it) showed PyTorch's context-parallel output failing the error rule at
# S = 128K by a factor of 13–56, causal and not, cuDNN and flash alike, while its output order
# agreed with `context_parallel_unshard` (the first run, `1a9ee8b`, failed the same way).
# That was this harness, not PyTorch.
# The bench drew Q and K from a seeded generator but V with `torch.randn_like(k)`, i.e. from
# the process's default CUDA generator, and PyTorch seeds each process's default CUDA
# generator from `/dev/urandom` (`CUDAGeneratorImpl::seed()`), so the two ranks built
# different V tensors and each sharded its own. PyTorch's ring then attended to a V that was
# half rank 0's and half rank 1's, while the reference used rank 0's. (The flashcore ring's
# correctness grid draws every input from the seeded generator and was not affected; timings
# do not depend on the values.)
#
# The evidence, run live below on CPU: two gloo processes around PyTorch's own
# `context_parallel` (its sharding, head-tail load balancer, ring, fp32 merge and unshard;
# only the per-block kernel is the CPU one), checked by the bench's own code. With every input
# seeded it passes; with V drawn per rank it fails, its error the size of the output itself
# (the ratio is that error over the rule's bound, so it is far larger here than in the bf16
# GPU record: float32's bound is about 2^16 times smaller). The check runs in float32 because
# PyTorch's bf16 CPU kernels take whatever code path oneDNN picks for the CPU (AVX512-BF16
# on one machine, AMX tiles on a recent Xeon), and a bf16 verdict would then judge the CPU's
# kernels rather than the check (in bf16 its test failed on a 2-core Xeon, in one of two fresh
# runs and under `ATEN_CPU_CAPABILITY=avx2`, and passes bit for bit on an AVX512-BF16 EPYC
# under every setting). The check now also records whether the inputs were identical on every rank, so it cannot
# mislead this way again. PyTorch's merge itself runs in fp32 (`_cp_options.convert_to_f32`,
# default on), so no precision loss was expected there. After the fix the GPU check was
# re-run on the two H200s (`tools/gpu_cp.sh <out> torch-check`, i.e. `torchrun
# --nproc-per-node 2 -m flashcore.studies.context_parallel --seqlen 131072 --record`, commit
# `eb435d7`: `context_parallel_torch_check.json`, stale, older kernels), then on two H100s
# (`382853b`, stale, not rendered). The current bench record checks PyTorch's output itself
# at S = 128K (its `torch_cp_checks`: 4 outputs, each recording whether the inputs were
# identical on every rank); those are the recorded verdicts of the next cell, and the stale
# re-check of `eb435d7` is its last.

# %%
try:
    torch_cpu = CP.torch_cp_cpu_check(1024)
    print(
        table(
            torch_cpu,
            [
                "inputs",
                "causal",
                "rows_checked",
                "ratio",
                "passed",
                "inputs_identical_across_ranks",
                "unshard_agrees_with_positions",
            ],
            {"ratio": lambda r: live_ratio(r, "cpu")},  # on CPU, see live_ratio
        )
    )
except Exception as exc:  # a private PyTorch API: say so rather than stop the notebook
    torch_cpu = None
    print(f"PyTorch CP CPU check could not run: {type(exc).__name__}: {exc}")

# %%
# NBVAL_CHECK_OUTPUT
if torch_cpu is not None:
    by_inputs = {(r["inputs"], r["causal"]): r for r in torch_cpu}
    print(
        "PyTorch context_parallel (CPU, 2 ranks), same inputs on every rank, passes the rule:",
        all(by_inputs[("seeded", c)]["passed"] for c in (False, True)),
    )
    print(
        "the same check with V drawn per rank fails it, and flags the inputs as differing:",
        all(
            not by_inputs[("v unseeded", c)]["passed"]
            and not by_inputs[("v unseeded", c)]["inputs_identical_across_ranks"]
            for c in (False, True)
        ),
    )
if recorded:
    checks = record.get("torch_cp_checks", [])
    valid = [c for c in checks if c.get("inputs_identical_across_ranks")]
    print(
        f"recorded GPU check of PyTorch's output ({len(checks)} at S = "
        f"{checks[0]['S'] if checks else '-'}) made with identical inputs on every rank:",
        bool(checks) and len(valid) == len(checks),
    )
    if valid:
        print(
            "  and PyTorch's output passes the error rule there:",
            all(c["passed"] for c in valid),
        )
if RECORDED_GPU in recorded_devices("context_parallel_torch_check"):
    rechecked = read_result("context_parallel_torch_check", RECORDED_GPU)
    print("re-check after the fix:", describe(rechecked))
    print(status_line_for("context_parallel_torch_check", RECORDED_GPU))
    rechecks = rechecked["torch_cp_checks"]
    for c in rechecks:
        print(f"  S={c['S']} causal={c['causal']} {c['impl']}: ratio {c['ratio']:.3f}")
    print(
        f"re-check ({len(rechecks)} outputs): identical inputs on every rank and PyTorch's "
        "output under the error rule:",
        bool(rechecks)
        and all(c["inputs_identical_across_ranks"] and c["passed"] for c in rechecks),
    )

# %%
if recorded:
    print("attention throughput per GPU in the record (TFLOP/s), S >= 512K:")
    for causal in (False, True):
        ring = {r["S"]: r for r in R.rows_of(record, "flashcore_cp", causal) if r["S"] >= 2**19}
        one = {r["S"]: r for r in R.rows_of(record, "flashcore_1gpu", causal)}
        for S, r in ring.items():
            alone = f"{one[S]['tflops']:.0f}" if S in one else "-"
            print(
                f"  S={S // 1024}K causal={causal!s:5}: the ring {r['tflops'] / record['world_size']:.0f} "
                f"per GPU, one GPU on the whole sequence {alone}"
            )

# %% [markdown]
# ### Ulysses beside the ring
#
# Ulysses moves Q, K and V to a head split before the attention and the output back after it
# (two all-to-alls, not overlapped with compute) and computes with one `flashcore.attention`
# call per GPU; the ring moves only K/V, overlapped with compute, but splits each GPU's work
# into blocks, one step's at a time, and merges their outputs. The table sets, per S and
# mask, the ring, the ring with every transfer skipped, Ulysses, and half of one GPU's time on
# the whole sequence (what two GPUs would take at efficiency 1). `ring / ulysses` above 1:
# Ulysses is the faster. `no transfers / (1 GPU / 2)` above 1: the ring's blocks and merges
# alone take longer than half of one GPU's call, before any transfer.

# %%
if recorded:
    ulysses_rows = []
    for causal in (False, True):
        ring = {r["S"]: r for r in R.rows_of(record, "flashcore_cp", causal)}
        nocomm = {r["S"]: r for r in R.rows_of(record, "flashcore_cp_nocomm", causal)}
        one = {r["S"]: r for r in R.rows_of(record, "flashcore_1gpu", causal)}
        for u in R.rows_of(record, "flashcore_ulysses", causal):
            S = u["S"]
            half = one[S]["time_ms"] / 2 if S in one else None
            ulysses_rows.append(
                {
                    "S": S,
                    "causal": causal,
                    "ring_ms": f"{ring[S]['time_ms']:.1f}",
                    "no_transfers_ms": f"{nocomm[S]['time_ms']:.1f}",
                    "ulysses_ms": f"{u['time_ms']:.1f}",
                    "1 GPU / 2 (ms)": "-" if half is None else f"{half:.1f}",
                    "ring / ulysses": f"{ring[S]['time_ms'] / u['time_ms']:.3f}",
                    "no transfers / (1 GPU / 2)": (
                        "-" if half is None else f"{nocomm[S]['time_ms'] / half:.3f}"
                    ),
                    "ulysses eff": (
                        "-"
                        if u.get("scaling_efficiency") is None
                        else f"{u['scaling_efficiency']:.3f}"
                    ),
                }
            )
    if ulysses_rows:
        print(table(ulysses_rows, list(ulysses_rows[0])))
    else:
        print(f"the {RECORDED_GPU} record has no Ulysses rows")

# %% [markdown]
# `flashcore.parallel_dispatch.context_parallel_attention(..., strategy="auto")` follows this
# table as `c481407`'s record gave it (`parallel_dispatch.ULYSSES_FROM`): Ulysses for full
# attention from S = 512K on two ranks (the ring 1.06–1.13× its time there), the ring for
# causal calls (within 5%, no trend), for calls that need gradients (section 5's training
# step: the ring faster at 64K and 128K, within 1.1% after) and for rank counts not measured.
# In the current record the ring takes 1.005× Ulysses's time at full 512K, level, and 1.103×
# and 1.121× at 1M and 2M; causal, 0.954–1.022, the ring the faster at 1M and 2M. So the
# choice of Ulysses at full 512K now rests on 0.5% in one run; the others stand.
#
# **Where the ring's extra time goes.** A rank of the non-causal ring runs, per step, a NaN
# fill of its scratch (so an element the kernel skips fails the check), one forward block
# into that scratch with the lse stored (the merge needs it), and an fp32 merge into the
# running output. `tools/cp_ring_breakdown.py` times each on one H200 of the pair at the
# 512K blocks of S = 1M, every piece twice with the second pass in reverse order, and reads
# NVML's SM clock and power after each (`logs/cp_ring_breakdown_4580ed8.json`). The fill and
# the merge are small; the forward with its lse stored is not the forward without it, at this
# block size (the conclusion says what else was checked).

# %%
breakdown_log = RESULTS_DIR / "nvidia-h200-x2" / "logs" / "cp_ring_breakdown_4580ed8.json"
if breakdown_log.exists():
    bd = json.loads(breakdown_log.read_text())
    print("measured:", bd["provenance"]["date"][:10], "at commit", bd["provenance"]["commit"])
    for blk in bd["blocks"]:
        print(
            table(
                [
                    {
                        "block": blk["block"],
                        "piece": r["piece"],
                        "ms": ", ".join(f"{m:.1f}" for m in r["ms"]),
                        "SM MHz": r["sm_mhz"],
                        "W": r["power_w"],
                    }
                    for r in blk["rows"]
                ],
                ["block", "piece", "ms", "SM MHz", "W"],
            )
        )
else:
    print("the ring breakdown log is not in this checkout")

# %% [markdown]
# ## 5. Training on two GPUs
#
# A training step runs the attention's backward too, and the rest of a transformer block
# around it. Two records of the same two H200s (commit `208a7cf`, 2026-11-29, the ring's
# backward then the Triton backward on every block; their status lines below) measure both;
# 5b times the ring with the Gluon backward per block, and 5c reads the forward + backward
# rows of section 4's record (`dacc006`):
#
# * `context_parallel_fwd_bwd.json` (`cp bench --impls flashcore_cp_fwd_bwd
#   torch_cp_cudnn_fwd_bwd torch_cp_flash_fwd_bwd --train-max-s 1048576`): the attention's
#   forward + backward, the ring against PyTorch's `context_parallel` + SDPA on the bench's
#   inputs (B 1, Hq 8, Hkv 2, D 128, bf16), S 256K and 512K (1M was skipped: predicted past
#   the run's 300 s budget). `x torch_*` is PyTorch's time over the ring's: ≥ 1.0, the ring is
#   as fast.
# * `context_parallel_training.json` (`cp train`, `flashcore/studies/cp_train.py`): one
#   Llama-style block (RMSNorm, q/k/v projections, RoPE at global positions, causal
#   attention, output projection, SwiGLU MLP of 2816, d_model 1024), the sequence split over
#   the ranks (zigzag for flashcore, PyTorch's head-tail balancing for its CP), the parameter
#   gradients summed over the ranks. Its check runs the whole step at S = 4099 (uneven
#   chunks) in bf16 and fp16 through the ring and Ulysses: the loss, the output, dx and every
#   parameter gradient under the error rule against the float64 step on one device, with the
#   ring's dK/dV accumulation dropped as the planted bug. The timing is a whole step
#   (forward, backward, gradient sum) per S; `eff` is against flashcore's own step on one GPU
#   over the whole sequence.

# %%
fb_recorded = RECORDED_GPU in recorded_devices("context_parallel_fwd_bwd")
if fb_recorded:
    fwd_bwd = read_result("context_parallel_fwd_bwd", RECORDED_GPU)
    print("attention forward + backward:", describe(fwd_bwd))
    print(status_line_for("context_parallel_fwd_bwd", RECORDED_GPU))
    fb_rows = R.fwd_bwd_rows(fwd_bwd)
    print(table(fb_rows, list(fb_rows[0])))
    for r in fwd_bwd.get("skipped", []):
        print(f"  not measured: S={r['S'] // 1024}K ({r['reason']})")
else:
    print(f"attention forward + backward: not recorded on {RECORDED_GPU}")
tr_recorded = RECORDED_GPU in recorded_devices("context_parallel_training")
if tr_recorded:
    training = read_result("context_parallel_training", RECORDED_GPU)
    print("\ntransformer block training step:", describe(training))
    print(status_line_for("context_parallel_training", RECORDED_GPU))
    checks = [
        {
            "strategy": c["strategy"],
            "dtype": c["dtype"],
            "planted": c["planted_bug"] or "",
            "worst": c["worst"],
            "ratio": f"{c['ratio']:.3f}",
            "passed": c["passed"],
        }
        for c in training["checks"]
    ]
    print(table(checks, list(checks[0])))
    tr_rows = R.training_rows(training)
    print(table(tr_rows, list(tr_rows[0])))
else:
    print(f"training step: not recorded on {RECORDED_GPU}")

# %%
# NBVAL_CHECK_OUTPUT
if fb_recorded and tr_recorded:
    s = training["summary"]
    print(
        f"training step check: {s['cases']} cases, {s['failed']} failed; planted bugs caught "
        f"{s['planted_bugs_caught']}/{s['planted_bugs']}"
    )
    xs = [float(r["x torch_cudnn"]) for r in fb_rows if r["x torch_cudnn"] != "-"]
    print(
        f"attention forward + backward, ring >= 1.0x PyTorch CP + cuDNN: "
        f"{sum(x >= 1.0 for x in xs)}/{len(xs)} shapes (range {min(xs):.3f}-{max(xs):.3f})"
    )
    # The backward alone: each forward + backward less the same implementation's forward
    # from c481407's record (section 4's log), which like these ran the Triton backward per
    # block and today's forward kernels (status lines: stale by parallel.py alone).
    old_rows = earlier.get("c481407", {"rows": []})["rows"]
    fwd = {(r["impl"], r["S"], r["causal"]): r["time_ms"] for r in old_rows}
    for r in fwd_bwd["rows"]:
        if r["impl"] != "flashcore_cp_fwd_bwd" or ("flashcore_cp", r["S"], r["causal"]) not in fwd:
            continue
        key = (r["S"], r["causal"])
        theirs = next(
            t["time_ms"]
            for t in fwd_bwd["rows"]
            if t["impl"] == "torch_cp_cudnn_fwd_bwd" and (t["S"], t["causal"]) == key
        )
        ring_bwd = r["time_ms"] - fwd[("flashcore_cp", *key)]
        torch_bwd = theirs - fwd[("torch_cp_cudnn", *key)]
        print(
            f"  backward alone, S={key[0] // 1024}K {'causal' if key[1] else 'full'}: ring "
            f"{ring_bwd:.0f} ms, PyTorch CP + cuDNN {torch_bwd:.0f} ms ({ring_bwd / torch_bwd:.2f}x)"
        )
    steps = [float(r["ring / torch_cp_cudnn"]) for r in tr_rows if r["ring / torch_cp_cudnn"]]
    print(
        f"training step, ring tokens/s >= PyTorch CP + cuDNN: {sum(x >= 1.0 for x in steps)}/"
        f"{len(steps)} S (range {min(steps):.3f}-{max(steps):.3f})"
    )
else:
    print("training records: not recorded")

# %% [markdown]
# These two records ran the ring's backward as it was at `208a7cf`: flashcore's Triton
# backward on every block. Less each forward (`c481407`'s record), that backward took
# 1.24–1.26× PyTorch + cuDNN's (the lines above), while `flashcore.attention`'s own autograd
# runs the warp-specialized Gluon backward at these lengths (`dispatch.backward_kernel`). From
# `1d1b8c9` the ring's blocks take the same dispatch (`parallel._block_backward`).
#
# ### 5b. The ring with the Gluon backward per block (`1d1b8c9`)
#
# Same two H200s. The correctness runs, one device call at `1d1b8c9`
# (`logs/cp_gluon_bwd_*_1d1b8c9.log`): the gradient cases of the GPU grid and the
# training-step check with the Gluon backward forced on every block
# (`FLASHCORE_BACKWARD_HOPPER=always`: at S = 4099 the blocks are shorter than the dispatch's
# 2K threshold). The timings, one device call at `a64b0bb` under the default dispatch
# (`logs/cp_fwd_bwd_gluon_a64b0bb.log`, `logs/cp_train_gluon_a64b0bb.log`): the attention's
# forward + backward at 256K and 512K and the block's training step at 128K, 256K and 512K,
# the ring beside PyTorch CP + cuDNN (no other implementation); 1M was not timed.

# %%
gl_fb = gl_tr = None
if RECORDED_GPU in recorded_devices("context_parallel_fwd_bwd_gluon"):
    gl_fb = read_result("context_parallel_fwd_bwd_gluon", RECORDED_GPU)
    gl_tr = read_result("context_parallel_training_gluon", RECORDED_GPU)
    gl_check = read_result("cp_train_gluon_check", RECORDED_GPU)
    for name, rec in (
        ("context_parallel_fwd_bwd_gluon", gl_fb),
        ("context_parallel_training_gluon", gl_tr),
        ("cp_train_gluon_check", gl_check),
    ):
        print(describe(rec))
        print(status_line_for(name, RECORDED_GPU))
    grad_log = RESULTS_DIR / RECORDED_GPU / "logs" / "cp_gluon_bwd_grad_1d1b8c9.log"
    if grad_log.exists():
        print("gradient cases, Gluon backward forced (its log):")
        for line in grad_log.read_text().splitlines():
            if line.startswith("[") or "cases on" in line:
                print(" ", line.strip())
    before_fb = {(r["S"], r["causal"], r["impl"]): r["time_ms"] for r in fwd_bwd["rows"]}
    before_tr = {(r["S"], r["impl"]): r["time_ms"] for r in training["rows"]}
    after_rows = []
    for r in gl_fb["rows"]:
        if r["impl"] != "flashcore_cp_fwd_bwd":
            continue
        key = (r["S"], r["causal"])
        theirs = next(
            t["time_ms"]
            for t in gl_fb["rows"]
            if t["impl"] == "torch_cp_cudnn_fwd_bwd" and (t["S"], t["causal"]) == key
        )
        was = before_fb[(*key, "flashcore_cp_fwd_bwd")]
        after_rows.append(
            {
                "what": "attention fwd+bwd",
                "S": key[0],
                "causal": key[1],
                "ring ms (Triton bwd, 208a7cf)": f"{was:.1f}",
                "ring ms (Gluon bwd)": f"{r['time_ms']:.1f}",
                "Gluon / Triton": f"{r['time_ms'] / was:.3f}",
                "torch_cp_cudnn ms": f"{theirs:.1f}",
                "x torch_cudnn": f"{theirs / r['time_ms']:.3f}",
            }
        )
    for r in gl_tr["rows"]:
        if r["impl"] != "flashcore_ring":
            continue
        theirs = next(
            t["time_ms"]
            for t in gl_tr["rows"]
            if t["impl"] == "torch_cp_cudnn" and t["S"] == r["S"]
        )
        was = before_tr[(r["S"], "flashcore_ring")]
        after_rows.append(
            {
                "what": "block training step",
                "S": r["S"],
                "causal": True,
                "ring ms (Triton bwd, 208a7cf)": f"{was:.1f}",
                "ring ms (Gluon bwd)": f"{r['time_ms']:.1f}",
                "Gluon / Triton": f"{r['time_ms'] / was:.3f}",
                "torch_cp_cudnn ms": f"{theirs:.1f}",
                "x torch_cudnn": f"{theirs / r['time_ms']:.3f}",
            }
        )
    print(table(after_rows, list(after_rows[0])))
else:
    print(f"the Gluon-backward ring is not recorded on {RECORDED_GPU}")

# %%
# NBVAL_CHECK_OUTPUT
if gl_fb is not None:
    s = gl_check["summary"]
    print(
        f"training step check, Gluon backward forced: {s['cases']} cases, {s['failed']} failed; "
        f"planted bugs caught {s['planted_bugs_caught']}/{s['planted_bugs']}"
    )
    for what in ("attention fwd+bwd", "block training step"):
        xs = [float(r["x torch_cudnn"]) for r in after_rows if r["what"] == what]
        gt = [float(r["Gluon / Triton"]) for r in after_rows if r["what"] == what]
        print(
            f"{what}, ring with the Gluon backward >= 1.0x PyTorch CP + cuDNN: "
            f"{sum(x >= 1.0 for x in xs)}/{len(xs)} (range {min(xs):.3f}-{max(xs):.3f}); "
            f"its time over the Triton backward's {min(gt):.3f}-{max(gt):.3f}"
        )
else:
    print("Gluon-backward ring: not recorded")

# %% [markdown]
# The check passes for both strategies in both precisions, with the ring's backward on either
# kernel, and the planted bug fails it: the sequence split is exact through a whole block,
# gradients included. Speed: with the Triton backward per block (`208a7cf`) the ring's
# attention forward + backward ran at 0.843–0.869 of PyTorch CP + cuDNN's speed and the block's
# step at 0.855–0.886 of its tokens/s, at every S measured (against PyTorch CP + flash the
# ring's attention was 1.40–1.43× faster). With the Gluon backward per block (`a64b0bb`) the
# ring's forward + backward takes 0.805–0.855 of its earlier time and the block's step
# 0.859–0.897. Against PyTorch + cuDNN the forward + backward is 1.028× (full) and 0.989×
# (causal) at 256K, 1.032× and 1.016× at 512K: the target (≥ 1.0) met at 3 of the 4 shapes.
# The block's step is 0.959×, 0.997× and 1.004× at 128K, 256K and 512K: met at 1 of 3, at
# 512K. These margins, 4% at most either way, come from one run each and are about the size
# of the differences between two runs in section 4 (the record's forward rows at
# 0.952–1.071 of `c481407`'s, the transfers alone aside): the ring is now level with PyTorch
# CP + cuDNN in training, where with the Triton backward it ran at 0.843–0.886 of its speed.
# Section 4's record timed the forward + backward at 256K again (5c): 1.029× (full) and
# 0.977× (causal), on the same sides of 1.0 as here.
#
# ### 5c. Forward + backward in the latest record (`dacc006`)
#
# Section 4's record times the ring's forward + backward (the Gluon backward per block) and
# PyTorch CP's, with the cuDNN and the flash backend, on its inputs (B 1, Hq 8, Hkv 2, D 128,
# bf16) at 128K and 256K, in the same process group and run as the forward rows. `x torch_*`
# is PyTorch's time over the ring's (≥ 1.0: the ring is as fast); `bwd x torch_cudnn` is the
# same ratio for the backward alone (each forward + backward less the same implementation's
# forward in the record). The ring is 1.039× and 1.029× PyTorch CP + cuDNN at full attention
# and 0.978× and 0.977× causal (128K, 256K); its backward alone 1.049× and 1.032× full, 0.964×
# and 0.951× causal; against the flash backend 1.627–1.755×. Within 5% of PyTorch CP + cuDNN
# either way (0.977–1.039), one run each: level, as in 5b.

# %%
now_fb = []
if recorded:
    fwd = {(r["impl"], r["S"], r["causal"]): r["time_ms"] for r in record["rows"]}
    now_fb = [r for r in R.fwd_bwd_rows(record) if r["torch_cudnn_ms"] != "-"]
    for r in now_fb:
        key = (r["S"], r["causal"])
        ring_bwd = fwd[("flashcore_cp_fwd_bwd", *key)] - fwd[("flashcore_cp", *key)]
        torch_bwd = fwd[("torch_cp_cudnn_fwd_bwd", *key)] - fwd[("torch_cp_cudnn", *key)]
        r["bwd x torch_cudnn"] = f"{torch_bwd / ring_bwd:.3f}"
if now_fb:
    print("attention forward + backward in the record:", describe(record))
    print(table(now_fb, list(now_fb[0])))
else:
    print(f"the {RECORDED_GPU} record has no PyTorch CP forward + backward rows")

# %%
# NBVAL_CHECK_OUTPUT
if now_fb:
    for col, who in (
        ("x torch_cudnn", "PyTorch CP + cuDNN"),
        ("x torch_flash", "PyTorch CP + flash"),
    ):
        xs = [float(r[col]) for r in now_fb if r[col] != "-"]
        print(
            f"ring forward + backward >= 1.0x {who}: {sum(x >= 1.0 for x in xs)}/{len(xs)} "
            f"shapes (range {min(xs):.3f}-{max(xs):.3f})"
        )
    xs = [float(r["x torch_cudnn"]) for r in now_fb]
    print("within 5% of PyTorch CP + cuDNN at every shape:", all(0.95 <= x <= 1.05 for x in xs))
else:
    print("forward + backward beside PyTorch CP: not in the record")

# %% [markdown]
# ## Conclusion
#
# The merge identity is exact and stable, and the ring built on it matches the float64
# single-device reference under the error rule for every sharding, mask, GQA ratio and
# uneven length checked, forward and backward, while each planted bug fails the same check.
# The zigzag sharding balances causal work to within a fraction of a percent at N = 2, 4 and
# 8 (max/min 1.000). The verdicts of sections 3b, 4 and 5c come from the recorded two-GPU run;
# its provenance line gives the device (two H200s), date (2026-11-30) and commit (`dacc006`),
# and its status line reads current. Against the previous record (`c481407`, 2026-11-29, kept
# as a log; its ring ran the Triton backward per block) its forward rows lie at 0.952–1.071
# of the earlier times (the ring's 0.952–1.028) and the ring's forward + backward at
# 0.804–0.866 (section 4). In the recorded run:
#
# - **Correctness on the GPUs.** 33 cases of the ring and Ulysses, forward and backward,
#   0 failed (worst ratio 0.294); 4/4 planted bugs caught, as in `c481407`'s record and the
#   partial re-run at `a64b0bb`. Its gradient cases at S = 4099 ran the default dispatch per
#   block; with the Gluon backward forced on every block (`1d1b8c9`) they pass too
#   (section 5b).
# - **Scaling.** The target is met at the four shapes where it is defined (the target table's
#   `eff`): 0.998 (full) and 0.993 (causal) at 512K, 0.910 and 1.089 at 1M. 2M has no one-GPU
#   time, so the target is untested there. 1M full clears 0.90 by 0.010 in a single call
#   (`c481407`'s record measured 0.901 there, the first run, older kernels, 0.861). Above 1.0
#   (1M causal) means the two GPUs together ran faster than twice one: there one GPU alone
#   runs at 548 TFLOP/s against 605 at 512K, the ring at 597 per GPU (the lines above the
#   Ulysses table). Below the target's range: 0.951 and 0.910 at 128K, 0.985 and 0.955 at
#   256K.
# - **Ulysses, and where the ring loses.** Ulysses scales at 1.003 and 0.999 at 512K, 1.004
#   and 1.038 at 1M. At full attention it is level with the ring up to 512K (929.2 against
#   934.0 ms there) and the faster from 1M: 3769 against 4156 ms at 1M, 15222 against
#   17068 ms at 2M. The ring's loss there is mostly before any transfer: without any transfer
#   it takes 4020 ms at full 1M, 1.062 times half of one GPU's call, where Ulysses takes 0.996
#   times it; at 2M (no one-GPU time) the ring without transfers takes 16724 ms. The ratio
#   moves with S and mask, 0.920–1.125 (the table's `no transfers / (1 GPU / 2)`; at 128K full
#   the ring without transfers took longer than with them, 63.3 against 59.2 ms, which is
#   spread, not cost). Causal, the ring is the faster at 1M and 2M (0.954 and 0.979 of
#   Ulysses's time). The cause at full 1M is the ring's need for the lse: the Gluon forward
#   with its lse stored takes 1952–1999 ms on a 512K block (the block of S = 1M) where the
#   same kernel without it takes 1799–1804, in either order, both at the 700 W power cap, the
#   lse build at a lower SM clock (1275–1335 against 1530–1575 MHz; the breakdown above,
#   `4580ed8`). Ulysses's one call per GPU stores no lse. The scratch fill (0.3 ms) and the
#   merge (7.4–7.7 ms per block) are not it. Why the lse build slows is not established: its
#   loops hold the same instructions as the other's in SASS
#   (`results/cpu-interpreter/logs/lse_variant_sass_54329ce.json`: 473 per key tile, only
#   register names and three placements differ; +184 instructions outside the loops), one
#   launch of each under Nsight Compute at S 8K is alike in time, tensor-pipe use and stalls
#   (`logs/ncu_lse_df14a73/`), and under sustained back-to-back calls the two are within 1%
#   at S 8K and 128K (`logs/lse_power_probe_baa4a3d.json`). Only the long launches of a
#   512K block (about 2 s each) show the gap, at a lower clock for the same power.
# - **Communication.** In the sweep the transfers alone take 0.3–3.4 ms, and the ring's
#   excess over the same compute without them (0.000–0.033) is at some shapes many times
#   that, so the sweep cannot measure how much of them is hidden. The overlap probe does: not
#   hidden at S = 16K (hidden fraction 0.00), mostly hidden at 64K (0.96; 0.72 in `c481407`'s
#   probe).
# - **Against PyTorch's `context_parallel` + SDPA cuDNN.** The ring is 1.020, 1.037 and
#   1.013× non-causal at 256K, 512K and 1M, and 1.056, 1.129 and 1.150× causal: the target is
#   met at all 6 measured shapes (PyTorch CP was not timed at 2M), by 1.3–3.7% non-causal. At
#   128K, below the target's range, the ring is the faster at both masks (59.2 against 59.7 ms
#   full, 30.7 against 31.3 causal; in `c481407`'s record PyTorch + cuDNN was the faster
#   causal there). Against the flash backend the ring is faster at every S timed, 128K–1M
#   (1084–1215 TFLOP/s against 611–693).
#   (PyTorch's runs send Hq/Hkv = 4× the K/V bytes: its ring SDPA takes no GQA.)
# - **PyTorch's output.** The first H200 checks failed because this harness gave the two
#   ranks different V tensors (above), not because of PyTorch. Fixed; on CPU PyTorch's
#   context-parallel output passes the rule, and in the current record all 4 outputs checked
#   at S = 128K (identical inputs on every rank) pass it: ratios 0.241 (full, cuDNN and
#   flash), 0.036 and 0.034 (causal, cuDNN and flash), as in the stale re-check of `eb435d7`.
# - **Training.** A transformer block's training step with the sequence split over the two
#   GPUs passes the error rule against the float64 step on one device (loss, output, dx and
#   every parameter gradient; ring and Ulysses; bf16 and fp16) and catches the planted bug.
#   With flashcore's Triton backward per block (`208a7cf`) it was slower than PyTorch's CP +
#   cuDNN: 0.855–0.886 of its tokens/s (S 64K–512K), the attention's forward + backward
#   0.843–0.869 of its speed (256K, 512K), its backward 1.24–1.26× PyTorch + cuDNN's. With the
#   Gluon backward per block (from `1d1b8c9`, the dispatch `flashcore.attention` uses; timed
#   at `a64b0bb`) the ring's forward + backward is 1.028× (full) and 0.989× (causal) PyTorch +
#   cuDNN at 256K, 1.032× and 1.016× at 512K (≥ 1.0 at 3 of 4 shapes), and the step 0.959×,
#   0.997× and 1.004× at 128K, 256K and 512K (≥ 1.0 at 1 of 3). The current record
#   (`dacc006`) has the forward + backward at 1.039× and 1.029× full, 0.978× and 0.977×
#   causal (128K, 256K; 1.627–1.755× PyTorch CP + flash): level with PyTorch CP + cuDNN within
#   4%. 1M was not timed.
