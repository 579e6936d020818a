# %% [markdown]
# # 04 · FP8 attention: the negative result, measured, and what fixes it
#
# A prior report (seed 001) cast Q, K, V to FP8 (e4m3) with no scaling, measured a 29% maximum
# error, blamed the missing scale factors, and cancelled FP8 as "3–6 months" of work.
# FlashAttention-3 reports FP8 at ~1 PFLOP/s on an H100 with RMSE 9.1e-3 against 2.4e-2 for a
# per-tensor baseline on outlier inputs, and credits incoherent processing (a random Hadamard
# rotation of Q and K) for the difference.
#
# This notebook measures all of it on the same inputs, with four quantization recipes and the
# two fp8 kernels behind `flashcore.fp8_attention` (section 4): the Triton kernel
# (`flashcore/kernels/fp8.py`) and, on Hopper, the Gluon forward's FP8 mode
# (`attention_hopper_fp8` in `flashcore/kernels/forward_hopper.py`, FlashAttention-3's
# warp-specialized pipeline with e4m3 wgmma). Every recipe runs on either kernel; which one
# serves a call depends on its shape alone.
#
# | recipe | Q, K | V | P (softmax probabilities) |
# |---|---|---|---|
# | `naive` | cast as is | cast as is | cast as is |
# | `per_tensor` | one scale each (amax/448) | one scale | × 256 |
# | `per_block` | one scale per 128 rows (per batch, head) | one scale per channel | × 256 |
# | `per_block_hadamard` | rotate by $R = H\,\mathrm{diag}(\pm 1)/\sqrt{D}$, then per block | per channel | × 256 |
#
# Errors are measured against float64 attention of the original inputs. The CPU profile runs
# the error analysis live at small sizes under the Triton interpreter (the Triton kernel: the
# Gluon mode needs a Hopper GPU) and renders the recorded H100 study (`results/<gpu>/fp8.json`:
# larger sizes, more seeds, both kernels, speed). The GPU profile runs both live.

# %% tags=["parameters"]
PROFILE = (
    "auto"  # "gpu": errors and speed live, recorded; "cpu": errors live, speed from the record
)
RECORD_TOPIC = "fp8"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"
LIVE_SEQLEN = 256  # live error study: (1, LIVE_HEADS, S, 128) per distribution
LIVE_HEADS = 2
LIVE_SEEDS = 3
MEASURE_SPEED = True  # GPU profile only
SWEEP = "quick"  # GPU profile: "quick" (speed at D128 and D256, S 4K and 16K, no launch-config
# sweep) or "full" (D128 S 1K-16K, D256 S 4K-16K and the config sweep: the recorded run),
# -p SWEEP full

# %%
from flashcore.notebook import setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
import math

import torch

from flashcore.kernels.fp8 import VARIANTS, random_hadamard
from flashcore.plots import save_figure
from flashcore.results import describe, read_result, write_result
from flashcore.studies import fp8_study as F
from flashcore.studies.records import status_line_for

# %% [markdown]
# ## 1. The e4m3 format and its rounding error
#
# e4m3 has 1 sign bit, 4 exponent bits (bias 7) and 3 mantissa bits; the `fn` variant has no
# infinities and one NaN pattern, so its largest finite value is 448. Below every one of its
# 256 bit patterns is decoded, and values spread over its range are rounded to it.

# %%
# NBVAL_CHECK_OUTPUT
codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
finite = codes[torch.isfinite(codes)]
positive = finite[finite > 0].unique()
normals = positive[positive >= 2.0**-6]
print(
    f"distinct finite values: {finite.unique().numel()}, NaN patterns: {int(torch.isnan(codes).sum())}"
)
print(
    f"largest {positive.max().item():g}, smallest normal {normals.min().item():g} (2^-6), "
    f"smallest subnormal {positive.min().item():g} (2^-9)"
)
x = torch.logspace(-12, math.log2(440), 200_000, base=2, dtype=torch.float64)
rel = (F.e4m3_round_trip(x) - x).abs() / x
step = normals[1:] / normals[:-1] - 1
print(
    f"max relative rounding error of values in the normal range: {rel[x >= 2**-6].max().item():.4f} (2^-4 = {2**-4:.4f})"
)
print(f"largest relative gap between neighbouring normal values: {step.max().item():.4f} (2^-3)")

# %%
save_figure(F.plot_e4m3_rounding(x, rel), "04_e4m3_rounding")

# %% [markdown]
# Two facts carry the rest of the notebook. Inside the normal range the relative error is at
# most $2^{-4} = 6.25\%$ **whatever the scale**: a scale factor only decides which values fall
# outside $[2^{-6}, 448]$, where values saturate or lose relative precision. And the
# prior report's "12.3% round-trip error" on N(0,1) data matches an absolute error: values in
# $[2, 4)$ are spaced 0.25 apart, so rounding moves them by up to 0.125 (a sample large enough
# to reach $[4, 8)$, spaced 0.5, shows up to 0.25).

# %%
g = torch.Generator().manual_seed(0)
z = torch.randn(1_000_000, generator=g, dtype=torch.float64)
err = (F.e4m3_round_trip(z) - z).abs()
print(
    f"N(0,1), 10^6 samples, unscaled round trip: max abs error {err.max().item():.3f} "
    f"(at |x| = {z.abs()[err.argmax()].item():.2f}), RMS {err.pow(2).mean().sqrt().item():.4f}"
)

# %% [markdown]
# ## 2. Incoherent processing in one picture
#
# $R = H\,\mathrm{diag}(s)/\sqrt{D}$ (Sylvester Hadamard $H$, random signs $s$) is orthogonal,
# so $(QR)(KR)^\top = QK^\top$ exactly. What it changes is how the entries are spread: a vector
# with one large channel becomes a vector whose every entry is $\pm$ that value $/\sqrt{D}$.
# The per-block scale is set by the block's largest entry, and the error of a dot product
# $\sum_d q_d k_d$ in a format with relative rounding grows with $\lVert q \circ k \rVert_2$; the
# rotation flattens exactly the large terms that dominate both.

# %%
q = torch.randn(4, 128, generator=g)
q[:, 7] += 40.0  # one "massive" channel shared by every token
rot = random_hadamard(128, seed=0)
print(f"before rotation: max |q| = {q.abs().max():.1f}, RMS = {q.pow(2).mean().sqrt():.2f}")
print(
    f"after rotation:  max |q| = {(q @ rot).abs().max():.1f}, RMS = {(q @ rot).pow(2).mean().sqrt():.2f}"
)
print(
    "q q^T unchanged by the rotation (float64):",
    torch.allclose(
        (q.double() @ rot.double()) @ (q.double() @ rot.double()).T,
        q.double() @ q.double().T,
        atol=1e-8,
    ),
)

# %% [markdown]
# ## 3. Error against float64, per recipe and input distribution (live)
#
# Three input distributions: `normal` N(0,1); `outlier`, FlashAttention-3's
# N(0,1) + N(0,100)·Bernoulli(0.001); and `massive_channels`, real-looking activations with two
# large channels shared by every token of q and k and v channel magnitudes spread over 100×
# (`fp8_study.make_qkv`). The fp16 row is flashcore's fp16 kernel on the same inputs.
#
# Each fp8 run is also checked against **its own** float64 reference: attention of the
# dequantized inputs the kernel actually receives. The only rounding the kernel may add is p's
# cast to e4m3, whose worst case is computed per element (`own_reference_bound`); a wrong block
# scale or a dropped tile breaks it (`tests/test_fp8.py` plants one). Under the interpreter the
# p cast is emulated in fp32 arithmetic (the interpreter's own fp32→fp8 cast truncates; the GPU
# converts in hardware). At these sizes every live fp8 call runs the Triton kernel, on a GPU
# too (the dispatch sends only S ≥ 4096 to the Gluon mode, section 4); the Gluon mode's errors
# are the record's S = 4096 rows (section 5).

