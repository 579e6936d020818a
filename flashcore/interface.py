"""flashcore's public functions, their autograd, and which kernel serves each call.

This is the layer a user calls; ``flashcore/__init__.py`` re-exports its public names. It
validates arguments (errors in PyTorch's style, raised before anything is written), picks
the kernel, allocates outputs, and launches through the launchers in ``kernels/``. What
calls what::

    flashcore.attention ──> _AttentionFunction (inputs that require grad)
          │                     forward: _attention_forward;  backward: kernels/backward.py
          └──> _attention_forward ──> forward_kernel(...) (flashcore/dispatch.py)
                     ├── "gluon":  kernels/forward_hopper.py (FA3 structure, Hopper)
                     └── "triton": kernels/forward.py (any GPU, fp32, the interpreter)
    flashcore.attention_varlen ──> kernels/varlen.py (the forward kernel's VARLEN mode)
    flashcore.attention_with_kvcache ──> kernels/decode.py (in-place append, split-KV, paged KV)
    flashcore.quantize_fp8, fp8_attention ──> kernels/fp8.py

``kernels/`` holds kernels and their launchers only and never imports this module.
``parallel.py`` (context parallelism) and ``ops.py`` (torch.library, transformers) build on
this layer and on the launchers.
"""

from __future__ import annotations

import inspect
import math

import torch

from ._checks import (
    check_attention_inputs,
    check_cache_lengths,
    check_kvcache_inputs,
    check_scale,
    check_sinks,
    check_softcap,
    check_window,
    kvcache_capacity,
)
from .dispatch import (  # noqa: F401  (re-exported: flashcore.interface.forward_kernel, ...)
    FORWARD_GLUON_FROM,
    FP8_GLUON_FROM,
    backward_kernel,
    describe_backward_dispatch,
    describe_dispatch,
    describe_fp8_dispatch,
    forward_kernel,
    fp8_kernel,
)
from .kernels import backward as _backward
from .kernels import backward_hopper_ws as _backward_hopper_ws
from .kernels import decode as _decode
from .kernels import forward as _forward
from .kernels import forward_hopper as _hopper
from .kernels import fp8 as _fp8
from .kernels import varlen as _varlen
from .kernels._launch import new_output
from .kernels._softmax import LOG2E, lse_dtype

MAX_HEAD_DIM = 256

