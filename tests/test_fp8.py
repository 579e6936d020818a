"""FP8 attention: quantizers, the kernel against its own float64 reference (the p-rounding
bound), and a planted wrong scale that the bound must catch."""

import math

import pytest
import torch
from conftest import DEVICE

from flashcore.interface import fp8_attention
from flashcore.kernels.fp8 import VARIANTS, dequantized, quantize, random_hadamard
from flashcore.studies import fp8_study

IN_DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16


def _inputs(dist, b, hq, hkv, s, d, seed):
    q, k, v = fp8_study.make_qkv(dist, b, hq, hkv, s, d, seed=seed, device=DEVICE)
    return q.to(IN_DTYPE), k.to(IN_DTYPE), v.to(IN_DTYPE)


def _bound_ratio(x, causal):
    out = fp8_attention(x, causal=causal)
    own, bound = fp8_study.own_reference_bound(x, causal=causal)
    assert not torch.isnan(out).any()
    return fp8_study.bound_ratio(out, own, bound)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "b,hq,hkv,s,d", [(1, 2, 2, 1, 32), (2, 4, 2, 17, 64), (1, 2, 1, 200, 128), (1, 1, 1, 129, 256)]
)
def test_kernel_within_own_reference_bound(variant, causal, b, hq, hkv, s, d):
    x = quantize(*_inputs("outlier", b, hq, hkv, s, d, seed=s + d), variant)
    assert _bound_ratio(x, causal) <= 1.0


def test_wrong_block_scale_breaks_the_bound():
    # A kernel that applied the wrong k block scale would compute this: the check must fail.
    x = quantize(*_inputs("normal", 1, 2, 2, 256, 64, seed=3), "per_block")
    assert _bound_ratio(x, False) <= 1.0
    own, bound = fp8_study.own_reference_bound(x, causal=False)
    x.k_scale[:, :, 1] *= 1.25  # the kernel now sees different keys than the reference
    out = fp8_attention(x, causal=False)
    assert fp8_study.bound_ratio(out, own, bound) > 1.0


@pytest.mark.parametrize("variant", VARIANTS)
def test_dequantized_inputs_within_e4m3_rounding(variant):
    q, k, v = _inputs("outlier", 1, 2, 1, 300, 64, seed=9)
    x = quantize(q, k, v, variant)
    qd, kd, vd = dequantized(x)
    if x.rotation is not None:  # the kernel sees rotated q and k
        rot = x.rotation.double()
        q, k = q.double() @ rot, k.double() @ rot
    for orig, deq, scale in ((q, qd, x.q_scale), (k, kd, x.k_scale), (v, vd, x.v_scale)):
        # relative 2^-4 in the normal range; half the subnormal step (2^-10 * scale) below it
        slack = 2.0**-10 * float(scale.max())
        assert ((deq - orig.double()).abs() <= 2.0**-4 * orig.double().abs() + slack).all()


def test_hadamard_is_orthogonal_and_keeps_scores():
    r = random_hadamard(64, seed=1).double()
    assert torch.allclose(r @ r.T, torch.eye(64, dtype=torch.float64), atol=1e-6)
    q, k = torch.randn(10, 64, dtype=torch.float64), torch.randn(12, 64, dtype=torch.float64)
    assert torch.allclose((q @ r) @ (k @ r).T, q @ k.T, atol=1e-5)
    assert not torch.equal(random_hadamard(64, seed=1), random_hadamard(64, seed=2))


def test_hadamard_spreads_a_large_channel():
    # incoherent processing: one channel of size 100 becomes 64 entries of size 100/8.
    x = torch.zeros(1, 64)
    x[0, 5] = 100.0
    rotated = x @ random_hadamard(64, seed=0)
    assert torch.allclose(rotated.abs(), torch.full_like(rotated, 100 / math.sqrt(64)), rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        (dict(variant="int8"), ValueError, "unknown fp8 variant"),
        (dict(d=48), ValueError, "head_dim in"),
        (dict(d=16), ValueError, "head_dim in"),
    ],
)
def test_bad_fp8_inputs(kwargs, exc, msg):
    d = kwargs.get("d", 64)
    q = torch.randn(1, 1, 8, d, device=DEVICE).to(IN_DTYPE)
    with pytest.raises(exc, match=msg):
        quantize(q, q, q, kwargs.get("variant", "per_block"))


def test_fp8_attention_wants_quantized_inputs():
    q = torch.randn(1, 1, 8, 64, device=DEVICE)
    with pytest.raises(TypeError, match="Fp8Inputs"):
        fp8_attention(q)


def test_error_rows_report_each_variant():
    rows = fp8_study.error_rows(
        "normal", heads=1, seqlen=64, head_dim=64, seeds=(0,), device=DEVICE
    )
    impls = [r["impl"] for r in rows]
    assert impls == ["float16"] + [f"fp8_{v}" for v in VARIANTS]
    fp8 = [r for r in rows if r["impl"].startswith("fp8")]
    assert all(r["own_bound_ratio"] <= 1 for r in fp8)
    # fp8 is measurably worse than fp16 on the same inputs (the study can tell them apart)
    assert all(r["rmse"] > 10 * rows[0]["rmse"] for r in fp8)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dist", fp8_study.DISTRIBUTIONS)
def test_gpu_kernel_within_own_reference_bound(variant, causal, dist):
    x = quantize(*_inputs(dist, 2, 8, 2, 1500, 128, seed=5), variant)
    assert _bound_ratio(x, causal) <= 1.0


