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
The forward kernel stores it there itself (its lse strides (0, total_q), rows counted from
each sequence's start), in the same pass as the output.

Not supported: return_lse from ``attention_varlen``, attention masks, dropout (raise).
"""

from __future__ import annotations

import torch

from .._checks import (
    _dtype_name,
    check_attention_inputs,
    check_softcap,
    check_window,
)
from ._softmax import lse_dtype
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
        # One device-to-host copy of the offsets (batch + 1 ints), checked on the host (was:
        # the steps taken on the device and copied, then both ends read one at a time: three
        # reads, each waiting for the device).
        cu = cu.cpu()
        lengths = cu[1:] - cu[:-1]
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
    ``(out, lse)`` with return_lse, lse packed ``(Hq, total_q)``, -inf for rows that see no
    key, float32 (float64 for float32 inputs). v may have its own head dim D_v: out is then
    ``(total_q, Hq, D_v)``."""
    out_shape = (*q.shape[:2], v.shape[2])
    if out is None:
        out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    elif (
        not isinstance(out, torch.Tensor)
        or out.shape != out_shape
        or out.dtype != q.dtype
        or out.device != q.device
    ):
        raise ValueError(
            f"expected out to match q (shape (total_q, Hq, D_v) = {out_shape}, {q.dtype}, "
            f"{q.device}), got {tuple(out.shape) if isinstance(out, torch.Tensor) else out!r}"
        )
    batch = cu_seqlens_q.shape[0] - 1
    total_q, num_q_heads = q.shape[0], q.shape[1]
    lse = None
    if return_lse:
        lse = torch.full(
            (num_q_heads, total_q), float("-inf"), dtype=lse_dtype(q.dtype), device=q.device
        )
    if batch > 0 and total_q > 0:
        # (total, H, D) -> (B, H, total, D) with batch stride 0: sequence b is addressed by
        # its offsets alone.
        qv, kv, vv, ov = (
            t.permute(1, 0, 2).unsqueeze(0).expand(batch, -1, -1, -1) for t in (q, k, v, out)
        )
        seqs = (cu_seqlens_q[:-1], cu_seqlens_q[1:], cu_seqlens_k[:-1], cu_seqlens_k[1:])
        attention_ranges_into(qv, kv, vv, ov, seqs, max_seqlen_q, lse=lse, **options)
    return (out, lse) if return_lse else out


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
    out = torch.zeros((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)
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
    q,
    k,
    v,
    out,
    seqs,
    max_seqlen_q,
    *,
    causal,
    causal_alignment,
    window,
    softcap,
    scale,
    lse=None,
):
    """Launch the forward kernel in varlen mode on (B, H, S, D) views; out is written at
    every valid query row (its other rows are left as they are). ``lse``: a packed
    ``(Hq, total_q)`` log-sum-exp to fill as well (packed inputs only: batch stride 0), or
    None; such calls skip the launch cache (training calls: the host cost is small beside
    the backward)."""
    key, hit = (
        (None, None)
        if lse is not None
        else cached_launch(
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
    )
    if hit is not None:
        return
    check_attention_inputs(q, k, v, max_head_dim=256, value_head_dim=True)
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
        out if lse is None else lse,
        seqs=seqs,
        max_seqlen_q=max_seqlen_q,
        causal=causal,
        bottom_right=causal_alignment == "bottom_right",
        window=window,
        softcap=softcap,
        scale=scale,
        return_lse=lse is not None,
        config=None,
        key=key,
        lse_strides=None if lse is None else (0, lse.shape[1]),
    )
