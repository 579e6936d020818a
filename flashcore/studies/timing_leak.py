"""Timing-leak test (dudect method) for the kernels on a GPU.

Two input classes of identical shape: "random" (fresh N(0,1) values) and one "fixed"
special class (all-equal, huge magnitudes, subnormals, NaN/Inf, sparse). Launches of the
two classes are randomly interleaved, each timed with its own CUDA events; Welch's t-test
compares the two timing distributions, after cropping at several percentiles (dudect's
answer to heavy upper tails), plus a second-order test on centred, squared times.

|t| > 4.5 is dudect's threshold for "leaks". The test can fail: the positive controls
(``LEAKY_CONTROL`` in the forward kernel: skip the rescale when the running max does not
move; skip all keys when a query tile holds a NaN) must be flagged by it.

Both classes cycle through the same number of separate buffers, so neither class
benefits from finding its inputs in L2 (a fixed class in one buffer would).
"""

from __future__ import annotations

import math

import numpy as np
import torch

THRESHOLD = 4.5
SPECIAL_CLASSES = ("all_equal", "huge", "subnormal", "nan_inf", "sparse")
CROP_PERCENTILES = (None, 99, 95, 90, 75, 50)


def special_tensor(kind: str, shape, dtype, device, gen) -> torch.Tensor:
    """One tensor of a fixed special class (the same values every time for a given gen)."""
    if kind == "all_equal":
        return torch.ones(shape, dtype=dtype, device=device)
    if kind == "huge":
        # Large but finite scores in fp32 (|q.k| * scale ~ 1e4): softmax becomes one-hot.
        return (torch.randn(shape, generator=gen, device=device) * 30).to(dtype)
    if kind == "subnormal":
        tiny = torch.finfo(dtype).tiny  # smallest normal; a quarter of it is subnormal
        return (torch.randn(shape, generator=gen, device=device).sign() * tiny / 4).to(dtype)
    if kind == "nan_inf":
        t = torch.randn(shape, generator=gen, device=device).to(dtype)
        t.view(-1)[::7] = float("nan")
        t.view(-1)[3::11] = float("inf")
        return t
    if kind == "sparse":
        t = torch.randn(shape, generator=gen, device=device)
        return (t * (torch.rand(shape, generator=gen, device=device) < 0.01)).to(dtype)
    raise ValueError(f"unknown input class {kind!r}")


