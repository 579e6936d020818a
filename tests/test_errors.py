"""Bad input gets a clear PyTorch-style error before any Triton code runs."""

import pytest
import torch
from conftest import DEVICE

from flashcore import attention


def t(*shape, dtype=torch.float32, device=DEVICE):
    return torch.randn(*shape, device=device).to(dtype)


@pytest.mark.parametrize(
    "q,k,v,exc,msg",
    [
        (t(2, 16, 8), t(2, 16, 8), t(2, 16, 8), ValueError, "to be 4-D"),
        (
            t(1, 2, 16, 8),
            t(1, 2, 16, 8, dtype=torch.float16),
            t(1, 2, 16, 8),
            TypeError,
            "same dtype, got float32, float16, float32",
        ),
        (
            t(1, 2, 16, 8, dtype=torch.int32),
            t(1, 2, 16, 8, dtype=torch.int32),
            t(1, 2, 16, 8, dtype=torch.int32),
            TypeError,
            "float16, bfloat16 or float32",
        ),
        (
            t(1, 3, 16, 8),
            t(1, 2, 16, 8),
            t(1, 2, 16, 8),
            ValueError,
            "multiple of the number of key/value heads",
        ),
        (t(2, 2, 16, 8), t(1, 2, 16, 8), t(1, 2, 16, 8), ValueError, "same batch size"),
        (
            t(1, 2, 16, 8),
            t(1, 2, 16, 8),
            t(1, 2, 17, 8),
            ValueError,
            "k and v to have the same shape",
        ),
        (t(1, 2, 16, 8), t(1, 2, 16, 16), t(1, 2, 16, 16), ValueError, "same head_dim"),
        (
            t(1, 2, 4, 512),
            t(1, 2, 4, 512),
            t(1, 2, 4, 512),
            ValueError,
            "head_dim must be in [1, 256]",
        ),
        ("q", t(1, 2, 4, 8), t(1, 2, 4, 8), TypeError, "torch.Tensor"),
    ],
)
def test_bad_inputs_raise_clear_errors(q, k, v, exc, msg):
    with pytest.raises(exc, match=msg.replace("[", r"\[").replace("]", r"\]")):
        attention(q, k, v)


def test_bad_alignment_and_out():
    q = t(1, 2, 4, 8)
    with pytest.raises(ValueError, match="causal_alignment"):
        attention(q, q, q, causal=True, causal_alignment="center")
    with pytest.raises(ValueError, match="expected out to match q"):
        attention(q, q, q, out=t(1, 2, 5, 8))


def test_requires_grad_is_differentiable_not_refused():
    # flashcore.attention has a backward (tests/test_backward.py checks its gradients);
    # options without one raise instead of giving a wrong gradient.
    q = t(1, 2, 4, 8).requires_grad_()
    assert attention(q, q, q).requires_grad
    with pytest.raises(RuntimeError, match="out=.*autograd"):
        attention(q, q, q, out=torch.empty_like(q))
    with torch.no_grad():
        assert not attention(q, q, q).requires_grad


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU-only rules")
def test_cpu_bfloat16_is_refused():
    q = t(1, 2, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 is not supported on CPU"):
        attention(q, q, q)


@pytest.mark.gpu
def test_device_mismatch():
    with pytest.raises(ValueError, match="same device"):
        attention(
            t(1, 2, 4, 8, device="cuda"), t(1, 2, 4, 8, device="cpu"), t(1, 2, 4, 8, device="cuda")
        )


@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        (dict(causal=False, window=8), ValueError, "window requires causal=True"),
        (dict(causal=True, window=0), ValueError, "expected window >= 1"),
        (dict(causal=True, window=8.0), TypeError, "expected window to be an int"),
        (dict(causal=True, window=True), TypeError, "expected window to be an int"),
    ],
)
def test_bad_window_raises(kwargs, exc, msg):
    q = t(1, 1, 8, 16)
    with pytest.raises(exc, match=msg):
        attention(q, q, q, **kwargs)


# A negative scale is the case the kernels cannot take: they fold the scale into the row max
# as max(s) * scale, which is the max of the scaled scores only for scale >= 0. Before the
# check, attention(q, k, v, scale=-0.5) returned NaN on the interpreter in fp16 (unit-normal
# inputs, B1 H2 Sq200 Sk300 D64) where float64 gives a finite answer.
BAD_SCALES = [
    (-0.5, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    ("0.1", TypeError),
    (True, TypeError),
]


@pytest.mark.parametrize("scale,exc", BAD_SCALES, ids=lambda x: repr(x))
def test_bad_scale_raises_on_every_entry_point(scale, exc):
    from flashcore import attention_varlen, attention_with_kvcache, quantize_fp8
    from flashcore.interface import fp8_attention

    q = t(1, 2, 16, 8, dtype=torch.float16)
    with pytest.raises(exc, match="scale"):
        attention(q, q, q, scale=scale)
    # A signature the launch cache holds (the same call with a good scale first) still checks
    # (on CUDA, where the cache serves repeats; the CPU run cannot fail on this line).
    attention(q, q, q, scale=0.3)
    with pytest.raises(exc, match="scale"):
        attention(q, q, q, scale=scale)
    packed = t(16, 2, 8, dtype=torch.float16)
    cu = torch.tensor([0, 7, 16], dtype=torch.int32, device=DEVICE)
    with pytest.raises(exc, match="scale"):
        attention_varlen(packed, packed, packed, cu, cu, 9, 9, scale=scale)
    # The KV cache: the error comes before the append, checked lengths or not (unchecked
    # ones take a cached route on CUDA).
    k_cache, v_cache = t(1, 2, 32, 8, dtype=torch.float16), t(1, 2, 32, 8, dtype=torch.float16)
    before = (k_cache.clone(), v_cache.clone())
    lens = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    one, new = t(1, 2, 1, 8, dtype=torch.float16), t(1, 2, 1, 8, dtype=torch.float16)
    for check_lengths in (True, False):
        with pytest.raises(exc, match="scale"):
            attention_with_kvcache(
                one, k_cache, v_cache, lens, new, new, scale=scale, check_lengths=check_lengths
            )
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])
    # The full-cache decode entry (the torch op's and the SDPA door's decode route)
    from flashcore.kernels.decode import attend_full_cache

    with pytest.raises(exc, match="scale"):
        attend_full_cache(one, k_cache, v_cache, scale=scale)
    q32 = t(1, 2, 16, 32, dtype=torch.float16)  # (fp8's head dims start at 32)
    x = quantize_fp8(q32, q32, q32, "naive")
    with pytest.raises(exc, match="scale"):
        fp8_attention(x, scale=scale)
    if exc is ValueError:  # (the op's schema refuses a string or a bool before flashcore runs)
        from flashcore.ops import attention_op

        with pytest.raises(exc, match="scale"):
            attention_op(q, q, q, False, False, scale)


def test_scale_zero_is_uniform_attention():
    """scale = 0, the boundary the check keeps: every key weighs the same."""
    q, k, v = (t(1, 2, 16, 8) for _ in range(3))
    out = attention(q, k, v, scale=0.0)
    assert torch.allclose(out, v.mean(dim=2, keepdim=True).expand_as(out), atol=1e-5)


def test_sdpa_door_leaves_a_bad_scale_to_pytorch():
    from flashcore.sdpa_backend import unsupported_reason

    q = t(1, 2, 16, 8, dtype=torch.float16)
    assert unsupported_reason(q, q, q, 0.0, False, scale=0.5) is None
    assert "scale" in unsupported_reason(q, q, q, 0.0, False, scale=-0.5)
