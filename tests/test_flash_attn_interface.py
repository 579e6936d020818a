"""The flash_attn door (flashcore.flash_attn_interface) against the float64 references, under
the error rule, in FlashAttention's layouts; outputs poisoned with NaN before the kernels run.

Every unsupported argument must raise before anything is written: the KV cache is compared
bit for bit with its copy taken before the call (a copy, not arithmetic: nothing may change)."""

import math

import pytest
import torch
from conftest import DEVICE

import flashcore
from flashcore import flash_attn_interface as fai
from flashcore.reference import (
    attention_reference,
    expand_kv_heads,
    kvcache_reference,
    varlen_reference,
)
from flashcore.validate import error_rule
from flashcore.validate_backward import (
    GRADIENTS,
    cancellation_magnitudes,
    gradient_rule,
    reference_gradients,
)

# KV-cache attention on CUDA takes fp16/bf16 only (flashcore raises for float32 there).
CACHE_FP32 = torch.float32 if DEVICE == "cpu" else torch.bfloat16


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """Every output the door allocates starts as NaN: an element never written fails."""
    monkeypatch.setattr(
        fai,
        "_new_output",
        lambda q: torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device),
    )


def _randn(*shape, dtype, gen):
    return torch.randn(*shape, generator=gen).to(device=DEVICE, dtype=dtype)


