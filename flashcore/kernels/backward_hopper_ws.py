"""A warp-specialized Gluon Hopper backward: FlashAttention-3's division of labour.

The math, grid, masks and causal skip are the other Gluon backwards' (backward_hopper.py's
docstring). One program owns a block of 128 keys and walks the query blocks that see it; it
runs three partitions. This file is long because it holds all of them, the two consumers
(rows split at D64/D128, columns at D256) and the launcher: they share one protocol of
barriers, which reads best in one place.

    consumers (8 warps = 2 warpgroups, the default partition; 240 registers a thread)
        each warpgroup owns 64 of the block's keys. Per step: wait for the step's Q and dO;
        S^T = K Q^T and dP^T = V dO^T (async wgmma, keys x queries: FlashAttention-3's
        SdP_swapAB), accumulated onto -lse / scale and -delta so that no row vector is held
        through the step; P^T in registers is the A operand of dV += P^T dO at once (P never
        goes through shared memory); dS^T goes to shared memory for dQ = dS K, which needs
        both warpgroups' keys (the step's one barrier), and is the A operand of dK += dS^T Q
        from registers at D128, from that shared copy at D64 (``DK_FROM_SMEM_FOR``); dQ's
        fp32 tile into a shared buffer. No copy, no atomic.
    loader (1 warp, 24 registers)
        K and V once; then every step's Q and dO tiles by TMA into a 2-stage ring, each
        stage refilled once the consumers have released it, with the step's lse (divided
        by the scale) and delta rows stored beside it (the consumers read them from shared memory).
    dQ writer (1 warp, 24 registers)
        adds each step's dQ tile from shared memory into the fp32 dQ buffer in global memory
        with one bulk TMA reduce-add (kernels/_gluon_tma.py), waits until the copy engine has
        read it, and hands the buffer back.

Around the kernel: delta = rowsum(dO o O) before it (the Triton backward's preprocess), and
dQ = scale * buffer in the input dtype after it (``backward.dq_postprocess``, one pass). The
deterministic mode writes each dQ tile's first add with a plain TMA store, so its buffer is
not zeroed first (zeroed only where some query tile sees no key); the atomic mode zeroes it.
Together 87-89 us a call at B*S 16K, H*D 2048 (133-141 us with the zeroing and PyTorch's
conversion; logs/backward_breakdown_*.json, H200).

The consumers signal both workers at the step's one barrier:

- at step t's barrier both warpgroups have passed their S wait of step t, which retired
  their step t-1 dK (the last reader of step t-1's Q; dV, the last of its dO, retired
  within step t-1), and have stored step t-1's dQ tile (at the end of step t-1, after
  waiting on its buffer's ``dq_empty``; the fence before the barrier orders the stores
  before the copy engine's read). One arrive on ``step_done[(t-1) % STAGES]`` then tells
  both workers: the loader may refill that ring stage, the writer may add that dQ tile.
  The last step's arrive follows the loop.

Two dQ buffers (32 KB fp32 each at D128 and D64), so the writer has a whole step more before
the consumers wait for it: profiled with one, the consumers spent 13% of their samples
waiting for it (logs/ncu_sass_ws_swap_atomic_d128_e82cf99.json, H200). Shared memory at D128
(BLOCK_M 64) is K, V 64 KB + ring 2 x 32 KB + dS^T 2 x 16 KB + dQ 2 x 32 KB = 224 KB; at D64
(BLOCK_M 128) 32 + 2 x 32 + 2 x 32 + 2 x 32 = 224 KB, of 227 KB: the room is the P buffer the
swap removed.

Two modes. Atomic: the reduce-adds land in whatever order the key blocks finish, and each key
block starts at its own query block (rotated), so that the programs running together do not
all add into one dQ tile at once. Deterministic: every key block walks the query blocks in
order and the adds into a tile land in a fixed order (``_dq_writer``); bitwise reproducible.
``attention_backward_hopper_ws`` has ``attention_backward_hopper``'s signature and semantics
plus ``deterministic``; ``supports`` is the same function. ``flashcore.attention``'s autograd
runs it where ``dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM`` (the default) and
``dispatch.BACKWARD_GLUON_FROM`` (``deterministic=False``) say it was measured faster than the
Triton backward; ``validate_backward.check_grad_case(kernel="gluon_ws" | "gluon_ws_det")`` and
tools/backward_hopper_check.py ``--kernel`` run it by name.

History: until 2ceebf2 the step computed S = Q K^T (queries x keys) with P through shared
memory and one dQ buffer (208 KB at D128); A/B on an H200 against that step
(logs/ws_swap_*_ab_timing_*.json): the swap alone 0.91-1.01x its speed; with two dQ buffers
and the rotation (as shipped), deterministic 1.07-1.10x at D128 and 1.00-1.04x at D64, atomic
0.96-1.05x at D128 and 0.92-0.94x at D64. That D64 regression: ptxas serialized every wgmma
of the step for want of registers (warning C7512; 40 waits on the wgmma pipeline against
D128's 5). Folding lse and delta into the accumulators' start (trial 025fff0) and, at D64, dK
reading dS^T from shared memory (trial 4cfd036) remove it: 5 waits at both head dims. A/B on
an H200 against the kernel before them (ea50a64; logs/ws_trial_*_ab_timing.json, old time /
new time): the fold 1.02-1.07x deterministic and 1.01-1.02x atomic at D128; with dK from
shared memory, 1.06-1.12x deterministic and 0.99-1.11x atomic at D64 (at D128 0.98-1.03x:
registers kept there).

D256 (``_consumers_split_columns``, ``SPLIT_COLUMNS_FOR``): K, V and the Q/dO ring of 128-key
blocks do not fit in shared memory, and dK, dV of 64 keys in one warpgroup would be 256 fp32
registers a thread. So a program owns 64 keys, and the two warpgroups split columns instead of
rows: S^T and dP^T by query (32 each), dK, dV and dQ by head-dim half (128 each). P^T and dS^T
go through shared memory (each warpgroup's dV and dK read all of the step's queries); one ring
stage, freed as soon as the step's dV and dK have read it (the loader's own barrier,
``stage_free``), so the next step's copies overlap dQ; one dQ buffer. 209 KB of shared memory;
offline for sm_90, no spills and 5 wgmma waits. FlashAttention-4's sm90 backward uses the same
tile at D256 (64 x 64, one stage; FA3's is 64 x 80). On an H200
(logs/backward_ws_modes_7bfacd7.log) the atomic mode is 1.49-1.65x the Triton backward at D256
and the deterministic one 1.16-1.40x. The same split at D64/D128 (trial 677642a,
logs/ws_trial_split_ab_timing_677642a.json) was 1.02-1.18x slower than the row split there, so
it stays D256's.

D256's deterministic mode with one dQ accumulator was 0.76-0.88x its atomic mode non-causal
(logs/backward_ws_modes_30baee0.log). Nsight Compute at S 8K (logs/ncu_sass_ws_*_d256_f279817
.json) put the difference at one place: the consumers waiting for the one dQ buffer, 19% of
their samples (absent from the atomic mode's top stalls), while its writer waits for its turn.
So non-causal calls now sum into ``DQ_PARTIALS_FOR`` accumulators (4 at D256; the conversion
pass adds them in order), which shortens each chain of ordered adds fourfold. A/B on an H200
(trial 7b5f2cd): 0.908x the time at S 2K, 0.948x at 4K; at 16K 1.035x inside a round-to-round
range of 0.85-1.18 (the atomic mode, unchanged, read 1.005-1.048x in the same run). With four
accumulators at every S, the record of 4633056 read deterministic / atomic 0.841, 0.862, 0.857,
0.828 at S 2K-16K non-causal (one: 0.759, 0.793, 0.875, 0.871), so four are used up to Sk 4K
(``DQ_PARTIALS_MAX_SEQLEN_K``). The chain model predicts the largest gain at 16K, where the
chains are longest; the measurement does not show it, so the model is at best part of why.

Known limits (next steps): the step is serial inside each warpgroup (P^T and dS^T are
computed while only dP^T is on the tensor cores); Triton's barrier pass adds CTA barriers, so
the warpgroups meet three times a step; D64's 128-row tiles still spill a few values inside
the step.
"""

