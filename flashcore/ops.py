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
  "flash" as a FlashAttention package to import). Padded batches, sliding windows and
  softcap run without a dense mask (see ``_transformers_attention``).
"""

from __future__ import annotations

import torch

from ._checks import check_scale, interpreter_enabled

# A few queries against a long cache: the split-KV kernel fills the GPU, the forward
# kernel's one query tile per head would not.
DECODE_MAX_QUERIES = 16


_KERNELS: list = []


def _kernels():
    # Imported once, on first use (importing flashcore stays light).
    if not _KERNELS:
        from .interface import attention
        from .kernels.decode import attend_full_cache

        _KERNELS.extend((attend_full_cache, attention))
    return _KERNELS


def _launch_cuda(q, k, v, is_causal, bottom_right, scale, window=None, softcap=None, sinks=None):
    attend_full_cache, attention = _KERNELS or _kernels()
    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    if (
        seqlen_q <= DECODE_MAX_QUERIES
        and seqlen_k >= 4 * seqlen_q
        and (seqlen_q == 1 or (is_causal and bottom_right))
        and q.dtype != torch.float32
        and (window is None or is_causal)
        and v.shape[3] == q.shape[3]  # the decode kernel has one head dim (MLA's: prefill)
    ):
        # A window needs the causal position of each query: the decode kernel's
        # bottom-right alignment (Sq == 1 is bottom-right either way).
        return attend_full_cache(q, k, v, scale=scale, window=window, softcap=softcap, sinks=sinks)
    return attention(
        q,
        k,
        v,
        causal=is_causal,
        causal_alignment="bottom_right" if bottom_right else "top_left",
        scale=scale,
        window=window,
        softcap=softcap,
        sinks=sinks,
    )


# flashcore::attention is defined on a torch.library.Library, not with
# torch.library.custom_op: custom_op wraps every call in Python bookkeeping of its own (its
# device routing, output alias checks) before the kernel runs, and in eager inference that
# cost more than the launch (tools/op_overhead.py). Schema, kernels, fake and autograd are
# the same either way, and torch.compile and opcheck treat the op alike.
_LIBRARY = torch.library.Library("flashcore", "FRAGMENT")
_LIBRARY_SCHEMA = (
    "attention(Tensor q, Tensor k, Tensor v, bool is_causal, bool bottom_right, float? scale, "
    "int? window=None, float? softcap=None) -> Tensor"
)
_LIBRARY.define(_LIBRARY_SCHEMA)


def _attention_cuda(q, k, v, is_causal, bottom_right, scale, window=None, softcap=None):
    """Forward attention as a torch op (``torch.ops.flashcore.attention``). Returns a
    contiguous ``(B, Hq, Sq, D_v)`` tensor (v's head dim, which may differ from q/k's) in
    q's dtype. ``window`` (causal sliding window, keys each query sees, itself included) and
    ``softcap`` as ``flashcore.attention``."""
    with torch.no_grad():
        return _launch_cuda(q, k, v, is_causal, bottom_right, scale, window, softcap).contiguous()


def _attention_cpu(q, k, v, is_causal, bottom_right, scale, window=None, softcap=None, sinks=None):
    check_scale(scale)  # one contract on every device, the reference route included
    align = "bottom_right" if bottom_right else "top_left"
    with torch.no_grad():
        if interpreter_enabled() and q.dtype in (torch.float16, torch.float32):
            from .interface import attention

            return attention(
                q,
                k,
                v,
                causal=is_causal,
                causal_alignment=align,
                scale=scale,
                window=window,
                softcap=softcap,
                sinks=sinks,
            ).contiguous()
        from ._checks import check_softcap, check_window

        check_window(window, is_causal)
        check_softcap(softcap)
        from .reference import attention_reference

        out = attention_reference(
            q,
            k,
            v,
            causal=is_causal,
            causal_alignment=align,
            scale=scale,
            window=window,
            softcap=softcap,
            compute_dtype=torch.float32,
            sinks=sinks,
        )
        return out.to(q.dtype).contiguous()


_LIBRARY.impl("attention", _attention_cuda, "CUDA")
_LIBRARY.impl("attention", _attention_cpu, "CPU")


def _attention_fake(q, k, v, is_causal, bottom_right, scale, window=None, softcap=None):
    from ._checks import check_attention_inputs, check_window

    check_attention_inputs(q, k, v, max_head_dim=256, value_head_dim=True)
    check_window(window, is_causal)
    return torch.empty((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)


torch.library.register_fake("flashcore::attention", _attention_fake, lib=_LIBRARY)

# The op under the module name it had as a custom_op (callable with the same arguments).
attention_op = torch.ops.flashcore.attention


# --- autograd for flashcore::attention (kernels/backward.py). Arguments are read by name
# from the op's schema, so arguments added to the op later reach this code by name: those
# with a gradient here (window) are passed on, any other one set to a non-default value
# raises rather than give a wrong gradient.
_GRAD_ARGS = ("q", "k", "v", "is_causal", "bottom_right", "scale", "window")


@torch.library.custom_op(
    "flashcore::attention_backward", mutates_args=(), device_types=("cuda", "cpu")
)
def attention_backward_op(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    bottom_right: bool,
    scale: float | None,
    window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of flashcore::attention; contiguous, in the inputs' dtype."""
    return tuple(
        g.contiguous()
        for g in op_backward(grad_out, q, k, v, is_causal, bottom_right, scale, window)
    )