def _bshd(batch, seqlen_q, seqlen_k, hq, hkv, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (
        _randn(batch, seqlen_q, hq, d, dtype=dtype, gen=gen),
        _randn(batch, seqlen_k, hkv, d, dtype=dtype, gen=gen),
        _randn(batch, seqlen_k, hkv, d, dtype=dtype, gen=gen),
    )


def _bhsd(*tensors):
    return tuple(t.transpose(1, 2) for t in tensors)


def _rule(out, q, k, v, **kwargs):
    """The error rule for a (B, H, S, D) output against attention_reference(**kwargs)."""
    ref = attention_reference(q, k, v, **kwargs)
    same = attention_reference(q, k, v, compute_dtype=q.dtype, **kwargs)
    return error_rule(out, ref, same)


def _fa_mask(seqlen_q, seqlen_k, causal, window_size):
    """FlashAttention's mask, written from its docstring: query i sees keys
    i + Sk - Sq - left <= j <= i + Sk - Sq + right (-1/None: unbounded; causal: right = 0)."""
    left, right = (None if w is None or w < 0 else w for w in window_size)
    if causal:
        right = 0
    diagonal = torch.arange(seqlen_q)[:, None] + seqlen_k - seqlen_q
    keys = torch.arange(seqlen_k)[None, :]
    mask = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    if left is not None:
        mask &= keys >= diagonal - left
    if right is not None:
        mask &= keys <= diagonal + right
    return mask.to(DEVICE)


def _fa_reference(q, k, v, mask, *, scale=None, softcap=0.0, dtype=torch.float64):
    """softmax(q k^T * scale [capped], masked) v for FA-layout inputs, every operation in
    ``dtype``; rows that see no key are zeros (as FA). Returns (B, Hq, Sq, D)."""
    qb, kb, vb = (t.transpose(1, 2).to(dtype) for t in (q, k, v))
    kb, vb = expand_kv_heads(kb, qb.shape[1]), expand_kv_heads(vb, qb.shape[1])
    scores = qb @ kb.transpose(-1, -2) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    sees = mask.any(-1)[:, None]
    probs = torch.softmax(scores.masked_fill(~sees, 0.0), -1) * sees
    return probs @ vb


def _fa_lse(q, k, v, mask, *, softcap=0.0, dtype=torch.float64):
    """The natural-log log-sum-exp of each row's masked scaled scores, (B, Hq, Sq)."""
    qb, kb = (t.transpose(1, 2).to(dtype) for t in (q, k))
    kb = expand_kv_heads(kb, qb.shape[1])
    scores = qb @ kb.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    return torch.logsumexp(scores.masked_fill(~mask, float("-inf")), -1)


# --------------------------------------------------------------------------- dense

# (Sq, Sk, Hq, Hkv, D, dtype, causal, window_size, softcap) -> flashcore's (causal, window).
DENSE_CASES = [
    (1, 1, 2, 2, 16, torch.float16, False, (-1, -1), 0.0),
    (17, 17, 4, 2, 32, torch.float16, True, (-1, -1), 0.0),
    (65, 65, 2, 1, 16, torch.float32, False, (-1, -1), 0.0),
    (17, 65, 4, 2, 16, torch.float16, True, (-1, -1), 0.0),  # bottom-right, Sq < Sk
    (65, 17, 2, 2, 32, torch.float32, True, (-1, -1), 0.0),  # bottom-right, Sq > Sk
    (65, 65, 4, 2, 16, torch.float16, False, (7, 0), 0.0),  # right == 0: causal window
    (17, 65, 2, 1, 32, torch.float32, True, (20, 20), 0.0),  # causal drops the right bound
    (65, 65, 2, 2, 16, torch.float16, True, (None, None), 15.0),  # FA4's None, softcap
    (1, 65, 4, 2, 16, torch.float32, False, (5, -1), 0.0),  # one query: a left bound works
    (17, 17, 2, 2, 40, torch.float16, False, (-1, -1), 4.0),  # D not a power of two
    (17, 17, 2, 2, 16, torch.float32, True, (15, 0), 0.0),  # left = Sk - 2 still binds
]


def _dense_id(case):
    sq, sk, hq, hkv, d, dtype, causal, window, cap = case
    name = str(dtype).replace("torch.", "")
    return f"S{sq}x{sk}-H{hq}/{hkv}-D{d}-{name}-causal{int(causal)}-w{window}-cap{cap}"


@pytest.mark.parametrize("case", DENSE_CASES, ids=_dense_id)
def test_flash_attn_func_matches_reference(case):
    sq, sk, hq, hkv, d, dtype, causal, window_size, softcap = case
    q, k, v = _bshd(2, sq, sk, hq, hkv, d, dtype, seed=sq * 31 + sk + hq)
    out = flashcore.flash_attn_func(
        q, k, v, causal=causal, window_size=window_size, softcap=softcap
    )
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    mask = _fa_mask(sq, sk, causal, window_size)
    ref = _fa_reference(q, k, v, mask, softcap=softcap)
    same = _fa_reference(q, k, v, mask, softcap=softcap, dtype=dtype)
    report = error_rule(out.transpose(1, 2), ref, same)
    assert report.passed, report


def test_flash_attn_func_passes_views_not_copies(monkeypatch):
    """The door hands flashcore transposed views of the caller's tensors (no copy) and an
    output that is FA's layout in memory."""
    q, k, v = _bshd(1, 17, 17, 2, 2, 16, torch.float16, seed=5)
    seen = {}
    real = flashcore.attention

    def spy(qt, kt, vt, **kwargs):
        seen.update(q=qt, k=kt, v=vt, out=kwargs.get("out"))
        return real(qt, kt, vt, **kwargs)

    monkeypatch.setattr(flashcore, "attention", spy)
    out = flashcore.flash_attn_func(q, k, v, causal=True)
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert seen[name].data_ptr() == t.data_ptr() and seen[name].shape == t.transpose(1, 2).shape
    assert seen["out"].data_ptr() == out.data_ptr()


def test_window_bounds_that_cannot_bind_are_dropped():
    """(-1, Sq - 1) excludes no key: full attention; (-1, Sq - 2) does and is refused;
    a left bound of Sk - 1 with causal is plain causal."""
    q, k, v = _bshd(1, 17, 33, 2, 2, 16, torch.float32, seed=9)
    out = flashcore.flash_attn_func(q, k, v, window_size=(-1, 16))
    assert _rule(out.transpose(1, 2), *_bhsd(q, k, v)).passed
    with pytest.raises(NotImplementedError, match="window_size"):
        flashcore.flash_attn_func(q, k, v, window_size=(-1, 15))
    out = flashcore.flash_attn_func(q, k, v, causal=True, window_size=(32, 0))
    report = _rule(
        out.transpose(1, 2), *_bhsd(q, k, v), causal=True, causal_alignment="bottom_right"
    )
    assert report.passed


@pytest.mark.parametrize(
    "causal, window_size, sq, sk, expected",
    [
        (False, (-1, -1), 17, 17, (False, None)),
        (False, (None, None), 17, 17, (False, None)),
        (True, (-1, -1), 17, 17, (True, None)),
        (False, (-1, 0), 17, 17, (True, None)),  # FA: right == 0 without left is causal
        (False, (4, 0), 17, 17, (True, 5)),  # flashcore's window counts the query itself
        (True, (4, 9), 17, 17, (True, 5)),  # causal sets right to 0
        (True, (0, 0), 17, 17, (True, 1)),
        (True, (16, 0), 17, 17, (True, None)),  # left >= Sk - 1 excludes nothing
        (True, (15, 0), 17, 17, (True, 16)),  # left = Sk - 2 excludes key 0 for the last query
        (False, (-1, 16), 17, 65, (False, None)),  # right >= Sq - 1 excludes nothing
        (False, (6, -1), 1, 65, (True, 7)),
    ],
)
def test_window_size_mapping(causal, window_size, sq, sk, expected):
    assert fai._mask("f", causal, window_size, sq, sk) == expected


@pytest.mark.parametrize("window_size", [(3, -1), (2, 3), (-1, 5), (None, 1)])
def test_non_causal_windows_raise(window_size):
    with pytest.raises(NotImplementedError, match=r"window_size"):
        fai._mask("flash_attn_func", False, window_size, 17, 17)


@pytest.mark.parametrize("bad", [(3,), 5, "(-1, -1)", (1.5, 0)])
def test_malformed_window_size_raises(bad):
    with pytest.raises((ValueError, TypeError), match="window_size"):
        fai._mask("flash_attn_func", True, bad, 17, 17)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_lse_conventions(dtype):
    """FA4's return_lse: (out, lse); FA2's return_attn_probs: (out, lse, empty S_dmask).
    lse is (B, Hq, Sq) float32 (FA's dtype, also for float32 inputs), the natural-log
    log-sum-exp of the scaled scores, under the rule against float64 (baseline: the same
    logsumexp in float32, the lse's own precision)."""
    q, k, v = _bshd(2, 17, 65, 4, 2, 16, dtype, seed=3)
    kwargs = dict(causal=True, causal_alignment="bottom_right", scale=0.3, window=9)
    qb, kb, vb = _bhsd(q, k, v)
    _, ref = attention_reference(qb, kb, vb, return_lse=True, **kwargs)
    _, same = attention_reference(
        qb, kb, vb, return_lse=True, compute_dtype=torch.float32, **kwargs
    )
    out, lse = flashcore.flash_attn_func(
        q, k, v, softmax_scale=0.3, causal=True, window_size=(8, 0), return_lse=True
    )
    assert lse.shape == (2, 4, 17) and lse.dtype == torch.float32
    assert error_rule(lse, ref, same).passed
    out2, lse2, s_dmask = flashcore.flash_attn_func(
        q, k, v, softmax_scale=0.3, causal=True, window_size=(8, 0), return_attn_probs=True
    )
    assert s_dmask.numel() == 0
    assert error_rule(lse2, ref, same).passed
    assert _rule(out2.transpose(1, 2), qb, kb, vb, **kwargs).passed
    with pytest.raises(ValueError, match="not both"):
        flashcore.flash_attn_func(q, k, v, return_attn_probs=True, return_lse=True)


@pytest.mark.parametrize(
    "sq, sk, hq, hkv, d, dtype, window_size",
    [
        (17, 65, 4, 2, 16, torch.float32, (-1, -1)),
        (65, 65, 2, 1, 32, torch.float16, (12, 0)),
    ],
)
def test_flash_attn_func_gradients(sq, sk, hq, hkv, d, dtype, window_size):
    """Through flashcore.attention's autograd: dq, dk, dv in FA's layout under the gradient
    rule against float64 autograd (causal, bottom-right, GQA)."""
    q, k, v = _bshd(1, sq, sk, hq, hkv, d, dtype, seed=sq + d)
    gen = torch.Generator().manual_seed(77)
    do = _randn(1, sq, hq, d, dtype=dtype, gen=gen)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flashcore.flash_attn_func(*leaves, causal=True, window_size=window_size)
    out.backward(do)
    grads = [t.grad.transpose(1, 2) for t in leaves]
    left = window_size[0]
    kwargs = dict(
        causal=True, causal_alignment="bottom_right", window=None if left < 0 else left + 1
    )
    args = (*_bhsd(q, k, v), do.transpose(1, 2))
    ref64 = reference_gradients(*args, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(*args, compute_dtype=dtype, **kwargs)
    reports = gradient_rule(grads, ref64, same, cancellation_magnitudes(*args, **kwargs))
    assert all(reports[g].passed for g in GRADIENTS), {g: reports[g].ratio for g in GRADIENTS}


def test_softcap_with_grad_goes_through_flashcore_autograd(monkeypatch):
    """Inputs that require grad reach flashcore.attention's autograd path (no out=) with the
    softcap: whether it has that gradient is flashcore.attention's answer, not the door's."""
    q, k, v = (t.requires_grad_() for t in _bshd(1, 17, 17, 2, 2, 16, torch.float32, seed=1))
    seen = {}

    class Stop(Exception):
        pass

    def spy(qt, kt, vt, **kwargs):
        seen.update(kwargs, requires_grad=qt.requires_grad)
        raise Stop

    monkeypatch.setattr(flashcore, "attention", spy)
    with pytest.raises(Stop):
        flashcore.flash_attn_func(q, k, v, softcap=5.0)
    assert seen["softcap"] == 5.0 and seen["requires_grad"] and "out" not in seen


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dropout_p=0.1), "dropout_p"),
        (dict(alibi_slopes=torch.ones(2)), "alibi_slopes"),
        (dict(learnable_sink=torch.zeros(2)), "learnable_sink"),
        (dict(q_descale=torch.ones(1)), "q_descale"),
        (dict(attention_chunk=64), "attention_chunk"),
        (dict(window_size=(4, 4)), "window_size"),
        (dict(softcap=-1.0), "softcap"),
    ],
)
def test_flash_attn_func_unsupported_arguments_raise(kwargs, match):
    q, k, v = _bshd(1, 17, 17, 2, 2, 16, torch.float16, seed=2)
    with pytest.raises((NotImplementedError, ValueError), match=match):
        flashcore.flash_attn_func(q, k, v, **kwargs)


