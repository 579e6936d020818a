"""Softcap and varlen gradients of the Triton backward against float64 autograd of the
reference, under the gradient rule (flashcore.validate_backward_softcap_varlen), on fresh
inputs with NaN-poisoned gradient buffers; planted bugs show the same checker fails."""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA, case_seed

from flashcore import attention, attention_varlen
from flashcore.interface import _VarlenFunction
from flashcore.kernels.backward import attention_backward, attention_varlen_backward
from flashcore.kernels.varlen import attention_varlen_into
from flashcore.validate import AttentionCase
from flashcore.validate_backward import GRADIENTS, make_grad_inputs, reference_gradients
from flashcore.validate_backward_softcap_varlen import (
    VarlenGradCase,
    check_softcap_grad_case,
    check_varlen_grad_case,
    make_varlen_grad_inputs,
    planted_softcap_bugs,
    softcap_backward_cases,
    softcap_rule,
    varlen_backward_cases,
    varlen_rule,
)

# On CUDA the grid runs in bfloat16 too (the interpreter's bfloat16 dot is wrong on CPU).
HALF = ("float16", "bfloat16") if HAS_CUDA else ("float16",)


def _failures(row):
    return {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


def _with_dtype(case: AttentionCase, dtype: str) -> AttentionCase:
    fields = {f: getattr(case, f) for f in case.__dataclass_fields__}
    return AttentionCase(**dict(fields, dtype=dtype))


def _softcap_cases():
    cases = []
    for case, cap, scale in softcap_backward_cases("cpu"):
        for dtype in HALF if case.dtype != "float32" else ("float32",):
            cases.append((_with_dtype(case, dtype), cap, scale))
    return cases


def _softcap_id(item):
    case, cap, scale = item
    return f"{case.name} softcap{cap} scale{scale}"


# ------------------------------------------------------------------------------ softcap


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("item", _softcap_cases(), ids=_softcap_id)
def test_softcap_gradients_pass_the_rule(item, deterministic):
    case, cap, scale = item
    row = check_softcap_grad_case(
        case,
        DEVICE,
        case_seed(_softcap_id(item)),
        softcap=cap,
        scale=scale,
        deterministic=deterministic,
    )
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], _failures(row)


def test_softcap_through_autograd_is_the_explicit_backward_bitwise():
    case = AttentionCase(2, 4, 2, 37, 53, 32, "float16", True, "bottom_right", "bshd")
    q, k, v, do = make_grad_inputs(case, DEVICE, 1)
    kw = dict(causal=True, causal_alignment="bottom_right", softcap=3.0, scale=0.4)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, **kw)
    out.backward(do)
    with torch.no_grad():
        out2, lse = attention(q, k, v, return_lse=True, **kw)
        expected = attention_backward(do, q, k, v, out2, lse, **kw)
    assert torch.equal(out.detach(), out2)
    for leaf, want in zip(leaves, expected):
        assert torch.equal(leaf.grad, want)
    assert all(softcap_rule(expected, q, k, v, do, **kw)[g].passed for g in GRADIENTS)


def test_softcap_backward_without_the_cap_is_rejected():
    # A backward that forgets softcap (the kernel run without it, on the capped forward's
    # lse and output) must fail the same rule the grid passes.
    case = AttentionCase(1, 4, 2, 65, 65, 32, "float16", True, "top_left")
    row = check_softcap_grad_case(case, DEVICE, 8, softcap=3.0, scale=0.5)
    assert row["passed"], _failures(row)
    row = check_softcap_grad_case(
        case, DEVICE, 8, softcap=3.0, scale=0.5, softcap_in_backward=False
    )
    assert not row["passed"], "the rule passed a backward that ignores softcap"