# -------------------------------------------------------------------------- attention


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    window: int | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    config: dict | None = None,
    sinks: torch.Tensor | None = None,
    deterministic: bool = True,
):
    """Exact softmax attention: ``softmax(q @ k^T * scale [+ causal mask]) @ v``.

    Args:
        q: ``(B, Hq, Sq, D)``; k: ``(B, Hkv, Sk, D)``; v: ``(B, Hkv, Sk, D_v)``, where v's
            head dim D_v may differ from q/k's D (DeepSeek-V3's MLA: D = 192, D_v = 128;
            either smaller or larger). Any strides (e.g. a
            ``(B, S, H, D)`` tensor
            transposed to ``(B, H, S, D)``).
        causal: apply a causal mask.
        causal_alignment: ``"top_left"`` (query i sees keys j <= i; SDPA's ``is_causal``)
            or ``"bottom_right"`` (query i sees keys j <= i + Sk - Sq; the KV-cache
            convention). Rows that see no key return zeros.
        window: causal sliding window (requires ``causal=True``): query i sees only the
            ``window`` most recent keys, ``i + offset - window < j <= i + offset``, itself
            included. Exact attention under that mask; the cost is linear in S. ``None``
            (default) is plain causal / full attention. transformers' ``sliding_window``
            means the same number.
        softcap: logit soft-capping (Gemma 2): the scaled score s becomes
            ``softcap * tanh(s / softcap)`` before the softmax. ``None`` (default): off.
        sinks: learnable attention sinks (gpt-oss): ``(Hq,)`` float tensor on q's device,
            one logit per query head, in the units of the scaled scores, that joins every
            row's softmax denominator and has no value row:
            ``p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij))``. The lse includes it.
            Runs on the Triton kernel. ``None`` (default): off.
        scale: softmax scale, finite and >= 0 (ValueError otherwise); default ``1 / sqrt(D)``.
        return_lse: also return the natural-log log-sum-exp of each row's scaled scores,
            ``(B, Hq, Sq)``, -inf for rows that see no key: float32 for float16/bfloat16
            inputs, float64 for float32 inputs (``lse_dtype``; the backward needs it).
        out: optional preallocated ``(B, Hq, Sq, D_v)`` output, q's dtype and device (any
            strides); the validation poisons it with NaN so an element never written fails.
        config: override the launch configuration (BLOCK_M, BLOCK_N, num_warps,
            num_stages, and optionally USE_TMA / WARP_SPECIALIZE); for tuning sweeps.
        deterministic: the backward's gradients are bitwise reproducible (default). On
            Hopper, fp16/bf16 at D64/D128, the warp-specialized Gluon backward runs where it
            was measured faster than the Triton one: in its deterministic mode by default
            (``dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM``), in its atomic mode with False
            (``dispatch.BACKWARD_GLUON_FROM``), when dQ may differ between runs in its last
            bits (``python -m flashcore info`` prints both tables). No effect without
            autograd.

    Dtypes: float16 and bfloat16 on CUDA; float32 everywhere (computed in IEEE fp32, not
    tf32). Accumulation is fp32. On CPU tensors the kernel runs under the Triton
    interpreter (``TRITON_INTERPRET=1`` set before importing flashcore), float16/float32
    only: the interpreter's bfloat16 dot is wrong.

    Head dims 1..256 (D and D_v each; ValueError naming v's head dim for D_v > 256); powers
    of two run unpadded, others are padded in registers to the next power of two (at least
    16) with masked loads. The default scale is ``1 / sqrt(D)`` (q/k's head dim). MLA's pair
    (D = 192, D_v = 128) runs the Gluon kernel on Hopper where the dispatch table says
    (q/k loaded as 128 + 64 columns); every other D_v != D runs the Triton kernel, with the
    launch config of the wider head dim, V's tile and the accumulator D_v wide
    (``kernels/_launch.py`` tells the history of that mode on the H100).

    GQA/MQA: ``Hq`` must be a multiple of ``Hkv``; query head h reads KV head
    ``h // (Hq // Hkv)``.

    Host cost: the first call with a given signature (shapes, strides, dtypes, device,
    alignment, flags) is checked and launched through Triton's JIT; later calls with the
    same signature reuse its launch and skip the checks (they passed for that signature).

    Differentiable: inputs that require grad (with grad mode on) go through the autograd
    Function below (``_AttentionFunction``; kernels in kernels/backward.py; deterministic
    dQ; softcap and sinks included; gradients through ``out=`` raise). Not supported: head
    dims > 256, dropout, attention masks. D_v != D is differentiable (dv has v's shape); the
    KV-cache, fp8 and context-parallel paths do not take it (they raise ValueError).
    Sq == 0 returns an empty tensor; Sk == 0 returns zeros (no key to attend to).

    Returns:
        ``out`` ``(B, Hq, Sq, D_v)`` in q's dtype (contiguous unless ``out`` was given), or
        ``(out, lse)`` if return_lse.
    """
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)
    ):
        options = {name: value for name, value in locals().items() if name not in ("q", "k", "v")}
        return _differentiable_attention(q, k, v, **options)
    return _attention_forward(
        q,
        k,
        v,
        causal=causal,
        causal_alignment=causal_alignment,
        window=window,
        softcap=softcap,
        scale=scale,
        return_lse=return_lse,
        out=out,
        config=config,
        sinks=sinks,
    )


