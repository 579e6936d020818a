# %% [markdown]
# # 04 · FP8 attention: the negative result, measured, and what fixes it
#
# A prior report (seed 001) cast Q, K, V to FP8 (e4m3) with no scaling, measured a 29% maximum
# error, blamed the missing scale factors, and cancelled FP8 as "3–6 months" of work.
# FlashAttention-3 reports FP8 at ~1 PFLOP/s on an H100 with RMSE 9.1e-3 against 2.4e-2 for a
# per-tensor baseline on outlier inputs, and credits incoherent processing (a random Hadamard
# rotation of Q and K) for the difference.
#
# This notebook measures all of it on the same inputs, with one kernel
# (`flashcore/kernels/fp8.py`) and four quantization recipes:
#
# | recipe | Q, K | V | P (softmax probabilities) |
# |---|---|---|---|
# | `naive` | cast as is | cast as is | cast as is |
# | `per_tensor` | one scale each (amax/448) | one scale | × 256 |
# | `per_block` | one scale per 128 rows (per batch, head) | one scale per channel | × 256 |
# | `per_block_hadamard` | rotate by $R = H\,\mathrm{diag}(\pm 1)/\sqrt{D}$, then per block | per channel | × 256 |
#
# Errors are measured against float64 attention of the original inputs. The CPU profile runs
# the error analysis live at small sizes under the Triton interpreter and renders the recorded
# H100 study (`results/<gpu>/fp8.json`: larger sizes, more seeds, speed). The GPU profile runs
# both live.

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
SWEEP = "quick"  # GPU profile: "quick" (speed at S 4K and 16K, no launch-config sweep) or "full"
# (S 1K-16K and the config sweep: the recorded run), -p SWEEP full

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
# converts in hardware).

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
# ## 4. The recorded H100 study
#
# Same code at B=1, H=8, D=128, S ∈ {1024, 4096}, five seeds per point, bf16 and fp16
# baselines: `fp8_study.run_fp8_record`, which `python -m flashcore fp8 --record` calls too (in
# the GPU profile, SWEEP full adds its launch-config sweep and times with the tuned config).
#
# The record the CPU profile renders (`fp8.json`, commit `5aac3ce`, the kernel sources of
# `6c8aae4`) is **stale** (its status line below). After it, `3f5270a` changed the paged
# branch of `kernels/decode.py` and `e5df583` MLA's atomic-mode dK/dV launch config in
# `kernels/backward.py`; those are the only code paths the two changes touched, and
# `kernels/fp8.py` is not among the changed files. The record was not re-recorded at
# `f9591a6` for lack of device time, so every number below that comes from it describes
# `6c8aae4`'s kernels.

# %%
if SWEEP not in ("quick", "full"):
    raise ValueError(f"SWEEP must be 'quick' or 'full', got {SWEEP!r}")
