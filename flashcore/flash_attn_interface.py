"""FlashAttention's Python API on flashcore's kernels, for code written against ``flash_attn``.

    from flashcore import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

The three functions take FlashAttention's layouts, argument names and return conventions
and call ``flashcore.attention``, ``flashcore.attention_varlen`` and
``flashcore.attention_with_kvcache``. Nothing is copied: a ``(B, S, H, D)`` tensor is handed
over as its ``(B, H, S, D)`` transposed view (flashcore accepts any strides), and the output
is written straight into FlashAttention's ``(B, S, H, D)`` layout.

Argument mapping (FlashAttention -> flashcore):

=============================  =============================================================
FlashAttention                 flashcore
=============================  =============================================================
q, k, v ``(B, S, H, D)``       ``q.transpose(1, 2)`` ... ``(B, H, S, D)`` views
varlen q/k/v ``(total, H, D)`` the same tensors (attention_varlen's layout is FA's)
k_cache, v_cache               ``(B, S_cache, Hkv, D)`` -> transposed views, appended in place
k, v (kvcache)                 ``k_new``, ``v_new`` (transposed views)
cache_seqlens (int or (B,))    ``cache_seqlens`` (an int becomes a (B,) int32 tensor)
softmax_scale                  ``scale`` (None: 1 / sqrt(D), as FA)
causal                         ``causal=True, causal_alignment="bottom_right"`` (FA's
                               alignment: query i sees keys j <= i + Sk - Sq)
window_size=(left, right)      ``right == 0`` (or causal): ``causal=True, window=left + 1``
                               (flashcore's window counts the keys a query sees, itself
                               included); ``(-1, -1)``/``(None, None)``: no window
softcap (0.0 = off)            ``softcap`` (None when 0.0)
num_splits (kvcache, 0 = auto) ``num_splits`` (None when 0)
deterministic                  accepted: flashcore's backward is always deterministic
return_attn_probs (FA2)        ``(out, softmax_lse, S_dmask)`` with an empty S_dmask, what FA2
                               returns without dropout (dense only)
return_lse (FA4, keyword)      ``(out, softmax_lse)`` (dense only)
pack_gqa, sm_margin,           accepted and ignored: FA3/FA4 performance knobs that do not
scheduler_metadata, num_splits change the result
(dense/varlen)
=============================  =============================================================

``softmax_lse`` is FA's: ``(B, Hq, Sq)`` float32, the natural-log log-sum-exp of each row's
scaled scores (flashcore's float64 lse of float32 inputs is rounded to float32).

Windows: FA's ``window_size=(left, right)`` lets query i see keys
``[i + Sk - Sq - left, i + Sk - Sq + right]`` (-1 or None: unbounded). flashcore computes
the causal ones (``right == 0``, or ``causal=True``, which sets right to 0 as FA does), and
bounds that cannot bind at these lengths (``right >= Sq - 1``, ``left >= Sk - 1``) are
dropped first, so ``(-1, big)`` is full attention. Any other window (a non-causal local
window, ``right > 0`` that binds, a left bound without a right one) raises.

Raises (before anything is computed or written; the KV cache is left untouched):
NotImplementedError naming the argument for what flashcore does not have: ``dropout_p != 0``,
``alibi_slopes``, non-causal windows, ``learnable_sink``, ``qv``, FP8 descales,
``attention_chunk``, ``block_table``/``page_table`` on the varlen path (paged KV is
``flash_attn_with_kvcache``'s), ``seqused_q``/``seqused_k``, ``rotary_cos``/``rotary_sin``,
``cache_batch_idx``, ``cache_leftpad``, ``return_lse`` / ``return_attn_probs`` on the varlen
path (it does not return the lse yet), ``causal=False`` with several queries per sequence
on the KV-cache path (flashcore's KV-cache attention is causal). ``flash_attn_varlen_func``
takes gradients through ``attention_varlen``'s autograd. ValueError/TypeError for
malformed values (negative softcap, a window_size that is not a pair, ...). flashcore's own
checks (dtypes, devices, GQA head counts, head dims up to 256, lengths) run after these.

Differentiable: ``flash_attn_func`` goes through ``flashcore.attention``'s autograd, which
raises for an option whose gradient it does not compute. With inputs that require grad its
output is the ``(B, S, H, D)`` transposed view of flashcore's ``(B, H, S, D)`` result, not a
contiguous tensor (use ``reshape``, not ``view``); without grad it is contiguous, as FA's.
"""

from __future__ import annotations

import numbers

import torch

import flashcore

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"]