def test_flash_attn_func_rejects_flashcore_layout():
    q, k, v = _bshd(1, 17, 17, 2, 2, 16, torch.float16, seed=2)
    with pytest.raises(ValueError, match=r"4-D \(batch, seqlen, nheads, headdim\)"):
        flashcore.flash_attn_func(q[0], k[0], v[0])


# --------------------------------------------------------------------------- varlen

VARLEN_CASES = [
    # lens_q, lens_k, hq, hkv, d, dtype, causal, window_size, softcap
    ([1, 17, 65], [1, 17, 65], 2, 2, 16, torch.float16, True, (-1, -1), 0.0),
    ([17, 1, 0, 40], [65, 33, 5, 40], 4, 2, 32, torch.float32, True, (9, 0), 0.0),
    ([5, 17], [65, 17], 2, 1, 16, torch.float16, False, (-1, -1), 8.0),
]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: str(c[0]))
@pytest.mark.parametrize("give_max_seqlen", [True, False])
def test_flash_attn_varlen_func_matches_reference(case, give_max_seqlen):
    lens_q, lens_k, hq, hkv, d, dtype, causal, window_size, softcap = case
    gen = torch.Generator().manual_seed(sum(lens_q) + d)
    q = _randn(sum(lens_q), hq, d, dtype=dtype, gen=gen)
    k = _randn(sum(lens_k), hkv, d, dtype=dtype, gen=gen)
    v = _randn(sum(lens_k), hkv, d, dtype=dtype, gen=gen)
    cu_q, cu_k = (
        torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
        for lens in (lens_q, lens_k)
    )
    maxes = (max(lens_q), max(lens_k)) if give_max_seqlen else (None, None)
    out = flashcore.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, *maxes, causal=causal, window_size=window_size, softcap=softcap
    )
    left = window_size[0]
    kwargs = dict(
        causal=causal,
        causal_alignment="bottom_right",
        window=None if left < 0 else left + 1,
        softcap=softcap or None,
    )
    ref = varlen_reference(q, k, v, cu_q, cu_k, **kwargs)
    same = varlen_reference(q, k, v, cu_q, cu_k, compute_dtype=dtype, **kwargs)
    report = error_rule(out, ref, same)
    assert report.passed, report


