"""The NVML power/clock study's bookkeeping (CPU): block windows, class shifts, the verdict flag."""

import math
import types

import pytest

from flashcore.studies import timing_leak as TL


def blocks(time_r, time_f, clock_r, clock_f, power_r=600.0, power_f=560.0):
    out = []
    for letter in TL.BLOCK_ORDER:
        fixed = letter == "F"
        out.append(
            {
                "class": "fixed" if fixed else "random",
                "median_us": time_f if fixed else time_r,
                "sm_clock_mhz": clock_f if fixed else clock_r,
                "power_w": power_f if fixed else power_r,
                "temp_c": 60.0,
                "clock_event_reasons": 0x4 if not fixed else 0,
            }
        )
    return out


def test_block_order_is_balanced_against_drift():
    pos = {c: [i for i, x in enumerate(TL.BLOCK_ORDER) if x == c] for c in "RF"}
    assert len(pos["R"]) == len(pos["F"]) and sum(pos["R"]) == sum(pos["F"])


def test_clock_explains_a_shift_it_matches_and_not_one_it_does_not():
    # 2% faster with a 2% higher clock: explained.
    s = TL.summarize_power(blocks(100.0, 98.0, 1700.0, 1734.0))
    assert round(s["median_us_shift_pct"], 6) == -2.0 and s["clock_explains_time"]
    # 2% faster at the same clock: not explained by the clock.
    s = TL.summarize_power(blocks(100.0, 98.0, 1980.0, 1980.0))
    assert s["sm_clock_mhz_shift_pct"] == 0 and not s["clock_explains_time"]
    # The clock moves the wrong way: not explained.
    assert not TL.summarize_power(blocks(100.0, 98.0, 1734.0, 1700.0))["clock_explains_time"]
    assert TL.summarize_power(blocks(100.0, 98.0, 1700.0, 1734.0))["power_w_shift_pct"] < 0


def test_sampler_window_skips_the_settling_quarter():
    sampler = types.SimpleNamespace(
        samples=[(t / 10, 1000.0 + t, 500.0, 50.0, 0x4 if t == 9 else 0) for t in range(11)]
    )
    w = TL.NvmlSampler.window(sampler, 0.0, 1.0)
    assert w["samples"] == 8
    assert w["sm_clock_min_mhz"] == 1003.0 and w["clock_event_reasons"] == 0x4
    assert TL.NvmlSampler.window(sampler, 5.0, 6.0) == {"samples": 0}


def test_power_table_names_clock_events():
    record = {
        "rows": [
            {
                "kernel": "k",
                "fixed_class": "all_equal",
                "blocks": blocks(1, 1, 1, 1),
                **TL.summarize_power(blocks(100.0, 99.0, 1700.0, 1717.0)),
            }
        ]
    }
    (row,) = TL.power_table(record)
    assert row["clock_events"] == "software power cap" and row["clock_explains"]


def test_cli_progress_bar_takes_a_count():
    # `leak`, `bench` and `tune` pass a total; a second `_progress(items, ...)` once shadowed it.
    from flashcore.studies.commands import progress as _progress

    bar = _progress(3, "count")
    bar.update(3)
    bar.close()


def test_clock_hypothesis_can_come_out_every_way():
    def row(kernel, time_pct, clock_pct, explains):
        return {
            "kernel": kernel,
            "time_pct": time_pct,
            "clock_pct": clock_pct,
            "clock_explains": explains,
        }

    assert (
        TL.clock_hypothesis([row("forward", -2.0, 2.1, True), row("decode", 0.1, 0.0, False)])
        == "confirmed"
    )
    assert (
        TL.clock_hypothesis([row("forward", -2.0, 0.0, False), row("cuBLAS", -1.0, 0.1, False)])
        == "refuted"
    )
    assert (
        TL.clock_hypothesis([row("forward", -2.0, 2.1, True), row("cuBLAS", -1.0, 0.0, False)])
        == "inconclusive"
    )
    assert (
        TL.clock_hypothesis([row("forward", -0.1, 0.0, False), row("decode", -3.0, 0.0, False)])
        == "no shift to explain"
    )


def test_sampler_thread_with_a_stand_in_nvml(monkeypatch):
    """The sampler's NVML calls, thread and windows, against a stand-in pynvml (no GPU here)."""
    import sys
    import time

    class NVMLError(Exception):
        pass

    field = types.SimpleNamespace(
        nvmlReturn=0, valueType=1, value=types.SimpleNamespace(uiVal=512_000)
    )
    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_FI_DEV_POWER_INSTANT=186,
        NVML_CLOCK_SM=1,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
        nvmlDeviceGetFieldValues=lambda h, ids: [field],
        nvmlDeviceGetClockInfo=lambda h, c: 1755,
        nvmlDeviceGetTemperature=lambda h, s: 48,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with TL.NvmlSampler(interval_s=0.001) as sampler:
        t0 = time.perf_counter()
        time.sleep(0.05)
        t1 = time.perf_counter()
    assert sampler.power_source == "NVML_FI_DEV_POWER_INSTANT" and not sampler.errors
    w = sampler.window(t0, t1)
    assert w["samples"] > 5 and w["power_w"] == 512.0 and w["sm_clock_mhz"] == 1755.0
    assert TL.clock_event_names(w["clock_event_reasons"]) == "software power cap"


def test_clock_hypothesis_by_kernel_separates_capped_and_flat_clock_kernels():
    def row(kernel, time_pct, clock_pct, explains, events):
        return {
            "kernel": kernel,
            "time_pct": time_pct,
            "clock_pct": clock_pct,
            "clock_explains": explains,
            "clock_events": events,
        }

    rows = [
        row("cuBLAS", -14.0, 16.0, True, "software power cap"),
        row("forward causal", 1.8, 0.0, False, "none"),
        row("forward causal", 0.1, 0.0, False, "none"),
        row("decode split-KV", 4.5, 0.0, False, "none"),
    ]
    assert TL.clock_hypothesis(rows) == "inconclusive"  # the merged verdict hides the split
    assert TL.clock_hypothesis_by_kernel(rows) == {
        "cuBLAS": "confirmed",
        "forward causal": "refuted",
    }
    assert TL.power_capped(rows) == {
        "cuBLAS": True,
        "forward causal": False,
        "decode split-KV": False,
    }


@pytest.mark.gpu
def test_timing_test_times_the_gluon_kernel_shapes():
    # The timing test covers the Gluon kernel's shapes (D128 S2048 bf16, causal and not); its
    # first call raises if the dispatch table no longer sends them to the Gluon kernel.
    rows = TL.run_suite(n_per_class=200, classes=("all_equal",), kernel_filter="(Gluon)")
    assert [r["kernel"] for r in rows] == [
        "forward D128 non-causal (Gluon)",
        "forward D128 causal (Gluon)",
    ]
    assert all(math.isfinite(r["max_abs_t"]) for r in rows)