def _refuse(fn: str, name: str, value, why: str) -> None:
    raise NotImplementedError(f"{fn}: {name}={_show(value)} is not supported by flashcore ({why})")


def _show(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor of shape {tuple(value.shape)}>"
    return repr(value)


def _refuse_set(fn: str, **options) -> None:
    """Raise for the first option that is set (not None); ``options`` maps an argument name
    to ``(value, why)``."""
    for name, (value, why) in options.items():
        if value is not None:
            _refuse(fn, name, value, why)


def _check_common(fn, *, dropout_p, alibi_slopes, learnable_sink, qv, descales, attention_chunk):
    if (
        dropout_p == 0.0
        and alibi_slopes is None
        and learnable_sink is None
        and qv is None
        and not attention_chunk
        and all(value is None for value in descales.values())
    ):
        return  # the common call: nothing set that flashcore lacks
    if dropout_p != 0.0:
        _refuse(fn, "dropout_p", dropout_p, "flashcore has no dropout; pass dropout_p=0.0")
    _refuse_set(
        fn,
        alibi_slopes=(alibi_slopes, "no ALiBi bias"),
        learnable_sink=(learnable_sink, "attention sinks are not built yet"),
        qv=(qv, "no extra query-value product"),
    )
    for name, value in descales.items():
        if value is not None:
            _refuse(fn, name, value, "no FP8 inputs on this path; see flashcore.fp8_attention")
    if attention_chunk not in (0, None):
        _refuse(fn, "attention_chunk", attention_chunk, "no chunked attention masks")


def _bound(fn: str, value, side: str):
    """One side of FA's window_size: None for unbounded (FA2/FA3 write -1, FA4 None)."""
    if value is None:
        return None
    if type(value) is int:  # the common case, before the slower abstract-class check
        return None if value < 0 else value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{fn}: expected window_size {side} to be an int or None, got {type(value).__name__}"
        )
    return None if value < 0 else int(value)


