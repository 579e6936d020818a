"""The Gluon Hopper backward (flashcore/kernels/backward_hopper.py).

On any machine: the import guard and an offline compile for
sm_90 (D64/D128, causal and not, fp16/bf16) whose SASS must hold wgmma (HGMMA) and no
register spills. On a Hopper GPU: gradients against float64 autograd under the gradient
rule on the 240-case ``backward_grid("hopper")`` (NaN-poisoned gradient buffers) and a
planted bug (delta dropped) that the rule must reject, for every Gluon backward. The
dispatch (FLASHCORE_BACKWARD_HOPPER, deterministic=False) and the autograd door are
tests/test_backward_hopper_ws.py's."""

import functools

import pytest
import torch
from conftest import DEVICE, HAS_HOPPER, case_seed, offline_report

import flashcore
from flashcore.kernels import backward_hopper as bh
from flashcore.kernels import backward_hopper_pipelined as bhp
from flashcore.kernels import backward_hopper_ws as bhw
from flashcore.validate import AttentionCase, error_rule
from flashcore.validate_backward import (
    GRADIENTS,
    backward_grid,
    check_grad_case,
    make_grad_inputs,
    rule_rejects,
)

needs_hopper = pytest.mark.skipif(
    not (HAS_HOPPER and bh.GLUON_AVAILABLE), reason="needs a Hopper GPU and triton with Gluon"
)


def test_import_guard_and_supports_on_cpu():
    assert isinstance(bh.GLUON_AVAILABLE, bool)
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    assert not bh.supports(q, q, q)  # CPU tensors never take the Gluon path


def test_launcher_binds_every_kernel_argument(monkeypatch):
    """The launcher's plumbing on a CPU: the preprocess kernel (interpreted) writes delta,
    the Gluon kernel (recorded, not run) gets every parameter by position or name, with
    descriptors of the launcher's block shapes, and dQ is the scaled fp32 buffer."""
    if not bh.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    calls = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    monkeypatch.setattr(bh, "_BWD_LAUNCH", Recorder())
    case = AttentionCase(2, 4, 2, 70, 130, 64, "float16", True, "bottom_right", "bshd")
    q, k, v, do = make_grad_inputs(case, DEVICE, 5)
    out = torch.randn(q.shape, dtype=q.dtype, device=DEVICE)
    lse = torch.randn(q.shape[:3], dtype=torch.float32, device=DEVICE)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    bh.attention_backward_hopper(
        do, q, k, v, out, lse, *grads, causal_offset=60, is_causal=True, scale=0.125
    )
    ((grid, args, kwargs),) = calls
    assert grid == (2, 4)  # (key blocks of 128, batch * KV heads)
    params = bh._bwd_hopper_kernel.arg_names
    named = kwargs.keys() - {"num_warps"}
    assert len(args) + len(named) == len(params) and named == set(params[len(args) :])
    bound = dict(zip(params, args))
    assert [d.block_shape for d in (bound["q_desc"], bound["k_desc"], bound["do_desc"])] == [
        [1, 1, 64, 64],
        [1, 1, 128, 64],
        [1, 1, 64, 64],
    ]
    delta64 = (out.double() * do.double()).sum(-1)  # rowsum(dO o O)
    report = error_rule(bound["Delta"], delta64, (out.float() * do.float()).sum(-1))
    assert report.passed, report
    assert (bound["seqlen_q"], bound["seqlen_k"], bound["causal_offset"]) == (70, 130, 60)
    assert torch.equal(grads[0], torch.zeros_like(q))  # the (unlaunched) kernel added nothing


_REPORT = (
    "import json; from flashcore.studies.sass import backward_hopper_report; "
    "print(json.dumps(backward_hopper_report()))"
)


def test_offline_compile_for_sm90(record_property):
    """Compiled for sm_90 without a GPU (in a subprocess: this process runs the
    interpreter): wgmma in the SASS, no spills, shared memory within Hopper's 227 KB."""
    pytest.importorskip("triton.experimental.gluon")
    if not bh.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    report = offline_report(_REPORT)
    assert len(report) == 8
    for name, r in report.items():
        record_property(
            "measured",
            f"backward_hopper {name}: {r['n_regs']} registers, {r['n_spills']} spill stores, "
            f"{r['stack']} B stack, {r['shared']} B shared, {r['hgmma']} HGMMA",
        )
        assert r["hgmma"] > 0, f"{name}: no wgmma in the SASS"
        assert r["n_spills"] == 0 and r["ldl"] == 0 and r["stack"] == 0, (name, r)
        assert r["n_regs"] <= 255 and r["shared"] <= 227 * 1024, (name, r)


# --------------------------------------------------------------------------- Hopper GPU


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("case", backward_grid("hopper"), ids=lambda c: c.name)
def test_gradient_rule(case):
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name), kernel="gluon")
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


class _ZeroDelta:
    """Stands in for the preprocess kernel: delta = 0 instead of rowsum(dO o O)."""

    def __getitem__(self, grid):
        return lambda out, do, delta, *args, **kwargs: delta.zero_()


# The Gluon backwards (the first version, its pipelined variant and the warp-specialized
# kernel): their module (whose preprocess a test replaces), launcher and
# check_grad_case name.
GLUON_BACKWARDS = {
    "gluon": (bh, bh.attention_backward_hopper),
    "gluon_pipelined": (bhp, bhp.attention_backward_hopper_pipelined),
    "gluon_ws": (bhw, bhw.attention_backward_hopper_ws),
    "gluon_ws_det": (bhw, functools.partial(bhw.attention_backward_hopper_ws, deterministic=True)),
}


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(GLUON_BACKWARDS))
@pytest.mark.parametrize("d", [64, 128])
def test_planted_bug_dropped_delta_is_rejected(monkeypatch, kernel, d):
    # The same kernel with delta dropped (dS = P o dP): the rule must reject dQ and dK.
    monkeypatch.setattr(GLUON_BACKWARDS[kernel][0], "_bwd_preprocess", _ZeroDelta())
    case = AttentionCase(1, 4, 2, 129, 257, d, "bfloat16", True, "bottom_right")
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name), kernel=kernel)
    assert not row["dq"]["passed"] and not row["dk"]["passed"], row
    assert row["dv"]["passed"]  # dV does not use delta


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize(
    "kernel, d",
    [
        ("gluon", 64),
        ("gluon_pipelined", 64),
        ("gluon_pipelined", 128),
        ("gluon_ws", 64),
        ("gluon_ws", 128),
        ("gluon_ws_det", 64),
        ("gluon_ws_det", 128),
    ],
)
def test_gqa_group_is_summed_and_every_row_written(kernel, d):
    # GQA 4:1 with Sk not a multiple of the 128-key block and Sq not of the 64-row block
    # (nor of the pipelined variant's 128-row block at D64).
    case = AttentionCase(1, 8, 2, 200, 333, d, "float16", False)
    q, k, v, do = make_grad_inputs(case, DEVICE, 11)
    with torch.no_grad():
        out, lse = flashcore.attention(q, k, v, return_lse=True)
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        GLUON_BACKWARDS[kernel][1](
            do, q, k, v, out, lse, *grads, causal_offset=0, is_causal=False, scale=d**-0.5
        )
    assert all(torch.isfinite(g).all() for g in grads)
    assert rule_rejects(grads, q, k, v, do) == {g: True for g in GRADIENTS}
