"""flashcore as PyTorch's flash-attention implementation behind ``scaled_dot_product_attention``.

    import flashcore.sdpa_backend
    flashcore.sdpa_backend.register()                       # the provider's side
    torch.nn.attention.activate_flash_attention_impl("flashcore")   # the user's opt-in

After activation, every ``F.scaled_dot_product_attention`` call that PyTorch sends to its
flash backend runs flashcore's kernels, forward and backward, with no change to the model.
Calls flashcore cannot serve go to PyTorch's own flash kernel, never to a wrong answer.

How PyTorch's door works (``torch/nn/attention/_registry.py``; FA4 uses it in ``_fa4.py``):
``register_flash_attention_impl(name, register_fn=...)`` stores a callable;
``activate_flash_attention_impl(name)`` calls it, and the callable overrides the CUDA kernels
of the aten ops SDPA's flash backend dispatches to through a ``torch.library.Library("aten",
"IMPL", "CUDA")``, returning a handle whose ``remove()`` takes the overrides away. SDPA still
picks the backend (no mask, fp16/bf16, head dims it accepts, causal only with Sq == Sk, ...)
and still pads the head dim to a multiple of 8 with the scale of the original one; the
override serves ``aten::_scaled_dot_product_flash_attention`` (forward) and
``aten::_scaled_dot_product_flash_attention_backward`` (the backward autograd calls with the
forward's output and log-sum-exp).

Which torch has it: ``register_flash_attention_impl``/``activate_flash_attention_impl`` from
torch 2.10; ``restore_flash_attention_impl`` (undo an activation) from 2.11 (in 2.10 an
activation lasts for the process, and activating another implementation after it fails).
``torch.library.get_kernel``, used to keep PyTorch's own kernel for the fallback, exists in
all of them. :func:`register` raises a RuntimeError saying so on older torch. The mechanism
overrides CUDA kernels only: on a machine without CUDA, registration and activation work but
nothing calls them.

What flashcore serves (:func:`unsupported_reason`, the same decision in forward and
backward): fp16/bf16 4-D ``(B, H, S, D)`` q, k, v with one head dim up to 256 (any strides),
Hq a multiple of Hkv, no dropout, no debug mask, non-empty, causal only with Sq == Sk, and not
a few non-causal queries against a long cache (1 < Sq <= 16, Sk >= 4 Sq: PyTorch's flash kernel
splits the keys there; flashcore's forward kernel does not, and its split-KV kernel takes one
query or causal ones). One query against Sk >= 4 keys runs on flashcore's split-KV decode
kernel, which returns the log-sum-exp too.
Everything else (dropout in training, ``return_debug_mask``, nested/packed inputs, a head dim
of v that differs, ...) is handed to the kernel that was registered before (PyTorch's flash
kernel), with the reason logged at DEBUG level on this module's logger. The backward runs
flashcore's deterministic backward kernel (``kernels/backward.py``).
"""

from __future__ import annotations

import logging
import math
import warnings

import torch

import flashcore

from .ops import DECODE_MAX_QUERIES

NAME = "flashcore"
FORWARD_OP = "_scaled_dot_product_flash_attention"
BACKWARD_OP = "_scaled_dot_product_flash_attention_backward"
FIRST_TORCH = "2.10"  # register/activate_flash_attention_impl; restore_... from 2.11
MAX_HEAD_DIM = 256

_log = logging.getLogger(__name__)
_OUR_NAMES: set[str] = set()


def _registry_api():
    """torch.nn.attention's provider API, or a RuntimeError naming the versions that have it."""
    import torch.nn.attention as attn

    missing = [
        name
        for name in ("register_flash_attention_impl", "current_flash_attention_impl")
        if not hasattr(attn, name)
    ] + [name for name in ("get_kernel",) if not hasattr(torch.library, name)]
    if missing:
        raise RuntimeError(
            f"torch {torch.__version__} has no SDPA flash-attention provider API "
            f"({', '.join(missing)} missing): torch.nn.attention.register_flash_attention_impl "
            f"and activate_flash_attention_impl exist from torch {FIRST_TORCH} "
            "(restore_flash_attention_impl from 2.11). Upgrade torch, or call flashcore.attention "
            "/ flashcore.ops.sdpa directly"
        )
    return attn


