"""The checker itself: the error rule must reject wrong outputs, including subtle ones."""

import json

import pytest
import torch

from flashcore.reference import attention_reference
from flashcore.results import describe, read_result, recorded_devices, write_result
from flashcore.validate import (
    AttentionCase,
    error_rule,
    make_inputs,
    planted_bugs,
    reduction_rule,
    weak_checks,
)


def _inputs(s, causal, seed=3):
    case = AttentionCase(1, 4, 2, s, s, 64, "float16", causal)
    q, k, v = make_inputs(case, "cpu", seed)
    ref = attention_reference(q, k, v, causal=causal)
    same = attention_reference(q, k, v, causal=causal, compute_dtype=q.dtype)
    return q, k, v, ref, same


@pytest.mark.parametrize("causal", [False, True])
def test_rule_rejects_every_planted_bug_at_small_s(causal):
    q, k, v, ref, same = _inputs(113, causal)
    for name, bug in planted_bugs().items():
        report = error_rule(bug(q, k, v, causal), ref, same)
        assert not report.passed, name


def test_rule_accepts_the_same_precision_baseline():
    q, k, v, ref, same = _inputs(239, True)
    report = error_rule(same, ref, same)
    assert report.passed and report.ratio <= 0.5


def test_weak_check_passes_a_bug_that_the_rule_rejects():
    # Probabilities rounded to bf16 in an fp16 kernel: allclose(rtol=1e-3, atol=2e-3)
    # cannot see it at S=113; the rule, scaled to fp16's own rounding error, can.
    q, k, v, ref, same = _inputs(113, False)
    out = planted_bugs()["probabilities rounded to bf16"](q, k, v, False)
    assert weak_checks()["allclose(rtol=1e-3, atol=2e-3)"](out, ref)
    assert not error_rule(out, ref, same).passed


def test_unwritten_element_fails():
    q, k, v, ref, same = _inputs(64, False)
    out = same.clone()
    out[0, 1, 7, 3] = float("nan")  # what a poisoned, never-written element looks like
    report = error_rule(out, ref, same)
    assert report.nan_mismatch == 1 and not report.passed


def test_single_wrong_element_fails():
    q, k, v, ref, same = _inputs(64, False)
    out = ref.to(q.dtype)
    out[0, 0, 3, 5] += 0.05
    assert not error_rule(out, ref, same).passed


def _fp32_means(n, seed):
    """A loss-like scalar: the fp32 mean of n positive fp32 terms, and its exact value."""
    terms = (torch.randn(n, generator=torch.Generator().manual_seed(seed)).abs() + 4.0).float()
    return terms.mean(), terms.double().mean(), terms.double()


@pytest.mark.parametrize("n", [2, 46, 1000, 4096])
def test_reduction_rule_floor_covers_a_means_rounding(n):
    # A same-precision baseline that rounds to the exact value (the reference rounded once) is
    # the luck that made a correct fp32 loss fail the elementwise rule by an ulp: the scalar
    # rule's floor covers the summation of n terms, and still rejects an error of 256 ulps.
    elementwise_failed = 0
    for seed in range(50):
        value, ref, terms = _fp32_means(n, seed)
        lucky = ref.float()
        report = reduction_rule(value, ref, lucky, terms)
        assert report.passed, (seed, report)
        elementwise_failed += not error_rule(
            value.reshape(1), ref.reshape(1), lucky.reshape(1)
        ).passed
        ulp = float(torch.nextafter(value, torch.tensor(float("inf"))) - value)
        for off in (256 * ulp, -256 * ulp):
            assert not reduction_rule(value + off, ref, lucky, terms).passed, (seed, off)
    if n > 2:  # sums of many terms round by more than the elementwise floor at some seeds
        assert elementwise_failed > 0


def test_reduction_rule_floor_is_the_summation_bound():
    terms = torch.full((46,), 6.5, dtype=torch.float64)
    report = reduction_rule(terms.float().mean(), terms.mean(), terms.float().mean(), terms)
    # ceil(log2 46) = 6 levels of additions and one division, at mean |term| = 6.5
    assert report.floor == pytest.approx(2.0**-24 * 7 * 6.5)
    sums = reduction_rule(terms.float().sum(), terms.sum(), terms.float().sum(), terms, mean=False)
    assert sums.floor == pytest.approx(2.0**-24 * 6 * 6.5 * 46)


def test_results_roundtrip_with_provenance(tmp_path, monkeypatch):
    import flashcore.results as R

    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    path = write_result("unit", {"value": 1.5}, slug="test-gpu")
    data = json.loads(path.read_text())
    assert data["value"] == 1.5 and data["provenance"]["commit"] and data["provenance"]["torch"]
    assert R.read_result("unit", "test-gpu")["value"] == 1.5


def test_recorded_gpu_correctness_grid():
    """The committed H100 record: at least 300 cases, every one passing, with provenance."""
    slugs = [s for s in recorded_devices("correctness") if s != "cpu"]
    if not slugs:
        pytest.skip("no GPU correctness record committed")
    record = read_result("correctness", slugs[0])
    assert record["provenance"]["gpu"] and record["provenance"]["commit"] != "unknown"
    rows = record["cases"]
    assert len(rows) >= 300 and record["summary"]["cases"] == len(rows)
    assert all(r["passed"] and r["ratio"] <= 1.0 for r in rows)
    dtypes = {r["dtype"] for r in rows}
    assert {"float16", "bfloat16"} <= dtypes
    assert {(r["causal"], r["alignment"]) for r in rows} >= {
        (False, "top_left"),
        (True, "top_left"),
        (True, "bottom_right"),
    }
    assert {r["num_q_heads"] // r["num_kv_heads"] for r in rows} >= {1, 2, 4, 7, 8, 32}
    assert all(r["bitwise_identical"] for r in record["determinism"])
    assert all(r["passed"] and r["max_element_offset"] > 2**31 for r in record["large_offsets"])
    assert "recorded" in describe(record)
