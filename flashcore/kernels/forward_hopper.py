"""Hopper forward attention with FlashAttention-3's structure, written in Gluon.

A work tile is NUM_WG * 64 query rows (128; 192 with three consumer warpgroups) of one
(batch, query head). Each program walks work tiles t = pid, pid + grid, ...: one program per
tile, or a persistent grid of one program per SM (non-causal; ``PERSISTENT``). Its warps never
wait on each other except through shared-memory barriers (mbarriers):

    producer (1 warp)          TMA: Q once, then K_j, V_j into a STAGES-deep shared-memory ring
    consumer 0 (4 warps)       rows   0..63 of the tile: wgmma + online softmax
    consumer 1 (4 warps)       rows  64..127: the same, out of phase (ping-pong)
    [consumer 2 (4 warps)      rows 128..191, NUM_WG=3]

Inside each consumer warpgroup the softmax of key tile j overlaps the tensor cores'
P_{j-1} @ V_{j-1} (issued asynchronously just before, with S_j = Q @ K_j^T):

    issue S_j = Q K_j^T          (async)
    issue O  += P_{j-1} V_{j-1}  (async)
    wait S_j; release K_j; softmax(S_j) -> P_j, alpha_j     # runs while P V runs
    wait O; release V_{j-1}; O *= alpha_j

Ping-pong (PINGPONG=True): the consumer warpgroups take turns issuing their GEMMs (the turn
passes around the ring on a hardware named barrier at D128, an mbarrier per warpgroup
elsewhere: PINGPONG_TURNS), so one warpgroup's softmax runs while another's GEMMs occupy the
tensor cores. Causal launches take each head's longest (last) query tiles first. On a
persistent grid the producer loads the next work tile's Q and K/V while the consumers finish
the last P V and store the current one.

Which calls take this path (``supports``; everything else runs the Triton kernel in
forward.py, with the same numerics contract):

- CUDA device of compute capability 9.x (Hopper) and a triton with Gluon's Hopper API
  (``GLUON_AVAILABLE``; when the import fails, flashcore imports fine and never dispatches
  here);
- float16 or bfloat16; head dim 64, 128 or 256 for q, k and v, or DeepSeek-V3's MLA pair
  (192 for q and k, 128 for v: Q K^T reduces over 192, V's tile and the accumulator are 128
  wide, so neither product pays for a padded head dim);
- q, k, v with unit stride along D, 16-byte aligned base pointers and every other stride a
  nonzero multiple of 16 bytes (TMA descriptors); ``out`` any strides (stored by the copy
  engine from shared memory where a TMA descriptor takes them at D64/D128, ``O_TMA_FOR``;
  pointer stores otherwise);
- any Sq, Sk >= 1 (TMA zero-fills rows past the end; keys past Sk are masked), GQA/MQA
  (query head h reads KV head h // (Hq // Hkv)), non-causal and both causal alignments
  (``causal_offset`` as in forward.py), ``return_lse``;
- not: sliding windows, softcap, float32, other head dims or pairs, calls with an explicit
  ``config`` (forward.py takes them).

Offsets: TMA coordinates are per-dimension int32 (B, H, S, D each < 2^31), addresses
64-bit; the output and lse pointers are formed in int64, so tensors past 2^31 elements
are exact.

FP8 mode (``attention_hopper_fp8``, kernels/fp8.py's quantized inputs; ``flashcore.fp8_attention``
takes it where ``dispatch.FP8_GLUON_FROM`` says it was measured faster): the same pipeline with e4m3 Q K^T and P V. v is
stored transposed by the quantizer (8-bit wgmma wants both operands K-major, and P V reduces
over the keys), so the producer loads V^T tiles; each key tile's scores are scaled by its q and
k block scales (a 64-row warpgroup tile and a key tile each lie inside one block of
fp8.QUANT_BLOCK rows), P is scaled by P_SCALE and goes to the P V wgmma through shared memory,
and the epilogue applies v's per-channel scale. Top-left causal alignment only, no lse.

``attention_hopper`` launches it. ``flashcore.attention`` launches it only where the
dispatch table in flashcore/interface.py (``FORWARD_GLUON_FROM``) says it was measured
faster than the Triton kernel (H100, bf16, B*S = 16K tokens, H*D = 2048, side by side in one process; the sweep is
recorded in results/nvidia-h100-80gb-hbm3/fa3_attempt.json). The environment variable
``FLASHCORE_FORWARD_HOPPER`` overrides the table for tests and sanitizer runs: ``always``
(every supported call), ``never`` (today's kernel only); default ``auto``.
``FLASHCORE_HOPPER_MAX_PROGRAMS=N`` caps the persistent grid at N programs, so that a
sanitizer run makes every program walk many work tiles.

This file is long because the kernel is (about 560 of its lines): one warp-specialized kernel
serves fp16/bf16, MLA's head dims, learnable sinks and the FP8 mode, each partition reading top
to bottom; its launchers and lean launch path follow it.
"""

from __future__ import annotations

import functools
import os

import torch

from ._launch import CachedKernel, new_output, nvmma_layout, tma_strides_ok
from ._softmax import LOG2E
from .fp8 import QUANT_BLOCK as FP8_QUANT_ROWS

try:  # Gluon is experimental; its API moves between triton releases.
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

    GLUON_AVAILABLE = hasattr(gl, "warp_specialize") and hasattr(gl, "NVMMADistributedLayout")
except Exception:  # pragma: no cover - depends on the installed triton
    GLUON_AVAILABLE = False

# q/k head dim -> the v head dims computed with it: the same one, or MLA's 128 with 192.
HEAD_DIMS = {64: (64,), 128: (128,), 192: (128,), 256: (256,)}
# A TMA block's sides are powers of two: q/k head dims that are not load their last QK_TAIL
# columns through a second descriptor, and Q K^T is two wgmma groups (main, then tail).
QK_TAIL = {192: 64}
BLOCK_M_WG = 64  # query rows per consumer warpgroup (wgmma's M per warpgroup)
# setmaxnreg budget per consumer thread: 64K registers shared by the consumer warpgroups and
# the producer's warpgroup (24 per thread), in multiples of 8.
CONSUMER_REGS = {2: 240, 3: 160}

