"""KV-cache attention (decode and chunked prefill): append, then split-KV attention + combine.

    attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, k_new, v_new)

1. Append: the Sn new keys/values of sequence b go to cache positions
   [cache_seqlens[b], cache_seqlens[b] + Sn), in place.
2. Attend: the Sn queries of sequence b are the last Sn positions of its (appended) cache,
   so query r sees keys j <= cache_seqlens[b] + r (bottom-right causal alignment).

Why split-KV ("flash-decoding"): with Sn = 1 there is one query row per head, so one
program per (batch, KV head) would leave most of the GPU idle while it streams a long
cache. The keys are split into ``num_splits`` contiguous chunks; each program folds one
chunk into a partial (acc, max, sum) exactly like the forward kernel, writes the
un-normalised partial output and its log-sum-exp, and a second kernel combines the
partials of a row:

    lse = log(sum_s exp(lse_s)),   out = sum_s exp(lse_s - lse) * out_s

The combine reads the splits in a fixed order with a fixed tile shape, so results are
bitwise identical run to run (no atomics anywhere).

GQA: one program serves all Hq/Hkv query heads of a KV head, so each K/V tile is read
from memory once per group, not once per query head. Rows of the program's query tile
are (position r, head g) pairs, r-major.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .._checks import check_kvcache_inputs, check_window, on_interpreter
from . import _launch as launch
from ._launch import LaunchCache
from .forward import _kernel_scales, _tanh, check_softcap


@triton.jit
def _decode_split_kernel(
    Q,
    K,
    V,
    SeqLens,
    OutPartial,
    LsePartial,
    Out,
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
    stride_oz,
    stride_oh,
    stride_om,
    stride_ok,
    num_kv_heads,
    group_size,
    seqlen_new,
    num_splits,
    split_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    window=0,
    softcap_scale=0.0,
    KeyMask=None,
    stride_mz=0,
    lengths_include_new=0,
    HAS_WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    HAS_KEY_MASK: tl.constexpr = False,
):
    # Options (defaults off): HAS_WINDOW, a causal sliding window of `window` keys ending at
    # each query's position; SOFTCAP, logits c * tanh(s / c) (scales as in the forward
    # kernel); HAS_KEY_MASK, a (B, S_max) bool row per sequence, False at keys no query may
    # see (padding: left, right, or holes).
    # grid: (num_splits, row tiles, batch * kv heads); splits vary fastest so the programs
    # of one head stream neighbouring chunks of its cache together.
    split = tl.program_id(0)
    row_tile = tl.program_id(1)
    batch_head = tl.program_id(2)
    batch = batch_head // num_kv_heads
    kv_head = batch_head % num_kv_heads

    # Tokens in the cache before this step's append (SeqLens counts the new ones too when
    # nothing is appended: lengths_include_new = 1).
    cache_len = tl.load(SeqLens + batch).to(tl.int32) - lengths_include_new * seqlen_new
    total_keys = cache_len + seqlen_new
    key_lo = split * split_len
    key_hi = tl.minimum(key_lo + split_len, total_keys)

    # Query rows of this tile: t = r * group_size + g  ->  position r, query head g.
    rows = row_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pos = rows // group_size
    q_head = kv_head * group_size + rows % group_size
    row_in = pos < seqlen_new
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    d_in = offs_d < HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)

    q_ptrs = (
        Q
        + batch.to(tl.int64) * stride_qz
        + q_head[:, None].to(tl.int64) * stride_qh
        + pos[:, None].to(tl.int64) * stride_qm
        + offs_d[None, :] * stride_qk
    )
    q = tl.load(q_ptrs, mask=row_in[:, None] & d_in[None, :], other=0.0)
    k_ptrs = (
        K
        + batch.to(tl.int64) * stride_kz
        + kv_head.to(tl.int64) * stride_kh
        + offs_n[:, None].to(tl.int64) * stride_kn
        + offs_d[None, :] * stride_kk
    )
    v_ptrs = (
        V
        + batch.to(tl.int64) * stride_vz
        + kv_head.to(tl.int64) * stride_vh
        + offs_n[:, None].to(tl.int64) * stride_vn
        + offs_d[None, :] * stride_vk
    )

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], dtype=tl.float32)
    # Query at position r sees keys j <= cache_len + r (bottom-right alignment).
    last_visible = cache_len + pos
    if HAS_WINDOW:
        # Keys below the first query's window are skipped whole tiles at a time.
        first_seen = tl.maximum(cache_len - window + 1, 0)
        key_lo = tl.maximum(key_lo, (first_seen // BLOCK_N) * BLOCK_N)
    for start_n in range(key_lo, key_hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)  # split_len is a multiple of BLOCK_N
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < key_hi) & d_in[None, :]
        k = tl.load(k_ptrs + start_n.to(tl.int64) * stride_kn, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k))
        if SOFTCAP:
            s = _tanh(s * softcap_scale)
        visible = (cols[None, :] < key_hi) & (cols[None, :] <= last_visible[:, None])
        if HAS_WINDOW:
            visible = visible & (cols[None, :] > last_visible[:, None] - window)
        if HAS_KEY_MASK:
            valid = tl.load(
                KeyMask + batch.to(tl.int64) * stride_mz + cols, mask=cols < key_hi, other=0
            )
            visible = visible & (valid[None, :] != 0)
        s = tl.where(visible, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: keep NaN out
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs + start_n.to(tl.int64) * stride_vn, mask=kv_mask, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new

    empty = l_i == 0.0
    if SINGLE_SPLIT:
        # One split covers every key: normalise and write the output directly.
        out = acc / tl.where(empty, 1.0, l_i)[:, None]
        o_ptrs = (
            Out
            + batch.to(tl.int64) * stride_oz
            + q_head[:, None].to(tl.int64) * stride_oh
            + pos[:, None].to(tl.int64) * stride_om
            + offs_d[None, :] * stride_ok
        )
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_in[:, None] & d_in[None, :])
    else:
        # Partial of this split, normalised by its own sum, and its log2-sum-exp2 (-inf if
        # the split saw no key for the row). Layout: (B, Hq, Sn, splits[, D]) contiguous.
        part = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
        num_q_heads = num_kv_heads * group_size
        row_index = (
            (batch * num_q_heads + q_head).to(tl.int64) * seqlen_new + pos
        ) * num_splits + split
        tl.store(LsePartial + row_index, lse2, mask=row_in)
        tl.store(
            OutPartial + row_index[:, None] * HEAD_DIM_PADDED + offs_d[None, :],
            part,
            mask=row_in[:, None],
        )


@triton.jit
def _decode_combine_kernel(
    OutPartial,
    LsePartial,
    Out,
    stride_oz,
    stride_oh,
    stride_om,
    stride_ok,
    num_q_heads,
    seqlen_new,
    num_splits,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    SPLITS_PADDED: tl.constexpr,
):
    # One program per output row (batch, query head, position); splits reduced in a fixed
    # order and tile shape: deterministic.
    row = tl.program_id(0).to(tl.int64)
    pos = row % seqlen_new
    head = (row // seqlen_new) % num_q_heads
    batch = row // (seqlen_new * num_q_heads)
    offs_s = tl.arange(0, SPLITS_PADDED)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    s_in = offs_s < num_splits
    lse2 = tl.load(LsePartial + row * num_splits + offs_s, mask=s_in, other=float("-inf"))
    m = tl.max(lse2, 0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2(lse2 - m_use)  # 0 for splits that saw no key
    w_sum = tl.sum(w, 0)
    parts = tl.load(
        OutPartial + (row * num_splits + offs_s[:, None]) * HEAD_DIM_PADDED + offs_d[None, :],
        mask=s_in[:, None],
        other=0.0,
    )
    out = tl.sum(parts * w[:, None], 0) / tl.where(w_sum == 0.0, 1.0, w_sum)
    o_ptrs = Out + batch * stride_oz + head * stride_oh + pos * stride_om + offs_d * stride_ok
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)


def append_to_cache(k_cache, v_cache, cache_seqlens, k_new, v_new) -> None:
    """Write k_new/v_new ``(B, Hkv, Sn, D)`` at positions cache_seqlens[b] + [0, Sn) of each
    sequence's cache, in place, without a host sync (one indexed copy per tensor)."""
    batch, _, seqlen_new, _ = k_new.shape
    positions = cache_seqlens.to(torch.long)[:, None] + torch.arange(
        seqlen_new, device=k_new.device
    )
    batch_index = torch.arange(batch, device=k_new.device)[:, None].expand(batch, seqlen_new)
    # Indexing (batch, :, position) puts the advanced dims first: (B, Sn, Hkv, D).
    k_cache[batch_index, :, positions] = k_new.transpose(1, 2)
    v_cache[batch_index, :, positions] = v_new.transpose(1, 2)


