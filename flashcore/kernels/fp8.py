"""FP8 (e4m3) forward attention: four quantization recipes, one kernel.

    naive               cast q, k, v and p to e4m3 as they are (no scale at all): the prior
                        report's experiment
    per_tensor          one scale per tensor (amax / 448) for q, k and v; p scaled by 256
    per_block           one scale per 128-row block of q and of k (per batch and head),
                        one per channel of v; p scaled by 256
    per_block_hadamard  per_block after rotating q and k by the same random orthogonal
                        matrix R = H diag(signs) / sqrt(D) ("incoherent processing",
                        FlashAttention-3): (q R)(k R)^T = q k^T exactly, but the rotation
                        spreads a few large channels over all of them, so the block amax, and
                        with it the rounding step of every other element, shrinks

Why v per channel: p @ v contracts over keys, so a per-channel scale of v factors out of
the sum and is applied once in the epilogue (out[:, d] *= v_scale[d]), exactly and for free.
Real activations put their outliers in a few channels (the "massive activations"), which a
per-channel scale isolates. A per-key-tile scale would instead cost a rescale of every p
tile and does nothing for a large channel, which every key tile contains.

Why p is scaled by 256: p = exp(s - m) lies in [0, 1]; e4m3's normal range starts at 2^-6,
so unscaled p below 1/64 loses relative precision and below 2^-10 rounds to zero. A
power-of-two scale is exact and moves the normal range down to 2^-14. (256 rather than 448:
a power of two, and 448 itself is the top of the range.)

The kernel is FlashAttention-2's online softmax (see ``forward.py``) with fp8 tensor-core
dots for q k^T and p v, fp32 accumulation, and the block scales folded into the per-tile
score scale. v is stored transposed, (B, H, D, S): the fp8 tensor-core instruction on Hopper
wants both operands contiguous along the reduction dimension, which for p @ v is the key
axis. The quantizer pads keys to a multiple of 128 (zeros, masked to -inf in the scores) so
the copy engine's 16-byte stride rule holds for the transposed v.

On Hopper the Gluon forward has an FP8 mode with FlashAttention-3's structure on the same
inputs and recipes (kernels/forward_hopper.py, ``attention_hopper_fp8``); ``flashcore.dispatch.
fp8_kernel`` sends a call there where it was measured faster (D128/D256 from S = 4K on the
H100), else here.

``quantize`` turns fp16/bf16/fp32 q, k, v into an ``Fp8Inputs`` (what an fp8 model would
have produced upstream); ``fp8_attention`` runs the kernel on it; ``dequantized`` gives the
inputs the kernel actually sees, for the float64 reference of the same function.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from .._checks import check_attention_inputs, on_interpreter
from ._softmax import LOG2E, online_softmax_tile

VARIANTS = ("naive", "per_tensor", "per_block", "per_block_hadamard")
E4M3_MAX = 448.0
QUANT_BLOCK = 128  # rows of q / k per scale in the per-block variants; kernel tiles divide it
P_SCALE = 256.0  # p is multiplied by this before the fp8 cast (scaled variants)
FP8_HEAD_DIMS = (32, 64, 128, 256)  # the fp8 tensor-core dot reduces over >= 32 elements


@dataclasses.dataclass
class Fp8Inputs:
    """Quantized attention inputs: ``x ~ x8 * scale`` (broadcast as below).

    q8 ``(B, Hq, Sq, D)``, k8 ``(B, Hkv, Sk_pad, D)``, v8t ``(B, Hkv, D, Sk_pad)`` (v
    transposed), all ``float8_e4m3fn``; q_scale ``(B, Hq, ceil(Sq/128))``, k_scale
    ``(B, Hkv, Sk_pad/128)``, v_scale ``(B, Hkv, D)``, float32. Keys past ``seqlen_k`` are
    zero padding. ``rotation`` is the (D, D) matrix q and k were multiplied by, or None.
    """

    variant: str
    q8: torch.Tensor
    k8: torch.Tensor
    v8t: torch.Tensor
    q_scale: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    seqlen_k: int
    p_scale: float
    out_dtype: torch.dtype
    rotation: torch.Tensor | None = None


def random_hadamard(head_dim: int, *, seed: int = 0, device="cpu") -> torch.Tensor:
    """R = H diag(s) / sqrt(D): Sylvester Hadamard H, random signs s. Orthogonal, so
    (q R)(k R)^T = q k^T. float32, (D, D); D a power of two."""
    if head_dim & (head_dim - 1):
        raise ValueError(f"the Hadamard rotation needs a power-of-two head_dim, got {head_dim}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < head_dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (head_dim,), generator=gen).double() * 2 - 1
    return (h * signs[None, :] / math.sqrt(head_dim)).float().to(device)


def _to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to e4m3 (nearest-even). The scaled variants stay inside +-448 by construction;
    the naive one saturates there instead of relying on the converter's overflow rule."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _block_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    """max |x| over each ``block`` rows of (B, H, S, D): (B, H, ceil(S/block))."""
    batch, heads, seqlen, dim = x.shape
    pad = (-seqlen) % block
    x = torch.nn.functional.pad(x.abs(), (0, 0, 0, pad))
    return x.view(batch, heads, -1, block * dim).amax(-1)


def _scale_from_amax(amax: torch.Tensor) -> torch.Tensor:
    # amax maps to 448; an all-zero block keeps scale 1 (any scale represents zeros).
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).float()


def quantize(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str, *, rotation_seed: int = 0
) -> Fp8Inputs:
    """Quantize (B, H, S, D) q, k, v to e4m3 with the named recipe (see module docstring).

    Shapes and GQA as ``flashcore.attention``; head_dim in {32, 64, 128, 256}. The scales
    are computed in float32 from the inputs; the output dtype of the attention is q's.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown fp8 variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    check_attention_inputs(q, k, v, max_head_dim=max(FP8_HEAD_DIMS))
    head_dim = q.shape[3]
    if head_dim not in FP8_HEAD_DIMS:
        raise ValueError(f"fp8 attention supports head_dim in {FP8_HEAD_DIMS}, got {head_dim}")
    batch, hkv, seqlen_k = k.shape[0], k.shape[1], k.shape[2]
    qf, kf, vf = q.float(), k.float(), v.float()
    rotation = None
    if variant == "per_block_hadamard":
        rotation = random_hadamard(head_dim, seed=rotation_seed, device=q.device)
        qf, kf = qf @ rotation, kf @ rotation

    n_qb = triton.cdiv(q.shape[2], QUANT_BLOCK)
    n_kb = triton.cdiv(seqlen_k, QUANT_BLOCK)
    if variant == "naive":
        q_scale = torch.ones(batch, q.shape[1], n_qb, device=q.device)
        k_scale = torch.ones(batch, hkv, n_kb, device=q.device)
        v_scale = torch.ones(batch, hkv, head_dim, device=q.device)
    elif variant == "per_tensor":
        q_scale = _scale_from_amax(qf.abs().amax()).expand(batch, q.shape[1], n_qb).contiguous()
        k_scale = _scale_from_amax(kf.abs().amax()).expand(batch, hkv, n_kb).contiguous()
        v_scale = _scale_from_amax(vf.abs().amax()).expand(batch, hkv, head_dim).contiguous()
    else:
        q_scale = _scale_from_amax(_block_amax(qf, QUANT_BLOCK))
        k_scale = _scale_from_amax(_block_amax(kf, QUANT_BLOCK))
        v_scale = _scale_from_amax(vf.abs().amax(2))

    def per_row(scale, seqlen):  # (B, H, nblocks) -> (B, H, S, 1)
        return scale.repeat_interleave(QUANT_BLOCK, 2)[:, :, :seqlen, None]

    pad = n_kb * QUANT_BLOCK - seqlen_k
    q8 = _to_e4m3(qf / per_row(q_scale, q.shape[2]))
    k8 = _to_e4m3(torch.nn.functional.pad(kf / per_row(k_scale, seqlen_k), (0, 0, 0, pad)))
    v8t = _to_e4m3(
        torch.nn.functional.pad(vf / v_scale[:, :, None, :], (0, 0, 0, pad)).transpose(2, 3)
    )
    return Fp8Inputs(
        variant,
        q8,
        k8.contiguous(),
        v8t.contiguous(),
        q_scale,
        k_scale,
        v_scale,
        seqlen_k,
        1.0 if variant == "naive" else P_SCALE,
        q.dtype,
        rotation,
    )


