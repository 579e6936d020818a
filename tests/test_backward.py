"""The backward kernels against float64 autograd, under the gradient rule, on fresh inputs."""

import pytest
import torch
from conftest import DEVICE, case_seed

from flashcore import attention
from flashcore.kernels.backward import attention_backward
from flashcore.validate import AttentionCase
from flashcore.validate_backward import (
    GRADIENTS,
    backward_grid,
    check_backward_determinism,
    check_grad_case,
    make_grad_inputs,
    planted_backward_bugs,
    reference_gradients,
    rule_rejects,
)


@pytest.mark.parametrize("case", backward_grid("cpu"), ids=lambda c: c.name)
def test_grid_case_passes_gradient_rule(case):
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name))
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


@pytest.mark.parametrize(
    "case",
    [
        AttentionCase(1, 4, 2, 65, 47, 32, "float16", True, "bottom_right"),
        AttentionCase(1, 2, 1, 33, 70, 16, "float32", False),
        AttentionCase(1, 4, 2, 70, 70, 32, "float16", True, "top_left", window=20),
    ],
    ids=lambda c: c.name,
)
def test_atomic_dq_passes_gradient_rule(case):
    row = check_grad_case(case, DEVICE, seed=11, deterministic=False)
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


@pytest.mark.parametrize("deterministic", [True, False])
def test_tma_descriptor_path_passes_gradient_rule(monkeypatch, deterministic):
    # The Hopper path reads Q/dO (dK/dV pass) and K/V (dQ pass) through tensor descriptors;
    # the interpreter runs descriptor loads too, so the indexing and the zero-filled tail
    # rows are checked here, not only on the GPU.
    import flashcore.kernels.backward as backward

    used = []
    monkeypatch.setattr(backward, "tma_compatible", lambda tensors, head_dim: True)
    make = backward._descriptors
    monkeypatch.setattr(backward, "_descriptors", lambda *a: used.append(a[1]) or make(*a))
    case = AttentionCase(1, 4, 2, 70, 45, 32, "float16", True, "bottom_right", "bshd")
    row = check_grad_case(case, DEVICE, seed=5, deterministic=deterministic)
    assert used, "the descriptor path did not run"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


def _leaves(case, seed):
    q, k, v, do = make_grad_inputs(case, DEVICE, seed)
    return [t.detach().clone().requires_grad_() for t in (q, k, v)], do


def test_autograd_matches_explicit_backward_bitwise():
    case = AttentionCase(2, 4, 2, 37, 53, 32, "float16", True, "bottom_right", "bshd")
    (q, k, v), do = _leaves(case, 1)
    out = attention(q, k, v, causal=True, causal_alignment="bottom_right")
    out.backward(do)
    with torch.no_grad():
        out2, lse = attention(
            q, k, v, causal=True, causal_alignment="bottom_right", return_lse=True
        )
        expected = attention_backward(
            do, q, k, v, out2, lse, causal=True, causal_alignment="bottom_right"
        )
    assert torch.equal(out.detach(), out2)
    for got, want in zip((q.grad, k.grad, v.grad), expected):
        assert torch.equal(got, want)


def test_return_lse_with_grad_and_strided_upstream_gradient():
    case = AttentionCase(1, 2, 1, 40, 40, 16, "float32", True)
    (q, k, v), do = _leaves(case, 2)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    assert not lse.requires_grad
    strided = torch.empty(1, 40, 2, 16, device=DEVICE).transpose(1, 2).copy_(do)  # (B, S, H, D)
    out.backward(strided)
    ref = reference_gradients(q, k, v, do, compute_dtype=torch.float64, causal=True)
    for got, want in zip((q.grad, k.grad, v.grad), ref):
        assert (got.double() - want).abs().max() < 1e-5


def test_rows_that_see_no_key_get_zero_gradients():
    # bottom-right with Sq > Sk: the first Sq - Sk queries precede every key.
    case = AttentionCase(1, 2, 1, 80, 30, 32, "float32", True, "bottom_right")
    (q, k, v), do = _leaves(case, 3)
    attention(q, k, v, causal=True, causal_alignment="bottom_right").backward(do)
    assert torch.equal(q.grad[:, :, :50], torch.zeros_like(q.grad[:, :, :50]))
    assert all(torch.isfinite(g).all() for g in (q.grad, k.grad, v.grad))
    assert rule_rejects(
        (q.grad, k.grad, v.grad), q, k, v, do, causal=True, causal_alignment="bottom_right"
    ) == {g: True for g in GRADIENTS}


