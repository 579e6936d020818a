"""Host cost of one attention call: eager wall time per call (back-to-back calls, as a
Python model loop makes them) and CUDA-graph replay time (the GPU work alone), flashcore
beside SDPA's backends, same process, alternating order, medians of repeats.

A call whose GPU time is below its host time is launch-bound: the eager time is then the
host path (argument checks, launcher, allocation) and the graph time shows the kernel.
"""

from __future__ import annotations

import statistics
import time

import torch

# (label, B, Hq, Hkv, Sq, Sk, D, causal)
SHAPES = [
    ("B1 H8 S128 D64", 1, 8, 8, 128, 128, 64, True),
    ("B8 H16 S512 D64", 8, 16, 16, 512, 512, 64, True),
    ("B1 H32 S1024 D128", 1, 32, 32, 1024, 1024, 128, True),
    ("decode B1 Hq32/Hkv8 cache 8K", 1, 32, 8, 1, 8192, 128, False),
    ("GQA prefill B1 H32/8 S2048 D128", 1, 32, 8, 2048, 2048, 128, True),
    # Decode as generation makes it: every call's cache is one token longer than the last
    # (cycling over 256 lengths from 8K); flashcore as the op and transformers call it.
    ("decode B1 Hq32/Hkv8 cache 8K growing", 1, 32, 8, 1, 8192, 128, False),
]
GROWTH = 256
# flashcore through each door a user calls it by: the function (``attention`` /
# ``attention_with_kvcache``, or ``attend_full_cache`` for the growing cache), the torch op,
# SDPA's flash backend after ``activate_flash_attention_impl("flashcore")`` (the same SDPA
# call as "sdpa flash"), and the flash_attn functions on (B, S, H, D) views of the same data.
DOORS = ("flashcore", "flashcore op", "flashcore sdpa door", "flashcore flash_attn door")
IMPLS = (*DOORS, "sdpa default", "sdpa cudnn", "sdpa flash")


class _sdpa_door:
    """SDPA's flash backend with flashcore activated as its implementation (torch >= 2.11:
    activation is undone on exit; older torch raises RuntimeError, recorded as the row's
    error)."""

    def __enter__(self):
        import torch.nn.attention as attn
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from flashcore import sdpa_backend

        if not hasattr(attn, "restore_flash_attention_impl"):
            raise RuntimeError(
                f"torch {torch.__version__} cannot undo an activation "
                "(restore_flash_attention_impl)"
            )
        attn.activate_flash_attention_impl(sdpa_backend.register())
        self.backend = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        self.backend.__enter__()
        return self

    @staticmethod
    def serves(fn) -> bool:
        """Whether a call of ``fn`` reaches flashcore's kernel (not PyTorch's fallback)."""
        from flashcore import sdpa_backend

        honest, reached = sdpa_backend.flash_forward, []

        def counted(*args, **kwargs):
            reached.append(1)
            return honest(*args, **kwargs)

        sdpa_backend.flash_forward = counted
        try:
            fn()
        finally:
            sdpa_backend.flash_forward = honest
        return bool(reached)

    def __exit__(self, *exc):
        import torch.nn.attention as attn

        self.backend.__exit__(*exc)
        attn.restore_flash_attention_impl()
        return False