@pytest.mark.parametrize("name", list(planted_softcap_bugs()))
def test_rule_rejects_planted_softcap_bugs(name):
    case = AttentionCase(1, 4, 2, 33, 47, 32, "float16", True, "bottom_right")
    q, k, v, do = make_grad_inputs(case, DEVICE, 5)
    kw = dict(causal=True, causal_alignment="bottom_right", window=None, softcap=4.0, scale=0.5)
    reports = softcap_rule(planted_softcap_bugs()[name](q, k, v, do, **kw), q, k, v, do, **kw)
    assert not all(r.passed for r in reports.values()), f"the rule passed: {name}"
    # and the same-precision PyTorch gradients themselves pass it
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, **kw)
    assert all(r.passed for r in softcap_rule(same, q, k, v, do, **kw).values())


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
def test_gpu_softcap_grid(deterministic):
    rows = [
        check_softcap_grad_case(
            case, DEVICE, i, softcap=cap, scale=scale, deterministic=deterministic
        )
        for i, (case, cap, scale) in enumerate(softcap_backward_cases("gpu"))
    ]
    failed = [(r["name"], r["ratio"]) for r in rows if not r["passed"]]
    assert not failed, failed


# ------------------------------------------------------------------------------- varlen


def _varlen_cases():
    cases = []
    for case in varlen_backward_cases("cpu"):
        for dtype in HALF if case.dtype != "float32" else ("float32",):
            fields = {f: getattr(case, f) for f in case.__dataclass_fields__}
            cases.append(VarlenGradCase(**dict(fields, dtype=dtype)))
    return cases


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("case", _varlen_cases(), ids=lambda c: c.name)
def test_varlen_gradients_pass_the_rule(case, deterministic):
    row = check_varlen_grad_case(case, DEVICE, case_seed(case.name), deterministic=deterministic)
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], _failures(row)


@pytest.mark.parametrize("plant", ["query_start", "key_start"])
@pytest.mark.parametrize(
    "case",
    [
        VarlenGradCase((33, 7, 1, 0), (47, 7, 2, 5), 4, 2, 16, "float16", True, "top_left"),
        VarlenGradCase((1, 40, 0, 17), (1, 65, 4, 17), 2, 1, 16, "float32", True),
    ],
    ids=lambda c: c.name,
)
def test_varlen_off_by_one_is_rejected(case, plant):
    # The kernels run with one sequence boundary of cu_seqlens moved by a row in the
    # backward only: the same check that passes the grid must fail it.
    assert check_varlen_grad_case(case, DEVICE, 2)["passed"]
    row = check_varlen_grad_case(case, DEVICE, 2, plant=plant)
    assert not row["passed"], f"the rule passed a backward with a shifted {plant}"


def test_varlen_autograd_is_the_explicit_backward_bitwise():
    case = VarlenGradCase((0, 1, 17, 5, 1, 40), (3, 1, 17, 0, 9, 33), 4, 2, 16, "float16", True)
    q, k, v, do, cu_q, cu_k = make_varlen_grad_inputs(case, DEVICE, 4)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention_varlen(*leaves, cu_q, cu_k, 40, 33, causal=True, window=6, softcap=3.0)
    assert out.requires_grad
    out.backward(do)
    with torch.no_grad():
        opts = dict(causal=True, causal_alignment="bottom_right", window=6, softcap=3.0, scale=None)
        out2, lse = attention_varlen_into(q, k, v, cu_q, cu_k, 40, return_lse=True, **opts)
        expected = attention_varlen_backward(do, q, k, v, out2, lse, cu_q, cu_k, 40, 33, **opts)
        # the forward under autograd is the forward without it
        assert torch.equal(out.detach(), attention_varlen(q, k, v, cu_q, cu_k, 40, 33, **opts))
    assert torch.equal(out.detach(), out2)
    for leaf, want in zip(leaves, expected):
        assert torch.equal(leaf.grad, want)
    assert all(r.passed for r in varlen_rule(expected, q, k, v, do, cu_q, cu_k, **opts).values())


def test_varlen_atomic_dq_through_autograd():
    case = VarlenGradCase((20, 1, 0, 33), (25, 1, 3, 33), 4, 1, 32, "float16", True, "top_left")
    q, k, v, do, cu_q, cu_k = make_varlen_grad_inputs(case, DEVICE, 6)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    opts = dict(causal=True, causal_alignment="top_left", window=None, softcap=None, scale=None)
    _VarlenFunction.apply(*leaves, cu_q, cu_k, 33, 33, opts, False).backward(do)  # atomic dQ
    grads = tuple(t.grad for t in leaves)
    assert all(r.passed for r in varlen_rule(grads, q, k, v, do, cu_q, cu_k, **opts).values())