def _packed(dtype=torch.float16, requires_grad=False):
    gen = torch.Generator().manual_seed(4)
    q, k, v = (_randn(22, 2, 16, dtype=dtype, gen=gen) for _ in range(3))
    cu = torch.tensor([0, 5, 22], dtype=torch.int32, device=DEVICE)
    if requires_grad:
        q.requires_grad_()
    return q, k, v, cu


def test_flash_attn_varlen_func_gradients_are_attention_varlens():
    """The door maps onto attention_varlen's autograd (whose gradients the varlen backward
    tests check against float64): the same gradients, bit for bit."""
    q, k, v, cu = _packed(dtype=torch.float32 if DEVICE == "cpu" else torch.float16)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to(q)
    grads = []
    for call in (
        lambda *t: flashcore.flash_attn_varlen_func(*t, cu, cu, 17, 17, causal=True),
        lambda *t: flashcore.attention_varlen(*t, cu, cu, 17, 17, causal=True),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        call(*leaves).backward(do)
        grads.append([t.grad for t in leaves])
    assert all(torch.isfinite(g).all() and g.abs().max() > 0 for g in grads[0])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(return_lse=True), "return_lse"),
        (dict(return_attn_probs=True), "return_attn_probs"),
        (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table"),
        (dict(page_table=torch.zeros(2, 1, dtype=torch.int32)), "page_table"),
        (dict(seqused_k=torch.ones(2, dtype=torch.int32)), "seqused_k"),
        (dict(dropout_p=0.5), "dropout_p"),
        (dict(window_size=(3, 2)), "window_size"),
    ],
)
def test_flash_attn_varlen_func_unsupported_arguments_raise(kwargs, match):
    q, k, v, cu = _packed()
    with pytest.raises(NotImplementedError, match=match):
        flashcore.flash_attn_varlen_func(q, k, v, cu, cu, 17, 17, **kwargs)