def _calls(shape, dtype=torch.bfloat16, device="cuda"):
    """impl -> (zero-argument call, context manager factory or None)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashcore
    import flashcore.ops  # noqa: F401  registers torch.ops.flashcore.attention
    from flashcore.flash_attn_interface import flash_attn_func, flash_attn_with_kvcache

    _, b, hq, hkv, sq, sk, d, causal = shape
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(b, hq, sq, d, device=device, dtype=dtype, generator=g)
    k = torch.randn(b, hkv, sk, d, device=device, dtype=dtype, generator=g)
    v = torch.randn(b, hkv, sk, d, device=device, dtype=dtype, generator=g)
    gqa = hq != hkv
    decode = sq == 1
    if "growing" in shape[0]:
        from flashcore.kernels.decode import attend_full_cache

        kk = torch.randn(b, hkv, sk + GROWTH, d, device=device, dtype=dtype, generator=g)
        vv = torch.randn(b, hkv, sk + GROWTH, d, device=device, dtype=dtype, generator=g)
        step = [0]

        def kv():
            step[0] = (step[0] + 1) % GROWTH
            n = sk + step[0]
            return kk[:, :, :n], vv[:, :, :n]

        def ours():
            k, v = kv()
            return attend_full_cache(q, k, v)

        def op():
            k, v = kv()
            return torch.ops.flashcore.attention(q, k, v, causal, True, None)

        def sdpa():
            k, v = kv()
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=gqa
            )

        q_bshd = q.transpose(1, 2)
        cache_bshd = (kk.transpose(1, 2), vv.transpose(1, 2))
        # one lengths tensor per step, made here: the call reads it, nothing is copied per call
        lengths = [
            torch.full((b,), sk + i, dtype=torch.int32, device=device) for i in range(GROWTH)
        ]

        def flash_attn_door():
            step[0] = (step[0] + 1) % GROWTH
            return flash_attn_with_kvcache(q_bshd, *cache_bshd, cache_seqlens=lengths[step[0]])

        return {
            "flashcore": (ours, None),
            "flashcore op": (op, None),
            "flashcore sdpa door": (sdpa, _sdpa_door),
            "flashcore flash_attn door": (flash_attn_door, None),
            "sdpa default": (sdpa, None),
            "sdpa cudnn": (sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
            "sdpa flash": (sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        }
    q_bshd, k_bshd, v_bshd = (t.transpose(1, 2) for t in (q, k, v))
    if decode:
        lengths = torch.full((b,), sk, dtype=torch.int32, device=device)
        ours = lambda: flashcore.attention_with_kvcache(q, k, v, lengths, check_lengths=False)  # noqa: E731
        door = lambda: flash_attn_with_kvcache(q_bshd, k_bshd, v_bshd, cache_seqlens=lengths)  # noqa: E731
    else:
        ours = lambda: flashcore.attention(q, k, v, causal=causal)  # noqa: E731
        door = lambda: flash_attn_func(q_bshd, k_bshd, v_bshd, causal=causal)  # noqa: E731
    op = lambda: torch.ops.flashcore.attention(q, k, v, causal, True, None)  # noqa: E731
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, is_causal=causal, enable_gqa=gqa
    )
    return {
        "flashcore": (ours, None),
        "flashcore op": (op, None),
        "flashcore sdpa door": (sdpa, _sdpa_door),
        "flashcore flash_attn door": (door, None),
        "sdpa default": (sdpa, None),
        "sdpa cudnn": (sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
        "sdpa flash": (sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
    }


def _eager_us(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def _graph_us(fn, replays):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm on the side stream, as capture requires
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays * 1e3


def measure(
    shapes=SHAPES, impls=IMPLS, *, calls=300, repeats=7, replays=200, progress=None
) -> list[dict]:
    """Rows {shape, impl, eager_us_per_call, graph_us, eager_us_repeats}; an impl that
    refuses a shape gets an ``error`` and no times."""
    rows = []
    for shape in shapes:
        fns = _calls(shape)
        usable, samples = [], {}
        for impl in impls:
            fn, ctx = fns[impl]
            try:
                with ctx() if ctx else _null():
                    for _ in range(20):
                        fn()
                    torch.cuda.synchronize()
                    if ctx is _sdpa_door and not _sdpa_door.serves(fn):
                        raise RuntimeError(
                            "flashcore does not serve this SDPA call (PyTorch's flash kernel "
                            "ran; sdpa_backend.unsupported_reason says why)"
                        )
                usable.append(impl)
                samples[impl] = []
            except RuntimeError as err:  # e.g. a backend that does not take this shape
                rows.append(
                    {
                        "shape": shape[0],
                        "impl": impl,
                        "eager_us_per_call": None,
                        "graph_us": None,
                        "error": str(err).splitlines()[0][:200],
                    }
                )
        for rep in range(repeats):
            # Alternate the order every repeat so drift (clocks, caches) hits all alike.
            order = usable if rep % 2 == 0 else list(reversed(usable))
            for impl in order:
                fn, ctx = fns[impl]
                with ctx() if ctx else _null():
                    samples[impl].append(_eager_us(fn, calls))
        for impl in usable:
            fn, ctx = fns[impl]
            with ctx() if ctx else _null():
                graph = statistics.median(_graph_us(fn, replays) for _ in range(3))
            rows.append(
                {
                    "shape": shape[0],
                    "impl": impl,
                    "eager_us_per_call": statistics.median(samples[impl]),
                    "graph_us": graph,
                    "eager_us_repeats": samples[impl],
                }
            )
        if progress:
            progress(shape[0])
    return rows


def run_launch_record(*, calls: int = 300, repeats: int = 5, replays: int = 200) -> dict:
    """The payload of results/<gpu>/launch.json: ``python -m flashcore launch`` and notebook
    03 both build it here (``measure`` over every shape and implementation)."""
    return {
        "method": (
            f"eager: wall time of {calls} back-to-back calls / {calls}, median of {repeats} "
            "repeats in alternating order; graph: CUDA-graph replay, median of 3; 'growing' "
            f"rows: every call's cache one token longer (cycling over {GROWTH} lengths)"
        ),
        "calls": calls,
        "repeats": repeats,
        "replays": replays,
        "rows": measure(calls=calls, repeats=repeats, replays=replays),
    }


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def summary(rows) -> list[str]:
    """One line per shape: each door's eager time over SDPA default's (the target is <= 1.10)
    and the GPU time (graph replay) of flashcore's function beside SDPA default's."""
    lines = []
    by = {(r["shape"], r["impl"]): r for r in rows}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        ref = by.get((shape, "sdpa default"))
        if not (ref and ref["eager_us_per_call"]):
            continue
        parts = []
        for door in DOORS:
            row = by.get((shape, door))
            if row and row["eager_us_per_call"]:
                us = row["eager_us_per_call"]
                parts.append(f"{door} {us:6.1f} ({us / ref['eager_us_per_call']:.2f})")
        ours = by.get((shape, "flashcore")) or {}
        lines.append(
            f"{shape:<34} eager us (x sdpa): sdpa {ref['eager_us_per_call']:6.1f}, "
            + ", ".join(parts)
            + f"; graph {ours.get('graph_us') or float('nan'):6.1f} vs {ref['graph_us']:6.1f}"
        )
    return lines


# ----------------------------------------------------------------------------- varlen


def varlen_cases(seed=0, count=240, *, small=False):
    """Random ragged batches: lengths include 0 and 1, both causal alignments and
    non-causal, GQA ratios 1/2/4/8, windows, softcap, D in {32, 64, 128}."""
    import random

    rng = random.Random(seed)
    cases = []
    top = 40 if small else 700
    for i in range(count):
        batch = rng.choice([1, 2, 3, 5, 8])
        pick = lambda: rng.choice([0, 1, rng.randint(2, 17), rng.randint(2, top)])  # noqa: E731
        lens_q = [pick() for _ in range(batch)]
        causal = rng.random() < 0.75
        alignment = rng.choice(["top_left", "bottom_right"])
        # Self-attention (equal lengths) half the time, else independent key lengths.
        lens_k = lens_q[:] if rng.random() < 0.5 else [pick() for _ in range(batch)]
        hkv = rng.choice([1, 2, 4])
        group = rng.choice([1, 2, 4, 8]) if not small else rng.choice([1, 2])
        window = rng.choice([None, None, 1, rng.randint(2, 64)]) if causal else None
        softcap = rng.choice([None, None, None, 10.0])
        d = rng.choice([32, 64, 128]) if not small else rng.choice([16, 32])
        cases.append(
            dict(
                lens_q=lens_q,
                lens_k=lens_k,
                hq=hkv * group,
                hkv=hkv,
                d=d,
                causal=causal,
                alignment=alignment,
                window=window,
                softcap=softcap,
                seed=seed * 100003 + i,
            )
        )
    return cases


def run_varlen_case(case, device, dtype):
    """One case under the error rule against the float64 per-sequence reference."""
    from ..interface import attention_varlen
    from ..reference import varlen_reference
    from ..validate import error_rule

    g = torch.Generator().manual_seed(case["seed"])
    lq, lk = case["lens_q"], case["lens_k"]
    cu = lambda lens: torch.tensor(
        [0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32
    )  # noqa: E731
    mk = lambda n, h: torch.randn(n, h, case["d"], generator=g).to(dtype).to(device)  # noqa: E731
    q, k, v = mk(sum(lq), case["hq"]), mk(sum(lk), case["hkv"]), mk(sum(lk), case["hkv"])
    cu_q, cu_k = cu(lq).to(device), cu(lk).to(device)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)  # poisoned
    opts = dict(
        causal=case["causal"],
        causal_alignment=case["alignment"],
        window=case["window"],
        softcap=case["softcap"],
    )
    attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), out=out, **opts)
    ref = varlen_reference(q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(), **opts)
    same = varlen_reference(
        q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(), compute_dtype=dtype, **opts
    )
    report = error_rule(out.cpu(), ref, same.to(dtype))
    return {
        **{k_: v_ for k_, v_ in case.items() if k_ != "seed"},
        "passed": report.passed,
        "ratio": report.ratio,
        "nan_mismatch": report.nan_mismatch,
    }


def varlen_speed(
    lengths=(100, 180, 250, 300, 350, 420, 480, 512),
    hq=16,
    hkv=4,
    d=64,
    dtype=torch.bfloat16,
    repeats=5,
):
    """A padded batch of prompts (GPU): packed varlen vs flashcore dense on the padded batch
    vs SDPA dense on the padded batch with its padding mask (what transformers runs), and
    SDPA causal ignoring padding (a lower bound for dense). ``ms``: median of do_bench over
    back-to-back eager calls, which is the host's time wherever a call's launch path costs more
    than its kernels (the packed call's has ranged 21.7-90 us across records with its code
    unchanged); ``graph_ms``: CUDA-graph replay, the GPU's time alone."""
    import triton

    from ..interface import attention, attention_varlen
    from .bench import time_launches

    device = "cuda"
    batch, longest = len(lengths), max(lengths)
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, hq, longest, d, device=device, dtype=dtype, generator=g)
    k = torch.randn(batch, hkv, longest, d, device=device, dtype=dtype, generator=g)
    v = torch.randn(batch, hkv, longest, d, device=device, dtype=dtype, generator=g)
    # Right-padded dense layout, and its packed equivalent.
    pq = torch.cat([q[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)])
    pk = torch.cat([k[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)])
    pv = torch.cat([v[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)])
    cu = torch.tensor(
        [0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=device
    )
    valid = (
        torch.arange(longest, device=device)[None, :]
        < torch.tensor(lengths, device=device)[:, None]
    )
    mask = (
        valid[:, None, None, :]
        & torch.ones(longest, longest, dtype=torch.bool, device=device).tril()
    )
    calls = {
        "flashcore varlen (packed)": lambda: attention_varlen(
            pq, pk, pv, cu, cu, longest, longest, causal=True, check_lengths=False
        ),
        "flashcore dense (padded)": lambda: attention(q, k, v, causal=True),
        "sdpa dense + padding mask": lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True
        ),
        "sdpa dense causal (padding ignored)": lambda: (
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True
            )
        ),
    }
    times = {name: [] for name in calls}
    for rep in range(repeats):
        for name in calls if rep % 2 == 0 else reversed(list(calls)):
            times[name].append(triton.testing.do_bench(calls[name], warmup=25, rep=100))
    graph_ms = {}
    for name, fn in calls.items():
        try:
            graph_ms[name] = time_launches(lambda i, fn=fn: fn(), 1, graph=True).median_ms
        except Exception as exc:  # a call that cannot be captured is recorded, not fatal
            graph_ms[name] = f"{type(exc).__name__}: {str(exc)[:160]}"

    return {
        "lengths": list(lengths),
        "hq": hq,
        "hkv": hkv,
        "d": d,
        "dtype": str(dtype).replace("torch.", ""),
        "ms": {name: statistics.median(t) for name, t in times.items()},
        "graph_ms": graph_ms,
    }