# %%
from tqdm import tqdm  # a text bar: setup() sends it to the terminal, not the outputs

live_rows = []
for dist in tqdm(F.DISTRIBUTIONS, desc="live error study"):
    for causal in (False, True):
        live_rows += F.error_rows(
            dist,
            heads=LIVE_HEADS,
            seqlen=LIVE_SEQLEN,
            head_dim=128,
            causal=causal,
            seeds=tuple(range(LIVE_SEEDS)),
            device=DEVICE,
        )
live = F.summarize(live_rows)
print(f"live: B=1 H={LIVE_HEADS} S={LIVE_SEQLEN} D=128, {LIVE_SEEDS} seeds, on {DEVICE}")
print(
    table(
        live,
        [
            "dist",
            "causal",
            "impl",
            "rmse_median",
            "rmse_min",
            "rmse_max",
            "max_err",
            "own_bound_ratio",
        ],
        # two digits: the third moves with the CPU's code paths (the fp16 baseline's rmse_max
        # is 2.52e-03 on an AVX-512 EPYC, 2.51e-03 under its AVX2 path)
        {k: "{:.1e}" for k in ("rmse_median", "rmse_min", "rmse_max", "max_err")}
        | {"own_bound_ratio": "{:.2f}"},
    )
)

# %%
# NBVAL_CHECK_OUTPUT
fp8_live = [r for r in live_rows if r["impl"].startswith("fp8")]
print(
    f"every live fp8 run ({len(fp8_live)}) within its own-reference p-rounding bound:",
    all(r["own_bound_ratio"] <= 1 for r in fp8_live),
)
print("every live fp8 run is finite (no NaN):", all(r["nan"] == 0 for r in fp8_live))


def median_rmse(dist, impl):
    return sorted(r["rmse"] for r in live_rows if r["dist"] == dist and r["impl"] == impl)[
        LIVE_SEEDS
    ]  # median of 2 x seeds


for dist in ("outlier", "massive_channels"):
    best = min(VARIANTS, key=lambda v: median_rmse(dist, f"fp8_{v}"))
    print(f"{dist}: lowest median RMSE of the four recipes (live):", best)

# %% [markdown]
# ## 4. Two fp8 kernels behind one call
#
# Every recipe's `quantize` produces the same `Fp8Inputs`: q and k in e4m3 with one scale per
# 128-row block, v in e4m3 with one scale per channel, stored transposed. Two kernels compute
# attention from it:
#
# * **the Triton kernel** (`flashcore/kernels/fp8.py`): FlashAttention-2's online softmax with
#   fp8 tensor-core dots for $QK^\top$ and $PV$ and the block scales folded into each tile's
#   score scale, compiled by Triton (on the H100 64 × 128 tiles, 4 warps, 3 stages). It runs
#   wherever fp8 runs: sm_89 and newer, and the interpreter on CPU.
# * **the Gluon forward's FP8 mode** (`attention_hopper_fp8` in
#   `flashcore/kernels/forward_hopper.py`, Hopper only): the bf16 Gluon forward's pipeline,
#   FlashAttention-3's structure (one producer warp loading K and V tiles by TMA into a
#   shared-memory ring; two consumer warpgroups of 64 query rows each that take turns on the
#   tensor cores, ping-pong, so one's softmax runs while the other's GEMMs do; inside each, the
#   softmax of key tile $j$ overlapping $P_{j-1}V_{j-1}$; a persistent grid) with e4m3 wgmma for
#   both products. What FP8 changes in that pipeline:
#   * **V^T tiles.** 8-bit wgmma wants both operands K-major, contiguous along the dimension the
#     product reduces over; $PV$ reduces over the keys, so v must be contiguous along keys. The
#     quantizer stores it transposed, (B, H, D, S) with keys padded to a multiple of 128, and
#     the producer loads D × BLOCK_N tiles of $V^\top$.
#   * **Per-(q block, k block) score scales.** A warpgroup's 64 query rows lie inside one
#     128-row q block and a key tile (BLOCK_N divides 128) inside one k block, so each key
#     tile's scores take one scale, q_scale × k_scale × the softmax scale, loaded while
#     $S_j = QK_j^\top$ runs.
#   * **P × 256, staged through shared memory.** p ∈ [0, 1] is multiplied by 256 (a power of
#     two: exact) into e4m3's normal range and stored to a shared-memory buffer per warpgroup,
#     the A operand of the $PV$ wgmma. The bf16 forward keeps P in registers; an 8-bit register
#     operand cannot be held past its asynchronous wgmma (the wait that keeps it alive takes
#     16- and 32-bit values only). FlashAttention-3 keeps fp8 P in registers, with byte
#     shuffles to fit the operand layout; this mode pays a shared-memory store and fence per
#     tile instead.
#   * **v's per-channel scale in the epilogue**: out[:, d] × v_scale[d] / 256, once per output
#     tile, which also undoes p's 256.
#   * Top-left causal alignment only and no lse, as the Triton kernel.
#
# Which kernel serves a call is `flashcore.dispatch.fp8_kernel`'s table `FP8_GLUON_FROM`
# (`python -m flashcore info` prints it as "fp8 dispatch"; `FLASHCORE_FP8_HOPPER=never` or
# `always` overrides it, and a call with an explicit `config` always runs the Triton kernel).
# The table comes from `tools/fp8_hopper_probe.py` on the H100: per_block+Hadamard inputs,
# B·S = 16K, H·D = 2048, S 4K–16K, causal and not, the Gluon mode at each candidate tile config
# beside the Triton fp8 kernel in one process; one run at commit `ea07c61` and three at
# `b45f4b3` (D128 twice), `results/<gpu>/logs/fp8_hopper_probe_*.json`. Below, those runs at
# the tile config that ships (`FP8_VARIANTS`: BLOCK_N × stages, two consumer warpgroups).

# %%
import json

from flashcore import results as _results
from flashcore.dispatch import FP8_GLUON_FROM
from flashcore.kernels.forward_hopper import FP8_VARIANTS


def fp8_dispatch(head_dim, causal, seqlen):
    """The kernel FP8_GLUON_FROM sends a call of this shape to on Hopper (Sq = Sk)."""
    threshold = FP8_GLUON_FROM.get((head_dim, causal))
    return "gluon" if threshold is not None and seqlen >= threshold else "triton"


print("fp8 dispatch on Hopper (FP8_GLUON_FROM; below the threshold, or never: the Triton kernel):")
for (d, c), t in FP8_GLUON_FROM.items():
    v = FP8_VARIANTS[d]
    print(f"  D{d} {'causal' if c else 'full  '}: "
          + (f"Gluon FP8 mode from S = {t}" if t else "never")
          + f"   (FP8_VARIANTS: {v['BLOCK_N']} keys x {v['STAGES']} stages)")  # fmt: skip

probe_by = {}  # (D, causal, S) -> [(commit, Triton fp8, Gluon mode at the shipped config)]
for name in ("fp8_hopper_probe_ea07c61.json", "fp8_hopper_probe_b45f4b3.json"):
    path = _results.RESULTS_DIR / RECORDED_GPU / "logs" / name
    if not path.exists():
        print(f"--- {name}: (not in this checkout)")
        continue
    data = json.loads(path.read_text())
    for run in data.get("runs", [data]):  # b45f4b3 holds three runs
        rows = {(r["D"], r["causal"], r["S"], r["impl"]): r["tflops"] for r in run["rows"]}
        for d, c, s, impl in rows:
            if impl != "triton_fp8":
                continue
            cfg = FP8_VARIANTS[d]
            shipped = f"gluon_fp8 {cfg['BLOCK_N']}x{cfg['STAGES']}"
            gluon = rows.get((d, c, s, shipped), rows.get((d, c, s, shipped + "x2wg")))
            if gluon is None:  # this run did not time the config that ships
                continue
            probe_by.setdefault((d, c, s), []).append(
                (run["provenance"]["commit"], rows[(d, c, s, impl)], gluon)
            )