# Tile configs per q/k head dim: BLOCK_N, STAGES, consumer warpgroups (default 2). Shared
# memory: Q NUM_WG*64*D, ring STAGES*BN*(D + D_v) elements; D=256 with BN=64 and 2 stages uses
# 192 KB of 227, D=192 (D_v=128) with BN=128 and 2 stages 208 KB.
# D=64 runs three consumer warpgroups (192-row tiles, FA3's D64 tile) with 2 stages: measured
# on the H100 (tools/gpu_forward_hopper.py --head-dims 64, 3 rotated rounds, commit b391df4,
# logs/d64_gluon_sweep_b391df4.json), TFLOP/s three vs two warpgroups (128 x 3) vs Triton:
#   full   S=4K 458 / 432 / 420, S=8K 454 / 430 / 411, S=16K 451 / 423 / 427
#   causal S=4K 368 / 387 / 389, S=8K 411 / 415 / 412, S=16K 455 / 418 / 423
#   causal S=1K 134 / 252 / 317 (the 192-row pairs leave most SMs idle at short causal)
# An older run (f38c623) had found three no faster than two with 3 stages. Compiled offline for
# sm_90a at 0099be1 neither spills at 160 registers a thread, BLOCK_N 64 or 128, 2-4 stages.
# dispatch.FORWARD_GLUON_FROM sends D=64 here only where this config was measured faster.
# (Key tiles of FA3's widths, which are no powers of two, held as two buffers with two score
# accumulators under one softmax, were slower at all but two shapes: D128 160 and 192 keys
# 0.85-0.99 and 0.69-1.00 of 128 at S 2K-16K, D256 80 keys 0.88-0.93 of 64, D64 192 keys
# 0.63-1.02 of 128; correct, 72 of 72 GPU cases (H100, 2026-11-27,
# logs/split_ab_0430849.json). The trial's code is commit 0430849.)
# (Two Q buffers per consumer warpgroup, so that the next work tile's Q loads while the current
# tile runs rather than after its last Q K^T, changed nothing beyond the harness's spread: H200,
# D64 and D128, S 1K-16K, causal and not, one / two buffers 0.98-1.02, D64 causal S 1K 130 / 129
# and 2K 210 / 209 TFLOP/s (logs/forward_qbufs_a0ed685.json; 488 GPU tests passed with it). The
# trial's code is commit a0ed685.)
VARIANTS = {
    64: dict(BLOCK_N=128, STAGES=2, NUM_WG=3),
    128: dict(BLOCK_N=128, STAGES=2),
    192: dict(BLOCK_N=128, STAGES=2),
    256: dict(BLOCK_N=64, STAGES=2),
}
# Grid per causal mode: persistent (one program per SM walks the work units, so the next
# unit's loads overlap the last one's P V and store) or one program per work unit. Measured
# on the H100 (commit 2c03bb9, interleaved), persistent vs per unit, TFLOP/s: D128 full S=1K
# 502 vs 479, 16K 623 vs 595; D128 causal S=2K 469 vs 443, 16K 611 vs 601; D256 causal S=1K
# 354 vs 341. Work units are pairs of query tiles (_work_unit): before pairing, a persistent
# causal walk over single tiles was a third slower than one program per tile (D128 S=16K 414
# vs 644). Non-causal units of single tiles measured level with the pairs (branch
# forward-single-tiles, 05d8363; A/B 0.98-1.02, logs/forward_single_tiles_ab_05d8363.json), so
# both keep the pairs. Both modes run persistent.
PERSISTENT = {False: True, True: True}
# The output tile stored by the copy engine from shared memory (O_TMA), per q/k head dim, where
# out has TMA strides: D64 and D128 have the shared memory for it (D128 197 KB with it); D256
# and MLA's 192 would need 256 KB and 240 KB. Pointer stores from the wgmma layout write each
# row in 4-byte pieces, 16 bytes of a row per warp instruction. Measured on the H200 against
# the pointer stores (tools/ab_timing.py --suite gluon_forward, 3 alternating rounds, commit
# 2f0df95, logs/otma_ab_timing_2f0df95.json; TMA / pointer time, bitwise-equal outputs):
#   D64  full 0.839 0.924 0.955 0.971, causal 0.946 0.982 0.960 0.983 (S 1K, 2K, 4K, 8K)
#   D128 full 0.847 0.902 0.939 0.970, causal 0.843 0.871 0.919 0.964
#   D256 (unchanged code path) 0.990-1.009
O_TMA_FOR = {64: True, 128: True}
# fp8 (kernels/fp8.py's inputs): tile configs per head dim, BLOCK_N dividing fp8.QUANT_BLOCK
# (a key tile lies inside one key block's scale). Measured on the H100 beside each other at
# S 4K-16K, causal and not (tools/fp8_hopper_probe.py, commits ea07c61 and b45f4b3,
# logs/fp8_hopper_probe_*.json), TFLOP/s:
#   D128: 128 keys x 4 stages 792-862 full, 669-838 causal; x 2 stages 793-867 full but
#         660-762 causal; 3 consumer warpgroups (192 rows, 148 bytes of spills) 731-841 / 458-753
#   D256: 128 keys x 2 stages 1062-1177 full, 886-1182 causal; 64 x 3 862-955 / 774-991
#   D64:  128 x 2 466-496 full (3 warpgroups 472-520), below the Triton fp8 kernel's 544-566:
#         D64 runs there (dispatch.FP8_GLUON_FROM); this entry serves FLASHCORE_FP8_HOPPER=always
FP8_VARIANTS = {
    64: dict(BLOCK_N=128, STAGES=2),
    128: dict(BLOCK_N=128, STAGES=4),
    256: dict(BLOCK_N=128, STAGES=2),
}

# exp2 on the FMA pipe for part of a tile (FlashAttention-4's trick on Blackwell): the
# multi-function unit (MUFU) computes 16 exp2 a clock per SM, against 128 FMAs, and at FP8
# D128 a tile's exps take as long as its two matmuls at peak. EXP2_EMULATED = k computes
# k of every 8 consecutive register values of a thread by 2^x = 2^round(x) * p(x - round(x)),
# p a degree-3 polynomial fitted to relative error on [-0.5, 0.5] (max 7.5e-5, far below
# bf16's 3.9e-3 and e4m3's rounding of P), and the other 8 - k on the MUFU. Unmasked tiles
# only: their x = s - m is finite and <= 0; x is clamped at -125 (2^-125 instead of the
# MUFU's flush to 0, a difference no P V or row sum can see).
_EXP2_POLY = (
    "{{\n.reg .f32 xc, r, j, f, p;\n.reg .b32 rb, pb;\n"
    "max.f32 xc, ${x}, 0fC2FA0000;\n"  # clamp at -125
    "add.rn.f32 r, xc, 0f4B400000;\n"  # + 1.5 * 2^23: r's low mantissa bits = round(xc)
    "sub.rn.f32 j, r, 0f4B400000;\n"
    "sub.rn.f32 f, xc, j;\n"  # f in [-0.5, 0.5]
    "fma.rn.f32 p, f, 0f3D61FB59, 0f3E786ED8;\n"
    "fma.rn.f32 p, p, f, 0f3F31798D;\n"
    "fma.rn.f32 p, p, f, 0f3F7FFB4A;\n"
    "mov.b32 rb, r;\nshl.b32 rb, rb, 23;\n"  # round(xc) into the exponent field
    "mov.b32 pb, p;\nadd.s32 ${y}, pb, rb;\n}}\n"
)


def _exp2_pack_asm(emulated: int) -> str:
    """PTX for 8 values ($8..$15 in, $0..$7 out): the last ``emulated`` by the polynomial."""
    lines = []
    for i in range(8):
        if i < 8 - emulated:
            lines.append(f"ex2.approx.ftz.f32 ${i}, ${i + 8};\n")
        else:
            lines.append(_EXP2_POLY.format(x=i + 8, y=i))
    return "".join(lines)


# Emulated exps of every 8 by default, non-causal calls only, by head dim. Measured on the H100
# (tools/exp2_emulation_probe.py at 216cefa, logs/exp2_emulation_*_216cefa.*, bf16, B*S = 16K,
# H*D = 2048): D64 non-causal with one in 8, 393/468/484/472 TFLOP/s against 393/450/453/460
# at S 2K/4K/8K/16K; D64 causal 2.4-5.2% slower (its masked diagonal tiles run the MUFU
# anyway); D128 -2.7% to +0.9% and FP8 D128 within +-1.5%, so neither takes it.
EXP2_EMULATED_FULL = {64: 1}