def _mask(fn: str, causal, window_size, seqlen_q: int, seqlen_k: int):
    """FA's (causal, window_size) -> flashcore's (causal, window), bottom-right aligned.

    ``seqlen_q``/``seqlen_k``: the longest query / key length the call can have, used only
    to drop bounds that cannot bind (a bound is dropped only when it excludes no key for any
    query of any sequence up to these lengths)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(
            f"{fn}: expected window_size to be a pair (left, right), got {window_size!r}"
        )
    left = _bound(fn, window_size[0], "left")
    right = _bound(fn, window_size[1], "right")
    if causal:
        right = 0  # as FA: causal sets the right bound to the diagonal
    # Query i sees keys i + Sk - Sq - left <= j <= i + Sk - Sq + right. The right bound
    # excludes nothing when even the first query reaches the last key (right >= Sq - 1); the
    # left bound excludes nothing when even the last query reaches key 0 (left >= Sk - 1).
    if right is not None and right >= seqlen_q - 1:
        right = None
    if left is not None and left >= seqlen_k - 1:
        left = None
    if right is None and left is not None and seqlen_q <= 1:
        right = 0  # one query per sequence: a causal bound would exclude nothing either
    if right is None and left is None:
        return False, None
    if right == 0:
        return True, None if left is None else left + 1
    raise NotImplementedError(
        f"{fn}: window_size={tuple(window_size)!r} with causal={bool(causal)} is not supported by "
        "flashcore (it computes causal sliding windows: window_size=(left, 0) or causal=True; "
        "a non-causal local window or a right bound above 0 is not built)"
    )


def _softcap(fn: str, softcap):
    if softcap is None or (type(softcap) is float and softcap == 0.0):
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"{fn}: expected softcap to be a float, got {type(softcap).__name__}")
    if softcap < 0:
        raise ValueError(f"{fn}: expected softcap >= 0 (0.0 is off), got {softcap}")
    return None if softcap == 0 else float(softcap)


def _check_rank(fn: str, rank: int, layout: str, **tensors) -> None:
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: expected {name} to be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise ValueError(f"{fn}: expected {name} to be {rank}-D {layout}, got {t.dim()}-D")


def _table_width(fn: str, table) -> int:
    """max_pages_per_seq of a block table (flashcore's checks say what else is wrong)."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        got = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"{fn}: expected block_table of shape (B, max_pages_per_seq), got {got}")
    return table.shape[1]


def _new_output(q: torch.Tensor) -> torch.Tensor:
    """The output buffer, in q's (FA's) layout; one place, so tests can poison it."""
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _fa_lse(lse: torch.Tensor) -> torch.Tensor:
    # FA's softmax_lse is float32; flashcore keeps a float64 lse for float32 inputs.
    return lse if lse.dtype == torch.float32 else lse.float()


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_lse=False,
    learnable_sink=None,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    attention_chunk=0,
    num_splits=1,
    pack_gqa=None,
    sm_margin=0,
):
    """``flash_attn.flash_attn_func`` on ``flashcore.attention``.

    Args (FA2's positional order; FA3/FA4-only options are keyword-only):
        q: ``(B, Sq, Hq, D)``; k, v: ``(B, Sk, Hkv, D)``, Hq a multiple of Hkv (GQA/MQA).
            Any strides. Dtypes as ``flashcore.attention`` (float16/bfloat16/float32 on
            CUDA; float16/float32 on CPU under the Triton interpreter).
        dropout_p: must be 0.0 (raises otherwise).
        softmax_scale: default ``1 / sqrt(D)``; finite and >= 0, as flashcore.attention.
        causal: bottom-right aligned causal mask (FA's convention).
        window_size: ``(left, right)``; see the module docstring for what is computed.
        softcap: ``> 0`` caps the scaled scores at ``softcap * tanh(s / softcap)``; 0.0 off.
        alibi_slopes: must be None.
        deterministic: accepted; flashcore's backward is deterministic either way.
        return_attn_probs: FA2's: return ``(out, softmax_lse, S_dmask)``; S_dmask is an
            empty tensor, what FA2 returns without dropout.
        return_lse: FA4's: return ``(out, softmax_lse)``.
        learnable_sink, qv, q_descale, k_descale, v_descale, attention_chunk: must be unset.
        num_splits, pack_gqa, sm_margin: ignored (FA3/FA4 performance knobs).

    Returns ``out`` ``(B, Sq, Hq, D)`` in q's dtype, or a tuple as above with
    ``softmax_lse`` ``(B, Hq, Sq)`` float32. Differentiable in q, k, v through
    ``flashcore.attention``'s autograd (it raises for options it has no gradient for).
    """
    fn = "flash_attn_func"
    _check_common(
        fn,
        dropout_p=dropout_p,
        alibi_slopes=alibi_slopes,
        learnable_sink=learnable_sink,
        qv=qv,
        descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale},
        attention_chunk=attention_chunk,
    )
    if return_attn_probs and return_lse:
        raise ValueError(f"{fn}: pass return_attn_probs (FA2) or return_lse (FA4), not both")
    _check_rank(fn, 4, "(batch, seqlen, nheads, headdim)", q=q, k=k, v=v)
    is_causal, window = _mask(fn, causal, window_size, q.shape[1], k.shape[1])
    cap = _softcap(fn, softcap)
    want_lse = bool(return_attn_probs or return_lse)
    options = dict(
        causal=is_causal,
        causal_alignment="bottom_right",
        window=window,
        softcap=cap,
        scale=softmax_scale,
        return_lse=want_lse,
    )
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # flashcore's autograd path does not take out=: its (B, H, S, D) result, viewed.
        result = flashcore.attention(qt, kt, vt, **options)
        out_bhsd, lse = result if want_lse else (result, None)
        out = out_bhsd.transpose(1, 2)
    else:
        out = _new_output(q)
        result = flashcore.attention(qt, kt, vt, out=out.transpose(1, 2), **options)
        lse = result[1] if want_lse else None
    if return_attn_probs:
        return out, _fa_lse(lse), torch.empty((0,), dtype=q.dtype, device=q.device)
    if return_lse:
        return out, _fa_lse(lse)
    return out


