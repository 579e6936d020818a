"""Backward attention (FlashAttention-2): dQ, dK, dV from dO, without an S x S buffer.

With P = softmax(S), S = scale * Q K^T, O = P V and the upstream gradient dO:

    dV = P^T dO
    dP = dO V^T
    dS = P o (dP - delta),      delta_i = sum_j P_ij dP_ij = rowsum(dO o O)_i
    dQ = scale * dS K,          dK = scale * dS^T Q

P is never stored: each tile is recomputed from the forward's log-sum-exp,
P_ij = exp(S_ij - lse_i) (here exp2 with log2 e folded into the scale). Three kernels:

1. ``_bwd_preprocess``: delta = rowsum(dO o O), (B, Hq, Sq) fp32.
2. ``_bwd_dkdv_kernel``: one program per (key tile, batch, KV head) holds a K and a V tile
   and their fp32 dK/dV accumulators, and sweeps the query tiles that see the key tile, for
   every query head of the GQA group in turn: dK/dV are summed over the group inside the
   program, with no atomics. In atomic mode the same program also adds each tile's
   contribution dS K to an fp32 dQ buffer with atomics (5 matmuls per tile pair).
3. ``_bwd_dq_kernel`` (deterministic mode): one program per (query tile, batch, query head)
   sweeps the key tiles it sees and accumulates dQ in registers: 3 more matmuls per tile
   pair (S and dP recomputed) but no atomics, so the summation order is fixed and repeated
   calls are bitwise identical.

The default is deterministic (``deterministic=True``); ``deterministic=False`` selects the
atomic dQ, whose fp32 sums depend on the order the key tiles finish in.

Masks, GQA, strides, head-dim padding and causal alignment follow forward.py: query i sees
key j iff j <= i + causal_offset (causal) and j > i + causal_offset - window (window). A
query row that sees no key (lse = -inf) contributes nothing: its dQ is zero and it adds
nothing to dK/dV.

Softcap (Gemma 2) as the forward computes it (``_softmax.kernel_scales``): with
t = tanh(q.k * scale / c) the score is z = c t, P is rebuilt from z, and dS is taken
through the cap: dS_s = P o (dP - delta) o (1 - t^2), then scaled as above (dz/d(q.k) =
scale (1 - t^2)). Only the SOFTCAP constexpr and one runtime scale differ.

Varlen (``attention_varlen_backward``, packed sequences as ``flashcore.attention_varlen``
takes them): the kernels' VARLEN mode mirrors the forward's. The packed tensors are viewed
as (B, H, total, D) with batch stride 0; each program loads its sequence's query and key
starts and ends, offsets its base pointers, and runs the same loops with that sequence's
lengths and (bottom-right) causal offset; the grids are sized by the longest lengths and a
program whose tile starts past its sequence's end does nothing. lse and delta are packed
(Hq, total_q). dK/dV rows are written by the program that owns their key tile of their
sequence, dQ rows by the one that owns their query tile: every row of a sequence is
written, no row twice. No descriptor loads (a zero-filled tail would be the next
sequence's rows).

Not supported (raises): gradients through ``out=``, dropout, masks; head dims above 256.
bfloat16 needs CUDA (the interpreter's bfloat16 dot is wrong). v may have a head dim of
its own (HEAD_DIM_V, as the forward's): dO, O, V, dV use it, Q, K, dQ, dK q/k's.

MLA's q/k head dim 192 (with v at 128) is split (QK_TAIL = 64, as the Gluon forward's):
Q and K load as two tiles, columns [0, 128) and [128, 192), S = Q_main K_main^T +
Q_tail K_tail^T, and dK and dQ are two fp32 accumulators (128 and 64 wide) stored (or
atomically added) to their columns. One tile padded to 256 would spend a third of the
tensor-core work of S, dK and dQ on zero columns. Every other head dim (D192 with v at 192
included) compiles to the kernels without the option (QK_TAIL = 0).

This file holds the three kernels, their launch table and the launchers
``attention_backward`` and ``attention_varlen_backward``; the autograd Functions that call
them are in flashcore/interface.py. It is long because the kernels are (about 1100 of its
lines): each reads top to bottom, with the visibility rule and the key phases shared with
the forward (kernels/_mask.py).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._checks import check_softcap, on_interpreter
from ._launch import copy_head_dim, pad_head_dim, pads_value_head_dim, tma_compatible
from ._mask import key_phases, visible
from ._softmax import kernel_scales, lse_dtype, softcap_tanh


# Lengths, offsets, windows and head counts change from call to call: Triton would otherwise
# specialize (and recompile) on each value's divisibility by 16 (do_not_specialize below).
# Strides stay specialized: a unit inner stride is what lets the loads vectorize (lse's and
# delta's strides are lengths: not specialized).
@triton.jit
def _row_tile(num_heads, seqlen_q, BLOCK_M: tl.constexpr):
    """This program's (query tile, batch, head, batch * num_heads + head) in a grid of
    cdiv(seqlen_q, BLOCK_M) tiles per (batch, head), tiles fastest (the row passes' grid)."""
    num_m_tiles = tl.cdiv(seqlen_q, BLOCK_M)
    pid = tl.program_id(0)
    batch_head = pid // num_m_tiles
    return pid % num_m_tiles, batch_head // num_heads, batch_head % num_heads, batch_head


@triton.jit(do_not_specialize=["num_heads", "seqlen_q", "stride_lz", "stride_lh"])
def _bwd_preprocess(
    Out,
    dOut,
    Delta,
    stride_oz,
    stride_oh,
    stride_om,
    stride_ok,
    stride_dz,
    stride_dh,
    stride_dm,
    stride_dk,
    stride_lz,
    stride_lh,
    num_heads,
    seqlen_q,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SeqStartsQ=None,
    SeqEndsQ=None,
    VARLEN: tl.constexpr = 0,
):
    """delta = rowsum(dO o O) in fp32, laid out as lse: row i of (batch, head) at
    ``batch * stride_lz + head * stride_lh + i`` (VARLEN: i counted from the sequence's
    first packed row, so the packed (H, total_q) layout)."""
    tile_m, batch, head, _ = _row_tile(num_heads, seqlen_q, BLOCK_M)
    o_base = Out + batch.to(tl.int64) * stride_oz + head.to(tl.int64) * stride_oh
    do_base = dOut + batch.to(tl.int64) * stride_dz + head.to(tl.int64) * stride_dh
    d_base = Delta + batch.to(tl.int64) * stride_lz + head.to(tl.int64) * stride_lh
    if VARLEN:
        q_first = tl.load(SeqStartsQ + batch).to(tl.int32)
        seqlen_q = tl.load(SeqEndsQ + batch).to(tl.int32) - q_first
        o_base += q_first.to(tl.int64) * stride_om
        do_base += q_first.to(tl.int64) * stride_dm
        d_base += q_first.to(tl.int64)
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    mask = (offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM)
    rows = offs_m[:, None].to(tl.int64)
    o = tl.load(o_base + rows * stride_om + offs_d[None, :] * stride_ok, mask=mask, other=0.0)
    do = tl.load(do_base + rows * stride_dm + offs_d[None, :] * stride_dk, mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(d_base + offs_m, delta, mask=offs_m < seqlen_q)


@triton.jit(do_not_specialize=["num_heads", "seqlen_q"])
def _dq_postprocess(
    DqAcc,
    Dq,
    stride_z,
    stride_h,
    stride_m,
    stride_k,
    num_heads,
    seqlen_q,
    scale,
    partial_stride,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PARTIALS: tl.constexpr,
):
    """dQ = scale * dQ_acc in dQ's dtype and strides, from the contiguous fp32 (B, H, Sq, D)
    buffer the atomic and reduce-add modes sum into (or PARTIALS of them, ``partial_stride``
    elements apart, summed in order): one pass, each element read and written once
    (``torch.mul(acc, scale, out=dq)`` takes PyTorch's unvectorized mixed-dtype loop, and
    ``dq.copy_(acc.mul_(scale))`` two passes)."""
    tile_m, batch, head, batch_head = _row_tile(num_heads, seqlen_q, BLOCK_M)
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = offs_m[:, None] < seqlen_q
    rows = offs_m[:, None].to(tl.int64)
    src = DqAcc + batch_head.to(tl.int64) * seqlen_q * HEAD_DIM + rows * HEAD_DIM + offs_d[None, :]
    dst = (
        Dq
        + batch.to(tl.int64) * stride_z
        + head.to(tl.int64) * stride_h
        + rows * stride_m
        + offs_d[None, :] * stride_k
    )
    acc = tl.load(src, mask=mask, other=0.0)
    for p in tl.static_range(1, PARTIALS):  # in a fixed order: bitwise reproducible
        acc += tl.load(src + partial_stride.to(tl.int64) * p, mask=mask, other=0.0)
    tl.store(dst, (acc * scale).to(Dq.dtype.element_ty), mask=mask)


def dq_postprocess(dq_acc: torch.Tensor, dq: torch.Tensor, scale: float) -> torch.Tensor:
    """``dq[...] = scale * dq_acc`` (``_dq_postprocess``); dq_acc contiguous fp32 of dq's
    shape, or P such buffers stacked along the batch (summed in order), a power-of-two head
    dim (every backward that sums into dq_acc has one)."""
    batch, heads, seqlen, head_dim = dq.shape
    partials = dq_acc.shape[0] // batch if batch else 1
    stacked = (partials * batch, heads, seqlen, head_dim)
    if head_dim & (head_dim - 1) or dq_acc.shape != stacked or not dq_acc.is_contiguous():
        raise ValueError(
            "dq_postprocess: a power-of-two head dim and a contiguous dq_acc of dq's shape "
            "(or several stacked along the batch)"
        )
    block_m = 64
    _dq_postprocess[(-(-seqlen // block_m) * batch * heads,)](
        dq_acc, dq, *dq.stride(), heads, seqlen, scale, dq.numel(),
        HEAD_DIM=head_dim, BLOCK_M=block_m, PARTIALS=partials,
    )  # fmt: skip
    return dq


@triton.jit
def _load_rows(
    base,
    desc,
    batch,
    head,
    start,
    offs_rows,
    offs_d,
    stride_row,
    limit,
    BLOCK: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    USE_TMA: tl.constexpr,
    MASKED: tl.constexpr,
):
    """A (BLOCK, HEAD_DIM_PADDED) tile of rows [start, start + BLOCK) of one (batch, head).

    TMA reads through a 4-D descriptor of the whole tensor (rows past the end come back as
    zeros) and needs no per-element address registers: a pointer tile of BLOCK x D 64-bit
    addresses, live across the pipelined loop, is what made the pointer path spill.
    offs_rows = start + arange(BLOCK); the inner stride is 1 or given by the base layout."""
    if USE_TMA:
        return desc.load([batch, head, start, 0]).reshape(BLOCK, HEAD_DIM_PADDED)
    ptrs = base + offs_rows[:, None].to(tl.int64) * stride_row + offs_d[None, :]
    if MASKED:
        return tl.load(
            ptrs, mask=(offs_rows[:, None] < limit) & (offs_d[None, :] < HEAD_DIM), other=0.0
        )
    if HEAD_DIM != HEAD_DIM_PADDED:
        return tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return tl.load(ptrs)


@triton.jit
def _load_tail_rows(
    base, batch, head, start, offs_rows, stride_row, limit, BLOCK: tl.constexpr,
    QK_TAIL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """The QK_TAIL-wide tile of a split head dim (MLA's columns [128, 192)): rows as
    ``_load_rows``', ``base`` already at the tail's first column; pointer loads only (the split
    mode never takes the TMA path)."""
    offs_t = tl.arange(0, QK_TAIL)
    return _load_rows(
        base, None, batch, head, start, offs_rows, offs_t, stride_row, limit,
        BLOCK, QK_TAIL, QK_TAIL, False, MASKED,
    )  # fmt: skip


@triton.jit
def _lse_to_log2(lse, BLOCK: tl.constexpr):
    """The forward's natural-log lse in the log2 units of exp2. An fp64 lse (float32 inputs,
    ``_softmax.lse_dtype``) stays fp64, the constant too: a Python float literal is fp32."""
    if lse.dtype == tl.float64:
        return lse * tl.full([BLOCK], 1.4426950408889634, tl.float64)
    else:
        return lse * 1.4426950408889634


@triton.jit
def _probabilities(scores, lse2):
    """P = exp2(scores - lse2), scores = q.k * qk_scale in fp32, the forward's own products.
    An fp64 lse2: the difference is taken in fp64 and rounded once, so a row's P carries
    the rounding of its scores, as PyTorch's softmax does, and not that of an fp32 lse."""
    if lse2.dtype == tl.float64:
        return tl.math.exp2((scores.to(tl.float64) - lse2).to(tl.float32))
    else:
        return tl.math.exp2(scores - lse2)


@triton.jit
def _dkdv_query_tiles(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    dq_base,
    lse_base,
    delta_base,
    q_desc,
    do_desc,
    dq_desc,
    batch,
    q_head,
    stride_qm,
    stride_dom,
    stride_dqm,
    stride_dqk,
    offs_n,
    offs_d,
    m_lo,
    m_hi,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    qk_scale,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    APPLY_MASK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
    USE_TMA: tl.constexpr,
    softcap_scale,
    SOFTCAP: tl.constexpr,
    offs_dv,
    HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_PADDED: tl.constexpr,
    k_tail,
    dk_tail,
    QK_TAIL: tl.constexpr,
):
    """Fold query tiles [m_lo, m_hi) of one query head into the key tile's dK, dV.

    Works on transposed tiles (keys along rows): s^T = k q^T, so p^T @ dO and dS^T @ q
    need no transpose of the accumulators. With APPLY_MASK=False the caller guarantees that
    every row of every tile in the range exists and sees every key of the tile.

    QK_TAIL > 0 (the split head dim, see _bwd_dkdv_kernel): k, dk, q and the dQ tile cover
    q/k's first HEAD_DIM columns, k_tail and dk_tail the QK_TAIL after them; S^T sums both
    parts. QK_TAIL = 0: k_tail and dk_tail are unused (returned as given).
    """
    offs_m0 = tl.arange(0, BLOCK_M)
    d_in = offs_d[None, :] < HEAD_DIM
    for start_m in range(m_lo, m_hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_m0
        q = _load_rows(
            base=q_base,
            desc=q_desc,
            batch=batch,
            head=q_head,
            start=start_m,
            offs_rows=offs_m,
            offs_d=offs_d,
            stride_row=stride_qm,
            limit=seqlen_q,
            BLOCK=BLOCK_M,
            HEAD_DIM=HEAD_DIM,
            HEAD_DIM_PADDED=HEAD_DIM_PADDED,
            USE_TMA=USE_TMA,
            MASKED=APPLY_MASK,
        )
        if QK_TAIL:
            # q's columns [HEAD_DIM, HEAD_DIM + QK_TAIL) as a QK_TAIL-wide tile of its own
            q_tail = _load_tail_rows(
                q_base + HEAD_DIM, batch, q_head, start_m, offs_m, stride_qm, seqlen_q,
                BLOCK_M, QK_TAIL, APPLY_MASK,
            )  # fmt: skip
        do = _load_rows(  # v's head dim (HEAD_DIM_V: the caller's resolved value)
            base=do_base,
            desc=do_desc,
            batch=batch,
            head=q_head,
            start=start_m,
            offs_rows=offs_m,
            offs_d=offs_dv,
            stride_row=stride_dom,
            limit=seqlen_q,
            BLOCK=BLOCK_M,
            HEAD_DIM=HEAD_DIM_V,
            HEAD_DIM_PADDED=HEAD_DIM_V_PADDED,
            USE_TMA=USE_TMA,
            MASKED=APPLY_MASK,
        )
        if APPLY_MASK:
            # Rows past the end: lse 0 and delta 0 keep the arithmetic finite; the mask
            # below zeroes their p.
            lse = tl.load(lse_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=offs_m < seqlen_q, other=0.0)
        else:
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        lse2 = _lse_to_log2(lse, BLOCK_M)

        if FP32_IEEE:
            s_t = tl.dot(k, tl.trans(q), input_precision="ieee")
        else:
            s_t = tl.dot(k, tl.trans(q))
        if QK_TAIL:
            # the tail's columns accumulated onto the main part's: one sum over q/k's head dim
            if FP32_IEEE:
                s_t = tl.dot(k_tail, tl.trans(q_tail), s_t, input_precision="ieee")
            else:
                s_t = tl.dot(k_tail, tl.trans(q_tail), s_t)
        if SOFTCAP:
            # the capped score / c, exactly as the forward's
            s_t = softcap_tanh(s_t * softcap_scale, PRECISE=FP32_IEEE)
        p_t = _probabilities(s_t * qk_scale, lse2[None, :])
        if APPLY_MASK:
            # Invisible pairs, including every pair of a row that sees no key (lse = -inf,
            # where exp2 gives inf), are exactly zero.
            mask = visible(
                rows=offs_m[None, :],
                cols=offs_n[:, None],
                seqlen_q=seqlen_q,
                seqlen_k=seqlen_k,
                causal_offset=causal_offset,
                window=window,
                IS_CAUSAL=IS_CAUSAL,
                HAS_WINDOW=HAS_WINDOW,
            )
            p_t = tl.where(mask, p_t, 0.0)

        if FP32_IEEE:
            # Each tile's product in a fresh accumulator, then added: tl.dot(a, b, acc) on
            # fp32 is one FMA chain through acc, i.e. a sequential sum over every query row of
            # every head in the group (478 terms at Sq 239, GQA 2), whose rounding error grows
            # with its length; two levels (BLOCK_M, then the tiles) keep it at PyTorch's.
            # The fresh accumulator is dv * 0 rather than a constant zero: Triton rewrites
            # acc + dot(a, b, 0) into dot(a, b, acc), which would rebuild the one chain.
            dv = dv + tl.dot(p_t, do, dv * 0.0, input_precision="ieee")
            dp_t = tl.dot(v, tl.trans(do), input_precision="ieee")
        else:
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T, in units of the scaled scores
        if SOFTCAP:
            # Through c * tanh(x / c): d/dx = 1 - tanh^2, as (1 - t)(1 + t), which keeps
            # its relative accuracy where |t| is near 1 (1 - t*t loses it to t*t's rounding).
            ds_t = ds_t * ((1.0 - s_t) * (1.0 + s_t))
        if FP32_IEEE:
            dk = dk + tl.dot(ds_t, q, dk * 0.0, input_precision="ieee")  # two levels, as dv
            if QK_TAIL:
                dk_tail = dk_tail + tl.dot(ds_t, q_tail, dk_tail * 0.0, input_precision="ieee")
        else:
            dk = tl.dot(ds_t.to(q.dtype), q, dk)
            if QK_TAIL:
                dk_tail = tl.dot(ds_t.to(q.dtype), q_tail, dk_tail)

        if ATOMIC_DQ:
            # dQ[m] += dS[m, n] K[n] for this key tile; fp32 sums, order not fixed.
            if FP32_IEEE:
                dq = tl.dot(tl.trans(ds_t), k, input_precision="ieee")
            else:
                dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k)
            if dq_desc is not None:
                # One bulk reduce-add of the tile through the copy engine (rows past the end
                # dropped by the descriptor's bounds): per-element atomics made this mode
                # 1.49x slower than the deterministic second pass at D128. (Not under the
                # interpreter, which has no descriptor reduce: the caller passes None there.)
                dq_desc.atomic_add(
                    [batch, q_head, start_m, 0], dq.reshape(1, 1, BLOCK_M, HEAD_DIM_PADDED)
                )
            else:
                dq_ptrs = (
                    dq_base
                    + offs_m[:, None].to(tl.int64) * stride_dqm
                    + offs_d[None, :] * stride_dqk
                )
                tl.atomic_add(dq_ptrs, dq, mask=(offs_m[:, None] < seqlen_q) & d_in, sem="relaxed")
            if QK_TAIL:
                # dQ's tail columns, from the same dS (pointer atomics, as the main part's)
                if FP32_IEEE:
                    dq_tail = tl.dot(tl.trans(ds_t), k_tail, input_precision="ieee")
                else:
                    dq_tail = tl.dot(tl.trans(ds_t.to(k.dtype)), k_tail)
                dq_tail_ptrs = (
                    dq_base
                    + HEAD_DIM * stride_dqk
                    + offs_m[:, None].to(tl.int64) * stride_dqm
                    + tl.arange(0, QK_TAIL)[None, :] * stride_dqk
                )
                tl.atomic_add(dq_tail_ptrs, dq_tail, mask=offs_m[:, None] < seqlen_q, sem="relaxed")
    return dk, dv, dk_tail


@triton.jit(
    do_not_specialize=[
        "num_q_heads",
        "num_kv_heads",
        "gqa_group_size",
        "seqlen_q",
        "seqlen_k",
        "causal_offset",
        "window",
        "stride_lz",
        "stride_lh",
    ]
)
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    dOut,
    Lse,
    Delta,
    dQacc,
    dK,
    dV,
    q_desc,
    do_desc,
    dq_desc,
    stride_qz,
    stride_qh,
    stride_qm,
    stride_qk,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_vz,
    stride_vh,
    stride_vn,
    stride_vk,
    stride_doz,
    stride_doh,
    stride_dom,
    stride_dok,
    stride_dqz,
    stride_dqh,
    stride_dqm,
    stride_dqk,
    stride_dkz,
    stride_dkh,
    stride_dkn,
    stride_dkk,
    stride_dvz,
    stride_dvh,
    stride_dvn,
    stride_dvk,
    stride_lz,
    stride_lh,
    num_q_heads,
    num_kv_heads,
    gqa_group_size,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    qk_scale,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
    USE_TMA: tl.constexpr,
    softcap_scale=0.0,
    SOFTCAP: tl.constexpr = False,
    SeqStartsQ=None,
    SeqEndsQ=None,
    SeqStartsK=None,
    SeqEndsK=None,
    VARLEN: tl.constexpr = 0,
    HEAD_DIM_V: tl.constexpr = 0,
    HEAD_DIM_V_PADDED: tl.constexpr = 0,
    QK_TAIL: tl.constexpr = 0,
):
    # HEAD_DIM_V (> 0): v's (and so O's and dO's) head dim where it differs from q/k's,
    # padded to HEAD_DIM_V_PADDED; 0 (default): v has q/k's and the kernel is the one
    # without this option.
    OWN_V: tl.constexpr = HEAD_DIM_V != 0
    DV: tl.constexpr = HEAD_DIM_V if OWN_V else HEAD_DIM
    DV_PADDED: tl.constexpr = HEAD_DIM_V_PADDED if OWN_V else HEAD_DIM_PADDED
    # QK_TAIL (> 0, MLA's 192 = 128 + 64): q/k's head dim is split into a main part of
    # QK_MAIN columns and a tail of QK_TAIL, both powers of two, each its own tile and dK/dQ
    # accumulator, instead of one tile padded to HEAD_DIM_PADDED (256: a third of the work
    # of S, dK and dQ on zero columns). 0 (default): one part, QK_MAIN = HEAD_DIM, and the
    # kernel is the one without this option.
    QK_MAIN: tl.constexpr = HEAD_DIM - QK_TAIL
    QK_MAIN_PADDED: tl.constexpr = QK_MAIN if QK_TAIL else HEAD_DIM_PADDED
    tl.static_assert(QK_TAIL == 0 or (OWN_V and not USE_TMA), "QK_TAIL: own v, pointer loads")
    # VARLEN (1: top-left, 2: bottom-right causal alignment per sequence), as the forward:
    # batch entry b is sequence b, queries rows [SeqStartsQ[b], SeqEndsQ[b]) and keys rows
    # [SeqStartsK[b], SeqEndsK[b]) of the packed tensors (batch stride 0); seqlen_q and
    # seqlen_k are then the longest lengths, which size the grid, and causal_offset is per
    # sequence. A program whose key tile starts past its sequence's end does nothing.
    num_n_tiles = tl.cdiv(seqlen_k, BLOCK_N)
    pid = tl.program_id(0)
    tile_n = pid % num_n_tiles
    batch_head = pid // num_n_tiles
    batch = batch_head // num_kv_heads
    kv_head = batch_head % num_kv_heads

    k_base = K + batch.to(tl.int64) * stride_kz + kv_head.to(tl.int64) * stride_kh
    v_base = V + batch.to(tl.int64) * stride_vz + kv_head.to(tl.int64) * stride_vh
    dk_base = dK + batch.to(tl.int64) * stride_dkz + kv_head.to(tl.int64) * stride_dkh
    dv_base = dV + batch.to(tl.int64) * stride_dvz + kv_head.to(tl.int64) * stride_dvh
    if VARLEN:
        q_first = tl.load(SeqStartsQ + batch).to(tl.int32)
        k_first = tl.load(SeqStartsK + batch).to(tl.int32)
        seqlen_q = tl.load(SeqEndsQ + batch).to(tl.int32) - q_first
        seqlen_k = tl.load(SeqEndsK + batch).to(tl.int32) - k_first
        if VARLEN == 2:
            causal_offset = seqlen_k - seqlen_q
        else:
            causal_offset = 0
        k_base += k_first.to(tl.int64) * stride_kn
        v_base += k_first.to(tl.int64) * stride_vn
        dk_base += k_first.to(tl.int64) * stride_dkn
        dv_base += k_first.to(tl.int64) * stride_dvn

    start_n = tile_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, QK_MAIN_PADDED)
    kv_mask = (offs_n[:, None] < seqlen_k) & (offs_d[None, :] < QK_MAIN)
    offs_dv = tl.arange(0, DV_PADDED) if OWN_V else offs_d
    v_mask = ((offs_n[:, None] < seqlen_k) & (offs_dv[None, :] < DV)) if OWN_V else kv_mask
    cols = offs_n[:, None].to(tl.int64)
    k = tl.load(k_base + cols * stride_kn + offs_d[None, :] * stride_kk, mask=kv_mask, other=0.0)
    v = tl.load(v_base + cols * stride_vn + offs_dv[None, :] * stride_vk, mask=v_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, QK_MAIN_PADDED], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, DV_PADDED], dtype=tl.float32)
    if QK_TAIL:
        # k's last QK_TAIL columns and their dK accumulator (rows past the end read as zero)
        offs_t = tl.arange(0, QK_TAIL)
        k_tail_ptrs = k_base + QK_MAIN * stride_kk + cols * stride_kn + offs_t[None, :] * stride_kk
        k_tail = tl.load(k_tail_ptrs, mask=offs_n[:, None] < seqlen_k, other=0.0)
        dk_tail = tl.zeros([BLOCK_N, QK_TAIL], dtype=tl.float32)
    else:
        k_tail = k  # placeholders: the query-tile walk takes and returns them unused
        dk_tail = dk

    # Query range of this key tile in up to three phases: [m_lo, m_full) masked (rows at
    # the causal diagonal), [m_full, m_full_end) unmasked (every row exists and sees the
    # whole key tile), [m_full_end, m_hi) masked (window edge, end of the queries).
    last_key = start_n + BLOCK_N - 1
    tile_complete = start_n + BLOCK_N <= seqlen_k
    full_rows_end = (seqlen_q // BLOCK_M) * BLOCK_M
    if IS_CAUSAL:
        # Row i sees key start_n iff i >= start_n - offset; sees the whole tile iff
        # i >= last_key - offset.
        m_lo = (tl.maximum(start_n - causal_offset, 0) // BLOCK_M) * BLOCK_M
        m_full = tl.cdiv(tl.maximum(last_key - causal_offset, 0), BLOCK_M) * BLOCK_M
    else:
        m_lo = 0
        m_full = 0
    m_full = tl.maximum(m_full, m_lo)
    if HAS_WINDOW:
        # Row i sees key j only if i < j - offset + window.
        m_hi = tl.minimum(tl.maximum(last_key - causal_offset + window, 0), seqlen_q)
        m_full_end = tl.minimum(
            ((tl.maximum(start_n - causal_offset + window, 0)) // BLOCK_M) * BLOCK_M, full_rows_end
        )
    else:
        m_hi = seqlen_q
        m_full_end = full_rows_end
    if not tile_complete:
        m_full_end = m_full  # a partial key tile is masked throughout
    m_full_end = tl.maximum(m_full_end, m_full)
    m_mask1_end = tl.minimum(m_full, m_hi)
    if VARLEN:
        # A key tile past the end of its (shorter) sequence: no query range at all (its
        # rows of dK/dV belong to no sequence of this program; the store below is masked).
        past_end = start_n >= seqlen_k
        m_lo = tl.where(past_end, 0, m_lo)
        m_mask1_end = tl.where(past_end, 0, m_mask1_end)
        m_full = tl.where(past_end, 0, m_full)
        m_full_end = tl.where(past_end, 0, m_full_end)
        m_hi = tl.where(past_end, 0, m_hi)

    for g in range(0, gqa_group_size):
        q_head = kv_head * gqa_group_size + g
        q_base = Q + batch.to(tl.int64) * stride_qz + q_head.to(tl.int64) * stride_qh
        do_base = dOut + batch.to(tl.int64) * stride_doz + q_head.to(tl.int64) * stride_doh
        dq_base = dQacc + batch.to(tl.int64) * stride_dqz + q_head.to(tl.int64) * stride_dqh
        lse_base = Lse + batch.to(tl.int64) * stride_lz + q_head.to(tl.int64) * stride_lh
        delta_base = Delta + batch.to(tl.int64) * stride_lz + q_head.to(tl.int64) * stride_lh
        if VARLEN:
            q_base += q_first.to(tl.int64) * stride_qm
            do_base += q_first.to(tl.int64) * stride_dom
            dq_base += q_first.to(tl.int64) * stride_dqm
            lse_base += q_first.to(tl.int64)
            delta_base += q_first.to(tl.int64)
        dk, dv, dk_tail = _dkdv_query_tiles(
            dk=dk,
            dv=dv,
            k=k,
            v=v,
            q_base=q_base,
            do_base=do_base,
            dq_base=dq_base,
            lse_base=lse_base,
            delta_base=delta_base,
            q_desc=q_desc,
            do_desc=do_desc,
            dq_desc=dq_desc,
            batch=batch,
            q_head=q_head,
            stride_qm=stride_qm,
            stride_dom=stride_dom,
            stride_dqm=stride_dqm,
            stride_dqk=stride_dqk,
            offs_n=offs_n,
            offs_d=offs_d,
            m_lo=m_lo,
            m_hi=m_mask1_end,
            seqlen_q=seqlen_q,
            seqlen_k=seqlen_k,
            causal_offset=causal_offset,
            window=window,
            qk_scale=qk_scale,
            BLOCK_M=BLOCK_M,
            HEAD_DIM=QK_MAIN,
            HEAD_DIM_PADDED=QK_MAIN_PADDED,
            APPLY_MASK=True,
            IS_CAUSAL=IS_CAUSAL,
            HAS_WINDOW=HAS_WINDOW,
            FP32_IEEE=FP32_IEEE,
            ATOMIC_DQ=ATOMIC_DQ,
            USE_TMA=USE_TMA,
            softcap_scale=softcap_scale,
            SOFTCAP=SOFTCAP,
            offs_dv=offs_dv,
            HEAD_DIM_V=DV,
            HEAD_DIM_V_PADDED=DV_PADDED,
            k_tail=k_tail,
            dk_tail=dk_tail,
            QK_TAIL=QK_TAIL,
        )
        dk, dv, dk_tail = _dkdv_query_tiles(
            dk=dk,
            dv=dv,
            k=k,
            v=v,
            q_base=q_base,
            do_base=do_base,
            dq_base=dq_base,
            lse_base=lse_base,
            delta_base=delta_base,
            q_desc=q_desc,
            do_desc=do_desc,
            dq_desc=dq_desc,
            batch=batch,
            q_head=q_head,
            stride_qm=stride_qm,
            stride_dom=stride_dom,
            stride_dqm=stride_dqm,
            stride_dqk=stride_dqk,
            offs_n=offs_n,
            offs_d=offs_d,
            m_lo=m_full,
            m_hi=m_full_end,
            seqlen_q=seqlen_q,
            seqlen_k=seqlen_k,
            causal_offset=causal_offset,
            window=window,
            qk_scale=qk_scale,
            BLOCK_M=BLOCK_M,
            HEAD_DIM=QK_MAIN,
            HEAD_DIM_PADDED=QK_MAIN_PADDED,
            APPLY_MASK=False,
            IS_CAUSAL=IS_CAUSAL,
            HAS_WINDOW=HAS_WINDOW,
            FP32_IEEE=FP32_IEEE,
            ATOMIC_DQ=ATOMIC_DQ,
            USE_TMA=USE_TMA,
            softcap_scale=softcap_scale,
            SOFTCAP=SOFTCAP,
            offs_dv=offs_dv,
            HEAD_DIM_V=DV,
            HEAD_DIM_V_PADDED=DV_PADDED,
            k_tail=k_tail,
            dk_tail=dk_tail,
            QK_TAIL=QK_TAIL,
        )
        dk, dv, dk_tail = _dkdv_query_tiles(
            dk=dk,
            dv=dv,
            k=k,
            v=v,
            q_base=q_base,
            do_base=do_base,
            dq_base=dq_base,
            lse_base=lse_base,
            delta_base=delta_base,
            q_desc=q_desc,
            do_desc=do_desc,
            dq_desc=dq_desc,
            batch=batch,
            q_head=q_head,
            stride_qm=stride_qm,
            stride_dom=stride_dom,
            stride_dqm=stride_dqm,
            stride_dqk=stride_dqk,
            offs_n=offs_n,
            offs_d=offs_d,
            m_lo=m_full_end,
            m_hi=m_hi,
            seqlen_q=seqlen_q,
            seqlen_k=seqlen_k,
            causal_offset=causal_offset,
            window=window,
            qk_scale=qk_scale,
            BLOCK_M=BLOCK_M,
            HEAD_DIM=QK_MAIN,
            HEAD_DIM_PADDED=QK_MAIN_PADDED,
            APPLY_MASK=True,
            IS_CAUSAL=IS_CAUSAL,
            HAS_WINDOW=HAS_WINDOW,
            FP32_IEEE=FP32_IEEE,
            ATOMIC_DQ=ATOMIC_DQ,
            USE_TMA=USE_TMA,
            softcap_scale=softcap_scale,
            SOFTCAP=SOFTCAP,
            offs_dv=offs_dv,
            HEAD_DIM_V=DV,
            HEAD_DIM_V_PADDED=DV_PADDED,
            k_tail=k_tail,
            dk_tail=dk_tail,
            QK_TAIL=QK_TAIL,
        )

    # dS was taken w.r.t. the scaled scores: the chain rule through S = scale * Q K^T
    # gives dK = scale * dS^T Q. dV needs no scale.
    dk = dk * sm_scale
    dk_ptrs = dk_base + cols * stride_dkn + offs_d[None, :] * stride_dkk
    dv_ptrs = dv_base + cols * stride_dvn + offs_dv[None, :] * stride_dvk
    tl.store(dk_ptrs, dk.to(dK.dtype.element_ty), mask=kv_mask)
    if QK_TAIL:
        dk_tail_ptrs = (
            dk_base + QK_MAIN * stride_dkk + cols * stride_dkn + offs_t[None, :] * stride_dkk
        )
        tl.store(
            dk_tail_ptrs,
            (dk_tail * sm_scale).to(dK.dtype.element_ty),
            mask=offs_n[:, None] < seqlen_k,
        )
    tl.store(dv_ptrs, dv.to(dV.dtype.element_ty), mask=v_mask)


@triton.jit
def _dq_key_tiles(
    dq,
    q,
    do,
    lse2,
    delta,
    k_base,
    v_base,
    k_desc,
    v_desc,
    batch,
    kv_head,
    stride_kn,
    stride_vn,
    offs_m,
    offs_d,
    n_lo,
    n_hi,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    qk_scale,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    APPLY_MASK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    USE_TMA: tl.constexpr,
    softcap_scale,
    SOFTCAP: tl.constexpr,
    offs_dv,
    HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_PADDED: tl.constexpr,
    q_tail,
    dq_tail,
    QK_TAIL: tl.constexpr,
):
    """Fold key tiles [n_lo, n_hi) into one query tile's dQ (before the final scale).

    QK_TAIL > 0 (the split head dim, see _bwd_dkdv_kernel): q, dq and the K tiles cover
    q/k's first HEAD_DIM columns, q_tail and dq_tail the QK_TAIL after them. QK_TAIL = 0:
    q_tail and dq_tail are unused (returned as given)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(n_lo, n_hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        k = _load_rows(
            base=k_base,
            desc=k_desc,
            batch=batch,
            head=kv_head,
            start=start_n,
            offs_rows=offs_n,
            offs_d=offs_d,
            stride_row=stride_kn,
            limit=seqlen_k,
            BLOCK=BLOCK_N,
            HEAD_DIM=HEAD_DIM,
            HEAD_DIM_PADDED=HEAD_DIM_PADDED,
            USE_TMA=USE_TMA,
            MASKED=APPLY_MASK,
        )
        if QK_TAIL:
            # k's columns [HEAD_DIM, HEAD_DIM + QK_TAIL), a tile of their own
            k_tail = _load_tail_rows(
                k_base + HEAD_DIM, batch, kv_head, start_n, offs_n, stride_kn, seqlen_k,
                BLOCK_N, QK_TAIL, APPLY_MASK,
            )  # fmt: skip
        v = _load_rows(  # v's head dim (HEAD_DIM_V: the caller's resolved value)
            base=v_base,
            desc=v_desc,
            batch=batch,
            head=kv_head,
            start=start_n,
            offs_rows=offs_n,
            offs_d=offs_dv,
            stride_row=stride_vn,
            limit=seqlen_k,
            BLOCK=BLOCK_N,
            HEAD_DIM=HEAD_DIM_V,
            HEAD_DIM_PADDED=HEAD_DIM_V_PADDED,
            USE_TMA=USE_TMA,
            MASKED=APPLY_MASK,
        )
        if FP32_IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
            dp = tl.dot(do, tl.trans(v))
        if QK_TAIL:
            # the tail's columns accumulated onto the main part's, as in _dkdv_query_tiles
            if FP32_IEEE:
                s = tl.dot(q_tail, tl.trans(k_tail), s, input_precision="ieee")
            else:
                s = tl.dot(q_tail, tl.trans(k_tail), s)
        if SOFTCAP:
            s = softcap_tanh(s * softcap_scale, PRECISE=FP32_IEEE)
        p = _probabilities(s * qk_scale, lse2[:, None])
        if APPLY_MASK:
            mask = visible(
                rows=offs_m[:, None],
                cols=offs_n[None, :],
                seqlen_q=seqlen_q,
                seqlen_k=seqlen_k,
                causal_offset=causal_offset,
                window=window,
                IS_CAUSAL=IS_CAUSAL,
                HAS_WINDOW=HAS_WINDOW,
            )
            p = tl.where(mask, p, 0.0)
        ds = p * (dp - delta[:, None])
        if SOFTCAP:
            ds = ds * ((1.0 - s) * (1.0 + s))  # 1 - tanh^2: see _dkdv_query_tiles
        if FP32_IEEE:
            dq = dq + tl.dot(ds, k, dq * 0.0, input_precision="ieee")  # two levels: see dK/dV
            if QK_TAIL:
                dq_tail = dq_tail + tl.dot(ds, k_tail, dq_tail * 0.0, input_precision="ieee")
        else:
            dq = tl.dot(ds.to(k.dtype), k, dq)
            if QK_TAIL:
                dq_tail = tl.dot(ds.to(k.dtype), k_tail, dq_tail)
    return dq, dq_tail


@triton.jit(
    do_not_specialize=[
        "num_q_heads",
        "gqa_group_size",
        "seqlen_q",
        "seqlen_k",
        "causal_offset",
        "window",
        "stride_lz",
        "stride_lh",
    ]
)
def _bwd_dq_kernel(
    Q,
    K,
    V,
    dOut,
    Lse,
    Delta,
    dQ,
    k_desc,
    v_desc,
    stride_qz,
    stride_qh,
    stride_qm,
    stride_qk,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_vz,
    stride_vh,
    stride_vn,
    stride_vk,
    stride_doz,
    stride_doh,
    stride_dom,
    stride_dok,
    stride_dqz,
    stride_dqh,
    stride_dqm,
    stride_dqk,
    stride_lz,
    stride_lh,
    num_q_heads,
    gqa_group_size,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    qk_scale,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    FP32_IEEE: tl.constexpr,
    USE_TMA: tl.constexpr,
    softcap_scale=0.0,
    SOFTCAP: tl.constexpr = False,
    SeqStartsQ=None,
    SeqEndsQ=None,
    SeqStartsK=None,
    SeqEndsK=None,
    VARLEN: tl.constexpr = 0,
    HEAD_DIM_V: tl.constexpr = 0,
    HEAD_DIM_V_PADDED: tl.constexpr = 0,
    QK_TAIL: tl.constexpr = 0,
):
    # HEAD_DIM_V (> 0): v's (and so O's and dO's) head dim where it differs from q/k's,
    # padded to HEAD_DIM_V_PADDED; 0 (default): v has q/k's and the kernel is the one
    # without this option.
    OWN_V: tl.constexpr = HEAD_DIM_V != 0
    DV: tl.constexpr = HEAD_DIM_V if OWN_V else HEAD_DIM
    DV_PADDED: tl.constexpr = HEAD_DIM_V_PADDED if OWN_V else HEAD_DIM_PADDED
    # QK_TAIL (> 0, MLA's 192 = 128 + 64): q/k's head dim is split into a main part of
    # QK_MAIN columns and a tail of QK_TAIL, both powers of two, each its own tile and dK/dQ
    # accumulator, instead of one tile padded to HEAD_DIM_PADDED (256: a third of the work
    # of S, dK and dQ on zero columns). 0 (default): one part, QK_MAIN = HEAD_DIM, and the
    # kernel is the one without this option.
    QK_MAIN: tl.constexpr = HEAD_DIM - QK_TAIL
    QK_MAIN_PADDED: tl.constexpr = QK_MAIN if QK_TAIL else HEAD_DIM_PADDED
    tl.static_assert(QK_TAIL == 0 or (OWN_V and not USE_TMA), "QK_TAIL: own v, pointer loads")
    # VARLEN as in _bwd_dkdv_kernel: a query tile past its sequence's end does nothing.
    num_m_tiles = tl.cdiv(seqlen_q, BLOCK_M)
    pid = tl.program_id(0)
    tile_m = pid % num_m_tiles
    if IS_CAUSAL:
        tile_m = num_m_tiles - 1 - tile_m  # longest rows first, as in the forward
    batch_head = pid // num_m_tiles
    batch = batch_head // num_q_heads
    q_head = batch_head % num_q_heads
    kv_head = q_head // gqa_group_size

    q_base = Q + batch.to(tl.int64) * stride_qz + q_head.to(tl.int64) * stride_qh
    do_base = dOut + batch.to(tl.int64) * stride_doz + q_head.to(tl.int64) * stride_doh
    dq_base = dQ + batch.to(tl.int64) * stride_dqz + q_head.to(tl.int64) * stride_dqh
    lse_base = Lse + batch.to(tl.int64) * stride_lz + q_head.to(tl.int64) * stride_lh
    delta_base = Delta + batch.to(tl.int64) * stride_lz + q_head.to(tl.int64) * stride_lh
    k_base = K + batch.to(tl.int64) * stride_kz + kv_head.to(tl.int64) * stride_kh
    v_base = V + batch.to(tl.int64) * stride_vz + kv_head.to(tl.int64) * stride_vh
    if VARLEN:
        q_first = tl.load(SeqStartsQ + batch).to(tl.int32)
        k_first = tl.load(SeqStartsK + batch).to(tl.int32)
        seqlen_q = tl.load(SeqEndsQ + batch).to(tl.int32) - q_first
        seqlen_k = tl.load(SeqEndsK + batch).to(tl.int32) - k_first
        if VARLEN == 2:
            causal_offset = seqlen_k - seqlen_q
        else:
            causal_offset = 0
        q_base += q_first.to(tl.int64) * stride_qm
        do_base += q_first.to(tl.int64) * stride_dom
        dq_base += q_first.to(tl.int64) * stride_dqm
        lse_base += q_first.to(tl.int64)
        delta_base += q_first.to(tl.int64)
        k_base += k_first.to(tl.int64) * stride_kn
        v_base += k_first.to(tl.int64) * stride_vn

    tile_start = tile_m * BLOCK_M
    offs_m = tile_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, QK_MAIN_PADDED)
    row_in = offs_m < seqlen_q
    mask = row_in[:, None] & (offs_d[None, :] < QK_MAIN)
    offs_dv = tl.arange(0, DV_PADDED) if OWN_V else offs_d
    do_mask = (row_in[:, None] & (offs_dv[None, :] < DV)) if OWN_V else mask
    rows = offs_m[:, None].to(tl.int64)
    q = tl.load(q_base + rows * stride_qm + offs_d[None, :] * stride_qk, mask=mask, other=0.0)
    do = tl.load(
        do_base + rows * stride_dom + offs_dv[None, :] * stride_dok, mask=do_mask, other=0.0
    )
    lse = tl.load(lse_base + offs_m, mask=row_in, other=0.0)
    delta = tl.load(delta_base + offs_m, mask=row_in, other=0.0)
    lse2 = _lse_to_log2(lse, BLOCK_M)
    dq = tl.zeros([BLOCK_M, QK_MAIN_PADDED], dtype=tl.float32)
    if QK_TAIL:
        # q's last QK_TAIL columns and their dQ accumulator (rows past the end read as zero)
        offs_t = tl.arange(0, QK_TAIL)
        q_tail_ptrs = q_base + QK_MAIN * stride_qk + rows * stride_qm + offs_t[None, :] * stride_qk
        q_tail = tl.load(q_tail_ptrs, mask=row_in[:, None], other=0.0)
        dq_tail = tl.zeros([BLOCK_M, QK_TAIL], dtype=tl.float32)
    else:
        q_tail = q  # placeholders: the key-tile walk takes and returns them unused
        dq_tail = dq

    # Key phases exactly as the forward kernel's (kernels/_mask.py), except that a partial
    # query tile (rows past Sq) is masked throughout: its P must be zero past the end.
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
    if tile_start + BLOCK_M > seqlen_q:
        unmasked_end = full_start
    if VARLEN:
        # A query tile past the end of its (shorter) sequence sees no key.
        past_end = tile_start >= seqlen_q
        key_start = tl.where(past_end, 0, key_start)
        lower_end = tl.where(past_end, 0, lower_end)
        full_start = tl.where(past_end, 0, full_start)
        unmasked_end = tl.where(past_end, 0, unmasked_end)
        key_end = tl.where(past_end, 0, key_end)

    dq, dq_tail = _dq_key_tiles(
        dq=dq,
        q=q,
        do=do,
        lse2=lse2,
        delta=delta,
        k_base=k_base,
        v_base=v_base,
        k_desc=k_desc,
        v_desc=v_desc,
        batch=batch,
        kv_head=kv_head,
        stride_kn=stride_kn,
        stride_vn=stride_vn,
        offs_m=offs_m,
        offs_d=offs_d,
        n_lo=key_start,
        n_hi=lower_end,
        seqlen_q=seqlen_q,
        seqlen_k=seqlen_k,
        causal_offset=causal_offset,
        window=window,
        qk_scale=qk_scale,
        BLOCK_N=BLOCK_N,
        HEAD_DIM=QK_MAIN,
        HEAD_DIM_PADDED=QK_MAIN_PADDED,
        APPLY_MASK=True,
        IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=HAS_WINDOW,
        FP32_IEEE=FP32_IEEE,
        USE_TMA=USE_TMA,
        softcap_scale=softcap_scale,
        SOFTCAP=SOFTCAP,
        offs_dv=offs_dv,
        HEAD_DIM_V=DV,
        HEAD_DIM_V_PADDED=DV_PADDED,
        q_tail=q_tail,
        dq_tail=dq_tail,
        QK_TAIL=QK_TAIL,
    )
    dq, dq_tail = _dq_key_tiles(
        dq=dq,
        q=q,
        do=do,
        lse2=lse2,
        delta=delta,
        k_base=k_base,
        v_base=v_base,
        k_desc=k_desc,
        v_desc=v_desc,
        batch=batch,
        kv_head=kv_head,
        stride_kn=stride_kn,
        stride_vn=stride_vn,
        offs_m=offs_m,
        offs_d=offs_d,
        n_lo=full_start,
        n_hi=unmasked_end,
        seqlen_q=seqlen_q,
        seqlen_k=seqlen_k,
        causal_offset=causal_offset,
        window=window,
        qk_scale=qk_scale,
        BLOCK_N=BLOCK_N,
        HEAD_DIM=QK_MAIN,
        HEAD_DIM_PADDED=QK_MAIN_PADDED,
        APPLY_MASK=False,
        IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=HAS_WINDOW,
        FP32_IEEE=FP32_IEEE,
        USE_TMA=USE_TMA,
        softcap_scale=softcap_scale,
        SOFTCAP=SOFTCAP,
        offs_dv=offs_dv,
        HEAD_DIM_V=DV,
        HEAD_DIM_V_PADDED=DV_PADDED,
        q_tail=q_tail,
        dq_tail=dq_tail,
        QK_TAIL=QK_TAIL,
    )
    dq, dq_tail = _dq_key_tiles(
        dq=dq,
        q=q,
        do=do,
        lse2=lse2,
        delta=delta,
        k_base=k_base,
        v_base=v_base,
        k_desc=k_desc,
        v_desc=v_desc,
        batch=batch,
        kv_head=kv_head,
        stride_kn=stride_kn,
        stride_vn=stride_vn,
        offs_m=offs_m,
        offs_d=offs_d,
        n_lo=unmasked_end,
        n_hi=key_end,
        seqlen_q=seqlen_q,
        seqlen_k=seqlen_k,
        causal_offset=causal_offset,
        window=window,
        qk_scale=qk_scale,
        BLOCK_N=BLOCK_N,
        HEAD_DIM=QK_MAIN,
        HEAD_DIM_PADDED=QK_MAIN_PADDED,
        APPLY_MASK=True,
        IS_CAUSAL=IS_CAUSAL,
        HAS_WINDOW=HAS_WINDOW,
        FP32_IEEE=FP32_IEEE,
        USE_TMA=USE_TMA,
        softcap_scale=softcap_scale,
        SOFTCAP=SOFTCAP,
        offs_dv=offs_dv,
        HEAD_DIM_V=DV,
        HEAD_DIM_V_PADDED=DV_PADDED,
        q_tail=q_tail,
        dq_tail=dq_tail,
        QK_TAIL=QK_TAIL,
    )
    dq = dq * sm_scale
    dq_ptrs = dq_base + rows * stride_dqm + offs_d[None, :] * stride_dqk
    tl.store(dq_ptrs, dq.to(dQ.dtype.element_ty), mask=mask)
    if QK_TAIL:
        dq_tail_ptrs = (
            dq_base + QK_MAIN * stride_dqk + rows * stride_dqm + offs_t[None, :] * stride_dqk
        )
        tl.store(dq_tail_ptrs, (dq_tail * sm_scale).to(dQ.dtype.element_ty), mask=row_in[:, None])


# Launch configs for half precision on Hopper, by padded head dim: (BLOCK_M, BLOCK_N, warps,
# stages) of the dK/dV kernel (deterministic mode), of the same kernel with atomic dQ, and of
# the dQ kernel. Picked by timing on the H100 (tools/backward_probe.py; its log is
# results/<gpu>/logs/backward_probe_40dbf8f.*): bf16, B*S = 16K tokens, H*D = 2048, S 4K and
# 16K at D=128, 8K at D=64/256, causal and not; the full backward with one kernel's config
# varied at a time. Offline register reports had picked (64, 64, 8 warps) at D=128, which
# splits a 64-key tile over two warpgroups; one warpgroup per tile (4 warps) spills by the
# report yet runs the dK/dV pass in about half the time (backward 233 -> 407 TFLOP/s,
# geomean). Atomic mode wants 128-key tiles at D=128 (its dQ matmul and atomics ride along).
# D=256's deterministic configs were re-swept with pipelined loads, which that sweep had not
# tried (tools/dv_backward_probe.py --pair 256/256, log results/<gpu>/logs/
# d256_backward_probe_d444f79.*; S 4K/8K, H 8, geomean TFLOP/s of the whole backward with
# one kernel varied): dK/dV (64, 64, 8, 2) 234 against (64, 64, 8, 1) 188; dQ (64, 32, 4, 3)
# 207 against (64, 32, 4, 1) 188. Its atomic config, swept the same way (--atomic), stays.
_HOPPER_TABLE = {
    64: ((64, 64, 4, 3), (64, 64, 4, 3), (128, 64, 8, 3)),
    128: ((64, 64, 4, 2), (64, 128, 8, 3), (128, 64, 8, 3)),
    256: ((64, 64, 8, 2), (64, 64, 8, 1), (64, 32, 4, 3)),
}
# v with a head dim of its own, by (padded q/k head dim, padded v head dim): MLA's 192/128
# pads to 256/128, where dV, dO and O are half the D256 bucket's width. Picked by timing on
# the H100 (tools/dv_backward_probe.py, log results/<gpu>/logs/dv_backward_probe_3669f4a.*;
# S 4K/8K, causal and not, geomean TFLOP/s): dK/dV (32, 128, 8, 2) 230 against the D256
# bucket's (64, 64, 8, 1) 166; dQ (128, 64, 8, 2) 184 against (64, 32, 4, 1) 166. The atomic
# mode's dK/dV (deterministic=False; autograd, varlen's included, runs the deterministic
# mode), swept with --atomic (log results/<gpu>/logs/atomic_backward_probe_3f5270a.*, same
# shapes): (64, 64, 8, 2) 166 against the D256 bucket's (64, 64, 8, 1) 132. (D256's own
# atomic sweep kept (64, 64, 8, 1): 168, next best 119.) These were swept on the padded
# 256-wide q/k tiles; the 192/128 kernels now split q/k (QK_TAIL below) and run the same
# configs on the padded tiles; a D=256 with v at 128 (no split) still does.
_HOPPER_TABLE_OWN_V = {
    (256, 128): ((32, 128, 8, 2), (64, 64, 8, 2), (128, 64, 8, 2)),
}
# The split 192/128 kernels, re-swept on their own tiles (tools/dv_backward_probe.py
# --around-shipped, logs results/<gpu>/logs/mla_backward_probe_{deterministic,atomic}_0f83d17.*;
# S 4K/8K, whole-backward TFLOP/s with one kernel varied), by (q/k head dim, padded v head
# dim): dK/dV (32, 64, 4, 3), atomic dK/dV (64, 128, 8, 2), dQ (128, 64, 8, 3). An A/B of the
# whole backward against the padded-tile configs above (logs/mla_backward_configs_ab_bdbb35b.*,
# S 4K-16K) measured 0.825-0.841 of their time non-causal and 0.64-0.74 in atomic mode, but
# 1.002-1.029 causal: there the sweep ranks the old dK/dV (32, 128, 8, 2) first (292 against
# 285 TFLOP/s at S4K, 324 against 318 at S8K), so causal calls keep it (_SPLIT_QK_CAUSAL_DKDV)
# and take the new dQ config (312 and 343). (dQ (128, 64, 8, 3) on the padded 256-wide tiles
# needs 240 KB of shared memory, past the H100's 227: the split is what lets it fit.)
_SPLIT_QK_TABLE = {
    (192, 128): ((32, 64, 4, 3), (64, 128, 8, 2), (128, 64, 8, 3)),
}
_SPLIT_QK_CAUSAL_DKDV = {(192, 128): (32, 128, 8, 2)}

# q/k head dims split into a power-of-two main part and a tail (the kernels' QK_TAIL), where
# v has a head dim of its own: MLA's 192 = 128 + 64, as the Gluon forward's QK_TAIL. A D=192
# with v at 192 stays on the padded tile.
QK_TAIL = {192: 64}


def _pick_config(
    head_dim_padded: int,
    dtype: torch.dtype,
    interpreted: bool,
    head_dim_v_padded: int = 0,
    causal: bool = False,
    split_qk: int = 0,
) -> dict:
    """Launch configs by padded head dim (q/k's, or the wider of q/k's and v's), and v's
    padded head dim where it differs from q/k's (0: it does not). split_qk: q/k's head dim
    where the kernels split it (QK_TAIL; 0: they do not), whose pairs have configs of their
    own, causal calls' deterministic dK/dV included."""
    if interpreted:
        return dict(dkdv=(32, 32, 4, 1), dq=(32, 32, 4, 1))
    if dtype == torch.float32:  # IEEE fp32 dots: small tiles (untuned, correct)
        if head_dim_padded <= 64:
            return dict(dkdv=(32, 64, 4, 1), dq=(64, 32, 4, 1))
        return dict(dkdv=(32, 32, 4, 1), dq=(32, 32, 4, 1))
    bucket = 64 if head_dim_padded <= 64 else head_dim_padded
    own_v = _HOPPER_TABLE_OWN_V.get((bucket, head_dim_v_padded))
    dkdv, dkdv_atomic, dq = own_v or _HOPPER_TABLE[bucket]
    split = (split_qk, head_dim_v_padded)
    if split in _SPLIT_QK_TABLE:
        dkdv, dkdv_atomic, dq = _SPLIT_QK_TABLE[split]
        if causal:
            dkdv = _SPLIT_QK_CAUSAL_DKDV.get(split, dkdv)
    return dict(dkdv=dkdv, dkdv_atomic=dkdv_atomic, dq=dq)


def _descriptors(tensors, block_rows, head_dim):
    from triton.tools.tensor_descriptor import TensorDescriptor

    # Rows past the end of the sequence are zero-filled by the copy engine.
    return tuple(
        TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, block_rows, head_dim])
        for t in tensors
    )


def _default_scale(scale, q):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _gradient_buffer(name, buf, like):
    if buf is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)
    if buf.shape != like.shape or buf.dtype != like.dtype or buf.device != like.device:
        raise ValueError(
            f"expected {name} of shape {tuple(like.shape)}, {like.dtype}, {like.device}, "
            f"got shape {tuple(buf.shape)}, {buf.dtype}, {buf.device}"
        )
    return buf


def _check_grad_out(grad_out, out, q, v, shape):
    """dO: the output's ``shape`` (q's rows and heads, v's head dim), q's dtype and device;
    O: that shape."""
    if grad_out.shape != shape or grad_out.dtype != q.dtype or grad_out.device != q.device:
        raise ValueError(
            f"expected grad_out to match q (shape {shape}: q's rows and heads, v's head dim), "
            f"{q.dtype}, {q.device}, got shape {tuple(grad_out.shape)}, {grad_out.dtype}, "
            f"{grad_out.device}"
        )
    if out.shape != shape:
        raise ValueError(f"expected out of shape {shape}, got {tuple(out.shape)}")


def attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    window: int | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    deterministic: bool = True,
    config: dict | None = None,
    dq: torch.Tensor | None = None,
    dk: torch.Tensor | None = None,
    dv: torch.Tensor | None = None,
):
    """Gradients of ``flashcore.attention``: returns ``(dq, dk, dv)``.

    Args:
        grad_out: dO, the output's shape ``(B, Hq, Sq, D_v)`` (v's head dim, q's otherwise
            the same) and q's dtype (any strides).
        q, k, v, out: as in / returned by the forward; ``out`` is the forward's output.
        lse: the forward's ``(B, Hq, Sq)`` natural-log log-sum-exp
            (``attention(..., return_lse=True)``), float32, or float64 for float32 inputs
            (``_softmax.lse_dtype``); -inf for rows that see no key.
        causal, causal_alignment, window, softcap, scale: exactly as given to the forward.
            With softcap c the forward's score is z = c * tanh(s / c) of the scaled score
            s; P is rebuilt from z and dS is carried back through it, dS_s = dS_z (1 - tanh^2).
        deterministic: True (default): dQ in a second pass per query tile, no atomics;
            repeated calls are bitwise identical. False: dQ accumulated with fp32 atomics
            inside the dK/dV pass (fewer matmuls, run-to-run differences in the last bits).
        config: override launch configs, ``dict(dkdv=(BLOCK_M, BLOCK_N, warps, stages),
            dq=(...))`` (``dkdv_atomic``, optional: the dK/dV kernel in atomic mode); for
            tuning sweeps.
        dq, dk, dv: optional preallocated gradients (q's / k's shape, dtype and device, any
            strides); the validation poisons them with NaN so an unwritten element fails.

    v may have a head dim D_v of its own (``flashcore.attention`` says so): dP = dO V^T and
    dV = P^T dO run over D_v, S and dQ/dK over q/k's.
    dq has q's shape, dk k's, dv v's (contiguous unless given), in the inputs' dtype. Work is
    O(Sq * Sk), memory O(S): dQ's fp32 buffer (atomic mode) and delta are the only
    temporaries.
    """
    batch, num_q_heads, seqlen_q, head_dim = q.shape
    seqlen_k = k.shape[2]
    _check_grad_out(grad_out, out, q, v, (batch, num_q_heads, seqlen_q, v.shape[3]))
    expected_lse_dtype = lse_dtype(q.dtype)
    if tuple(lse.shape) != (batch, num_q_heads, seqlen_q) or lse.dtype != expected_lse_dtype:
        raise ValueError(
            f"expected lse of shape {(batch, num_q_heads, seqlen_q)} {expected_lse_dtype} "
            f"(the forward's, for {q.dtype} inputs), got {tuple(lse.shape)} {lse.dtype}"
        )
    check_softcap(softcap)
    dq, dk, dv = (
        _gradient_buffer(name, buf, like)
        for name, buf, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v))
    )
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    lse = lse.contiguous()
    # The tile loads inside the loops assume a unit inner stride (any other strides are
    # fine); a tensor strided along the head dim is copied once.
    q, k, v, grad_out = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v, grad_out))
    causal_offset = seqlen_k - seqlen_q if (causal and causal_alignment == "bottom_right") else 0
    dq_acc = None if deterministic else torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    delta = torch.empty((batch, num_q_heads, seqlen_q), dtype=torch.float32, device=q.device)
    _launch_backward(
        grad_out,
        q,
        k,
        v,
        out,
        lse,
        delta,
        dq,
        dk,
        dv,
        dq_acc,
        seqs=None,
        varlen=0,
        causal=causal,
        causal_offset=causal_offset,
        window=window,
        softcap=softcap,
        scale=scale,
        config=config,
    )
    if dq_acc is not None:
        dq.copy_(dq_acc.mul_(_default_scale(scale, q)))
    return dq, dk, dv