if GLUON_AVAILABLE:
    # Rows of q (and keys of k) per fp8 scale: kernels/fp8.py's QUANT_BLOCK.
    FP8_QUANT_BLOCK = gl.constexpr(FP8_QUANT_ROWS)
    # (A jit function reads constexpr globals only: one string per emulated count.)
    _EXP2_ASM_1 = gl.constexpr(_exp2_pack_asm(1))
    _EXP2_ASM_2 = gl.constexpr(_exp2_pack_asm(2))
    _EXP2_ASM_3 = gl.constexpr(_exp2_pack_asm(3))
    _EXP2_ASM_4 = gl.constexpr(_exp2_pack_asm(4))
    # Ping-pong turns on hardware named barriers (PINGPONG=2, FA3's scheduler barriers):
    # warpgroup wg takes its turn with bar.sync on TURN_BARRIER_0 + wg, and the warpgroup
    # before it in the ring passes it with bar.arrive there; a phase completes when both
    # warpgroups' 128 threads are in (256). Why not an mbarrier turn (PINGPONG=1): triton puts
    # a bar.sync of the warpgroup before every mbarrier wait and every (thread-0) arrive of a
    # 4-warp partition, so passing the turn waited on the warpgroup's slowest warp and the
    # next warpgroup polled a try_wait loop. Triton's own named barriers in this kernel are
    # 0-3 (one per partition and the warp-specialize handshake).
    # The ring's slot releases stay on mbarriers: moved to named barriers (a consumer warp's
    # bar.arrive once its wgmma wait returned, the producer's bar.sync before the refill; two
    # fewer bar.syncs per key tile), ptxas scheduled the bar.arrive above the wgmma wait
    # (WARPGROUP.DEPBAR) that it follows in the PTX: bar.arrive orders the thread's own memory
    # accesses, not the wgmma's asynchronous reads, so the slot was freed while being read.
    TURN_BARRIER_0 = gl.constexpr(8)
    _TURN_SYNC_ASM = gl.constexpr("bar.sync $1, 256;\n\tmov.u32 $0, 0;")
    _TURN_ARRIVE_ASM = gl.constexpr("bar.arrive $1, 256;\n\tmov.u32 $0, 0;")

    @gluon.jit
    def _exp2_pack(x, asm: gl.constexpr):
        return gl.inline_asm_elementwise(
            asm, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r", [x], dtype=gl.float32,
            is_pure=True, pack=8,
        )  # fmt: skip

    @gluon.jit
    def _exp2(x, EXP2_EMULATED: gl.constexpr):
        """exp2(x), with EXP2_EMULATED (0-4) of every 8 values on the FMA pipe."""
        gl.static_assert(EXP2_EMULATED >= 0 and EXP2_EMULATED <= 4)
        if EXP2_EMULATED == 1:
            p = _exp2_pack(x, _EXP2_ASM_1)
        elif EXP2_EMULATED == 2:
            p = _exp2_pack(x, _EXP2_ASM_2)
        elif EXP2_EMULATED == 3:
            p = _exp2_pack(x, _EXP2_ASM_3)
        elif EXP2_EMULATED == 4:
            p = _exp2_pack(x, _EXP2_ASM_4)
        else:
            p = gl.exp2(x)
        return p

    @gluon.jit
    def _work_unit(u, sched):
        """Work unit u -> (batch * head, pair index, tiles in the unit). A unit is the query
        tiles `num_m - 1 - pair` and `pair` of one head (the middle tile alone when the count
        is odd): under a causal mask their key-tile counts add up to the same total for every
        pair, so units are equal work and a static walk over them is balanced. The units of a
        head are consecutive, so the programs running together share its K/V in L2. (A walk
        over single tiles in a per-head order handed some programs the long tiles of every
        head: 3x imbalance at S=16K; longest tile first across the whole launch spread the
        running programs over ~130 heads and lost L2 reuse: D128 S2K causal 0.60x cuDNN.)"""
        units_per_head = (sched[0] + 1) // 2
        pair = u % units_per_head
        return u // units_per_head, pair, 2 - (2 * pair + 1 == sched[0]).to(gl.int32)

    @gluon.jit
    def _tile_coords(
        batch_head, tile_m, sched, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        IS_CAUSAL: gl.constexpr,
    ):  # fmt: skip
        """(batch * head, query tile) -> (batch, query head, KV head, first query row, key
        tiles, key tiles every row sees whole)."""
        (
            num_m_tiles,
            num_batch_heads,
            num_q_heads,
            gqa_group_size,
            seqlen_q,
            seqlen_k,
            causal_offset,
        ) = sched
        q_head = batch_head % num_q_heads
        q_row0 = tile_m * BLOCK_M
        # Key tiles [0, n_unmasked) are seen whole by every row; the rest (causal diagonal,
        # end of the keys) are masked. At least one tile, so the pipeline always runs; a tile
        # no row sees is fully masked and contributes exact zeros.
        full_tiles = seqlen_k // BLOCK_N
        if IS_CAUSAL:
            key_end = gl.minimum(q_row0 + BLOCK_M + causal_offset, seqlen_k)
            n_unmasked = gl.minimum(
                gl.maximum((q_row0 + causal_offset + 1) // BLOCK_N, 0), full_tiles
            )
        else:
            key_end = seqlen_k
            n_unmasked = full_tiles
        n_tiles = gl.maximum(gl.cdiv(gl.maximum(key_end, 0), BLOCK_N), 1)
        n_unmasked = gl.minimum(n_unmasked, n_tiles)
        return (
            batch_head // num_q_heads,
            q_head,
            q_head // gqa_group_size,
            q_row0,
            n_tiles,
            n_unmasked,
        )

    @gluon.jit
    def _producer(
        loads, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
        QK_TAIL: gl.constexpr, V_T: gl.constexpr = False,
    ):  # fmt: skip
        """One warp: TMA loads only, for every work tile of this program in turn. A Q buffer
        is refilled once its warpgroup has issued its last Q K^T of the previous tile; a K/V
        stage once every consumer warpgroup released it. `it` counts K/V tiles over the whole
        program, so ring positions and barrier phases carry across work tiles. QK_TAIL > 0:
        Q's and K's last QK_TAIL columns come through descriptors of their own into buffers
        of their own, on the same barriers. V_T (fp8): v is stored transposed, (B, H, D_v, S),
        and its tile is D_v x BLOCK_N."""
        descs, qbuf, ring, sched = loads
        q_desc, k_desc, v_desc, q_tail_desc, k_tail_desc = descs
        q_smem, q_tail, q_ready, q_empty = qbuf
        k_smem, k_tail, v_smem, k_ready, k_empty, v_ready, v_empty = ring
        MAIN: gl.constexpr = q_smem.shape[2]
        NUM_WG: gl.constexpr = q_smem.shape[0]
        ROWS: gl.constexpr = q_smem.shape[1]
        num_units = sched[1] * ((sched[0] + 1) // 2)
        it = 0
        local = 0
        for u in range(gl.program_id(0), num_units, gl.num_programs(0)):
            batch_head, pair, unit_tiles = _work_unit(u, sched)
            for half in range(unit_tiles):
                tile_m = pair + (1 - half) * (sched[0] - 1 - 2 * pair)  # the longer tile first
                batch, q_head, kv_head, q_row0, n_tiles, n_unmasked = _tile_coords(
                    batch_head, tile_m, sched, NUM_WG * ROWS, BLOCK_N, IS_CAUSAL
                )
                # The first wait on a fresh barrier uses parity 1, which it reports as complete:
                # every buffer starts empty.
                for wg in gl.static_range(NUM_WG):
                    mbarrier.wait(q_empty.index(wg), (local & 1) ^ 1)
                    if QK_TAIL > 0:
                        mbarrier.expect(
                            q_ready.index(wg),
                            q_desc.block_type.nbytes + q_tail_desc.block_type.nbytes,
                        )
                        tma.async_copy_global_to_shared(
                            q_tail_desc,
                            [batch, q_head, q_row0 + wg * ROWS, MAIN],
                            q_ready.index(wg),
                            q_tail.index(wg),
                        )
                    else:
                        mbarrier.expect(q_ready.index(wg), q_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(
                        q_desc,
                        [batch, q_head, q_row0 + wg * ROWS, 0],
                        q_ready.index(wg),
                        q_smem.index(wg),
                    )
                for j in range(n_tiles):
                    stage = (it + j) % STAGES
                    empty_phase = (((it + j) // STAGES) & 1) ^ 1
                    mbarrier.wait(k_empty.index(stage), empty_phase)
                    if QK_TAIL > 0:
                        mbarrier.expect(
                            k_ready.index(stage),
                            k_desc.block_type.nbytes + k_tail_desc.block_type.nbytes,
                        )
                        tma.async_copy_global_to_shared(
                            k_tail_desc,
                            [batch, kv_head, j * BLOCK_N, MAIN],
                            k_ready.index(stage),
                            k_tail.index(stage),
                        )
                    else:
                        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(
                        k_desc,
                        [batch, kv_head, j * BLOCK_N, 0],
                        k_ready.index(stage),
                        k_smem.index(stage),
                    )
                    mbarrier.wait(v_empty.index(stage), empty_phase)
                    mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
                    if V_T:
                        v_coords = [batch, kv_head, 0, j * BLOCK_N]
                    else:
                        v_coords = [batch, kv_head, j * BLOCK_N, 0]
                    tma.async_copy_global_to_shared(
                        v_desc, v_coords, v_ready.index(stage), v_smem.index(stage)
                    )
                it += n_tiles
                local += 1

    @gluon.jit
    def _softmax_step(
        s, m_i, l_i, qk_scale, rows, start_n, seqlen_k, causal_offset,
        s_layout: gl.constexpr, BLOCK_N: gl.constexpr, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr,
        EXP2_EMULATED: gl.constexpr = 0,
    ):  # fmt: skip
        """Online softmax over one key tile: p = exp2(s*scale - m_new), the rescale factor
        alpha for what was accumulated before, the new running max and denominator.
        EXP2_EMULATED: unmasked tiles compute that many of every 8 exps on the FMA pipe."""
        if MASKED:
            # One compare per score (FA4's column limit): the tile-local column against the
            # row's first key it does not see, past the causal diagonal or the end of the keys.
            # Against a column compare with the sequence end and one with the diagonal: the
            # same output bytes, causal 1-5% faster (H200, S 1K-8K: D64 0.946-0.994, D128
            # 0.966-0.989, D256 0.980-0.991 of the time; non-causal 0.995-1.011;
            # logs/masklimit_ab_timing_a0ed685.json).
            cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            if IS_CAUSAL:
                limit = gl.minimum(rows + (causal_offset + 1 - start_n), seqlen_k - start_n)
                visible = gl.expand_dims(cols, 0) < gl.expand_dims(limit, 1)
            else:
                visible = gl.expand_dims(cols < seqlen_k - start_n, 0)
            s = gl.where(visible, s * qk_scale, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s, 1))
            # A row that has seen no key keeps m = -inf: subtract 0 instead so p and
            # alpha are exactly 0, never NaN.
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
            p = gl.exp2(s - gl.expand_dims(m_use, 1))
        else:
            m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
            m_use = m_new
            if EXP2_EMULATED == 0:
                # gl.exp2 here, not through _exp2: an inlined call leaves a scope in the line
                # info whose labels change ptxas's schedule (the same PTX, other SASS)
                p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
            else:
                p = _exp2(s * qk_scale - gl.expand_dims(m_use, 1), EXP2_EMULATED)
        alpha = gl.exp2(m_i - m_use)
        return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)

    @gluon.jit
    def _issue_qk(q_tiles, k_tiles, stage, zero_s, QK_TAIL: gl.constexpr):
        """Issue S = Q K_stage^T (async). QK_TAIL > 0: over the main columns, then the tail's
        into the same accumulator (two wgmma groups; waits count them both)."""
        q_tile, q_tail = q_tiles
        k_smem, k_tail = k_tiles
        s_tok = warpgroup_mma(
            q_tile, k_smem.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True
        )
        if QK_TAIL > 0:
            s_tok = warpgroup_mma(q_tail, k_tail.index(stage).permute((1, 0)), s_tok, is_async=True)
        return s_tok

    @gluon.jit
    def _issue_pv(p_op, v_smem, slot, acc, V_T: gl.constexpr):
        """Issue O += P V_slot (async). V_T (fp8): the stored tile is V^T (D_v x keys), so
        that the operand is K-major along the keys, as an 8-bit wgmma requires."""
        if V_T:
            return warpgroup_mma(p_op, v_smem.index(slot).permute((1, 0)), acc, is_async=True)
        else:
            return warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)

    @gluon.jit
    def _p_operand(p, layout: gl.constexpr, dtype: gl.constexpr):
        """P as the A operand of P V: registers, in the operand dtype. Converted two at a time
        with one cvt.rn.{bf16,f16}x2.f32 per pair of a thread's consecutive values (the same
        rounding as two single cvt.rn): converted one by one and packed, ptxas paired them in
        the wrong halves and swapped every register back with a PRMT, one per two scores
        (D64 steady-state loop 455 -> 423 instructions, D128 492 -> 473, offline sm_90a; the
        same output bytes, D64 2-8% less time on the H200, logs/ppack_ab_timing_99cda77.json)."""
        if dtype == gl.bfloat16:
            p16 = gl.inline_asm_elementwise(
                "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [p], dtype=gl.bfloat16,
                is_pure=True, pack=2,
            )  # fmt: skip
        else:
            p16 = gl.inline_asm_elementwise(
                "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,r,r", [p], dtype=gl.float16,
                is_pure=True, pack=2,
            )  # fmt: skip
        return gl.convert_layout(p16, layout)

    @gluon.jit
    def _p_to_shared(p, p_buf, P_SCALE: gl.constexpr):
        """fp8: P as the A operand of P V, through shared memory (an 8-bit register operand
        cannot be held past its asynchronous wgmma: the wait that keeps it alive takes
        16/32-bit values only). p in [0, 1] times P_SCALE, a power of two (exact), moves it
        into e4m3's normal range. The caller has waited for the P V that read p_buf last."""
        p_buf.store((p * P_SCALE).to(p_buf.dtype))
        fence_async_shared()
        return p_buf

    @gluon.jit
    def _named_barrier(asm: gl.constexpr, barrier_id: gl.constexpr):
        """bar.sync / bar.arrive on hardware named barrier `barrier_id` (inline PTX: Gluon has
        no named barriers; the result is a dummy)."""
        gl.inline_asm_elementwise(
            asm, "=r,r", [gl.to_tensor(barrier_id)], dtype=gl.int32, is_pure=False, pack=1
        )

    @gluon.jit
    def _take_turn(turn, wg: gl.constexpr, turn_phase, PINGPONG: gl.constexpr):
        """Wait until warpgroup `wg` may issue its GEMMs (PINGPONG 1: the mbarrier turn[wg];
        2: named barrier TURN_BARRIER_0 + wg)."""
        if PINGPONG == 2:
            _named_barrier(_TURN_SYNC_ASM, TURN_BARRIER_0 + wg)
        elif PINGPONG:
            mbarrier.wait(turn.index(wg), turn_phase)
        return turn_phase ^ 1

    @gluon.jit
    def _pass_turn(turn, wg: gl.constexpr, PINGPONG: gl.constexpr):
        """Hand the turn to the next warpgroup of the ring."""
        NUM_WG: gl.constexpr = turn.shape[0]
        if PINGPONG == 2:
            _named_barrier(_TURN_ARRIVE_ASM, TURN_BARRIER_0 + (wg + 1) % NUM_WG)
        elif PINGPONG:
            mbarrier.arrive(turn.index((wg + 1) % NUM_WG), count=1)

    @gluon.jit
    def _attend_tiles(
        acc, p_op, m_i, l_i, turn_phase, q_tiles, ring, turn, rows, it, first, last,
        seqlen_k, causal_offset, qk_scale, wg: gl.constexpr, s_layout: gl.constexpr,
        o_layout: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
        MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
        QK_TAIL: gl.constexpr, k_scales=None, P_SCALE: gl.constexpr = 1.0,
        EXP2_EMULATED: gl.constexpr = 0,
    ):  # fmt: skip
        """Key tiles [first, last) of one warpgroup's work tile, whose key tile 0 sits at ring
        position `it`; tile j's softmax overlaps P_{j-1} V_{j-1}. fp8 (k_scales not None): key
        tile j's scores are scaled by qk_scale * its key block's scale (a tile lies inside one
        block of FP8_QUANT_BLOCK keys), and V is stored transposed."""
        FP8: gl.constexpr = k_scales is not None
        k_smem, k_tail, v_smem, k_ready, k_empty, v_ready, v_empty = ring
        q_tile = q_tiles[0]
        ROWS: gl.constexpr = q_tile.shape[0]
        zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        for j in range(first, last):
            stage = (it + j) % STAGES
            prev = (it + j - 1) % STAGES
            mbarrier.wait(k_ready.index(stage), ((it + j) // STAGES) & 1)
            mbarrier.wait(v_ready.index(prev), ((it + j - 1) // STAGES) & 1)
            turn_phase = _take_turn(turn, wg, turn_phase, PINGPONG)
            s_tok = _issue_qk(q_tiles, (k_smem, k_tail), stage, zero_s, QK_TAIL)
            o_tok = _issue_pv(p_op, v_smem, prev, acc, FP8)
            _pass_turn(turn, wg, PINGPONG)
            tile_scale = qk_scale
            if FP8:  # loaded while S_j runs
                tile_scale = qk_scale * gl.load(k_scales + (j * BLOCK_N) // FP8_QUANT_BLOCK)
            # Groups retire in order: one outstanding means S_j is done, P V may run on.
            # (With a tail S_j is two groups, issued before P V's: the same wait.)
            s = warpgroup_mma_wait(1, deps=(s_tok,))
            mbarrier.arrive(k_empty.index(stage), count=1)
            p, alpha, m_i, l_i = _softmax_step(
                s, m_i, l_i, tile_scale, rows, j * BLOCK_N, seqlen_k, causal_offset,
                s_layout, BLOCK_N, MASKED, IS_CAUSAL, EXP2_EMULATED,
            )  # fmt: skip
            acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
            mbarrier.arrive(v_empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            if FP8:
                p_op = _p_to_shared(p, p_op, P_SCALE)
            else:
                p_op = _p_operand(p, gl.constexpr(p_op.type.layout), q_tile.dtype)
        return acc, p_op, m_i, l_i, turn_phase

    @gluon.jit
    def _consumer(
        wg: gl.constexpr, args, HEAD_DIM_V: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
        IS_CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
        HAS_SINKS: gl.constexpr, QK_TAIL: gl.constexpr, FP8: gl.constexpr = False,
        P_SCALE: gl.constexpr = 1.0, EXP2_EMULATED: gl.constexpr = 0, O_TMA: gl.constexpr = False,
    ):  # fmt: skip
        """Consumer warpgroup `wg`: rows [64 wg, 64 wg + 64) of every work tile of this program.
        Q K^T reduces over q's head dim (the shared tiles' width); the output is HEAD_DIM_V wide.
        FP8: e4m3 operands (8-bit wgmma: K 32 per instruction; P through shared memory), the
        scores scaled per (query block, key block) by q's and k's block scales, P by P_SCALE,
        and the output by v's per-channel scale / P_SCALE (kernels/fp8.py's recipes)."""
        outputs, qbuf, ring, turn, sched, qk_scale, fp8_args = args
        QScale, KScale, VScale, n_q_blocks, n_k_blocks, inv_p_scale, p_smem = fp8_args
        Out, Lse, Sinks, stride_oz, stride_oh, stride_om, stride_ok, o_store = outputs
        o_desc, o_smem = o_store
        q_smem, q_tail, q_ready, q_empty = qbuf
        k_smem, k_tail, v_smem, k_ready, k_empty, v_ready, v_empty = ring
        (
            num_m_tiles,
            num_batch_heads,
            num_q_heads,
            gqa_group_size,
            seqlen_q,
            seqlen_k,
            causal_offset,
        ) = sched
        NUM_WG: gl.constexpr = q_smem.shape[0]
        ROWS: gl.constexpr = q_smem.shape[1]
        dtype: gl.constexpr = q_smem.dtype
        # wgmma's K per instruction is 32 bytes of operand.
        INSTR_K: gl.constexpr = 32 if FP8 else 16
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, INSTR_K]
        )
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM_V, INSTR_K]
        )
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        q_tile = q_smem.index(wg)
        q_tiles = (q_tile, q_tail.index(wg))

        turn_phase = 0
        if PINGPONG == 2 and wg == NUM_WG - 1:
            _named_barrier(_TURN_ARRIVE_ASM, TURN_BARRIER_0)  # warpgroup 0 issues first
        it = 0  # ring position of this work tile's key tile 0
        local = 0  # work tiles done by this program
        for u in range(
            gl.program_id(0), num_batch_heads * ((num_m_tiles + 1) // 2), gl.num_programs(0)
        ):
            batch_head, pair, unit_tiles = _work_unit(u, sched)
            for half in range(unit_tiles):
                tile_m = pair + (1 - half) * (num_m_tiles - 1 - 2 * pair)  # the longer tile first
                batch, q_head, kv_head, q_row0, n_tiles, n_unmasked = _tile_coords(
                    batch_head, tile_m, sched, NUM_WG * ROWS, BLOCK_N, IS_CAUSAL
                )
                rows = q_row0 + wg * ROWS + gl.arange(0, ROWS, layout=row_layout)
                tile_qk_scale = qk_scale
                k_scales = None
                if FP8:
                    # This warpgroup's 64 rows lie inside one block of FP8_QUANT_BLOCK queries.
                    tile_qk_scale = qk_scale * gl.load(
                        QScale
                        + batch_head.to(gl.int64) * n_q_blocks
                        + (q_row0 + wg * ROWS) // FP8_QUANT_BLOCK
                    )
                    num_kv_heads = num_q_heads // gqa_group_size
                    k_scales = KScale + (batch * num_kv_heads + kv_head).to(gl.int64) * n_k_blocks
                if HAS_SINKS:
                    # A learnable sink (gpt-oss) is one more logit of every row with no value
                    # row: start each row as if it had seen it, with running max the sink (log2
                    # units) and denominator exp2(0) = 1. A row that sees no key returns zeros
                    # and lse = the sink.
                    sink = gl.load(Sinks + q_head).to(gl.float32) * 1.4426950408889634
                    m_i = gl.full([ROWS], 0.0, gl.float32, row_layout) + sink
                    l_i = gl.full([ROWS], 1.0, gl.float32, row_layout)
                else:
                    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
                    l_i = gl.zeros([ROWS], gl.float32, row_layout)
                acc = gl.zeros([ROWS, HEAD_DIM_V], gl.float32, o_layout)
                mbarrier.wait(q_ready.index(wg), local & 1)

                # Key tile 0 (always masked: it may be the only tile, or cross the diagonal).
                stage = it % STAGES
                mbarrier.wait(k_ready.index(stage), (it // STAGES) & 1)
                turn_phase = _take_turn(turn, wg, turn_phase, PINGPONG)
                s_tok = _issue_qk(
                    q_tiles, (k_smem, k_tail), stage,
                    gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout), QK_TAIL,
                )  # fmt: skip
                _pass_turn(turn, wg, PINGPONG)
                tile_scale = tile_qk_scale
                if FP8:
                    tile_scale = tile_qk_scale * gl.load(k_scales)
                s = warpgroup_mma_wait(0, deps=(s_tok,))
                mbarrier.arrive(k_empty.index(stage), count=1)
                p, alpha, m_i, l_i = _softmax_step(
                s, m_i, l_i, tile_scale, rows, 0, seqlen_k, causal_offset,
                s_layout, BLOCK_N, True, IS_CAUSAL,
            )  # fmt: skip
                if FP8:
                    p_op = _p_to_shared(p, p_smem.index(wg), P_SCALE)
                else:
                    p_op = _p_operand(p, p_layout, dtype)

                # Key tiles every row sees whole, then the tiles that need a mask.
                mid = gl.maximum(n_unmasked, 1)
                acc, p_op, m_i, l_i, turn_phase = _attend_tiles(
                acc, p_op, m_i, l_i, turn_phase, q_tiles, ring, turn, rows, it, 1, mid,
                seqlen_k, causal_offset, tile_qk_scale, wg, s_layout, o_layout, BLOCK_N, STAGES,
                False, IS_CAUSAL, PINGPONG, QK_TAIL, k_scales, P_SCALE, EXP2_EMULATED,
            )  # fmt: skip
                acc, p_op, m_i, l_i, turn_phase = _attend_tiles(
                acc, p_op, m_i, l_i, turn_phase, q_tiles, ring, turn, rows, it, mid, n_tiles,
                seqlen_k, causal_offset, tile_qk_scale, wg, s_layout, o_layout, BLOCK_N, STAGES,
                True, IS_CAUSAL, PINGPONG, QK_TAIL, k_scales, P_SCALE,
            )  # fmt: skip
                # Every Q K^T of this work tile has completed: the producer may load the next Q
                # while the last P V and the store below run.
                mbarrier.arrive(q_empty.index(wg), count=1)

                # The last P V.
                g = it + n_tiles - 1
                mbarrier.wait(v_ready.index(g % STAGES), (g // STAGES) & 1)
                turn_phase = _take_turn(turn, wg, turn_phase, PINGPONG)
                o_tok = _issue_pv(p_op, v_smem, g % STAGES, acc, FP8)
                _pass_turn(turn, wg, PINGPONG)
                acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
                mbarrier.arrive(v_empty.index(g % STAGES), count=1)

                # Rows that saw no key have l = 0 and acc = 0: divide by 1 so they return zeros.
                sees_nothing = l_i == 0.0
                l_safe = gl.where(sees_nothing, 1.0, l_i)
                out = acc / gl.expand_dims(
                    gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout)), 1
                )
                o_rows = q_row0 + wg * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
                o_cols = gl.arange(0, HEAD_DIM_V, layout=gl.SliceLayout(0, o_layout))
                if FP8:  # v's per-channel scale, and P_SCALE undone
                    v_scale = gl.load(
                        VScale
                        + (batch * (num_q_heads // gqa_group_size) + kv_head).to(gl.int64)
                        * HEAD_DIM_V
                        + o_cols
                    )
                    out = out * gl.expand_dims(v_scale * inv_p_scale, 0)
                if O_TMA:
                    o_buf = o_smem.index(wg)
                    # The previous tile's store has read o_buf (the issuing thread waits, the
                    # warpgroup's barrier tells the others).
                    tma.store_wait(0)
                    gl.thread_barrier()
                    o_buf.store(out.to(dtype))
                    fence_async_shared()
                    gl.thread_barrier()
                    tma.async_copy_shared_to_global(
                        o_desc, [batch, q_head, q_row0 + wg * ROWS, 0], o_buf
                    )
                else:
                    o_ptrs = (
                        Out
                        + (batch.to(gl.int64) * stride_oz + q_head.to(gl.int64) * stride_oh)
                        + gl.expand_dims(o_rows.to(gl.int64) * stride_om, 1)
                        + gl.expand_dims(o_cols.to(gl.int64) * stride_ok, 0)
                    )
                    o_mask = gl.expand_dims(o_rows < seqlen_q, 1) & gl.expand_dims(
                        o_cols < HEAD_DIM_V, 0
                    )
                    gl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=o_mask)
                if STORE_LSE:
                    lse = gl.where(
                        sees_nothing, float("-inf"), (m_i + gl.log2(l_safe)) / 1.4426950408889634
                    )
                    lse_offset = (batch * num_q_heads + q_head).to(gl.int64) * seqlen_q
                    gl.store(Lse + lse_offset + rows.to(gl.int64), lse, mask=rows < seqlen_q)
                it += n_tiles
                local += 1
        if O_TMA:  # the last store has read shared memory before the program exits
            tma.store_wait(0)

    @gluon.jit
    def _fa3_fwd_kernel(
        q_desc, k_desc, v_desc, Out, Lse, Sinks,
        stride_oz, stride_oh, stride_om, stride_ok,
        num_q_heads, gqa_group_size, num_batch_heads, seqlen_q, seqlen_k, causal_offset, qk_scale,
        HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
        IS_CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr,
        CONSUMER_REGS: gl.constexpr, NUM_WG: gl.constexpr = 2, HAS_SINKS: gl.constexpr = False,
        HEAD_DIM_V: gl.constexpr = 0, QK_TAIL: gl.constexpr = 0, q_tail_desc=None,
        k_tail_desc=None, QScale=None, KScale=None, VScale=None, n_q_blocks=None,
        n_k_blocks=None, inv_p_scale=None, FP8: gl.constexpr = False, P_SCALE: gl.constexpr = 1.0,
        EXP2_EMULATED: gl.constexpr = 0, O_TMA: gl.constexpr = False, o_desc=None,
    ):  # fmt: skip
        """Programs walk the work tiles (query tile x batch x head) t = pid, pid + grid, ...:
        a grid of one program per tile, or a persistent grid of one program per SM, which
        lets the producer load the next tile's Q and K/V while the consumers finish the last
        P V and store the output of the current one.

        HEAD_DIM: q's and k's head dim. HEAD_DIM_V: v's where it differs (0: the same).
        QK_TAIL > 0: a head dim that is no power of two (a TMA block's sides are) is loaded as
        HEAD_DIM - QK_TAIL columns through q_desc/k_desc and the last QK_TAIL through
        q_tail_desc/k_tail_desc (MLA's 192 = 128 + 64).

        FP8: q, k and v^T are e4m3 (kernels/fp8.py's ``Fp8Inputs``); v_desc describes v^T,
        (B, H, D, S_pad); QScale, KScale (per block of FP8_QUANT_BLOCK rows), VScale (per
        channel) and P_SCALE as fp8.py's kernel uses them. (None without FP8: constexpr
        Nones add no kernel parameter, so the fp16/bf16 kernels compile as before.)

        O_TMA: each consumer warpgroup writes its output tile to shared memory and the copy
        engine stores it (o_desc over Out, ROWS x DV blocks; rows past Sq dropped), instead of
        pointer stores from registers."""
        ROWS: gl.constexpr = 64
        DV: gl.constexpr = HEAD_DIM if HEAD_DIM_V == 0 else HEAD_DIM_V
        MAIN: gl.constexpr = HEAD_DIM - QK_TAIL
        dtype: gl.constexpr = q_desc.dtype
        q_smem = gl.allocate_shared_memory(
            dtype,
            [NUM_WG, ROWS, MAIN],
            gl.NVMMASharedLayout.get_default_for([ROWS, MAIN], dtype),
        )
        kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, MAIN], dtype)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, MAIN], kv_layout)
        if QK_TAIL > 0:
            q_tail = gl.allocate_shared_memory(
                dtype,
                [NUM_WG, ROWS, QK_TAIL],
                gl.NVMMASharedLayout.get_default_for([ROWS, QK_TAIL], dtype),
            )
            k_tail = gl.allocate_shared_memory(
                dtype,
                [STAGES, BLOCK_N, QK_TAIL],
                gl.NVMMASharedLayout.get_default_for([BLOCK_N, QK_TAIL], dtype),
            )
            descs = (q_desc, k_desc, v_desc, q_tail_desc, k_tail_desc)
        else:  # unused stand-ins, so every partition unpacks the same tuples
            q_tail = q_smem
            k_tail = k_smem
            descs = (q_desc, k_desc, v_desc, q_desc, k_desc)
        if FP8:  # V^T tiles: keys along the contiguous axis
            vt_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([DV, BLOCK_N], dtype)
            v_smem = gl.allocate_shared_memory(dtype, [STAGES, DV, BLOCK_N], vt_layout)
        else:
            v_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, DV], dtype)
            v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DV], v_layout)
        q_ready = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_WG):
            mbarrier.init(q_ready.index(i), count=1)
            mbarrier.init(q_empty.index(i), count=1)
            mbarrier.init(turn.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=NUM_WG)  # every consumer warpgroup releases
            mbarrier.init(v_empty.index(i), count=NUM_WG)
        if PINGPONG == 1:
            mbarrier.arrive(turn.index(0), count=1)  # warpgroup 0 issues first

        sched = (
            gl.cdiv(seqlen_q, NUM_WG * ROWS), num_batch_heads, num_q_heads, gqa_group_size,
            seqlen_q, seqlen_k, causal_offset,
        )  # fmt: skip
        qbuf = (q_smem, q_tail, q_ready, q_empty)
        ring = (k_smem, k_tail, v_smem, k_ready, k_empty, v_ready, v_empty)
        if O_TMA:  # each consumer warpgroup's output tile, for the copy engine's store
            o_smem = gl.allocate_shared_memory(dtype, [NUM_WG, ROWS, DV], o_desc.layout)
            o_store = (o_desc, o_smem)
        else:
            o_store = (q_desc, q_smem)  # unused stand-ins
        outputs = (Out, Lse, Sinks, stride_oz, stride_oh, stride_om, stride_ok, o_store)
        if FP8:  # each consumer warpgroup's P tile, the A operand of its P V
            p_smem = gl.allocate_shared_memory(
                dtype,
                [NUM_WG, ROWS, BLOCK_N],
                gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_N], dtype),
            )
        else:
            p_smem = q_smem  # unused stand-in
        fp8_args = (QScale, KScale, VScale, n_q_blocks, n_k_blocks, inv_p_scale, p_smem)
        consumer = (outputs, qbuf, ring, turn, sched, qk_scale, fp8_args)
        loads = (descs, qbuf, ring, sched)
        # Every partition gets the tile config as constexpr arguments (a tuple would turn
        # them into run-time values).
        if NUM_WG == 3:
            gl.warp_specialize(
                [
                    (_consumer, (0, consumer, DV, BLOCK_N, STAGES, IS_CAUSAL, STORE_LSE,
                                 PINGPONG, HAS_SINKS, QK_TAIL, FP8, P_SCALE,
                                 EXP2_EMULATED, O_TMA)),
                    (_consumer, (1, consumer, DV, BLOCK_N, STAGES, IS_CAUSAL, STORE_LSE,
                                 PINGPONG, HAS_SINKS, QK_TAIL, FP8, P_SCALE,
                                 EXP2_EMULATED, O_TMA)),
                    (_consumer, (2, consumer, DV, BLOCK_N, STAGES, IS_CAUSAL, STORE_LSE,
                                 PINGPONG, HAS_SINKS, QK_TAIL, FP8, P_SCALE,
                                 EXP2_EMULATED, O_TMA)),
                    (_producer, (loads, BLOCK_N, STAGES, IS_CAUSAL, QK_TAIL, FP8)),
                ],
                [4, 4, 1],
                [CONSUMER_REGS, CONSUMER_REGS, 24],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_consumer, (0, consumer, DV, BLOCK_N, STAGES, IS_CAUSAL, STORE_LSE,
                                 PINGPONG, HAS_SINKS, QK_TAIL, FP8, P_SCALE,
                                 EXP2_EMULATED, O_TMA)),
                    (_consumer, (1, consumer, DV, BLOCK_N, STAGES, IS_CAUSAL, STORE_LSE,
                                 PINGPONG, HAS_SINKS, QK_TAIL, FP8, P_SCALE,
                                 EXP2_EMULATED, O_TMA)),
                    (_producer, (loads, BLOCK_N, STAGES, IS_CAUSAL, QK_TAIL, FP8)),
                ],
                [4, 1],
                [CONSUMER_REGS, 24],
            )  # fmt: skip

    # Launched through the launch cache: on a hit the compiled kernel's launcher is called
    # directly, with the TMA descriptors encoded once per (address, shape, strides, block).
    _FA3_LAUNCH = CachedKernel(_fa3_fwd_kernel, "gluon_fa3")