topic = RECORD_TOPIC if SWEEP == "full" else f"{RECORD_TOPIC}_quick"
if PROFILE == "gpu":
    payload = F.run_fp8_record(
        device="cuda",
        speed=MEASURE_SPEED,
        tune=SWEEP == "full",
        speed_shapes=F.fp8_shapes() if SWEEP == "full" else F.fp8_shapes((4096, 16384)),
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
# ## 5. The prior report's 29%, side by side
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

# %% [markdown]
# **Verdict on the prior report.** The report's 0.294 cannot be matched number for number: it
# names no shape, and a maximum error depends on the shape and the draw it is taken over. What
# the record shows is an error of the same kind and order: a worst maximum of 0.197 on N(0,1)
# inputs (naive, causal, S = 4096), and maxima of that size (0.151–0.209) only in the causal
# case, where the first queries see one or two keys and their output is essentially one row of
# V, rounded; without a causal mask the maxima are 0.020–0.042 (the table above). The diagnosis
# is **refuted**. On these inputs the missing scale factors are not the cause: every recipe,
# scaled or not, has the same RMSE within 0.6–1.4% at each recorded shape (printed above),
# because a scale cannot add mantissa bits. The error is the 3-bit mantissa of e4m3 (relative
# rounding up to 6.25%), and most of it is the rounding of the inputs, not of p: in every
# N(0,1) row of the record's `errors`, `rmse_inputs_only` (float64 attention of the dequantized
# inputs against float64 attention of the originals) is most of the RMSE, e.g. 1.21e-03 of
# 1.37e-03 for per_block at S = 4096, non-causal, seed 0. Scales matter where the range
# matters, on outlier and massive-channel inputs (sections 3, 4 and 7). The whole "scaling
# infrastructure" is `quantize` in `flashcore/kernels/fp8.py`.

# %% [markdown]
# ## 6. Speed, and the error/speed trade-off
#
# All four recipes run the same kernel. `naive` differs only in the p scale constant, and the
# three scaled recipes are identical at run time, so speed is measured for `naive` and
# `per_block`. The kernel takes pre-quantized inputs, as it would from an fp8 model. The cost of
# `quantize` from bf16 (plain PyTorch, unfused) is listed separately. The bf16 kernel and SDPA's
# backends run on the same shapes in the same process (B·S = 16K, H = 16, D = 128). The bf16
# column (`flashcore`) is `flashcore.attention` as dispatched at the record's commit: by the
# dispatch table (`FORWARD_GLUON_FROM` in `flashcore/dispatch.py`) the Gluon forward
# (`flashcore/kernels/forward_hopper.py`) at every shape here except causal S = 1024, which runs
# the Triton kernel. The fp8 kernel is a Triton kernel.

# %%
speed = F.speed_table(record["speed"])
print(
    table(
        speed,
        [
            "causal",
            "S",
            "B",
            "H",
            "flashcore",
            "sdpa_flash",
            "sdpa_cudnn",
            "fp8_naive",
            "fp8_per_block",
            "x_bf16",
            "x_cudnn",
            "quantize_ms_per_block",
            "attn_ms_per_block",
        ],
        {
            k: "{:.0f}"
            for k in ("flashcore", "sdpa_flash", "sdpa_cudnn", "fp8_naive", "fp8_per_block")
        }
        | {
            "x_bf16": "{:.2f}",
            "x_cudnn": "{:.2f}",
            "quantize_ms_per_block": "{:.3f}",
            "attn_ms_per_block": "{:.3f}",
        },
    )
)
print(
    "(TFLOP/s; x_bf16 = fp8 per_block / flashcore bf16; x_cudnn = fp8 per_block / SDPA cuDNN bf16)"
)
tuned = record.get("tuned_config")
print("fp8 launch config from the sweep in the record:", tuned)
print(table(F.tuning_rows(record), ["config", "causal", "TFLOP/s"]))
print("(launch-config sweep at B=2, H=16, S=8192, D=128; ws = Triton warp specialization)")

# %%
save_figure(F.plot_speed(speed), "04_fp8_speed")

# %%
from flashcore.studies.bench import geomean

long = [l for l in speed if l["S"] >= 4096]
rates = F.speed_geomeans(speed, min_seqlen=4096)
save_figure(F.plot_error_vs_speed(summary, rates), "04_error_vs_speed")
print(
    f"geomean TFLOP/s at S>=4096: fp8 {rates['fp8']:.0f}, bf16 {rates['bf16']:.0f}, fp8 incl. unfused quantize {rates['fp8_with_quantize']:.0f}"
)
q_over_attn = [l["quantize_ms_per_block"] / l["attn_ms_per_block"] for l in speed]
print(
    f"unfused quantize from bf16 / fp8 attention time: {min(q_over_attn):.2f}-{max(q_over_attn):.2f}"
)

# %% [markdown]
# ## 7. The targets
#
# On the H100 at D=128, S ≥ 4096: recipe 4 (per-block + Hadamard) at ≥ 1.5× flashcore's bf16
# throughput, with RMSE on the outlier inputs ≤ 9.1e-3 (FlashAttention-3's figure) and ≥ 2.5×
# below the per-tensor recipe.

# %%
# NBVAL_CHECK_OUTPUT
ratios = [l["x_bf16"] for l in long]
print(
    f"fp8 / bf16 throughput at D=128, S>=4096: per shape {min(ratios):.2f}-{max(ratios):.2f}, geomean {geomean(ratios):.2f}"
)
# The same measurement in another process (the quick record): a measure of run-to-run noise
# only when its status line says current (same kernels); stale, it measured another version.
quick = read_result("fp8_quick", RECORDED_GPU)
o = [l["x_bf16"] for l in F.speed_table(quick["speed"]) if l["S"] >= 4096]
print(f"  quick record ({describe(quick)}): {min(o):.2f}-{max(o):.2f}, geomean {geomean(o):.2f}")
print("  " + status_line_for("fp8_quick", RECORDED_GPU))
print("target: >= 1.5x bf16 at every shape:", all(r >= 1.5 for r in ratios))
for causal in (False, True):
    h = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_block_hadamard")
    t = F.summary_lookup(summary, "outlier", causal, 4096, "fp8_per_tensor")
    print(
        f"outlier inputs, S=4096, causal={causal!s:5}: RMSE per-block+Hadamard {h['rmse_median']:.2e} "
        f"(worst seed {h['rmse_max']:.2e}), per-tensor {t['rmse_median']:.2e}, ratio {t['rmse_median'] / h['rmse_median']:.2f}"
    )
    print(
        f"   target RMSE <= 9.1e-3 (every seed): {h['rmse_max'] <= 9.1e-3};  target >= 2.5x below per-tensor: "
        f"{t['rmse_median'] / h['rmse_median'] >= 2.5}"
    )

# %% [markdown]
# **Verdict on the targets** (the lines above, from `fp8.json`, commit 5aac3ce, stale: section 4;
# every one at D = 128, S ≥ 4096):
#
# * **≥ 1.5× bf16: missed at every shape** (the verdict prints False). fp8 per_block over
#   flashcore's bf16: non-causal 1.12 (S = 4096), 1.15 (8192), 1.22 (16384); causal 1.16
#   (4096), 1.16 (8192), 1.25 (16384); geomean 1.18. Why, from the table in section 6: the
#   fp8 kernel runs at 660–751 TFLOP/s there and the bf16 side, the Gluon forward at these
#   shapes, at 570–652. The `quick record` line above is another process's run
#   (`fp8_quick.json`, commit 34c60c8), and its status line says **stale**: it measured the
#   kernels before the kernel changes that began with commit 7c97b1b, another kernel version
#   by the fingerprint, so its 1.15–1.22 (geomean 1.18) is no run-to-run check of this
#   record's 1.12–1.25 (geomean 1.18), only a look at the earlier version. Within this record,
#   the same fp8 kernel timed twice per shape (`fp8_naive` and `fp8_per_block` differ only in
#   a constant) differs by up to 782 against 748 TFLOP/s (non-causal S = 16384); no shape
#   comes within that spread of 1.5×.
# * **RMSE ≤ 9.1e-3 on the outlier inputs, every seed: met** at S = 4096 non-causal (worst
#   seed 8.61e-03) and causal (worst seed 8.84e-03).
# * **≥ 2.5× below per-tensor: missed in both cases** (prints False): the ratio is 2.29
#   non-causal (8.38e-03 against 1.92e-02) and 1.89 causal (8.73e-03 against 1.65e-02). The
#   rotated recipe lands near FlashAttention-3's 9.1e-3, but our per-tensor baseline on these
#   inputs is already below FlashAttention-3's per-tensor 2.4e-2; whether FlashAttention-3's
#   baseline was measured at another shape or by another method, this record cannot tell.

# %% [markdown]
# ## Conclusion
#
# (Numbers are from the recorded H100 run above, `results/nvidia-h100-80gb-hbm3/fp8.json`,
# commit 5aac3ce with the kernel sources of 6c8aae4: stale since f9591a6 (section 4), not
# re-recorded, so they describe 6c8aae4's kernels. The previous record, commit f862749, timed
# the same fp8 and bf16 machine code at these shapes, so its speed numbers differ from these by
# run-to-run variation only.)
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
#   and meets FA3's 9.1e-3 in every seed. It does not reach FA3's gap to per-tensor
#   (2.4e-2 against 9.1e-3): the measured ratio is 2.29 non-causal and 1.89 causal, so the
#   2.5× target is missed in both. On massive-channel activations the rotation's gain is
#   larger: median RMSE 4.27e-02 against per-tensor 1.50e-01 (non-causal) and 5.24e-02 against
#   1.81e-01 (causal).
# * **Speed.** One fp8 kernel in Triton reaches 1.12–1.25× flashcore's bf16 throughput at
#   S ≥ 4096 (geomean 1.18; fp8 geomean 722 TFLOP/s against bf16's 614, 1.08–1.32× cuDNN's
#   bf16 there). No shape reaches 1.5× (the best is 1.25), so the target is missed (the quick
#   record's 1.15–1.22 is stale, another kernel version, and not counted here); the
#   trade-off curve above is the honest statement. The bf16 side at these shapes is the shipped Gluon forward.
#   Triton's warp specialization did not help measurably: the `ws` rows of the sweep are within
#   a few TFLOP/s of the same config without it (706 against 704, 552 against 547 non-causal;
#   651 against 651, 520 against 520 causal), and the sweep's best config (64x128 w4 s3: 797
#   non-causal, 737 causal) has no `ws` run, a known compile failure. (The sweep and the speed
#   table time the same single input set at S = 8192 in separate passes; the table's
#   `rotated_sets` is 1 at every shape. For the same config the table shows 751 and 718
#   there, below the sweep's.) FlashAttention-3's ~1 PFLOP/s fp8 uses the
#   structure the shipped bf16 forward has (warpgroup ping-pong, softmax/GEMM overlap, written
#   in Gluon) and the Triton fp8 kernel lacks, plus in-register fp8 layout shuffles for p. An
#   unfused `quantize` from bf16 costs 0.75× the fp8 attention time at best (non-causal
#   S = 16K) and up to 13.41× (short S); counting it, fp8's geomean at S ≥ 4096 drops to
#   227 TFLOP/s, below bf16's 614, so fp8 pays only when the producer already emits fp8.
# * Every fp8 output stayed within the worst-case bound of its own float64 reference (the
#   p-rounding bound), live and in the record, so the errors above belong to the format, not
#   to kernel bugs.
