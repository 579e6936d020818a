"""flashcore behind PyTorch's SDPA flash door (flashcore.sdpa_backend).

Where CUDA is missing, the overrides are installed for the CPU dispatch key instead
(``install("CPU")``): the aten ops SDPA's flash backend calls then dispatch, with autograd, to
flashcore on CPU tensors under the Triton interpreter. That checks the registration, the
argument mapping, the forward/backward pairing and the fallback decisions; counting calls
into flashcore proves which kernel ran. ``F.scaled_dot_product_attention`` itself reaches the
flash ops only on CUDA: the end-to-end tests are marked ``gpu``.
"""

import warnings

import pytest
import torch
import torch.nn.attention as sdpa_attention
from conftest import DEVICE, HAS_CUDA

import flashcore
from flashcore import sdpa_backend
from flashcore.reference import attention_reference
from flashcore.validate import error_rule
from flashcore.validate_backward import (
    GRADIENTS,
    cancellation_magnitudes,
    gradient_rule,
    reference_gradients,
)

HAS_API = hasattr(sdpa_attention, "register_flash_attention_impl")
needs_api = pytest.mark.skipif(not HAS_API, reason="torch < 2.10 has no SDPA provider API")
KEY = "CUDA" if HAS_CUDA else "CPU"
FORWARD = torch.ops.aten._scaled_dot_product_flash_attention
DTYPES = [torch.float16, torch.bfloat16] if HAS_CUDA else [torch.float16]


@pytest.fixture
def decode_calls():
    """The query shapes of the forward calls ``calls`` saw go to the split-KV kernel."""
    return []


@pytest.fixture
def calls(monkeypatch, decode_calls):
    """Counts calls into flashcore's forward (flashcore.attention, or the split-KV decode
    kernel's attend_full_cache, whose calls ``decode_calls`` lists) and backward kernel."""
    from flashcore.kernels import backward as backward_kernels
    from flashcore.kernels import decode

    counts = {"forward": 0, "backward": 0}
    real_forward, real_backward = flashcore.attention, backward_kernels.attention_backward
    real_decode = decode.attend_full_cache

    def forward(*args, **kwargs):
        counts["forward"] += 1
        return real_forward(*args, **kwargs)

    def decode_forward(*args, **kwargs):
        counts["forward"] += 1
        decode_calls.append(args[0].shape)
        return real_decode(*args, **kwargs)

    def backward(*args, **kwargs):
        counts["backward"] += 1
        return real_backward(*args, **kwargs)

    monkeypatch.setattr(flashcore, "attention", forward)
    monkeypatch.setattr(decode, "attend_full_cache", decode_forward)
    monkeypatch.setattr(backward_kernels, "attention_backward", backward)
    return counts


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(
        sdpa_backend, "_empty_like", lambda t: torch.empty_like(t).fill_(float("nan"))
    )


@pytest.fixture
def installed():
    handle = sdpa_backend.install(KEY)
    yield handle
    handle.remove()


def _inputs(batch, hq, hkv, seqlen_q, seqlen_k, d, dtype, seed, layout="bhsd"):
    gen = torch.Generator().manual_seed(seed)

    def make(h, s):
        t = torch.randn(batch, s, h, d, generator=gen).to(device=DEVICE, dtype=dtype)
        return (
            t.transpose(1, 2) if layout == "bshd" else t.transpose(1, 2).contiguous()
        ).requires_grad_()

    return make(hq, seqlen_q), make(hkv, seqlen_k), make(hkv, seqlen_k)


def _check_forward(out, lse, q, k, v, **kwargs):
    q, k, v = (t.detach() for t in (q, k, v))
    ref, ref_lse = attention_reference(q, k, v, return_lse=True, **kwargs)
    same = attention_reference(q, k, v, compute_dtype=q.dtype, **kwargs)
    _, same_lse = attention_reference(
        q, k, v, return_lse=True, compute_dtype=torch.float32, **kwargs
    )
    report = error_rule(out.detach(), ref, same)
    assert report.passed, report
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    # The kernel forms lse as (m + log2 l) / log2 e from scores scaled into log2 units: up to
    # four roundings of |lse|, so the floor is four unit roundoffs at its magnitude (a float32
    # baseline can round exactly by chance, as at S = 1).
    magnitude = 4 * float(ref_lse.abs().max()) if ref_lse.numel() else 0.0
    assert error_rule(lse, ref_lse, same_lse, floor_magnitude=magnitude).passed


