"""KV-cache attention against float64: prefill, decode steps, ragged lengths, GQA, errors."""

import pytest
import torch
from conftest import DEVICE

from flashcore import attention_with_kvcache
from flashcore.validate import kvcache_rule, kvcache_session

HALF = torch.float16


def _randn(*shape, dtype=HALF, gen=None, device=DEVICE):
    return torch.randn(*shape, generator=gen, device="cpu").to(dtype).to(device)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (7, 1)])
def test_prefill_then_decode_steps(hq, hkv):
    reports = kvcache_session(3, hq, hkv, 96, 32, prompt_lens=[1, 40, 89], steps=6, device=DEVICE)
    assert all(r.passed for r in reports), [round(r.ratio, 3) for r in reports]


def test_full_cache_and_length_one():
    # sequence 0: a single token; sequence 1: appending fills the cache exactly.
    reports = kvcache_session(2, 4, 2, 64, 16, prompt_lens=[1, 63], steps=1, device=DEVICE)
    assert all(r.passed for r in reports)


@pytest.mark.parametrize("splits", [1, 2, 5])
def test_split_count_does_not_change_the_function(splits):
    gen = torch.Generator().manual_seed(3)
    q = _randn(2, 8, 3, 64, gen=gen)
    kc, vc = _randn(2, 2, 300, 64, gen=gen), _randn(2, 2, 300, 64, gen=gen)
    lengths = torch.tensor([290, 17], dtype=torch.int32, device=DEVICE)
    out = attention_with_kvcache(q, kc, vc, lengths, num_splits=splits)  # no append
    assert kvcache_rule(out, q, kc, vc, lengths).passed


def test_combine_is_deterministic():
    gen = torch.Generator().manual_seed(4)
    q = _randn(1, 4, 1, 32, gen=gen)
    kc, vc = _randn(1, 1, 256, 32, gen=gen), _randn(1, 1, 256, 32, gen=gen)
    lengths = torch.tensor([250], dtype=torch.int32, device=DEVICE)
    first = attention_with_kvcache(q, kc, vc, lengths, num_splits=4)
    for _ in range(2):
        assert torch.equal(first, attention_with_kvcache(q, kc, vc, lengths, num_splits=4))


def _cache_call_args(capacity=32, lengths=(10, 20)):
    gen = torch.Generator().manual_seed(5)
    q = _randn(2, 4, 2, 16, gen=gen)
    kc, vc = _randn(2, 2, capacity, 16, gen=gen), _randn(2, 2, capacity, 16, gen=gen)
    kn, vn = _randn(2, 2, 2, 16, gen=gen), _randn(2, 2, 2, 16, gen=gen)
    return q, kc, vc, torch.tensor(lengths, dtype=torch.int32, device=DEVICE), kn, vn


@pytest.mark.parametrize(
    "lengths,match",
    [((10, 31), "cache_seqlens in \\[10, 31\\]"), ((-1, 3), "cache_seqlens in \\[-1, 3\\]")],
)
def test_bad_lengths_raise_and_leave_cache_untouched(lengths, match):
    q, kc, vc, lens, kn, vn = _cache_call_args(lengths=lengths)
    before = (kc.clone(), vc.clone())
    with pytest.raises(ValueError, match=match):
        attention_with_kvcache(q, kc, vc, lens, kn, vn)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


def test_input_errors():
    q, kc, vc, lens, kn, vn = _cache_call_args()
    with pytest.raises(ValueError, match="given together"):
        attention_with_kvcache(q, kc, vc, lens, kn, None)
    with pytest.raises(ValueError, match="k_new of shape"):
        attention_with_kvcache(q, kc, vc, lens, kn[:, :1], vn[:, :1])
    with pytest.raises(ValueError, match="1-D tensor of 2 lengths"):
        attention_with_kvcache(q, kc, vc, lens[:1], kn, vn)
    with pytest.raises(TypeError, match="int32 or int64"):
        attention_with_kvcache(q, kc, vc, lens.float(), kn, vn)
    with pytest.raises(ValueError, match="multiple of the number of key/value heads"):
        attention_with_kvcache(q[:, :3], kc, vc, lens, kn, vn)
    with pytest.raises(ValueError, match="cache too small"):
        attention_with_kvcache(q, kc[:, :, :1], vc[:, :, :1], lens, kn, vn)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 128), (8, 8, 64), (16, 1, 256)])
def test_gpu_session(dtype, hq, hkv, d):
    reports = kvcache_session(
        4, hq, hkv, 2048, d, prompt_lens=[1, 300, 1024, 2000], steps=8, dtype=dtype, device=DEVICE
    )
    assert all(r.passed for r in reports), [round(r.ratio, 3) for r in reports]