def _attention_forward(
    q,
    k,
    v,
    *,
    causal,
    causal_alignment,
    window,
    softcap,
    scale,
    return_lse,
    out,
    config,
    sinks=None,
):
    """``attention`` without autograd: the launch cache, the checks, the dispatch table."""
    if scale is not None:  # before the launch cache: a cached signature skips the checks
        check_scale(scale)
    key = None
    if sinks is not None and not (
        type(sinks) is torch.Tensor and sinks.dtype == torch.float32 and sinks.is_contiguous()
    ):
        # Other dtypes or layouts: checked and converted once here (the kernel reads fp32).
        sinks = check_sinks(sinks, q) if isinstance(q, torch.Tensor) else sinks
    if config is None:
        key, hit = _forward.cached_launch(
            q,
            k,
            v,
            out,
            causal=causal,
            causal_alignment=causal_alignment,
            window=window,
            softcap=softcap,
            scale=scale,
            return_lse=return_lse,
            sinks=sinks,
        )
        if hit is not None:
            out, lse = hit
            return (out, lse) if return_lse else out

    check_attention_inputs(q, k, v, max_head_dim=MAX_HEAD_DIM, value_head_dim=True)
    sinks = check_sinks(sinks, q)
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError(
            f"causal_alignment must be 'top_left' or 'bottom_right', got {causal_alignment!r}"
        )
    check_window(window, causal)
    check_softcap(softcap)
    batch, num_q_heads, seqlen_q, head_dim = q.shape
    seqlen_k = k.shape[2]
    out_shape = (batch, num_q_heads, seqlen_q, v.shape[3])  # v's head dim

    if out is None:
        out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    elif out.shape != out_shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(
            f"expected out to match q (shape (B, Hq, Sq, D_v) = {out_shape}, {q.dtype}, "
            f"{q.device}), "
            f"got shape {tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    # The kernel writes lse only when asked (STORE_LSE); otherwise `out` stands in for the
    # pointer and is never touched through it.
    lse = (
        torch.empty((batch, num_q_heads, seqlen_q), dtype=lse_dtype(q.dtype), device=q.device)
        if return_lse or out.numel() == 0 or seqlen_k == 0
        else out
    )
    if out.numel() == 0 or seqlen_k == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        if sinks is not None and lse.numel():  # only the sink is seen: lse = the sink
            lse.copy_(sinks.to(lse.dtype)[None, :, None].expand_as(lse))
        return (out, lse) if return_lse else out

    bottom_right = causal_alignment == "bottom_right"
    kernel = (
        "triton"
        if config is not None
        else forward_kernel(q, k, v, causal=causal, window=window, softcap=softcap, sinks=sinks)
    )
    if kernel == "gluon":
        options = dict(
            causal_offset=seqlen_k - seqlen_q if (causal and bottom_right) else 0,
            is_causal=bool(causal),
            qk_scale=(1.0 / math.sqrt(head_dim) if scale is None else scale) * LOG2E,
            store_lse=return_lse,
            sinks=sinks,
        )
        _hopper.attention_hopper(q, k, v, out, lse, **options)
        if key is not None:
            # The next call of this signature launches directly (forward.cached_launch).
            lean = _hopper.lean_launch(
                q, k, v, out, lse, default_scale=1.0 / math.sqrt(head_dim), **options
            )
            _forward.remember_launch(key, lean)
        return (out, lse) if return_lse else out
    _forward.launch_forward(
        q,
        k,
        v,
        out,
        lse,
        seqs=None,
        max_seqlen_q=None,
        causal=causal,
        bottom_right=bottom_right,
        window=window,
        softcap=softcap,
        scale=scale,
        return_lse=return_lse,
        config=config,
        key=key,
        sinks=sinks,
    )
    return (out, lse) if return_lse else out


# --------------------------------------------------------------------------- autograd

# Forward keyword arguments whose gradient kernels/backward.py computes; anything else the forward
# grows is refused for differentiable inputs unless left at its default, so a new feature can
# never get a silently wrong gradient.
_DIFFERENTIABLE_KWARGS = (
    "causal",
    "causal_alignment",
    "window",
    "softcap",
    "scale",
    "return_lse",
    "config",
    "sinks",
)


class _AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, kwargs, deterministic):
        options = dict(_FORWARD_DEFAULTS, **kwargs, return_lse=True)
        out, lse = _attention_forward(q, k, v, **options)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.kwargs = kwargs
        ctx.deterministic = deterministic
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        kw = ctx.kwargs
        gluon_kw = {name: kw.get(name) for name in ("window", "softcap", "sinks")}
        causal = bool(kw.get("causal"))
        kernel = backward_kernel(
            q, k, v, causal=causal, deterministic=ctx.deterministic, **gluon_kw
        )
        if kernel in ("gluon_ws", "gluon_ws_det"):
            # The warp-specialized Gluon backward, deterministic or atomic as dispatched.
            off = k.shape[2] - q.shape[2] if kw.get("causal_alignment") == "bottom_right" else 0
            dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
            scale = _backward._default_scale(kw.get("scale"), q)
            _backward_hopper_ws.attention_backward_hopper_ws(
                grad_out.to(q.dtype), q, k, v, out, lse, dq, dk, dv, scale=scale,
                causal_offset=off, is_causal=causal, deterministic=kernel == "gluon_ws_det",
            )  # fmt: skip
            return dq, dk, dv, None, None
        dq, dk, dv = _backward.attention_backward(
            grad_out.to(q.dtype),
            q,
            k,
            v,
            out,
            lse,
            causal=kw.get("causal", False),
            causal_alignment=kw.get("causal_alignment", "top_left"),
            window=kw.get("window"),
            softcap=kw.get("softcap"),
            scale=kw.get("scale"),
            # Its deterministic mode either way: faster than its atomic mode at every shape of
            # backward.json, so deterministic=False gains nothing from the atomic mode here.
            deterministic=True,
        )
        return dq, dk, dv, None, None