def test_varlen_lse_matches_the_reference():
    # The packed (Hq, total_q) lse the backward rebuilds P from: each row's log-sum-exp of
    # its sequence's visible (capped) scores, -inf exactly where a row sees no key.
    from flashcore.reference import attention_reference
    from flashcore.validate import error_rule

    case = VarlenGradCase((0, 1, 17, 5, 1, 40), (3, 1, 17, 0, 9, 33), 4, 2, 16, "float16", True)
    q, k, v, _, cu_q, cu_k = make_varlen_grad_inputs(case, DEVICE, 9)
    opts = dict(causal=True, causal_alignment="top_left", window=9, softcap=2.0, scale=0.5)
    with torch.no_grad():
        _, lse = attention_varlen_into(q, k, v, cu_q, cu_k, 40, return_lse=True, **opts)
    assert lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32
    refs = {}
    for dtype in (torch.float64, q.dtype):
        parts = []
        for b in range(len(case.lens_q)):
            qs, ks = slice(*cu_q[b : b + 2].tolist()), slice(*cu_k[b : b + 2].tolist())
            args = (t.transpose(0, 1)[None] for t in (q[qs], k[ks], v[ks]))
            ref = attention_reference(*args, compute_dtype=dtype, return_lse=True, **opts)
            parts.append(ref[1][0])
        refs[dtype] = torch.cat(parts, -1)
    ref64, same = refs[torch.float64], refs[q.dtype]
    no_key = torch.isinf(ref64)
    assert torch.equal(torch.isinf(lse) & (lse < 0), no_key)
    assert no_key.any() and (~no_key).any()
    assert error_rule(lse[~no_key], ref64[~no_key], same[~no_key].float()).passed


def test_varlen_gradients_of_empty_inputs_are_zero():
    cu0 = torch.zeros(3, dtype=torch.int32, device=DEVICE)
    q = torch.randn(0, 2, 16, device=DEVICE, requires_grad=True)
    k = torch.randn(5, 2, 16, device=DEVICE, requires_grad=True)
    v = torch.randn(5, 2, 16, device=DEVICE, requires_grad=True)
    cu_k = torch.tensor([0, 2, 5], dtype=torch.int32, device=DEVICE)
    out = attention_varlen(q, k, v, cu0, cu_k, 0, 3)
    out.sum().backward()
    assert q.grad.shape == q.shape and torch.equal(k.grad, torch.zeros_like(k))
    assert torch.equal(v.grad, torch.zeros_like(v))


def test_varlen_out_with_grad_raises_before_writing():
    q, k, v, _, cu_q, cu_k = make_varlen_grad_inputs(
        VarlenGradCase((3, 4), (3, 4), 2, 1, 16, "float32"), DEVICE, 1
    )
    out = torch.full_like(q, float("nan"))
    with pytest.raises(RuntimeError, match="out=.*autograd"):
        attention_varlen(q.requires_grad_(), k, v, cu_q, cu_k, 4, 4, out=out)
    assert torch.isnan(out).all()


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
def test_gpu_varlen_grid(deterministic):
    rows = [
        check_varlen_grad_case(case, DEVICE, i, deterministic=deterministic)
        for i, case in enumerate(varlen_backward_cases("gpu", seed=1))
    ]
    failed = [(r["name"], r["ratio"]) for r in rows if not r["passed"]]
    assert not failed, failed


@pytest.mark.gpu
def test_gpu_varlen_deterministic_mode_is_bitwise_reproducible():
    case = VarlenGradCase((0, 1, 700, 130, 1, 999), (3, 1, 700, 0, 64, 999), 16, 4, 128, "bfloat16")
    q, k, v, do, cu_q, cu_k = make_varlen_grad_inputs(case, DEVICE, 3)
    opts = dict(case.options(), causal=True)
    with torch.no_grad():
        out, lse = attention_varlen_into(q, k, v, cu_q, cu_k, 999, return_lse=True, **opts)
        runs = [
            attention_varlen_backward(do, q, k, v, out, lse, cu_q, cu_k, 999, 999, **opts)
            for _ in range(3)
        ]
    for later in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], later))
