"""A pipelined variant of the Gluon Hopper backward (kernels/backward_hopper.py).

Same program, grid, orientation, masks, causal skip, lse/delta, epilogue and dQ conversion
as ``backward_hopper`` (read its docstring first); ``attention_backward_hopper_pipelined``
has ``attention_backward_hopper``'s signature and semantics, and ``supports`` is the same
function. What differs is the step, which the original serializes (top-of-step barrier;
S, dP; softmax; P, dS to shared; barrier; dV, dK, dQ; wait for all three; dQ atomics while
the tensor cores idle; next load one step ahead):

1. dQ's wgmma is issued first of the three (dQ, dV, dK) and waited on alone
   (``warpgroup_mma_wait(2)``: wgmma groups retire in order), so dQ's fp32 atomics run
   while dV and dK are still on the tensor cores. dV and dK are waited on at the next
   step's S wait (or after the loop): their accumulators are carried through the loop in
   flight (``warpgroup_mma_accumulator``).
2. No top-of-step barrier; one barrier a step (after the P and dS stores). The hazards it
   leaves, each handled where it arises in the kernel:
   - dS is read by both warpgroups' dQ wgmma (dQ sums over all 128 keys) but written by
     each warpgroup for its own 64 key columns: two dS buffers (step t uses t % 2).
   - P: a warpgroup's dV reads only its own key columns of P (checked from the layouts,
     below), so it may rewrite them once its own S wait has retired its previous dV.
   - Q/dO ring: 3 stages; step t+2's copy is issued after step t's barrier (after its
     three matmuls are issued).
   Triton's barrier pass (Membar) still adds CTA barriers it cannot prove unneeded: one at
   the top of the step, before the ring's mbarrier wait (which reads the barrier word the
   previous step's ``mbarrier.expect`` wrote), and one before each TMA copy (as in the
   original). So the warpgroups still meet at the top of each step; the kernel's
   correctness does not rely on that barrier (the hazards above are handled without it),
   and what the step gains is the dQ atomics overlapping dV and dK, a copy issued two
   steps ahead, and 4 CTA barriers a step instead of the original's 5 (sm_90 PTX).
3. BLOCK_M per head dim (``BLOCK_M_FOR``): 128 at D64 (FA3's 128 x 128 tiles at D64),
   64 at D128. Shared memory: D128, K and V 64 KB + ring 3 x 32 KB + P 16 KB + dS 2 x 16 KB
   = 208 KB; D64 (BLOCK_M 128), 32 KB + 3 x 32 KB + 32 KB + 2 x 32 KB = 224 KB (of 227 KB).

Which warpgroup owns what (the linear layouts of the kernel's layouts, 8 warps;
tests/test_backward_hopper_pipelined.py checks it on a CPU): the S/dP layout
(warps_per_cta [4, 2]) has warp bases [[16, 0], [32, 0], [0, 64]] at both tile shapes, so
warps 4-7 (warpgroup 1) hold key columns [64, 128) and warpgroup w the keys
[64w, 64w + 64); the dK/dV layout (warps_per_cta [8, 1]) has warp bases [[16, 0], [32, 0],
[64, 0]], so warpgroup w holds dK/dV rows [64w, 64w + 64), i.e. its dV wgmma's A operand
(P^T, rows [64w, 64w + 64)) is P's key columns [64w, 64w + 64): exactly the ones it wrote.
(The same holds for dK and dS^T; dQ's wgmma, split by the head dim, reads all of dS.)

Not deterministic (dQ by atomics), as the original. Not dispatched by ``flashcore.attention``:
``validate_backward.check_grad_case(kernel="gluon_pipelined")`` and
tools/backward_hopper_check.py ``--kernel`` run it.
"""

from __future__ import annotations

import torch

from ._launch import CachedKernel, tma_strides_ok
from ._softmax import LOG2E
from .backward_hopper import (
    GLUON_AVAILABLE,
    HEAD_DIMS,
    MAX_GRID_Y,
    _bwd_preprocess,
    _descriptor,
    supports,
)

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

    from .backward_hopper import _load_step, _mask_tile