probe_rows = []
for (d, c, s), runs in sorted(probe_by.items()):
    ratios = [g / t for _, t, g in runs]
    probe_rows.append({"D": d, "causal": c, "S": s, "runs": len(runs),
                       "triton fp8": f"{min(t for _, t, _ in runs):.0f}-{max(t for _, t, _ in runs):.0f}",
                       "gluon mode": f"{min(g for *_, g in runs):.0f}-{max(g for *_, g in runs):.0f}",
                       "gluon / triton": f"{min(ratios):.2f}-{max(ratios):.2f}",
                       "dispatch": fp8_dispatch(d, c, s)})  # fmt: skip
print(
    table(
        probe_rows,
        ["D", "causal", "S", "runs", "triton fp8", "gluon mode", "gluon / triton", "dispatch"],
    )
)
print("(TFLOP/s, min-max over the probe runs; gluon mode at FP8_VARIANTS' config)")
for d in sorted({d for d, _, _ in probe_by}):
    ratios = [g / t for (dd, _, _), runs in probe_by.items() if dd == d for _, t, g in runs]
    print(
        f"D{d}: Gluon mode / Triton fp8 kernel {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} timings"
    )

# %% [markdown]
# At D128 the Gluon mode is ahead of the Triton fp8 kernel at every probed shape, by a few
# percent at S = 4K (causal within the run-to-run spread: 669–676 against 653–669 TFLOP/s) and
# by up to about a fifth at 8K–16K (1.01–1.22× in all); at D256 by 1.29–1.53×. At D64 it is
# slower at every shape, with three consumer warpgroups too (the other candidates in the logs),
# so D64 stays on the Triton kernel. Nothing below S = 4K was probed, so shorter calls stay on
# the Triton kernel until measured. The shipped D128 config (128 keys × 4 stages) is not always
# the fastest non-causal one (× 2 stages: 793–872 against 792–862) but it is ahead causal at
# every shape of every run (× 2 stages: 658–762 against 669–838); the comment on
# `FP8_VARIANTS` has the candidates.

# %% [markdown]
# ## 5. The recorded H100 study
#
# Same code at B=1, H=8, D=128, S ∈ {1024, 4096}, five seeds per point, bf16 and fp16
# baselines: `fp8_study.run_fp8_record`, which `python -m flashcore fp8 --record` calls too (in
# the GPU profile, SWEEP full adds the Triton fp8 kernel's launch-config sweep). The fp8 rows
# call `flashcore.fp8_attention` as it ships, so by the dispatch above the S = 4096 rows ran on
# the Gluon FP8 mode and the S = 1024 rows on the Triton kernel. The record the CPU profile
# renders is `fp8.json`; its status line below says whether the kernels it measured are still
# today's.

# %%
if SWEEP not in ("quick", "full"):
    raise ValueError(f"SWEEP must be 'quick' or 'full', got {SWEEP!r}")
topic = RECORD_TOPIC if SWEEP == "full" else f"{RECORD_TOPIC}_quick"
if PROFILE == "gpu":
    payload = F.run_fp8_record(
        device="cuda",
        speed=MEASURE_SPEED,
        tune=SWEEP == "full",
        speed_shapes=F.default_speed_shapes()
        if SWEEP == "full"
        else F.fp8_shapes((4096, 16384)) + F.fp8_shapes((4096, 16384), head_dim=256),
        progress=tqdm,
    )
    write_result(
        topic,
        payload,
        command=f"notebooks/04_fp8.ipynb (PROFILE=gpu, SWEEP={SWEEP}, RECORD_TOPIC={RECORD_TOPIC})",
    )
record_key = (topic, None) if PROFILE == "gpu" else (RECORD_TOPIC, RECORDED_GPU)
record = read_result(*record_key)
print("recorded on", describe(record))
print(status_line_for(*record_key))
summary = record["error_summary"]
show = [r for r in summary if r["S"] == 4096]
print(
    table(
        show,
        [
            "dist",
            "causal",
            "impl",
            "rmse_median",
            "rmse_min",
            "rmse_max",
            "max_err",
            "own_bound_ratio",
        ],
        {k: "{:.2e}" for k in ("rmse_median", "rmse_min", "rmse_max", "max_err")}
        | {"own_bound_ratio": "{:.2f}"},
    )
)

# %%
save_figure(F.plot_rmse_by_recipe(summary, 4096), "04_rmse_by_recipe")

# %% [markdown]
# ## 6. The prior report's 29%, side by side
#
# The report gives no shape; it says the inputs were cast with no scale and that the max
# error was 0.294 (and the e4m3 round trip 12.3%, matched in section 1). Our `naive` recipe is
# that experiment. Its maximum error on N(0,1) inputs:

# %%
rows = [
    F.summary_lookup(summary, "normal", c, s, i)
    for c in (False, True)
    for s in (1024, 4096)
    for i in ("fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard")
]
print(
    table(
        rows,
        ["causal", "S", "impl", "rmse_median", "max_err"],
        {"rmse_median": "{:.2e}", "max_err": "{:.3f}"},
    )
)
naive = [r for r in rows if r["impl"] == "fp8_naive"]
for c in (False, True):
    for s in (1024, 4096):
        group = [r["rmse_median"] for r in rows if r["causal"] == c and r["S"] == s]
        print(
            f"causal={c!s:5} S={s}: RMSE of the four recipes within {100 * (max(group) / min(group) - 1):.1f}% of each other"
        )

# %%
# NBVAL_CHECK_OUTPUT
worst_naive = max(r["max_err"] for r in naive)
print(
    f"naive fp8, N(0,1): worst max error {worst_naive:.3f} (prior report: 0.294, at a shape it does not give)"
)
print(
    "naive fp8, N(0,1): every causal maximum error above every non-causal one "
    "(the first queries' outputs are one or two rows of V, rounded):",
    min(r["max_err"] for r in naive if r["causal"])
    > max(r["max_err"] for r in naive if not r["causal"]),
)
print(
    "on N(0,1), scaling changes the RMSE by < 5% at every recorded shape:",
    all(
        max(g) / min(g) < 1.05
        for g in (
            [r["rmse_median"] for r in rows if r["causal"] == c and r["S"] == s]
            for c in (False, True)
            for s in (1024, 4096)
        )
    ),
)
seed0 = next(
    r
    for r in record["errors"]
    if (r["dist"], r["S"], r["causal"], r["seed"], r["impl"])
    == ("normal", 4096, False, 0, "fp8_per_block")
)
print(
    f"normal, per_block, S=4096, non-causal, seed 0: RMSE {seed0['rmse']:.2e}, of which the "
    f"inputs' rounding alone (rmse_inputs_only) {seed0['rmse_inputs_only']:.2e}"
)

# %% [markdown]
# **Verdict on the prior report.** The report's 0.294 cannot be matched number for number: it
# names no shape, and a maximum error depends on the shape and the draw it is taken over. What
# the record shows is an error of the same kind and order: a worst maximum of 0.197 on N(0,1)
# inputs (naive, causal, S = 4096), and maxima of that size (0.151–0.209) only in the causal
# case, where the first queries see one or two keys and their output is essentially one row of
# V, rounded; without a causal mask the maxima are 0.020–0.042 (the table above). The diagnosis
# is **refuted**. On these inputs the missing scale factors are not the cause: every recipe,
# scaled or not, has the same RMSE within 0.6–1.4% at each recorded shape (printed above),
# because a scale cannot add mantissa bits. This holds on both kernels (S = 1024 ran on the
# Triton kernel, S = 4096 on the Gluon mode). The error is the 3-bit mantissa of e4m3 (relative
# rounding up to 6.25%), and most of it is the rounding of the inputs, not of p: in every
# N(0,1) row of the record's `errors`, `rmse_inputs_only` (float64 attention of the dequantized
# inputs against float64 attention of the originals) is most of the RMSE, e.g. 1.21e-03 of
# 1.37e-03 for per_block at S = 4096, non-causal, seed 0 (the last line above). Scales matter
# where the range matters, on outlier and massive-channel inputs (sections 3, 5 and 8). The
# whole "scaling infrastructure" is `quantize` in `flashcore/kernels/fp8.py`.