def dequantized(x: Fp8Inputs, dtype=torch.float64):
    """The (q, k, v) the kernel computes with, in ``dtype``: x8 * scale, padding dropped,
    rotation kept (it does not change q k^T). Attention of these in float64 is the variant's
    own reference: the kernel may differ from it only by rounding p and by fp32 sums."""
    q_rows = x.q_scale.to(dtype).repeat_interleave(QUANT_BLOCK, 2)[:, :, : x.q8.shape[2], None]
    k_rows = x.k_scale.to(dtype).repeat_interleave(QUANT_BLOCK, 2)[:, :, :, None]
    q = x.q8.to(dtype) * q_rows
    k = (x.k8.to(dtype) * k_rows)[:, :, : x.seqlen_k]
    v = (x.v8t.to(dtype).transpose(2, 3) * x.v_scale.to(dtype)[:, :, None, :])[:, :, : x.seqlen_k]
    return q, k, v


@triton.jit
def _round_to_e4m3(x):
    """Round non-negative fp32 x (< 448) to the nearest e4m3 value, ties to even, in fp32
    arithmetic. Only for the Triton interpreter, whose fp32 -> fp8 cast truncates and mishandles
    subnormals; the GPU converts in hardware (round to nearest even)."""
    e = tl.maximum(tl.floor(tl.log2(tl.maximum(x, 1e-30))), -6.0)  # binade; subnormals: -6
    step = tl.exp2(e - 3.0)  # 3 mantissa bits
    y = x / step
    r = tl.floor(y + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    r = tl.where((r - y == 0.5) & odd, r - 1.0, r)
    return r * step


@triton.jit
def _fp8_key_tiles(
    acc,
    l_i,
    m_i,
    q,
    q_scale,
    k_ptrs,
    vt_ptrs,
    k_desc,
    v_desc,
    k_scales,
    batch,
    kv_head,
    stride_kn,
    stride_vn,
    offs_m,
    offs_n,
    key_lo,
    key_hi,
    seqlen_k,
    qk_scale,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    QUANT_BLOCK: tl.constexpr,
    P_SCALE: tl.constexpr,
    APPLY_MASK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    EMULATE_P_CAST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """Fold key tiles [key_lo, key_hi) into (acc, l_i, m_i): forward.py's loop and its online
    softmax step, with fp8 dots. Keys are padded to whole QUANT_BLOCKs with zeros, so every load is in bounds;
    the masked phase sets padded and future keys' scores to -inf."""
    for start_n in tl.range(key_lo, key_hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if USE_TMA:
            k = k_desc.load([batch, kv_head, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        else:
            k = tl.load(k_ptrs + start_n.to(tl.int64) * stride_kn)
        # The k tile lies inside one quantization block: fold both scales into one scalar.
        tile_scale = qk_scale * q_scale * tl.load(k_scales + start_n // QUANT_BLOCK)
        s = tl.dot(q, tl.trans(k))  # e4m3 x e4m3 -> fp32
        if APPLY_MASK:
            cols = start_n + offs_n
            visible = cols[None, :] < seqlen_k
            if IS_CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            s = tl.where(visible, s * tile_scale, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_tile(s, m_i, l_i, tile_scale, APPLY_MASK)
        acc = acc * alpha[:, None]
        if USE_TMA:
            vt = v_desc.load([batch, kv_head, 0, start_n]).reshape(HEAD_DIM, BLOCK_N)
        else:
            vt = tl.load(vt_ptrs + start_n.to(tl.int64) * stride_vn)
        # p in [0, 1], times P_SCALE (a power of two: exact) into e4m3's normal range.
        if EMULATE_P_CAST:
            # Interpreter: the same e4m3 values, held in fp16 (which holds every e4m3 value
            # exactly); the fp16 dot then equals the fp8 one.
            p8 = _round_to_e4m3(p * P_SCALE).to(tl.float16)
            acc = tl.dot(p8, tl.trans(vt.to(tl.float16)), acc)
        else:
            p8 = (p * P_SCALE).to(tl.float8e4nv)
            acc = tl.dot(p8, tl.trans(vt), acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fp8_attn_fwd_kernel(
    Q8,
    K8,
    V8T,
    QScale,
    KScale,
    VScale,
    Out,
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
    stride_vk,
    stride_vn,
    stride_oz,
    stride_oh,
    stride_om,
    stride_ok,
    num_q_heads,
    num_kv_heads,
    gqa_group_size,
    seqlen_q,
    seqlen_k,
    n_q_blocks,
    n_k_blocks,
    qk_scale,
    inv_p_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    QUANT_BLOCK: tl.constexpr,
    P_SCALE: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr,
    EMULATE_P_CAST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    num_m_tiles = tl.cdiv(seqlen_q, BLOCK_M)
    pid = tl.program_id(0)
    tile_m = pid % num_m_tiles
    if IS_CAUSAL:
        tile_m = num_m_tiles - 1 - tile_m  # heaviest tiles first
    batch_head = pid // num_m_tiles
    batch = batch_head // num_q_heads
    q_head = batch_head % num_q_heads
    kv_head = q_head // gqa_group_size
    kv_batch_head = batch * num_kv_heads + kv_head

    q_base = Q8 + batch.to(tl.int64) * stride_qz + q_head.to(tl.int64) * stride_qh
    k_base = K8 + batch.to(tl.int64) * stride_kz + kv_head.to(tl.int64) * stride_kh
    v_base = V8T + batch.to(tl.int64) * stride_vz + kv_head.to(tl.int64) * stride_vh
    o_base = Out + batch.to(tl.int64) * stride_oz + q_head.to(tl.int64) * stride_oh

    tile_start = tile_m * BLOCK_M
    offs_m = tile_start + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_in = offs_m < seqlen_q
    q = tl.load(
        q_base + offs_m[:, None].to(tl.int64) * stride_qm + offs_d[None, :] * stride_qk,
        mask=row_in[:, None],
        other=0.0,
    )
    # The q tile lies inside one quantization block: one scale, folded into the score scale.
    q_scale = tl.load(QScale + batch_head.to(tl.int64) * n_q_blocks + tile_start // QUANT_BLOCK)
    k_ptrs = k_base + offs_n[:, None].to(tl.int64) * stride_kn + offs_d[None, :] * stride_kk
    vt_ptrs = v_base + offs_d[:, None].to(tl.int64) * stride_vk + offs_n[None, :] * stride_vn
    k_scales = KScale + kv_batch_head.to(tl.int64) * n_k_blocks

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if IS_CAUSAL:  # top-left: row i sees keys j <= i
        key_end = tl.minimum(tile_start + BLOCK_M, seqlen_k)
        unmasked_end = tl.minimum(
            ((tile_start + 1) // BLOCK_N) * BLOCK_N, (seqlen_k // BLOCK_N) * BLOCK_N
        )
    else:
        key_end = seqlen_k
        unmasked_end = (seqlen_k // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _fp8_key_tiles(
        acc=acc,
        l_i=l_i,
        m_i=m_i,
        q=q,
        q_scale=q_scale,
        k_ptrs=k_ptrs,
        vt_ptrs=vt_ptrs,
        k_desc=k_desc,
        v_desc=v_desc,
        k_scales=k_scales,
        batch=batch,
        kv_head=kv_head,
        stride_kn=stride_kn,
        stride_vn=stride_vn,
        offs_m=offs_m,
        offs_n=offs_n,
        key_lo=0,
        key_hi=unmasked_end,
        seqlen_k=seqlen_k,
        qk_scale=qk_scale,
        BLOCK_N=BLOCK_N,
        HEAD_DIM=HEAD_DIM,
        QUANT_BLOCK=QUANT_BLOCK,
        P_SCALE=P_SCALE,
        APPLY_MASK=False,
        IS_CAUSAL=IS_CAUSAL,
        USE_TMA=USE_TMA,
        EMULATE_P_CAST=EMULATE_P_CAST,
        WARP_SPECIALIZE=WARP_SPECIALIZE,
    )
    acc, l_i, m_i = _fp8_key_tiles(
        acc=acc,
        l_i=l_i,
        m_i=m_i,
        q=q,
        q_scale=q_scale,
        k_ptrs=k_ptrs,
        vt_ptrs=vt_ptrs,
        k_desc=k_desc,
        v_desc=v_desc,
        k_scales=k_scales,
        batch=batch,
        kv_head=kv_head,
        stride_kn=stride_kn,
        stride_vn=stride_vn,
        offs_m=offs_m,
        offs_n=offs_n,
        key_lo=unmasked_end,
        key_hi=key_end,
        seqlen_k=seqlen_k,
        qk_scale=qk_scale,
        BLOCK_N=BLOCK_N,
        HEAD_DIM=HEAD_DIM,
        QUANT_BLOCK=QUANT_BLOCK,
        P_SCALE=P_SCALE,
        APPLY_MASK=True,
        IS_CAUSAL=IS_CAUSAL,
        USE_TMA=USE_TMA,
        EMULATE_P_CAST=EMULATE_P_CAST,
        WARP_SPECIALIZE=WARP_SPECIALIZE,
    )

    # Epilogue: undo P_SCALE, apply v's per-channel scale, normalize.
    v_scale = tl.load(VScale + kv_batch_head.to(tl.int64) * HEAD_DIM + offs_d)
    sees_nothing = l_i == 0.0
    out = acc * (v_scale[None, :] * inv_p_scale) / tl.where(sees_nothing, 1.0, l_i)[:, None]
    o_ptrs = o_base + offs_m[:, None].to(tl.int64) * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_in[:, None])


# H100 launch configs (BLOCK_M, BLOCK_N, warps, stages), from the fp8 tuning sweep recorded
# in results/<gpu>/fp8.json; both tiles must divide QUANT_BLOCK.
_HOPPER_FP8 = {False: (64, 128, 4, 3), True: (64, 128, 4, 3)}  # 801 / 738 TFLOP/s at B2 H16 S8192


def pick_config(x: Fp8Inputs, causal: bool, interpreted: bool = False) -> dict:
    """This kernel's launch config for ``x`` when the caller gives none."""
    if interpreted:
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1, USE_TMA=False)
    bm, bn, warps, stages = _HOPPER_FP8[bool(causal)]
    if x.q8.shape[3] == 256:
        bm, warps = 64, 4  # a 128 x 256 fp32 accumulator does not fit one warpgroup's registers
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, USE_TMA=True)


def launch_fp8(x: Fp8Inputs, out: torch.Tensor, *, causal: bool, scale: float, config) -> None:
    """Launch the kernel on quantized inputs into ``out`` (``flashcore.fp8_attention``
    checks and allocates). ``config`` overrides the launch (BLOCK_M, BLOCK_N dividing
    QUANT_BLOCK, num_warps, num_stages, USE_TMA)."""
    q8 = x.q8
    interpreted = on_interpreter(q8)
    batch, num_q_heads, seqlen_q, head_dim = q8.shape
    num_kv_heads = x.k8.shape[1]
    cfg = dict(config) if config is not None else pick_config(x, causal, interpreted)
    use_tma = cfg.pop("USE_TMA", True) and not interpreted and q8.device.type == "cuda"
    cfg["WARP_SPECIALIZE"] = (
        cfg.get("WARP_SPECIALIZE", False) and use_tma
    )  # Triton's producer/consumer split
    k_desc = v_desc = None
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k_desc = TensorDescriptor(
            x.k8, list(x.k8.shape), list(x.k8.stride()), [1, 1, cfg["BLOCK_N"], head_dim]
        )
        v_desc = TensorDescriptor(
            x.v8t, list(x.v8t.shape), list(x.v8t.stride()), [1, 1, head_dim, cfg["BLOCK_N"]]
        )
    grid = (triton.cdiv(seqlen_q, cfg["BLOCK_M"]) * batch * num_q_heads,)
    _fp8_attn_fwd_kernel[grid](
        q8,
        x.k8,
        x.v8t,
        x.q_scale,
        x.k_scale,
        x.v_scale,
        out,
        k_desc,
        v_desc,
        *q8.stride(),
        *x.k8.stride(),
        *x.v8t.stride(),
        *out.stride(),
        num_q_heads,
        num_kv_heads,
        num_q_heads // num_kv_heads,
        seqlen_q,
        x.seqlen_k,
        x.q_scale.shape[2],
        x.k_scale.shape[2],
        scale * LOG2E,
        1.0 / x.p_scale,
        HEAD_DIM=head_dim,
        QUANT_BLOCK=QUANT_BLOCK,
        P_SCALE=x.p_scale,
        IS_CAUSAL=bool(causal),
        USE_TMA=use_tma,
        EMULATE_P_CAST=interpreted,
        **cfg,
    )