__all__ = [
    "BLOCK_M_FOR",
    "GLUON_AVAILABLE",
    "HEAD_DIMS",
    "MAX_GRID_Y",
    "attention_backward_hopper_pipelined",
    "supports",
]

# Query rows per step, per head dim. D64 at 128 (FA3's 128 x 128 D64 tiles: half the steps,
# each wgmma twice as long per barrier) fits 224 KB of shared memory and compiles without
# spills; D128 stays at 64 (BLOCK_M 128 would need 304 KB of shared memory and 128 more
# fp32 registers a thread for S and dP).
BLOCK_M_FOR = {64: 128, 128: 64}
BLOCK_N = 128  # key rows per program: two warpgroups of 64
NUM_WARPS = 8
STAGES = 3  # Q/dO ring depth: step t+2's copy is issued during step t

if GLUON_AVAILABLE:

    @gluon.constexpr_function
    def _split_columns_layout(num_warps, n):
        """The wgmma accumulator layout of S and dP (n = BLOCK_N) and of dQ (n = the head
        dim): the two warpgroups split the columns, n / 2 each (the original's layout)."""
        return gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps // 2, 2], instr_shape=[16, n // 2, 16]
        )

    @gluon.constexpr_function
    def _split_rows_layout(num_warps, n):
        """The wgmma accumulator layout of dK and dV (n = the head dim): the warpgroups split
        the rows (keys), 64 each (the original's layout)."""
        return gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n, 16]
        )

    # Lengths, head counts and the offset change from call to call (as the original).
    @gluon.jit(
        do_not_specialize=[
            "num_q_heads", "num_kv_heads", "seqlen_q", "seqlen_k", "causal_offset",
        ]
    )  # fmt: skip
    def _bwd_hopper_pipelined_kernel(
        q_desc, k_desc, v_desc, do_desc, Lse, Delta, DQacc, dK, dV,
        stride_dkz, stride_dkh, stride_dkn, stride_dkk,
        stride_dvz, stride_dvh, stride_dvn, stride_dvk,
        num_q_heads, num_kv_heads, seqlen_q, seqlen_k, causal_offset, qk_scale, sm_scale,
        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
    ):  # fmt: skip
        """``backward_hopper._bwd_hopper_kernel``'s arguments and results; the step is
        pipelined (module docstring)."""
        dtype: gl.constexpr = q_desc.dtype
        NW: gl.constexpr = gl.num_warps()
        # As the original: S, dP, dQ split by columns (warpgroup w: keys [64w, 64w + 64) of
        # S and dP), dK, dV split by rows (warpgroup w: rows [64w, 64w + 64)).
        # (Built by constexpr functions that the test of the warpgroups' key columns reads.)
        s_layout: gl.constexpr = _split_columns_layout(NW, BLOCK_N)
        dq_layout: gl.constexpr = _split_columns_layout(NW, HEAD_DIM)
        kv_layout: gl.constexpr = _split_rows_layout(NW, HEAD_DIM)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        key_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

        tile_n = gl.program_id(0)
        batch_kv = gl.program_id(1)
        batch = batch_kv // num_kv_heads
        kv_head = batch_kv % num_kv_heads
        group = num_q_heads // num_kv_heads
        n0 = tile_n * BLOCK_N

        kv_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_N, HEAD_DIM], dtype
        )
        q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_M, HEAD_DIM], dtype
        )
        p_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
            [BLOCK_M, BLOCK_N], dtype
        )
        k_buf = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEAD_DIM], kv_smem_layout)
        v_buf = gl.allocate_shared_memory(dtype, [1, BLOCK_N, HEAD_DIM], kv_smem_layout)
        k_smem = k_buf.index(0)
        v_smem = v_buf.index(0)
        q_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_smem_layout)
        do_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_smem_layout)
        p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], p_smem_layout)
        # Two dS buffers (step t writes t % 2): without the top-of-step barrier a warpgroup
        # can be one step ahead of the other, and both warpgroups' dQ wgmma read all 128
        # key columns of dS (dQ = dS K sums over the keys) while each writes only its own
        # 64. With one buffer, a warpgroup's step t+1 dS store could overwrite columns the
        # other's step t dQ (or dK) wgmma still reads. With two, the writer of buffer t % 2
        # at step t+2 has passed step t+1's barrier, which the other warpgroup reaches
        # only after retiring its step t dQ (its dQ wait, step t) and dK (its S wait, step
        # t+1). The one barrier a step bounds the lead to one step, so two buffers suffice.
        ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N], p_smem_layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        fence_async_shared()  # the barriers' init is visible to the copy engine
        ring = (q_ring, do_ring, ready)

        n_m_total = gl.cdiv(seqlen_q, BLOCK_M)
        if IS_CAUSAL:
            m_first = gl.minimum(gl.maximum(n0 - causal_offset, 0) // BLOCK_M, n_m_total)
        else:
            m_first = 0
        n_m = n_m_total - m_first
        total = n_m * group  # steps: (head of the group, query block)

        mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [batch, kv_head, n0, 0], kv_bar, k_smem)
        tma.async_copy_global_to_shared(v_desc, [batch, kv_head, n0, 0], kv_bar, v_smem)
        # The first two steps' copies; step t's loop body issues step t+2's.
        if total > 0:
            _load_step(q_desc, do_desc, ring, 0, n_m, m_first, batch, kv_head, group)
        if total > 1:
            _load_step(q_desc, do_desc, ring, 1, n_m, m_first, batch, kv_head, group)

        offs_n = gl.arange(0, BLOCK_N, layout=key_layout)
        offs_m = gl.arange(0, BLOCK_M, layout=row_layout)
        dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
        dq_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
        dq_offs = gl.expand_dims(dq_rows, 1) * HEAD_DIM + gl.expand_dims(dq_cols, 0)
        # dK, dV are carried through the loop as in-flight wgmma accumulators: step t's dV
        # and dK are retired by step t+1's S wait (or after the loop).
        dk_acc = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout))
        dv_acc = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout))
        if IS_CAUSAL:
            full_lo = n0 + BLOCK_N - 1 - causal_offset
        else:
            full_lo = n0 * 0
        full_lo = gl.where(n0 + BLOCK_N > seqlen_k, seqlen_q, full_lo)
        full_hi = seqlen_q - BLOCK_M
        mbarrier.wait(kv_bar, 0)

        for t in range(total):
            stage = t % STAGES
            q_head = kv_head * group + t // n_m
            m0 = (m_first + t % n_m) * BLOCK_M
            q_tile = q_ring.index(stage)
            # K and V through an index the compiler cannot fold (as the original: hoisted,
            # their wgmma descriptors spill at D128).
            slot = gl.inline_asm_elementwise(
                "and.b32 $0, $1, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1
            )
            k_smem = k_buf.index(slot)
            v_smem = v_buf.index(slot)
            do_tile = do_ring.index(stage)
            ds_buf = ds_smem.index(t % 2)
            # No barrier here (the original has one): the hazards it covered are handled
            # by the two dS buffers, P's per-warpgroup columns and the ring's third stage.
            mbarrier.wait(ready.index(stage), (t // STAGES) & 1)

            zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
            s_tok = warpgroup_mma(
                q_tile, k_smem.permute((1, 0)), zero_s, use_acc=False, is_async=True
            )
            dp_tok = warpgroup_mma(
                do_tile, v_smem.permute((1, 0)), zero_s, use_acc=False, is_async=True
            )
            queries = m0 + offs_m
            row_base = (batch * num_q_heads + q_head).to(gl.int64) * seqlen_q
            in_q = queries < seqlen_q
            lse = gl.load(Lse + row_base + queries, mask=in_q, other=0.0)
            delta = gl.load(Delta + row_base + queries, mask=in_q, other=0.0)
            lse2 = lse * 1.4426950408889634  # natural log -> the log2 units of exp2

            # Groups retire in order: previous step's dV, dK, then S (dP stays in flight).
            # This warpgroup's reads of its P columns (dV) and of the ring stage of step
            # t-1 (dV, dK) are done from here on.
            s, dv, dk = warpgroup_mma_wait(1, deps=(s_tok, dv_acc, dk_acc))
            p = gl.exp2(s * qk_scale - gl.expand_dims(lse2, 1))
            masked = (m0 < full_lo) | (m0 > full_hi)
            if masked:
                keys = n0 + slot + offs_n
                p = _mask_tile(p, queries, keys, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL)
            # P: this warpgroup stores only its own key columns [64w, 64w + 64), and only
            # its own dV wgmma reads them (dV rows [64w, 64w + 64) = P^T's rows: module
            # docstring). Its previous dV was retired by the S wait above, so no barrier is
            # needed before the store, and one P buffer suffices.
            p_smem.store(p.to(dtype))

            dp = warpgroup_mma_wait(0, deps=(dp_tok,))
            ds = p * (dp - gl.expand_dims(delta, 1))  # in units of the scaled scores
            ds_buf.store(ds.to(dtype))
            fence_async_shared()  # the stores above are visible to the tensor cores
            # The step's one barrier: both warpgroups' columns of P and dS are written; and
            # both have passed their S wait of this step, so neither reads ring stage
            # (t-1) % STAGES (= (t+2) % STAGES) any more: step t+2's copy may overwrite it
            # (issued below, after this step's matmuls).
            gl.thread_barrier()

            # dQ first, so that it alone can be waited on (groups retire in order) and its
            # atomics overlap dV and dK on the tensor cores.
            dq_tok = warpgroup_mma(
                ds_buf,
                k_smem,
                gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout),
                use_acc=False,
                is_async=True,
            )
            # dV += P^T dO, dK += dS^T Q (P, dS read transposed): left in flight.
            dv_acc = warpgroup_mma(p_smem.permute((1, 0)), do_tile, dv, is_async=True)
            dk_acc = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
            # Step t+2's Q and dO into stage (t+2) % STAGES, free since the barrier above.
            # Issued after the three matmuls, not before: Triton's barrier pass cannot tell
            # the ring's stages apart and put a CTA barrier between a copy and the next
            # wgmma that reads the ring (dV); here the copy's own barriers follow the issue.
            if t + 2 < total:
                _load_step(q_desc, do_desc, ring, t + 2, n_m, m_first, batch, kv_head, group)
            dq = warpgroup_mma_wait(2, deps=(dq_tok,))
            dq_mask = gl.expand_dims(m0 + dq_rows < seqlen_q, 1) & gl.expand_dims(
                dq_cols < HEAD_DIM, 0
            )
            gl.atomic_add(
                DQacc + (row_base + m0) * HEAD_DIM + dq_offs, dq, mask=dq_mask, sem="relaxed"
            )

        dv, dk = warpgroup_mma_wait(0, deps=(dv_acc, dk_acc))  # the last step's dV, dK
        dk = dk * sm_scale
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
        gl.store(dk_ptrs, dk.to(dtype), mask=kv_mask)
        gl.store(dv_ptrs, dv.to(dtype), mask=kv_mask)
        gl.thread_barrier()  # no warp still waits on a barrier when it is invalidated
        mbarrier.invalidate(kv_bar)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))

    _BWD_LAUNCH = CachedKernel(_bwd_hopper_pipelined_kernel, "gluon_bwd_pipelined")


def attention_backward_hopper_pipelined(
    do, q, k, v, out, lse, dq, dk, dv, *, causal_offset: int, is_causal: bool, scale: float
):
    """``backward_hopper.attention_backward_hopper`` (same arguments, results, temporaries
    and nondeterminism of dQ) with the pipelined kernel, on inputs ``supports`` accepts."""
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
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    block_m = BLOCK_M_FOR[head_dim]
    grid = (-(-seqlen_k // BLOCK_N), batch * num_kv_heads)
    _BWD_LAUNCH[grid](
        _descriptor(q, block_m),
        _descriptor(k, BLOCK_N),
        _descriptor(v, BLOCK_N),
        _descriptor(do, block_m),
        lse,
        delta,
        dq_acc,
        dk,
        dv,
        *dk.stride(),
        *dv.stride(),
        num_q_heads,
        num_kv_heads,
        seqlen_q,
        seqlen_k,
        causal_offset,
        scale * LOG2E,
        scale,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=BLOCK_N,
        STAGES=STAGES,
        IS_CAUSAL=bool(is_causal),
        num_warps=NUM_WARPS,
    )
    dq.copy_(dq_acc.mul_(scale))
    return dq, dk, dv
