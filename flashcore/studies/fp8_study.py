"""The FP8 study behind notebooks/04_fp8.ipynb: input distributions, error against float64,
the bound that tests the kernel against its own reference, and the speed comparison.

Error methodology. The function every variant approximates is exact attention of the
original (unquantized) q, k, v; its float64 value is the reference. For each variant we also
compute the variant's own reference: float64 attention of the dequantized inputs (see
``flashcore.kernels.fp8.dequantized``). That splits the error in two:

* input quantization: own reference vs float64 (no kernel involved);
* in-kernel rounding: kernel vs own reference, which rounds p to e4m3 before p @ v and may
  do nothing else wrong. ``own_reference_bound`` is the worst case of that rounding; a
  kernel bug (a wrong block scale, a lost tile) breaks it.

RMSE is sqrt(mean((out - ref)^2)) over all output elements, as FlashAttention-3 reports it.
"""

from __future__ import annotations

import math

import torch

from ..interface import fp8_attention
from ..kernels.fp8 import P_SCALE, VARIANTS, dequantized, quantize
from ..reference import attention_reference, expand_kv_heads, visible_keys
from ..validate import UNIT_ROUNDOFF

DISTRIBUTIONS = ("normal", "outlier", "massive_channels")
E4M3_HALF_ULP = 2.0**-4  # relative rounding error of a normal e4m3 number (3 mantissa bits)
E4M3_SUBNORMAL_STEP = 2.0**-9


def make_qkv(
    dist: str,
    batch: int,
    heads: int,
    kv_heads: int,
    seqlen: int,
    head_dim: int,
    *,
    seed: int,
    device="cpu",
):
    """float32 q, k, v of shape (B, H, S, D) drawn from one of DISTRIBUTIONS:

    normal            N(0, 1)
    outlier           N(0, 1) + N(0, 100) * Bernoulli(0.001): FlashAttention-3's test inputs
                      (variance 100, so outliers of ~10-40)
    massive_channels  "real-looking" activations: N(0, 1) plus two channels per head that are
                      large for every token and shared by q and k (LLMs' massive
                      activations), and v with per-channel magnitudes spread over 100x
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(h):
        return torch.randn(batch, h, seqlen, head_dim, generator=gen)

    q, k, v = normal(heads), normal(kv_heads), normal(kv_heads)
    if dist == "outlier":
        for t in (q, k, v):
            t += (
                torch.randn(t.shape, generator=gen)
                * 10.0
                * (torch.rand(t.shape, generator=gen) < 0.001)
            )
    elif dist == "massive_channels":
        channels = torch.randperm(head_dim, generator=gen)[:2]
        for t, size in ((q, 8.0), (k, 8.0)):
            for c, sign in zip(channels.tolist(), (1.0, -1.0)):
                t[..., c] += sign * size * (1 + 0.2 * torch.randn(t.shape[:-1], generator=gen))
        v *= torch.exp(torch.randn(head_dim, generator=gen) * 1.15)  # ~100x spread over channels
    elif dist != "normal":
        raise ValueError(
            f"unknown distribution {dist!r}; expected one of {', '.join(DISTRIBUTIONS)}"
        )
    return q.to(device), k.to(device), v.to(device)


def e4m3_round_trip(x: torch.Tensor) -> torch.Tensor:
    """x -> e4m3 -> float64 (no scale), for the format section of the notebook."""
    return x.to(torch.float8_e4m3fn).double()


def own_reference_bound(x, *, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The variant's own float64 reference and the worst-case |kernel - own reference| per
    output element from rounding p to e4m3.

    Each p_j = exp(s_j - m) in [0, 1] is scaled by P_SCALE and rounded: the error is at most
    2^-4 p_j (normal range) or half the subnormal step, 2^-10 / P_SCALE, absolute. The output
    is sum_j p_j v_j / l with l >= 1 (the running max contributes exp(0)), so

        |err_d| <= 2^-4 * sum_j p_j |v_jd| / l  +  2^-10 / P_SCALE * sum_j |v_jd| / l.

    Both sums are computed in float64 over the visible keys (the first term is attention of
    |v|; 1 / l is the largest softmax probability of the row). Rounding the result to the
    output dtype adds one unit roundoff of |out|.
    """
    q, k, v = dequantized(x)
    own = attention_reference(q, k, v, causal=causal)
    weighted_abs = attention_reference(q, k, v.abs(), causal=causal)
    heads = q.shape[1]
    scores = q @ expand_kv_heads(k, heads).transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = visible_keys(q.shape[2], k.shape[2], causal=causal, device=q.device)
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    inv_l = probs.amax(-1, keepdim=True)
    abs_sum = mask.double() @ expand_kv_heads(v, heads).abs()
    half_subnormal = E4M3_SUBNORMAL_STEP / 2 / x.p_scale
    output_rounding = UNIT_ROUNDOFF[x.out_dtype] * own.abs()
    return own, E4M3_HALF_ULP * weighted_abs + half_subnormal * abs_sum * inv_l + output_rounding