@pytest.mark.parametrize("sq,sk", [(0, 5), (5, 0)])
def test_empty_sequences_give_zero_gradients(sq, sk):
    q = torch.randn(1, 2, sq, 16, device=DEVICE, requires_grad=True)
    k = torch.randn(1, 2, sk, 16, device=DEVICE, requires_grad=True)
    v = torch.randn(1, 2, sk, 16, device=DEVICE, requires_grad=True)
    attention(q, k, v).sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape and not t.grad.any()


def test_deterministic_mode_is_bitwise_reproducible():
    cases = [AttentionCase(1, 4, 2, 65, 130, 32, "float16", True, "bottom_right")]
    rows = check_backward_determinism(cases, DEVICE, repeats=3)
    assert rows[0]["deterministic_bitwise_identical"]


@pytest.mark.parametrize("name", list(planted_backward_bugs()))
def test_rule_rejects_planted_bugs(name):
    case = AttentionCase(1, 4, 2, 33, 33, 32, "float16", True)
    q, k, v, do = make_grad_inputs(case, DEVICE, 5)
    verdict = rule_rejects(
        planted_backward_bugs()[name](q, k, v, do, True, "top_left"), q, k, v, do, causal=True
    )
    assert not all(verdict.values()), f"the rule passed a backward with the bug: {name}"
    # and the same-precision PyTorch gradients themselves pass
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, causal=True)
    assert all(rule_rejects(same, q, k, v, do, causal=True).values())


def test_unsupported_gradients_raise():
    q = torch.randn(1, 2, 8, 16, device=DEVICE, requires_grad=True)
    with pytest.raises(RuntimeError, match="out=.*autograd"):
        attention(q, q, q, out=torch.empty_like(q))
    with pytest.raises(ValueError, match="expected grad_out to match q"):
        with torch.no_grad():
            o, lse = attention(q, q, q, return_lse=True)
            attention_backward(o[:, :, :4], q, q, q, o, lse)


def test_lse_dtype_follows_inputs_and_backward_rejects_another():
    # float32 inputs: an fp64 lse (_softmax.lse_dtype), which the backward requires; an fp32
    # one (the forward's before) is refused with the reason, not taken at lower precision.
    for dtype, want in ((torch.float32, torch.float64), (torch.float16, torch.float32)):
        q = torch.randn(1, 2, 9, 16, device=DEVICE).to(dtype)
        out, lse = attention(q, q, q, causal=True, return_lse=True)
        assert lse.dtype == want
        ref = torch.logsumexp(
            (q.double() @ q.double().transpose(-1, -2) / 4.0).masked_fill(
                torch.ones(9, 9, dtype=torch.bool, device=DEVICE).triu(1), float("-inf")
            ),
            -1,
        )
        assert (lse.double() - ref).abs().max() < (1e-5 if dtype == torch.float32 else 1e-2)
        wrong = lse.to(torch.float32 if want == torch.float64 else torch.float64)
        with pytest.raises(ValueError, match=f"expected lse .*{want}"):
            attention_backward(torch.ones_like(q), q, q, q, out, wrong, causal=True)


def test_torch_op_gradients_opcheck_and_compile():
    import flashcore.ops  # noqa: F401  (registers the op)

    case = AttentionCase(1, 4, 2, 33, 40, 32, "float32", True, "bottom_right")
    (q, k, v), do = _leaves(case, 6)
    torch.ops.flashcore.attention(q, k, v, True, True, None).backward(do)
    ref = reference_gradients(
        q, k, v, do, compute_dtype=torch.float64, causal=True, causal_alignment="bottom_right"
    )
    for got, want in zip((q.grad, k.grad, v.grad), ref):
        assert (got.double() - want).abs().max() < 1e-5
    result = torch.library.opcheck(
        torch.ops.flashcore.attention.default, (q, k, v, True, True, None)
    )
    assert all(v == "SUCCESS" for v in result.values()), result

    fn = torch.compile(
        lambda q, k, v: (torch.ops.flashcore.attention(q, k, v, True, False, None) * do).sum(),
        fullgraph=True,
    )
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    fn(q2, k2, v2).backward()
    ref = reference_gradients(q, k, v, do, compute_dtype=torch.float64, causal=True)
    for got, want in zip((q2.grad, k2.grad, v2.grad), ref):
        assert (got.double() - want).abs().max() < 1e-5