@functools.cache
def _is_hopper(index) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def supports(q, k, v, *, window=None) -> bool:
    """True when this kernel computes these inputs (see the module docstring)."""
    if not GLUON_AVAILABLE or q.device.type != "cuda" or window is not None:
        return False
    if q.dtype not in (torch.float16, torch.bfloat16):
        return False
    if v.shape[3] not in HEAD_DIMS.get(q.shape[3], ()):
        return False
    if not _is_hopper(q.device.index):
        return False
    return all(tma_strides_ok(t) for t in (q, k, v))


def _descriptor(t, block_rows, head_dim):
    dtype = _GLUON_DTYPES[t.dtype]
    # 4-D over the whole (B, H, S, D) tensor: rows past S come back as zeros.
    layout = nvmma_layout((block_rows, head_dim), dtype)
    return TensorDescriptor(
        t, list(t.shape), list(t.stride()), [1, 1, block_rows, head_dim], layout
    )


_GLUON_DTYPES = (
    {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float8_e4m3fn: gl.float8e4nv}
    if GLUON_AVAILABLE
    else {}
)


# How the consumer warpgroups pass the ping-pong turn (the kernel's PINGPONG), per q/k head
# dim: 1 an mbarrier, 2 a hardware named barrier (see TURN_BARRIER_0). Measured on the H200
# beside each other, shipped configs forced (tools/gpu_forward_hopper.py --variants
# mbar_turns,named_turns at e068d29, 3 rotated rounds, logs/forward_turns_e068d29.json),
# TFLOP/s mbarrier / named at S 2K, 4K, 8K, 16K:
#   D128 full 596/606 640/645 631/658 624/641, causal 480/488 572/579 602/632 616/632 (S 1K:
#        515/510, 344/351); Nsight Compute at S 8K full: 1.647 -> 1.606 ms, tensor pipe 72.0 ->
#        74.3% of peak (logs/ncu_sass_fwd_turns*_d128_e068d29.json)
#   D256 within 1% but at 16K full (706/721) and 8K full (717/706): level, left on mbarriers
#   D64 (three warpgroups) full 400/402 472/471 486/480 478/482, causal 210/210 364/360
#        416/398 478/438: slower where the Gluon kernel runs causal; left on mbarriers
# FP8 and MLA's 192 were not measured: mbarriers.
PINGPONG_TURNS = {128: 2}