# -------------------------------------------------------------------------- KV cache


def _cache_inputs(seqlen_new, dtype=torch.float16, capacity=80, lengths=(17, 64), seed=0):
    gen = torch.Generator().manual_seed(seed)
    batch, hq, hkv, d = len(lengths), 4, 2, 16
    k_cache = _randn(batch, capacity, hkv, d, dtype=dtype, gen=gen)
    v_cache = _randn(batch, capacity, hkv, d, dtype=dtype, gen=gen)
    q = _randn(batch, seqlen_new, hq, d, dtype=dtype, gen=gen)
    k_new = _randn(batch, seqlen_new, hkv, d, dtype=dtype, gen=gen)
    v_new = _randn(batch, seqlen_new, hkv, d, dtype=dtype, gen=gen)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    return q, k_cache, v_cache, k_new, v_new, seqlens


@pytest.mark.parametrize(
    "seqlen_new, dtype, window_size, softcap",
    [
        (1, torch.float16, (-1, -1), 0.0),
        (3, CACHE_FP32, (-1, -1), 0.0),
        (3, torch.float16, (6, 0), 0.0),
        (1, CACHE_FP32, (-1, -1), 10.0),
    ],
)
def test_flash_attn_with_kvcache_appends_in_place_and_matches_reference(
    seqlen_new, dtype, window_size, softcap
):
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(seqlen_new, dtype, seed=seqlen_new)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    out = flashcore.flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k_new,
        v_new,
        cache_seqlens=seqlens,
        causal=True,
        window_size=window_size,
        softcap=softcap,
    )
    assert out.shape == q.shape and out.is_contiguous()
    # In place: the new rows hold k/v, every other row is what it was.
    expect_k, expect_v = k_before.clone(), v_before.clone()
    for b, start in enumerate(seqlens.tolist()):
        expect_k[b, start : start + seqlen_new] = k_new[b]
        expect_v[b, start : start + seqlen_new] = v_new[b]
    assert torch.equal(k_cache, expect_k) and torch.equal(v_cache, expect_v)
    left = window_size[0]
    kwargs = dict(window=None if left < 0 else left + 1, softcap=softcap or None)
    totals = seqlens + seqlen_new
    qb, kb, vb = _bhsd(q, k_cache, v_cache)
    ref = kvcache_reference(qb, kb, vb, totals, **kwargs)
    same = kvcache_reference(qb, kb, vb, totals, compute_dtype=dtype, **kwargs)
    report = error_rule(out.transpose(1, 2), ref, same)
    assert report.passed, report