def bound_ratio(out: torch.Tensor, own: torch.Tensor, bound: torch.Tensor) -> float:
    """max |out - own| / bound (<= 1: within the p-rounding bound). An exact element with a
    zero bound (v quantized to 0) counts as 0; NaN anywhere in out counts as inf."""
    dev = (out.double() - own).abs()
    ratio = torch.where(dev == 0, torch.zeros_like(dev), dev / bound)
    return float(ratio.nan_to_num(nan=math.inf).max())


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt())


def error_rows(
    dist: str,
    *,
    batch=1,
    heads=4,
    kv_heads=None,
    seqlen=512,
    head_dim=128,
    causal=False,
    seeds=(0,),
    variants=VARIANTS,
    baselines=("float16",),
    device="cpu",
    check_bound=True,
):
    """One row per (seed, implementation): RMSE and max error against float64 of the
    original inputs; for fp8 variants also the input-quantization part and the ratio of the
    kernel's deviation from its own reference to ``own_reference_bound``, and the kernel
    that served it (``kernel``: "gluon" or "triton")."""
    from ..dispatch import fp8_kernel
    from ..interface import attention

    kv_heads = heads if kv_heads is None else kv_heads
    rows = []
    for seed in seeds:
        q, k, v = make_qkv(dist, batch, heads, kv_heads, seqlen, head_dim, seed=seed, device=device)
        ref64 = attention_reference(q, k, v, causal=causal)
        base = dict(
            dist=dist,
            seed=seed,
            B=batch,
            H=heads,
            Hkv=kv_heads,
            S=seqlen,
            D=head_dim,
            causal=causal,
            ref_rms=float(ref64.pow(2).mean().sqrt()),
        )
        for name in baselines:
            dtype = getattr(torch, name)
            out = attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal)
            rows.append(
                {
                    **base,
                    "impl": name,
                    "rmse": rmse(out, ref64),
                    "max_err": float((out.double() - ref64).abs().max()),
                }
            )
        for variant in variants:
            x = quantize(
                _input_dtype(q, device),
                _input_dtype(k, device),
                _input_dtype(v, device),
                variant,
                rotation_seed=seed,
            )
            out = fp8_attention(x, causal=causal)
            row = {
                **base,
                "impl": f"fp8_{variant}",
                "kernel": fp8_kernel(x, causal=causal),  # the dispatch's pick for this call
                "rmse": rmse(out, ref64),
                "max_err": float((out.double() - ref64).abs().max()),
            }
            if check_bound:
                own, bound = own_reference_bound(x, causal=causal)
                row["rmse_inputs_only"] = rmse(own, ref64)
                row["own_bound_ratio"] = bound_ratio(out, own, bound)
                row["nan"] = int(torch.isnan(out).sum())
            rows.append(row)
    return rows