def _differentiable_attention(q, k, v, *, deterministic: bool = True, **kwargs):
    """``attention`` for inputs that require grad: an autograd Function whose backward is
    kernels/backward.py's. Returns what ``attention`` returns (lse carries no gradient).
    Raises for forward options whose gradient is not computed."""
    for name, value in kwargs.items():
        if name in _DIFFERENTIABLE_KWARGS or name == "out" and value is None:
            continue
        if name == "out":
            raise RuntimeError(
                "attention(..., out=...) does not support autograd: the inputs "
                "require grad; drop out= (or run under torch.no_grad())"
            )
        if name in _FORWARD_DEFAULTS and value is _FORWARD_DEFAULTS[name] or value is None:
            continue
        raise NotImplementedError(
            f"flashcore's backward does not support {name}={value!r}: call it under "
            f"torch.no_grad() or detach the inputs"
        )
    return_lse = kwargs.pop("return_lse", False)
    kwargs.pop("out", None)
    out, lse = _AttentionFunction.apply(q, k, v, kwargs, deterministic)
    sinks = kwargs.get("sinks")
    if sinks is not None and torch.is_grad_enabled() and sinks.requires_grad:
        out = _SinkGradient.apply(out, lse, sinks)
    return (out, lse) if return_lse else out


class _SinkGradient(torch.autograd.Function):
    """Identity on ``out`` whose backward adds the sinks' gradient.

    A sink is one more logit in each row's softmax with no value row, so its dP is 0 and
    its dS = P_sink * (0 - delta): d sink_h = -sum over rows of P_sink * delta, with
    P_sink = exp(sink_h - lse) and delta = rowsum(dO * O) (the backward's own delta). The
    q, k, v gradients need nothing more: the lse the backward rebuilds P from includes
    the sink. Summed in float64 (one value per row: cheap beside the attention)."""

    @staticmethod
    def forward(ctx, out, lse, sinks):
        ctx.save_for_backward(out, lse, sinks)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad_out):
        out, lse, sinks = ctx.saved_tensors
        delta = (grad_out.double() * out.double()).sum(-1)  # (B, Hq, Sq)
        p_sink = torch.exp(sinks.double()[None, :, None] - lse.double())
        return grad_out, None, (-(p_sink * delta).sum((0, 2))).to(sinks.dtype)