def welch_t(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    return float((a.mean() - b.mean()) / math.sqrt(va + vb)) if va + vb > 0 else 0.0


def dudect_statistics(times, classes) -> dict:
    """First-order t at each crop percentile and the second-order t; max |t| over all."""
    times, classes = np.asarray(times), np.asarray(classes)
    tests = {}
    for p in CROP_PERCENTILES:
        keep = np.ones_like(times, bool) if p is None else times <= np.percentile(times, p)
        a, b = times[keep & (classes == 0)], times[keep & (classes == 1)]
        tests["t_all" if p is None else f"t_crop{p}"] = welch_t(a, b)
    a, b = times[classes == 0], times[classes == 1]
    tests["t_second_order"] = welch_t((a - a.mean()) ** 2, (b - b.mean()) ** 2)
    max_abs = max(abs(v) for v in tests.values())
    return {**tests, "max_abs_t": max_abs, "leak": max_abs > THRESHOLD,
            "median_us": [float(np.median(a) * 1e3), float(np.median(b) * 1e3)],
            "n_per_class": [int(a.size), int(b.size)]}


def measure(fn, random_sets, fixed_sets, n_per_class: int, seed: int = 0):
    """Interleave 2 * n_per_class launches at random; time each with CUDA events (ms)."""
    rng = np.random.default_rng(seed)
    classes = rng.permutation(np.repeat([0, 1], n_per_class))
    for i in range(20):  # warm-up both classes
        fn(*(random_sets if i % 2 else fixed_sets)[i % len(random_sets)])
    torch.cuda.synchronize()
    chunk = 2000  # events are synchronised and read back per chunk
    times = np.empty(classes.size)
    counters = [0, 0]
    for lo in range(0, classes.size, chunk):
        cls = classes[lo:lo + chunk]
        starts = [torch.cuda.Event(enable_timing=True) for _ in cls]
        ends = [torch.cuda.Event(enable_timing=True) for _ in cls]
        for j, c in enumerate(cls):
            sets = fixed_sets if c else random_sets
            args = sets[counters[c] % len(sets)]
            counters[c] += 1
            starts[j].record()
            fn(*args)
            ends[j].record()
        torch.cuda.synchronize()
        times[lo:lo + len(cls)] = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return times, classes


def _class_inputs(shapes):
    """make(kind, gen) -> one tensor per shape, bf16: N(0,1) for "random", else the fixed class."""
    def make(kind, gen):
        if kind == "random":
            return tuple(torch.randn(s, generator=gen, device="cuda").to(torch.bfloat16) for s in shapes)
        return tuple(special_tensor(kind, s, torch.bfloat16, "cuda", gen) for s in shapes)
    return make


def _kernels():
    """(name, role, make_inputs(kind, gen) -> (q, k, v), fn(q, k, v)) for each kernel under test."""
    from ..kernels.decode import attention_with_kvcache
    from ..kernels.forward import attention, default_config

    def forward_inputs(hq, hkv):
        return _class_inputs([(2, hq, 2048, 64), (2, hkv, 2048, 64), (2, hkv, 2048, 64)])

    def leaky(control):
        def fn(q, k, v):
            cfg = {**default_config(q, k, True), "LEAKY_CONTROL": control}
            return attention(q, k, v, causal=True, config=cfg)
        return fn

    lengths = torch.full((8,), 8192, dtype=torch.int32, device="cuda")
    return [
        # Hardware reference: cuBLAS bf16 matmul has no value-dependent control flow at all;
        # any value dependence of its time comes from the chip (power, clocks), not code.
        ("hardware reference: cuBLAS bf16 matmul", "reference",
         _class_inputs([(4096, 4096), (4096, 4096), (1,)]), lambda a, b, _: torch.mm(a, b)),
        ("forward non-causal", "shipped", forward_inputs(16, 16), lambda q, k, v: attention(q, k, v)),
        ("forward causal", "shipped", forward_inputs(16, 16), lambda q, k, v: attention(q, k, v, causal=True)),
        ("forward GQA 16/4 causal", "shipped", forward_inputs(16, 4),
         lambda q, k, v: attention(q, k, v, causal=True)),
        ("decode split-KV", "shipped", _class_inputs([(8, 32, 1, 128), (8, 8, 8192, 128), (8, 8, 8192, 128)]),
         lambda q, k, v: attention_with_kvcache(q, k, v, lengths, check_lengths=False)),
        ("control: skip rescale if max unchanged", "leaky control", forward_inputs(16, 16), leaky(1)),
        ("control: early exit on NaN", "leaky control", forward_inputs(16, 16), leaky(2)),
    ]


def run_suite(n_per_class: int = 10000, classes=SPECIAL_CLASSES, kernel_filter: str | None = None,
              sets_per_class: int = 4, progress=None) -> list[dict]:
    rows = []
    for name, role, make_inputs, fn in _kernels():
        if kernel_filter and kernel_filter not in name:
            continue
        gen = torch.Generator(device="cuda").manual_seed(0)
        random_sets = [make_inputs("random", gen) for _ in range(sets_per_class)]
        for kind in classes:
            fixed_gen = torch.Generator(device="cuda").manual_seed(1)
            fixed = make_inputs(kind, fixed_gen)
            fixed_sets = [tuple(t.clone() for t in fixed) for _ in range(sets_per_class)]
            with torch.inference_mode():
                times, cls = measure(fn, random_sets, fixed_sets, n_per_class, seed=len(rows))
            stats = dudect_statistics(times, cls)
            q = [1, 5, 25, 50, 75, 95, 99]
            stats["quantiles_us"] = {
                "percentiles": q,
                "random": [float(x * 1e3) for x in np.percentile(times[cls == 0], q)],
                "fixed": [float(x * 1e3) for x in np.percentile(times[cls == 1], q)]}
            rows.append({"kernel": name, "role": role, "fixed_class": kind, **stats})
            del fixed_sets
            if progress is not None:
                progress.update(1)
        del random_sets
        torch.cuda.empty_cache()
    return rows
