"""Softcap and varlen gradients of the Triton backward against float64 autograd of the
reference, under the gradient rule (flashcore.validate_backward), on fresh inputs with
NaN-poisoned gradient buffers; planted bugs show the same checker fails."""

import zlib

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

from flashcore import attention
from flashcore.kernels.backward import attention_backward
from flashcore.validate import AttentionCase
from flashcore.validate_backward import (
    GRADIENTS,
    check_softcap_grad_case,
    make_grad_inputs,
    planted_softcap_bugs,
    reference_gradients,
    softcap_backward_cases,
    softcap_rule,
)

# On CUDA the grid runs in bfloat16 too (the interpreter's bfloat16 dot is wrong on CPU).
HALF = ("float16", "bfloat16") if HAS_CUDA else ("float16",)


def _seed(name: str) -> int:
    return zlib.crc32(name.encode()) % 10_000


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
        _seed(_softcap_id(item)),
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