# %% [markdown]
# ## 7. Speed, and the error/speed trade-off
#
# At a given shape all four recipes run the same code: `naive` differs only in the p scale
# constant, and the three scaled recipes are identical at run time, so speed is measured for
# `naive` and `per_block`. Both rows time `flashcore.fp8_attention` as it ships, on
# pre-quantized inputs (as an fp8 model would hand them over); `kernel` names the kernel the
# dispatch picked for per_block (`gluon`: the FP8 mode, `triton`: kernels/fp8.py).
# `fp8_per_block_triton` times the Triton fp8 kernel on the same inputs with an explicit launch
# config (the sweep's pick at D128, the kernel's own table at D256), and `x_triton_fp8` is the
# shipped per_block over it: where `kernel` is `triton` the two columns time one kernel at one
# config (in this record the sweep's pick is the kernel's own table, 64x128 w4 s3), so their
# ratio there is the timing noise. The cost of `quantize` from bf16 (plain PyTorch, unfused) is
# listed separately. The bf16 kernel and SDPA's backends run on the same shapes in the same
# process (B·S = 16K, H·D = 2048: H = 16 at D128, 8 at D256). The bf16 column (`flashcore`) is
# `flashcore.attention` as dispatched (`FORWARD_GLUON_FROM` in `flashcore/dispatch.py`): the
# Gluon forward at every shape here except D128 causal S = 1024, which runs its Triton kernel.

# %%
speed = F.speed_table(record["speed"])


def num(spec):
    """A table format that prints '-' where an older record has no such column."""
    return lambda v: "-" if v is None else spec.format(v)


tfl = (
    "flashcore",
    "sdpa_flash",
    "sdpa_cudnn",
    "fp8_naive",
    "fp8_per_block",
    "fp8_per_block_triton",
)
ratio_cols = ("x_bf16", "x_cudnn", "x_triton_fp8")
ms_cols = ("quantize_ms_per_block", "attn_ms_per_block")
cols = ["D", "causal", "S", "B", "H", "kernel", *tfl, *ratio_cols, *ms_cols]
print(
    table(
        [{c: l.get(c) for c in cols} for l in speed],
        cols,
        {c: num("{:.0f}") for c in tfl}
        | {c: num("{:.2f}") for c in ratio_cols}
        | {c: num("{:.3f}") for c in ms_cols},
    )
)
print(
    "(TFLOP/s; fp8_* as shipped, kernel = the one that served fp8_per_block; x_bf16 = fp8 per_block "
    "/ flashcore bf16; x_cudnn = fp8 per_block / SDPA cuDNN bf16; x_triton_fp8 = fp8 per_block as "
    "shipped / the Triton fp8 kernel)"
)
tuned = record.get("tuned_config")
print("Triton fp8 kernel's launch config from the sweep in the record (its D128 rows):", tuned)
print(table(F.tuning_rows(record), ["config", "causal", "TFLOP/s"]))
print(
    "(launch-config sweep of the Triton fp8 kernel at B=2, H=16, S=8192, D=128; "
    "ws = Triton warp specialization)"
)

# %%
# NBVAL_CHECK_OUTPUT
# The same kernel timed twice per shape: where the dispatch picked the Triton kernel, the
# shipped per_block row and the explicit Triton row run one kernel at one config; at every
# shape fp8_naive and fp8_per_block run one kernel that differs only in p's scale constant.
by_impl = {(r["D"], r["causal"], r["S"], r["impl"]): r for r in record["speed"]}
same = [l for l in speed if l.get("kernel") == "triton" and "x_triton_fp8" in l]
if same:
    worst = min(same, key=lambda l: min(l["x_triton_fp8"], 1 / l["x_triton_fp8"]))
    ms = by_impl[(worst["D"], worst["causal"], worst["S"], "fp8_per_block")]["timing"]["median_ms"]
    print(
        f"shipped per_block / Triton row where both are the Triton kernel: "
        f"{min(l['x_triton_fp8'] for l in same):.2f}-{max(l['x_triton_fp8'] for l in same):.2f}; "
        f"widest at D{worst['D']} causal={worst['causal']} S={worst['S']}: "
        f"{worst['fp8_per_block']:.0f} against {worst['fp8_per_block_triton']:.0f} TFLOP/s "
        f"at a {ms:.2f} ms call"
    )
for d in sorted({l["D"] for l in speed}):
    pairs = [l["fp8_naive"] / l["fp8_per_block"] for l in speed if l["D"] == d]
    print(
        f"D{d}: fp8_naive / fp8_per_block (one kernel per shape): {min(pairs):.2f}-{max(pairs):.2f}"
    )
odd = min(speed, key=lambda l: l["fp8_naive"] / l["fp8_per_block"])
t = by_impl[(odd["D"], odd["causal"], odd["S"], "fp8_naive")]["timing"]
print(
    f"  lowest at D{odd['D']} causal={odd['causal']} S={odd['S']}: naive {odd['fp8_naive']:.0f} "
    f"against per_block {odd['fp8_per_block']:.0f} TFLOP/s; the naive row's p95 "
    f"{t['p95_ms']:.3f} ms against its median {t['median_ms']:.3f} ms"
)

# %%
save_figure(F.plot_speed(speed, head_dim=128), "04_fp8_speed")

# %%
save_figure(F.plot_speed(speed, head_dim=256), "04_fp8_speed_d256")

# %%
from flashcore.studies.bench import geomean

rates = F.speed_geomeans(speed, min_seqlen=4096, head_dim=128)
save_figure(F.plot_error_vs_speed(summary, rates), "04_error_vs_speed")
for d in sorted({l["D"] for l in speed}):
    if not [l for l in speed if l["D"] == d and l["S"] >= 4096]:
        continue
    g = F.speed_geomeans(speed, min_seqlen=4096, head_dim=d)
    print(
        f"D{d}, geomean TFLOP/s at S>=4096: fp8 {g['fp8']:.0f}, bf16 {g['bf16']:.0f}, "
        f"fp8 incl. unfused quantize {g['fp8_with_quantize']:.0f}"
    )
    q_over_attn = [
        l["quantize_ms_per_block"] / l["attn_ms_per_block"] for l in speed if l["D"] == d
    ]
    print(
        f"  unfused quantize from bf16 / fp8 attention time: {min(q_over_attn):.2f}-{max(q_over_attn):.2f}"
    )

# %% [markdown]
# ## 8. The targets
#
# The targets, on the H100: fp8 at **≥ 1000 TFLOP/s at D = 128, S ≥ 8K, non-causal**,
# and there at **≥ 1.5× flashcore's bf16**; and the per_block+Hadamard recipe's **RMSE on the
# outlier inputs ≤ 9.1e-3** (FlashAttention-3's figure), per recorded row. Speed is timed for
# per_block, which runs the Hadamard recipe's code at run time. D = 256 is held to the first
# two for information, at every recorded S. The notebook's earlier targets follow: ≥ 1.5× bf16
# at every D = 128 shape with S ≥ 4096, and the Hadamard recipe's RMSE ≥ 2.5× below
# per-tensor's.


# %%
# NBVAL_CHECK_OUTPUT
def verdict(ok):
    return "pass" if ok else "MISSED"


for d, min_s, note in ((128, 8192, "the target"), (256, 0, "for information")):
    lines = [l for l in speed if l["D"] == d and not l["causal"] and l["S"] >= min_s]
    if not lines:
        print(f"D{d} non-causal: no speed line in this record ({note})")
    for l in lines:
        print(
            f"D{d} non-causal S={l['S']:<5} [{l.get('kernel', 'triton')}] ({note}): fp8 "
            f"{l['fp8_per_block']:.0f} TFLOP/s >= 1000: {verdict(l['fp8_per_block'] >= 1000)};  "
            f"{l['x_bf16']:.2f}x bf16 ({l['flashcore']:.0f}) >= 1.5x: {verdict(l['x_bf16'] >= 1.5)}"
        )