@attention_backward_op.register_fake
def _attention_backward_fake(grad_out, q, k, v, is_causal, bottom_right, scale, window):
    return (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
        torch.empty(v.shape, dtype=v.dtype, device=v.device),
    )


def _attention_setup_context(ctx, inputs, output):
    names = [a.name for a in torch.ops.flashcore.attention.default._schema.arguments]
    args = dict(zip(names, inputs))
    for name, value in args.items():
        if name not in _GRAD_ARGS and value not in (None, False, 0, 0.0):
            raise NotImplementedError(
                f"flashcore::attention has no backward for {name}={value!r}; run it under "
                "torch.no_grad() or detach the inputs"
            )
    ctx.save_for_backward(args["q"], args["k"], args["v"])
    ctx.options = (args["is_causal"], args["bottom_right"], args["scale"], args.get("window"))
    ctx.num_inputs = len(inputs)


def _attention_backward_formula(ctx, grad_out):
    q, k, v = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashcore.attention_backward(grad_out, q, k, v, *ctx.options)
    return (dq, dk, dv) + (None,) * (ctx.num_inputs - 3)


torch.library.register_autograd(
    "flashcore::attention",
    _attention_backward_formula,
    setup_context=_attention_setup_context,
    lib=_LIBRARY,
)


# The op's autograd kernel for CUDA and CPU tensors (a backend's own Autograd key takes
# precedence over the Autograd alias that register_autograd fills; other backends, e.g.
# meta, keep that one). register_autograd's kernel re-enters the dispatcher on every call
# (a redispatch below autograd, through a Python kernel again): on the H100 that was about
# 20 us per eager call over the kernel function itself (op_overhead_382853b.json), most of
# the op path's host cost in launch.json. An inference call on plain tensors (no input
# needs a gradient, and nothing but the backend below autograd in the key set: no tensor
# subclass, fake tensor, dispatch mode or functionalization that must see the op) runs the
# backend kernel here directly. Every other call goes where register_autograd's would.
_AUTOGRAD_KEYS = {
    torch._C.DispatchKey.CUDA: "AutogradCUDA",
    torch._C.DispatchKey.CPU: "AutogradCPU",
}
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
# key set (its raw bits) -> the backend below autograd when nothing else is, else None;
# a handful of entries per process, computed once each (the key set's own methods cost
# about a microsecond per call).
_PLAIN_BACKEND: dict[int, object] = {}


def _plain_backend(keyset):
    below = (keyset & _BELOW_AUTOGRAD).remove(torch._C.DispatchKey.ADInplaceOrView)
    backend = below.highestPriorityTypeId()
    return backend if backend in _AUTOGRAD_KEYS else None