# (deterministic is the backward's: the autograd Function takes it apart from these)
_FORWARD_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(attention).parameters.items()
    if p.kind == p.KEYWORD_ONLY and name != "deterministic"
}


# ----------------------------------------------------------------------------- varlen


def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    causal_alignment: str = "bottom_right",
    window: int | None = None,
    softcap: float | None = None,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    check_lengths: bool = True,
) -> torch.Tensor:
    """Attention over packed variable-length sequences (``flash_attn_varlen_func``'s layout).

    Args:
        q: ``(total_q, Hq, D)``; k: ``(total_k, Hkv, D)``; v: ``(total_k, Hkv, D_v)``, its
            head dim D_v in 1..256, possibly different from D (as ``flashcore.attention``);
            any strides.
        cu_seqlens_q, cu_seqlens_k: ``(B + 1,)`` int32/int64 on q's device, cumulative
            lengths from 0: sequence b is rows ``[cu[b], cu[b + 1])``. Lengths 0 are allowed
            (a sequence with no keys returns zeros).
        max_seqlen_q, max_seqlen_k: the longest query / key length (ints; they size the grid).
        causal: causal mask per sequence, ``causal_alignment`` ``"bottom_right"`` (default,
            FlashAttention's convention: query i sees keys j <= i + len_k - len_q) or
            ``"top_left"``.
        window, softcap, scale: as ``flashcore.attention``.
        out: optional preallocated ``(total_q, Hq, D_v)``.
        check_lengths: check that the offsets start at 0, rise to the packed lengths and
            respect max_seqlen (one small device-to-host copy); pass False inside CUDA graph
            capture, where the caller guarantees them.

    Dtypes as ``flashcore.attention`` (float16/bfloat16 on CUDA, float32 everywhere; CPU
    under the interpreter float16/float32). GQA via Hq % Hkv == 0.

    Differentiable: inputs that require grad (with grad mode on) go through an autograd
    Function (``_VarlenFunction``) that saves the output and the log-sum-exp (packed
    ``(Hq, total_q)``, computed in a q.k pass of its own: kernels/varlen.py says why) and
    runs the backward kernels in their varlen mode (``backward.attention_varlen_backward``;
    deterministic dQ). Every option above has its gradient (causal in both alignments,
    windows, softcap, GQA, lengths 0 and 1); ``out=`` with such inputs raises.

    Raises ValueError/TypeError for shapes, dtypes, devices, offsets; RuntimeError for
    ``out=`` on inputs that require grad. Returns ``(total_q, Hq, D_v)`` in q's dtype (dv of
    v's shape under autograd).
    """
    check_scale(scale)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            got = f"{t.dim()}-D" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                f"expected {name} to be 3-D (total_tokens, heads, head_dim), got {got}"
            )
    _varlen.check_cu_seqlens(
        "cu_seqlens_q", cu_seqlens_q, q.device, q.shape[0], max_seqlen_q, check_lengths
    )
    _varlen.check_cu_seqlens(
        "cu_seqlens_k", cu_seqlens_k, q.device, k.shape[0], max_seqlen_k, check_lengths
    )
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise ValueError(
            f"expected cu_seqlens_q and cu_seqlens_k of the same length (batch + 1), got "
            f"{tuple(cu_seqlens_q.shape)} and {tuple(cu_seqlens_k.shape)}"
        )
    options = dict(
        causal=causal,
        causal_alignment=causal_alignment,
        window=window,
        softcap=softcap,
        scale=scale,
    )
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        if out is not None:
            raise RuntimeError(
                "attention_varlen(..., out=...) does not support autograd: the inputs "
                "require grad; drop out= (or run under torch.no_grad())"
            )
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        return _VarlenFunction.apply(*args, options, True)
    return _varlen.attention_varlen_into(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out=out, **options
    )