error_d = record.get("error_shape", {}).get("D", 128)
for h in sorted(
    (r for r in summary if r["dist"] == "outlier" and r["impl"] == "fp8_per_block_hadamard"),
    key=lambda r: (r["S"], r["causal"]),
):
    print(
        f"outlier, per_block+Hadamard, S={h['S']:<5} causal={h['causal']!s:5} "
        f"[{h.get('kernel') or fp8_dispatch(error_d, h['causal'], h['S']) + ' by the table'}]: "
        f"RMSE median {h['rmse_median']:.2e}, "
        f"worst of {h['seeds']} seeds {h['rmse_max']:.2e};  <= 9.1e-3: median "
        f"{verdict(h['rmse_median'] <= 9.1e-3)}, every seed {verdict(h['rmse_max'] <= 9.1e-3)}"
    )
    own = [
        (e["rmse_inputs_only"], e["rmse"])
        for e in record["errors"]
        if (e["dist"], e["impl"], e["S"], e["causal"])
        == ("outlier", h["impl"], h["S"], h["causal"])
        and "rmse_inputs_only" in e
    ]
    if own:
        print(
            f"    the inputs' rounding alone (rmse_inputs_only, no kernel): "
            f"{min(i for i, _ in own):.2e}-{max(i for i, _ in own):.2e}, "
            f"{min(i / t for i, t in own):.1%}-{max(i / t for i, t in own):.1%} of each seed's RMSE"
        )
print("(kernel in brackets: as the record names it; 'by the table': FP8_GLUON_FROM's pick)")
print()
long = [l for l in speed if l["S"] >= 4096 and l["D"] == 128]
ratios = [l["x_bf16"] for l in long]
print(
    f"fp8 / bf16 throughput at D=128, S>=4096: per shape {min(ratios):.2f}-{max(ratios):.2f}, geomean {geomean(ratios):.2f}"
)
# The same measurement in another process (the quick record): a measure of run-to-run noise
# only when its status line says current (same kernels); stale, it measured another version of
# the kernel files, and whether the fp8 code differs is for the verdict below to say.
quick = read_result("fp8_quick", RECORDED_GPU)
quick_long = [l for l in F.speed_table(quick["speed"]) if l["S"] >= 4096 and l["D"] == 128]
o = [l["x_bf16"] for l in quick_long]
print(f"  quick record ({describe(quick)}): {min(o):.2f}-{max(o):.2f}, geomean {geomean(o):.2f}")
print("  " + status_line_for("fp8_quick", RECORDED_GPU))
# fp8 as shipped, the quick run over the record, at the shapes both timed
in_record = {(l["S"], l["causal"]): l["fp8_per_block"] for l in long}
twice = [
    l["fp8_per_block"] / in_record[l["S"], l["causal"]]
    for l in quick_long
    if (l["S"], l["causal"]) in in_record
]
if twice:
    print(
        f"  fp8 as shipped, quick run / record at the {len(twice)} shapes both timed: "
        f"{min(twice):.3f}-{max(twice):.3f}"
    )
print(
    "earlier target: >= 1.5x bf16 at every D=128 shape, S>=4096:",
    verdict(all(r >= 1.5 for r in ratios)),
)
for causal in (False, True):
    h = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_block_hadamard")
    t = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_tensor")
    print(
        f"outlier inputs, S=4096, causal={causal!s:5}: RMSE per-block+Hadamard {h['rmse_median']:.2e}, "
        f"per-tensor {t['rmse_median']:.2e}, ratio {t['rmse_median'] / h['rmse_median']:.2f};  "
        f"earlier target >= 2.5x below per-tensor: {verdict(t['rmse_median'] / h['rmse_median'] >= 2.5)}"
    )

# %% [markdown]
# **Verdict on the targets** (the lines above, from `fp8.json`, commit 1c870f9, 2026-11-28;
# **current**, today's kernels, the FP8 schedule fix of section 9 included):
#
# * **≥ 1000 TFLOP/s at D = 128, S ≥ 8K, non-causal: missed at both shapes.** The Gluon FP8
#   mode serves them and reaches 790 (S = 8192) and 836 (S = 16384), 0.79 and 0.84 of the
#   target (754 and 784 at 5403789, before the schedule fix; 829 and 835 at c530054, the
#   machine code that ships again; 823 and 816 at 8739133). At D128, S ≥ 4K it runs
#   790–836 TFLOP/s non-causal and 674–810 causal, 1.00–1.16× the Triton fp8 kernel on the
#   same inputs (0.99–1.05× at 5403789, 1.00–1.13× at c530054); the 1.00 is causal S = 4096
#   (674 against 672), where the probe runs of section 4 had the Gluon mode 1.01–1.02× ahead;
#   non-causal S = 4096 is 1.07 (796 against 742; the probes 1.04–1.05).
# * **≥ 1.5× bf16 at the same shapes: missed at both** (1.29 at S = 8192 against bf16's 613,
#   1.38 at S = 16384 against 607). Across D128 S ≥ 4K the ratio is 1.20–1.41, geomean 1.30,
#   so the earlier target (≥ 1.5× at every D128 shape from 4K) is missed too; it was 1.12–1.25
#   with the Triton kernel alone (commit 5aac3ce), 1.19–1.41, geomean 1.29, at 8739133,
#   1.19–1.38, geomean 1.27, at c530054 and 1.14–1.28, geomean 1.21, at 5403789. Part of the
#   rise over 5403789 is the baseline's: the bf16 row at S = 8192 ran 613 TFLOP/s here against
#   661 there, on bf16 machine code the fix did not change. The `quick record` lines are this
#   notebook's GPU profile, run with papermill on the H100 at d807aaa (2026-11-27). Its status
#   line says stale: its kernel files predate the exp2-emulation option (32159e0, 840fd14), the
#   schedule fix and the backward dispatch (the files the line names). For fp8 it ran
#   c530054's schedule, the one this record runs again (section 9), so the two runs time the
#   same FP8 machine code in two processes, and the spread between them (the last indented
#   line: 1.000–1.017, the quick run level or ahead at all four shapes) is run-to-run noise.
#   Against the record at 5403789, on the other schedule, it was 1.032–1.069. The quick run
#   misses 1.5× too (1.19–1.36).
# * **D = 256, for information: both pass** at every recorded S: 1068–1121 TFLOP/s
#   non-causal at S 4K–16K and 1.56–1.66× bf16 there (the causal lines in section 7: 884–1182,
#   1.43–1.81× bf16); 1.28–1.46× the Triton fp8 kernel, causal or not. The narrowest margin is
#   S = 4096 non-causal, 1068 TFLOP/s against 1000 (1053 at 5403789, 1055 at c530054) and
#   1.56× bf16 against 1.5× (1.59× at 5403789, 1.55× at c530054).
# * **RMSE ≤ 9.1e-3 on the outlier inputs: met at S = 4096, missed at causal S = 1024.** The
#   S = 4096 rows, served by the Gluon mode, have medians 8.38e-03 (non-causal) and 8.73e-03
#   (causal), every seed within the target. At S = 1024, on the Triton kernel, non-causal passes
#   (8.14e-03) and causal does not: median 9.90e-03, every seed above 9.1e-3. The kernel is not
#   the cause: there the inputs' rounding alone (float64 attention of the dequantized inputs,
#   no kernel involved) is about 96% of each seed's RMSE and above 9.1e-3 in four seeds of five
#   (the indented lines above), so no kernel computing on these e4m3 inputs can meet the target
#   at that shape; a finer recipe could. (The error rows are the same numbers as at 5403789 and
#   c530054.)
# * **≥ 2.5× below per-tensor (earlier target): missed in both cases**, 2.29 non-causal
#   (8.38e-03 against 1.92e-02) and 1.89 causal (8.73e-03 against 1.65e-02). The rotated recipe
#   lands near FlashAttention-3's 9.1e-3, but our per-tensor baseline on these inputs is already
#   below FlashAttention-3's per-tensor 2.4e-2; whether FlashAttention-3's baseline was measured
#   at another shape or by another method, this record cannot tell.
#
# The spread of one kernel timed twice (section 7) bounds what these timings can say. Where
# the dispatch picks the Triton kernel, the shipped row and the explicit Triton row run one
# kernel at one config and agree within 0.99–1.03 (widest at D128 non-causal S = 2048: 722
# against 703 TFLOP/s at a 0.38 ms call; 0.99–1.06 at 5403789). `fp8_naive` and
# `fp8_per_block` run the same code, but compiled apart (p's scale is a compile-time
# constant). At c530054 naive was below per_block at all three D128 non-causal shapes (726,
# 764, 786 against 791, 829, 835, 0.92–0.94), and in the quick run too; at 5403789, both
# builds on another schedule (section 9; naive's build too,
# `logs/sass_lineinfo_c530054_5403789.log`), it was above at every D128 shape (779, 799, 805
# against 761, 754, 784 non-causal; 1.01–1.10). In this record, both builds on c530054's
# schedules again, naive is below at the three non-causal shapes the Gluon mode serves (737,
# 762, 787 against 796, 790, 836) and at causal S = 4096 and 8192 (661 and 699 against 674 and
# 771; the printed lowest), above at causal S = 16384 (818 against 810; at c530054 806 against
# 766) and by 1–2% at S = 1024 and 2048, where the Triton kernel serves both (the printed
# 0.91–1.02). So at the Gluon mode's non-causal D128 shapes the sign followed the schedule:
# naive behind in the three runs on c530054's, ahead in the one on the other; no A/B of the
# naive build alone has run. Against that, the D128 speed verdicts are clear (790 and 836
# against 1000; 1.29× and 1.38× against 1.5×, 1.24× and 1.36× at S = 4K and 16K in the quick
# run), while two passes are near their thresholds: D256 non-causal S = 4096 at 1068 TFLOP/s
# (1.56× bf16), and the causal S = 4096 RMSE's worst seed, 8.85e-03 against 9.1e-3.

