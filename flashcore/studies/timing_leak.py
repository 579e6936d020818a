"""Timing-leak test (dudect method) for the kernels on a GPU.

Two input classes of identical shape: "random" (fresh N(0,1) values) and one "fixed"
special class (all-equal, huge magnitudes, subnormals, NaN/Inf, sparse). Launches of the
two classes are randomly interleaved, each timed with its own CUDA events; Welch's t-test
compares the two timing distributions, after cropping at several percentiles (dudect's
answer to heavy upper tails), plus a second-order test on centred, squared times.

|t| > 4.5 is dudect's threshold for "leaks". The test can fail: the positive controls
(``studies/leaky_controls.py``: lab kernels that skip the rescale when the running max does
not move, or skip all keys when a query tile holds a NaN) must be flagged by it.

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
    return {
        **tests,
        "max_abs_t": max_abs,
        "leak": max_abs > THRESHOLD,
        "median_us": [float(np.median(a) * 1e3), float(np.median(b) * 1e3)],
        "n_per_class": [int(a.size), int(b.size)],
    }


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
        cls = classes[lo : lo + chunk]
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
        times[lo : lo + len(cls)] = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return times, classes


def _class_inputs(shapes):
    """make(kind, gen) -> one tensor per shape, bf16: N(0,1) for "random", else the fixed class."""

    def make(kind, gen):
        if kind == "random":
            return tuple(
                torch.randn(s, generator=gen, device="cuda").to(torch.bfloat16) for s in shapes
            )
        return tuple(special_tensor(kind, s, torch.bfloat16, "cuda", gen) for s in shapes)

    return make


def _kernels():
    """(name, role, make_inputs(kind, gen) -> (q, k, v), fn(q, k, v)) for each kernel under test."""
    from ..interface import attention, attention_with_kvcache
    from .leaky_controls import leaky_attention

    def forward_inputs(hq, hkv, d=64):
        return _class_inputs([(2, hq, 2048, d), (2, hkv, 2048, d), (2, hkv, 2048, d)])

    def gluon(causal):
        # D128 S2048 bf16: shapes interface.FORWARD_GLUON_FROM sends to the Gluon kernel. The
        # first call checks that the dispatch still does, so a changed table cannot silently
        # time the Triton kernel under this name.
        from ..interface import forward_kernel

        def fn(q, k, v):
            if not checked:
                kernel = forward_kernel(q, k, v, causal=causal)
                if kernel != "gluon":
                    raise RuntimeError(
                        f"expected the Gluon kernel at {tuple(q.shape)}, got {kernel}"
                    )
                checked.append(True)
            return attention(q, k, v, causal=causal)

        checked = []
        return fn

    def leaky(control):
        return lambda q, k, v: leaky_attention(q, k, v, control)

    lengths = torch.full((8,), 8192, dtype=torch.int32, device="cuda")
    return [
        # Hardware reference: cuBLAS bf16 matmul has no value-dependent control flow at all;
        # any value dependence of its time comes from the chip (power, clocks), not code.
        (
            "hardware reference: cuBLAS bf16 matmul",
            "reference",
            _class_inputs([(4096, 4096), (4096, 4096), (1,)]),
            lambda a, b, _: torch.mm(a, b),
        ),
        (
            "forward non-causal",
            "shipped",
            forward_inputs(16, 16),
            lambda q, k, v: attention(q, k, v),
        ),
        (
            "forward causal",
            "shipped",
            forward_inputs(16, 16),
            lambda q, k, v: attention(q, k, v, causal=True),
        ),
        (
            "forward GQA 16/4 causal",
            "shipped",
            forward_inputs(16, 4),
            lambda q, k, v: attention(q, k, v, causal=True),
        ),
        (
            "forward D128 non-causal (Gluon)",
            "shipped",
            forward_inputs(16, 16, 128),
            gluon(False),
        ),
        (
            "forward D128 causal (Gluon)",
            "shipped",
            forward_inputs(16, 16, 128),
            gluon(True),
        ),
        (
            "decode split-KV",
            "shipped",
            _class_inputs([(8, 32, 1, 128), (8, 8, 8192, 128), (8, 8, 8192, 128)]),
            lambda q, k, v: attention_with_kvcache(q, k, v, lengths, check_lengths=False),
        ),
        (
            "control: skip rescale if max unchanged",
            "leaky control",
            forward_inputs(16, 16),
            leaky(1),
        ),
        ("control: early exit on NaN", "leaky control", forward_inputs(16, 16), leaky(2)),
    ]


def run_suite(
    n_per_class: int = 10000,
    classes=SPECIAL_CLASSES,
    kernel_filter: str | None = None,
    sets_per_class: int = 4,
    progress=None,
) -> list[dict]:
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
                "fixed": [float(x * 1e3) for x in np.percentile(times[cls == 1], q)],
            }
            rows.append({"kernel": name, "role": role, "fixed_class": kind, **stats})
            del fixed_sets
            if progress is not None:
                progress.update(1)
        del random_sets
        torch.cuda.empty_cache()
    return rows


def run_leak_record(
    n_per_class: int = 10000, classes=SPECIAL_CLASSES, kernel_filter=None, *, progress=None
) -> dict:
    """The payload of results/<gpu>/timing_leak.json (``python -m flashcore leak``; notebook
    06 records the same): the method, the threshold and ``run_suite``'s rows."""
    return {
        "method": __doc__.strip(),
        "threshold": THRESHOLD,
        "n_per_class": n_per_class,
        "rows": run_suite(n_per_class, classes, kernel_filter, progress=progress),
    }