class _AttentionFunction(torch.autograd.Function):
    """What register_autograd's kernel runs when a gradient is needed: the op below
    autograd, the same setup_context and backward formula."""

    @staticmethod
    def forward(ctx, keyset, *args):
        with torch._C._AutoDispatchBelowAutograd():
            out = torch.ops.flashcore.attention.default.redispatch(keyset, *args)
        _attention_setup_context(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return (None, *_attention_backward_formula(ctx, grad_out))


def _attention_autograd(keyset, q, k, v, *options):
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _AttentionFunction.apply(keyset & _BELOW_AUTOGRAD, q, k, v, *options)
    bits = keyset.raw_repr()
    backend = _PLAIN_BACKEND.get(bits, False)
    if backend is False:
        backend = _PLAIN_BACKEND[bits] = _plain_backend(keyset)
    if backend == torch._C.DispatchKey.CUDA:
        return _launch_cuda(q, k, v, *options).contiguous()
    if backend == torch._C.DispatchKey.CPU:
        return _attention_cpu(q, k, v, *options)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.flashcore.attention.default.redispatch(
            keyset & _BELOW_AUTOGRAD, q, k, v, *options
        )


for _key in _AUTOGRAD_KEYS.values():
    _LIBRARY.impl("attention", _attention_autograd, _key, with_keyset=True)
# --- end of autograd for flashcore::attention


def sdpa(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    window=None,
    softcap=None,
):
    """``torch.nn.functional.scaled_dot_product_attention`` for the cases flashcore computes.

    Shapes ``(B, H, L, E)`` (or 3-D ``(H, L, E)``); ``is_causal`` is SDPA's top-left
    alignment; ``enable_gqa`` as in SDPA (Hq a multiple of Hkv). Keyword-only extras beyond
    SDPA: ``window`` (causal sliding window, the ``window`` most recent keys, itself
    included; needs ``is_causal``) and ``softcap`` (Gemma 2 logit capping).

    Raises ValueError for ``attn_mask`` (use ``is_causal``, or SDPA itself for arbitrary
    masks), ``dropout_p > 0``, differing query/key head counts without ``enable_gqa``, and
    ``attn_mask`` together with ``is_causal`` (as SDPA does).
    """
    if attn_mask is not None:
        raise ValueError(
            "flashcore.sdpa does not support attn_mask (only is_causal); call "
            "torch.nn.functional.scaled_dot_product_attention for arbitrary masks"
        )
    if dropout_p != 0.0:
        raise ValueError(f"flashcore.sdpa does not support dropout, got dropout_p={dropout_p}")
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    if query.dim() == 4 and key.dim() == 4 and query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(
            f"expected query and key to have the same number of heads unless enable_gqa=True, "
            f"got {query.shape[1]} and {key.shape[1]}"
        )
    args = (
        query,
        key,
        value,
        bool(is_causal),
        False,
        None if scale is None else float(scale),
        window,
        None if softcap is None else float(softcap),
    )
    differentiable = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (query, key, value)
    )
    if differentiable or torch.compiler.is_compiling() or not isinstance(query, torch.Tensor):
        out = torch.ops.flashcore.attention(*args)  # traced, differentiable
    else:
        # Eager inference: the op's dispatch costs more than the launch; call it directly
        # (the kernels' launchers check their inputs).
        with torch.no_grad():
            out = (_launch_cuda(*args) if query.is_cuda else _attention_cpu(*args)).contiguous()
    return out.squeeze(0) if squeeze else out


# ------------------------------------------------------------------- transformers


class PaddedKeys:
    """What the mask hook hands the attention function for a padded batch (instead of a
    dense (B, 1, Sq, Sk) mask): which keys are valid, ``valid`` (B, Sk) bool, and, when
    every sequence's valid keys are one contiguous range (left or right padding), the range
    ``[starts[b], ends[b])`` as int32 tensors. Built once per forward pass, not per layer."""

    def __init__(self, valid: torch.Tensor):
        self.valid = valid
        kv_length = valid.shape[1]
        counts = valid.sum(1, dtype=torch.int32)
        first = valid.to(torch.int8).argmax(1).to(torch.int32)
        last = kv_length - valid.flip(1).to(torch.int8).argmax(1).to(torch.int32)
        self.starts = torch.where(counts > 0, first, 0).to(torch.int32)
        self.ends = (self.starts + counts).to(torch.int32)
        # One host sync per forward pass (SDPA's mask path has one too: padding_mask.all()).
        span_ok, self.longest, self.ends_at_last = (
            int(x)
            for x in torch.stack(
                [
                    ((last - first == counts) | (counts == 0)).all().int(),
                    counts.max(),
                    (self.ends == kv_length).all().int(),
                ]
            ).tolist()
        )
        self.contiguous = bool(span_ok)
        self.ends_at_last = bool(self.ends_at_last)