def _max_seqlen(cu: torch.Tensor) -> int:
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
        return 0  # attention_varlen's own check reports a malformed tensor
    return int((cu[1:] - cu[:-1]).max())


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    return_lse=False,
    seqused_q=None,
    seqused_k=None,
    page_table=None,
    learnable_sink=None,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    attention_chunk=0,
    num_splits=1,
    pack_gqa=None,
    sm_margin=0,
):
    """``flash_attn.flash_attn_varlen_func`` on ``flashcore.attention_varlen`` (forward only).

    Args (FA2's positional order; FA3/FA4-only options are keyword-only):
        q: ``(total_q, Hq, D)``; k, v: ``(total_k, Hkv, D)``: sequences packed along the
            token dimension, sequence b at rows ``cu_seqlens[b]:cu_seqlens[b + 1]``.
        cu_seqlens_q, cu_seqlens_k: ``(B + 1,)`` int32 (or int64) on q's device.
        max_seqlen_q, max_seqlen_k: the longest lengths; None (FA4 allows it) computes them
            from the offsets (one device-to-host copy).
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic:
            as :func:`flash_attn_func`; causal and windows are per sequence, bottom-right.
        return_attn_probs, return_lse: raise (flashcore's varlen kernel does not return the
            log-sum-exp yet).
        block_table / page_table (paged KV), seqused_q, seqused_k, learnable_sink, qv,
        descales, attention_chunk: must be unset.

    Returns ``out`` ``(total_q, Hq, D)`` in q's dtype. Raises RuntimeError for inputs that
    require grad (no varlen backward yet; run under ``torch.no_grad()``).
    """
    fn = "flash_attn_varlen_func"
    _check_common(
        fn,
        dropout_p=dropout_p,
        alibi_slopes=alibi_slopes,
        learnable_sink=learnable_sink,
        qv=qv,
        descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale},
        attention_chunk=attention_chunk,
    )
    _refuse_set(
        fn,
        block_table=(block_table, "paged KV is built for flash_attn_with_kvcache only"),
        page_table=(page_table, "paged KV is built for flash_attn_with_kvcache only"),
        seqused_q=(seqused_q, "no per-sequence used lengths; pass exact cu_seqlens"),
        seqused_k=(seqused_k, "no per-sequence used lengths; pass exact cu_seqlens"),
    )
    for name, value in (("return_attn_probs", return_attn_probs), ("return_lse", return_lse)):
        if value:
            _refuse(fn, name, value, "the varlen kernel does not return the log-sum-exp yet")
    _check_rank(fn, 3, "(total_tokens, nheads, headdim)", q=q, k=k, v=v)
    # Inputs that require grad: attention_varlen's autograd path, which takes no out=.
    differentiable = torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad
    )
    if max_seqlen_q is None:
        max_seqlen_q = _max_seqlen(cu_seqlens_q)
    if max_seqlen_k is None:
        max_seqlen_k = _max_seqlen(cu_seqlens_k)
    is_causal, window = _mask(fn, causal, window_size, max_seqlen_q, max_seqlen_k)
    return flashcore.attention_varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        causal=is_causal,
        causal_alignment="bottom_right",
        window=window,
        softcap=_softcap(fn, softcap),
        scale=softmax_scale,
        out=None if differentiable else _new_output(q),
    )


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    page_table=None,
    qv=None,
    cu_seqlens_q=None,
    cu_seqlens_k_new=None,
    max_seqlen_q=None,
    rotary_seqlens=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    attention_chunk=0,
    scheduler_metadata=None,
    pack_gqa=None,
    sm_margin=0,
    learnable_sink=None,
    check_lengths=True,
):
    """``flash_attn.flash_attn_with_kvcache`` on ``flashcore.attention_with_kvcache``.

    Args (FA2's positional order; FA3-only options are keyword-only):
        q: ``(B, Sq, Hq, D)``: the newest Sq positions' queries.
        k_cache, v_cache: ``(B, S_cache, Hkv, D)``; when k, v are given they are written in
            place at positions ``cache_seqlens[b] + [0, Sq)`` of each sequence. With a block
            table: FA's page pools ``(num_pages, page_size, Hkv, D)``, handed to flashcore
            as ``.transpose(1, 2)`` views (no copy; the appends land in the caller's pages).
        k, v: ``(B, Sq, Hkv, D)`` new keys/values, or both None (then the queries are the
            last Sq of the ``cache_seqlens[b]`` cached positions).
        cache_seqlens: int or ``(B,)`` int32/int64 on q's device: tokens in each cache before
            this call's append. Required with k, v; None without them means the whole cache.
        softmax_scale, window_size, softcap: as :func:`flash_attn_func`.
        causal: with more than one query per sequence it must be True (flashcore's KV-cache
            attention is causal, bottom-right); with one query causal changes nothing.
        num_splits: split-KV factor, 0 (FA's default) chooses.
        block_table / page_table (FA2-3's name / FA4's; one of them): ``(B,
            max_pages_per_seq)`` int32, the pages of each sequence in order, as
            ``flashcore.attention_with_kvcache``'s block_table (any page size, any order,
            shared pages; page ids checked before anything is written). cache_seqlens None
            then means every sequence holds ``max_pages_per_seq * page_size`` tokens.
        rotary_interleaved, scheduler_metadata, pack_gqa, sm_margin: ignored.
        rotary_cos/rotary_sin, cache_batch_idx, cache_leftpad, alibi_slopes, qv,
        cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, rotary_seqlens,
        descales, attention_chunk, learnable_sink: must be unset.
        return_softmax_lse: also return each row's log-sum-exp, as FA does.

        check_lengths: flashcore's, keyword-only (FA has none): check cache_seqlens (and
            the pages they use) against the cache before anything is written, which costs a
            device-to-host copy that waits for the GPU's queue. Skipped during CUDA graph
            capture, where that copy cannot run (the caller then guarantees the lengths, as
            FA's callers always do); pass False for FA's eager cost under that guarantee.

    Returns ``out`` ``(B, Sq, Hq, D)`` in q's dtype; with ``return_softmax_lse``, ``(out,
    softmax_lse)``, softmax_lse ``(B, Hq, Sq)`` float32 (FA's layout): the natural-log
    log-sum-exp of each row's scaled scores, -inf for a row that sees no key. Everything is
    checked before the cache
    is written: a call that raises leaves it untouched. No backward (as FA).
    """
    fn = "flash_attn_with_kvcache"
    _check_common(
        fn,
        dropout_p=0.0,
        alibi_slopes=alibi_slopes,
        learnable_sink=learnable_sink,
        qv=qv,
        descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale},
        attention_chunk=attention_chunk,
    )
    _refuse_set(
        fn,
        rotary_cos=(rotary_cos, "no fused rotary embedding; apply it to q and k first"),
        rotary_sin=(rotary_sin, "no fused rotary embedding; apply it to q and k first"),
        rotary_seqlens=(rotary_seqlens, "no fused rotary embedding"),
        cache_batch_idx=(cache_batch_idx, "no cache batch indirection"),
        cache_leftpad=(cache_leftpad, "no left-padded caches on this path"),
        cu_seqlens_q=(cu_seqlens_q, "no varlen queries on the KV-cache path"),
        cu_seqlens_k_new=(cu_seqlens_k_new, "no varlen appends on the KV-cache path"),
        max_seqlen_q=(max_seqlen_q, "no varlen queries on the KV-cache path"),
    )
    if block_table is not None and page_table is not None:
        raise ValueError(
            f"{fn}: expected one of block_table (FA2/FA3's name) and page_table (FA4's), got both"
        )
    pages = block_table if block_table is not None else page_table
    if (k is None) != (v is None):
        raise ValueError(f"{fn}: expected k and v to be given together (or both None)")
    news = {} if k is None else {"k": k, "v": v}
    _check_rank(
        fn, 4, "(batch, seqlen, nheads, headdim)", q=q, k_cache=k_cache, v_cache=v_cache, **news
    )
    batch, seqlen_q = q.shape[0], q.shape[1]
    # Paged: (num_pages, page_size, Hkv, D) pools, max_pages_per_seq * page_size positions.
    capacity = k_cache.shape[1] * (1 if pages is None else _table_width(fn, pages))
    is_causal, window = _mask(fn, causal, window_size, seqlen_q, capacity)
    if not is_causal and seqlen_q > 1:
        _refuse(
            fn,
            "causal",
            causal,
            f"with {seqlen_q} queries per sequence: flashcore's KV-cache attention is causal "
            "(bottom-right); pass causal=True, or one query per call",
        )
    cap = _softcap(fn, softcap)
    if (
        isinstance(num_splits, bool)
        or not isinstance(num_splits, numbers.Integral)
        or num_splits < 0
    ):
        raise ValueError(
            f"{fn}: expected num_splits to be an int >= 0 (0: chosen), got {num_splits!r}"
        )
    if cache_seqlens is None:
        if k is not None:
            raise ValueError(f"{fn}: cache_seqlens is required when k and v are given")
        cache_seqlens = torch.full((batch,), capacity, dtype=torch.int32, device=q.device)
    elif isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    out = _new_output(q)
    done = flashcore.attention_with_kvcache(
        q.transpose(1, 2),
        k_cache.transpose(1, 2),
        v_cache.transpose(1, 2),
        cache_seqlens,
        None if k is None else k.transpose(1, 2),
        None if v is None else v.transpose(1, 2),
        block_table=pages,
        scale=softmax_scale,
        window=window,
        softcap=cap,
        num_splits=None if num_splits == 0 else int(num_splits),
        check_lengths=bool(check_lengths)
        and not (q.is_cuda and torch.cuda.is_current_stream_capturing()),
        out=out.transpose(1, 2),
        return_lse=bool(return_softmax_lse),
    )
    return (out, done[1]) if return_softmax_lse else out