def test_transformers_training_step_matches_float64():
    pytest.importorskip("transformers")
    from flashcore.studies.e2e import compare_training_step

    row = compare_training_step(DEVICE, torch.float32)
    assert row["passed"], (row["loss"], row["worst_parameter"], row["worst_ratio"])
    # The loss is a mean of B * (S - 1) terms: its floor allows for the summation's rounding
    # (reduction_rule), a few ulps, not hundreds. A loss off by 256 ulps fails the bound.
    loss = row["loss"]
    assert loss["terms"] == 2 * 23
    fc = torch.tensor(loss["flashcore"], dtype=torch.float32)
    ulp = float(torch.nextafter(fc, torch.tensor(float("inf"))) - fc)
    for off in (256 * ulp, -256 * ulp):
        assert abs(loss["flashcore"] + off - loss["float64"]) > loss["bound"], loss


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16"])  # fp16 runs in the CPU grid; the record has both
@pytest.mark.parametrize(
    "causal,align", [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]
)
@pytest.mark.parametrize("sq,sk", [(239, 17), (1023, 1023)])
@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("deterministic", [True, False])
def test_gpu_half_precision(dtype, causal, align, sq, sk, d, deterministic):
    row = check_grad_case(
        AttentionCase(2, 8, 2, sq, sk, d, dtype, causal, align),
        DEVICE,
        seed=sq * 7 + d,
        deterministic=deterministic,
    )
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


@pytest.mark.gpu
def test_gpu_deterministic_mode_is_bitwise_reproducible():
    cases = [
        AttentionCase(2, 16, 4, 2048, 2048, 128, "bfloat16", True, "top_left"),
        AttentionCase(1, 8, 1, 1000, 3000, 64, "float16", False, "top_left"),
    ]
    rows = check_backward_determinism(cases, DEVICE, repeats=5)
    assert all(r["deterministic_bitwise_identical"] for r in rows), rows


@pytest.mark.gpu
def test_gpu_memory_is_linear_in_sequence_length():
    from flashcore.studies.backward_bench import backward_memory

    rows = backward_memory(seqlens=(4096, 16384), head_dim=128, heads=8)
    small, large = rows
    # An S x S buffer would grow the extra memory 16x; O(S) grows it 4x.
    assert large["extra_bytes"] <= 4.5 * small["extra_bytes"], rows


FP32_RATE_SEEDS = 300
FP32_RATE_MAX_FAILED = 8  # 2.7%


def test_fp32_gradient_failure_rate_is_below_an_fp32_lse_regression(record_property):
    """The grid's D16 fp32 case at seeds 0-299: at most 8 may fail the gradient rule.

    fp32 gradients pass the rule at most seeds, not all: at some, PyTorch's own fp32 max error
    is small by chance and the 2x bound with it. Which seeds fail depends on the CPU's code
    path (numpy's exp2 under the interpreter rounds differently with AVX-512), so the test
    bounds the rate, not chosen seeds. Measured with tools/backward_fp32_seeds.py
    (results/cpu-interpreter/logs/backward_fp32_seeds.log) and again for this bound:

    * the code as it is (fp64 lse): 2 of 150 on the log's machine (1.3%, seeds 45 and 53,
      reproduced at the same ratios under the Makefile's CPU_PATH2=avx2: 3 of 400), 0 of 400
      on this AVX-512 CPU's own paths, 1 of 400 under CPU_PATH2=default;
    * the regression it guards against, the forward's lse in fp32 (before bb1ecaf): 9 of 150
      on the log's machine (6%; 16 of 300 under CPU_PATH2=avx2, the same nine in the first
      150), 14 of 300 on AVX-512 (4.7%).

    Were seeds independent trials, more than 8 of 300 would fail at the highest rate measured
    for the code, 1.3%, with probability 2%, and 8 or fewer at the lowest rate measured for the
    regression, 4.7%, with probability 5.5%. The seeds an fp32 lse failed on the log's machine
    (3201, 4656, 9021) passed with it on AVX-512: one CPU's luck, so no longer tested alone.
    """
    if DEVICE != "cpu":
        pytest.skip("the rate was measured under the CPU interpreter")
    (case,) = [
        c
        for c in backward_grid("cpu")
        if c.name == "B1 Hq2 Hkv1 Sq33 Sk47 D16 float32 causal-bottom_right bhsd"
    ]
    failed = []
    for seed in range(FP32_RATE_SEEDS):
        row = check_grad_case(case, DEVICE, seed=seed)
        if not row["passed"]:
            failed.append((seed, round(row["ratio"], 3)))
    rate = (
        f"fp32 gradients, {case.name}: {len(failed)} of {FP32_RATE_SEEDS} seeds fail the rule "
        f"({len(failed) / FP32_RATE_SEEDS:.1%}; bound {FP32_RATE_MAX_FAILED}); (seed, ratio): "
        f"{failed}"
    )
    record_property("measured", rate)
    assert len(failed) <= FP32_RATE_MAX_FAILED, rate