# The Gluon forward's FP8 mode (kernels/forward_hopper.py, FLASHCORE_FP8_HOPPER=always):
# the same inputs and the same bound as the Triton kernel above, and proof it ran.
HOPPER_SHAPES = [  # (b, hq, hkv, s, d): one row, ragged, past one tile, GQA, every head dim
    (1, 2, 2, 1, 128),
    (2, 4, 2, 200, 64),
    (1, 2, 1, 129, 128),
    (2, 8, 2, 1500, 128),
    (1, 2, 2, 383, 256),
    (1, 4, 4, 1024, 64),
]


def _hopper_fp8(monkeypatch):
    from flashcore.kernels import forward_hopper

    monkeypatch.setenv("FLASHCORE_FP8_HOPPER", "always")
    calls = []
    launch = forward_hopper.attention_hopper_fp8

    def counted(*args, **kwargs):
        calls.append(1)
        return launch(*args, **kwargs)

    monkeypatch.setattr(forward_hopper, "attention_hopper_fp8", counted)
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HOPPER_SHAPES)
def test_gpu_hopper_fp8_within_own_reference_bound(monkeypatch, variant, causal, shape):
    calls = _hopper_fp8(monkeypatch)
    b, hq, hkv, s, d = shape
    x = quantize(*_inputs("outlier", b, hq, hkv, s, d, seed=s + d), variant)
    assert _bound_ratio(x, causal) <= 1.0
    assert calls, "the Gluon FP8 mode did not run"


@pytest.mark.gpu
def test_gpu_hopper_fp8_wrong_block_scale_breaks_the_bound(monkeypatch):
    calls = _hopper_fp8(monkeypatch)
    x = quantize(*_inputs("normal", 1, 2, 2, 256, 128, seed=3), "per_block")
    assert _bound_ratio(x, False) <= 1.0
    own, bound = fp8_study.own_reference_bound(x, causal=False)
    x.k_scale[:, :, 1] *= 1.25
    assert fp8_study.bound_ratio(fp8_attention(x, causal=False), own, bound) > 1.0
    assert len(calls) == 2


@pytest.mark.gpu
def test_gpu_hopper_fp8_is_deterministic(monkeypatch):
    _hopper_fp8(monkeypatch)
    x = quantize(*_inputs("outlier", 2, 8, 2, 1500, 128, seed=1), "per_block_hadamard")
    first = fp8_attention(x, causal=True)
    assert all(torch.equal(first, fp8_attention(x, causal=True)) for _ in range(3))


# The fp8 dispatch (flashcore.dispatch.fp8_kernel): its table, its override, and that a call
# with an explicit config stays on the Triton kernel. CPU: supports_fp8 is stubbed true.
def _x_of(seqlen, head_dim):
    return quantize(*_inputs("normal", 1, 2, 2, seqlen, head_dim, seed=0), "per_block")


@pytest.mark.parametrize(
    "seqlen, head_dim, causal, expected",
    [
        (4096, 128, False, "gluon"),
        (4096, 256, True, "gluon"),
        (4095, 128, False, "triton"),  # shorter than the table's threshold
        (4096, 64, False, "triton"),  # D64: the Triton kernel was measured faster
    ],
)
def test_fp8_dispatch_table(monkeypatch, seqlen, head_dim, causal, expected):
    from flashcore import dispatch

    monkeypatch.setattr(dispatch._hopper, "supports_fp8", lambda x: True)
    monkeypatch.delenv("FLASHCORE_FP8_HOPPER", raising=False)
    assert dispatch.fp8_kernel(_x_of(seqlen, head_dim), causal=causal) == expected


def test_fp8_dispatch_override_and_unsupported(monkeypatch):
    from flashcore import dispatch

    x = _x_of(256, 64)
    monkeypatch.setenv("FLASHCORE_FP8_HOPPER", "always")
    assert dispatch.fp8_kernel(x, causal=False) == "triton"  # CPU: the FP8 mode cannot run
    monkeypatch.setattr(dispatch._hopper, "supports_fp8", lambda x: True)
    assert dispatch.fp8_kernel(x, causal=False) == "gluon"
    monkeypatch.setenv("FLASHCORE_FP8_HOPPER", "never")
    assert dispatch.fp8_kernel(_x_of(4096, 128), causal=False) == "triton"
    monkeypatch.setenv("FLASHCORE_FP8_HOPPER", "sometimes")
    with pytest.raises(ValueError, match="FLASHCORE_FP8_HOPPER"):
        dispatch.fp8_kernel(x, causal=False)


@pytest.mark.gpu
def test_gpu_fp8_default_dispatch_runs_the_gluon_mode_where_the_table_says(monkeypatch):
    from flashcore.kernels import forward_hopper

    monkeypatch.delenv("FLASHCORE_FP8_HOPPER", raising=False)
    calls = []
    launch = forward_hopper.attention_hopper_fp8
    monkeypatch.setattr(
        forward_hopper, "attention_hopper_fp8", lambda *a, **k: calls.append(1) or launch(*a, **k)
    )
    x = quantize(*_inputs("outlier", 1, 4, 2, 4096, 128, seed=7), "per_block_hadamard")
    assert _bound_ratio(x, True) <= 1.0
    assert calls == [1]
    calls.clear()
    fp8_attention(x, causal=True, config=dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3))
    assert calls == []  # an explicit config is the Triton kernel's
