"""Long-context study helpers that run without a GPU: the tile limit behind the prior
report's 32K failure, window FLOPs, the log-log fit and the sweep tables."""

import math

import pytest

from flashcore.studies import long_context as L
from flashcore.studies.bench import attention_flops


def test_whole_sequence_tile_limit_is_between_16k_and_32k():
    assert L.tile_fits([16384, 64]) == (True, "")
    ok, msg = L.tile_fits([32768, 64])
    assert not ok and "numel" in msg
    assert L.tile_fits([128, 128])[0]  # a FlashAttention tile is independent of S


@pytest.mark.parametrize(
    "seqlen,window", [(1, 1), (10, 1), (10, 3), (100, 100), (100, 1000), (4096, 4096)]
)
def test_window_flops_count_visible_pairs(seqlen, window):
    from flashcore.reference import visible_keys

    pairs = int(visible_keys(seqlen, seqlen, causal=True, window=window).sum())
    assert L.window_flops(2, seqlen, 64, window) == 4.0 * 2 * pairs * 64
    if window >= seqlen:  # a window wider than the sequence is plain causal
        assert L.window_flops(2, seqlen, 64, window) == attention_flops(
            1, 2, seqlen, seqlen, 64, True
        )


def _rows(exponent, impl="x", causal=False, scale=1e-6):
    return [
        {"S": s, "impl": impl, "causal": causal, "timing": {"median_ms": scale * s**exponent}}
        for s in (2**k for k in range(10, 18))
    ]


@pytest.mark.parametrize("exponent", [1.0, 2.0, 2.5])
def test_loglog_slope_recovers_the_exponent(exponent):
    assert math.isclose(L.loglog_slope(_rows(exponent), "x", False), exponent, rel_tol=1e-9)
    assert L.loglog_slope(_rows(exponent), "x", True) is None  # no causal rows


def test_sweep_table_reports_failures_in_words():
    rows = [
        {"S": 1024, "impl": "a", "causal": False, "timing": {"median_ms": 1.0}, "tflops": 10.0},
        {"S": 1024, "impl": "b", "causal": False, "error": "out of memory"},
        {"S": 2048, "impl": "b", "causal": False, "skipped": "failed at a smaller S"},
        {"S": 2048, "impl": "a", "causal": False, "skipped": "previous point took 9.0 s"},
    ]
    table = L.sweep_table(rows, False, ["a", "b"])
    assert table[0] == {"S": 1024, "a": "1.000 ms / 10", "b": "out of memory"}
    assert table[1] == {"S": 2048, "a": "skipped (too slow)", "b": "out of memory"}
