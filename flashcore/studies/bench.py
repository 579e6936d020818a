"""Timing harness: CUDA-event timing, statistics, ceilings, and the peers measured beside us.

Method (every number in results/<gpu>/perf.json comes from here):

* Inputs are rotated: enough independent copies that one pass over them exceeds 3x the L2
  cache, so a launch never finds its operands already in L2 from the previous launch.
* Warm-up launches first (compilation, autotuning of peers, clocks), then ``reps`` timed
  launches, each bracketed by its own pair of CUDA events. Launches are queued
  back to back, so for kernels shorter than the CPU's launch path the gap before the
  kernel is part of the sample: that is latency as a Python caller sees it. ``graph=True``
  captures the launches in a CUDA graph and replays it, which removes the CPU side; the
  difference between the two is launch overhead.
* Statistics per implementation: median, P95, P99 and a bootstrap 95% CI of the median.
* Ceilings are measured in the same process: a large bf16 matmul (TFLOP/s) and a large
  device-to-device copy (bytes read + written per second).
* Peers: SDPA's flash, cuDNN, efficient and math backends (math only where its S x S score
  matrix fits), FlexAttention compiled once per shape. Ratios are what we report; absolute
  times only with the GPU named.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

L2_FALLBACK_BYTES = 50 * 2**20  # H100's L2; used if the device does not report it


@dataclass
class Timing:
    """Per-launch times in milliseconds and their summary statistics."""

    median_ms: float
    p95_ms: float
    p99_ms: float
    ci_low_ms: float  # bootstrap 95% CI of the median
    ci_high_ms: float
    mean_ms: float
    n: int
    samples_ms: list | None = None

    def as_dict(self, keep_samples: bool = False) -> dict:
        d = asdict(self)
        if not keep_samples:
            d.pop("samples_ms")
        return d


def summarize_samples(
    samples_ms, *, n_boot: int = 2000, seed: int = 0, keep: bool = False
) -> Timing:
    x = np.asarray(samples_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(x, size=(n_boot, x.size), replace=True), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return Timing(
        float(np.median(x)),
        float(np.percentile(x, 95)),
        float(np.percentile(x, 99)),
        float(lo),
        float(hi),
        float(x.mean()),
        int(x.size),
        [round(float(v), 6) for v in x] if keep else None,
    )


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or L2_FALLBACK_BYTES)


def rotation_count(
    bytes_per_set: int, *, max_sets: int = 64, budget_bytes: int | None = None
) -> int:
    """How many input copies make one pass exceed 3x L2 (at least 1, within the budget)."""
    want = math.ceil(3 * l2_bytes() / max(1, bytes_per_set))
    if budget_bytes is not None:
        want = min(want, max(1, budget_bytes // max(1, bytes_per_set)))
    return int(max(1, min(max_sets, want)))


def rotated_inputs(n_sets: int, *shapes, dtype=torch.bfloat16, seed: int = 0) -> list[tuple]:
    """``n_sets`` input sets for ``time_launches`` to rotate through: each a tuple of
    standard-normal CUDA tensors of ``shapes`` (q's, k's, v's, ...) in ``dtype``, all drawn
    in order from one generator seeded with ``seed``, so a run's inputs are reproducible."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [
        tuple(torch.randn(*shape, device="cuda", dtype=dtype, generator=gen) for shape in shapes)
        for _ in range(n_sets)
    ]