from __future__ import annotations

import torch

from . import _gluon_tma
from . import backward as _backward
from . import backward_hopper as _backward_hopper
from ._launch import CachedKernel, nvmma_layout, tma_strides_ok
from ._softmax import LOG2E
from .backward_hopper import (
    GLUON_AVAILABLE,
    MAX_GRID_Y,
    _bwd_preprocess,
    _descriptor,
)
from .backward_hopper_pipelined import BLOCK_N

if GLUON_AVAILABLE:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_init,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .backward_hopper_pipelined import _split_columns_layout, _split_rows_layout

__all__ = [
    "GLUON_AVAILABLE",
    "HEAD_DIMS_WS",
    "MAX_GRID_Y",
    "attention_backward_hopper_ws",
    "supports",
]

NUM_WARPS = 8  # the consumers (the default partition); the two workers add a warp each
STAGES = 2  # Q/dO ring depth (D64, D128)
# D256 (``_consumers_split_columns``): 64 keys a program, one ring stage, one dQ buffer (208 KB of
# shared memory: K, V 64 KB + Q, dO 64 KB + P^T, dS^T 16 KB + dQ's fp32 tile 64 KB).
HEAD_DIMS_WS = (64, 128, 256)
BLOCK_N_FOR = {64: BLOCK_N, 128: BLOCK_N, 256: 64}
STAGES_FOR = {64: STAGES, 128: STAGES, 256: 1}
DQ_BUFFERS_FOR = {64: 2, 128: 2, 256: 1}
# Which step a head dim runs: the warpgroups own 64 keys each (``_consumers``) or split the
# columns (``_consumers_split_columns``: FlashAttention-4's sm90 operand layout, P^T and dS^T
# through shared memory). D256 has only the second; at D64/D128 it compiles without spills
# but was 1.02-1.18x slower than the first on an H200 (trial 677642a), so it is off there.
SPLIT_COLUMNS_FOR = {64: False, 128: False, 256: True}
# Query rows per step, per head dim: the columns of S^T and dP^T. D64 at 128 spills a few
# registers inside the step, and was faster than at 64 (no spills; 0.79-0.97x the speed on an
# H200, logs/ws_swap_d64_rows_ab_timing_88ab124.json, measured while ptxas still serialized
# D64's wgmmas at 128: DK_FROM_SMEM_FOR).
BLOCK_M_FOR = {64: 128, 128: 64, 256: 64}
# Where dK += dS^T Q reads dS^T, per head dim: from shared memory (the copy dQ reads) at D64,
# where a register operand alive into the next step left ptxas too few registers to run the
# step's wgmmas asynchronously (C7512); from registers at D128, where it fits and was faster
# (H200 A/B: logs/ws_trial_fold_ab_timing.json, logs/ws_trial_dk_ab_timing.json).
DK_FROM_SMEM_FOR = {64: True, 128: False, 256: True}
# How the warpgroups split dQ = dS K (``_consumers``), per head dim and (deterministic,
# causal): by rows (queries: per warpgroup its 64 rows of dS and all of K, 64-column wgmmas;
# FlashAttention-4's sm90 D64 layout, AtomLayoutMdQ 2) or by columns (per warpgroup all of dS
# in 32-column wgmmas at D64: 1.5x the shared-memory reads for the same FLOPs, 16 wgmmas a
# step against 8). Rows need BLOCK_M 128 (D64; D128's 64-row tile is one warpgroup's m64).
# H200 A/B at D64, rows / columns time (trial ec8d9c7, 3 alternating rounds,
# logs/ws_trial_dqrows_ab_timing_ec8d9c7.json; D128, unchanged, read 0.989-1.011):
# deterministic 0.965/0.959 (S 4K full/causal), 0.971/0.966 (16K); atomic full 0.960, 0.958;
# atomic causal 1.037, 1.048, so that one keeps the columns.
DQ_SPLIT_ROWS_FOR = {
    (64, True, False): True,
    (64, True, True): True,
    (64, False, False): True,
    (64, False, True): False,
}
# The deterministic mode's independent fp32 dQ accumulators (non-causal calls; causal ones
# use one): key block k adds into accumulator k % P, in a fixed order within it, and the
# conversion pass sums the P accumulators in order. A chain of ordered adds is then P times
# shorter: with one, the resident key blocks of a head wait on each other tile by tile.
# D256 only, and only up to Sk 4K (H200 A/B, logs/ws_trial_partials_ab_timing_7b5f2cd.json,
# time with / without: 0.908 at S 2K, 0.948 at 4K, 1.035 at 16K non-causal; the record of
# 4633056 read deterministic / atomic 0.857 at 8K and 0.828 at 16K with four against 0.875
# and 0.871 with one); the cost is P fp32 copies of dQ and their sum in the conversion pass.
DQ_PARTIALS_FOR = {64: 1, 128: 1, 256: 4}
DQ_PARTIALS_MAX_SEQLEN_K = 4096
# setmaxnreg per worker thread; the consumers get the rest (240 a thread, no spills offline)
WORKER_REGS = gl.constexpr(24) if GLUON_AVAILABLE else 24