@pytest.mark.parametrize("form", ["int", "none"])
def test_flash_attn_with_kvcache_without_new_tokens(form):
    """No k/v: the queries are the last Sq cached positions; an int cache_seqlens is every
    sequence's length, None the whole cache (as FA)."""
    q, k_cache, v_cache, _, _, _ = _cache_inputs(2, CACHE_FP32, capacity=40, seed=8)
    length = 33 if form == "int" else 40
    out = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=length if form == "int" else None, causal=True
    )
    qb, kb, vb = _bhsd(q, k_cache, v_cache)
    totals = torch.full((q.shape[0],), length)
    ref = kvcache_reference(qb, kb, vb, totals)
    same = kvcache_reference(qb, kb, vb, totals, compute_dtype=q.dtype)
    assert error_rule(out.transpose(1, 2), ref, same).passed


def test_flash_attn_with_kvcache_returns_the_softmax_lse():
    """return_softmax_lse=True: (out, softmax_lse), softmax_lse (B, Hq, Sq) float32 (FA's
    layout), the same values as attention_with_kvcache(return_lse=True) on the same caches."""
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(2, seed=5)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(2)]
    out, lse = flashcore.flash_attn_with_kvcache(
        q, *caches[0], k_new, v_new, cache_seqlens=seqlens, causal=True, return_softmax_lse=True
    )
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    qb, kb, vb = _bhsd(q, *caches[1])
    kn, vn = (t.transpose(1, 2) for t in (k_new, v_new))
    ref, ref_lse = flashcore.attention_with_kvcache(qb, kb, vb, seqlens, kn, vn, return_lse=True)
    assert torch.equal(out.transpose(1, 2), ref) and torch.equal(lse, ref_lse)
    plain = flashcore.flash_attn_with_kvcache(q, *caches[1], cache_seqlens=seqlens + 2, causal=True)
    assert isinstance(plain, torch.Tensor)  # without it, out alone (as FA)