def _input_dtype(t: torch.Tensor, device) -> torch.Tensor:
    """The dtype the fp8 quantizer starts from: bf16 on the GPU (what a model holds); fp16
    under the CPU interpreter, which cannot run bf16."""
    return t.to(torch.bfloat16 if str(device).startswith("cuda") else torch.float16)


def summarize(rows: list[dict]) -> list[dict]:
    """Median / min / max RMSE and the worst max error per (dist, causal, S, impl), and the
    kernel that served the group where its rows name one (one shape: one kernel)."""
    import statistics

    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dist"], r["causal"], r["S"], r["impl"]), []).append(r)
    out = []
    for (dist, causal, seqlen, impl), rs in groups.items():
        vals = [r["rmse"] for r in rs]
        out.append(
            dict(
                dist=dist,
                causal=causal,
                S=seqlen,
                impl=impl,
                seeds=len(rs),
                rmse_median=statistics.median(vals),
                rmse_min=min(vals),
                rmse_max=max(vals),
                max_err=max(r["max_err"] for r in rs),
                own_bound_ratio=max((r.get("own_bound_ratio", 0.0) for r in rs), default=0.0),
                **({"kernel": rs[0]["kernel"]} if "kernel" in rs[0] else {}),
            )
        )
    return out


# ------------------------------------------------------------------------------ speed