def _transformers_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    sliding_window=None,
    softcap=None,
    is_causal=None,
    **kwargs,
):
    """transformers' attention-function signature: (B, H, S, D) in, ((B, S, H, D), None) out.

    Queries are the last Sq positions of the keys (bottom-right causal), which is what a
    KV-cache generation step and a plain forward pass (Sq == Sk) both are. ``sliding_window``
    (transformers' convention, checked against its eager implementation in the tests: key
    j visible from query i iff i - sliding_window < j <= i) and ``softcap`` go to the kernels.

    Padded batches (``attention_mask`` a :class:`PaddedKeys` from the mask hook): a prefill
    (Sq == Sk) runs the varlen forward on each sequence's valid range; a step with a cache
    (Sq < Sk) runs the KV-cache kernel with a per-key padding mask (any padding pattern).
    Padding query rows return zeros."""
    if dropout and module.training:
        raise NotImplementedError("flashcore has no attention dropout")
    if attention_mask is not None and not isinstance(attention_mask, PaddedKeys):
        raise NotImplementedError(
            "flashcore's transformers attention takes padding masks only through its mask hook "
            f"(register_transformers); got a {type(attention_mask).__name__}"
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal)
    window = None if sliding_window is None else int(sliding_window)
    softcap = None if softcap is None else float(softcap)
    scale = None if scaling is None else float(scaling)
    differentiable = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    sinks = kwargs.get("s_aux")  # gpt-oss: one learnable sink logit per query head
    if sinks is not None:
        return _attention_with_sinks(
            query, key, value, attention_mask, causal, scale, window, softcap, sinks
        )
    if attention_mask is None:
        if differentiable or torch.compiler.is_compiling():
            # The op: traced by torch.compile, differentiable through its registered backward.
            out = torch.ops.flashcore.attention(
                query, key, value, causal, True, scale, window, softcap
            )
        else:
            # Eager inference: the op's dispatch costs as much as the launch; call it directly.
            with torch.no_grad():
                out = (
                    _launch_cuda(query, key, value, causal, True, scale, window, softcap)
                    if query.is_cuda
                    else _attention_cpu(query, key, value, causal, True, scale, window, softcap)
                )
        return out.transpose(1, 2).contiguous(), None
    if differentiable:
        raise NotImplementedError(
            "flashcore's padded-batch path is forward-only; use unpadded batches to train"
        )
    with torch.no_grad():
        out = _padded_attention(query, key, value, attention_mask, causal, scale, window, softcap)
    return out.transpose(1, 2).contiguous(), None


def _attention_with_sinks(query, key, value, attention_mask, causal, scale, window, softcap, sinks):
    """gpt-oss's attention (``s_aux``, its sinks) through flashcore.attention, whose autograd
    gives the gradients of q, k, v and the sinks; inference calls take the same kernels as
    the other models (the split-KV decode kernel for a few queries against a long cache)."""
    if attention_mask is not None:
        raise NotImplementedError(
            "flashcore's transformers attention does not take attention sinks (s_aux) with "
            "padded batches yet; run unpadded batches"
        )
    if torch.compiler.is_compiling():
        raise NotImplementedError(
            "flashcore's transformers attention does not take attention sinks (s_aux) under "
            "torch.compile yet (torch.ops.flashcore.attention has no sinks argument)"
        )
    differentiable = torch.is_grad_enabled() and any(
        t.requires_grad for t in (query, key, value, sinks)
    )
    if not query.is_cuda and not (
        interpreter_enabled() and query.dtype in (torch.float16, torch.float32)
    ):
        # No kernel on this CPU: float32 PyTorch, differentiable by torch's autograd.
        from .reference import attention_reference

        align = dict(causal=causal, causal_alignment="bottom_right")
        out = attention_reference(
            query, key, value, **align, scale=scale, window=window, softcap=softcap,
            compute_dtype=torch.float32, sinks=sinks,
        ).to(query.dtype)  # fmt: skip
    elif differentiable:
        from .interface import attention

        out = attention(
            query, key, value, causal=causal, causal_alignment="bottom_right", scale=scale,
            window=window, softcap=softcap, sinks=sinks,
        )  # fmt: skip
    else:
        with torch.no_grad():
            launch = _launch_cuda if query.is_cuda else _attention_cpu
            out = launch(query, key, value, causal, True, scale, window, softcap, sinks=sinks)
    return out.transpose(1, 2).contiguous(), None


