"""Hopper backward attention in Gluon: a first version with FlashAttention-3's structure.

One program per (key block of BLOCK_N = 128 rows, batch, KV head), 8 warps = two
warpgroups. K and V are TMA-loaded into shared memory once; dK and dV (fp32) stay in
registers while the program walks every query block that sees the key block, for every query
head of the GQA group (dK/dV summed in the program, as the Triton backward does). Per step
(query block of BLOCK_M = 64 rows, one query head):

    Q, dO      TMA into a 2-stage shared-memory ring (mbarriers); the next step's pair is
               issued at the top of this step, so its copy overlaps this step's matmuls
    lse, delta pointer loads (fp32; 2 rows a thread)
    S  = Q K^T                   wgmma, async; the warpgroups split the 128 keys
    dP = dO V^T                  wgmma, async (runs while P is computed)
    P  = exp2(S * scale * log2 e - lse2)       registers (masked where the step needs it)
    dS = P o (dP - delta)        registers
    P, dS -> shared memory (fp16/bf16), then one barrier
    dV += P^T dO                 wgmma, P read transposed; the warpgroups split the keys
    dK += dS^T Q                 wgmma, dS read transposed
    dQ_partial = dS K            wgmma; added to an fp32 dQ buffer with atomics
                                 (``gl.atomic_add``, vectorized pairs)

This is FA3's orientation (queries along wgmma's M for S and dP, P and dS through shared
memory for the transposed products): a row's lse and delta are 2 registers a thread, and
the D128 kernel fits in 255 registers without spilling. (Keys along M, as the Triton
backward's transposed tiles, would feed P^T and dS^T to dV and dK as register operands, but
held lse and delta in 16 registers each and spilled at D128.) The K and V wgmma
descriptors are rebuilt every step from an index the compiler cannot fold (``slot``): hoisted
out of the loop they were 24 64-bit values that spilled at D128.

Then delta = rowsum(dO o O) comes from the Triton backward's ``_bwd_preprocess`` (run
first), and dQ = scale * dQ_acc is converted to the input dtype by PyTorch (as the Triton
backward's atomic mode does). dS is taken in units of the scaled scores: dK = scale *
dS^T Q, dQ = scale * dS K.

Masks: query row i sees key j iff j < Sk, i < Sq and (causal) j <= i + causal_offset.
Causal query blocks that see none of the key block are skipped; a step is masked when its
block crosses the diagonal or the end of the keys or of the queries (a runtime branch, so
whole blocks pay nothing). Rows past Sq and keys past Sk are zero-filled by the copy
engine; the masks keep them, and rows that see no key (lse = -inf), out of every sum; dK
and dV rows past Sk are never written.

Which calls take this path (``supports``):

- CUDA device of compute capability 9.x and a triton with Gluon's Hopper API
  (``GLUON_AVAILABLE``, the forward's guard);
- float16 or bfloat16, head dim 64 or 128; q, k, v (and dO, copied if not) with TMA strides;
- any Sq, Sk >= 1, GQA/MQA, non-causal and both causal alignments (``causal_offset``);
  batch * KV heads up to 65535 (the grid's second dimension);
- not: sliding windows, softcap, sinks, varlen, float32, other head dims (D256: K, V and
  the Q/dO ring are 256 KB of shared memory at BLOCK_N = 128, and dK/dV alone would be
  256 fp32 registers a thread with BLOCK_N = 64 in one warpgroup: it needs FA3's smaller
  tiles and split dQ matmul, not in this version).

Not deterministic: dQ is summed with fp32 atomics in whatever order the key blocks finish,
so repeated calls may differ in the last bits of dQ (dK and dV are reproducible). There is
no deterministic mode in this version.

Not reused from the Triton kernels (a ``@triton.jit`` function cannot be called from
``@gluon.jit`` code, whose tensors carry explicit layouts): ``_mask.visible`` and
``backward._probabilities``; ``_mask_tile`` and the exp2 line below restate them. The
preprocess kernel and the launch cache are reused as they are.

``attention_backward_hopper`` launches it. Not dispatched by ``flashcore.attention`` (measured
0.84-0.95x the Triton backward, backward_hopper_check.json): its warp-specialized successor,
kernels/backward_hopper_ws.py, is (``dispatch.backward_kernel``).
"""

