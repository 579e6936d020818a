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