UNSUPPORTED_KVCACHE = [
    (dict(rotary_cos=torch.ones(80, 8), rotary_sin=torch.ones(80, 8)), "rotary_cos"),
    (dict(cache_batch_idx=torch.tensor([1, 0], dtype=torch.int32)), "cache_batch_idx"),
    (dict(cache_leftpad=torch.tensor([0, 3], dtype=torch.int32)), "cache_leftpad"),
    # The caches read as two pages of 80 rows: page id 2 lies past the pool.
    (dict(block_table=torch.tensor([[0], [2]], dtype=torch.int32)), "block_table\\[1, 0\\] = 2"),
    (dict(page_table=torch.tensor([[-1], [1]], dtype=torch.int32)), "block_table\\[0, 0\\] = -1"),
    (dict(page_table=torch.zeros(2, 1, dtype=torch.int64)), "block_table to be int32"),
    (
        dict(block_table=torch.zeros(2, 1, dtype=torch.int32), page_table=torch.zeros(2, 1)),
        "got both",
    ),
    (dict(alibi_slopes=torch.ones(4)), "alibi_slopes"),
    (dict(causal=False), "causal"),  # 3 queries per sequence, non-causal
    (dict(causal=False, window_size=(4, 1)), "window_size"),
    (dict(learnable_sink=torch.zeros(4)), "learnable_sink"),
    (dict(qv=torch.zeros(1)), "qv"),
    (dict(k_descale=torch.ones(1)), "k_descale"),
    (dict(attention_chunk=16), "attention_chunk"),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 6], dtype=torch.int32)), "cu_seqlens_q"),
    (dict(softcap=-2.0), "softcap"),
    (dict(num_splits=-1), "num_splits"),
    (dict(v=None), "k and v"),
    (dict(cache_seqlens=None), "cache_seqlens is required"),
    (dict(cache_seqlens=torch.tensor([17, 78], dtype=torch.int32)), "S_max"),  # no room
]


@pytest.mark.parametrize(
    "kwargs, match", UNSUPPORTED_KVCACHE, ids=[m for _, m in UNSUPPORTED_KVCACHE]
)
def test_flash_attn_with_kvcache_raises_before_writing(kwargs, match):
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(3)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    call = dict(k=k_new, v=v_new, cache_seqlens=seqlens, causal=True)
    call.update(
        {
            name: value.to(DEVICE) if isinstance(value, torch.Tensor) else value
            for name, value in kwargs.items()
        }
    )
    with pytest.raises((NotImplementedError, ValueError, TypeError), match=match):
        flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, **call)
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)


@pytest.mark.parametrize("num_splits, expected", [(0, None), (1, 1), (4, 4)])
def test_flash_attn_with_kvcache_hands_over_views(monkeypatch, num_splits, expected):
    """The caches reach flashcore as views of the caller's storage (the append lands in
    them, no copy), the output is FA's layout in memory, num_splits 0 means "choose"."""
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(1, seed=3)
    seen = {}
    real = flashcore.attention_with_kvcache

    def spy(qt, kc, vc, lengths, kn, vn, **kwargs):
        seen.update(q=qt, k_cache=kc, v_cache=vc, k_new=kn, out=kwargs["out"])
        seen["num_splits"] = kwargs["num_splits"]
        return real(qt, kc, vc, lengths, kn, vn, **kwargs)

    monkeypatch.setattr(flashcore, "attention_with_kvcache", spy)
    out = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, num_splits=num_splits
    )
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k_new", k_new)):
        assert seen[name].data_ptr() == t.data_ptr()
        assert seen[name].shape == t.transpose(1, 2).shape
    assert seen["out"].data_ptr() == out.data_ptr()
    assert seen["num_splits"] == expected


def test_kvcache_lengths_check_is_on_by_default_and_off_while_capturing(monkeypatch):
    """The door checks cache_seqlens (a host copy) unless told not to or capturing a CUDA
    graph, where that copy cannot run; the check still raises for a bad length."""
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(1, seed=5)
    seen = []
    real = flashcore.attention_with_kvcache

    def spy(*args, **kwargs):
        seen.append(kwargs["check_lengths"])
        return real(*args, **kwargs)

    monkeypatch.setattr(flashcore, "attention_with_kvcache", spy)
    call = lambda **kw: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, **kw)  # noqa: E731
    call(cache_seqlens=seqlens)
    call(cache_seqlens=seqlens, check_lengths=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    call(cache_seqlens=seqlens)
    assert seen == [True, False, not q.is_cuda]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    with pytest.raises(ValueError, match="cache_seqlens"):
        call(cache_seqlens=seqlens + 100)


@pytest.mark.gpu
def test_kvcache_door_runs_in_a_cuda_graph():
    """A decode step through the door captures and replays (no host copy in the capture):
    the replay's output passes the rule, as the eager call's does."""
    q, k_cache, v_cache, _, _, seqlens = _cache_inputs(1, capacity=300, lengths=(17, 290))
    qb, kb, vb = _bhsd(q, k_cache, v_cache)
    ref = kvcache_reference(qb, kb, vb, seqlens)
    same = kvcache_reference(qb, kb, vb, seqlens, compute_dtype=q.dtype)
    call = lambda: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm up (compile) off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert error_rule(out.transpose(1, 2), ref, same).passed


def test_one_query_needs_no_causal_flag():
    """With one query per sequence causal=False sees the same keys as causal: it runs."""
    q, k_cache, v_cache, k_new, v_new, seqlens = _cache_inputs(1, CACHE_FP32, seed=12)
    out = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, causal=False
    )
    qb, kb, vb = _bhsd(q, k_cache, v_cache)
    ref = kvcache_reference(qb, kb, vb, seqlens + 1)
    same = kvcache_reference(qb, kb, vb, seqlens + 1, compute_dtype=q.dtype)
    assert error_rule(out.transpose(1, 2), ref, same).passed


