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

Paged KV (PAGED, a constexpr mode of the same split kernel, so dense launches compile to
the code they compiled to before): K/V are page pools ``(num_pages, Hkv, page_size, D)``
and a block table ``(B, max_pages)`` says which page holds positions [j * page_size,
(j + 1) * page_size) of each sequence, as in vLLM and FA's ``page_table``. The pool is
flashcore's (B, H, S, D) with the batch replaced by the page: one page of one head is a
contiguous ``page_size x D`` block, so a key tile inside one page is one contiguous read,
as in the dense cache; FA's ``(num_pages, page_size, Hkv, D)`` pool is the same thing
with other strides (``.transpose(1, 2)``) and runs unchanged. Only the address of a
tile's rows changes (_page_rows): when page_size is a multiple of BLOCK_N a tile never
crosses a page (tiles start at multiples of BLOCK_N), so one block-table entry per tile
is read. Smaller pages that divide the tile (16 tokens at BLOCK_N 64, say) read the
tile's BLOCK_N / page_size ids with one small load and keep each row's offset in its page
fixed, since such tiles span whole pages (_tile_pages); other page sizes look up a page
per key row. Splits, windows, softcap, sinks and the combine are unchanged; the append
writes through the same table.

This file is long because the kernels and their launcher are: the split kernel with its
page-address helpers and the combine (about 300 lines), and ``launch_decode`` (about 200),
which binds dense and paged caches, splits and the combine to one launch.
"""

from __future__ import annotations

import functools
import inspect
import math

import torch
import triton
import triton.language as tl

from .._checks import (
    check_attention_inputs,
    check_scale,
    check_sinks,
    check_softcap,
    check_window,
    on_interpreter,
)
from . import _launch as launch
from ._launch import LaunchCache
from ._softmax import kernel_scales, lse_dtype, online_softmax_tile, softcap_tanh


@triton.jit
def _page_rows(BlockTable, start_n, cols, key_hi, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Where logical key positions ``cols`` (one tile, ``start_n`` its first) live in a page
    pool: (page id, row in the page), int64, for ``BlockTable`` the sequence's row of the
    block table. A tile lies in one page when PAGE_SIZE is a multiple of BLOCK_N (tiles
    start at multiples of BLOCK_N): one id is loaded and the tile's rows are contiguous in
    the page; with smaller pages each row looks up its own page. Rows (or a tile) past the
    sequence's end read nothing and get page 0, which the caller's mask never uses."""
    if PAGE_SIZE % BLOCK_N == 0:
        page = tl.load(BlockTable + start_n // PAGE_SIZE, mask=start_n < key_hi, other=0)
        page = page.to(tl.int64)
    else:
        page = tl.load(BlockTable + cols // PAGE_SIZE, mask=cols < key_hi, other=0).to(tl.int64)
    return page, (cols % PAGE_SIZE).to(tl.int64)


@triton.jit
def _tile_pages(BlockTable, start_n, key_hi, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The ids of the BLOCK_N // PAGE_SIZE pages a key tile spans when PAGE_SIZE divides
    BLOCK_N: one small contiguous load per tile instead of one gather per key row. Pages
    past the sequence's end read nothing and get page 0, which the caller's mask never
    uses."""
    first = start_n + tl.arange(0, BLOCK_N // PAGE_SIZE) * PAGE_SIZE
    ids = tl.load(
        BlockTable + start_n // PAGE_SIZE + tl.arange(0, BLOCK_N // PAGE_SIZE),
        mask=first < key_hi,
        other=0,
    )
    return ids.to(tl.int64)


@triton.jit
def _page_row_offsets(page_offsets, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """One offset per page -> the same offset for each of the page's PAGE_SIZE key rows."""
    per_row = tl.broadcast_to(page_offsets[:, None], (BLOCK_N // PAGE_SIZE, PAGE_SIZE))
    return tl.reshape(per_row, (BLOCK_N,))


@triton.jit(do_not_specialize=["uniform_len"])
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
    uniform_len=0,
    lse_offset=0,
    HAS_WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False,
    HAS_KEY_MASK: tl.constexpr = False,
    UNIFORM: tl.constexpr = False,
    Sinks=None,
    HAS_SINKS: tl.constexpr = False,
    BlockTable=None,
    stride_bz=0,
    PAGED: tl.constexpr = False,
    PAGE_SIZE: tl.constexpr = 1,
    Lse=None,
    STORE_LSE: tl.constexpr = False,
):
    # Options (defaults off): HAS_WINDOW, a causal sliding window of `window` keys ending at
    # each query's position; SOFTCAP, logits c * tanh(s / c) (scales as in the forward
    # kernel); HAS_KEY_MASK, a (B, S_max) bool row per sequence, False at keys no query may
    # see (padding: left, right, or holes); UNIFORM, every sequence holds `uniform_len`
    # tokens (SeqLens unused: no lengths tensor to build or read; the value is not
    # specialized on, so a cache growing by one token per step reuses one binary); PAGED,
    # K/V are page pools (num_pages, Hkv, PAGE_SIZE, D) read through BlockTable (see
    # _page_rows; the batch strides of K/V are then the page strides); STORE_LSE, a
    # single split also writes each row's natural-log log-sum-exp to Lse ((B, Hq, Sn)
    # contiguous; with several splits the combine writes it).
    # grid: (num_splits, row tiles, batch * kv heads); splits vary fastest so the programs
    # of one head stream neighbouring chunks of its cache together.
    split = tl.program_id(0)
    row_tile = tl.program_id(1)
    batch_head = tl.program_id(2)
    batch = batch_head // num_kv_heads
    kv_head = batch_head % num_kv_heads

    # Tokens in the cache before this step's append (SeqLens counts the new ones too when
    # nothing is appended: lengths_include_new = 1).
    if UNIFORM:
        cache_len = uniform_len - lengths_include_new * seqlen_new
    else:
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
    # Pages smaller than a key tile that tile it evenly: a tile spans whole pages, so a key
    # row's place in its page depends only on the row (offs_n % PAGE_SIZE), not on the tile.
    SUB_TILE_PAGES: tl.constexpr = PAGED and PAGE_SIZE < BLOCK_N and BLOCK_N % PAGE_SIZE == 0
    if SUB_TILE_PAGES:
        # In-page offsets fixed here; per tile only the pages' offsets (_tile_pages) change.
        in_page = (offs_n % PAGE_SIZE)[:, None].to(tl.int64)
        k_ptrs = (
            K + kv_head.to(tl.int64) * stride_kh + in_page * stride_kn + offs_d[None, :] * stride_kk
        )
        v_ptrs = (
            V + kv_head.to(tl.int64) * stride_vh + in_page * stride_vn + offs_d[None, :] * stride_vk
        )
        BlockTable += batch.to(tl.int64) * stride_bz
    elif PAGED:
        # Rows are placed per tile through the block table (_page_rows).
        k_ptrs = K + kv_head.to(tl.int64) * stride_kh + offs_d[None, :] * stride_kk
        v_ptrs = V + kv_head.to(tl.int64) * stride_vh + offs_d[None, :] * stride_vk
        BlockTable += batch.to(tl.int64) * stride_bz
    else:
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

    if HAS_SINKS:
        # gpt-oss sinks (see forward.py): split 0 starts each row's softmax at its head's
        # sink, so the combine, which adds the splits' denominators, counts it once.
        sink = tl.load(Sinks + q_head, mask=row_in, other=0.0).to(tl.float32)
        m_i = tl.where(split == 0, sink * 1.4426950408889634, float("-inf"))
        l_i = tl.where(split == 0, 1.0, 0.0) + tl.zeros([BLOCK_M], dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], dtype=tl.float32)
    # Query at position r sees keys j <= cache_len + r (bottom-right alignment).
    last_visible = cache_len + pos
    if HAS_WINDOW:
        # Keys below the first query's window are skipped whole tiles at a time.
        first_seen = tl.maximum(cache_len - window + 1, 0)
        key_lo = tl.maximum(key_lo, (first_seen // BLOCK_N) * BLOCK_N)
    if SUB_TILE_PAGES:
        # Carried one tile ahead, as below (two ahead, sm_90 lost the async K/V copies).
        pages_next = _tile_pages(BlockTable, key_lo, key_hi, PAGE_SIZE, BLOCK_N)
    elif PAGED:
        # The block-table lookup is carried one tile ahead of the tile that uses it. Looked
        # up inside its own tile, Triton's pipeliner turned it into an async copy that the
        # tile's K/V copies waited on, which left one K/V tile in flight (a wait for every
        # copy at each step) where the dense cache keeps two; carried, the K/V copies are
        # pipelined two tiles deep as in the dense cache (sm_90 TTGIR: async_wait num 2,
        # not 0).
        page_next, row_next = _page_rows(
            BlockTable, key_lo, key_lo + offs_n, key_hi, PAGE_SIZE, BLOCK_N
        )
    for start_n in range(key_lo, key_hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)  # split_len is a multiple of BLOCK_N
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < key_hi) & d_in[None, :]
        if SUB_TILE_PAGES:
            pages = pages_next
            pages_next = _tile_pages(BlockTable, start_n + BLOCK_N, key_hi, PAGE_SIZE, BLOCK_N)
            k_rows = _page_row_offsets(pages, PAGE_SIZE, BLOCK_N) * stride_kz
            k = tl.load(k_ptrs + k_rows[:, None], mask=kv_mask, other=0.0)
        elif PAGED:
            page = page_next
            row = row_next
            page_next, row_next = _page_rows(
                BlockTable, start_n + BLOCK_N, cols + BLOCK_N, key_hi, PAGE_SIZE, BLOCK_N
            )
            k_rows = page * stride_kz + row * stride_kn
            k = tl.load(k_ptrs + k_rows[:, None], mask=kv_mask, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n.to(tl.int64) * stride_kn, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k))
        if SOFTCAP:
            s = softcap_tanh(s * softcap_scale, PRECISE=Q.dtype.element_ty == tl.float32)
        visible = (cols[None, :] < key_hi) & (cols[None, :] <= last_visible[:, None])
        if HAS_WINDOW:
            visible = visible & (cols[None, :] > last_visible[:, None] - window)
        if HAS_KEY_MASK:
            valid = tl.load(
                KeyMask + batch.to(tl.int64) * stride_mz + cols, mask=cols < key_hi, other=0
            )
            visible = visible & (valid[None, :] != 0)
        s = tl.where(visible, s * qk_scale, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_tile(s, m_i, l_i, qk_scale, PRESCALED=True)
        if SUB_TILE_PAGES:
            v_rows = _page_row_offsets(pages, PAGE_SIZE, BLOCK_N) * stride_vz
            v = tl.load(v_ptrs + v_rows[:, None], mask=kv_mask, other=0.0)
        elif PAGED:
            v_rows = page * stride_vz + row * stride_vn
            v = tl.load(v_ptrs + v_rows[:, None], mask=kv_mask, other=0.0)
        else:
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
        if STORE_LSE:
            lse2 = m_i + tl.math.log2(tl.where(empty, 1.0, l_i))
            row_index = (batch * num_kv_heads * group_size + q_head).to(tl.int64) * seqlen_new + pos
            _store_lse(Lse + row_index, lse2, empty, row_in)
    else:
        # Partial of this split, normalised by its own sum, and its log2-sum-exp2 (-inf if
        # the split saw no key for the row). Layout: (B, Hq, Sn, splits[, D]) contiguous.
        part = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
        num_q_heads = num_kv_heads * group_size
        row_index = (
            (batch * num_q_heads + q_head).to(tl.int64) * seqlen_new + pos
        ) * num_splits + split
        tl.store(LsePartial + lse_offset + row_index, lse2, mask=row_in)
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
    lse_offset,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    SPLITS_PADDED: tl.constexpr,
    Lse=None,
    STORE_LSE: tl.constexpr = False,
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
    lse2 = tl.load(
        LsePartial + lse_offset + row * num_splits + offs_s, mask=s_in, other=float("-inf")
    )
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
    if STORE_LSE:  # the row's log2-sum-exp2 over every split, as natural log
        empty = w_sum == 0.0
        _store_lse(Lse + row, m_use + tl.math.log2(tl.where(empty, 1.0, w_sum)), empty, True)


@triton.jit
def _store_lse(ptrs, lse2, empty, mask):
    """Store a log2-unit log-sum-exp as the natural-log one flashcore's kernels return (-inf
    for a row that saw no key), in the dtype of ``ptrs`` (float64 for float32 inputs, see
    lse_dtype: the sum converted in float64, as the forward kernel does)."""
    if ptrs.dtype.element_ty == tl.float64:
        lse = lse2.to(tl.float64) / tl.full(lse2.shape, 1.4426950408889634, tl.float64)
    else:
        lse = lse2 / 1.4426950408889634
    tl.store(ptrs, tl.where(empty, float("-inf"), lse), mask=mask)


def append_to_cache(k_cache, v_cache, cache_seqlens, k_new, v_new, block_table=None) -> None:
    """Write k_new/v_new ``(B, Hkv, Sn, D)`` at positions cache_seqlens[b] + [0, Sn) of each
    sequence's cache, in place, without a host sync (one indexed copy per tensor). With a
    ``block_table`` the caches are page pools ``(num_pages, Hkv, page_size, D)``: position p
    of sequence b is row p % page_size of page block_table[b, p // page_size]."""
    batch, _, seqlen_new, _ = k_new.shape
    positions = cache_seqlens.to(torch.long)[:, None] + torch.arange(
        seqlen_new, device=k_new.device
    )
    if block_table is None:
        index = torch.arange(batch, device=k_new.device)[:, None].expand(batch, seqlen_new)
    else:
        page_size = k_cache.shape[2]
        index = block_table.gather(1, positions // page_size).to(torch.long)
        positions = positions % page_size
    # Indexing (batch or page, :, position) puts the advanced dims first: (B, Sn, Hkv, D).
    k_cache[index, :, positions] = k_new.transpose(1, 2)
    v_cache[index, :, positions] = v_new.transpose(1, 2)


# A cache this short (keys x head dim per (batch, KV head)) runs as one split: one launch,
# no partials, no combine. Measured on the H100 (bf16, graph replay): at 640 keys, D64 a
# single split costs 2.7-3.2 us more GPU time than the best split count, while the second
# launch and the partials' allocation cost about 10 us of host time per call: in eager
# generation, which is host-bound, one launch wins.
SINGLE_SPLIT_ELEMENTS = 64 * 1024


def choose_num_splits(
    batch: int,
    num_kv_heads: int,
    row_tiles: int,
    max_keys: int,
    block_n: int,
    num_sms: int,
    head_dim: int = 0,
) -> int:
    """About one program per SM (the grid filled once, not more: a second wave of short
    splits pays in partial traffic and combine work more than it gains), each split at
    least one key tile long; one split for a short cache (``SINGLE_SPLIT_ELEMENTS``).
    Measured on the H100 (tools/decode_splits.py, graph replay, bf16 D128/D64): at the
    decode shapes of perf.json the best split count was within one power of two of this,
    and at it the kernel matched or beat SDPA's cuDNN/flash backends. Short caches trade
    GPU time for host time (SINGLE_SPLIT_ELEMENTS): at B1/B8 Hq16/Hkv4 Sk640 D64, the e2e
    model's shape, one split takes 8.6-8.9 us of GPU time in graph replay against 5.3-6.2
    for 4-8 splits and 6.4-6.7 for cuDNN (decode_splits.json, f2502d2), so under CUDA graphs
    that choice loses to cuDNN."""
    if max_keys * head_dim <= SINGLE_SPLIT_ELEMENTS:
        return 1
    programs = max(1, batch * num_kv_heads * row_tiles)
    want = max(1, num_sms // programs)
    most = max(1, -(-max_keys // block_n))
    return int(min(want, most, 256))


@functools.cache
def _num_sms(index) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


_DECODE_LAUNCHES = LaunchCache("decode")


# Plans per exact call signature (every size, stride, dtype, device, pointer alignment and
# option of the call) for calls with a lengths tensor: a decode step of a static cache (the
# same tensors every step, the lengths in device memory) finds its whole launch here and
# only allocates the split partials, puts its tensors into the argument lists and calls the
# launchers. A plan is the argument lists of a launch of that signature with the tensor
# slots emptied (no tensor is kept alive by it) plus its grids, partials' size and compiled
# kernels; its signature holds every input it was derived from, so it cannot serve a call
# of other sizes. Calls without a lengths tensor (the cache is exactly their tensors, which
# usually grow by a token per step: a new signature every step) plan per call. The cache
# stays small: a caller walking through many signatures never makes it hold thousands (the
# garbage collector's passes over them cost more than planning).
class _PlanCache(LaunchCache):
    """A LaunchCache that starts over at MAX_PLANS entries."""

    MAX_PLANS = 64

    def put(self, key, entry) -> None:
        with self._lock:
            if len(self._entries) >= self.MAX_PLANS:
                self._entries.clear()
            self._entries[key] = entry


_DECODE_PLANS = _PlanCache("decode plans")


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _aligned(t) -> bool:
    return t is not None and t.data_ptr() & 15 == 0


def _signature(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)


def _tensor_slots(kernel, names) -> tuple:
    params = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    return tuple(params.index(name) for name in names)


# Where each call's tensors go in the kernels' argument lists (parameter order).
_SPLIT_TENSORS = ("Q", "K", "V", "SeqLens", "OutPartial", "LsePartial", "Out")
_SPLIT_SLOTS = _tensor_slots(
    _decode_split_kernel, (*_SPLIT_TENSORS, "KeyMask", "Sinks", "BlockTable", "Lse")
)
_COMBINE_SLOTS = _tensor_slots(_decode_combine_kernel, ("OutPartial", "LsePartial", "Out", "Lse"))


def _emptied(args, slots) -> tuple:
    template = list(args)
    for slot in slots:
        template[slot] = None
    return tuple(template)


def _launch_planned(plan, q, k_cache, v_cache, seqlens, out, key_mask, sinks, table, lse):
    """Launch a call through its plan (see ``_DECODE_PLANS``) on the current stream."""
    entry, split_grid, combine_grid, partial_numel, split_template, combine_template = plan
    if key_mask is not None and key_mask.dtype == torch.bool:
        key_mask = key_mask.view(torch.uint8)
    if table is not None and table.stride(1) != 1 and table.shape[1] > 1:
        table = table.contiguous()
    partial = out
    if partial_numel:
        partial = torch.empty(partial_numel, dtype=torch.float32, device=q.device)
    args = list(split_template)
    tensors = (q, k_cache, v_cache, seqlens, partial, partial, out, key_mask, sinks, table, lse)
    for slot, tensor in zip(_SPLIT_SLOTS, tensors):
        args[slot] = tensor
    stream = launch.current_stream(q.device.index)
    entry[0](split_grid, stream, args)
    if partial_numel:
        args = list(combine_template)
        for slot, tensor in zip(_COMBINE_SLOTS, (partial, partial, out, lse)):
            args[slot] = tensor
        entry[1](combine_grid, stream, args)
    return out


def _remember_plan(signature, entry, split_grid, combine_grid, partial, split_args, combine_args):
    partial_numel = 0 if combine_args is None else partial.numel()
    split_template = _emptied(split_args, _SPLIT_SLOTS)
    combine_template = None if combine_args is None else _emptied(combine_args, _COMBINE_SLOTS)
    plan = (entry, split_grid, combine_grid, partial_numel, split_template, combine_template)
    _DECODE_PLANS.put(signature, plan)


def launch_decode(
    q,
    k_cache,
    v_cache,
    seqlens,
    uniform_len,
    out,
    key_mask,
    scale,
    window,
    softcap,
    num_splits,
    lengths_include_new,
    max_keys,
    validated,
    sinks=None,
    block_table=None,
    lse=None,
):
    """Plan and launch the split (+ combine) kernels on inputs of consistent shapes.

    The compiled kernels are cached per Triton specialization class of the call (dtypes,
    devices, 16-byte alignment, the class of every int argument: value 1, divisible by 16,
    i32/i64; constexprs), not per exact size, so decode steps whose cache grows by one
    token reuse one entry; the plan (splits, grid, partial sizes) is recomputed per call
    from the sizes, so no entry can hold another call's sizes; calls with a lengths tensor
    keep their plan per exact signature too (``_DECODE_PLANS``): their repeats skip planning.
    ``validated``: the inputs went through the full checks; if not, a call that misses the
    caches returns None before doing anything (the caller validates and calls again). ``block_table``: K/V are
    page pools ``(num_pages, Hkv, page_size, D)`` read through it (``max_keys`` then counts
    logical positions). ``lse``: a ``(B, Hq, Sn)`` contiguous tensor of ``lse_dtype(q.dtype)``
    that receives each row's natural-log log-sum-exp, or None."""
    interpreted = on_interpreter(q)
    signature = None
    if (
        not interpreted
        and seqlens is not None  # without one, the cache is its tensors: they usually grow
        and (scale is None or type(scale) in (float, int))
        and launch.usable(q.device)
    ):
        signature = (
            tuple(map(_signature, (q, k_cache, v_cache, out, seqlens, key_mask, sinks))),
            _signature(block_table),
            _signature(lse),
            uniform_len,
            max_keys,
            lengths_include_new,
            scale,
            window,
            softcap,
            num_splits,
        )
        plan = _DECODE_PLANS.get(signature)
        if plan is not None:
            return _launch_planned(
                plan, q, k_cache, v_cache, seqlens, out, key_mask, sinks, block_table, lse
            )
    batch, num_q_heads, seqlen_new, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    head_dim_padded = max(16, _next_pow2(head_dim))
    rows = group * seqlen_new
    block_m = max(16, min(64, _next_pow2(rows)))
    block_n = 32 if interpreted else (64 if head_dim_padded <= 128 else 32)
    row_tiles = -(-rows // block_m)
    keys = max(1, max_keys)
    if num_splits is None:
        sms = 4 if interpreted else _num_sms(q.device.index)
        num_splits = choose_num_splits(batch, num_kv_heads, row_tiles, keys, block_n, sms, head_dim)
    num_splits = max(1, int(num_splits))
    per_split = -(-keys // num_splits)
    split_len = -(-per_split // block_n) * block_n
    num_splits = -(-keys // split_len)  # no split starts past the end
    single = num_splits == 1
    splits_padded = max(2, _next_pow2(num_splits))
    if key_mask is not None and key_mask.dtype == torch.bool:
        key_mask = key_mask.view(torch.uint8)  # same bytes; Triton loads bool as i1
    window_arg = window or 0
    stride_mz = 0 if key_mask is None else key_mask.stride(0)
    strides = (*q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride())
    uniform = seqlens is None
    paged = block_table is not None
    if paged and block_table.stride(1) != 1 and block_table.shape[1] > 1:
        block_table = block_table.contiguous()  # the kernel steps through a row by 1
    page_size = k_cache.shape[2] if paged else 1
    stride_bz = block_table.stride(0) if paged else 0
    # The split partials, one float32 allocation: un-normalised outputs, layout
    # (B, Hq, Sn, splits, D_padded), then the log-sum-exps (B, Hq, Sn, splits) from
    # element lse_offset on (a multiple of 16 floats: aligned).
    lse_offset = 0 if single else batch * num_q_heads * seqlen_new * num_splits * head_dim_padded

    entry = key = None
    if not interpreted and launch.usable(q.device):
        ints = (
            *strides,
            num_kv_heads,
            group,
            seqlen_new,
            num_splits,
            split_len,
            window_arg,
            stride_mz,
            lengths_include_new,
            num_q_heads,
            stride_bz,
        )
        key = (
            q.get_device(),
            k_cache.get_device(),
            v_cache.get_device(),
            out.get_device(),
            q.dtype,
            k_cache.dtype,
            v_cache.dtype,
            out.dtype,
            _aligned(q),
            _aligned(k_cache),
            _aligned(v_cache),
            _aligned(out),
            None if uniform else (seqlens.dtype, seqlens.get_device(), _aligned(seqlens)),
            None if key_mask is None else (key_mask.get_device(), _aligned(key_mask)),
            launch.int_classes(ints),
            launch.int_type(uniform_len),
            launch.int_class(lse_offset),
            head_dim,
            block_m,
            block_n,
            single,
            0 if single else splits_padded,
            window is not None,
            softcap is not None,
            None if sinks is None else (sinks.get_device(), _aligned(sinks)),
            None
            if not paged
            else (block_table.get_device(), block_table.dtype, _aligned(block_table), page_size),
            None if lse is None else (lse.get_device(), lse.dtype, _aligned(lse)),
        )
        entry = _DECODE_LAUNCHES.get(key)
    if entry is None and not validated:
        return None

    qk_scale, softcap_scale = kernel_scales(
        1.0 / math.sqrt(head_dim) if scale is None else scale, softcap
    )
    if single:
        partial = out  # unused pointer
    else:
        partial = torch.empty(
            lse_offset + lse_offset // head_dim_padded, dtype=torch.float32, device=q.device
        )
    split_grid = (num_splits, row_tiles, batch * num_kv_heads)
    split_args = [
        q,
        k_cache,
        v_cache,
        seqlens,
        partial,
        partial,
        out,
        *strides,
        num_kv_heads,
        group,
        seqlen_new,
        num_splits,
        split_len,
        qk_scale,
        head_dim,
        head_dim_padded,
        block_m,
        block_n,
        single,
        window_arg,
        softcap_scale,
        key_mask,
        stride_mz,
        lengths_include_new,
        uniform_len,
        lse_offset,
        window is not None,
        softcap is not None,
        key_mask is not None,
        uniform,
        sinks,
        sinks is not None,
        block_table,
        stride_bz,
        paged,
        page_size,
        lse,
        lse is not None,
    ]
    combine_grid = (batch * num_q_heads * seqlen_new, 1, 1)
    combine_args = None
    if not single:
        combine_args = [
            partial,
            partial,
            out,
            *strides[12:16],
            num_q_heads,
            seqlen_new,
            num_splits,
            lse_offset,
            head_dim,
            head_dim_padded,
            splits_padded,
            lse,
            lse is not None,
        ]
    if entry is not None:
        if signature is not None:
            _remember_plan(
                signature, entry, split_grid, combine_grid, partial, split_args, combine_args
            )
        stream = launch.current_stream(q.device.index)
        entry[0](split_grid, stream, split_args)
        if not single:
            entry[1](combine_grid, stream, combine_args)
        return out

    split = _decode_split_kernel[split_grid](
        *split_args, num_warps=4, num_stages=1 if interpreted else 3
    )
    combine = None
    if not single:
        combine = _decode_combine_kernel[combine_grid](*combine_args, num_warps=4)
    if key is not None:
        split_kernel = launch.direct_kernel(split)
        combine_kernel = launch.direct_kernel(combine) if combine is not None else None
        if split_kernel is not None and (single or combine_kernel is not None):
            entry = (split_kernel, combine_kernel)
            _DECODE_LAUNCHES.put(key, entry)
            if signature is not None:
                _remember_plan(
                    signature, entry, split_grid, combine_grid, partial, split_args, combine_args
                )
    return out


def consistent(q, k_cache, v_cache, seqlens, out, key_mask, block_table=None) -> bool:
    """The shape relations a validated call established that a cache hit does not prove
    (the key holds classes, not sizes): a cheap check before a launch without the full
    validation. Anything else goes through the full checks, which raise."""
    qs, ks, bt = q.shape, k_cache.shape, block_table
    return (
        len(qs) == 4
        and len(ks) == 4
        and v_cache.shape == ks
        and qs[3] == ks[3]
        and ks[1] > 0
        and qs[1] % ks[1] == 0
        and qs[0] > 0
        and qs[1] > 0
        and qs[2] > 0
        and (seqlens is None or seqlens.shape == (qs[0],))
        and (out is None or out.shape == qs)
        and (key_mask is None or (bt is None and key_mask.shape == (qs[0], ks[2])))
        and (
            qs[0] == ks[0]
            if bt is None  # else page pools (num_pages, Hkv, page_size, D), a (B, pages) table
            else type(bt) is torch.Tensor
            and (bt.dtype, bt.device, bt.dim()) == (torch.int32, q.device, 2)
            and bt.shape[0] == qs[0]
            and bt.shape[1] > 0
            and ks[0] > 0
        )
    )


def plain_options(window, softcap, num_splits, sinks=None, num_q_heads=0) -> bool:
    return (
        (window is None or (type(window) is int and window > 0))
        and (softcap is None or (type(softcap) in (int, float) and 0 < softcap < math.inf))
        and (num_splits is None or type(num_splits) is int)
        and (
            sinks is None
            or (
                type(sinks) is torch.Tensor
                and sinks.dtype == torch.float32
                and sinks.shape == (num_q_heads,)
                and sinks.is_contiguous()
            )
        )
    )


def attend_full_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    window: int | None = None,
    softcap: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
    num_splits: int | None = None,
    sinks: torch.Tensor | None = None,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
):
    """Decode over a cache that holds exactly its ``Sk`` keys for every sequence (what a
    transformers cache step and ``flashcore.ops`` pass): ``q`` ``(B, Hq, Sq, D)`` are the
    last Sq positions of ``k``/``v`` ``(B, Hkv, Sk, D)`` (bottom-right causal), with the
    same options as :func:`attention_with_kvcache` (``key_padding_mask`` ``(B, Sk)``).
    No lengths tensor is built or read (the kernel gets Sk as an unspecialized integer),
    so a call is one split launch (+ one combine launch when the cache is split) and a
    cache growing by one token per step reuses one compiled kernel. ``return_lse``: return
    ``(out, lse)``, lse ``(B, Hq, Sq)`` the natural-log log-sum-exp of each row's scaled
    scores, as :func:`flashcore.attention` returns it (float32; float64 for float32 inputs).
    ``out``: a ``(B, Hq, Sq, D)`` tensor of q's dtype and device, any strides, to write the
    result into (default: a new contiguous one).

    Raises as :func:`attention_with_kvcache` for bad inputs."""
    if scale is not None:  # before the cached path, which skips the other checks
        check_scale(scale)
    seqlen_k = k.shape[2] if isinstance(k, torch.Tensor) and k.dim() == 4 else 0
    if (
        type(q) is torch.Tensor
        and type(k) is torch.Tensor
        and type(v) is torch.Tensor
        and (key_padding_mask is None or type(key_padding_mask) is torch.Tensor)
        and q.device.type == "cuda"
        and consistent(q, k, v, None, out, key_padding_mask)
        and plain_options(window, softcap, num_splits, sinks, q.shape[1])
        and (sinks is None or sinks.device == q.device)
        and (out is None or (type(out) is torch.Tensor and out.dtype == q.dtype))
        and (out is None or out.device == q.device)
    ):
        dest = launch.new_output(q, q) if out is None else out
        lse = new_lse(q) if return_lse else None
        done = launch_decode(
            q,
            k,
            v,
            None,
            seqlen_k,
            dest,
            key_padding_mask,
            scale,
            window,
            softcap,
            num_splits,
            1,
            seqlen_k,
            False,
            sinks=sinks,
            lse=lse,
        )
        if done is not None:
            return (done, lse) if return_lse else done
    check_attention_inputs(q, k, v, max_head_dim=256)
    sinks = check_sinks(sinks, q)
    if q.dtype == torch.float32 and q.device.type == "cuda":
        raise TypeError("expected float16 or bfloat16 for KV-cache attention on CUDA, got float32")
    check_window(window, True)
    check_softcap(softcap)
    check_key_mask(key_padding_mask, q, seqlen_k)
    if q.shape[2] > seqlen_k:
        raise ValueError(f"expected Sq <= Sk, got Sq={q.shape[2]}, Sk={seqlen_k}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif not (
        isinstance(out, torch.Tensor)
        and out.shape == q.shape
        and out.dtype == q.dtype
        and out.device == q.device
    ):
        got = (tuple(out.shape), out.dtype, out.device) if isinstance(out, torch.Tensor) else out
        raise ValueError(
            f"expected out to be a {tuple(q.shape)} {q.dtype} tensor on {q.device}, got {got}"
        )
    lse = new_lse(q) if return_lse else None
    if out.numel() > 0:
        launch_decode(
            q,
            k,
            v,
            None,
            seqlen_k,
            out,
            key_padding_mask,
            scale,
            window,
            softcap,
            num_splits,
            1,
            seqlen_k,
            True,
            sinks=sinks,
            lse=lse,
        )
    return (out, lse) if return_lse else out


def new_lse(q: torch.Tensor) -> torch.Tensor:
    """An uninitialized ``(B, Hq, Sq)`` tensor of ``lse_dtype(q.dtype)`` for the decode kernels'
    log-sum-exp (``launch_decode``'s ``lse``)."""
    return torch.empty(q.shape[:3], dtype=lse_dtype(q.dtype), device=q.device)


def check_key_mask(key_padding_mask, q, capacity, paged=False) -> None:
    batch = q.shape[0]
    if paged and key_padding_mask is not None:
        raise ValueError(
            "key_padding_mask is not supported with a block_table (paged KV): leave the "
            "masked positions out of cache_seqlens, or use a dense cache"
        )
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