def register(name: str = NAME) -> str:
    """Register flashcore with PyTorch as the flash-attention implementation ``name``; the
    user then opts in with ``torch.nn.attention.activate_flash_attention_impl(name)`` (and
    out with ``restore_flash_attention_impl()``, torch >= 2.11). Registering does not
    activate anything. Returns ``name``.

    Raises RuntimeError where the installed torch lacks the API (torch < 2.10)."""
    attn = _registry_api()
    _OUR_NAMES.add(name)
    attn.register_flash_attention_impl(name, register_fn=lambda: install("CUDA"))
    return name


class Handle:
    """What activation returns to PyTorch's registry: keeps the overrides alive until
    ``remove()`` (called by ``restore_flash_attention_impl``)."""

    def __init__(self, library):
        self.library = library

    def remove(self) -> None:
        library, self.library = self.library, None
        if library is not None:
            library._destroy()  # the registrations go away now, not when collected


def install(dispatch_key: str = "CUDA") -> Handle:
    """Override the SDPA flash ops' kernels for ``dispatch_key`` with flashcore's; what
    activation calls (``"CUDA"``). Another key (``"CPU"``) lets the dispatch be tested where
    there is no GPU: the aten ops then run flashcore on CPU tensors under the Triton
    interpreter. The kernels registered before (PyTorch's own) serve what flashcore cannot;
    where there is none (no CUDA build), such a call raises NotImplementedError with the
    reason. Returns the :class:`Handle`; the overrides last while it does."""
    attn = _registry_api()
    active = attn.current_flash_attention_impl()
    if active is not None and active not in _OUR_NAMES:
        raise RuntimeError(
            f"another flash-attention implementation ({active!r}) is active: restore PyTorch's "
            "with torch.nn.attention.restore_flash_attention_impl() (torch >= 2.11) before "
            "activating flashcore; torch 2.10 cannot undo an activation (use a fresh process)"
        )
    previous = {}
    for op in (FORWARD_OP, BACKWARD_OP):
        try:
            previous[op] = torch.library.get_kernel(f"aten::{op}", dispatch_key)
        except RuntimeError:  # no kernel for this key (e.g. CUDA on a CPU-only build)
            previous[op] = None
    library = torch.library.Library("aten", "IMPL", dispatch_key)
    try:
        with warnings.catch_warnings():
            # Replacing PyTorch's kernel is the point; the dispatcher warns about it.
            warnings.filterwarnings("ignore", message=".*[Oo]verrid")
            library.impl(
                FORWARD_OP,
                _forward_kernel(previous[FORWARD_OP], dispatch_key),
                dispatch_key,
                with_keyset=True,
                allow_override=True,
            )
            library.impl(
                BACKWARD_OP,
                _backward_kernel(previous[BACKWARD_OP], dispatch_key),
                dispatch_key,
                with_keyset=True,
                allow_override=True,
            )
    except BaseException:
        library._destroy()
        raise
    return Handle(library)