def choose_num_splits(
    batch: int, num_kv_heads: int, row_tiles: int, max_keys: int, block_n: int, num_sms: int
) -> int:
    """Enough splits that the grid fills the GPU about twice over, each split at least
    four key tiles long (shorter splits pay more in partial traffic than they gain)."""
    programs = max(1, batch * num_kv_heads * row_tiles)
    want = math.ceil(2 * num_sms / programs)
    most = max(1, math.ceil(max_keys / (4 * block_n)))
    return int(max(1, min(want, most, 256)))


@functools.cache
def _num_sms(index) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


_SPLIT_PARAMS = list(_decode_split_kernel.arg_names)
_COMBINE_PARAMS = list(_decode_combine_kernel.arg_names)
_DECODE_LAUNCHES = LaunchCache("decode")


class _DecodeEntry:
    __slots__ = (
        "split",
        "combine",
        "split_grid",
        "combine_grid",
        "split_args",
        "combine_args",
        "partial_shape",
        "num_splits",
    )

    def __init__(self, **kw):
        for name, value in kw.items():
            setattr(self, name, value)


def _partials(partial_shape, device):
    """The split partials (outputs and log-sum-exps) as views of one allocation: one
    allocator call per launch instead of two. The output part's size is a multiple of the
    padded head dim (>= 16 floats), so the second view stays 16-byte aligned."""
    rows = math.prod(partial_shape[:-1])
    buf = torch.empty(rows * (partial_shape[-1] + 1), dtype=torch.float32, device=device)
    return buf[: rows * partial_shape[-1]].view(partial_shape), buf[
        rows * partial_shape[-1] :
    ].view(partial_shape[:-1])