def test_exports():
    assert flashcore.flash_attn_func is fai.flash_attn_func
    assert flashcore.flash_attn_varlen_func is fai.flash_attn_varlen_func
    assert flashcore.flash_attn_with_kvcache is fai.flash_attn_with_kvcache


# ------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "sq, sk, hq, hkv, d, causal, window_size, softcap",
    [
        (1024, 1024, 8, 8, 128, True, (-1, -1), 0.0),
        (129, 1000, 8, 2, 64, True, (255, 0), 0.0),
        (512, 512, 4, 4, 128, False, (-1, -1), 0.0),
        (333, 333, 4, 1, 64, True, (-1, -1), 30.0),
    ],
)
def test_same_calls_as_fa4_pass_the_rule(dtype, sq, sk, hq, hkv, d, causal, window_size, softcap):
    """The issue's check: the same flash_attn_func call on flashcore and on FA4 (prepared by
    ../shared/tools/fa4-wheels.sh), both under the rule against float64, and their lse."""
    fa4 = pytest.importorskip("flash_attn.cute.interface")
    q, k, v = _bshd(2, sq, sk, hq, hkv, d, dtype, seed=sq + d)
    kwargs = dict(softmax_scale=None, causal=causal, window_size=window_size, softcap=softcap)
    fa4_window = tuple(None if w < 0 else w for w in window_size)
    try:
        theirs, their_lse = fa4.flash_attn_func(
            q, k, v, causal=causal, window_size=fa4_window, softcap=softcap, return_lse=True
        )
    except (AssertionError, NotImplementedError, RuntimeError) as error:
        pytest.skip(f"FA4 does not run this case here: {error}")
    ours, our_lse = flashcore.flash_attn_func(q, k, v, return_lse=True, **kwargs)
    mask = _fa_mask(sq, sk, causal, window_size)
    ref = _fa_reference(q, k, v, mask, softcap=softcap)
    same = _fa_reference(q, k, v, mask, softcap=softcap, dtype=dtype)
    assert error_rule(ours.transpose(1, 2), ref, same).passed
    assert error_rule(theirs.transpose(1, 2), ref, same).passed
    assert our_lse.shape == their_lse.shape and our_lse.dtype == their_lse.dtype
    # Every row sees keys in these cases: the lse is finite and has its own rule (baseline:
    # the same logsumexp in float32, the lse's precision).
    lse_ref = _fa_lse(q, k, v, mask, softcap=softcap)
    lse_same = _fa_lse(q, k, v, mask, softcap=softcap, dtype=torch.float32)
    assert error_rule(our_lse, lse_ref, lse_same).passed
    # FA4's lse is held to the same rule where no softcap is set. With softcap it misses the
    # float32 baseline (row ratio 5.2 fp16 / 7.5 bf16 at 333/333 D64 softcap 30 on the H100,
    # 2026-11-26, logs/gpu_tests_flash_attn_door_b44173b.log) while its output passes: a
    # property of the peer, reported, not a check of flashcore.
    if not softcap:
        assert error_rule(their_lse, lse_ref, lse_same).passed