@pytest.mark.gpu
def test_gpu_long_cache_many_splits():
    gen = torch.Generator().manual_seed(6)
    q = _randn(1, 32, 1, 128, dtype=torch.bfloat16, gen=gen)
    kc = _randn(1, 8, 65536, 128, dtype=torch.bfloat16, gen=gen)
    vc = _randn(1, 8, 65536, 128, dtype=torch.bfloat16, gen=gen)
    lengths = torch.tensor([65000], dtype=torch.int32, device=DEVICE)
    out = attention_with_kvcache(q, kc, vc, lengths)
    assert kvcache_rule(out, q, kc, vc, lengths).passed


@pytest.mark.gpu
@pytest.mark.parametrize("paged", [False, True])
def test_gpu_length_check_waits_for_the_device_once(paged):
    """check_lengths=True costs one wait for the device per call: the lengths copied to the
    host, or with a block table their range and the page verdict read together. Counted by
    PyTorch's synchronization debug mode, which warns at every wait it sees (a prototype: a
    wait it misses is not counted). The tree before counted 2 and 3 here
    (results/nvidia-h200/logs/length_check_waits_6ae1e84.log)."""
    import warnings

    gen = torch.Generator().manual_seed(5 + paged)
    b, hq, hkv, d, page = 2, 8, 2, 64, 16
    q = _randn(b, hq, 1, d, gen=gen)
    if paged:
        kc, vc = _randn(8, hkv, page, d, gen=gen), _randn(8, hkv, page, d, gen=gen)
        table = torch.arange(8, dtype=torch.int32, device=DEVICE).view(b, 4)
    else:
        kc, vc = _randn(b, hkv, 64, d, gen=gen), _randn(b, hkv, 64, d, gen=gen)
        table = None
    lens = torch.tensor([20, 50], dtype=torch.int32, device=DEVICE)
    attention_with_kvcache(q, kc, vc, lens, block_table=table)  # compiled outside the count
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            attention_with_kvcache(q, kc, vc, lens, block_table=table)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert len(waits) == 1, waits


@pytest.mark.parametrize("new_tokens", [True, False])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_kvcache_returns_the_lse(new_tokens, splits, with_sinks):
    """attention_with_kvcache(return_lse=True): (out, lse), lse (B, Hq, Sn) the natural-log
    log-sum-exp of each row's scaled scores over its ragged cache (sinks in the denominator),
    under the rule against float64 per sequence; out as without the lse."""
    from flashcore.kernels._softmax import lse_dtype
    from flashcore.reference import attention_reference
    from flashcore.validate import error_rule

    gen = torch.Generator().manual_seed(11 * splits + 2 * with_sinks + new_tokens)
    b, hq, hkv, cap, d, sn = 3, 4, 2, 120, 32, 2
    q = _randn(b, hq, sn, d, gen=gen)
    kc, vc = _randn(b, hkv, cap, d, gen=gen), _randn(b, hkv, cap, d, gen=gen)
    lens = torch.tensor([3, 57, 110], device=DEVICE)
    kn = _randn(b, hkv, sn, d, gen=gen) if new_tokens else None
    vn = _randn(b, hkv, sn, d, gen=gen) if new_tokens else None
    sinks = (torch.randn(hq, generator=gen) * 2).to(DEVICE) if with_sinks else None
    out, lse = attention_with_kvcache(
        q, kc, vc, lens, kn, vn, num_splits=splits, sinks=sinks, return_lse=True
    )
    assert lse.shape == (b, hq, sn) and lse.dtype == lse_dtype(q.dtype)
    total = (lens + sn if new_tokens else lens).tolist()
    refs = {dtype: [] for dtype in (torch.float64, torch.float32, HALF)}
    for i, length in enumerate(total):
        for dtype, rows in refs.items():
            rows.append(
                attention_reference(
                    q[i : i + 1], kc[i : i + 1, :, :length], vc[i : i + 1, :, :length],
                    causal=True, causal_alignment="bottom_right", sinks=sinks,
                    compute_dtype=dtype, return_lse=True,
                )
            )  # fmt: skip
    ref, ref_lse = (torch.cat(t) for t in zip(*refs[torch.float64]))
    same = torch.cat([o for o, _ in refs[HALF]])
    same_lse = torch.cat([x for _, x in refs[torch.float32]])
    assert error_rule(out, ref, same).passed
    magnitude = 4 * float(ref_lse.abs().max())  # as the full-cache test above
    assert error_rule(lse, ref_lse, same_lse, floor_magnitude=magnitude).passed