def _turns(pingpong, head_dim: int) -> int:
    """A launch's ``pingpong`` option as the kernel's PINGPONG: False 0, True the shipped
    PINGPONG_TURNS of q's head dim, or 1 / 2 explicitly (tools/gpu_forward_hopper.py times
    both)."""
    if pingpong is True:
        return PINGPONG_TURNS.get(head_dim, 1)
    if pingpong not in (False, 0, 1, 2):
        raise ValueError(f"pingpong must be a bool, 1 or 2, got {pingpong!r}")
    return int(pingpong)


def _launch_args(
    q, k, v, out, lse, *, causal_offset, is_causal, qk_scale, store_lse, sinks=None,
    block_n=None, stages=None, pingpong=True, num_wg=None, consumer_regs=None, persistent=None,
    max_programs=None, exp2_emulated=None,
):  # fmt: skip
    """The grid, positional and keyword arguments of one launch (see ``attention_hopper``)."""
    batch, num_q_heads, seqlen_q, head_dim = q.shape
    num_kv_heads, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    cfg = VARIANTS[head_dim]
    block_n = block_n or cfg["BLOCK_N"]
    stages = stages or cfg["STAGES"]
    num_wg = num_wg or cfg.get("NUM_WG", 2)
    consumer_regs = consumer_regs or CONSUMER_REGS[num_wg]
    qk_tail = QK_TAIL.get(head_dim, 0)
    q_desc = _descriptor(q, BLOCK_M_WG, head_dim - qk_tail)
    k_desc = _descriptor(k, block_n, head_dim - qk_tail)
    v_desc = _descriptor(v, block_n, head_dim_v)
    # Work units: pairs of query tiles of one head (_work_unit), the grid's unit of balance.
    work_units = triton_cdiv(triton_cdiv(seqlen_q, num_wg * BLOCK_M_WG), 2) * batch * num_q_heads
    persistent = PERSISTENT[bool(is_causal)] if persistent is None else persistent
    # FLASHCORE_HOPPER_MAX_PROGRAMS: the same cap from the environment, for sanitizer runs
    # of whole grids (python -m flashcore sanitize --workloads forward_hopper_walk).
    max_programs = max_programs or int(os.environ.get("FLASHCORE_HOPPER_MAX_PROGRAMS", "0"))
    programs = max_programs or _num_sms(q.device.index)
    grid = (min(work_units, programs) if persistent else work_units,)
    args = (
        q_desc, k_desc, v_desc, out, lse, sinks, *out.stride(), num_q_heads,
        num_q_heads // num_kv_heads, batch * num_q_heads, seqlen_q, seqlen_k, causal_offset,
        qk_scale,
    )  # fmt: skip
    kwargs = dict(
        HEAD_DIM=head_dim,
        BLOCK_N=block_n,
        STAGES=stages,
        IS_CAUSAL=bool(is_causal),
        STORE_LSE=bool(store_lse),
        PINGPONG=_turns(pingpong, head_dim),
        CONSUMER_REGS=consumer_regs,
        NUM_WG=num_wg,
        HAS_SINKS=sinks is not None,
        # 0 where v's head dim is q/k's, so those kernels compile exactly as before.
        HEAD_DIM_V=head_dim_v if head_dim_v != head_dim else 0,
        num_warps=4,
    )
    if exp2_emulated is None:
        exp2_emulated = 0 if is_causal else EXP2_EMULATED_FULL.get(head_dim, 0)
    if exp2_emulated:  # (0 adds nothing, so those kernels compile exactly as before)
        kwargs.update(EXP2_EMULATED=exp2_emulated)
    if O_TMA_FOR.get(head_dim) and out.dtype == q.dtype and tma_strides_ok(out):
        kwargs.update(O_TMA=True, o_desc=_descriptor(out, BLOCK_M_WG, head_dim_v))
    if qk_tail:  # (kernels without a tail get None there, as before: no descriptor to encode)
        kwargs.update(
            QK_TAIL=qk_tail,
            q_tail_desc=_descriptor(q, BLOCK_M_WG, qk_tail),
            k_tail_desc=_descriptor(k, block_n, qk_tail),
        )
    return grid, args, kwargs


