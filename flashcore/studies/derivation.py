"""The steps from softmax to FlashAttention's tiled online softmax, as small torch functions.

notebooks/01_derivation.ipynb runs each one and shows the numbers; the Triton kernel in
``flashcore.kernels.forward`` is the last step compiled. Everything here works on one head,
``q: (Sq, D)``, ``k, v: (Sk, D)``, in whatever dtype the caller passes.
"""

from __future__ import annotations

import math

import torch

# FlashAttention-2's loop in torch lives beside the float64 reference (the validation's planted
# bugs run it too); notebook 01 calls it as drv.tiled_attention.
from ..kernels._softmax import LOG2E  # noqa: F401  (notebook 01: the constant the kernels fold in)
from ..reference import tiled_attention  # noqa: F401


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """exp(x) / sum(exp(x)) as written: overflows once x exceeds log(max float)."""
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def safe_softmax(x: torch.Tensor) -> torch.Tensor:
    """Subtract the row max first: every exponent is <= 0, so nothing overflows."""
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def merge_stats(m1, l1, m2, l2):
    """Combine (max, sum of exp(x - max)) of two blocks: the rescaling identity
    l = l1 * exp(m1 - m) + l2 * exp(m2 - m), m = max(m1, m2)."""
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def online_softmax_stats(x: torch.Tensor, block: int):
    """Running (max, denominator) over blocks of the last dim, one pass, O(1) state.
    Returns the history: lists of m and l after each block."""
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    ms, ls = [], []
    for start in range(0, x.shape[-1], block):
        blk = x[..., start : start + block]
        m, l = merge_stats(m, l, blk.amax(-1), torch.exp(blk - blk.amax(-1, keepdim=True)).sum(-1))
        ms.append(m.clone())
        ls.append(l.clone())
    return ms, ls


def accumulate_pv(p: torch.Tensor, v: torch.Tensor, *, block_n: int, acc_dtype) -> torch.Tensor:
    """sum over key blocks of p_blk @ v_blk with the running sum stored in ``acc_dtype``:
    isolates the accumulator's rounding error (fp16 vs fp32) from everything else."""
    acc = torch.zeros((p.shape[0], v.shape[-1]), dtype=acc_dtype)
    for start in range(0, p.shape[-1], block_n):
        part = p[:, start : start + block_n].double() @ v[start : start + block_n].double()
        acc = (acc.double() + part).to(acc_dtype)
    return acc