def time_launches(
    fn,
    n_sets: int,
    *,
    warmup: int = 10,
    reps: int = 100,
    graph: bool = False,
    keep_samples: bool = False,
    min_sample_ms: float = 0.5,
) -> Timing:
    """Time ``fn(i)`` (i selects the rotated input set) with CUDA events; ms per launch.

    Eager: launches queued back to back from Python. A sample is one event pair around
    ``k`` consecutive launches divided by ``k``, with k = 1 for launches of at least
    ``min_sample_ms`` and just enough launches to reach it otherwise (an event pair around
    a 10 us kernel measures the events as much as the kernel). When the CPU's launch path
    is slower than the kernel, the GPU waits for it and that wait is in the sample: this
    is the time per call a Python loop sees.
    Graph: ``max(8, n_sets)`` launches captured once in a CUDA graph; a sample is one
    replay divided by the launches it holds: GPU time without the CPU launch path.
    """
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(warmup):
        fn(i % n_sets)
    end.record()
    torch.cuda.synchronize()
    estimate_ms = start.elapsed_time(end) / max(1, warmup)
    if not graph:
        k = int(min(64, max(1, math.ceil(min_sample_ms / max(estimate_ms, 1e-4)))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        j = 0
        for i in range(reps):
            starts[i].record()
            for _ in range(k):
                fn(j % n_sets)
                j += 1
            ends[i].record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) / k for s, e in zip(starts, ends)]
        return summarize_samples(samples, keep=keep_samples)

    per_graph = max(8, n_sets)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm the side stream (allocator, lazy init)
        for i in range(per_graph):
            fn(i % n_sets)
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(per_graph):
            fn(i % n_sets)
    g.replay()
    torch.cuda.synchronize()
    n_replays = max(10, reps // per_graph * 2)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_replays)]
    for i in range(n_replays):
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) / per_graph for s, e in zip(starts, ends)]
    del g
    return summarize_samples(samples, keep=keep_samples)


# ----------------------------------------------------------------------------- ceilings


def matmul_ceiling(n: int = 8192, dtype=torch.bfloat16, reps: int = 30) -> dict:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    t = time_launches(lambda i: torch.mm(a, b), 1, warmup=5, reps=reps)
    flops = 2 * n**3
    return {
        "what": f"{str(dtype).replace('torch.', '')} matmul {n}^3",
        "tflops": flops / t.median_ms / 1e9,
        "timing": t.as_dict(),
    }


def copy_ceiling(nbytes: int = 2 * 2**30, reps: int = 30) -> dict:
    src = torch.empty(nbytes // 2, device="cuda", dtype=torch.float16).normal_()
    dst = torch.empty_like(src)
    t = time_launches(lambda i: dst.copy_(src), 1, warmup=5, reps=reps)
    moved = 2 * nbytes  # read + write
    return {
        "what": f"device copy {nbytes / 2**30:.0f} GiB (read + write)",
        "tbps": moved / t.median_ms / 1e9,
        "timing": t.as_dict(),
    }


def ceilings() -> dict:
    return {"matmul": matmul_ceiling(), "copy": copy_ceiling()}


# ----------------------------------------------------------------------------- attention


def attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal, causal_offset=0) -> float:
    """4 * B * H * D * (number of (query, key) pairs computed); causal counts only the pairs a
    query may see (key j <= i + causal_offset)."""
    if not causal:
        pairs = seqlen_q * seqlen_k
    else:
        i = np.arange(seqlen_q, dtype=np.int64)
        pairs = int(np.clip(i + causal_offset + 1, 0, seqlen_k).sum())
    return 4.0 * batch * heads * head_dim * pairs


def _sdpa_backend(name):
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def make_sdpa(name: str, causal: bool, gqa: bool):
    """SDPA pinned to one backend (no silent fallback to another)."""
    from torch.nn.attention import sdpa_kernel

    backend = _sdpa_backend(name)
    kw = {"enable_gqa": True} if gqa else {}

    def run(q, k, v):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)

    return run


