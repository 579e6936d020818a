"""Learnable attention sinks (gpt-oss): one logit per query head that joins every row's
softmax denominator and has no value row. Forward (dense, GQA, windows, softcap, both
alignments, Sk = 0) and KV-cache decode (one split and several) against the float64
reference under the error rule; bad sinks raise before anything is written."""

import pytest
import torch
from conftest import DEVICE

import flashcore
from flashcore.reference import attention_reference
from flashcore.validate import error_rule

DTYPES = [torch.float16, torch.bfloat16] if DEVICE == "cuda" else [torch.float16, torch.float32]

CASES = [  # (B, Hq, Hkv, Sq, Sk, D, causal, alignment, window, softcap)
    (1, 2, 2, 1, 1, 16, False, "top_left", None, None),
    (2, 4, 2, 65, 65, 32, True, "top_left", None, None),
    (1, 4, 1, 17, 113, 64, True, "bottom_right", None, None),
    (1, 2, 1, 40, 20, 32, True, "bottom_right", None, None),  # rows that see no key
    (1, 2, 2, 33, 47, 16, False, "top_left", None, 20.0),
    (1, 2, 2, 70, 70, 32, True, "top_left", 16, None),
]


def _inputs(case, dtype, seed):
    b, hq, hkv, sq, sk, d = case[:6]
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    sinks = torch.randn(hq, generator=gen) * 2  # some sinks dominate a row, some do not
    return [t.to(DEVICE, dtype) for t in (q, k, v)] + [sinks.to(DEVICE)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_with_sinks_passes_the_error_rule(case, dtype):
    q, k, v, sinks = _inputs(case, dtype, seed=sum(case[:6]))
    causal, alignment, window, softcap = case[6:]
    opts = dict(causal=causal, causal_alignment=alignment, window=window, softcap=softcap)
    out, lse = flashcore.attention(q, k, v, sinks=sinks, return_lse=True, **opts)
    ref, ref_lse = attention_reference(q, k, v, sinks=sinks, return_lse=True, **opts)
    same = attention_reference(q, k, v, sinks=sinks, compute_dtype=dtype, **opts)
    assert error_rule(out, ref, same).passed
    assert (lse.double() - ref_lse).abs().max() < 1e-4
    # The check can fail: with sinks that carry weight (a logit of 4 against scores of
    # order 1), the same call without them is wrong against this reference.
    heavy = torch.full_like(sinks, 4.0)
    ref = attention_reference(q, k, v, sinks=heavy, **opts)
    same = attention_reference(q, k, v, sinks=heavy, compute_dtype=dtype, **opts)
    assert error_rule(flashcore.attention(q, k, v, sinks=heavy, **opts), ref, same).passed
    assert not error_rule(flashcore.attention(q, k, v, **opts), ref, same).passed


def test_no_keys_returns_zeros_and_the_sink_as_lse():
    q = torch.randn(1, 2, 5, 16, device=DEVICE)
    empty = torch.randn(1, 2, 0, 16, device=DEVICE)
    sinks = torch.tensor([0.5, -1.0], device=DEVICE)
    out, lse = flashcore.attention(q, empty, empty, sinks=sinks, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(lse[0, :, 0].float().cpu(), sinks.cpu())


def _decode_with_sinks_reports(num_splits, dtype, seed):
    """The error rule per sequence of a decode with sinks (3 new rows, caches of 37 and 90)."""
    gen = torch.Generator().manual_seed(seed)
    b, hq, hkv, d, cap, sn = 2, 4, 2, 32, 100, 3
    kc, vc = (torch.randn(b, hkv, cap, d, generator=gen).to(DEVICE, dtype) for _ in range(2))
    q = torch.randn(b, hq, sn, d, generator=gen).to(DEVICE, dtype)
    sinks = (torch.randn(hq, generator=gen) * 2).to(DEVICE)
    lens = torch.tensor([37, 90], device=DEVICE)
    out = flashcore.attention_with_kvcache(q, kc, vc, lens, sinks=sinks, num_splits=num_splits)
    reports = []
    for i in range(b):
        n = int(lens[i])
        args = (q[i : i + 1], kc[i : i + 1, :, :n], vc[i : i + 1, :, :n])
        opts = dict(causal=True, causal_alignment="bottom_right", sinks=sinks)
        ref = attention_reference(*args, **opts)
        same = attention_reference(*args, compute_dtype=dtype, **opts)
        reports.append(error_rule(out[i : i + 1], ref, same))
    return reports


HALF_DTYPES = [t for t in DTYPES if t != torch.float32]


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_decode_with_sinks_passes_the_error_rule(num_splits, dtype):
    assert all(r.passed for r in _decode_with_sinks_reports(num_splits, dtype, 7 + num_splits))


DECODE_FP32_SEEDS = 20
DECODE_FP32_MAX_FAILED = 6  # of 40 sequences


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_with_sinks_float32_failure_rate(num_splits, record_property):
    """float32 (CPU only: the KV cache takes half precision on CUDA) over seeds 0-19: at most
    6 of the 40 sequences may fail the rule. A 3-row sample fails at some seeds under the
    interpreter, with or without sinks, at a rate that depends on the CPU's code path (the
    kernel's tile products against the baseline's; README, "The error rule"): seeds 0-99 on
    AVX2, 6 and 7 of 200 sequences at 1 and 3 splits (3.5%). At that rate more than 6 of 40
    fail with probability 0.06%; a sink lost or misplaced fails every sequence."""
    if DEVICE != "cpu":
        pytest.skip("float32 KV-cache attention runs on the CPU only")
    failed = [
        (seed, i, round(r.ratio, 3))
        for seed in range(DECODE_FP32_SEEDS)
        for i, r in enumerate(_decode_with_sinks_reports(num_splits, torch.float32, seed))
        if not r.passed
    ]
    rate = (
        f"float32 decode with sinks, {num_splits} split(s): {len(failed)} of "
        f"{2 * DECODE_FP32_SEEDS} sequences fail the rule (bound {DECODE_FP32_MAX_FAILED}); "
        f"(seed, sequence, ratio): {failed}"
    )
    record_property("measured", rate)
    assert len(failed) <= DECODE_FP32_MAX_FAILED, rate


@pytest.mark.parametrize(
    "sinks,exc,msg",
    [
        (lambda q: torch.zeros(3, device=q.device), ValueError, r"expected sinks of shape \(2,\)"),
        (lambda q: torch.zeros(1, 2, device=q.device), ValueError, "expected sinks of shape"),
        (lambda q: torch.zeros(2, dtype=torch.int32, device=q.device), TypeError, "float32"),
        (lambda q: [0.0, 0.0], TypeError, "expected sinks to be a tensor"),
    ],
)
def test_bad_sinks_raise_before_writing(sinks, exc, msg):
    # Half precision: KV-cache attention on CUDA takes fp16/bf16 only.
    q = torch.randn(1, 2, 8, 16, device=DEVICE, dtype=torch.float16)
    out = torch.full_like(q, 7.0)
    with pytest.raises(exc, match=msg):
        flashcore.attention(q, q, q, sinks=sinks(q), out=out)
    assert torch.equal(out, torch.full_like(q, 7.0))
    kc = torch.zeros(1, 2, 16, 16, device=DEVICE, dtype=torch.float16)
    before = kc.clone()
    new = torch.ones(1, 2, 1, 16, device=DEVICE, dtype=torch.float16)
    lens = torch.tensor([3], device=DEVICE)
    with pytest.raises(exc, match=msg):
        flashcore.attention_with_kvcache(
            q[:, :, :1], kc, kc.clone(), lens, new, new, sinks=sinks(q)
        )
    assert torch.equal(kc, before)  # the cache is untouched


def test_sinks_take_the_kernel_the_call_without_them_takes(monkeypatch):
    """Sinks run on both forward kernels (the Gluon one since it starts each row at the
    sink), so they never change which kernel serves a call; softcap still forces Triton.
    The Gluon kernel's own support test is stubbed to "yes", so that the dispatch table
    decides here as on a Hopper GPU, on any machine: the table sends D128 S4096 to Gluon."""
    import flashcore.dispatch as dispatch

    monkeypatch.setattr(dispatch._hopper, "supports", lambda q, k, v, window=None: True)
    monkeypatch.delenv("FLASHCORE_FORWARD_HOPPER", raising=False)
    sinks = torch.zeros(2)
    kernels = set()
    for d, s in ((64, 4096), (128, 512), (128, 4096), (256, 2048)):
        q = torch.empty(1, 2, s, d, dtype=torch.float16)
        for causal in (False, True):
            plain = dispatch.forward_kernel(q, q, q, causal=causal)
            assert dispatch.forward_kernel(q, q, q, causal=causal, sinks=sinks) == plain
            kernels.add(plain)
        assert dispatch.forward_kernel(q, q, q, causal=False, softcap=5.0, sinks=sinks) == "triton"
    assert kernels == {"gluon", "triton"}  # both kernels were asked about


# ------------------------------------------------------------------------------ gradients
GRAD_CASES = [  # (B, Hq, Hkv, Sq, Sk, D, causal, alignment, window)
    (1, 2, 1, 33, 47, 16, True, "bottom_right", None),
    (2, 4, 2, 40, 40, 32, False, "top_left", None),
    (1, 2, 2, 65, 65, 32, True, "top_left", 16),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=str)
def test_sink_and_input_gradients_pass_the_rule(case):
    """d sink_h = -sum over rows of P_sink * rowsum(dO * O): checked with q, k, v's gradients
    against float64 autograd of the reference, in float32 (on an H100 in float16 one of
    these cases measured the sinks' gradient at 2.1x PyTorch's float16 error: an open item).

    dq, dk, dv: the project's gradient rule (its floor counts the cancellation in dP - delta,
    u_fp32 times the sum of the terms' magnitudes; computed without the sinks, whose P is
    larger, so it is conservative). dsinks: the same construction. Each term P_sink * delta_i
    carries delta_i's rounding, u_fp32 * sum_d |dO_id O_id| (O is stored rounded), so the
    floor's magnitude is sum_i P_sink,i * sum_d |dO_id O_id| per head."""
    from flashcore.validate_backward import sinks_gradient_rule

    dtype = torch.float32
    q, k, v, sinks = _inputs(case, dtype, seed=3 + sum(case[:6]))
    causal, alignment, window = case[6:]
    opts = dict(causal=causal, causal_alignment=alignment, window=window)
    gen = torch.Generator().manual_seed(11 + sum(case[:6]))
    do = torch.randn(q.shape, generator=gen).to(device=q.device, dtype=q.dtype)
    reports = sinks_gradient_rule(q, k, v, sinks, do, **opts)
    assert all(reports[g].passed for g in ("dq", "dk", "dv", "dsinks")), reports
    # The check can fail: the sinks' gradient without its minus sign is caught.
    assert not reports["dsinks_sign_flipped"].passed


def test_gpt_oss_through_flashcore_matches_eager():
    """transformers' GptOss (random init, small config with sliding and full layers) with
    attn_implementation set to flashcore: fp32 logits and a training step's loss and
    gradients (sinks included) under the rule against eager in float64."""
    pytest.importorskip("transformers")
    from flashcore.studies.models import gpt_oss_check

    result = gpt_oss_check(DEVICE)
    assert result["sink_gradients"] > 0, result
    assert result["passed"], result