# %% [markdown]
# ## 9. Why D = 128 misses: the softmax loop's instruction budget
#
# The tensor cores run e4m3 at twice the bf16 rate, so an FP8 key tile's two matmuls take half
# the cycles of a bf16 tile; the softmax of the tile (one exponential per score, the row max
# and sum, the conversions) does not shrink. `flashcore/studies/sass_budget.py` compiles the
# Gluon forward for sm_90 (offline, no GPU), finds each consumer warpgroup's steady-state
# softmax loop in the SASS (the innermost loop holding `MUFU.EX2`, its unmasked variant) and
# counts its instructions per key tile. With two consumer warpgroups, each putting one warp
# on every SM sub-partition, a round of one tile each costs every sub-partition
# 2 × (loop instructions) issue cycles and 2 × (`MUFU` instructions) × 8 special-function
# cycles, against 2 × (the tile's FLOPs / the SM's dense rate) tensor cycles. The module's
# docstring gives the rates. A ratio near 1 means the loop has no slack: ping-pong can at best
# tie softmax and matmul, and every wait adds to the tile's time. It is a budget, not a
# throughput bound.

# %%
from flashcore.studies import sass_budget

loops = sass_budget.budget_report()
columns = ["kernel", "BLOCK_N", "FMUL", "GMMA", *sass_budget.TABLE_COLUMNS]
print(table(loops, columns, sass_budget.TABLE_FORMATS))
# Measured beside it: non-causal S = 16K, TFLOP/s and the fraction of the dense datasheet peak
# (989 bf16, 1979 e4m3) the budget's rates come from: bf16 from perf.json (the Gluon kernel
# serves D64, D128 and D256 there), fp8 from fp8.json. perf.json is of 5403789's kernels (stale
# since the 2026-11-28 kernel changes, which left the bf16 forward's machine code as it timed
# it); fp8.json of 1c870f9's, the FP8 schedule fix included. perf.json's D64 row times D64
# non-causal as it ships since 840fd14, one exponential in 8 emulated, the build the budget's
# D64 row compiles.
perf = read_result("perf", RECORDED_GPU)
measured = {
    ("bf16", r["D"]): r["tflops"]
    for r in perf["forward"]
    if r["impl"] == "flashcore" and r["S"] == 16384 and not r["causal"] and r["dtype"] == "bfloat16"
}
measured |= {
    ("fp8", r["D"]): r["tflops"]
    for r in record["speed"]
    if r["impl"] == "fp8_per_block" and r["S"] == 16384 and not r["causal"]
}
for row in loops:
    value = measured.get((row["dtype"], row["D"]))
    peak = 1979 if row["dtype"] == "fp8" else 989
    if value:
        print(
            f"  {row['kernel']}: issue/tensor {row['issue_over_tensor']:.2f}, MUFU/tensor "
            f"{row['mufu_over_tensor']:.2f}; measured {value:.0f} TFLOP/s = {value / peak:.0%} of {peak}"
        )
print("  " + status_line_for("perf", RECORDED_GPU))
print("  " + status_line_for("fp8", RECORDED_GPU))

# %%
# NBVAL_CHECK_OUTPUT
tight = {(r["dtype"], r["D"]) for r in loops if r["mufu_over_tensor"] >= 1}
print("loops whose exponentials take at least their matmuls' cycles:", sorted(tight))
print(
    "every other loop needs at most 0.7 of its matmuls' cycles, issue and MUFU:",
    all(
        max(r["issue_over_tensor"], r["mufu_over_tensor"]) <= 0.7
        for r in loops
        if (r["dtype"], r["D"]) not in tight
    ),
)

