"""PyTorch integration: a ``torch.library`` op, an SDPA stand-in, and transformers registration.

* ``torch.ops.flashcore.attention(q, k, v, is_causal, bottom_right, scale)``: a custom op
  with a fake (meta) implementation, so ``torch.compile(fullgraph=True)`` traces through it
  and ``torch.library.opcheck`` passes. CUDA runs the Triton kernels (the split-KV decode
  kernel when a few queries attend to a long cache); CPU runs the Triton kernel under the
  interpreter when ``TRITON_INTERPRET=1`` (float16/float32), and a plain PyTorch float32
  computation otherwise, so the op works on any CPU.
* ``flashcore.sdpa``: ``scaled_dot_product_attention``'s signature for what flashcore
  computes; ``attn_mask`` and dropout raise (no silent fallback).
* ``register_transformers()``: adds flashcore to Hugging Face transformers' attention
  interface as ``attn_implementation="fc_triton"`` (transformers treats any name containing
  "flash" as a FlashAttention package to import). Padding masks raise.
"""

from __future__ import annotations

import torch

from ._checks import interpreter_enabled

# A few queries against a long cache: the split-KV kernel fills the GPU, the forward
# kernel's one query tile per head would not.
DECODE_MAX_QUERIES = 16


def _launch_cuda(q, k, v, is_causal, bottom_right, scale):
    from .kernels.decode import attention_with_kvcache
    from .kernels.forward import attention

    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    decode_like = seqlen_q <= DECODE_MAX_QUERIES and seqlen_k >= 4 * seqlen_q and (
        seqlen_q == 1 or (is_causal and bottom_right))
    if decode_like and q.dtype != torch.float32:
        lengths = torch.full((q.shape[0],), seqlen_k, dtype=torch.int32, device=q.device)
        return attention_with_kvcache(q, k, v, lengths, scale=scale, check_lengths=False)
    return attention(q, k, v, causal=is_causal,
                     causal_alignment="bottom_right" if bottom_right else "top_left", scale=scale)


@torch.library.custom_op("flashcore::attention", mutates_args=(), device_types="cuda")
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                 bottom_right: bool, scale: float | None) -> torch.Tensor:
    """Forward attention as a torch op. Returns a contiguous tensor of q's shape/dtype."""
    with torch.no_grad():
        return _launch_cuda(q, k, v, is_causal, bottom_right, scale).contiguous()


@attention_op.register_kernel("cpu")
def _attention_cpu(q, k, v, is_causal, bottom_right, scale):
    align = "bottom_right" if bottom_right else "top_left"
    with torch.no_grad():
        if interpreter_enabled() and q.dtype in (torch.float16, torch.float32):
            from .kernels.forward import attention
            return attention(q, k, v, causal=is_causal, causal_alignment=align, scale=scale).contiguous()
        from .reference import attention_reference
        out = attention_reference(q, k, v, causal=is_causal, causal_alignment=align, scale=scale,
                                  compute_dtype=torch.float32)
        return out.to(q.dtype).contiguous()


@attention_op.register_fake
def _attention_fake(q, k, v, is_causal, bottom_right, scale):
    from ._checks import check_attention_inputs
    check_attention_inputs(q, k, v, max_head_dim=256)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


# --- autograd for flashcore::attention (kernels/backward.py). Arguments are read by name
# from the op's schema, so arguments added to the op later reach this code by name: those
# with a gradient here (window) are passed on, any other one set to a non-default value
# raises rather than give a wrong gradient.
_GRAD_ARGS = ("q", "k", "v", "is_causal", "bottom_right", "scale", "window")