@pytest.mark.parametrize("new_tokens", [True, False])
@pytest.mark.parametrize("seqlen_new", [1, 3])
@pytest.mark.parametrize(
    "window,softcap,masked",
    [(20, None, False), (None, 4.0, False), (None, None, True), (33, 2.0, True)],
)
def test_window_softcap_and_key_padding_mask(new_tokens, seqlen_new, window, softcap, masked):
    """Sliding window, logit softcapping and a per-key padding mask (holes included), each
    against the float64 reference, with several splits; outputs poisoned."""
    from flashcore.reference import kvcache_reference
    from flashcore.validate import error_rule

    g = torch.Generator().manual_seed(seqlen_new * 7 + (window or 0))
    b, hq, hkv, cap, d = 3, 8, 2, 150, 32
    q = _randn(b, hq, seqlen_new, d, gen=g)
    kc, vc = _randn(b, hkv, cap, d, gen=g), _randn(b, hkv, cap, d, gen=g)
    lens = torch.tensor([5, 100, 140 - seqlen_new], device=DEVICE)
    kn = _randn(b, hkv, seqlen_new, d, gen=g) if new_tokens else None
    vn = _randn(b, hkv, seqlen_new, d, gen=g) if new_tokens else None
    mask = None
    if masked:
        mask = (torch.rand(b, cap, generator=g) > 0.3).to(DEVICE)
        mask[:, :2] = True
    out = torch.full(q.shape, float("nan"), dtype=HALF, device=DEVICE)
    attention_with_kvcache(
        q,
        kc,
        vc,
        lens,
        kn,
        vn,
        window=window,
        softcap=softcap,
        key_padding_mask=mask,
        num_splits=3,
        out=out,
    )
    total = lens + seqlen_new if new_tokens else lens
    opts = dict(window=window, softcap=softcap, key_padding_mask=mask)
    report = error_rule(
        out,
        kvcache_reference(q, kc, vc, total, **opts),
        kvcache_reference(q, kc, vc, total, compute_dtype=HALF, **opts),
    )
    assert report.passed, report


def test_key_padding_mask_errors():
    q = _randn(2, 4, 1, 16)
    kc = _randn(2, 2, 32, 16)
    lens = torch.tensor([3, 5], device=DEVICE)
    with pytest.raises(ValueError, match="key_padding_mask"):
        attention_with_kvcache(
            q, kc, kc, lens, key_padding_mask=torch.ones(2, 31, dtype=torch.bool, device=DEVICE)
        )
    with pytest.raises(ValueError, match="softcap"):
        attention_with_kvcache(q, kc, kc, lens, softcap=0.0)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_full_cache_decode_returns_the_lse_and_writes_into_out(splits, with_sinks):
    """attend_full_cache(return_lse=True): the natural-log lse of each row, from the single
    split's kernel or the combine, under the rule against a float64 reference (sinks join
    the denominator, as the forward's lse); ``out`` of other strides is written in place."""
    from flashcore.kernels.decode import attend_full_cache
    from flashcore.reference import attention_reference
    from flashcore.validate import error_rule

    gen = torch.Generator().manual_seed(splits + 2 * with_sinks)
    dtype = HALF
    q = _randn(2, 4, 1, 32, gen=gen, dtype=dtype)
    k, v = (_randn(2, 2, 200, 32, gen=gen, dtype=dtype) for _ in range(2))
    sinks = (torch.randn(4, generator=gen) * 2).to(DEVICE) if with_sinks else None
    out = torch.full((2, 1, 4, 32), float("nan"), dtype=dtype, device=DEVICE).transpose(1, 2)
    got, lse = attend_full_cache(q, k, v, num_splits=splits, sinks=sinks, return_lse=True, out=out)
    assert got is out and lse.shape == (2, 4, 1)
    kw = dict(causal=True, causal_alignment="bottom_right", sinks=sinks)
    ref, ref_lse = attention_reference(q, k, v, return_lse=True, **kw)
    same = attention_reference(q, k, v, compute_dtype=dtype, **kw)
    _, same_lse = attention_reference(q, k, v, return_lse=True, compute_dtype=torch.float32, **kw)
    assert error_rule(out, ref, same).passed
    # lse = (m + log2 l) / log2 e from log2-unit scores: a few roundings of |lse| (as the
    # SDPA door's check of the forward kernel's lse)
    magnitude = 4 * float(ref_lse.abs().max())
    assert error_rule(lse, ref_lse, same_lse, floor_magnitude=magnitude).passed
    with pytest.raises(ValueError, match="expected out"):
        attend_full_cache(q, k, v, out=out[:, :, :, :16])
