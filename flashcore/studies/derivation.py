"""The steps from softmax to FlashAttention's tiled online softmax, as small torch functions.

notebooks/01_derivation.ipynb runs each one and shows the numbers; the Triton kernel in
``flashcore.kernels.forward`` is the last step compiled. Everything here works on one head,
``q: (Sq, D)``, ``k, v: (Sk, D)``, in whatever dtype the caller passes.
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634


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


def tiled_attention(
    q,
    k,
    v,
    *,
    block_n: int = 64,
    scale: float | None = None,
    rescale: bool = True,
    use_exp2: bool = True,
    acc_dtype=None,
    p_dtype=None,
):
    """FlashAttention-2's loop in torch: one pass over key blocks with a running max m, a
    running denominator l and an unnormalised accumulator, divided once at the end.

    rescale=False drops the exp(m_old - m_new) correction: the bug this derivation is about
    (correct only while the running max never changes). use_exp2 folds log2(e) into the
    scale as the kernel does. acc_dtype: accumulator dtype (default q's); p_dtype: dtype the
    probabilities are rounded to before p @ v (the kernel uses v's dtype).
    """
    acc_dtype = acc_dtype or q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    sm = scale * LOG2E if use_exp2 else scale
    expf = torch.exp2 if use_exp2 else torch.exp
    m = torch.full((q.shape[0],), -math.inf, dtype=acc_dtype)
    l = torch.zeros((q.shape[0],), dtype=acc_dtype)
    acc = torch.zeros((q.shape[0], v.shape[-1]), dtype=acc_dtype)
    for start in range(0, k.shape[0], block_n):
        kb, vb = k[start : start + block_n], v[start : start + block_n]
        s = (q.to(acc_dtype) @ kb.to(acc_dtype).T) * sm
        m_new = torch.maximum(m, s.amax(-1))
        p = expf(s - m_new[:, None])
        alpha = expf(m - m_new) if rescale else torch.ones_like(m)
        l = l * alpha + p.sum(-1)
        if p_dtype is not None:
            p = p.to(p_dtype)
        acc = (acc * alpha[:, None] + (p.to(vb.dtype) @ vb).to(acc_dtype)).to(acc_dtype)
        m = m_new
    return acc / l[:, None]


def accumulate_pv(p: torch.Tensor, v: torch.Tensor, *, block_n: int, acc_dtype) -> torch.Tensor:
    """sum over key blocks of p_blk @ v_blk with the running sum stored in ``acc_dtype``:
    isolates the accumulator's rounding error (fp16 vs fp32) from everything else."""
    acc = torch.zeros((p.shape[0], v.shape[-1]), dtype=acc_dtype)
    for start in range(0, p.shape[-1], block_n):
        part = p[:, start : start + block_n].double() @ v[start : start + block_n].double()
        acc = (acc.double() + part).to(acc_dtype)
    return acc