@torch.library.custom_op("flashcore::attention_backward", mutates_args=(), device_types=("cuda", "cpu"))
def attention_backward_op(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          is_causal: bool, bottom_right: bool, scale: float | None,
                          window: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of flashcore::attention; contiguous, in the inputs' dtype."""
    from .kernels.backward import op_backward
    return tuple(g.contiguous() for g in op_backward(grad_out, q, k, v, is_causal, bottom_right, scale, window))


@attention_backward_op.register_fake
def _attention_backward_fake(grad_out, q, k, v, is_causal, bottom_right, scale, window):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _attention_setup_context(ctx, inputs, output):
    names = [a.name for a in torch.ops.flashcore.attention.default._schema.arguments]
    args = dict(zip(names, inputs))
    for name, value in args.items():
        if name not in _GRAD_ARGS and value not in (None, False, 0, 0.0):
            raise NotImplementedError(
                f"flashcore::attention has no backward for {name}={value!r}; run it under "
                "torch.no_grad() or detach the inputs")
    ctx.save_for_backward(args["q"], args["k"], args["v"])
    ctx.options = (args["is_causal"], args["bottom_right"], args["scale"], args.get("window"))
    ctx.num_inputs = len(inputs)


def _attention_backward_formula(ctx, grad_out):
    q, k, v = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashcore.attention_backward(grad_out, q, k, v, *ctx.options)
    return (dq, dk, dv) + (None,) * (ctx.num_inputs - 3)


attention_op.register_autograd(_attention_backward_formula, setup_context=_attention_setup_context)
# --- end of autograd for flashcore::attention


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """``torch.nn.functional.scaled_dot_product_attention`` for the cases flashcore computes.

    Shapes ``(B, H, L, E)`` (or 3-D ``(H, L, E)``); ``is_causal`` is SDPA's top-left
    alignment; ``enable_gqa`` as in SDPA (Hq a multiple of Hkv). Differentiable inputs are
    refused (forward only).

    Raises ValueError for ``attn_mask`` (use ``is_causal``, or SDPA itself for arbitrary
    masks), ``dropout_p > 0``, differing query/key head counts without ``enable_gqa``, and
    ``attn_mask`` together with ``is_causal`` (as SDPA does).
    """
    if attn_mask is not None:
        raise ValueError("flashcore.sdpa does not support attn_mask (only is_causal); call "
                         "torch.nn.functional.scaled_dot_product_attention for arbitrary masks")
    if dropout_p != 0.0:
        raise ValueError(f"flashcore.sdpa does not support dropout, got dropout_p={dropout_p}")
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    if query.dim() == 4 and key.dim() == 4 and query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(
            f"expected query and key to have the same number of heads unless enable_gqa=True, "
            f"got {query.shape[1]} and {key.shape[1]}")
    out = torch.ops.flashcore.attention(query, key, value, bool(is_causal), False,
                                        None if scale is None else float(scale))
    return out.squeeze(0) if squeeze else out


# ------------------------------------------------------------------- transformers

def _transformers_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                            sliding_window=None, softcap=None, is_causal=None, **kwargs):
    """transformers' attention-function signature: (B, H, S, D) in, ((B, S, H, D), None) out.

    Queries are the last Sq positions of the keys (bottom-right causal), which is what a
    KV-cache generation step and a plain forward pass (Sq == Sk) both are."""
    if attention_mask is not None:
        raise NotImplementedError(
            "flashcore's transformers attention does not support padding masks; use unpadded "
            "batches (equal lengths) or attn_implementation='sdpa'")
    if dropout and module.training:
        raise NotImplementedError("flashcore is forward-only: no attention dropout")
    if sliding_window is not None or softcap is not None:
        raise NotImplementedError("flashcore's transformers attention: no sliding window or softcap")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = torch.ops.flashcore.attention(query, key, value, bool(causal), True,
                                        None if scaling is None else float(scaling))
    return out.transpose(1, 2).contiguous(), None


def _padding_only_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                       mask_function=None, attention_mask=None, **kwargs):
    """transformers mask hook: None when nothing is padded (the kernel applies the causal
    mask itself), else the 2-D padding mask, which the attention function refuses."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask


TRANSFORMERS_NAME = "fc_triton"


def register_transformers(name: str = TRANSFORMERS_NAME) -> str:
    """Register flashcore as ``attn_implementation=name`` in transformers (attention
    function and mask hook); returns the name."""
    if "flash" in name:
        raise ValueError("transformers treats attention names containing 'flash' as "
                         "FlashAttention packages to import; pick another name")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, _transformers_attention)
    AttentionMaskInterface.register(name, _padding_only_mask)
    return name