def attention_varlen_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    causal_alignment: str = "bottom_right",
    window: int | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    deterministic: bool = True,
    config: dict | None = None,
    dq: torch.Tensor | None = None,
    dk: torch.Tensor | None = None,
    dv: torch.Tensor | None = None,
):
    """Gradients of ``flashcore.attention_varlen``: returns ``(dq, dk, dv)`` in the packed
    layout, ``(total_q, Hq, D)``, ``(total_k, Hkv, D)`` and ``(total_k, Hkv, D_v)``.

    Args:
        grad_out, q, k, v, out: packed as the forward takes them (any strides; ``out`` the
            forward's output, ``grad_out`` of q's shape and dtype).
        lse: the forward's natural-log log-sum-exp in the packed layout ``(Hq, total_q)``:
            row i of sequence b, head h at ``lse[h, cu_seqlens_q[b] + i]``
            (``varlen.attention_varlen_into``, from the forward kernel); float32, float64 for float32 inputs; -inf
            for rows that see no key.
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, causal_alignment,
            window, softcap, scale: exactly as given to the forward (checked there: this
            function trusts the offsets, as the forward's kernels do).
        deterministic, config, dq, dk, dv: as ``attention_backward``.

    Each sequence is differentiated on its own: rows and keys outside it contribute nothing
    to it, a sequence with no keys gets dQ = 0, one with no queries dK = dV = 0. Every row
    of dQ, dK and dV that lies in a sequence is written.
    """
    total_q, num_q_heads, head_dim = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    _check_grad_out(grad_out, out, q, v, (total_q, num_q_heads, v.shape[2]))
    expected_lse_dtype = lse_dtype(q.dtype)
    if tuple(lse.shape) != (num_q_heads, total_q) or lse.dtype != expected_lse_dtype:
        raise ValueError(
            f"expected lse of shape {(num_q_heads, total_q)} {expected_lse_dtype} "
            f"(the varlen forward's, for {q.dtype} inputs), got {tuple(lse.shape)} {lse.dtype}"
        )
    check_softcap(softcap)
    dq, dk, dv = (
        _gradient_buffer(name, buf, like)
        for name, buf, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v))
    )
    if batch <= 0 or total_q == 0 or k.shape[0] == 0 or max_seqlen_q == 0 or max_seqlen_k == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    # Unit inner stride for the tile loads: copied on the packed tensors (before the
    # batch-stride-0 views below, whose copy would be B times larger).
    q, k, v, grad_out = (t if t.stride(2) == 1 else t.contiguous() for t in (q, k, v, grad_out))
    lse = lse.contiguous()
    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    dq_acc = None if deterministic else torch.zeros(q.shape, dtype=torch.float32, device=q.device)

    def view(t):  # (total, H, D) -> (B, H, total, D), batch stride 0
        return t.permute(1, 0, 2).unsqueeze(0).expand(batch, -1, -1, -1)

    def view_lse(t):  # (H, total) -> (B, H, total), batch stride 0
        return t.unsqueeze(0).expand(batch, -1, -1)

    seqs = (cu_seqlens_q[:-1], cu_seqlens_q[1:], cu_seqlens_k[:-1], cu_seqlens_k[1:])
    _launch_backward(
        view(grad_out),
        view(q),
        view(k),
        view(v),
        view(out),
        view_lse(lse),
        view_lse(delta),
        view(dq),
        view(dk),
        view(dv),
        None if dq_acc is None else view(dq_acc),
        seqs=seqs,
        varlen=2 if causal_alignment == "bottom_right" else 1,
        seqlen_q=max_seqlen_q,
        seqlen_k=max_seqlen_k,
        causal=causal,
        causal_offset=0,
        window=window,
        softcap=softcap,
        scale=scale,
        config=config,
    )
    if dq_acc is not None:
        dq.copy_(dq_acc.mul_(_default_scale(scale, q)))
    return dq, dk, dv