def _padded_attention(q, k, v, pad: PaddedKeys, causal, scale, window, softcap):
    from .kernels.decode import attend_full_cache
    from .kernels.varlen import attention_ranges

    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    if pad.valid.shape != (q.shape[0], seqlen_k):
        raise ValueError(
            f"padding mask of shape {tuple(pad.valid.shape)} for keys of shape {tuple(k.shape)}"
        )
    if seqlen_q == seqlen_k and pad.contiguous:
        # Prefill: queries and keys share positions. Sequence b's keys are its valid range;
        # its queries run from the range's start to the end, top-left aligned, so a padding
        # row after the range sees the valid keys SDPA's mask lets it see (generation reads
        # the last row, which is padding in a right-padded batch). Rows before the range
        # (left padding) see no valid key in SDPA either; they return zeros.
        q_ends = torch.full_like(pad.starts, seqlen_q)
        return attention_ranges(
            q,
            k,
            v,
            pad.starts,
            q_ends,
            pad.starts,
            pad.ends,
            seqlen_q,
            causal=causal,
            causal_alignment="top_left",
            window=window,
            softcap=softcap,
            scale=scale,
        )
    if not causal:
        raise NotImplementedError("flashcore: padded non-causal attention with a cache")
    if q.dtype != torch.float32 or not q.is_cuda:
        # The KV-cache kernel: queries are the last Sq cached positions, keys masked per key.
        return attend_full_cache(
            q, k, v, scale=scale, window=window, softcap=softcap, key_padding_mask=pad.valid
        )
    if pad.contiguous and pad.ends_at_last:
        # float32 on CUDA, left padding: every query row is valid, keys [start, Sk).
        q_starts = torch.zeros_like(pad.starts)
        q_ends = torch.full_like(pad.starts, seqlen_q)
        return attention_ranges(
            q,
            k,
            v,
            q_starts,
            q_ends,
            pad.starts,
            pad.ends,
            seqlen_q,
            causal=True,
            causal_alignment="bottom_right",
            window=window,
            softcap=softcap,
            scale=scale,
        )
    raise NotImplementedError("flashcore: float32 on CUDA with a cache needs left padding")


def _padding_only_mask(
    batch_size,
    q_length,
    kv_length,
    q_offset=0,
    kv_offset=0,
    mask_function=None,
    attention_mask=None,
    **kwargs,
):
    """transformers mask hook: None when nothing is padded (the kernels apply the causal and
    window masks themselves), else a :class:`PaddedKeys` for this layer type's key range."""
    if attention_mask is None:
        return None
    valid = attention_mask.to(torch.bool)
    if valid.shape[-1] < kv_offset + kv_length:  # padded with False, as transformers does
        valid = torch.nn.functional.pad(
            valid, (0, kv_offset + kv_length - valid.shape[-1]), value=False
        )
    valid = valid[:, kv_offset : kv_offset + kv_length]
    if bool(valid.all()):
        return None
    return PaddedKeys(valid.contiguous())


TRANSFORMERS_NAME = "fc_triton"


def register_transformers(name: str = TRANSFORMERS_NAME) -> str:
    """Register flashcore as ``attn_implementation=name`` in transformers (attention
    function and mask hook); returns the name."""
    if "flash" in name:
        raise ValueError(
            "transformers treats attention names containing 'flash' as "
            "FlashAttention packages to import; pick another name"
        )
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, _transformers_attention)
    AttentionMaskInterface.register(name, _padding_only_mask)
    return name


# ------------------------------------------------------------- torch.library backward


def op_backward(grad_out, q, k, v, is_causal: bool, bottom_right: bool, scale, window):
    """The backward of ``torch.ops.flashcore.attention``: (dq, dk, dv).

    The op returns only ``out``, so the log-sum-exp is recomputed here by one forward
    pass (about 40% of the backward's work; ``flashcore.attention`` saves it instead).
    CPU without the interpreter, or bfloat16 on CPU: float32 PyTorch autograd."""
    from .interface import attention
    from .kernels.backward import attention_backward

    align = "bottom_right" if bottom_right else "top_left"
    kwargs = dict(causal=is_causal, causal_alignment=align, scale=scale, window=window)
    if q.device.type == "cpu" and not (
        interpreter_enabled() and q.dtype in (torch.float16, torch.float32)
    ):
        from .reference import attention_reference

        with torch.enable_grad():
            leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
            out = attention_reference(*leaves, compute_dtype=torch.float32, **kwargs)
            grads = torch.autograd.grad(out, leaves, grad_out.float())
        return tuple(g.to(q.dtype) for g in grads)
    with torch.no_grad():
        out, lse = attention(q, k, v, return_lse=True, **kwargs)
        return attention_backward(grad_out.to(q.dtype), q, k, v, out, lse, **kwargs)