def _decode_key(
    q, k_cache, v_cache, cache_seqlens, out, key_padding_mask, num_splits, window, softcap
):
    if (
        not (type(window) is int or window is None)
        or not (num_splits is None or type(num_splits) is int)
        or not (softcap is None or (type(softcap) in (int, float) and 0 < softcap < math.inf))
        or type(cache_seqlens) is not torch.Tensor
        or not (key_padding_mask is None or type(key_padding_mask) is torch.Tensor)
    ):
        return None
    sig = lambda t: (t.shape, t.stride(), t.dtype, t.device, launch.aligned(t))  # noqa: E731
    grad = torch.is_grad_enabled() and (
        q.requires_grad or k_cache.requires_grad or v_cache.requires_grad
    )
    return (
        sig(q),
        sig(k_cache),
        sig(v_cache),
        sig(cache_seqlens),
        None if out is None else sig(out),
        None if key_padding_mask is None else sig(key_padding_mask),
        num_splits,
        window,
        softcap is None,
        grad,
    )


def _decode_cached(e, q, k_cache, v_cache, cache_seqlens, out, key_padding_mask, scale, softcap):
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    stream = launch.current_stream(q.device.index)
    qk_scale, softcap_scale = _kernel_scales(
        1.0 / math.sqrt(q.shape[3]) if scale is None else scale, softcap
    )
    args = list(e.split_args)
    if e.num_splits == 1:
        partial = lse_partial = out
    else:
        partial, lse_partial = _partials(e.partial_shape, q.device)
    args[0:7] = (q, k_cache, v_cache, cache_seqlens, partial, lse_partial, out)
    args[_SPLIT_PARAMS.index("qk_scale")] = qk_scale
    args[_SPLIT_PARAMS.index("softcap_scale")] = softcap_scale
    if key_padding_mask is not None:
        args[_SPLIT_PARAMS.index("KeyMask")] = key_padding_mask
    e.split(e.split_grid, stream, args)
    if e.num_splits > 1:
        args = list(e.combine_args)
        args[0:3] = (partial, lse_partial, out)
        e.combine(e.combine_grid, stream, args)
    return out