# ------------------------------------------------------- power and clocks during the test
#
# The timing test interleaves the two classes launch by launch (tens of microseconds each),
# far faster than NVML reports power, so its samples cannot be attributed to a class. This
# study runs the same kernels on the same class inputs in blocks of one class at a time
# (alternating, a fraction of a second each, the GPU drained between blocks) while a
# background thread samples the SM clock, the board power and the temperature through NVML.
# It only reads: no clock, power limit or persistence setting is touched.

POWER_CLASSES = ("all_equal", "subnormal", "sparse", "huge", "nan_inf")
POWER_METHOD = (
    "The timing test's kernels and input classes, run in blocks of one class at a time "
    "(order RFFRFRRF, each block a fixed wall time of back-to-back launches, the GPU drained "
    "between blocks) while a background thread samples NVML every 2 ms: SM clock, board power "
    "(instantaneous where the driver offers it), temperature, clock-event reasons. Per block: "
    "median launch time (CUDA events) and NVML means over the block's last three quarters. "
    "Observation only: no clock, power or persistence setting is changed."
)


class NvmlSampler:
    """Background thread sampling (time, SM clock MHz, power W, temperature C, clock-event
    reasons) from NVML every ``interval_s`` while active. Power is the instantaneous field
    where the driver offers it (``power_source`` says which was read), else the averaged
    ``nvmlDeviceGetPowerUsage``."""

    def __init__(self, device_index: int = 0, interval_s: float = 0.002):
        import pynvml  # nvidia-ml-py; GPU machines only

        self.nvml, self.interval_s = pynvml, interval_s
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self.instant_field = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
        self.power_source = "nvmlDeviceGetPowerUsage (driver-averaged)"
        if self.instant_field is not None:
            try:
                value = pynvml.nvmlDeviceGetFieldValues(self.handle, [self.instant_field])[0]
                if value.nvmlReturn == 0:
                    self.power_source = "NVML_FI_DEV_POWER_INSTANT"
                else:
                    self.instant_field = None
            except pynvml.NVMLError:
                self.instant_field = None
        self.samples: list[tuple[float, float, float, float, int]] = []
        self.errors: list[str] = []
        self._stop = None
        self._thread = None

    def _power_w(self) -> float:
        nv = self.nvml
        if self.instant_field is not None:
            field = nv.nvmlDeviceGetFieldValues(self.handle, [self.instant_field])[0]
            # The union member to read depends on the field's value type (milliwatts).
            member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
                int(field.valueType), "uiVal"
            )
            return float(getattr(field.value, member)) / 1000.0
        return nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    def _reasons(self) -> int:
        nv = self.nvml
        getter = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(getter(self.handle))

    def _run(self):
        import time

        nv = self.nvml
        while not self._stop.is_set():
            try:
                self.samples.append(
                    (
                        time.perf_counter(),
                        float(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM)),
                        self._power_w(),
                        float(nv.nvmlDeviceGetTemperature(self.handle, nv.NVML_TEMPERATURE_GPU)),
                        self._reasons(),
                    )
                )
            except nv.NVMLError as exc:  # kept for the record; the windows then have fewer samples
                self.errors.append(str(exc))
            self._stop.wait(self.interval_s)

    def __enter__(self):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.nvml.nvmlShutdown()

    def window(self, t0: float, t1: float, skip: float = 0.25) -> dict:
        """Means over [t0, t1], leaving out the first ``skip`` of it (power and clock settle)."""
        lo = t0 + skip * (t1 - t0)
        s = [x for x in self.samples if lo <= x[0] <= t1]
        if not s:
            return {"samples": 0}
        reasons = 0
        for x in s:
            reasons |= x[4]
        return {
            "samples": len(s),
            "sm_clock_mhz": float(np.mean([x[1] for x in s])),
            "sm_clock_min_mhz": float(min(x[1] for x in s)),
            "power_w": float(np.mean([x[2] for x in s])),
            "temp_c": float(np.mean([x[3] for x in s])),
            "clock_event_reasons": reasons,
        }