def attention_hopper(q, k, v, out, lse, **options):
    """Launch the Gluon kernel on validated inputs (``supports`` true). ``out`` (B, Hq, Sq, D)
    any strides; ``lse`` (B, Hq, Sq) float32 contiguous when store_lse, else any tensor.
    Options (keywords): ``causal_offset``, ``is_causal``, ``qk_scale`` = softmax scale *
    log2(e), ``store_lse``, ``sinks`` ((Hq,) float32 contiguous, or None); for tuning and tests ``block_n``, ``stages``, ``pingpong``,
    ``num_wg``, ``consumer_regs``, ``persistent`` (default: the ``PERSISTENT`` table) and
    ``max_programs``, which caps the persistent grid below the SM count so tests can make
    every program walk many work tiles."""
    grid, args, kwargs = _launch_args(q, k, v, out, lse, **options)
    _FA3_LAUNCH[grid](*args, **kwargs)
    return out


class LeanHopperLaunch:
    """One call signature's launch, frozen after its first (checked) call: the compiled
    kernel's direct launcher, the grid and the argument list, with the output, lse, scale
    and the TMA descriptors (q, k, v, q's and k's tails where QK_TAIL, the output's where
    O_TMA) filled in per call (the descriptors encoded once per address, shape and strides,
    see ``_launch.DirectKernel``). Lives in the forward's launch cache
    (``forward.cached_launch``), keyed there on everything this freezes. ``blocks``: per
    descriptor slot, which of q, k, v, out (0, 1, 2, 3) it describes and its block."""

    __slots__ = ("direct", "grid", "template", "slots", "blocks", "lse_shape", "default")

    def __init__(self, frozen, blocks, lse_shape, store_lse, default_scale):
        self.direct, self.grid, values, _desc_slots = frozen
        # Positions of the values a repeated call changes; everything else follows from the
        # signature the forward's cache keys the entry on (shapes, strides, dtypes, flags).
        self.slots = tuple(
            _fa3_fwd_kernel.arg_names.index(n) for n in ("Out", "Lse", "Sinks", "qk_scale")
        )
        for slot in self.slots:
            values[slot] = None
        self.template, self.blocks = tuple(values), blocks
        self.lse_shape = lse_shape if store_lse else None
        self.default = default_scale

    def launch(self, q, k, v, out, seqs, scale, softcap, sinks):
        """Same contract as the forward's cached Triton entries: returns (out, lse)."""
        if out is None:
            out = new_output(q, v)
        lse = (
            out
            if self.lse_shape is None
            else torch.empty(self.lse_shape, dtype=torch.float32, device=q.device)
        )
        args = list(self.template)
        out_slot, lse_slot, sinks_slot, scale_slot = self.slots
        args[out_slot], args[lse_slot], args[sinks_slot] = out, lse, sinks
        args[scale_slot] = (self.default if scale is None else scale) * LOG2E
        tensors = (q, k, v, out)
        descs = tuple(
            (tensors[i], tensors[i].shape, tensors[i].stride(), block) for i, block in self.blocks
        )
        self.direct(self.grid, torch._C._cuda_getCurrentRawStream(q.device.index), args, descs)
        return out, lse