def attention_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    k_new: torch.Tensor | None = None,
    v_new: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    window: int | None = None,
    softcap: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
    num_splits: int | None = None,
    check_lengths: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Append new keys/values to a KV cache in place, then attend (bottom-right causal).

    Args:
        q: ``(B, Hq, Sn, D)``: the Sn newest positions' queries (Sn = 1 for decode, more
            for chunked prefill / speculative verification).
        k_cache, v_cache: ``(B, Hkv, S_max, D)``, any strides; modified in place when
            k_new/v_new are given.
        cache_seqlens: ``(B,)`` int32/int64 on q's device: tokens already in each
            sequence's cache, before this call's append.
        k_new, v_new: ``(B, Hkv, Sn, D)``, or both None: then nothing is appended,
            cache_seqlens counts the Sn query positions too, and the queries are the last
            Sn cached positions (query r sees keys j <= cache_seqlens[b] - Sn + r).
        scale: softmax scale; default ``1 / sqrt(D)``.
        window: causal sliding window: query at cache position p sees keys
            ``p - window < j <= p`` (transformers' ``sliding_window``); None: all.
        softcap: logit soft-capping ``softcap * tanh(s / softcap)`` (Gemma 2); None: off.
        key_padding_mask: optional ``(B, S_max)`` bool (or uint8) on q's device, False at
            cache positions no query may see (padding, left, right or in between).
        num_splits: split-KV factor; default chosen from the grid size and the lengths.
        check_lengths: check ``0 <= cache_seqlens`` and ``cache_seqlens + Sn <= S_max``
            (``cache_seqlens <= S_max`` without new tokens) before writing anything (one small device-to-host copy). Pass False inside CUDA
            graph capture, where the caller must guarantee the lengths.
        out: optional preallocated ``(B, Hq, Sn, D)`` output.

    Dtypes: float16, bfloat16 (CUDA); float16 and float32 on CPU under the interpreter.
    Head dims 1..256. GQA/MQA via Hq % Hkv == 0.

    Host cost: with ``check_lengths=False`` and no new tokens, a call whose signature
    (shapes, strides, dtypes, device, alignment, options) was launched before reuses that
    launch and skips the checks, as ``flashcore.attention`` does.

    Raises (before touching the cache): ValueError/TypeError for shapes, dtypes, devices,
    heads, lengths out of range or a cache too small for the new tokens.

    Returns: ``(B, Hq, Sn, D)`` in q's dtype.
    """
    key = None
    if (
        not check_lengths
        and k_new is None
        and v_new is None
        and type(q) is torch.Tensor
        and type(k_cache) is torch.Tensor
        and type(v_cache) is torch.Tensor
        and (out is None or type(out) is torch.Tensor)
        and q.device.type == "cuda"
        and launch.usable(q.device)
    ):
        key = _decode_key(
            q, k_cache, v_cache, cache_seqlens, out, key_padding_mask, num_splits, window, softcap
        )
        entry = _DECODE_LAUNCHES.get(key) if key is not None else None
        if entry is not None:
            return _decode_cached(
                entry, q, k_cache, v_cache, cache_seqlens, out, key_padding_mask, scale, softcap
            )

    new_tokens = check_kvcache_inputs(q, k_cache, v_cache, cache_seqlens, k_new, v_new, out)
    check_window(window, True)
    check_softcap(softcap)
    batch, num_q_heads, seqlen_new, head_dim = q.shape
    num_kv_heads, capacity = k_cache.shape[1], k_cache.shape[2]
    if key_padding_mask is not None and (
        not isinstance(key_padding_mask, torch.Tensor)
        or key_padding_mask.shape != (batch, capacity)
        or key_padding_mask.dtype not in (torch.bool, torch.uint8)
        or key_padding_mask.device != q.device
    ):
        got = (
            (tuple(key_padding_mask.shape), key_padding_mask.dtype, key_padding_mask.device)
            if isinstance(key_padding_mask, torch.Tensor)
            else type(key_padding_mask).__name__
        )
        raise ValueError(
            f"expected key_padding_mask to be a ({batch}, {capacity}) bool tensor on {q.device}, got {got}"
        )
    max_keys = capacity
    if check_lengths and batch > 0:
        lo, hi = (int(x) for x in torch.aminmax(cache_seqlens))
        if lo < 0 or hi + (seqlen_new if new_tokens else 0) > capacity:
            need = (
                "0 <= cache_seqlens and cache_seqlens + Sn <= S_max"
                if new_tokens
                else "0 <= cache_seqlens <= S_max"
            )
            raise ValueError(
                f"expected {need} for every sequence (Sn={seqlen_new}, S_max={capacity}), got "
                f"cache_seqlens in [{lo}, {hi}]; the cache was not modified"
            )
        max_keys = hi + (seqlen_new if new_tokens else 0)
    if new_tokens:
        append_to_cache(k_cache, v_cache, cache_seqlens, k_new, v_new)

    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    qk_scale, softcap_scale = _kernel_scales(scale, softcap)

    group = num_q_heads // num_kv_heads
    head_dim_padded = max(16, triton.next_power_of_2(head_dim))
    interpreted = on_interpreter(q)
    rows = group * seqlen_new
    block_m = max(16, min(64, triton.next_power_of_2(rows)))
    block_n = 32 if interpreted else (64 if head_dim_padded <= 128 else 32)
    row_tiles = triton.cdiv(rows, block_m)
    if num_splits is None:
        sms = 4 if interpreted else _num_sms(q.device)
        num_splits = choose_num_splits(batch, num_kv_heads, row_tiles, max_keys, block_n, sms)
    num_splits = int(max(1, num_splits))
    split_len = triton.cdiv(triton.cdiv(max(1, max_keys), num_splits), block_n) * block_n
    num_splits = triton.cdiv(max(1, max_keys), split_len)  # no split starts past the end

    single = num_splits == 1
    partial_shape = (batch, num_q_heads, seqlen_new, num_splits, head_dim_padded)
    if single:
        out_partial = lse_partial = out  # unused pointers
    else:
        out_partial, lse_partial = _partials(partial_shape, q.device)
    warps = 4
    stages = 1 if interpreted else 3
    if key_padding_mask is not None and key_padding_mask.dtype == torch.bool:
        key_padding_mask = key_padding_mask.view(torch.uint8)  # same bytes; Triton loads bool as i1
    split_grid = (num_splits, row_tiles, batch * num_kv_heads)
    split_params = dict(
        Q=q,
        K=k_cache,
        V=v_cache,
        SeqLens=cache_seqlens,
        OutPartial=out_partial,
        LsePartial=lse_partial,
        Out=out,
        **dict(zip(("stride_qz", "stride_qh", "stride_qm", "stride_qk"), q.stride())),
        **dict(zip(("stride_kz", "stride_kh", "stride_kn", "stride_kk"), k_cache.stride())),
        **dict(zip(("stride_vz", "stride_vh", "stride_vn", "stride_vk"), v_cache.stride())),
        **dict(zip(("stride_oz", "stride_oh", "stride_om", "stride_ok"), out.stride())),
        num_kv_heads=num_kv_heads,
        group_size=group,
        seqlen_new=seqlen_new,
        num_splits=num_splits,
        split_len=split_len,
        qk_scale=qk_scale,
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=head_dim_padded,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        SINGLE_SPLIT=single,
        window=window or 0,
        softcap_scale=softcap_scale,
        KeyMask=key_padding_mask,
        stride_mz=0 if key_padding_mask is None else key_padding_mask.stride(0),
        # Without new tokens the queries are the last Sn cached positions.
        lengths_include_new=0 if new_tokens else 1,
        HAS_WINDOW=window is not None,
        SOFTCAP=softcap is not None,
        HAS_KEY_MASK=key_padding_mask is not None,
    )
    split = _decode_split_kernel[split_grid](**split_params, num_warps=warps, num_stages=stages)
    combine = None
    if not single:
        combine_grid = (batch * num_q_heads * seqlen_new, 1, 1)
        combine_params = dict(
            OutPartial=out_partial,
            LsePartial=lse_partial,
            Out=out,
            **dict(zip(("stride_oz", "stride_oh", "stride_om", "stride_ok"), out.stride())),
            num_q_heads=num_q_heads,
            seqlen_new=seqlen_new,
            num_splits=num_splits,
            HEAD_DIM=head_dim,
            HEAD_DIM_PADDED=head_dim_padded,
            SPLITS_PADDED=max(2, triton.next_power_of_2(num_splits)),
        )
        combine = _decode_combine_kernel[combine_grid](**combine_params, num_warps=4)
    if key is not None:
        split_kernel = launch.direct_kernel(split)
        combine_kernel = launch.direct_kernel(combine) if combine is not None else None
        if split_kernel is not None and (single or combine_kernel is not None):
            # Tensors are filled in per call; only integers derived from the key are kept.
            split_args = [
                None if isinstance(split_params[n], torch.Tensor) else split_params[n]
                for n in _SPLIT_PARAMS
            ]
            combine_args = (
                None
                if single
                else [
                    None if isinstance(combine_params[n], torch.Tensor) else combine_params[n]
                    for n in _COMBINE_PARAMS
                ]
            )
            _DECODE_LAUNCHES.put(
                key,
                _DecodeEntry(
                    split=split_kernel,
                    combine=combine_kernel,
                    split_grid=split_grid,
                    combine_grid=None if single else combine_grid,
                    split_args=tuple(split_args),
                    combine_args=None if single else tuple(combine_args),
                    partial_shape=partial_shape,
                    num_splits=num_splits,
                ),
            )
    return out