def bench_fp8(
    shapes: list[dict],
    *,
    variants=("naive", "per_block"),
    peers=("flashcore", "sdpa_flash", "sdpa_cudnn"),
    config: dict | None = None,
    reps: int = 50,
    warmup: int = 10,
) -> list[dict]:
    """Time fp8 attention (on pre-quantized inputs, as an fp8 model would hand them over),
    flashcore's bf16 kernel and SDPA's bf16 backends on the same shapes in one process.

    Each ``fp8_<variant>`` row times ``flashcore.fp8_attention`` as it ships, its ``kernel``
    the dispatch's pick (``flashcore.dispatch.fp8_kernel``: the Gluon forward's FP8 mode or
    kernels/fp8.py's Triton kernel); ``fp8_per_block_triton`` times the Triton kernel on the
    same inputs at ``config`` (the tuning sweep's pick; None: the kernel's own table), so the
    two fp8 kernels stand side by side. Also times ``quantize`` itself from bf16 (the cost if
    the producer does not emit fp8). The variants differ only in their scales, not in code."""
    from ..dispatch import fp8_kernel
    from ..kernels.fp8 import pick_config
    from .bench import (
        attention_flops,
        make_flashcore,
        make_sdpa,
        rotated_inputs,
        rotation_count,
        time_launches,
    )

    rows = []
    for shape in shapes:
        B, H, S, D, causal = shape["B"], shape["H"], shape["S"], shape["D"], shape["causal"]
        per_set = 3 * B * H * S * D * 2
        free, _ = torch.cuda.mem_get_info()
        n_sets = rotation_count(per_set, budget_bytes=int(0.15 * free))
        sets = rotated_inputs(n_sets, *[(B, H, S, D)] * 3)
        flops = attention_flops(B, H, S, S, D, causal)
        base = {**shape, "flops": flops, "rotated_sets": n_sets}

        def timed(impl, fn, **extra):
            t = time_launches(fn, n_sets, warmup=warmup, reps=reps)
            rows.append(
                {**base, "impl": impl, "timing": t.as_dict(), "tflops": flops / t.median_ms / 1e9,
                 **extra}
            )  # fmt: skip

        with torch.inference_mode():
            for impl in peers:
                fn = (
                    make_flashcore(causal)
                    if impl == "flashcore"
                    else make_sdpa(impl[5:], causal, False)
                )
                timed(impl, lambda i: fn(*sets[i]))
            for variant in variants:
                qsets = [quantize(*s, variant) for s in sets]
                tq = time_launches(
                    lambda i: quantize(*sets[i], variant), n_sets, warmup=3, reps=max(10, reps // 5)
                )
                timed(
                    f"fp8_{variant}",
                    lambda i: fp8_attention(qsets[i], causal=causal),
                    quantize_ms=tq.median_ms,
                    kernel=fp8_kernel(qsets[0], causal=causal),
                )
                if variant == "per_block":
                    triton = dict(config or pick_config(qsets[0], causal))
                    timed(
                        "fp8_per_block_triton",
                        lambda i: fp8_attention(qsets[i], causal=causal, config=triton),
                        kernel="triton",
                        config=triton,
                    )
                qsets = None
        sets = None  # free the rotated inputs before the next shape
        torch.cuda.empty_cache()
    return rows


def tune_fp8(shape: dict, configs: list[dict], *, reps: int = 30) -> list[dict]:
    """Time the per_block kernel under each launch config on one shape."""
    from .bench import attention_flops, known_compile_failure, time_launches

    B, H, S, D, causal = shape["B"], shape["H"], shape["S"], shape["D"], shape["causal"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = quantize(
        *(
            torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(3)
        ),
        "per_block",
    )
    flops = attention_flops(B, H, S, S, D, causal)
    rows = []
    for cfg in configs:
        if known_compile_failure(cfg):
            rows.append({**shape, "config": cfg, "error": known_compile_failure(cfg)})
            continue
        try:
            t = time_launches(
                lambda i: fp8_attention(x, causal=causal, config=cfg), 1, warmup=5, reps=reps
            )
            rows.append(
                {
                    **shape,
                    "config": cfg,
                    "median_ms": t.median_ms,
                    "tflops": flops / t.median_ms / 1e9,
                }
            )
        except Exception as exc:
            rows.append(
                {**shape, "config": cfg, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
            )
    return rows


FP8_TUNING_CONFIGS = [
    dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st, WARP_SPECIALIZE=ws)
    for bm, bn, w, st, ws in (
        (128, 128, 8, 3, False),
        (128, 128, 8, 4, False),
        (128, 128, 8, 2, False),
        (128, 64, 8, 3, False),
        (128, 64, 4, 3, False),
        (64, 128, 4, 3, False),
        (64, 128, 4, 4, False),
        (64, 64, 4, 3, False),
        (128, 128, 4, 3, False),
        (128, 128, 8, 3, True),
        (128, 64, 8, 3, True),
        (64, 128, 4, 3, True),
    )
]


def fp8_shapes(seqlens=(1024, 2048, 4096, 8192, 16384), head_dim=128) -> list[dict]:
    """B * S = 16K, H * D = 2048, as the forward sweep in perf.json."""
    return [
        dict(B=max(1, 16384 // s), H=2048 // head_dim, S=s, D=head_dim, causal=c)
        for c in (False, True)
        for s in seqlens
    ]


def default_speed_shapes() -> list[dict]:
    """The record's speed sweep: D128 at S 1K-16K, D256 (where the Gluon FP8 mode reaches past
    the bf16 matmul ceiling) at S 4K-16K."""
    return fp8_shapes() + fp8_shapes((4096, 8192, 16384), head_dim=256)


def speed_table(speed_rows: list[dict]) -> list[dict]:
    """One line per shape (D, causal, S): TFLOP/s of each implementation, the kernel that
    served fp8 per_block as shipped, and the fp8 / bf16, fp8 / cuDNN and shipped / Triton fp8
    ratios (the last only in records that time the Triton kernel beside the shipped path)."""
    lines = {}
    for r in speed_rows:
        key = (r["D"], r["causal"], r["S"])
        line = lines.setdefault(
            key, {"D": r["D"], "causal": r["causal"], "S": r["S"], "B": r["B"], "H": r["H"]}
        )
        line[r["impl"]] = r["tflops"]
        if r["impl"] == "fp8_per_block":
            line["kernel"] = r.get("kernel", "triton")
        if "quantize_ms" in r:
            line[f"quantize_ms_{r['impl'][4:]}"] = r["quantize_ms"]
            line[f"attn_ms_{r['impl'][4:]}"] = r["timing"]["median_ms"]
    out = []
    for line in lines.values():
        line["x_bf16"] = line["fp8_per_block"] / line["flashcore"]
        line["x_cudnn"] = line["fp8_per_block"] / line["sdpa_cudnn"]
        if "fp8_per_block_triton" in line:
            line["x_triton_fp8"] = line["fp8_per_block"] / line["fp8_per_block_triton"]
        out.append(line)
    return sorted(out, key=lambda l: (l["D"], l["causal"], l["S"]))


def error_summary_line(r: dict) -> str:
    return (
        f"{r['dist']:>16} causal={r['causal']!s:5} S={r['S']:<6} {r['impl']:<24} "
        f"rmse {r['rmse_median']:.2e} [{r['rmse_min']:.2e}, {r['rmse_max']:.2e}] "
        f"max {r['max_err']:.2e} own-bound {r['own_bound_ratio']:.2f}"
    )


def speed_line(r: dict) -> str:
    return (
        f"{r['impl']:<20} D={r['D']:<3} causal={r['causal']!s:5} S={r['S']:<6} "
        f"{r['tflops']:7.1f} TFLOP/s"
        + (f"  [{r['kernel']}]" if "kernel" in r else "")
        + (f"  quantize {r['quantize_ms']:.3f} ms" if "quantize_ms" in r else "")
    )


def run_fp8_record(
    *,
    dists=DISTRIBUTIONS,
    seqlens=(1024, 4096),
    heads: int = 8,
    seeds: int = 5,
    device: str = "cuda",
    speed: bool = True,
    tune: bool = True,
    speed_shapes: list[dict] | None = None,
    reps: int = 50,
    progress=None,
    log=None,
) -> dict:
    """The payload of results/<gpu>/fp8.json: ``python -m flashcore fp8`` and notebook 04 both
    build it here.

    Errors against float64 for every distribution, causal and not, each S, ``seeds`` seeds
    (B=1, ``heads`` heads, D=128; bf16 and fp16 baselines on a GPU, fp16 under the
    interpreter). On a GPU with ``speed``: with ``tune``, the launch-config sweep of the
    per_block kernel (``tuning``) and the fastest config per causal mode (``tuned_config``),
    which the Triton fp8 kernel's speed rows then use; then speed over ``speed_shapes``
    (default ``default_speed_shapes()``), fp8 as shipped beside the Triton fp8 kernel.
    ``progress(items, desc)`` wraps the two loops, ``log(line)`` gets the lines the CLI prints.
    """
    progress = progress or (lambda items, desc: items)
    log = log or (lambda *lines: None)
    on_gpu = str(device).startswith("cuda")
    payload: dict = {"variants": list(VARIANTS), "p_scale": P_SCALE}
    combos = [(dist, causal, s) for dist in dists for causal in (False, True) for s in seqlens]
    rows = []
    for dist, causal, seqlen in progress(combos, "fp8 errors"):
        rows += error_rows(
            dist,
            heads=heads,
            seqlen=seqlen,
            head_dim=128,
            causal=causal,
            seeds=tuple(range(seeds)),
            baselines=("bfloat16", "float16") if on_gpu else ("float16",),
            device=device,
        )
    payload["error_shape"] = dict(B=1, H=heads, D=128, S=list(seqlens), seeds=seeds)
    payload["errors"] = rows
    payload["error_summary"] = summarize(rows)
    for r in payload["error_summary"]:
        log(error_summary_line(r))
    if not (on_gpu and speed):
        return payload
    best = {False: None, True: None}  # the kernel's own table unless the sweep runs
    if tune:
        tuning = [
            t
            for causal in (False, True)
            for t in tune_fp8(dict(B=2, H=16, S=8192, D=128, causal=causal), FP8_TUNING_CONFIGS)
        ]
        payload["tuning"] = tuning
        best = {
            c: min(
                (t for t in tuning if t["causal"] == c and "median_ms" in t),
                key=lambda t: t["median_ms"],
            )["config"]
            for c in (False, True)
        }
        payload["tuned_config"] = {str(c): cfg for c, cfg in best.items()}
    payload["speed"] = [
        r
        for shape in progress(speed_shapes or default_speed_shapes(), "fp8 speed")
        # the sweep tunes at D128; other head dims keep the Triton kernel's own table
        for r in bench_fp8(
            [shape], config=best[shape["causal"]] if shape["D"] == 128 else None, reps=reps
        )
    ]
    for r in payload["speed"]:
        log(speed_line(r))
    return payload


def summary_lookup(summary: list[dict], dist: str, causal: bool, seqlen: int, impl: str) -> dict:
    return next(
        r
        for r in summary
        if r["dist"] == dist and r["causal"] == causal and r["S"] == seqlen and r["impl"] == impl
    )


# ------------------------------------------------------------------------------ figures
# Notebook 04's figures and tables, drawn from a record (the format's, from the values given).

FA3_FP8_RMSE = 9.1e-3  # FlashAttention-3's fp8 RMSE on its outlier inputs (the target)
RECIPES = ["fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard"]


def plot_e4m3_rounding(x: torch.Tensor, rel: torch.Tensor):
    """Relative error of rounding ``x`` to e4m3 (``rel``), against |x|."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.loglog(x, rel.clamp_min(1e-6), lw=0.5)
    ax.axhline(2**-4, color="k", ls="--", lw=0.8, label="2^-4: half a mantissa step")
    ax.axvline(2**-6, color="r", ls=":", lw=0.8, label="2^-6: subnormals below")
    ax.set(
        xlabel="|x|",
        ylabel="relative error of round(x)",
        title="e4m3 rounding error (round to nearest even)",
    )
    ax.legend(loc="lower left")
    return fig


def plot_rmse_by_recipe(summary: list[dict], seqlen: int = 4096):
    """RMSE against float64 (median and min-max over seeds) of bf16 and each recipe, one panel
    per input distribution, causal and not, with FlashAttention-3's figure."""
    import matplotlib.pyplot as plt

    impls = ["bfloat16", *RECIPES]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=False)
    for ax, dist in zip(axes, DISTRIBUTIONS):
        for j, causal in enumerate((False, True)):
            pts = [summary_lookup(summary, dist, causal, seqlen, i) for i in impls]
            xs = [k + 0.2 * (j - 0.5) for k in range(len(impls))]
            med = [p["rmse_median"] for p in pts]
            lo = [p["rmse_median"] - p["rmse_min"] for p in pts]
            hi = [p["rmse_max"] - p["rmse_median"] for p in pts]
            ax.errorbar(
                xs,
                med,
                yerr=[lo, hi],
                fmt="o",
                ms=4,
                capsize=2,
                label="causal" if causal else "non-causal",
            )
        ax.axhline(FA3_FP8_RMSE, color="k", ls="--", lw=0.8, label="FA3 fp8: 9.1e-3")
        ax.set_yscale("log")
        ax.set_xticks(
            range(len(impls)),
            [i.replace("fp8_", "").replace("_hadamard", "+H") for i in impls],
            rotation=30,
        )
        ax.set_title(f"{dist} (S={seqlen}, {pts[0]['seeds']} seeds)")
    axes[0].set_ylabel("RMSE vs float64 (median, min-max)")
    axes[0].legend(fontsize=8)
    return fig


def tuning_rows(record: dict) -> list[dict]:
    """The launch-config sweep of a record, one row per (config, causal mode)."""

    def name(c):
        return f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}" + (
            " ws" if c.get("WARP_SPECIALIZE") else ""
        )

    return [
        {
            "config": name(t["config"]),
            "causal": t["causal"],
            "TFLOP/s": f"{t['tflops']:.0f}" if "tflops" in t else t["error"][:50],
        }
        for t in record.get("tuning", [])
    ]


def plot_speed(speed: list[dict], head_dim: int = 128):
    """TFLOP/s against S of fp8 (per_block as shipped, naive, the Triton fp8 kernel where
    timed), the bf16 kernel and SDPA's bf16 backends at ``head_dim``; ``speed`` is
    ``speed_table``'s lines."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    for causal, ax in zip((False, True), axes):
        lines = [l for l in speed if l["causal"] == causal and l["D"] == head_dim]
        for impl, style in (
            ("fp8_per_block", "o-"),
            ("fp8_per_block_triton", "o:"),
            ("fp8_naive", "x:"),
            ("flashcore", "s-"),
            ("sdpa_cudnn", "^--"),
            ("sdpa_flash", "v--"),
        ):
            if all(impl in l for l in lines):
                ax.plot([l["S"] for l in lines], [l[impl] for l in lines], style, label=impl)
        ax.set(
            xscale="log",
            xlabel="S",
            ylabel="TFLOP/s",
            title=f"D={head_dim}, {'causal' if causal else 'non-causal'}",
        )
    axes[0].legend(fontsize=8)
    return fig


def speed_geomeans(speed: list[dict], min_seqlen: int = 4096, head_dim: int = 128) -> dict:
    """Geometric means over ``speed_table``'s lines at ``head_dim`` with S >= min_seqlen: fp8
    per_block and the bf16 kernel's TFLOP/s, and fp8's counting an unfused quantize from bf16
    in its time."""
    from .bench import geomean

    long = [l for l in speed if l["S"] >= min_seqlen and l["D"] == head_dim]
    return {
        "fp8": geomean([l["fp8_per_block"] for l in long]),
        "bf16": geomean([l["flashcore"] for l in long]),
        "fp8_with_quantize": geomean(
            [
                l["fp8_per_block"]
                * l["attn_ms_per_block"]
                / (l["attn_ms_per_block"] + l["quantize_ms_per_block"])
                for l in long
            ]
        ),
    }


def plot_error_vs_speed(summary: list[dict], geomeans: dict, seqlen: int = 4096):
    """Each recipe's RMSE (non-causal, outlier and massive-channel inputs) at fp8's geomean
    TFLOP/s, the bf16 kernel's at its own, and per_block+Hadamard counting its quantize."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for dist, marker in (("outlier", "o"), ("massive_channels", "s")):
        for impl in RECIPES:
            r = summary_lookup(summary, dist, False, seqlen, impl)
            ax.scatter(
                geomeans["fp8"], r["rmse_median"], marker=marker, label=f"{dist}: {impl[4:]}"
            )
        b = summary_lookup(summary, dist, False, seqlen, "bfloat16")
        ax.scatter(geomeans["bf16"], b["rmse_median"], marker=marker, color="k")
        h = summary_lookup(summary, dist, False, seqlen, "fp8_per_block_hadamard")
        ax.scatter(
            geomeans["fp8_with_quantize"],
            h["rmse_median"],
            marker=marker,
            facecolors="none",
            edgecolors="gray",
        )
    ax.axhline(FA3_FP8_RMSE, color="k", ls="--", lw=0.8)
    ax.set(
        yscale="log",
        xlabel="TFLOP/s (geomean, D=128, S>=4096; hollow: incl. quantize)",
        ylabel=f"RMSE (S={seqlen}, non-causal)",
        title="error vs speed (black: bf16 kernel)",
    )
    ax.legend(fontsize=6, ncol=2)
    return fig


__all__ = [
    "DISTRIBUTIONS",
    "P_SCALE",
    "VARIANTS",
    "make_qkv",
    "own_reference_bound",
    "error_rows",
    "summarize",
    "bench_fp8",
    "tune_fp8",
    "fp8_shapes",
    "default_speed_shapes",
    "e4m3_round_trip",
    "rmse",
    "bound_ratio",
    "speed_table",
    "summary_lookup",
    "run_fp8_record",
]
