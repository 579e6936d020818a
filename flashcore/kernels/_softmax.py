"""Softmax pieces shared by the Triton kernels (forward, varlen, decode, fp8, backward).

* ``LOG2E``: the kernels compute exp(x) as exp2(x * log2 e); the softmax scale is folded
  into that one multiply (``qk_scale = scale * LOG2E``).
* ``online_softmax_tile``: one key tile of FlashAttention's online softmax.
* ``tanh`` and ``kernel_scales``: Gemma 2's logit soft-capping, c * tanh(s / c).
* ``lse_dtype``: the log-sum-exp's dtype per input dtype (why float64 for float32).

The Gluon kernel (forward_hopper.py) cannot call these: a ``@triton.jit`` function is not
callable from ``@gluon.jit`` code, whose tensors carry explicit layouts. It restates the
same arithmetic in Gluon (its ``_softmax_step``) and shares the constant.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # 1/ln(2): exp(x) == exp2(x * LOG2E)


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The log-sum-exp's dtype for inputs of ``dtype``: float32 for float16/bfloat16, float64
    for float32. The backward rebuilds P = exp(s - lse); an fp32 lse (rounding u * |lse|, a
    few units at |lse| ~ 10) makes every P of a row wrong by several fp32 ulps, more than
    PyTorch's fp32 softmax, and fp32 gradients then fail the error rule at some seeds."""
    return torch.float64 if dtype == torch.float32 else torch.float32


@triton.jit
def online_softmax_tile(s, m_i, l_i, qk_scale, PRESCALED: tl.constexpr):
    """One key tile of the online softmax: the new running max, p = exp2(s - max), the factor
    alpha that rescales what was accumulated before, and the new running denominator.

    PRESCALED: s is already multiplied by qk_scale (softmax scale * log2 e) and holds -inf at
    invisible keys (the masked tiles). Otherwise every score is visible and the scale is
    folded into the max and into one fused multiply-add, s * scale - m, per element.
    """
    if PRESCALED:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf; subtracting 0 instead keeps
        # exp2(-inf - -inf) = NaN out of p and alpha (both become exactly 0).
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_use[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_use = m_new
        p = tl.math.exp2(s * qk_scale - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def tanh(x):
    """tanh from exp2 alone (the interpreter has no libdevice), in x's dtype. (1 - e) / (1 + e)
    with e = exp(-2|x|) loses relative accuracy near 0, where the odd Taylor series up to x^9
    is exact to fp32 rounding (|x| < 0.2: the next term is below 2^-26 relative). The
    exponent's constant is a tensor of x's dtype: a Python float literal is typed fp32."""
    ax = tl.abs(x)
    two_log2e = tl.full(x.shape, 2.885390081777927, x.dtype)
    e = tl.math.exp2(-ax * two_log2e)  # exp(-2|x|) = 2^(-2|x| log2 e)
    far = (1.0 - e) / (1.0 + e)
    x2 = ax * ax
    near = ax * (
        1.0
        + x2
        * (
            -0.3333333333333333
            + x2 * (0.13333333333333333 + x2 * (-0.05396825396825397 + x2 * 0.021869488536155203))
        )
    )
    t = tl.where(ax < 0.2, near, far)
    return tl.where(x < 0, -t, t)


@triton.jit
def softcap_tanh(x, PRECISE: tl.constexpr):
    """tanh of fp32 scores for the softcap. PRECISE (float32 inputs): computed in fp64 and
    rounded once, so the capped score carries one fp32 rounding, as PyTorch's fp32 tanh
    does; the fp32 formula's few ulps made fp32 softcap calls fail the error rule at a few
    percent of seeds. Half-precision inputs keep the fp32 formula (their rounding dwarfs it)."""
    if PRECISE:
        return tanh(x.to(tl.float64)).to(tl.float32)
    else:
        return tanh(x)


def kernel_scales(scale: float, softcap) -> tuple[float, float]:
    """(qk_scale, softcap_scale) the kernel multiplies by: log2-unit scores are
    q.k * scale * log2 e, or tanh(q.k * scale / c) * c * log2 e with softcap c."""
    if softcap is None:
        return scale * LOG2E, 0.0
    return softcap * LOG2E, scale / softcap