class _VarlenFunction(torch.autograd.Function):
    """``attention_varlen`` under autograd: the forward saves out and the packed lse; the
    backward runs kernels/backward.py in its varlen mode, deterministic (the last argument:
    ``attention_varlen`` passes True). cu_seqlens and the options carry no gradient."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, options, deterministic):
        out, lse = _varlen.attention_varlen_into(
            q, k, v, cu_q, cu_k, max_seqlen_q, out=None, return_lse=True, **options
        )
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.args = (max_seqlen_q, max_seqlen_k, options, deterministic)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        max_seqlen_q, max_seqlen_k, options, deterministic = ctx.args
        dq, dk, dv = _backward.attention_varlen_backward(
            grad_out.to(q.dtype), q, k, v, out, lse, cu_q, cu_k, max_seqlen_q, max_seqlen_k,
            deterministic=deterministic, **options,
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None, None, None


# ----------------------------------------------------------------------- KV cache


def attention_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    k_new: torch.Tensor | None = None,
    v_new: torch.Tensor | None = None,
    *,
    block_table: torch.Tensor | None = None,
    scale: float | None = None,
    window: int | None = None,
    softcap: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
    num_splits: int | None = None,
    check_lengths: bool = True,
    out: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Append new keys/values to a KV cache in place, then attend (bottom-right causal).

    Args:
        q: ``(B, Hq, Sn, D)``: the Sn newest positions' queries (Sn = 1 for decode, more
            for chunked prefill / speculative verification).
        k_cache, v_cache: ``(B, Hkv, S_max, D)``, any strides; modified in place when
            k_new/v_new are given. With a ``block_table``: page pools ``(num_pages, Hkv,
            page_size, D)`` (any strides, so FA's ``(num_pages, page_size, Hkv, D)`` pool
            passes as its ``.transpose(1, 2)`` view, no copy).
        cache_seqlens: ``(B,)`` int32/int64 on q's device: tokens already in each
            sequence's cache, before this call's append.
        k_new, v_new: ``(B, Hkv, Sn, D)``, or both None: then nothing is appended,
            cache_seqlens counts the Sn query positions too, and the queries are the last
            Sn cached positions (query r sees keys j <= cache_seqlens[b] - Sn + r).
        block_table: paged KV (FA's ``page_table``): ``(B, max_pages_per_seq)`` int32 on
            q's device; position p of sequence b is row ``p % page_size`` of page
            ``block_table[b, p // page_size]`` (S_max = max_pages_per_seq * page_size). Any
            page size >= 1, pages in any order, pages shared between sequences (appending
            into a shared page changes what the others read: copy-on-write is the caller's
            business); appends land in their pages in place. Not with key_padding_mask.
        scale: softmax scale, finite and >= 0 (ValueError otherwise); default ``1 / sqrt(D)``.
        window: causal sliding window: query at cache position p sees keys
            ``p - window < j <= p`` (transformers' ``sliding_window``); None: all.
        softcap: logit soft-capping ``softcap * tanh(s / softcap)`` (Gemma 2); None: off.
        key_padding_mask: optional ``(B, S_max)`` bool (or uint8) on q's device, False at
            cache positions no query may see (padding, left, right or in between).
        num_splits: split-KV factor; default chosen from the grid size and the lengths.
        check_lengths: check ``0 <= cache_seqlens`` and ``cache_seqlens + Sn <= S_max``
            (``cache_seqlens <= S_max`` without new tokens) before writing anything (one
            small device-to-host copy), and with a block_table that every page id the call
            uses (positions below ``cache_seqlens + Sn``) is in ``[0, num_pages)`` (a
            second). Pass False inside CUDA graph capture, where the caller must guarantee
            the lengths and page ids.
        out: optional preallocated ``(B, Hq, Sn, D)`` output.
        sinks: learnable attention sinks (gpt-oss), ``(Hq,)``, as :func:`attention`.

    Dtypes: float16, bfloat16 (CUDA); float16 and float32 on CPU under the interpreter.
    Head dims 1..256. GQA/MQA via Hq % Hkv == 0.

    Host cost: with ``check_lengths=False`` and no new tokens, a call whose Triton
    specialization (dtypes, devices, 16-byte alignment, the class of every size and stride:
    1, divisible by 16, i32/i64; options) was launched before reuses that compiled kernel
    and skips the full checks (a few shape relations are still checked); the sizes
    themselves may differ, e.g. a cache one token longer than the last call's.

    Raises (before touching the cache): ValueError/TypeError for shapes, dtypes, devices,
    heads, lengths out of range or a cache too small for the new tokens; for a block table
    that is not ``(B, >= 1)`` int32 on q's device, k/v pools of different shapes (pages of
    different sizes), a page id outside the pool, or a ``key_padding_mask`` with it.

    Returns: ``(B, Hq, Sn, D)`` in q's dtype; with ``return_lse``, ``(out, lse)``, lse
    ``(B, Hq, Sn)`` the natural-log log-sum-exp of each row's scaled scores (sinks included),
    as :func:`attention` returns it (float32; float64 for float32 inputs), -inf for a row
    that sees no key.
    """
    if scale is not None:  # before the cached path, which skips the other checks
        check_scale(scale)
    if (
        not check_lengths
        and k_new is None
        and v_new is None
        and type(q) is torch.Tensor
        and type(k_cache) is torch.Tensor
        and type(v_cache) is torch.Tensor
        and type(cache_seqlens) is torch.Tensor
        and (out is None or type(out) is torch.Tensor)
        and (key_padding_mask is None or type(key_padding_mask) is torch.Tensor)
        and q.device.type == "cuda"
        and _decode.plain_options(
            window, softcap, num_splits, sinks, q.shape[1] if q.dim() == 4 else 0
        )
        and _decode.consistent(
            q, k_cache, v_cache, cache_seqlens, out, key_padding_mask, block_table
        )
        and (sinks is None or sinks.device == q.device)
    ):
        # Trusted lengths, nothing appended: a call of a signature launched before (same
        # dtypes, devices, alignment, int classes, options) skips the checks.
        dest = new_output(q, q) if out is None else out
        lse = _decode.new_lse(q) if return_lse else None
        capacity = kvcache_capacity(k_cache, block_table)
        done = _decode.launch_decode(
            q,
            k_cache,
            v_cache,
            cache_seqlens,
            0,
            dest,
            key_padding_mask,
            scale,
            window,
            softcap,
            num_splits,
            1,
            capacity,
            False,
            sinks=sinks,
            block_table=block_table,
            lse=lse,
        )
        if done is not None:
            return (done, lse) if return_lse else done

    new_tokens = check_kvcache_inputs(
        q, k_cache, v_cache, cache_seqlens, k_new, v_new, out, block_table
    )
    check_window(window, True)
    check_softcap(softcap)
    sinks = check_sinks(sinks, q)
    batch, num_q_heads, seqlen_new, head_dim = q.shape
    capacity = kvcache_capacity(k_cache, block_table)
    _decode.check_key_mask(key_padding_mask, q, capacity, paged=block_table is not None)
    max_keys = capacity
    if check_lengths and batch > 0:
        max_keys = check_cache_lengths(
            cache_seqlens, seqlen_new if new_tokens else 0, k_cache, block_table
        )
    if new_tokens:
        _decode.append_to_cache(k_cache, v_cache, cache_seqlens, k_new, v_new, block_table)

    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = _decode.new_lse(q) if return_lse else None
    if out.numel() == 0:  # no rows: lse is empty too
        return (out, lse) if return_lse else out
    out = _decode.launch_decode(
        q,
        k_cache,
        v_cache,
        cache_seqlens,
        0,
        out,
        key_padding_mask,
        scale,
        window,
        softcap,
        num_splits,
        # Without new tokens the queries are the last Sn cached positions.
        0 if new_tokens else 1,
        max_keys,
        True,
        sinks=sinks,
        block_table=block_table,
        lse=lse,
    )
    return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------- fp8