def unsupported_reason(query, key, value, dropout_p, is_causal, scale=None) -> str | None:
    """Why flashcore does not serve this SDPA flash call (None: it does). The forward and
    the backward decide alike from what both see, so a backward always pairs with its own
    forward's kernel."""
    if dropout_p != 0.0:
        return f"dropout_p={dropout_p} (flashcore has no dropout)"
    if scale is not None and not 0 <= scale < math.inf:
        return f"scale={scale} (flashcore's kernels take a finite scale >= 0)"
    if not (query.dim() == key.dim() == value.dim() == 4):
        return f"inputs of {query.dim()}, {key.dim()}, {value.dim()} dims (nested or packed)"
    if query.is_nested or key.is_nested or value.is_nested:
        return "nested tensors"
    if query.dtype not in (torch.float16, torch.bfloat16) or not (
        query.dtype == key.dtype == value.dtype
    ):
        return f"dtypes {query.dtype}, {key.dtype}, {value.dtype} (the flash op is fp16/bf16)"
    if not (query.device == key.device == value.device):
        return "inputs on different devices"
    batch, num_q_heads, seqlen_q, head_dim = query.shape
    key_batch, num_kv_heads, seqlen_k, key_dim = key.shape
    if value.shape != key.shape or key_batch != batch or key_dim != head_dim:
        return (
            f"shapes q {tuple(query.shape)}, k {tuple(key.shape)}, v {tuple(value.shape)} "
            "(flashcore needs one head dim for q, k, v and one batch)"
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        return f"head dim {head_dim} > {MAX_HEAD_DIM}"
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        return f"{num_q_heads} query heads for {num_kv_heads} key/value heads"
    if query.numel() == 0 or key.numel() == 0:
        return "an empty input"
    if is_causal and seqlen_q != seqlen_k:
        return (
            f"causal with Sq={seqlen_q} != Sk={seqlen_k} (the flash op aligns it bottom-right; "
            "SDPA never sends these)"
        )
    if 1 < seqlen_q <= DECODE_MAX_QUERIES and seqlen_k >= 4 * seqlen_q:
        # One query runs on flashcore's split-KV kernel (flash_forward). A few non-causal
        # ones cannot (its queries are the cache's last positions, causal), and the forward
        # kernel, one program per query tile and head, has at Sq <= 16 the grid it has at
        # Sq 1, where it took 145 us of GPU time at Sk 8K, B1 Hq32/Hkv8 against PyTorch
        # flash's 22 (launch.json, H200, 081dfd2, graph replay): PyTorch's kernel splits.
        return (
            f"{seqlen_q} non-causal queries against {seqlen_k} keys (PyTorch's flash kernel "
            "splits the keys; flashcore's split-KV kernel takes one query, or causal ones)"
        )
    return None


def _decode(query, key) -> bool:
    """One query against a longer cache: flashcore's split-KV kernel (flashcore.ops' rule)."""
    return query.shape[2] == 1 and key.shape[2] >= 4


def _fallback(kernel, op, dispatch_key, reason, keyset, *args, **kwargs):
    _log.debug("flashcore does not serve %s: %s; PyTorch's kernel runs", op, reason)
    if kernel is None:
        raise NotImplementedError(
            f"flashcore cannot serve this aten::{op} call ({reason}) and PyTorch has no "
            f"{dispatch_key} kernel for it to fall back to"
        )
    return kernel.call_boxed(keyset, *args, **kwargs)


def _forward_kernel(previous, dispatch_key):
    def forward(
        keyset,
        query,
        key,
        value,
        dropout_p=0.0,
        is_causal=False,
        return_debug_mask=False,
        *,
        scale=None,
    ):
        reason = unsupported_reason(query, key, value, dropout_p, is_causal, scale)
        if reason is None and return_debug_mask:
            reason = "return_debug_mask=True"
        if reason is not None:
            return _fallback(
                previous,
                FORWARD_OP,
                dispatch_key,
                reason,
                keyset,
                query,
                key,
                value,
                dropout_p,
                is_causal,
                return_debug_mask,
                scale=scale,
            )
        return flash_forward(query, key, value, is_causal=is_causal, scale=scale)

    return forward


def _backward_kernel(previous, dispatch_key):
    def backward(
        keyset,
        grad_out,
        query,
        key,
        value,
        out,
        logsumexp,
        cum_seq_q,
        cum_seq_k,
        max_q,
        max_k,
        dropout_p,
        is_causal,
        philox_seed,
        philox_offset,
        *,
        scale=None,
    ):
        reason = unsupported_reason(query, key, value, dropout_p, is_causal, scale)
        if reason is None and (cum_seq_q is not None or cum_seq_k is not None):
            reason = "packed sequences (cum_seq_q/cum_seq_k)"
        if reason is not None:
            return _fallback(
                previous,
                BACKWARD_OP,
                dispatch_key,
                reason,
                keyset,
                grad_out,
                query,
                key,
                value,
                out,
                logsumexp,
                cum_seq_q,
                cum_seq_k,
                max_q,
                max_k,
                dropout_p,
                is_causal,
                philox_seed,
                philox_offset,
                scale=scale,
            )
        return flash_backward(
            grad_out, query, key, value, out, logsumexp, is_causal=is_causal, scale=scale
        )

    return backward


def _empty_like(t: torch.Tensor) -> torch.Tensor:
    """An output buffer laid out like ``t``; one place, so tests can poison it."""
    return torch.empty_like(t)


# Shape, dtype and device of the forward's three unused outputs, one template each per
# (device, dtype): every call returns fresh tensors made by ``torch.empty_like`` from them
# (as PyTorch's flash kernel allocates its own), which parses one argument where
# ``torch.empty(shape, dtype=, device=)`` parses three: 8.6 us for the three on the H200
# (logs/door_host_profile_7783dda.json). The templates are never returned, read or written.
_UNUSED_TEMPLATES: dict = {}


def _unused_outputs(query):
    """Fresh ``(rng_state (2,) uint64, unused () uint64, debug_mask (0,) q's dtype)``."""
    templates = _UNUSED_TEMPLATES.get((query.device, query.dtype))
    if templates is None:
        device = query.device
        fresh = (
            torch.empty((2,), dtype=torch.uint64, device=device),
            torch.empty((), dtype=torch.uint64, device=device),
            torch.empty((0,), dtype=query.dtype, device=device),
        )
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return fresh  # in a CUDA graph's private pool: never kept past the call
        _UNUSED_TEMPLATES[(device, query.dtype)] = fresh
        return tuple(map(torch.empty_like, fresh))
    return tuple(map(torch.empty_like, templates))


def _attend(query, key, value, out, is_causal, scale):
    """flashcore's kernel for the call into ``out``; returns the log-sum-exp."""
    if _decode(query, key):  # (SDPA's causal needs Sq == Sk: never a decode call)
        from .kernels.decode import attend_full_cache

        return attend_full_cache(query, key, value, scale=scale, return_lse=True, out=out)[1]
    return flashcore.attention(
        query, key, value, causal=bool(is_causal), scale=scale, return_lse=True, out=out
    )[1]


def flash_forward(query, key, value, *, is_causal: bool, scale=None):
    """The override's forward on a call flashcore serves: ``flashcore.attention`` into an
    output laid out like ``query`` (as PyTorch's flash kernel returns it), with the
    ``(B, Hq, Sq)`` float32 log-sum-exp the backward needs. Returns the op's nine outputs:
    ``(out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, rng_state, unused, debug_mask)``
    (no packed sequences, no dropout state, an empty debug mask)."""
    out = _empty_like(query)
    # Below autograd the inputs may still require grad: flashcore must not build a graph.
    with torch.no_grad():
        lse = _attend(query, key, value, out, is_causal, scale)
    return (out, lse, None, None, query.shape[2], key.shape[2], *_unused_outputs(query))


def flash_backward(grad_out, query, key, value, out, logsumexp, *, is_causal: bool, scale=None):
    """The override's backward: flashcore's backward kernel from the forward's ``out`` and
    ``logsumexp``; gradients laid out like their inputs. Returns ``(dq, dk, dv)``."""
    from .kernels.backward import attention_backward

    dq, dk, dv = (_empty_like(t) for t in (query, key, value))
    with torch.no_grad():
        attention_backward(
            grad_out,
            query,
            key,
            value,
            out,
            logsumexp,
            causal=bool(is_causal),
            scale=scale,
            dq=dq,
            dk=dk,
            dv=dv,
        )
    return dq, dk, dv