BLOCK_ORDER = (
    "RFFRFRRF"  # balanced against a linear drift (warming up): both classes' mean position is 3.5
)


def power_blocks(
    fn, random_sets, fixed_sets, sampler: NvmlSampler, *, block_s: float = 0.3
) -> list[dict]:
    """Blocks of back-to-back launches of one class in ``BLOCK_ORDER``, each ``block_s`` long;
    per block: the median launch time (CUDA events) and the NVML means over the block's span
    on the GPU (synchronised at both ends)."""
    import time

    out = []
    for letter in BLOCK_ORDER:
        cls = int(letter == "F")
        sets = fixed_sets if cls else random_sets
        for i in range(10):  # warm-up in the block's class
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        starts, ends, i = [], [], 0
        while time.perf_counter() - t0 < block_s:
            for _ in range(50):  # enqueue in batches; the GPU stays busy behind the host
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn(*sets[i % len(sets)])
                e.record()
                starts.append(s)
                ends.append(e)
                i += 1
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        times_us = [1e3 * s.elapsed_time(e) for s, e in zip(starts, ends)]
        out.append(
            {
                "class": "fixed" if cls else "random",
                "launches": len(times_us),
                "median_us": float(np.median(times_us)),
                **sampler.window(t0, t1),
            }
        )
    return out


def summarize_power(blocks: list[dict]) -> dict:
    """Fixed-vs-random shifts (percent of random) of the median launch time, the SM clock and
    the power, from the block means. ``clock_explains_time``: the time shift has the sign a
    clock shift would cause and at least half its size is accounted for by the clock."""

    def mean(cls, key):
        vals = [b[key] for b in blocks if b["class"] == cls and key in b]
        return float(np.mean(vals)) if vals else float("nan")

    out = {}
    for key in ("median_us", "sm_clock_mhz", "power_w", "temp_c"):
        r, f = mean("random", key), mean("fixed", key)
        out[key] = [r, f]
        out[f"{key}_shift_pct"] = 100.0 * (f - r) / r if r else float("nan")
    t, c = out["median_us_shift_pct"], out["sm_clock_mhz_shift_pct"]
    # A clock that runs c% faster shortens a compute-bound launch by about c%.
    out["clock_explains_time"] = bool(abs(t) > 0 and -c * t > 0 and abs(c) >= 0.5 * abs(t))
    return out


POWER_KERNELS = ("hardware reference", "forward non-causal", "forward causal", "decode")


def run_power_suite(
    kernel_names=POWER_KERNELS,
    classes=POWER_CLASSES,
    *,
    block_s: float = 0.3,
    sets_per_class: int = 4,
    progress=None,
) -> dict:
    """The power/clock study over the timing test's kernels and classes (same inputs)."""
    rows = []
    with NvmlSampler() as sampler:
        for name, role, make_inputs, fn in _kernels():
            if not any(name.startswith(k) for k in kernel_names):
                continue
            gen = torch.Generator(device="cuda").manual_seed(0)
            random_sets = [make_inputs("random", gen) for _ in range(sets_per_class)]
            for kind in classes:
                fixed = make_inputs(kind, torch.Generator(device="cuda").manual_seed(1))
                fixed_sets = [tuple(t.clone() for t in fixed) for _ in range(sets_per_class)]
                with torch.inference_mode():
                    blocks = power_blocks(fn, random_sets, fixed_sets, sampler, block_s=block_s)
                rows.append(
                    {
                        "kernel": name,
                        "role": role,
                        "fixed_class": kind,
                        "blocks": blocks,
                        **summarize_power(blocks),
                    }
                )
                del fixed_sets
                if progress is not None:
                    progress.update(1)
            del random_sets
            torch.cuda.empty_cache()
        n_samples, errors = len(sampler.samples), sorted(set(sampler.errors))
        source, interval = sampler.power_source, sampler.interval_s
    return {
        "power_source": source,
        "sample_interval_s": interval,
        "samples": n_samples,
        "nvml_errors": errors,
        "block_order": BLOCK_ORDER,
        "block_s": block_s,
        "rows": rows,
    }