def quantize_fp8(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, variant: str, *, rotation_seed: int = 0
) -> _fp8.Fp8Inputs:
    """Quantize (B, H, S, D) q, k, v to e4m3 with the named recipe: ``"naive"`` (no scale),
    ``"per_tensor"``, ``"per_block"`` (one scale per 128 rows of q / k, per channel of v) or
    ``"per_block_hadamard"`` (per block after a random Hadamard rotation of q and k, which
    spreads outlier channels; the default recipe of notebook 04). kernels/fp8.py's
    docstring says why each exists.

    Shapes and GQA as :func:`attention`; head_dim in {32, 64, 128, 256}. The scales are
    computed in float32 from the inputs; the attention's output dtype is q's. Raises
    ValueError for an unknown variant or head dim, as :func:`attention` for bad inputs."""
    return _fp8.quantize(q, k, v, variant, rotation_seed=rotation_seed)


def fp8_attention(
    x: _fp8.Fp8Inputs,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    config: dict | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale [+ top-left causal mask]) v on quantized inputs.

    Returns ``(B, Hq, Sq, D)`` in ``x.out_dtype``. CUDA (sm_89+) or the Triton interpreter
    on CPU. On Hopper, ``flashcore.dispatch.fp8_kernel`` picks the Gluon forward's FP8 mode
    where it was measured faster (``FP8_GLUON_FROM``), else kernels/fp8.py's Triton kernel runs.
    ``config`` (the Triton kernel's launch: BLOCK_M, BLOCK_N in {16, 32, 64, 128}, num_warps,
    num_stages, USE_TMA) forces the Triton kernel. Not supported: bottom-right alignment,
    windows, lse.
    """
    if not isinstance(x, _fp8.Fp8Inputs):
        raise TypeError(f"expected Fp8Inputs from flashcore.quantize_fp8, got {type(x).__name__}")
    q8 = x.q8
    if q8.device.type == "cuda" and torch.cuda.get_device_capability(q8.device.index) < (8, 9):
        raise RuntimeError("fp8 tensor-core dots need sm_89 or newer")
    if out is None:
        out = torch.empty(q8.shape, dtype=x.out_dtype, device=q8.device)
    elif out.shape != q8.shape or out.dtype != x.out_dtype or out.device != q8.device:
        raise ValueError(f"expected out of shape {tuple(q8.shape)}, {x.out_dtype}, {q8.device}")
    if out.numel() == 0 or x.seqlen_k == 0:
        return out.zero_()
    if config is not None and (
        _fp8.QUANT_BLOCK % config["BLOCK_M"] or _fp8.QUANT_BLOCK % config["BLOCK_N"]
    ):
        raise ValueError(
            f"BLOCK_M and BLOCK_N must divide the quantization block {_fp8.QUANT_BLOCK}"
        )
    check_scale(scale)
    scale = 1.0 / math.sqrt(q8.shape[3]) if scale is None else scale
    if config is None and fp8_kernel(x, causal=causal) == "gluon":
        _hopper.attention_hopper_fp8(x, out, causal=causal, scale=scale)
    else:
        _fp8.launch_fp8(x, out, causal=causal, scale=scale, config=config)
    return out