# %% [markdown]
# Read with the measurements: two loops need about as many cycles as their tensor cores, on
# the special-function pipe or on the issue slots: FP8 at D128 (MUFU/tensor 1.03, issue/tensor
# 1.10) and bf16 at D64 (issue/tensor 0.94, MUFU/tensor 0.91), the two with the least matmul
# work per score (an e4m3 D128 tile takes the cycles of a bf16 D64 one). The D64 row is the
# kernel that ships: since `840fd14` D64 non-causal calls run one exponential in 8 on the FMA
# pipe (`EXP2_EMULATED_FULL`, the end of this section), and since `ae4c7ad` the budget compiles
# what the launcher picks. Before the exp2 default (compiled without it) the row was 457
# instructions and 66 `MUFU`, issue/tensor 0.89 and MUFU/tensor 1.03; with it, 514 and 58,
# 1.00 and 0.91; since `1e7d429` (P converted to the P V operand two values at a time, which
# drops the 32 `PRMT` half-swaps ptxas put after the conversions) 482 and 58, 0.94 and 0.91,
# and the bf16 D128 and D256 loops 19 and 14 instructions shorter. The emulation took 8 `MUFU` out of the loop and put 57 instructions in
# (about 7 per emulated exponential): the loop still has no slack, now on the issue side rather
# than the special-function pipe. So the verdict cell above changed: its list of loops whose
# exponentials take at least their matmuls' cycles is now FP8 D128 alone (bf16 D64 was on it
# too before the exp2 default), and "every other loop needs at most 0.7" now prints False,
# because D64's loop, off that list, needs 0.94 of its matmuls' cycles in issue slots. The two
# are the furthest from their peaks, 42% and 46%, against 57% for FP8 at D256 and 62-70% for
# bf16 at D128 and D256 (lines above: fp8.json of `1c870f9`'s kernels, stale since the backward
# dispatch changed `interface.py` and `dispatch.py` again, not the FP8 kernels; perf.json of
# `5403789`'s, stale since the 2026-11-28 kernel changes, which did not change the bf16
# forward's machine code). The 46% at D64 is the build compiled here, one exponential in 8
# emulated: perf.json is the first sweep that times it (453 TFLOP/s; 450, 45%, at `d8fa890`
# with every exponential on the MUFU). FP8 D128's 42% is 836 TFLOP/s, as in the record of
# `c530054` (835, 42%); the record of `5403789` had 784 (40%).
#
# **The FP8 mode's schedule was part of that drop: most of it at S = 16K, less than half at
# 8K.** The history: the FP8 mode's only source change between c530054 and 5403789 was the
# exp2 option it does not take (`EXP2_EMULATED` = 0), and its PTX was the same as c530054's, but its machine code was not:
# the `_exp2` helper, inlined at k = 0, left line-info scope labels that ptxas scheduled
# around, so the D128 loop had the same 565 instructions, the same mix, in another order
# (offline, all six FP8 kernels: `logs/sass_lineinfo_c530054_5403789.log`; compiled without
# line info the two trees' SASS is identical). Whether the drop (754 / 784 against 829 / 835
# TFLOP/s at S = 8K / 16K) was that schedule or the session was open: it lay inside that
# config's own spread at this shape (two rounds in one process, 776 and 863 TFLOP/s, below).
# The alternating A/B answered it (`fp8_schedule_ab_timing.json`, commit 68476d0, 2026-11-28,
# H100; `logs/fp8_schedule_ab_68476d0.log`): branch `exp2-k0-inline` (b831276: `exp2` inline
# at k = 0, c530054's SASS) against main's schedule, `fp8_attention` as shipped on
# per_block+Hadamard inputs, five rounds alternating in one process. The branch's forward
# time over main's, median of the rounds, at S = 4K / 8K / 16K: D128 0.962 / 0.961 / 0.947
# non-causal and 0.978 / 0.979 / 0.972 causal, every round's ratio below 1 (0.935–0.989);
# D256 1.014 / 1.002 / 1.003 and 1.000 / 0.996 / 1.004 (rounds 0.980–1.036). So the schedule
# cost 2–5% of the time at D128 and nothing measurable at D256. The branch was merged
# (a651e4a), and `fp8.json` at 1c870f9 runs c530054's machine code again: 790 / 836 at
# S = 8K / 16K. The 5403789 record's 754 / 784 over the A/B's 0.961 / 0.947 would be 785 / 828;
# at 16K the record is back at c530054's 835, at 8K it is 790 against 829 on the same machine
# code, the rest of that gap session to session.
#
# In both loops the softmax cannot hide under the matmuls: ping-pong can at best tie the two,
# and every wait adds to the tile's time. At D256 the matmuls double and the loop does not, and
# the same pipeline clears 1000 TFLOP/s. So at D128 (and for the bf16 forward at D64) it is
# the instructions per tile that have to go, not the tensor-core schedule.
#
# The FP8 loop has 131 `FMUL` against the bf16 loop's 66 at the same tile: the 64 more are
# `p × P_SCALE`, one per score a thread holds, scaling P into e4m3's normal range before it is
# stored. A power of two can instead go into the exponent (exp2(x + 8) = 256 · exp2(x), the
# running sum scaled alike so that it cancels in O / l). Branch `fp8-fold-p-scale`
# does this. Compiled offline by this module, its D128 loop has 503 instructions against 565
# (issue/tensor 0.98), and the bf16 kernels' PTX is unchanged.
#
# **On the H100 the fold was slower where it mattered** (commit b391df4, 2026-11-27, two
# alternating rounds against main's kernel in one process, the FP8 mode's 50 GPU tests
# passing first: `logs/fp8_fold_ab_b391df4.json`). Branch over main, per S = 4K / 8K / 16K:
# at the shipped D128 config (128 keys, 4 stages) 0.92 / 0.94 / 0.92 non-causal and
# 0.97 / 0.97 / 1.01 causal; at D256's 0.97 / 0.99 / 0.95 non-causal and 1.03 / 1.04 / 1.03
# causal. Only the three-warpgroup configs gained (1.02–1.17 over themselves on main); against
# the shipped config they are below at S = 4K and at causal 8K and 3-4% above at 16K, inside
# the rounds' spread there (the shipped config's own rounds at non-causal 16K: 776 and 863
# TFLOP/s). So removing a ninth of the loop's instructions did not buy time: the budget says the loop
# has no slack, not that its issue count is what binds. The branch stays unmerged; what the
# time goes to at D128 is the next measurement (Nsight Compute's stall reasons on both
# builds), not a guess. The 32 `STS` are P's trip through
# shared memory, two bytes a store (section 4 says why P does not stay in registers). The
# exponentials themselves (66 `MUFU` per tile) stay: at FP8 D128 they alone fill the
# special-function pipe for as long as the tensor cores work (at D64 they did too before the
# exp2 default, MUFU/tensor 1.03; as it ships, 58 `MUFU` take 0.91).
#
# A second build already in every run says the same. `fp8_naive` runs this kernel with
# P_SCALE = 1, so its 64 multiplies fold away at compile time: offline its D128 loop has 501
# instructions against per_block's 565, the difference exactly those `FMUL`s, every other
# class the same count (`tools/fp8_pscale_sass.py`, `logs/fp8_pscale_sass_ebac0bd.log`; that
# run placed each class's first and last instruction 22 slots too late, its tool slicing the
# disassembly's lines by instruction indices: the same kernels through the fixed tool,
# `logs/fp8_pscale_sass_ebac0bd_fixed.log`, give the same counts and spans). In
# `fp8.json` at c530054 it ran 0.92-0.94 of per_block at D128 non-causal, as the fold did
# (0.92 and 0.94 in the quick run at d807aaa). In the record at 5403789, both builds on the
# same PTX but another schedule (above), it ran 1.02-1.06 of per_block there (779, 799, 805
# against 761, 754, 784 TFLOP/s); at 1c870f9, c530054's schedules back, 0.93-0.96 again (737,
# 762, 787 against 796, 790, 836): in these records the sign of the gap follows the schedule
# (section 8). In the shorter loop the
# exponentials sit closer together (66 `MUFU.EX2` over 254 instruction
# slots against 372), with fewer independent instructions between them while the
# special-function pipe drains. That is a candidate for the stall profile to confirm or
# refute, not a finding.
#
# **The stall profile confirms it** (Nsight Compute on the H100, commit 0f83d17, 2026-11-27:
# `NCU_ONLY=fp8 bash tools/gpu_ncu_compare.sh`, one launch each of `fp8_per_block` and
# `fp8_naive` at D128, S = 8K, B = 2, H = 16, non-causal; `logs/ncu_fp8_pscale_0f83d17.*` and
# the two CSVs beside it). The naive build ran 1435 µs against 1292 (tensor pipe 41.4% active
# against 45.8%), issuing 1.66 instructions a cycle per SM against 2.07 although it has fewer
# to issue. Its warps wait longer per issued instruction on the MIO queue (`mio_throttle`
# 0.59 against 0.09; the `MUFU` instructions go through it) and at barriers (2.56 against
# 1.76: the other warpgroup waits at the ping-pong turn), and a little more on memory (long
# scoreboard 0.95 against 0.76). So the multiplies were spacing the exponentials: take them
# out and the exponentials queue up behind the special-function pipe. That is one launch of
# each build, on c530054's schedules, which ship again since the fix: the records on them
# (c530054, 1c870f9, the quick run) all have naive behind at D128 non-causal, while the
# 5403789 record, on the other schedules, had naive ahead at every D128 shape. So the profile
# explains these schedules' launches, not a cost the shorter loop has under every schedule.
#
# **Moving exponentials to the FMA pipe bought time only at bf16 D64 non-causal** (trial
# commit 216cefa; 2026-11-27, H100, three alternating rounds in one
# process: `logs/exp2_emulation_fp8_216cefa.*`, `logs/exp2_emulation_bf16_216cefa.*`). It
# computes k of every 8 exponentials of an unmasked tile as 2^round(x) · p(x − round(x)), p a
# degree-3 polynomial (relative error at most 7.5e-5), FlashAttention-4's trick on Blackwell.
# Offline, each emulated exponential costs 7 more instructions in the loop (565 → 622 at
# k = 1; 216cefa's FP8 D128 kernel through `studies/sass.py`'s `gluon_fp8_forward_spec` and
# `sass_budget.softmax_loops`, with EXP2_EMULATED set). FP8 D128, k = 1 over k = 0 at S = 8K / 16K: 803 / 811 against 794 / 811 TFLOP/s
# non-causal, 721 / 781 against 730 / 769 causal (−1.3% to +1.5%, inside the rounds'
# spread); k = 2 is 3–9% slower at every shape. The bf16 Gluon kernel at D128 is 2.7% slower
# to 0.9% faster with k = 1. Only at D64, the other loop the budget called tight (compiled
# with every exponential on the MUFU),
# did k = 1 gain: 473 / 487 against 452 / 472 TFLOP/s non-causal at S = 4K / 16K, and
# −1.1% / +1.9% causal; a second run over D64's sweep (`logs/exp2_emulation_d64_216cefa.*`) had
# k = 1 at +0.1 / +4.0 / +6.8 / +2.5% non-causal (S = 2K / 4K / 8K / 16K) and 2.4–5.2% slower
# causal. The option is now in the kernel (`EXP2_EMULATED`, commit 32159e0), and from these
# measurements D64 non-causal bf16/fp16 calls on the Gluon kernel take k = 1 by default
# (`EXP2_EMULATED_FULL`, 840fd14); causal calls, D128, D256 and the FP8 mode keep k = 0
# (`attention_hopper_fp8` passes `EXP2_EMULATED` = 0 unless asked), so FP8's exponentials all
# stay on the MUFU. `perf.json` at 5403789 is the first record of the default: the D64
# non-causal bf16 rows the Gluon kernel serves run 465 / 461 / 453 TFLOP/s at S = 4K / 8K /
# 16K, against 439 / 439 / 450 at `d8fa890` with every exponential on the MUFU (+5.9 / +4.9 /
# +0.8%), while D64 causal, which kept k = 0, moved −0.3% to −2.7%. Where it did not help,
# the issue slots are as tight as the special-function
# pipe (FP8 D128's two ratios above are both near 1), so an exponential moved off one lands
# on the other. The D64 row above shows that move on the kernel that ships: MUFU/tensor 1.03
# → 0.91, issue/tensor 0.89 → 1.00; the budget does not say which of the two binds, and the
# timings (the trial's logs, then `perf.json`'s D64 rows) say the move bought time there, least
# at S = 16K. What is left at FP8 D128 is the order of the
# loop: spacing the exponentials without adding instructions, which Triton's scheduler decides,
# not this code (in the A/B above, one reordering by ptxas moved the time by 2–5%).