from __future__ import annotations

import functools

import torch

from ._launch import CachedKernel, nvmma_layout, tma_strides_ok
from ._softmax import LOG2E
from .backward import _bwd_preprocess
from .forward_hopper import GLUON_AVAILABLE

if GLUON_AVAILABLE:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

HEAD_DIMS = (64, 128)
BLOCK_M = 64  # query rows per step (the N of S^T = K Q^T)
BLOCK_N = 128  # key rows per program: two warpgroups of 64
NUM_WARPS = 8
STAGES = 2  # Q/dO ring depth
MAX_GRID_Y = 65535  # the grid's second dimension is batch * KV heads

if GLUON_AVAILABLE:

    @gluon.jit
    def _mask_tile(p, queries, keys, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL: gl.constexpr):
        """p with every invisible (query, key) pair set to exactly 0 (``_mask.visible``)."""
        queries2 = gl.expand_dims(queries, 1)
        keys2 = gl.expand_dims(keys, 0)
        vis = (queries2 < seqlen_q) & (keys2 < seqlen_k)
        if IS_CAUSAL:
            vis = vis & (keys2 <= queries2 + causal_offset)
        return gl.where(vis, p, 0.0)

    @gluon.jit
    def _load_step(q_desc, do_desc, ring, t, n_m, m_first, batch, kv_head, group):
        """Issue the TMA copies of step t's Q and dO tiles into ring stage t % STAGES."""
        q_ring, do_ring, ready = ring
        NSTAGES: gl.constexpr = q_ring.shape[0]
        ROWS: gl.constexpr = q_ring.shape[1]
        stage = t % NSTAGES
        q_head = kv_head * group + t // n_m
        row0 = (m_first + t % n_m) * ROWS
        bar = ready.index(stage)
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [batch, q_head, row0, 0], bar, q_ring.index(stage))
        tma.async_copy_global_to_shared(
            do_desc, [batch, q_head, row0, 0], bar, do_ring.index(stage)
        )

    # Lengths, head counts and the offset change from call to call: specialized on their
    # divisibility by 16 (or the value 1), each new class would be another compile.
    @gluon.jit(
        do_not_specialize=[
            "num_q_heads", "num_kv_heads", "seqlen_q", "seqlen_k", "causal_offset",
        ]
    )  # fmt: skip
    def _bwd_hopper_kernel(
        q_desc, k_desc, v_desc, do_desc, Lse, Delta, DQacc, dK, dV,
        stride_dkz, stride_dkh, stride_dkn, stride_dkk,
        stride_dvz, stride_dvh, stride_dvn, stride_dvk,
        num_q_heads, num_kv_heads, seqlen_q, seqlen_k, causal_offset, qk_scale, sm_scale,
        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
    ):  # fmt: skip
        """Grid (key blocks, batch * KV heads); 8 warps: the key blocks of one head are
        consecutive, so programs running together share its Q and dO in L2. Lse, Delta: (B, Hq, Sq) fp32
        contiguous; DQacc: (B, Hq, Sq, D) fp32 contiguous, zeroed (unscaled dQ is added);
        dK, dV: (B, Hkv, Sk, D) in the input dtype, any strides."""
        dtype: gl.constexpr = q_desc.dtype
        NW: gl.constexpr = gl.num_warps()
        # S, dP (BLOCK_M x BLOCK_N) and dQ (BLOCK_M x D): the warpgroups split the columns
        # (keys, head dim), each a 64-row wgmma. dK, dV (BLOCK_N x D): they split the rows
        # (keys), 64 each. A query row's lse and delta are then 2 registers a thread.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NW // 2, 2], instr_shape=[16, BLOCK_N // 2, 16]
        )
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NW // 2, 2], instr_shape=[16, HEAD_DIM // 2, 16]
        )
        kv_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, HEAD_DIM, 16]
        )
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        key_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

        tile_n = gl.program_id(0)
        batch_kv = gl.program_id(1)
        batch = batch_kv // num_kv_heads
        kv_head = batch_kv % num_kv_heads
        group = num_q_heads // num_kv_heads
        n0 = tile_n * BLOCK_N

        # Shared memory: K, V (once), the Q/dO ring, P and dS (the A operands of dV, dK, dQ).
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
        ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], p_smem_layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        fence_async_shared()  # the barriers' init is visible to the copy engine
        ring = (q_ring, do_ring, ready)

        # Query blocks that see this key block: all of them, or (causal) from the block of
        # the first row that sees key n0 (row i sees key j iff j <= i + causal_offset).
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
        if total > 0:
            _load_step(q_desc, do_desc, ring, 0, n_m, m_first, batch, kv_head, group)

        offs_n = gl.arange(0, BLOCK_N, layout=key_layout)
        offs_m = gl.arange(0, BLOCK_M, layout=row_layout)
        dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
        dq_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
        dq_offs = gl.expand_dims(dq_rows, 1) * HEAD_DIM + gl.expand_dims(dq_cols, 0)
        dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
        # Steps whose first row m0 is in [full_lo, full_hi] need no mask: every row exists
        # and sees every key of the block (row m0 sees the block's last key, n0 + BLOCK_N
        # - 1, and the block has no keys past Sk). A block crossing Sk is masked throughout.
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
            # K and V through an index the compiler cannot fold (always 0): otherwise their
            # wgmma descriptors (24 64-bit values at D128) are hoisted out of the loop and
            # spilled; computed here they are a few uniform adds per step.
            slot = gl.inline_asm_elementwise(
                "and.b32 $0, $1, 0;", "=r,r", [t], dtype=gl.int32, is_pure=True, pack=1
            )
            k_smem = k_buf.index(slot)
            v_smem = v_buf.index(slot)
            do_tile = do_ring.index(stage)
            # Every warp has finished step t-1 (its matmuls waited on, so its reads of ring
            # stage (t+1) % STAGES, p_smem and ds_smem are done): they may be overwritten.
            gl.thread_barrier()
            if t + 1 < total:
                _load_step(q_desc, do_desc, ring, t + 1, n_m, m_first, batch, kv_head, group)
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
            # Rows past Sq: lse 0 and delta 0 keep the arithmetic finite; the mask zeroes p.
            lse = gl.load(Lse + row_base + queries, mask=in_q, other=0.0)
            delta = gl.load(Delta + row_base + queries, mask=in_q, other=0.0)
            lse2 = lse * 1.4426950408889634  # natural log -> the log2 units of exp2

            s = warpgroup_mma_wait(1, deps=(s_tok,))
            p = gl.exp2(s * qk_scale - gl.expand_dims(lse2, 1))
            # A step needs the mask where its block crosses the diagonal, the end of the
            # keys or the end of the queries.
            masked = (m0 < full_lo) | (m0 > full_hi)
            if masked:
                # Invisible pairs, including every pair of a row that sees no key (lse =
                # -inf, where exp2 gives inf), become exactly 0.
                # (+ slot: keys computed per step, not hoisted into 16 live registers)
                keys = n0 + slot + offs_n
                p = _mask_tile(p, queries, keys, seqlen_q, seqlen_k, causal_offset, IS_CAUSAL)
            p_smem.store(p.to(dtype))

            dp = warpgroup_mma_wait(0, deps=(dp_tok,))
            ds = p * (dp - gl.expand_dims(delta, 1))  # in units of the scaled scores
            ds_smem.store(ds.to(dtype))
            fence_async_shared()  # the stores above are visible to the tensor cores
            gl.thread_barrier()  # both warpgroups' columns of P and dS are written

            # dV += P^T dO, dK += dS^T Q (P, dS read transposed), dQ_partial = dS K.
            dv_tok = warpgroup_mma(p_smem.permute((1, 0)), do_tile, dv, is_async=True)
            dk_tok = warpgroup_mma(ds_smem.permute((1, 0)), q_tile, dk, is_async=True)
            dq_tok = warpgroup_mma(
                ds_smem,
                k_smem,
                gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout),
                use_acc=False,
                is_async=True,
            )
            dv, dk = warpgroup_mma_wait(1, deps=(dv_tok, dk_tok))
            dq = warpgroup_mma_wait(0, deps=(dq_tok,))
            # One 64-bit base per step; the elements' offsets are small and fixed.
            dq_mask = gl.expand_dims(m0 + dq_rows < seqlen_q, 1) & gl.expand_dims(
                dq_cols < HEAD_DIM, 0
            )
            gl.atomic_add(
                DQacc + (row_base + m0) * HEAD_DIM + dq_offs, dq, mask=dq_mask, sem="relaxed"
            )

        # dS was taken w.r.t. the scaled scores: dK = scale * dS^T Q. dV needs no scale.
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

    _BWD_LAUNCH = CachedKernel(_bwd_hopper_kernel, "gluon_bwd")


