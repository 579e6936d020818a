"""Variable-length attention: sequences of different lengths in one launch, no padding
computed and no dense mask.

    flashcore.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)

(in flashcore/interface.py, which checks its arguments and calls ``attention_varlen_into``
here) takes FlashAttention's ``flash_attn_varlen_func`` layout: the sequences are packed along
one token dimension, q ``(total_q, Hq, D)``, k/v ``(total_k, Hkv, D)``, and sequence b is
rows ``cu_seqlens[b]:cu_seqlens[b + 1]``. ``attention_ranges`` does the same for a padded
``(B, H, S, D)`` batch whose valid tokens form one contiguous range per sequence (left or
right padding), which is how the transformers integration runs padded batches.

Both run the forward kernel (``forward._attn_fwd_kernel``) in its VARLEN mode: each
program loads its sequence's start and end, offsets its base pointers, and runs the same
key-tile loop (``_attend_key_tiles``) with that sequence's lengths; programs past the end
of a shorter sequence attend to nothing. The grid is sized by the longest query length.
Causal alignment is per sequence: top-left (query i sees keys j <= i) or bottom-right
(query i sees keys j <= i + len_k - len_q, FlashAttention's varlen convention).

Gradients: ``attention_varlen`` on inputs that require grad runs an autograd Function
(flashcore/interface.py) that saves the output and the log-sum-exp and calls
``backward.attention_varlen_backward`` (the backward kernels' VARLEN mode). The lse is in
the packed layout ``(Hq, total_q)`` (FlashAttention's varlen ``softmax_lse``): row i of
sequence b, head h at ``[h, cu_seqlens_q[b] + i]``; O(total) memory whatever the spread of
lengths, where a padded ``(B, Hq, max_seqlen_q)`` one grows with B * max_seqlen_q.
``attention_varlen_lse`` computes it in a pass of its own (q.k only, no V): the forward
kernel's STORE_LSE addresses ``batch_head * seqlen_q + row`` after VARLEN has replaced
seqlen_q by the sequence's own length, so its varlen lse would overlap between sequences;
until the forward kernel stores a varlen lse itself, this pass costs one more q.k product
per visible tile pair in the forward of a differentiable call (none without grad).

Not supported: return_lse from ``attention_varlen``, attention masks, dropout (raise).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._checks import (
    _dtype_name,
    check_attention_inputs,
    check_softcap,
    check_window,
    on_interpreter,
)
from ._mask import key_phases, visible
from ._softmax import kernel_scales, lse_dtype, online_softmax_tile, tanh
from .forward import cached_launch, launch_forward


def check_cu_seqlens(name, cu, device, total, max_seqlen, check_lengths):
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 1:
        got = tuple(cu.shape) if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise ValueError(f"expected {name} to be a 1-D tensor of batch + 1 offsets, got {got}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"expected {name} to be int32 or int64, got {_dtype_name(cu)}")
    if cu.device != device:
        raise ValueError(f"expected {name} on {device}, got {cu.device}")
    if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int) or max_seqlen < 0:
        raise ValueError(f"expected max_seqlen for {name} to be an int >= 0, got {max_seqlen!r}")
    if check_lengths:
        lengths = (cu[1:] - cu[:-1]).cpu()
        first, last = int(cu[0]), int(cu[-1])
        longest = int(lengths.max()) if lengths.numel() else 0
        if first != 0 or last != total or bool((lengths < 0).any()) or longest > max_seqlen:
            raise ValueError(
                f"expected {name} to rise from 0 to {total} (the packed length) with no step above "
                f"max_seqlen={max_seqlen}, got {cu.tolist() if cu.numel() <= 16 else 'first ' + str(first) + ', last ' + str(last)}"
                f" (longest sequence {longest})"
            )


def attention_varlen_into(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, *, out=None, return_lse=False, **options
):
    """``flashcore.attention_varlen`` without autograd, its offsets already checked
    (``check_cu_seqlens``): packed q ``(total_q, Hq, D)``, k/v ``(total_k, Hkv, D)``, options
    causal, causal_alignment, window, softcap, scale. Returns out (allocated if None), or
    ``(out, lse)`` with return_lse, lse packed ``(Hq, total_q)`` (``attention_varlen_lse``)."""
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif (
        not isinstance(out, torch.Tensor)
        or out.shape != q.shape
        or out.dtype != q.dtype
        or out.device != q.device
    ):
        raise ValueError(f"expected out to match q (shape {tuple(q.shape)}, {q.dtype}, {q.device})")
    batch = cu_seqlens_q.shape[0] - 1
    if batch > 0 and q.shape[0] > 0:
        # (total, H, D) -> (B, H, total, D) with batch stride 0: sequence b is addressed by
        # its offsets alone.
        qv, kv, vv, ov = (
            t.permute(1, 0, 2).unsqueeze(0).expand(batch, -1, -1, -1) for t in (q, k, v, out)
        )
        seqs = (cu_seqlens_q[:-1], cu_seqlens_q[1:], cu_seqlens_k[:-1], cu_seqlens_k[1:])
        attention_ranges_into(qv, kv, vv, ov, seqs, max_seqlen_q, **options)
    if not return_lse:
        return out
    # After attention_ranges_into's checks, which the lse pass trusts.
    return out, attention_varlen_lse(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, **options)


def attention_ranges(
    q,
    k,
    v,
    q_starts,
    q_ends,
    k_starts,
    k_ends,
    max_seqlen_q,
    *,
    causal=False,
    causal_alignment="bottom_right",
    window=None,
    softcap=None,
    scale=None,
):
    """Attention over a padded ``(B, H, S, D)`` batch whose valid queries of sequence b are
    positions ``[q_starts[b], q_ends[b])`` and valid keys ``[k_starts[b], k_ends[b])`` (one
    contiguous range each: left or right padding). Causal alignment, window, softcap as
    ``attention_varlen``. Rows outside a sequence's query range are zeros. ``(B,)`` int32
    or int64 offsets on q's device; max_seqlen_q >= every q_ends - q_starts (not checked)."""
    _check_ranges(q, q_starts, q_ends, k_starts, k_ends)
    out = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] and max_seqlen_q:
        attention_ranges_into(
            q,
            k,
            v,
            out,
            (q_starts, q_ends, k_starts, k_ends),
            max_seqlen_q,
            causal=causal,
            causal_alignment=causal_alignment,
            window=window,
            softcap=softcap,
            scale=scale,
        )
    return out


