"""Which keys a query tile sees: the visibility rule and the tile-phase bounds, shared by
the forward (dense and varlen) and the backward's dQ pass.

Query row i sees key j iff j < Sk, and with causal masking j <= i + causal_offset, and with
a sliding window also j > i + causal_offset - window. causal_offset = 0 is SDPA's
top-left alignment, Sk - Sq the bottom-right one of a KV cache; context parallelism passes
arbitrary offsets.

A query tile's keys split into up to three phases, so that the common case builds no mask:

    [key_start, lower_end)     masked: the lower edge of a sliding window
    [full_start, unmasked_end) unmasked: tiles every row of the query tile sees whole
    [unmasked_end, key_end)    masked: the causal diagonal and the end of the keys

The decode and fp8 kernels keep their own loops: decode walks a split of one cache row
(no query tile), fp8 one phase with its mask on every tile. The Gluon kernel
(forward_hopper.py) restates the bounds in Gluon, which cannot call ``@triton.jit`` code.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def visible(
    rows,
    cols,
    seqlen_q,
    seqlen_k,
    causal_offset,
    window,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    """Boolean mask of the (row, col) pairs that attend: in bounds, causal, inside the
    window. rows and cols are broadcastable index tensors."""
    mask = (rows < seqlen_q) & (cols < seqlen_k)
    if IS_CAUSAL:
        mask = mask & (cols <= rows + causal_offset)
    if HAS_WINDOW:  # sliding window: only the `window` most recent keys
        mask = mask & (cols > rows + causal_offset - window)
    return mask


@triton.jit
def key_phases(
    tile_start,
    seqlen_k,
    causal_offset,
    window,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    """(key_start, lower_end, full_start, unmasked_end, key_end) of the query tile whose
    first row is ``tile_start``: the three phases above. Bounds are multiples of BLOCK_N
    except key_end; every range may be empty."""
    full_tiles_end = (seqlen_k // BLOCK_N) * BLOCK_N  # keys [0, this) fill whole tiles
    first_row_sees = tile_start + causal_offset + 1
    if IS_CAUSAL:
        # Every row sees keys j <= tile_start + causal_offset; the last row sees up to
        # tile_start + BLOCK_M - 1 + causal_offset.
        unmasked_end = tl.maximum(
            tl.minimum((first_row_sees // BLOCK_N) * BLOCK_N, full_tiles_end), 0
        )
        key_end = tl.maximum(tl.minimum(tile_start + BLOCK_M + causal_offset, seqlen_k), 0)
    else:
        unmasked_end = full_tiles_end
        key_end = seqlen_k
    if HAS_WINDOW:
        # Row r sees keys j > r + causal_offset - window: the first row's lower edge is the
        # lowest key of the tile; the last row's lower edge is where every row sees all.
        lowest_key = tl.maximum(first_row_sees - window, 0)
        key_start = (lowest_key // BLOCK_N) * BLOCK_N
        last_row_lowest = tile_start + BLOCK_M + causal_offset - window
        full_start = tl.maximum(
            tl.cdiv(tl.maximum(last_row_lowest, 0), BLOCK_N) * BLOCK_N, key_start
        )
        lower_end = tl.minimum(full_start, key_end)
        unmasked_end = tl.maximum(unmasked_end, full_start)
    else:
        key_start = 0
        full_start = 0
        lower_end = 0
    return key_start, lower_end, full_start, unmasked_end, key_end