@functools.cache
def _is_hopper(index) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def supports(q, k, v, *, window=None, softcap=None, sinks=None, head_dims=HEAD_DIMS) -> bool:
    """True when this kernel computes the gradients of these inputs (module docstring); the
    warp-specialized backward passes its own ``head_dims``."""
    if not GLUON_AVAILABLE or q.device.type != "cuda":
        return False
    if window is not None or softcap is not None or sinks is not None:
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or q.shape[3] not in head_dims:
        return False
    if not _is_hopper(q.device.index) or k.shape[0] * k.shape[1] > MAX_GRID_Y:
        return False
    return all(tma_strides_ok(t) for t in (q, k, v))


def _descriptor(t, block_rows):
    dtype = gl.float16 if t.dtype == torch.float16 else gl.bfloat16
    head_dim = t.shape[3]
    # 4-D over the whole (B, H, S, D) tensor: rows past S come back as zeros.
    layout = nvmma_layout((block_rows, head_dim), dtype)
    return TensorDescriptor(
        t, list(t.shape), list(t.stride()), [1, 1, block_rows, head_dim], layout
    )


def attention_backward_hopper(
    do, q, k, v, out, lse, dq, dk, dv, *, causal_offset: int, is_causal: bool, scale: float
):
    """dQ, dK, dV of attention into ``dq``, ``dk``, ``dv`` (returned), on inputs that
    ``supports`` accepts.

    Args:
        do: dO, q's shape and dtype, any strides (copied once if TMA cannot read it).
        q (B, Hq, Sq, D), k, v (B, Hkv, Sk, D): the forward's inputs, float16/bfloat16.
        out: the forward's output (q's shape, any strides).
        lse: the forward's (B, Hq, Sq) natural-log log-sum-exp, float32 (-inf for rows
            that see no key), as ``backward.attention_backward`` takes it.
        dq, dk, dv: q's / k's shapes and dtype, any strides; every element is written.
        causal_offset, is_causal: query i sees key j iff j <= i + causal_offset (causal).
        scale: the softmax scale the forward used.

    Not deterministic (dQ summed with atomics). Temporaries: delta (B, Hq, Sq) and dQ's
    fp32 buffer (q's shape).
    """
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
    grid = (-(-seqlen_k // BLOCK_N), batch * num_kv_heads)
    _BWD_LAUNCH[grid](
        _descriptor(q, BLOCK_M),
        _descriptor(k, BLOCK_N),
        _descriptor(v, BLOCK_N),
        _descriptor(do, BLOCK_M),
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
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        STAGES=STAGES,
        IS_CAUSAL=bool(is_causal),
        num_warps=NUM_WARPS,
    )
    dq.copy_(dq_acc.mul_(scale))
    return dq, dk, dv