def _check_ranges(q, *ranges):
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError("expected q, k, v to be 4-D (batch, heads, seq_len, head_dim)")
    for t in ranges:
        if (
            not isinstance(t, torch.Tensor)
            or t.shape != (q.shape[0],)
            or t.dtype not in (torch.int32, torch.int64)
            or t.device != q.device
        ):
            raise ValueError(
                f"expected per-sequence offsets of shape ({q.shape[0]},), int32/int64 on {q.device}"
            )


def attention_ranges_into(
    q, k, v, out, seqs, max_seqlen_q, *, causal, causal_alignment, window, softcap, scale
):
    """Launch the forward kernel in varlen mode on (B, H, S, D) views; out is written at
    every valid query row (its other rows are left as they are)."""
    key, hit = cached_launch(
        q,
        k,
        v,
        out,
        causal=causal,
        causal_alignment=causal_alignment,
        window=window,
        softcap=softcap,
        scale=scale,
        return_lse=False,
        seqs=seqs,
        max_seqlen_q=max_seqlen_q,
    )
    if hit is not None:
        return
    check_attention_inputs(q, k, v, max_head_dim=256)
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError(
            f"causal_alignment must be 'top_left' or 'bottom_right', got {causal_alignment!r}"
        )
    check_window(window, causal)
    check_softcap(softcap)
    if out.numel() == 0 or max_seqlen_q == 0:
        return
    launch_forward(
        q,
        k,
        v,
        out,
        out,
        seqs=seqs,
        max_seqlen_q=max_seqlen_q,
        causal=causal,
        bottom_right=causal_alignment == "bottom_right",
        window=window,
        softcap=softcap,
        scale=scale,
        return_lse=False,
        config=None,
        key=key,
    )


# ------------------------------------------------------------------ varlen log-sum-exp