# %% [markdown]
# ## Conclusion
#
# (Numbers are from the recorded H100 run above, `results/nvidia-h100-80gb-hbm3/fp8.json`,
# commit 1c870f9, 2026-11-28: fp8 as shipped, the Gluon FP8 mode at D128/D256 from S = 4K,
# beside the Triton fp8 kernel. Its status line says **current** (text only changed since:
# `dispatch.py`). The record replaced the one at 5403789, whose kernel files changed on
# 2026-11-28: the FP8 schedule fix (a651e4a in `forward_hopper.py`: `exp2` inline at k = 0, so
# the six FP8 kernels' machine code is c530054's again, section 9) and the backward dispatch
# (`interface.py`, `dispatch.py`), which this study does not run. The error rows are the same
# numbers as 5403789's and c530054's; the speed rows are a new measurement: fp8 per_block on
# the Gluon mode at 1.03–1.07 of 5403789's at D128 and 0.98–1.01 at D256, the Triton kernel's
# shapes within 0.6% (section 8 compares them).)
#
# * **The prior report's kind of error is real; its diagnosis is not.** Its 0.294 cannot be
#   matched without its shape, but unscaled e4m3 attention does have maximum errors of this
#   order on N(0,1) inputs (worst 0.197), in the causal case. Scaling does not change that: on
#   these inputs all four recipes agree within 0.6–1.4%. The cause is e4m3's 3-bit mantissa,
#   mostly through the rounding of the inputs (`rmse_inputs_only`), less through p. FP8 was
#   never blocked on "scaling infrastructure".
# * **Where scaling and rotation matter is outliers.** On FlashAttention-3's outlier inputs
#   per-block scaling helps a little (median RMSE 1.67e-02 against per-tensor 1.92e-02 at
#   S = 4096, non-causal; 1.47e-02 against 1.65e-02 causal). The Hadamard rotation roughly
#   halves the RMSE (8.38e-03 against 1.92e-02 non-causal, 8.73e-03 against 1.65e-02 causal)
#   and meets FA3's 9.1e-3 in every seed at S = 4096; at causal S = 1024 it does not (median
#   9.90e-03, most of it the inputs' own rounding). It does not reach FA3's gap to per-tensor (2.4e-2 against 9.1e-3): the measured
#   ratio is 2.29 non-causal and 1.89 causal. On massive-channel activations the rotation's
#   gain is larger: median RMSE 4.27e-02 against per-tensor 1.50e-01 (non-causal) and 5.24e-02
#   against 1.81e-01 (causal).
# * **Speed.** FlashAttention-3's structure, ported to fp8 as the Gluon forward's FP8 mode,
#   takes D128 fp8 at S ≥ 4K to 790–836 TFLOP/s non-causal and 674–810 causal, 1.00–1.16× the
#   Triton fp8 kernel and 1.20–1.41× flashcore's bf16 (geomean 1.30), and D256 to 1068–1121
#   non-causal and 884–1182 causal, 1.28–1.46× the Triton kernel and 1.43–1.81× bf16. D256
#   clears 1000 TFLOP/s and 1.5× bf16 at every non-causal S; D128 clears neither (790/836
#   TFLOP/s, 1.29/1.38× at S = 8K/16K non-causal; 754/784 and 1.14/1.28× at 5403789, whose
#   FP8 machine code had another schedule, worth 2–5% of the time at D128 in the alternating
#   A/B of section 9; 829/835 and 1.26/1.38× at c530054, the machine code that ships again).
#   At S = 4K this record has the Gluon mode 1.07× the Triton kernel non-causal and level with
#   it causal (1.00), where the probe runs of section 4 had it 1.04–1.05 and 1.01–1.02 ahead.
#   Below S = 4K the Triton kernel still serves every call (not
#   probed with the Gluon mode), and D64 stays on it (measured faster). One structural
#   difference from FlashAttention-3 remains in the FP8 mode: P goes to the $PV$ wgmma through
#   shared memory rather than registers (section 4); how much of the D128 gap it accounts for
#   is not measured. Triton's own warp specialization did not help the Triton kernel: the
#   `ws` rows of the sweep are within a few TFLOP/s of the same config without it (708 against
#   707, 547 against 550 non-causal; 647 against 645, 522 against 520 causal), and the
#   sweep's best config (64x128 w4 s3: 798 non-causal, 739 causal) has no `ws` run, a known
#   compile failure. An unfused `quantize` from bf16 costs 0.84× the D128 fp8 attention time
#   at best (non-causal S = 16K) and up to 13.53× (short S); counting it, fp8's D128 geomean at
#   S ≥ 4096 drops to 233 TFLOP/s, below bf16's 597, so fp8 pays only when the producer
#   already emits fp8.
# * Every fp8 output stayed within the worst-case bound of its own float64 reference (the
#   p-rounding bound), live and in the record, on both kernels, so the errors above belong to
#   the format, not to kernel bugs.