def _check_gradients(grads, q, k, v, do, **kwargs):
    args = tuple(t.detach() for t in (q, k, v, do))
    ref64 = reference_gradients(*args, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(*args, compute_dtype=q.dtype, **kwargs)
    reports = gradient_rule(grads, ref64, same, cancellation_magnitudes(*args, **kwargs))
    assert all(reports[g].passed for g in GRADIENTS), {g: reports[g].ratio for g in GRADIENTS}


CASES = [
    # batch, hq, hkv, seqlen, d, causal, scale, layout
    (1, 4, 2, 17, 16, True, None, "bhsd"),
    (2, 2, 2, 65, 32, False, 0.2, "bshd"),
    (1, 2, 1, 1, 16, False, None, "bhsd"),
    (1, 2, 2, 33, 40, True, 0.15, "bshd"),  # a head dim SDPA pads to a multiple of 8
]


@needs_api
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}/{c[2]}S{c[3]}D{c[4]}-{c[7]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flash_ops_run_flashcore_forward_and_backward(installed, calls, case, dtype):
    batch, hq, hkv, seqlen, d, causal, scale, layout = case
    q, k, v = _inputs(batch, hq, hkv, seqlen, seqlen, d, dtype, seed=seqlen + d, layout=layout)
    result = FORWARD(q, k, v, 0.0, causal, False, scale=scale)
    out, lse = result[0], result[1]
    assert calls == {"forward": 1, "backward": 0}
    assert out.stride() == q.stride()  # laid out like query, as PyTorch's flash kernel
    assert tuple(result[4:6]) == (seqlen, seqlen)
    _check_forward(out, lse, q, k, v, causal=causal, scale=scale)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(out.shape, generator=gen).to(device=DEVICE, dtype=dtype)
    out.backward(do)
    assert calls == {"forward": 1, "backward": 1}
    _check_gradients((q.grad, k.grad, v.grad), q, k, v, do, causal=causal, scale=scale)


@needs_api
def test_unused_outputs_are_fresh_tensors_of_pytorch_s_kind(installed, calls):
    """The forward's rng_state, unused and debug_mask: the shapes and dtypes PyTorch's flash
    kernel returns, on q's device, and new storage on every call (the templates they are
    made from are never handed out)."""
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 16, 16, 32, torch.float16, seed=5))
    first, second = FORWARD(q, k, v, 0.0, True, False), FORWARD(q, k, v, 0.0, True, False)
    assert calls == {"forward": 2, "backward": 0}
    kinds = [((2,), torch.uint64), ((), torch.uint64), ((0,), q.dtype)]
    for a, b, (shape, dtype) in zip(first[6:], second[6:], kinds):
        assert (tuple(a.shape), a.dtype, a.device) == (shape, dtype, q.device)
        assert (tuple(b.shape), b.dtype, b.device) == (shape, dtype, q.device)
        assert a is not b
    templates = [t for group in sdpa_backend._UNUSED_TEMPLATES.values() for t in group]
    assert not any(out is t for out in (*first[6:], *second[6:]) for t in templates)
    # Storage that holds elements is never shared (the empty debug mask has none to share).
    assert first[6].data_ptr() != second[6].data_ptr()
    assert first[7].data_ptr() != second[7].data_ptr()


@needs_api
@pytest.mark.parametrize("seqlen_k", [5, 300])
def test_one_query_runs_the_split_kv_kernel(installed, calls, decode_calls, seqlen_k):
    """One query against Sk >= 4 keys: the decode kernel (a single split at 5 keys, several
    at 300 under the interpreter), into an output laid out like query, with the lse; the
    backward pairs with it from that lse."""
    q, k, v = _inputs(1, 4, 2, 1, seqlen_k, 32, torch.float16, seed=seqlen_k, layout="bshd")
    result = FORWARD(q, k, v, 0.0, False, False)
    out, lse = result[0], result[1]
    assert calls == {"forward": 1, "backward": 0} and len(decode_calls) == 1
    assert out.stride() == q.stride()
    _check_forward(out, lse, q, k, v, causal=False)
    gen = torch.Generator().manual_seed(5)
    do = torch.randn(out.shape, generator=gen).to(device=DEVICE, dtype=out.dtype)
    out.backward(do)
    assert calls == {"forward": 1, "backward": 1}
    _check_gradients((q.grad, k.grad, v.grad), q, k, v, do, causal=False)