@triton.jit
def _lse_key_tiles(
    m_i,
    l_i,
    q,
    k_base,
    stride_kn,
    offs_m,
    offs_n,
    offs_d,
    key_lo,
    key_hi,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    qk_scale,
    softcap_scale,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    APPLY_MASK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """The forward's running max and denominator over key tiles [key_lo, key_hi), the
    same score arithmetic as ``forward._attend_key_tiles`` without the value product."""
    d_mask = offs_d[None, :] < HEAD_DIM
    for start_n in range(key_lo, key_hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(
            k_base + cols[:, None].to(tl.int64) * stride_kn + offs_d[None, :],
            mask=(cols[:, None] < seqlen_k) & d_mask,
            other=0.0,
        )
        if FP32_IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        if SOFTCAP:
            s = tanh(s * softcap_scale)
        if APPLY_MASK:
            mask = visible(
                offs_m[:, None],
                cols[None, :],
                seqlen_q,
                seqlen_k,
                causal_offset,
                window,
                IS_CAUSAL=IS_CAUSAL,
                HAS_WINDOW=HAS_WINDOW,
            )
            s = tl.where(mask, s * qk_scale, float("-inf"))
        _, _, m_i, l_i = online_softmax_tile(s, m_i, l_i, qk_scale, APPLY_MASK)
    return m_i, l_i


@triton.jit(
    do_not_specialize=["num_q_heads", "gqa_group_size", "max_seqlen_q", "window", "total_q"]
)
def _varlen_lse_kernel(
    Q,
    K,
    Lse,
    SeqStartsQ,
    SeqEndsQ,
    SeqStartsK,
    SeqEndsK,
    stride_qm,
    stride_qh,
    stride_kn,
    stride_kh,
    total_q,
    num_q_heads,
    gqa_group_size,
    max_seqlen_q,
    window,
    qk_scale,
    softcap_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BOTTOM_RIGHT: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """lse[h, SeqStartsQ[b] + i] of every query row of every sequence: one program per
    (query tile, sequence, query head), the forward's grid; tiles past a shorter
    sequence's end store nothing."""
    num_m_tiles = tl.cdiv(max_seqlen_q, BLOCK_M)
    pid = tl.program_id(0)
    tile_m = pid % num_m_tiles
    batch_head = pid // num_m_tiles
    batch = batch_head // num_q_heads
    q_head = batch_head % num_q_heads
    kv_head = q_head // gqa_group_size
    q_first = tl.load(SeqStartsQ + batch).to(tl.int32)
    k_first = tl.load(SeqStartsK + batch).to(tl.int32)
    seqlen_q = tl.load(SeqEndsQ + batch).to(tl.int32) - q_first
    seqlen_k = tl.load(SeqEndsK + batch).to(tl.int32) - k_first
    if BOTTOM_RIGHT:
        causal_offset = seqlen_k - seqlen_q
    else:
        causal_offset = 0

    tile_start = tile_m * BLOCK_M
    offs_m = tile_start + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    row_in = offs_m < seqlen_q
    q_base = Q + q_head.to(tl.int64) * stride_qh + q_first.to(tl.int64) * stride_qm
    q = tl.load(
        q_base + offs_m[:, None].to(tl.int64) * stride_qm + offs_d[None, :],
        mask=row_in[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    k_base = K + kv_head.to(tl.int64) * stride_kh + k_first.to(tl.int64) * stride_kn

    key_start, lower_end, full_start, unmasked_end, key_end = key_phases(
        tile_start,
        seqlen_k,
        causal_offset,
        window,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=HAS_WINDOW,
    )
    past_end = tile_start >= seqlen_q  # a tile past its sequence's end: no key, no store
    lower_end = tl.where(past_end, key_start, lower_end)
    unmasked_end = tl.where(past_end, full_start, unmasked_end)
    key_end = tl.where(past_end, unmasked_end, key_end)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if HAS_WINDOW:
        m_i, l_i = _lse_key_tiles(
            m_i, l_i, q, k_base, stride_kn, offs_m, offs_n, offs_d, key_start, lower_end,
            seqlen_q, seqlen_k, causal_offset, window, qk_scale, softcap_scale,
            BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, APPLY_MASK=True, IS_CAUSAL=IS_CAUSAL,
            HAS_WINDOW=True, FP32_IEEE=FP32_IEEE, SOFTCAP=SOFTCAP,
        )  # fmt: skip
    m_i, l_i = _lse_key_tiles(
        m_i, l_i, q, k_base, stride_kn, offs_m, offs_n, offs_d, full_start, unmasked_end,
        seqlen_q, seqlen_k, causal_offset, window, qk_scale, softcap_scale,
        BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, APPLY_MASK=False, IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=False, FP32_IEEE=FP32_IEEE, SOFTCAP=SOFTCAP,
    )  # fmt: skip
    m_i, l_i = _lse_key_tiles(
        m_i, l_i, q, k_base, stride_kn, offs_m, offs_n, offs_d, unmasked_end, key_end,
        seqlen_q, seqlen_k, causal_offset, window, qk_scale, softcap_scale,
        BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, APPLY_MASK=True, IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=HAS_WINDOW, FP32_IEEE=FP32_IEEE, SOFTCAP=SOFTCAP,
    )  # fmt: skip

    # As the forward kernel's STORE_LSE: natural log, -inf for rows that see no key, the
    # sum m + log2 l in fp64 for float32 inputs (an fp64 Lse, _softmax.lse_dtype).
    sees_nothing = l_i == 0.0
    log2_l = tl.math.log2(tl.where(sees_nothing, 1.0, l_i))
    if Lse.dtype.element_ty == tl.float64:
        log2e = tl.full([BLOCK_M], 1.4426950408889634, tl.float64)
        lse = (m_i.to(tl.float64) + log2_l.to(tl.float64)) / log2e
    else:
        lse = (m_i + log2_l) / 1.4426950408889634
    lse = tl.where(sees_nothing, float("-inf"), lse)
    lse_ptrs = Lse + q_head.to(tl.int64) * total_q + q_first.to(tl.int64) + offs_m
    tl.store(lse_ptrs, lse, mask=row_in)


def attention_varlen_lse(
    q,
    k,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    *,
    causal,
    causal_alignment,
    window,
    softcap,
    scale,
):
    """The natural-log log-sum-exp of ``attention_varlen``'s scaled (and capped) scores in
    the packed layout ``(Hq, total_q)``: ``lse[h, cu_seqlens_q[b] + i]`` for row i of
    sequence b; -inf for rows that see no key; float32 (float64 for float32 inputs). q
    ``(total_q, Hq, D)``, k ``(total_k, Hkv, D)`` and the options as validated by
    ``attention_varlen``; the backward rebuilds P from it."""
    total_q, num_q_heads, head_dim = q.shape
    lse = torch.empty((num_q_heads, total_q), dtype=lse_dtype(q.dtype), device=q.device)
    batch = cu_seqlens_q.shape[0] - 1
    if batch <= 0 or total_q == 0 or max_seqlen_q == 0:
        return lse.fill_(float("-inf"))
    q, k = (t if t.stride(2) == 1 else t.contiguous() for t in (q, k))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    qk_scale, softcap_scale = kernel_scales(scale, softcap)
    head_dim_padded = max(16, triton.next_power_of_2(head_dim))
    if on_interpreter(q):
        block_m, block_n, warps = 32, 32, 4
    elif q.dtype == torch.float32:
        block_m, block_n, warps = (64, 32, 4) if head_dim_padded <= 128 else (32, 32, 4)
    else:
        block_m, block_n, warps = (128, 64, 8) if head_dim_padded <= 128 else (64, 64, 4)
    grid = (triton.cdiv(max_seqlen_q, block_m) * batch * num_q_heads,)
    _varlen_lse_kernel[grid](
        q,
        k,
        lse,
        cu_seqlens_q[:-1],
        cu_seqlens_q[1:],
        cu_seqlens_k[:-1],
        cu_seqlens_k[1:],
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        total_q,
        num_q_heads,
        num_q_heads // k.shape[1],
        max_seqlen_q,
        window or 0,
        qk_scale,
        softcap_scale,
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=head_dim_padded,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        IS_CAUSAL=bool(causal),
        HAS_WINDOW=window is not None,
        BOTTOM_RIGHT=causal_alignment == "bottom_right",
        FP32_IEEE=q.dtype == torch.float32,
        SOFTCAP=softcap is not None,
        num_warps=warps,
        num_stages=2,
    )
    return lse