def make_flex(causal: bool, shape_q, shape_k, device):
    """FlexAttention compiled for this one shape (dynamo caches reset so it compiles once here
    and never falls back to eager after a recompile limit)."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.reset()
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled = torch.compile(flex_attention, dynamic=False)
    block_mask = None
    if causal:

        def causal_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        block_mask = create_block_mask(
            causal_mod, None, None, shape_q[2], shape_k[2], device=device
        )
    gqa = shape_q[1] != shape_k[1]

    def run(q, k, v):
        return compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)

    return run


def make_fa4(causal: bool):
    """FlashAttention-4 (``flash_attn.cute``: its sm90 path on Hopper, CuTe DSL) on the same
    (B, H, S, D) tensors, given as the (B, S, H, D) views FA4's layout names (unit head-dim
    stride: no copy); returns its output as a (B, H, S, D) view. Differentiable. Raises
    ImportError where FA4 is not installed (the row then records the error)."""
    from flash_attn.cute import flash_attn_func

    def run(q, k, v):
        out = flash_attn_func(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal
        )
        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)

    return run


def make_flashcore_decode(lengths: torch.Tensor):
    """Split-KV decode over a cache holding exactly Sk tokens (nothing appended; lengths
    trusted, so no host sync: the same work SDPA does)."""
    from ..interface import attention_with_kvcache

    def run(q, k, v):
        return attention_with_kvcache(q, k, v, lengths, check_lengths=False)

    return run


def make_flashcore(causal: bool, config: dict | None = None):
    from ..interface import attention

    def run(q, k, v):
        return attention(q, k, v, causal=causal, config=config)

    return run


def math_fits(batch, heads, seqlen_q, seqlen_k, dtype) -> bool:
    """The math backend materialises (B, H, Sq, Sk) scores in fp32 and a few temporaries."""
    need = 4 * batch * heads * seqlen_q * seqlen_k * 4
    free, _ = torch.cuda.mem_get_info()
    return need < 0.5 * free


def bench_attention_shape(
    shape: dict,
    impls: list[str],
    *,
    reps: int = 100,
    warmup: int = 10,
    graph: bool = False,
    keep_samples: bool = False,
    rounds: int = 4,
) -> list[dict]:
    """Time every implementation in ``impls`` on one shape, in this process, on the same
    rotated inputs, interleaved over ``rounds`` rounds (``reps`` samples in all). Returns one
    row per implementation (errors recorded, not raised)."""
    B, Hq, Hkv, S, D = (
        shape["B"],
        shape["Hq"],
        shape.get("Hkv", shape["Hq"]),
        shape["S"],
        shape["D"],
    )
    Sk = shape.get("Sk", S)
    Dv = shape.get("Dv", D)  # v's head dim (DeepSeek's MLA: D 192, Dv 128)
    causal, dtype = shape["causal"], getattr(torch, shape["dtype"])
    per_set = (B * Hq * S * D + B * Hkv * Sk * (D + Dv)) * torch.finfo(dtype).bits // 8
    free, _ = torch.cuda.mem_get_info()
    n_sets = rotation_count(per_set, budget_bytes=int(0.25 * free))
    sets = rotated_inputs(n_sets, (B, Hq, S, D), (B, Hkv, Sk, D), (B, Hkv, Sk, Dv), dtype=dtype)
    # q.k^T over D and P.V over Dv: the FLOPs of one head dim of (D + Dv) / 2.
    flops = attention_flops(B, Hq, S, Sk, (D + Dv) / 2, causal)
    rows, fns = [], {}
    reference_out = None
    for impl in impls:
        row = {**shape, "Hkv": Hkv, "Sk": Sk, "impl": impl, "rotated_sets": n_sets, "flops": flops}
        rows.append(row)
        try:
            if impl == "flashcore":
                fn = make_flashcore(causal)
            elif (
                impl == "flashcore_triton"
            ):  # the Triton kernel alone: an explicit config skips the Hopper dispatch
                from ..kernels.forward import default_config

                fn = make_flashcore(causal, default_config(sets[0][0], sets[0][1], causal))
            elif impl == "flashcore_decode":
                fn = make_flashcore_decode(torch.full((B,), Sk, dtype=torch.int32, device="cuda"))
            elif impl == "flex":
                fn = make_flex(causal, sets[0][0].shape, sets[0][1].shape, "cuda")
            elif impl == "fa4":
                fn = make_fa4(causal)
            elif impl.startswith("sdpa_"):
                name = impl[len("sdpa_") :]
                if name == "math" and not math_fits(B, Hq, S, Sk, dtype):
                    row["skipped"] = "math backend's S x S scores do not fit in memory"
                    continue
                fn = make_sdpa(name, causal, Hq != Hkv)
            else:
                raise ValueError(f"unknown implementation {impl!r}")
            with torch.inference_mode():
                out = fn(*sets[0])
                if reference_out is None:
                    reference_out = out.float()
                else:  # sanity: we are timing the same function
                    row["max_abs_diff_vs_first"] = float((out.float() - reference_out).abs().max())
            fns[impl] = fn
        except Exception as exc:  # a peer that does not support the shape is a result too
            row["error"] = _error_line(exc)
    # Interleaved: each implementation is timed in each of `rounds` rounds, the order rotated
    # by one per round, and its samples pooled. In one fixed order the later implementations
    # ran on a hotter, more power-capped GPU (H100, 2026-11-23: one kernel measured up to 8%
    # apart depending on its place in the order).
    timed = [r for r in rows if r["impl"] in fns]
    samples = {r["impl"]: [] for r in timed}
    per_round = max(1, -(-reps // rounds))
    for rnd in range(rounds if timed else 0):
        shift = rnd % len(timed)
        for row in timed[shift:] + timed[:shift]:
            fn = fns[row["impl"]]
            try:
                with torch.inference_mode():
                    t = time_launches(
                        lambda i: fn(*sets[i]), n_sets, warmup=warmup, reps=per_round,
                        keep_samples=True,
                    )  # fmt: skip
                samples[row["impl"]] += t.samples_ms
            except Exception as exc:
                row["error"] = _error_line(exc)
    for row in timed:
        if "error" in row:
            continue
        fn = fns[row["impl"]]
        t = summarize_samples(samples[row["impl"]], keep=keep_samples)
        row["timing"] = t.as_dict(keep_samples)
        row["timing"]["rounds"] = rounds
        row["tflops"] = flops / t.median_ms / 1e9
        if graph:
            with torch.inference_mode():
                tg = time_launches(
                    lambda i: fn(*sets[i]), n_sets, warmup=warmup, reps=reps, graph=True
                )
                row["graph_timing"] = tg.as_dict()
                row["host_us_per_call"] = host_time_per_call(lambda i: fn(*sets[i]), n_sets)
    fns = sets = None
    torch.cuda.empty_cache()
    return rows


def _error_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def host_time_per_call(fn, n_sets: int, calls: int = 200) -> float:
    """CPU microseconds one call spends before returning (argument checks, launch); the GPU
    queue absorbs the launches, so this is the Python side of the launch overhead."""
    import time

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i % n_sets)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def decode_shapes() -> list[dict]:
    """q_len 1, bf16, D 128: the ANCHORS.md decode table plus long caches for the
    bandwidth target (GQA 32/8 and MHA 32/32)."""
    shapes = []
    for b, hq, hkv, cache in [
        (1, 32, 8, 8192),
        (8, 32, 8, 8192),
        (32, 32, 8, 4096),
        (1, 32, 8, 32768),
        (4, 32, 8, 32768),
        (1, 32, 8, 131072),
        (1, 32, 32, 8192),
        (1, 32, 32, 32768),
        (4, 32, 32, 32768),
        (1, 32, 32, 131072),
    ]:
        shapes.append(
            dict(B=b, Hq=hq, Hkv=hkv, S=1, Sk=cache, D=128, causal=False, dtype="bfloat16")
        )
    return shapes


DECODE_PEERS = [
    "flashcore_decode",
    "flashcore",
    "sdpa_flash",
    "sdpa_cudnn",
    "sdpa_efficient",
    "sdpa_math",
]


def kv_bytes(row: dict) -> int:
    """K and V read once: the bytes decode must move."""
    return (
        2
        * row["B"]
        * row["Hkv"]
        * row["Sk"]
        * row["D"]
        * torch.finfo(getattr(torch, row["dtype"])).bits
        // 8
    )


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0]
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else float("nan")


# ----------------------------------------------------------------------------- sweeps

PEERS = [
    "flashcore",
    "flashcore_triton",
    "sdpa_flash",
    "sdpa_cudnn",
    "sdpa_efficient",
    "sdpa_math",
    "flex",
]
TOKENS_PER_BATCH = 16384  # B * S held fixed so every point does the same work per token


def forward_shapes(
    head_dims=(64, 128, 256),
    seqlens=(512, 1024, 2048, 4096, 8192, 16384),
    dtypes=("bfloat16",),
    causal=(False, True),
) -> list[dict]:
    """The performance sweep: B * S = 16K tokens, H * D = 2048 (H = 32 at D = 64 would be
    small; we keep H = 2048 / D so every D moves the same bytes per token)."""
    shapes = []
    for dtype in dtypes:
        for d in head_dims:
            for s in seqlens:
                for c in causal:
                    h = 2048 // d
                    shapes.append(
                        dict(B=max(1, TOKENS_PER_BATCH // s), Hq=h, S=s, D=d, causal=c, dtype=dtype)
                    )
    return shapes


def prior_report_shapes() -> list[dict]:
    """The prior reports' regime: fp16, D = 64, H = 8, non-causal, S <= 512, plus their H = 96
    "per head" case (see seeds/README.md and ANCHORS.md)."""
    shapes = [
        dict(B=b, Hq=8, S=s, D=64, causal=False, dtype="float16")
        for s in (128, 256, 512)
        for b in (8, 16, 32)
    ]
    shapes.append(dict(B=16, Hq=96, S=512, D=64, causal=False, dtype="float16"))
    return shapes


def tuning_configs() -> list[dict]:
    """Candidate launch configs for the Hopper sweep: pointer loads, TMA loads, and TMA with
    warp specialization (a producer warp group feeding the tensor-core warps)."""
    out = []
    for bm, bn, w, st in [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 64, 4, 3)]:
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st, USE_TMA=False))
    for bm, bn, w, st in [
        (128, 64, 8, 3),
        (128, 128, 8, 2),
        (128, 128, 8, 3),
        (128, 64, 4, 3),
        (64, 64, 4, 3),
        (128, 64, 8, 4),
    ]:
        out.append(dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st, USE_TMA=True))
    for bm, bn, w, st in [
        (128, 64, 4, 3),
        (128, 128, 4, 2),
        (128, 128, 8, 2),
        (128, 64, 8, 3),
        (128, 128, 4, 3),
    ]:
        out.append(
            dict(
                BLOCK_M=bm,
                BLOCK_N=bn,
                num_warps=w,
                num_stages=st,
                USE_TMA=True,
                WARP_SPECIALIZE=True,
            )
        )
    return out


def known_compile_failure(cfg: dict) -> str | None:
    """Why a launch config is not compiled, for configs known to fail: warp specialization at
    4 warps stops triton 3.6's pass pipeline ("PassManager::run failed", after an MLIR dump on
    stderr and a request to share the reproducer). Such configs are recorded as failed
    compiles without being tried."""
    if cfg.get("WARP_SPECIALIZE") and cfg.get("num_warps", 4) < 8:
        return (
            "failed compile (known, not tried): warp specialization at num_warps=4 fails in "
            "triton's pass pipeline (PassManager::run failed on triton 3.6.0)"
        )
    return None


def config_name(cfg: dict) -> str:
    mode = "ws" if cfg.get("WARP_SPECIALIZE") else ("tma" if cfg.get("USE_TMA", True) else "ptr")
    return f"{mode}-m{cfg['BLOCK_M']}-n{cfg['BLOCK_N']}-w{cfg['num_warps']}-s{cfg['num_stages']}"


def tune_forward(
    shapes: list[dict], configs: list[dict], *, reps: int = 40, progress=None
) -> list[dict]:
    """Time every config on every shape (flashcore only). Configs that fail to compile
    (shared memory, registers) are recorded with their error."""
    from ..interface import attention

    rows = []
    for shape in shapes:
        B, H, S, D = shape["B"], shape["Hq"], shape["S"], shape["D"]
        dtype = getattr(torch, shape["dtype"])
        per_set = 3 * B * H * S * D * 2
        n_sets = rotation_count(per_set)
        sets = [
            tuple(torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
            for _ in range(n_sets)
        ]
        flops = attention_flops(B, H, S, S, D, shape["causal"])
        ref = None
        for cfg in configs:
            row = {**shape, "config": config_name(cfg)}
            if known_compile_failure(cfg):
                row["error"] = known_compile_failure(cfg)
                rows.append(row)
                if progress is not None:
                    progress.update(1)
                continue
            try:
                with torch.inference_mode():
                    out = attention(*sets[0], causal=shape["causal"], config=cfg).float()
                    if ref is None:
                        ref = torch.nn.functional.scaled_dot_product_attention(
                            *(t.float() for t in sets[0]), is_causal=shape["causal"]
                        )
                    row["max_abs_diff_vs_fp32_sdpa"] = float((out - ref).abs().max())
                    t = time_launches(
                        lambda i: attention(*sets[i], causal=shape["causal"], config=cfg),
                        n_sets,
                        warmup=5,
                        reps=reps,
                    )
                row["median_ms"] = t.median_ms
                row["tflops"] = flops / t.median_ms / 1e9
            except Exception as exc:
                row["error"] = (
                    f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                )
            rows.append(row)
            if progress is not None:
                progress.update(1)
        sets = None  # free the rotated inputs before the next shape
        torch.cuda.empty_cache()
    return rows


# ----------------------------------------------------------------------------- records


def perf_row_line(r: dict) -> str:
    """One forward / prior-regime row of a perf record, as the CLI prints it."""
    what = (
        f"{r['dtype']:>8} B{r['B']:<3} H{r['Hq']:<3} S{r['S']:<6} D{r['D']:<4} "
        f"{'causal' if r['causal'] else 'full  '} {r['impl']:<15}"
    )
    if "timing" not in r:
        return f"{what} {r.get('error') or r.get('skipped')}"
    g = f"  graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us" if "graph_timing" in r else ""
    return f"{what} {r['timing']['median_ms'] * 1e3:10.1f} us {r['tflops']:7.1f} TFLOP/s{g}"


def decode_row_line(r: dict) -> str:
    """One decode row of a perf record, as the CLI prints it."""
    what = f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17}"
    if "timing" not in r:
        return f"{what} {r.get('error') or r.get('skipped')}"
    return (
        f"{what} {r['timing']['median_ms'] * 1e3:8.1f} us {r['tbps']:5.2f} TB/s "
        f"(graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us {r['graph_tbps']:5.2f} TB/s)"
    )


def run_perf_record(
    forward=(),
    prior=(),
    decode=None,
    *,
    impls=None,
    decode_impls=None,
    reps: int = 100,
    progress=None,
    log=None,
) -> dict:
    """The payload of results/<gpu>/perf.json: ``python -m flashcore bench`` and notebook 03
    both build it here.

    Ceilings first, then every ``forward`` shape with ``impls`` (default ``PEERS``), the
    ``prior`` regime's shapes with the same minus SDPA's math backend (CUDA-graph replay and
    host time too, samples kept for the latency figure), and, unless ``decode`` is None, the
    decode shapes with ``decode_impls`` (default ``DECODE_PEERS``; graph replay, and K+V bytes
    per second: ``tbps`` eager, ``graph_tbps`` replayed). ``progress(items, desc)`` wraps each
    sweep (e.g. a tqdm), ``log(line)`` gets the lines the CLI prints."""
    progress = progress or (lambda items, desc: items)
    log = log or (lambda *lines: None)
    impls = list(impls or PEERS)
    payload = {"method": __doc__.strip(), "ceilings": ceilings()}
    c = payload["ceilings"]
    log(f"ceilings: matmul {c['matmul']['tflops']:.1f} TFLOP/s, copy {c['copy']['tbps']:.2f} TB/s")
    payload["forward"] = [
        r
        for shape in progress(forward, "forward")
        for r in bench_attention_shape(shape, impls, reps=reps)
    ]
    prior_impls = [i for i in impls if i != "sdpa_math"]
    payload["prior_regime"] = [
        r
        for shape in progress(prior, "prior")
        for r in bench_attention_shape(shape, prior_impls, reps=reps, graph=True, keep_samples=True)
    ]
    for r in payload["forward"] + payload["prior_regime"]:
        log(perf_row_line(r))
    if decode is not None:
        rows = [
            r
            for shape in progress(decode, "decode")
            for r in bench_attention_shape(
                shape, decode_impls or DECODE_PEERS, reps=reps, graph=True
            )
        ]
        for r in rows:
            if "timing" in r:
                r["tbps"] = kv_bytes(r) / r["timing"]["median_ms"] / 1e9
                r["graph_tbps"] = kv_bytes(r) / r["graph_timing"]["median_ms"] / 1e9
            log(decode_row_line(r))
        payload["decode"] = rows
    return payload


def run_tuning_record(shapes: list[dict], *, progress=None) -> dict:
    """The payload of results/<gpu>/tuning.json (``python -m flashcore tune``): every launch
    config of ``tuning_configs`` on every shape. ``progress.update(1)`` after each."""
    configs = tuning_configs()
    return {"configs": configs, "rows": tune_forward(shapes, configs, progress=progress)}