def _meta(*shape, dtype=torch.float16):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize(
    "args, expected",
    [
        ((_meta(2, 4, 17, 64), _meta(2, 2, 17, 64), _meta(2, 2, 17, 64), 0.0, True), None),
        ((_meta(1, 4, 1, 128), _meta(1, 1, 3, 128), _meta(1, 1, 3, 128), 0.0, False), None),
        ((_meta(1, 4, 17, 128), _meta(1, 1, 90, 128), _meta(1, 1, 90, 128), 0.0, False), None),
        ((_meta(1, 4, 1, 128), _meta(1, 1, 90, 128), _meta(1, 1, 90, 128), 0.0, False), None),
        (
            (_meta(1, 4, 2, 128), _meta(1, 1, 90, 128), _meta(1, 1, 90, 128), 0.0, False),
            "2 non-causal queries against 90 keys",
        ),
        ((_meta(1, 2, 8, 64), _meta(1, 2, 8, 64), _meta(1, 2, 8, 64), 0.1, False), "dropout"),
        ((_meta(2, 8, 64), _meta(2, 8, 64), _meta(2, 8, 64), 0.0, False), "dims"),
        (
            (
                _meta(1, 2, 8, 64, dtype=torch.float32),
                _meta(1, 2, 8, 64, dtype=torch.float32),
                _meta(1, 2, 8, 64, dtype=torch.float32),
                0.0,
                False,
            ),
            "dtypes",
        ),
        ((_meta(1, 2, 8, 64), _meta(1, 2, 8, 64), _meta(1, 2, 8, 32), 0.0, False), "head dim"),
        ((_meta(1, 2, 8, 264), _meta(1, 2, 8, 264), _meta(1, 2, 8, 264), 0.0, False), "264"),
        ((_meta(1, 3, 8, 64), _meta(1, 2, 8, 64), _meta(1, 2, 8, 64), 0.0, False), "heads"),
        ((_meta(1, 2, 4, 64), _meta(1, 2, 8, 64), _meta(1, 2, 8, 64), 0.0, True), "Sq=4 != Sk=8"),
        ((_meta(1, 2, 0, 64), _meta(1, 2, 8, 64), _meta(1, 2, 8, 64), 0.0, False), "empty"),
    ],
)
def test_unsupported_reason(args, expected):
    reason = sdpa_backend.unsupported_reason(*args)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


def _stand_in_library(seen):
    """Kernels registered before flashcore's (stand-ins for PyTorch's own flash kernels):
    they record that they ran and return zeros of the right shapes."""
    library = torch.library.Library("aten", "IMPL", KEY)

    def forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
        seen.append(("forward", dropout_p, is_causal, return_debug_mask))
        return (
            torch.zeros_like(q),
            torch.zeros(q.shape[:3], dtype=torch.float32, device=q.device),
            None,
            None,
            q.shape[2],
            k.shape[2],
            torch.empty((2,), dtype=torch.uint64, device=q.device),
            torch.empty((), dtype=torch.uint64, device=q.device),
            torch.empty((0,), dtype=q.dtype, device=q.device),
        )

    def backward(
        do, q, k, v, out, lse, cq, ck, mq, mk, dropout_p, is_causal, seed, offset, *, scale=None
    ):
        seen.append(("backward", dropout_p, is_causal))
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # on CUDA this overrides PyTorch's kernel: it says so
        library.impl(sdpa_backend.FORWARD_OP, forward, KEY)
        library.impl(sdpa_backend.BACKWARD_OP, backward, KEY)
    return library


@needs_api
def test_calls_flashcore_cannot_serve_go_to_the_previous_kernel(calls):
    seen = []
    previous = _stand_in_library(seen)
    try:
        handle = sdpa_backend.install(KEY)
        try:
            q, k, v = _inputs(1, 2, 2, 9, 9, 16, torch.float16, seed=1)
            out = FORWARD(q, k, v, 0.3, False, False)[0]  # dropout: PyTorch's
            out.backward(torch.ones_like(out))  # ... and its backward too
            FORWARD(q, k, v, 0.0, False, True)  # return_debug_mask
            q4 = q.detach()[:, :, :4]
            FORWARD(q4, k.detach(), v.detach(), 0.0, True, False)  # causal, Sq != Sk
            assert calls == {"forward": 0, "backward": 0}
            assert seen == [
                ("forward", 0.3, False, False),
                ("backward", 0.3, False),
                ("forward", 0.0, False, True),
                ("forward", 0.0, True, False),
            ]
            FORWARD(q.detach(), k.detach(), v.detach(), 0.0, False, False)  # served
            assert calls["forward"] == 1 and len(seen) == 4
        finally:
            handle.remove()
        FORWARD(q.detach(), k.detach(), v.detach(), 0.0, False, False)  # removed: previous
        assert calls["forward"] == 1 and len(seen) == 5
    finally:
        previous._destroy()


@needs_api
@pytest.mark.skipif(
    HAS_CUDA, reason="on a CUDA build PyTorch's own kernel is there to fall back to"
)
def test_unserved_call_without_a_previous_kernel_raises(installed, calls):
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 9, 9, 16, torch.float16, seed=1))
    with pytest.raises(NotImplementedError, match="dropout"):
        FORWARD(q, k, v, 0.5, False, False)
    assert calls["forward"] == 0