def lean_launch(q, k, v, out, lse, *, store_lse, default_scale, **options):
    """After ``attention_hopper(q, k, v, out, lse, store_lse=..., **options)`` ran: its
    launch as a ``LeanHopperLaunch``, or None where the direct call does not apply."""
    grid, args, kwargs = _launch_args(q, k, v, out, lse, store_lse=store_lse, **options)
    freeze = getattr(_FA3_LAUNCH, "freeze", None)  # None: a plain @jit kernel (tests)
    frozen = freeze(grid, args, kwargs) if freeze is not None else None
    if frozen is None:
        return None
    named = dict(zip(_fa3_fwd_kernel.arg_names, args), **kwargs)
    describes = dict(q_desc=0, k_desc=1, v_desc=2, q_tail_desc=0, k_tail_desc=1, o_desc=3)
    names = [_fa3_fwd_kernel.arg_names[slot] for slot in frozen[3]]
    if sorted(names) != sorted(n for n in describes if named.get(n) is not None):
        return None
    blocks = tuple((describes[n], tuple(named[n].block_shape)) for n in names)
    return LeanHopperLaunch(frozen, blocks, tuple(lse.shape), store_lse, default_scale)


def supports_fp8(x) -> bool:
    """True when the FP8 mode of this kernel computes ``x`` (kernels/fp8.py's Fp8Inputs):
    a Hopper GPU, head dim 64, 128 or 256, and TMA-compatible q8, k8, v8t."""
    q8 = x.q8
    if not GLUON_AVAILABLE or q8.device.type != "cuda" or q8.shape[3] not in FP8_VARIANTS:
        return False
    if not _is_hopper(q8.device.index):
        return False
    return all(tma_strides_ok(t) for t in (q8, x.k8, x.v8t))