def _launch_backward(
    grad_out,
    q,
    k,
    v,
    out,
    lse,
    delta,
    dq,
    dk,
    dv,
    dq_acc,
    *,
    seqs,
    varlen,
    causal,
    causal_offset,
    window,
    softcap,
    scale,
    config,
    seqlen_q=None,
    seqlen_k=None,
):
    """The three kernels on (B, H, S, D) views. ``lse`` and ``delta`` are (B, H, S) views
    with a unit last stride; ``dq_acc`` (atomic mode) an fp32 buffer of q's shape that the
    dK/dV pass adds the unscaled dQ into (the caller multiplies by the scale); None
    selects the deterministic dQ pass. With ``seqs`` (starts/ends of queries and keys per sequence, ``varlen`` 1 top-left / 2
    bottom-right) the kernels run in varlen mode and seqlen_q / seqlen_k are the longest
    lengths, which size the grids."""
    batch, num_q_heads, _, head_dim = q.shape
    num_kv_heads, head_dim_v = k.shape[1], v.shape[3]
    if head_dim_v != head_dim and pads_value_head_dim(q):
        # The zero-padded route, where switched on (PAD_VALUE_HEAD_DIM_ON in _launch.py); the
        # padded columns of dQ/dK/dV come out zero and are dropped.
        width = max(head_dim, head_dim_v)
        padded = [pad_head_dim(t, width) for t in (grad_out, q, k, v, out, dq, dk, dv, dq_acc)]
        _launch_backward(
            *padded[:5], lse, delta, *padded[5:], seqs=seqs, varlen=varlen, causal=causal,
            causal_offset=causal_offset, window=window, softcap=softcap,
            scale=_default_scale(scale, q), config=config, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
        )  # fmt: skip
        for dst, src in zip((dq, dk, dv, dq_acc), padded[5:]):
            copy_head_dim(dst, src)
        return
    seqlen_q = q.shape[2] if seqlen_q is None else seqlen_q
    seqlen_k = k.shape[2] if seqlen_k is None else seqlen_k
    scale = _default_scale(scale, q)
    # Scores in log2 units: q.k * qk_scale, or tanh(q.k * softcap_scale) * qk_scale (softcap).
    qk_scale, softcap_scale = kernel_scales(scale, softcap)
    head_dim_padded = max(16, triton.next_power_of_2(head_dim))
    # v's own head dim (as forward.py): HEAD_DIM_V 0 where it equals q/k's, and the config
    # of the wider head dim where it does not.
    own_v = head_dim_v != head_dim
    head_dim_v_padded = max(16, triton.next_power_of_2(head_dim_v))
    widest_padded = max(head_dim_padded, head_dim_v_padded)
    cfg = (
        config
        if config is not None
        else _pick_config(
            widest_padded,
            q.dtype,
            on_interpreter(q),
            head_dim_v_padded if own_v else 0,
            causal=causal,
            split_qk=head_dim if own_v and head_dim in QK_TAIL else 0,
        )
    )
    deterministic = dq_acc is None
    # Varlen reads rows through per-sequence offsets (a descriptor's zero-filled tail would
    # be the next sequence's rows): the pointer path; so does a v of its own head dim.
    use_tma = (
        seqs is None
        and not own_v
        and cfg.get("USE_TMA", True)
        and tma_compatible((q, k, v, grad_out), head_dim)
    )
    starts_q, ends_q, starts_k, ends_k = seqs if seqs is not None else (None,) * 4
    # lse and delta share one layout: both contiguous (or batch-stride-0 views of contiguous
    # (H, total) tensors), so delta's strides address lse too (a size-1 dim's stride, the
    # only one contiguity leaves free, is never multiplied by a nonzero index).
    stride_lz, stride_lh = delta.stride(0), delta.stride(1)

    pre_m = 64 if head_dim_v_padded <= 128 else 32  # delta = rowsum(dO o O): v's head dim
    _bwd_preprocess[(triton.cdiv(seqlen_q, pre_m) * batch * num_q_heads,)](
        out,
        grad_out,
        delta,
        *out.stride(),
        *grad_out.stride(),
        stride_lz,
        stride_lh,
        num_q_heads,
        seqlen_q,
        HEAD_DIM=head_dim_v,
        HEAD_DIM_PADDED=head_dim_v_padded,
        BLOCK_M=pre_m,
        SeqStartsQ=starts_q,
        SeqEndsQ=ends_q,
        VARLEN=varlen,
    )

    common = dict(
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=head_dim_padded,
        IS_CAUSAL=bool(causal),
        HAS_WINDOW=window is not None,
        FP32_IEEE=q.dtype == torch.float32,
        softcap_scale=softcap_scale,
        SOFTCAP=softcap is not None,
        SeqStartsQ=starts_q,
        SeqEndsQ=ends_q,
        SeqStartsK=starts_k,
        SeqEndsK=ends_k,
        VARLEN=varlen,
        HEAD_DIM_V=head_dim_v if own_v else 0,
        HEAD_DIM_V_PADDED=head_dim_v_padded if own_v else 0,
        # MLA's q/k head dim (192 with a v of its own, so on the pointer path): two tiles of
        # 128 and 64 columns rather than one padded to 256; every other pair takes 0.
        QK_TAIL=QK_TAIL.get(head_dim, 0) if own_v else 0,
    )
    dq_target = dq if deterministic else dq_acc
    bm, bn, warps, stages = cfg["dkdv"] if deterministic else cfg.get("dkdv_atomic", cfg["dkdv"])
    q_desc, do_desc = _descriptors((q, grad_out), bm, head_dim) if use_tma else (None, None)
    # Atomic mode on the TMA path adds each dQ tile with one bulk reduce (dq_acc is ours:
    # contiguous fp32, so its descriptor is valid wherever q's are).
    bulk_dq = use_tma and not deterministic and not on_interpreter(q)
    dq_desc = _descriptors((dq_acc,), bm, head_dim)[0] if bulk_dq else None
    _bwd_dkdv_kernel[(triton.cdiv(seqlen_k, bn) * batch * num_kv_heads,)](
        q,
        k,
        v,
        grad_out,
        lse,
        delta,
        dq_target,
        dk,
        dv,
        q_desc,
        do_desc,
        dq_desc,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *grad_out.stride(),
        *dq_target.stride(),
        *dk.stride(),
        *dv.stride(),
        stride_lz,
        stride_lh,
        num_q_heads,
        num_kv_heads,
        num_q_heads // num_kv_heads,
        seqlen_q,
        seqlen_k,
        causal_offset,
        window or 0,
        qk_scale,
        scale,
        BLOCK_M=bm,
        BLOCK_N=bn,
        num_warps=warps,
        num_stages=stages,
        ATOMIC_DQ=not deterministic,
        USE_TMA=use_tma,
        **common,
    )
    if not deterministic:
        return  # the caller scales dq_acc (a batch-stride-0 view cannot be scaled in place)
    bm, bn, warps, stages = cfg["dq"]
    k_desc, v_desc = _descriptors((k, v), bn, head_dim) if use_tma else (None, None)
    _bwd_dq_kernel[(triton.cdiv(seqlen_q, bm) * batch * num_q_heads,)](
        q,
        k,
        v,
        grad_out,
        lse,
        delta,
        dq,
        k_desc,
        v_desc,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *grad_out.stride(),
        *dq.stride(),
        stride_lz,
        stride_lh,
        num_q_heads,
        num_q_heads // num_kv_heads,
        seqlen_q,
        seqlen_k,
        causal_offset,
        window or 0,
        qk_scale,
        scale,
        BLOCK_M=bm,
        BLOCK_N=bn,
        num_warps=warps,
        num_stages=stages,
        USE_TMA=use_tma,
        **common,
    )