@needs_api
def test_register_activate_restore():
    assert sdpa_backend.register() == "flashcore"
    assert "flashcore" in sdpa_attention.list_flash_attention_impls()
    if not hasattr(sdpa_attention, "restore_flash_attention_impl"):
        pytest.skip("torch 2.10 cannot undo an activation; activating here would last")
    sdpa_attention.activate_flash_attention_impl("flashcore")
    try:
        assert sdpa_attention.current_flash_attention_impl() == "flashcore"
    finally:
        sdpa_attention.restore_flash_attention_impl()
    assert sdpa_attention.current_flash_attention_impl() is None


def test_register_on_a_torch_without_the_api_raises(monkeypatch):
    monkeypatch.delattr(sdpa_attention, "register_flash_attention_impl", raising=False)
    with pytest.raises(RuntimeError, match=r"from torch 2\.10"):
        sdpa_backend.register()


@needs_api
def test_refuses_to_stack_on_another_active_implementation(monkeypatch):
    monkeypatch.setattr(sdpa_attention, "current_flash_attention_impl", lambda: "FA4")
    with pytest.raises(RuntimeError, match="'FA4'"):
        sdpa_backend.install(KEY)


# ------------------------------------------------------------------------------- GPU


@pytest.fixture
def activated():
    if not hasattr(sdpa_attention, "restore_flash_attention_impl"):
        pytest.skip("torch 2.10 cannot undo an activation")
    sdpa_attention.activate_flash_attention_impl(sdpa_backend.register())
    yield
    sdpa_attention.restore_flash_attention_impl()


def _sdpa_flash(q, k, v, **kwargs):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


@pytest.mark.gpu
@needs_api
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "batch, hq, hkv, seqlen, d, causal",
    [
        (2, 8, 8, 1024, 128, True),
        (1, 8, 2, 129, 64, False),
        (2, 4, 4, 1, 64, False),
        (1, 4, 4, 77, 80, True),
    ],
)
def test_sdpa_runs_flashcore_after_activation(
    activated, calls, dtype, batch, hq, hkv, seqlen, d, causal
):
    q, k, v = _inputs(batch, hq, hkv, seqlen, seqlen, d, dtype, seed=seqlen, layout="bshd")
    out = _sdpa_flash(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    assert calls == {"forward": 1, "backward": 0}
    ref = attention_reference(*(t.detach() for t in (q, k, v)), causal=causal)
    same = attention_reference(*(t.detach() for t in (q, k, v)), causal=causal, compute_dtype=dtype)
    assert error_rule(out.detach(), ref, same).passed
    do = torch.randn_like(out)
    out.backward(do)
    assert calls == {"forward": 1, "backward": 1}
    _check_gradients((q.grad, k.grad, v.grad), q, k, v, do, causal=causal)


@pytest.mark.gpu
@needs_api
def test_sdpa_decode_runs_flashcore_s_split_kv_kernel(activated, calls, decode_calls):
    """One query against a long cache through SDPA: flashcore's split-KV decode kernel, with
    the log-sum-exp the op returns; out, lse and the gradients pass the rule."""
    q, k, v = _inputs(1, 8, 2, 1, 700, 64, torch.bfloat16, seed=4, layout="bshd")
    out = _sdpa_flash(q, k, v, enable_gqa=True)
    assert calls == {"forward": 1, "backward": 0} and len(decode_calls) == 1
    assert out.stride() == q.stride()
    lse = FORWARD(*(t.detach() for t in (q, k, v)), 0.0, False, False)[1]
    _check_forward(out.detach(), lse, q, k, v, causal=False)
    do = torch.randn_like(out)
    out.backward(do)
    _check_gradients((q.grad, k.grad, v.grad), q, k, v, do, causal=False)


@pytest.mark.gpu
@needs_api
def test_sdpa_dropout_and_restored_calls_run_pytorch(activated, calls):
    q, k, v = _inputs(1, 4, 4, 128, 64, 128, torch.float16, seed=2, layout="bshd")
    out = _sdpa_flash(q, k, v, dropout_p=0.2)
    out.sum().backward()
    assert calls == {"forward": 0, "backward": 0}
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
    # The direct op with causal Sq != Sk: PyTorch's own kernel, exactly (the same kernel run
    # twice on the same inputs: its output, not a numerical claim).
    qd, kd, vd = (t.detach() for t in (q, k, v))
    fallback = FORWARD(qd[:, :, :32], kd, vd, 0.0, True, False)[0]
    assert calls["forward"] == 0
    sdpa_attention.restore_flash_attention_impl()
    own = FORWARD(qd[:, :, :32], kd, vd, 0.0, True, False)[0]
    assert torch.equal(fallback, own)
    _sdpa_flash(qd, kd, vd)
    assert calls["forward"] == 0
    sdpa_attention.activate_flash_attention_impl("flashcore")  # the fixture restores it