def run_power_record(kernel_names=POWER_KERNELS, classes=POWER_CLASSES, *, progress=None) -> dict:
    """The payload of results/<gpu>/timing_power.json (``python -m flashcore leak --power``;
    notebook 06 records the same): the method and ``run_power_suite``'s result."""
    return {"method": POWER_METHOD, **run_power_suite(kernel_names, classes, progress=progress)}


# NVML clock-event reason bits (nvmlClocksEventReason*): why the SM clock is below its maximum.
CLOCK_EVENT_REASONS = {
    0x1: "idle",
    0x2: "applications clocks",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal",
    0x40: "hardware thermal",
    0x80: "hardware power brake",
    0x100: "display clocks",
}


def clock_event_names(mask: int) -> str:
    return ", ".join(name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit) or "none"


def power_table(record: dict) -> list[dict]:
    """One line per (kernel, fixed class): random-class absolute values, fixed-vs-random shifts,
    and the clock-event reasons seen in any of its blocks."""
    out = []
    for r in record["rows"]:
        reasons = 0
        for b in r["blocks"]:
            reasons |= b.get("clock_event_reasons", 0)
        out.append(
            {
                "kernel": r["kernel"],
                "class": r["fixed_class"],
                "time_pct": r["median_us_shift_pct"],
                "sm_mhz": r["sm_clock_mhz"][0],
                "clock_pct": r["sm_clock_mhz_shift_pct"],
                "power_w": r["power_w"][0],
                "power_pct": r["power_w_shift_pct"],
                "temp_c": r["temp_c"][0],
                "clock_explains": r["clock_explains_time"],
                "clock_events": clock_event_names(reasons),
            }
        )
    return out


def clock_hypothesis(
    table_rows: list[dict], min_shift_pct: float = 0.5, flat_clock_pct: float = 0.2
) -> str:
    """Verdict on "the value dependence of the tensor-core kernels' time is the clock's" from
    ``power_table`` rows (the memory-bound decode kernel left out): "confirmed" when every time
    shift over ``min_shift_pct`` comes with a clock shift that accounts for it; "refuted" when
    every such shift happens at a clock that moved less than ``flat_clock_pct``; "no shift to
    explain" when the blocked runs show none; otherwise "inconclusive"."""
    shifted = [
        r
        for r in table_rows
        if not r["kernel"].startswith("decode") and abs(r["time_pct"]) > min_shift_pct
    ]
    if not shifted:
        return "no shift to explain"
    if all(r["clock_explains"] for r in shifted):
        return "confirmed"
    if all(abs(r["clock_pct"]) < flat_clock_pct for r in shifted):
        return "refuted"
    return "inconclusive"


def clock_hypothesis_by_kernel(table_rows: list[dict], **thresholds) -> dict[str, str]:
    """``clock_hypothesis`` per tensor-core kernel, so that a kernel whose shifts follow its
    clock (one that runs into the power cap) and one whose clock stays flat while its time
    moves are told apart instead of merging into one "inconclusive"."""
    kernels = sorted({r["kernel"] for r in table_rows if not r["kernel"].startswith("decode")})
    return {
        kernel: clock_hypothesis([r for r in table_rows if r["kernel"] == kernel], **thresholds)
        for kernel in kernels
    }


def power_capped(table_rows: list[dict]) -> dict[str, bool]:
    """Per kernel: did NVML report the software power cap as a clock-event reason in any of
    its blocks (the clock was lowered to hold the board's power limit)?"""
    out: dict[str, bool] = {}
    for r in table_rows:
        out[r["kernel"]] = out.get(r["kernel"], False) or "software power cap" in r["clock_events"]
    return out
