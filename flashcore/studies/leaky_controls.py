"""Positive controls for notebook 06: attention kernels that leak their inputs through time.

A constant-time verdict means something only if the same analysis flags a kernel that does
branch on data. These are such kernels. They live in the lab, not in ``kernels/``: the
shipped kernels compile nothing that exists for a study, and notebook 06 analyses them as
they ship.

Both controls are a causal (top-left) forward built from the shipped kernels' own pieces
(``kernels/_softmax.online_softmax_tile``, the same fp32 accumulation), one key tile at a
time with the mask on every tile, plus one deliberate data-dependent branch:

* ``SKIP_RESCALE`` (1): skip the accumulator's rescale when no row's running max moved.
  The result is the same; the time depends on where the large scores are.
* ``EXIT_ON_NAN`` (2): a query tile that holds a NaN skips all keys (an "early exit on
  NaN"; it returns zeros).

``leaky_attention`` launches one on CUDA tensors; ``sass_spec`` is the compile spec
``studies/sass.py`` disassembles. Not for use: these return wrong answers by design (2) or
leak (both).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..kernels._softmax import LOG2E, online_softmax_tile

SKIP_RESCALE = 1
EXIT_ON_NAN = 2
CONTROLS = {SKIP_RESCALE: "skip rescale if max unchanged", EXIT_ON_NAN: "early exit on NaN"}
# The tile shape of the shipped forward kernel's D64 long-key causal bucket (forward.py's
# _HOPPER_TABLE), so the controls compete at the shape the timing test runs.
BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES = 128, 64, 8, 3


@triton.jit
def _leaky_causal_fwd_kernel(
    Q,
    K,
    V,
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
    num_q_heads,
    gqa_group_size,
    seqlen_q,
    seqlen_k,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CONTROL: tl.constexpr,
):
    num_m_tiles = tl.cdiv(seqlen_q, BLOCK_M)
    pid = tl.program_id(0)
    tile_m = pid % num_m_tiles
    batch_head = pid // num_m_tiles
    batch = batch_head // num_q_heads
    q_head = batch_head % num_q_heads
    kv_head = q_head // gqa_group_size

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + batch.to(tl.int64) * stride_qz + q_head.to(tl.int64) * stride_qh
    k_base = K + batch.to(tl.int64) * stride_kz + kv_head.to(tl.int64) * stride_kh
    v_base = V + batch.to(tl.int64) * stride_vz + kv_head.to(tl.int64) * stride_vh
    o_base = Out + batch.to(tl.int64) * stride_oz + q_head.to(tl.int64) * stride_oh
    row_in = offs_m < seqlen_q
    q = tl.load(
        q_base + offs_m[:, None].to(tl.int64) * stride_qm + offs_d[None, :] * stride_qk,
        mask=row_in[:, None],
        other=0.0,
    )

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    key_end = tl.minimum((tile_m + 1) * BLOCK_M, seqlen_k)
    if CONTROL == 2:
        # The leak: a tile whose queries hold a NaN attends to nothing.
        has_nan = tl.sum((q != q).to(tl.int32)) > 0
        key_end = tl.where(has_nan, 0, key_end)
    for start_n in range(0, key_end, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols < seqlen_k)[:, None]
        k = tl.load(
            k_base + cols[:, None].to(tl.int64) * stride_kn + offs_d[None, :] * stride_kk,
            mask=kv_mask,
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k))
        visible = (cols[None, :] < seqlen_k) & (cols[None, :] <= offs_m[:, None])
        s = tl.where(visible, s * qk_scale, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_tile(s, m_i, l_i, qk_scale, True)
        if CONTROL == 1:
            # The leak: the rescale runs only when some row's running max moved.
            if tl.max(m_new - m_i, 0) > 0:
                acc = acc * alpha[:, None]
        else:
            acc = acc * alpha[:, None]
        v = tl.load(
            v_base + cols[:, None].to(tl.int64) * stride_vn + offs_d[None, :] * stride_vk,
            mask=kv_mask,
            other=0.0,
        )
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(
        o_base + offs_m[:, None].to(tl.int64) * stride_om + offs_d[None, :] * stride_ok,
        out.to(Out.dtype.element_ty),
        mask=row_in[:, None],
    )


def leaky_attention(q, k, v, control: int) -> torch.Tensor:
    """Causal (top-left) attention through control ``control`` (``SKIP_RESCALE`` or
    ``EXIT_ON_NAN``): fp16/bf16 CUDA tensors (B, H, S, D), D a power of two <= 128, GQA."""
    if control not in CONTROLS:
        raise ValueError(f"unknown control {control!r}; expected one of {sorted(CONTROLS)}")
    head_dim = q.shape[3]
    if head_dim != triton.next_power_of_2(head_dim) or not 16 <= head_dim <= 128:
        raise ValueError(f"the controls take head dims 16..128, powers of two; got {head_dim}")
    batch, num_q_heads, seqlen_q, _ = q.shape
    out = torch.empty_like(q)
    grid = (triton.cdiv(seqlen_q, BLOCK_M) * batch * num_q_heads,)
    _leaky_causal_fwd_kernel[grid](
        q,
        k,
        v,
        out,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        num_q_heads,
        num_q_heads // k.shape[1],
        seqlen_q,
        k.shape[2],
        LOG2E / math.sqrt(head_dim),
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        CONTROL=control,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    return out


def sass_spec(control: int, head_dim: int = 64, dtype: str = "bf16") -> dict:
    """The compile spec of one control for ``studies/sass.compile_sass`` (sm_90, bf16)."""
    ptrs = {name: f"*{dtype}" for name in ("Q", "K", "V", "Out")}
    return dict(
        fn=_leaky_causal_fwd_kernel,
        pointers=ptrs,
        floats={"qk_scale"},
        consts=dict(HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CONTROL=control),
        descs={},
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