if GLUON_AVAILABLE:

    @gluon.jit
    def _step_coords(t, work, BLOCK_M: gl.constexpr):
        """Step t's query head and first query row: steps walk the group's heads, and in each
        the query blocks that see this key block, from the program's own first one (``rot``
        blocks past ``m_first``, cyclically)."""
        batch, kv_head, group, n0, m_first, n_m, total, rot = work
        return kv_head * group + t // n_m, (m_first + (t + rot) % n_m) * BLOCK_M

    @gluon.jit
    def _loader(
        q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, kv_bar, ring, rows_ring, step_done,
        work, Lse, Delta, num_q_heads, seqlen_q, inv_scale, BLOCK_M: gl.constexpr,
    ):  # fmt: skip
        """One warp: K and V once, then step t's Q and dO into ring stage t % STAGES once
        the consumers have released the step that used it last, with the step's rows of lse
        (divided by the scale) and delta beside them (``rows_ring``): their global loads are issued
        before the wait, so the consumers read them from shared memory."""
        batch, kv_head, group, n0, m_first, n_m, total, rot = work
        q_ring, do_ring, ready = ring
        lse_ring, delta_ring = rows_ring
        NSTAGES: gl.constexpr = step_done.shape[0]
        rows_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
        offs = gl.arange(0, BLOCK_M, layout=rows_layout)
        mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [batch, kv_head, n0, 0], kv_bar, k_smem)
        tma.async_copy_global_to_shared(v_desc, [batch, kv_head, n0, 0], kv_bar, v_smem)
        for t in range(total):
            q_head, m0 = _step_coords(t, work, BLOCK_M)
            queries = m0 + offs
            row_base = (batch * num_q_heads + q_head).to(gl.int64) * seqlen_q
            in_q = queries < seqlen_q
            lse = gl.load(Lse + row_base + queries, mask=in_q, other=0.0)
            delta = gl.load(Delta + row_base + queries, mask=in_q, other=0.0)
            # Step t - NSTAGES done (a fresh barrier waited on with parity 1 reports
            # complete: the first NSTAGES steps find their stage empty).
            stage = t % NSTAGES
            mbarrier.wait(step_done.index(stage), ((t // NSTAGES) & 1) ^ 1)
            # lse in the scores' units (lse / scale); published with the copies' arrive below
            lse_ring.index(stage).store(lse * inv_scale)
            delta_ring.index(stage).store(delta)
            # Every lane's stores before the one lane's arrive that publishes them (its release
            # covers what the warp barrier ordered before it).
            gl.thread_barrier()
            bar = ready.index(stage)
            mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(
                q_desc, [batch, q_head, m0, 0], bar, q_ring.index(stage)
            )
            tma.async_copy_global_to_shared(
                do_desc, [batch, q_head, m0, 0], bar, do_ring.index(stage)
            )

    @gluon.jit
    def _load_acquire(ptr):
        """The int32 at ``ptr``, read with acquire semantics at GPU scope."""
        return gl.inline_asm_elementwise(
            "ld.acquire.gpu.global.b32 $0, [$1]; fence.proxy.async.global;",
            "=r,l", [ptr], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip

    @gluon.jit
    def _wait_writes_done(token):
        """Block until this thread's bulk copies have written global memory (not only read
        shared memory, as ``tma.store_wait``); returns ``token`` to order what uses it."""
        return gl.inline_asm_elementwise(
            "cp.async.bulk.wait_group 0; fence.proxy.async.global; bar.warp.sync -1; "
            "mov.b32 $0, $1;",
            "=r,r", [token], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip

    @gluon.jit
    def _dq_writer(
        dq_desc, dq_smem, step_done, dq_empty, work, order,
        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr,
        DETERMINISTIC: gl.constexpr,
    ):  # fmt: skip
        """One warp: each step's dQ tile, once published, added into the fp32 dQ buffer by
        one bulk reduce-add (rows past Sq dropped by the descriptor's bounds); the buffer is
        handed back as soon as the copy engine has read it.

        DETERMINISTIC: the adds into each dQ tile land in a fixed order, the key blocks from
        the last that sees the tile's rows down to 0. With ``partials`` P accumulators, key
        block k adds into accumulator k % P (the batch index p * B + batch of dq_desc), and
        the order is kept within each. Each (accumulator, tile) has an int32 counter in
        ``Lock`` (zeroed) of the adds done; this program's turn on a tile is the number of
        key blocks above it in its accumulator that see the tile (its ``rank``). It waits for
        its turn (acquire), adds (the first add, rank 0, is a plain store: the buffer is not
        zeroed in this mode), waits until the add has reached global memory, and passes the
        turn on (release). The programs it waits for have larger key blocks, launched before
        it (the grid runs key blocks in reverse in this mode), so every wait is on a program
        already running."""
        batch, kv_head, group, n0, m_first, n_m, total, rot = work
        Lock, num_q_heads, n_m_total, last_n, causal_offset, partials, num_batches = order
        NSTAGES: gl.constexpr = step_done.shape[0]
        NBUF: gl.constexpr = dq_smem.shape[0]
        for t in range(total):
            q_head, m0 = _step_coords(t, work, BLOCK_M)
            mbarrier.wait(step_done.index(t % NSTAGES), (t // NSTAGES) & 1)
            tile = dq_smem.index(t % NBUF)
            if DETERMINISTIC:
                key_block = n0 // BLOCK_N
                acc_batch = (key_block % partials) * num_batches + batch
                coord = [acc_batch, q_head, m0, 0]
                lock = Lock + (acc_batch * num_q_heads + q_head) * n_m_total + m0 // BLOCK_M
                if IS_CAUSAL:  # the last key block with a key that the tile's last row sees
                    top = gl.minimum(last_n, (m0 + BLOCK_M - 1 + causal_offset) // BLOCK_N)
                else:
                    top = last_n
                # the key blocks in (key_block, top] of this one's accumulator add first
                rank = (top - key_block) // partials
                seen = _load_acquire(lock)
                while seen != rank:
                    seen = _load_acquire(lock)
                if rank == 0:  # the tile's first add: a plain store (the buffer is not zeroed)
                    tma.async_copy_shared_to_global(dq_desc, coord, tile)
                else:
                    _gluon_tma.async_reduce_add(dq_desc, coord, tile)
            else:
                _gluon_tma.async_reduce_add(dq_desc, [batch, q_head, m0, 0], tile)
            tma.store_wait(0)
            mbarrier.arrive(dq_empty.index(t % NBUF), count=1)
            if DETERMINISTIC:
                gl.atomic_add(lock, _wait_writes_done(seen * 0 + 1), sem="release", scope="gpu")

    @gluon.jit
    def _unmasked_rows(
        n0, seqlen_q, seqlen_k, causal_offset,
        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr,
    ):  # fmt: skip
        """(full_lo, full_hi): steps whose first query row m0 is in [full_lo, full_hi] need no
        mask (every row exists and sees every key of the block: row m0 sees its last key,
        n0 + BLOCK_N - 1, and the block has none past Sk); a block crossing Sk is masked
        throughout."""
        if IS_CAUSAL:
            full_lo = n0 + BLOCK_N - 1 - causal_offset
        else:
            full_lo = n0 * 0
        full_lo = gl.where(n0 + BLOCK_N > seqlen_k, seqlen_q, full_lo)
        return full_lo, seqlen_q - BLOCK_M

    @gluon.jit
    def _mask_tile_t(pt, keys, queries, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL: gl.constexpr):
        """P^T (keys x queries) with every invisible (query, key) pair set to exactly 0
        (``_mask.visible``; backward_hopper._mask_tile transposed)."""
        keys2 = gl.expand_dims(keys, 1)
        queries2 = gl.expand_dims(queries, 0)
        vis = (queries2 < seqlen_q) & (keys2 < seqlen_k)
        if IS_CAUSAL:
            vis = vis & (keys2 <= queries2 + causal_offset)
        return gl.where(vis, pt, 0.0)

    @gluon.jit
    def _consumers(
        k_buf, v_buf, kv_bar, ring, rows_ring, step_done, ds_smem, dq_smem, dq_empty,
        dK, dV, dkv_strides, lengths, work, qk_scale, sm_scale,
        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        IS_CAUSAL: gl.constexpr, DK_FROM_SMEM: gl.constexpr, DQ_SPLIT_ROWS: gl.constexpr,
    ):  # fmt: skip
        """Two warpgroups, each owning 64 keys of the block: S^T and dP^T (keys x queries),
        P^T in registers as the A operand of dV, dS^T as dK's from registers or from shared
        memory (``DK_FROM_SMEM``; module docstring); dQ split between them by rows or by
        columns (``DQ_SPLIT_ROWS``, ``DQ_SPLIT_ROWS_FOR``)."""
        q_ring, do_ring, ready = ring
        lse_ring, delta_ring = rows_ring
        STAGES: gl.constexpr = step_done.shape[0]
        NBUF: gl.constexpr = dq_smem.shape[0]
        batch, kv_head, group, n0, m_first, n_m, total, rot = work
        num_q_heads, seqlen_q, seqlen_k, causal_offset = lengths
        dtype: gl.constexpr = q_ring.dtype
        NW: gl.constexpr = gl.num_warps()
        st_layout: gl.constexpr = _split_rows_layout(NW, BLOCK_M)  # S^T, dP^T
        kv_layout: gl.constexpr = _split_rows_layout(NW, HEAD_DIM)  # dK, dV
        if DQ_SPLIT_ROWS:
            dq_layout: gl.constexpr = _split_rows_layout(NW, HEAD_DIM)
        else:
            dq_layout: gl.constexpr = _split_columns_layout(NW, HEAD_DIM)
        op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
        query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
        key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)

        offs_n = gl.arange(0, BLOCK_N, layout=key_layout)
        offs_m = gl.arange(0, BLOCK_M, layout=query_layout)
        dk_acc = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout))
        dv_acc = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)  # retired each step
        if not DK_FROM_SMEM:
            # dS^T of the previous step, the register operand of its dK (alive until it retires)
            dst_op = gl.zeros([BLOCK_N, BLOCK_M], dtype, op_layout)
        full_lo, full_hi = _unmasked_rows(
            n0, seqlen_q, seqlen_k, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL
        )
        mbarrier.wait(kv_bar, 0)

        for t in range(total):
            stage = t % STAGES
            q_head, m0 = _step_coords(t, work, BLOCK_M)
            q_tile = q_ring.index(stage)
            # K and V through an index the compiler cannot fold (as backward_hopper: hoisted,
            # their wgmma descriptors spill at D128).
            slot = gl.inline_asm_elementwise(
                "and.b32 $0, $1, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1
            )
            k_smem = k_buf.index(slot)
            v_smem = v_buf.index(slot)
            do_tile = do_ring.index(stage)
            ds_buf = ds_smem.index(t % 2)
            mbarrier.wait(ready.index(stage), (t // STAGES) & 1)

            # S^T accumulates onto -lse / scale and dP^T onto -delta, so that P^T =
            # exp2(acc * qk_scale) and dS^T = P^T * acc: no lse or delta vector is held
            # through the step (32 registers each at BLOCK_M 128).
            zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout)
            lse_s = lse_ring.index(stage).load(query_layout)  # lse / scale (_loader)
            s_tok = warpgroup_mma(
                k_smem,
                q_tile.permute((1, 0)),
                zero_s - gl.expand_dims(lse_s, 0),
                is_async=True,
            )
            delta = delta_ring.index(stage).load(query_layout)
            dp_tok = warpgroup_mma(
                v_smem,
                do_tile.permute((1, 0)),
                zero_s - gl.expand_dims(delta, 0),
                is_async=True,
            )

            # Retires step t-1's dK, then S^T (groups retire in order; dP^T in flight).
            if DK_FROM_SMEM:
                st, dk = warpgroup_mma_wait(1, deps=(s_tok, dk_acc))
            else:
                st, dk, dst_op = warpgroup_mma_wait(1, deps=(s_tok, dk_acc, dst_op))
            pt = gl.exp2(st * qk_scale)
            masked = (m0 < full_lo) | (m0 > full_hi)
            if masked:
                queries = m0 + offs_m
                keys = n0 + slot + offs_n
                pt = _mask_tile_t(pt, keys, queries, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL)
            # dV += P^T dO straight from registers: P never goes through shared memory.
            pt_op = gl.convert_layout(pt.to(dtype), op_layout)
            dv_tok = warpgroup_mma(pt_op, do_tile, dv_acc, is_async=True)

            dpt = warpgroup_mma_wait(1, deps=(dp_tok,))  # dV in flight; dP^T - delta
            dst = (pt * dpt).to(dtype)  # scaled-score units
            ds_buf.store(dst)
            if not DK_FROM_SMEM:
                dst_op = gl.convert_layout(dst, op_layout)
            # Orders this step's dS^T and the previous step's dQ tile before the tensor
            # cores' and the copy engine's reads.
            fence_async_shared()
            gl.thread_barrier()
            # Both warpgroups have written dS^T (and step t-1's dQ tile) and retired step
            # t-1's dK: step t-1's dQ tile to the writer, its ring stage to the loader.
            if t > 0:
                mbarrier.arrive(step_done.index((t - 1) % STAGES), count=1)

            # dQ = dS K: all of the block's keys, so both warpgroups' dS^T (the barrier).
            dq_tok = warpgroup_mma(
                ds_buf.permute((1, 0)),
                k_smem,
                gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout),
                use_acc=False,
                is_async=True,
            )
            if DK_FROM_SMEM:  # the copy dQ reads: no register operand outlives the step
                dk_acc = warpgroup_mma(ds_buf, q_tile, dk, is_async=True)
            else:
                dk_acc = warpgroup_mma(dst_op, q_tile, dk, is_async=True)
            # Retires dV and dQ; dK runs on into the next step.
            dv_acc, dq, pt_op = warpgroup_mma_wait(1, deps=(dv_tok, dq_tok, pt_op))
            # The writer has read step t-1's tile (parity 1 on the fresh barrier: step 0
            # finds the buffer free).
            mbarrier.wait(dq_empty.index(t % NBUF), ((t // NBUF) & 1) ^ 1)
            dq_smem.index(t % NBUF).store(dq)

        dk = warpgroup_mma_wait(0, deps=(dk_acc,))  # the last step's dK
        dv = dv_acc
        if total > 0:  # publish the last dQ tile
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(step_done.index((total - 1) % STAGES), count=1)
        _store_dk_dv(dk * sm_scale, dv, dK, dV, dkv_strides, batch, kv_head, n0, seqlen_k)

    @gluon.jit
    def _store_dk_dv(dk, dv, dK, dV, dkv_strides, batch, kv_head, n0, seqlen_k):
        """dK and dV of the program's key block from registers (rows past Sk not written)."""
        stride_dkz, stride_dkh, stride_dkn, stride_dkk, stride_dvz, stride_dvh, stride_dvn, \
            stride_dvk = dkv_strides  # fmt: skip
        BLOCK_N: gl.constexpr = dk.shape[0]
        HEAD_DIM: gl.constexpr = dk.shape[1]
        kv_layout: gl.constexpr = dk.type.layout
        rows = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, kv_layout))
        kv_mask = gl.expand_dims(rows < seqlen_k, 1) & gl.expand_dims(cols < HEAD_DIM, 0)
        rows64 = gl.expand_dims(rows.to(gl.int64), 1)
        cols64 = gl.expand_dims(cols.to(gl.int64), 0)
        dk_ptrs = (
            dK
            + (batch.to(gl.int64) * stride_dkz + kv_head.to(gl.int64) * stride_dkh)
            + rows64 * stride_dkn
            + cols64 * stride_dkk
        )
        dv_ptrs = (
            dV
            + (batch.to(gl.int64) * stride_dvz + kv_head.to(gl.int64) * stride_dvh)
            + rows64 * stride_dvn
            + cols64 * stride_dvk
        )
        gl.store(dk_ptrs, dk.to(dK.dtype.element_ty), mask=kv_mask)
        gl.store(dv_ptrs, dv.to(dV.dtype.element_ty), mask=kv_mask)

    @gluon.jit
    def _consumers_split_columns(
        k_buf, v_buf, kv_bar, ring, rows_ring, stage_free, step_done, pt_smem, ds_smem,
        dq_smem, dq_empty, dK, dV, dkv_strides, lengths, work, qk_scale, sm_scale,
        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        IS_CAUSAL: gl.constexpr,
    ):  # fmt: skip
        """The step with the warpgroups splitting columns, D256's (slower at D64/D128:
        ``SPLIT_COLUMNS_FOR``). At D256 a program has 64 keys, which one warpgroup's wgmma rows
        cover, so the two warpgroups split columns instead: S^T and dP^T by query (32 each),
        dK, dV and dQ by head-dim half (128 each: 64 + 64 + 64 fp32 registers a thread). P^T
        and dS^T go through shared memory, where each warpgroup's dV and dK read all of the
        step's queries.
        One ring stage, handed back to the loader as soon as the step's dV and dK have read
        it, so that the next step's copies overlap dQ; one dQ buffer (``step_done``: the
        writer's, ``stage_free``: the loader's)."""
        q_ring, do_ring, ready = ring
        lse_ring, delta_ring = rows_ring
        STAGES: gl.constexpr = stage_free.shape[0]
        NBUF: gl.constexpr = dq_smem.shape[0]
        batch, kv_head, group, n0, m_first, n_m, total, rot = work
        num_q_heads, seqlen_q, seqlen_k, causal_offset = lengths
        dtype: gl.constexpr = q_ring.dtype
        NW: gl.constexpr = gl.num_warps()
        st_layout: gl.constexpr = _split_columns_layout(NW, BLOCK_M)  # S^T, dP^T
        acc_layout: gl.constexpr = _split_columns_layout(NW, HEAD_DIM)  # dK, dV, dQ
        query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
        key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)

        offs_n = gl.arange(0, BLOCK_N, layout=key_layout)
        offs_m = gl.arange(0, BLOCK_M, layout=query_layout)
        dk_acc = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
        dv_acc = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
        full_lo, full_hi = _unmasked_rows(
            n0, seqlen_q, seqlen_k, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL
        )
        mbarrier.wait(kv_bar, 0)

        for t in range(total):
            stage = t % STAGES
            q_head, m0 = _step_coords(t, work, BLOCK_M)
            q_tile = q_ring.index(stage)
            do_tile = do_ring.index(stage)
            # K and V through an index the compiler cannot fold (as _consumers)
            slot = gl.inline_asm_elementwise(
                "and.b32 $0, $1, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1
            )
            k_smem = k_buf.index(slot)
            v_smem = v_buf.index(slot)
            mbarrier.wait(ready.index(stage), (t // STAGES) & 1)

            # S^T onto -lse / scale, dP^T onto -delta (as _consumers)
            zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout)
            lse_s = lse_ring.index(stage).load(query_layout)
            s_tok = warpgroup_mma(
                k_smem, q_tile.permute((1, 0)), zero_s - gl.expand_dims(lse_s, 0), is_async=True
            )
            delta = delta_ring.index(stage).load(query_layout)
            dp_tok = warpgroup_mma(
                v_smem, do_tile.permute((1, 0)), zero_s - gl.expand_dims(delta, 0), is_async=True
            )
            st = warpgroup_mma_wait(1, deps=(s_tok,))
            pt = gl.exp2(st * qk_scale)
            masked = (m0 < full_lo) | (m0 > full_hi)
            if masked:
                queries = m0 + offs_m
                keys = n0 + slot + offs_n
                pt = _mask_tile_t(pt, keys, queries, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL)
            pt_smem.store(pt.to(dtype))
            dpt = warpgroup_mma_wait(0, deps=(dp_tok,))
            ds_smem.store((pt * dpt).to(dtype))
            fence_async_shared()
            gl.thread_barrier()  # both halves of P^T and dS^T written

            dv_tok = warpgroup_mma(pt_smem, do_tile, dv_acc, is_async=True)
            dk_tok = warpgroup_mma(ds_smem, q_tile, dk_acc, is_async=True)
            dq_tok = warpgroup_mma(
                ds_smem.permute((1, 0)),
                k_smem,
                gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, acc_layout),
                use_acc=False,
                is_async=True,
            )
            dv_acc, dk_acc = warpgroup_mma_wait(1, deps=(dv_tok, dk_tok))
            gl.thread_barrier()  # both warpgroups' dV and dK have read Q and dO
            mbarrier.arrive(stage_free.index(stage), count=1)
            dq = warpgroup_mma_wait(0, deps=(dq_tok,))
            mbarrier.wait(dq_empty.index(t % NBUF), ((t // NBUF) & 1) ^ 1)
            dq_smem.index(t % NBUF).store(dq)
            # the tile before the copy engine's read; both warpgroups' dQ (the last reader of
            # P^T and dS^T) retired before the next step writes them
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(step_done.index(t % step_done.shape[0]), count=1)

        _store_dk_dv(dk_acc * sm_scale, dv_acc, dK, dV, dkv_strides, batch, kv_head, n0, seqlen_k)

    # Lengths, head counts and the offset change from call to call (as the other backwards).
    @gluon.jit(
        do_not_specialize=[
            "num_q_heads", "num_kv_heads", "seqlen_q", "seqlen_k", "causal_offset",
        ]
    )  # fmt: skip
    def _bwd_hopper_ws_kernel(
        q_desc, k_desc, v_desc, do_desc, dq_desc, Lse, Delta, dK, dV, Lock,
        stride_dkz, stride_dkh, stride_dkn, stride_dkk,
        stride_dvz, stride_dvh, stride_dvn, stride_dvk,
        num_q_heads, num_kv_heads, seqlen_q, seqlen_k, causal_offset, qk_scale, sm_scale,
        dq_partials, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, DETERMINISTIC: gl.constexpr,
        DK_FROM_SMEM: gl.constexpr, DQ_BUFFERS: gl.constexpr, SPLIT_COLUMNS: gl.constexpr,
        DQ_SPLIT_ROWS: gl.constexpr = False,
    ):  # fmt: skip
        """Grid (key blocks, batch * KV heads), as the other Gluon backwards. dq_desc: the
        (dq_partials * B, Hq, Sq, D) fp32 dQ buffer (unscaled dQ is added), BLOCK_M x D
        blocks: zeroed for the atomic mode (dq_partials 1); the deterministic mode stores each
        tile's first add in each accumulator. Lock: with DETERMINISTIC, dq_partials * B * Hq *
        cdiv(Sq, BLOCK_M) int32 zeros (_dq_writer); otherwise unused."""
        dtype: gl.constexpr = q_desc.dtype
        if DETERMINISTIC:  # the last key block first (_dq_writer waits on larger ones)
            tile_n = gl.num_programs(0) - 1 - gl.program_id(0)
        else:
            tile_n = gl.program_id(0)
        batch_kv = gl.program_id(1)
        batch = batch_kv // num_kv_heads
        kv_head = batch_kv % num_kv_heads
        group = num_q_heads // num_kv_heads
        n0 = tile_n * BLOCK_N
        n_m_total = gl.cdiv(seqlen_q, BLOCK_M)
        if IS_CAUSAL:
            m_first = gl.minimum(gl.maximum(n0 - causal_offset, 0) // BLOCK_M, n_m_total)
        else:
            m_first = 0
        n_m = n_m_total - m_first
        if DETERMINISTIC:  # every key block walks its query blocks in the same order
            rot = n_m * 0
        else:  # each starts at its own, so that they do not all add into one dQ tile at once
            rot = tile_n % gl.maximum(n_m, 1)
        work = (batch, kv_head, group, n0, m_first, n_m, n_m * group, rot)

        kv_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_N, HEAD_DIM], dtype
        )
        q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_M, HEAD_DIM], dtype
        )
        ds_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_N, BLOCK_M], dtype
        )
        k_buf = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEAD_DIM], kv_smem_layout)
        v_buf = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEAD_DIM], kv_smem_layout)
        q_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_smem_layout)
        do_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_smem_layout)
        if SPLIT_COLUMNS:  # P^T and dS^T, one buffer each (_consumers_split_columns)
            pt_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], ds_smem_layout)
            ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], ds_smem_layout)
        else:
            ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_smem_layout)
        dq_smem = gl.allocate_shared_memory(
            gl.float32, [DQ_BUFFERS, BLOCK_M, HEAD_DIM], dq_desc.layout
        )
        rows_smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        lse_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], rows_smem_layout)
        delta_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], rows_smem_layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        step_done = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        dq_empty = gl.allocate_shared_memory(gl.int64, [DQ_BUFFERS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(DQ_BUFFERS):
            mbarrier.init(dq_empty.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(step_done.index(i), count=1)
        # split columns: the loader's own barrier (the stage is freed before the dQ tile is ready)
        if SPLIT_COLUMNS:
            stage_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(STAGES):
                mbarrier.init(stage_free.index(i), count=1)
        fence_async_shared()  # the barriers' init is visible to the copy engine

        ring = (q_ring, do_ring, ready)
        rows_ring = (lse_ring, delta_ring)
        num_batches = gl.num_programs(1) // num_kv_heads
        order = (Lock, num_q_heads, n_m_total, gl.num_programs(0) - 1, causal_offset,
                 dq_partials, num_batches)  # fmt: skip
        lengths = (num_q_heads, seqlen_q, seqlen_k, causal_offset)
        dkv_strides = (
            stride_dkz, stride_dkh, stride_dkn, stride_dkk,
            stride_dvz, stride_dvh, stride_dvn, stride_dvk,
        )  # fmt: skip
        if SPLIT_COLUMNS:
            gl.warp_specialize(
                [
                    (_consumers_split_columns, (k_buf, v_buf, kv_bar, ring, rows_ring, stage_free,
                                          step_done, pt_smem, ds_smem, dq_smem, dq_empty, dK,
                                          dV, dkv_strides, lengths, work, qk_scale, sm_scale,
                                          HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL)),
                    (_loader, (q_desc, k_desc, v_desc, do_desc, k_buf.index(0), v_buf.index(0),
                               kv_bar, ring, rows_ring, stage_free, work, Lse, Delta,
                               num_q_heads, seqlen_q, 1.0 / sm_scale, BLOCK_M)),
                    (_dq_writer, (dq_desc, dq_smem, step_done, dq_empty, work, order, BLOCK_M,
                                  BLOCK_N, IS_CAUSAL, DETERMINISTIC)),
                ],
                [1, 1],
                [WORKER_REGS, WORKER_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_consumers, (k_buf, v_buf, kv_bar, ring, rows_ring, step_done, ds_smem,
                                  dq_smem, dq_empty, dK, dV, dkv_strides, lengths, work,
                                  qk_scale, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL,
                                  DK_FROM_SMEM, DQ_SPLIT_ROWS)),
                    (_loader, (q_desc, k_desc, v_desc, do_desc, k_buf.index(0), v_buf.index(0),
                               kv_bar, ring, rows_ring, step_done, work, Lse, Delta,
                               num_q_heads, seqlen_q, 1.0 / sm_scale, BLOCK_M)),
                    (_dq_writer, (dq_desc, dq_smem, step_done, dq_empty, work, order, BLOCK_M,
                                  BLOCK_N, IS_CAUSAL, DETERMINISTIC)),
                ],
                [1, 1],
                [WORKER_REGS, WORKER_REGS],
            )  # fmt: skip

    _BWD_LAUNCH = CachedKernel(_bwd_hopper_ws_kernel, "gluon_bwd_ws")


def supports(q, k, v, *, window=None, softcap=None, sinks=None) -> bool:
    """``backward_hopper.supports`` with D256 as well (``_consumers_split_columns``)."""
    return _backward_hopper.supports(
        q, k, v, window=window, softcap=softcap, sinks=sinks, head_dims=HEAD_DIMS_WS
    )


def _dq_accumulator(q, *, zeroed: bool, partials: int = 1):
    """The fp32 buffer dQ's partial products are summed into: ``partials`` accumulators of
    q's shape stacked along the batch, zeroed, or left as allocated where the kernel writes
    every element before it adds to it."""
    make = torch.zeros if zeroed else torch.empty
    shape = (partials * q.shape[0], *q.shape[1:])
    return make(shape, dtype=torch.float32, device=q.device)


def _dq_partials(head_dim, seqlen_k, *, deterministic: bool, is_causal: bool) -> int:
    """How many dQ accumulators the call sums into (``DQ_PARTIALS_FOR``): one for the atomic
    mode, for causal calls (some of a causal tile's accumulators would see no key block and
    need zeroing) and past ``DQ_PARTIALS_MAX_SEQLEN_K`` (measured slower there); never more
    than the key blocks, so each accumulator has a first add."""
    if not deterministic or is_causal or seqlen_k > DQ_PARTIALS_MAX_SEQLEN_K:
        return 1
    return max(1, min(DQ_PARTIALS_FOR[head_dim], -(-seqlen_k // BLOCK_N_FOR[head_dim])))


def _dq_descriptor(dq_acc, block_rows):
    """The fp32 dQ buffer, in BLOCK_M x D blocks for the reduce-add."""
    layout = nvmma_layout((block_rows, dq_acc.shape[3]), gl.float32)
    return TensorDescriptor(
        dq_acc, list(dq_acc.shape), list(dq_acc.stride()), [1, 1, block_rows, dq_acc.shape[3]],
        layout,
    )  # fmt: skip


def attention_backward_hopper_ws(
    do, q, k, v, out, lse, dq, dk, dv, *, causal_offset: int, is_causal: bool, scale: float,
    deterministic: bool = False,
):  # fmt: skip
    """``backward_hopper.attention_backward_hopper`` (same arguments, results and
    temporaries) with the warp-specialized kernel, on inputs ``supports`` accepts.
    ``deterministic``: dQ's partial sums are added in a fixed order (bitwise reproducible
    results; one int32 counter per query tile and the waits it costs), else in any order."""
    batch, num_q_heads, seqlen_q, head_dim = q.shape
    num_kv_heads, seqlen_k = k.shape[1], k.shape[2]
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if not tma_strides_ok(do):
        do = do.contiguous()
    lse = lse.contiguous()
    delta = torch.empty((batch, num_q_heads, seqlen_q), dtype=torch.float32, device=q.device)
    pre_m = 64
    _bwd_preprocess[(-(-seqlen_q // pre_m) * batch * num_q_heads,)](
        out,
        do,
        delta,
        *out.stride(),
        *do.stride(),
        delta.stride(0),
        delta.stride(1),
        num_q_heads,
        seqlen_q,
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=head_dim,
        BLOCK_M=pre_m,
    )
    block_m = BLOCK_M_FOR[head_dim]
    # The deterministic mode stores the first of each dQ tile's adds, so its buffer needs no
    # zeroing where every tile has one: all but bottom-right causal calls with Sq > Sk, whose
    # first query rows see no key.
    partials = _dq_partials(
        head_dim, seqlen_k, deterministic=deterministic, is_causal=bool(is_causal)
    )
    dq_acc = _dq_accumulator(
        q, zeroed=not deterministic or (is_causal and causal_offset < 0), partials=partials
    )
    if deterministic:
        n_m_total = -(-seqlen_q // block_m)
        lock = torch.zeros(
            partials * batch * num_q_heads * n_m_total, dtype=torch.int32, device=q.device
        )
    else:
        lock = dq_acc  # not read: the kernel's Lock is used only in its deterministic mode
    block_n = BLOCK_N_FOR[head_dim]
    grid = (-(-seqlen_k // block_n), batch * num_kv_heads)
    _BWD_LAUNCH[grid](
        _descriptor(q, block_m),
        _descriptor(k, block_n),
        _descriptor(v, block_n),
        _descriptor(do, block_m),
        _dq_descriptor(dq_acc, block_m),
        lse,
        delta,
        dk,
        dv,
        lock,
        *dk.stride(),
        *dv.stride(),
        num_q_heads,
        num_kv_heads,
        seqlen_q,
        seqlen_k,
        causal_offset,
        scale * LOG2E,
        scale,
        partials,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STAGES=STAGES_FOR[head_dim],
        IS_CAUSAL=bool(is_causal),
        DETERMINISTIC=bool(deterministic),
        DK_FROM_SMEM=DK_FROM_SMEM_FOR[head_dim],
        DQ_BUFFERS=DQ_BUFFERS_FOR[head_dim],
        SPLIT_COLUMNS=SPLIT_COLUMNS_FOR[head_dim],
        DQ_SPLIT_ROWS=DQ_SPLIT_ROWS_FOR.get(
            (head_dim, bool(deterministic), bool(is_causal)), False
        ),
        num_warps=NUM_WARPS,
    )
    _backward.dq_postprocess(dq_acc, dq, scale)  # summed, scaled and converted in one pass
    return dq, dk, dv