def attention_hopper_fp8(
    x, out, *, causal, scale, block_n=None, stages=None, num_wg=None, exp2_emulated=None
):
    """Launch the kernel's FP8 mode on quantized inputs ``x`` (``supports_fp8`` true) into
    ``out`` (B, Hq, Sq, D), fp16/bf16, any strides. Top-left causal alignment, as
    kernels/fp8.py's kernel; no lse. ``block_n``, ``stages`` and ``num_wg`` (consumer
    warpgroups, 2 or 3) override FP8_VARIANTS' entry (tools/fp8_hopper_probe.py)."""
    q8, k8, v8t = x.q8, x.k8, x.v8t
    batch, num_q_heads, seqlen_q, head_dim = q8.shape
    num_kv_heads = k8.shape[1]
    cfg = FP8_VARIANTS[head_dim]
    block_n = block_n or cfg["BLOCK_N"]
    stages = stages or cfg["STAGES"]
    if FP8_QUANT_ROWS % block_n:
        raise ValueError(f"block_n must divide {FP8_QUANT_ROWS}, got {block_n}")
    num_wg = num_wg or cfg.get("NUM_WG", 2)
    if num_wg not in CONSUMER_REGS:
        raise ValueError(f"num_wg must be one of {sorted(CONSUMER_REGS)}, got {num_wg}")
    work_units = triton_cdiv(triton_cdiv(seqlen_q, num_wg * BLOCK_M_WG), 2) * batch * num_q_heads
    # FLASHCORE_HOPPER_MAX_PROGRAMS caps the persistent grid as for fp16/bf16 (sanitizer walks).
    programs = int(os.environ.get("FLASHCORE_HOPPER_MAX_PROGRAMS", "0")) or _num_sms(
        q8.device.index
    )
    grid = (min(work_units, programs),)
    args = (
        _descriptor(q8, BLOCK_M_WG, head_dim),
        _descriptor(k8, block_n, head_dim),
        _descriptor(v8t, head_dim, block_n),  # V^T: D rows of block_n keys
        out, out, None, *out.stride(), num_q_heads, num_q_heads // num_kv_heads,
        batch * num_q_heads, seqlen_q, x.seqlen_k, 0, scale * LOG2E,
    )  # fmt: skip
    _FA3_LAUNCH[grid](
        *args,
        HEAD_DIM=head_dim,
        BLOCK_N=block_n,
        STAGES=stages,
        IS_CAUSAL=bool(causal),
        STORE_LSE=False,
        PINGPONG=1,
        CONSUMER_REGS=CONSUMER_REGS[num_wg],
        NUM_WG=num_wg,
        QScale=x.q_scale,
        KScale=x.k_scale,
        VScale=x.v_scale,
        n_q_blocks=x.q_scale.shape[2],
        n_k_blocks=x.k_scale.shape[2],
        inv_p_scale=1.0 / x.p_scale,
        FP8=True,
        P_SCALE=float(x.p_scale),
        EXP2_EMULATED=cfg.get("EXP2_EMULATED", 0) if exp2_emulated is None else exp2_emulated,
        num_warps=4,
    )
    return out


@functools.cache
def _num_sms(index) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
