"""The pipelined Gluon Hopper backward (flashcore/kernels/backward_hopper_pipelined.py).

On any machine: the import guard (and ``supports`` shared with the original), the launcher's
plumbing (every kernel argument bound, BLOCK_M per head dim), and an offline compile for
sm_90 (D64/D128, causal and not, fp16/bf16) with wgmma in the SASS, no spills, no layout
conversion added, the step's wgmma waits where the kernel puts them, and the warpgroup
ownership of P's key columns that the missing top-of-step barrier relies on. On a Hopper
GPU: gradients under the gradient rule on a handful of cases (ring and double-buffer edges:
1, 2 and 3 steps, GQA, both causal alignments, lengths off the block sizes). The planted bug
(delta dropped) that the rule must reject and every row written with GQA are
tests/test_backward_hopper.py's, parametrized over both Gluon backwards."""

import pytest
import torch
from conftest import DEVICE, HAS_HOPPER, case_seed, offline_report

from flashcore.kernels import backward_hopper as bh
from flashcore.kernels import backward_hopper_pipelined as bhp
from flashcore.validate import AttentionCase, error_rule
from flashcore.validate_backward import (
    GRADIENTS,
    check_grad_case,
    make_grad_inputs,
)

needs_hopper = pytest.mark.skipif(
    not (HAS_HOPPER and bhp.GLUON_AVAILABLE), reason="needs a Hopper GPU and triton with Gluon"
)


def test_import_guard_and_supports_on_cpu():
    assert bhp.GLUON_AVAILABLE is bh.GLUON_AVAILABLE
    assert bhp.supports is bh.supports  # the same calls take either kernel
    assert set(bhp.BLOCK_M_FOR) == set(bh.HEAD_DIMS)
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    assert not bhp.supports(q, q, q)  # CPU tensors never take the Gluon path


def record_launch(monkeypatch, module, launcher: str, kernel, d: int, *, is_causal=True):
    """Runs ``module.<launcher>`` (a Gluon backward's launcher) on a CPU with its kernel
    recorded, not run (GQA 4:2, Sq 70, Sk 130, bottom-right causal unless ``is_causal`` is
    False, (B, S, H, D) layout):
    the preprocess kernel (interpreted) writes delta. Asserts that every kernel parameter is
    bound, by position or name, and that delta is rowsum(dO o O) under the rule and dQ the
    scaled fp32 buffer (zero: the unlaunched kernel added nothing). Returns (grid, every
    parameter by name plus launch options, q)."""
    calls = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    monkeypatch.setattr(module, "_BWD_LAUNCH", Recorder())
    case = AttentionCase(2, 4, 2, 70, 130, d, "float16", is_causal, "bottom_right", "bshd")
    q, k, v, do = make_grad_inputs(case, DEVICE, 5)
    out = torch.randn(q.shape, dtype=q.dtype, device=DEVICE)
    lse = torch.randn(q.shape[:3], dtype=torch.float32, device=DEVICE)
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    getattr(module, launcher)(
        do, q, k, v, out, lse, *grads, causal_offset=60, is_causal=is_causal, scale=0.125
    )
    ((grid, args, kwargs),) = calls
    params = kernel.arg_names
    named = kwargs.keys() - {"num_warps"}
    assert len(args) + len(named) == len(params) and named == set(params[len(args) :])
    bound = dict(zip(params, args)) | kwargs
    delta64 = (out.double() * do.double()).sum(-1)  # rowsum(dO o O)
    report = error_rule(bound["Delta"], delta64, (out.float() * do.float()).sum(-1))
    assert report.passed, report
    assert (bound["seqlen_q"], bound["seqlen_k"], bound["causal_offset"]) == (70, 130, 60)
    assert torch.equal(grads[0], torch.zeros_like(q))
    return grid, bound, q


@pytest.mark.parametrize("d", [64, 128])
def test_launcher_binds_every_kernel_argument(monkeypatch, d):
    """The launcher's plumbing on a CPU, as the original's test (``record_launch``), with
    descriptors of the head dim's BLOCK_M and the original's arguments."""
    if not bhp.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    grid, bound, _ = record_launch(
        monkeypatch, bhp, "attention_backward_hopper_pipelined",
        bhp._bwd_hopper_pipelined_kernel, d,
    )  # fmt: skip
    assert grid == (2, 4)  # (key blocks of 128, batch * KV heads)
    assert bhp._bwd_hopper_pipelined_kernel.arg_names == bh._bwd_hopper_kernel.arg_names
    block_m = bhp.BLOCK_M_FOR[d]
    assert (bound["BLOCK_M"], bound["BLOCK_N"], bound["STAGES"]) == (block_m, 128, 3)
    assert bound["HEAD_DIM"] == d and bound["IS_CAUSAL"] is True and bound["num_warps"] == 8
    assert [d_.block_shape for d_ in (bound["q_desc"], bound["k_desc"], bound["do_desc"])] == [
        [1, 1, block_m, d],
        [1, 1, 128, d],
        [1, 1, block_m, d],
    ]


# Run in a subprocess with the interpreter off (this process runs it). Compiles the original
# and the pipelined kernel for sm_90 (the original's spec from flashcore.studies.sass with
# the pipelined kernel, its BLOCK_M and ring depth swapped in) and prints, per config, the
# ptxas resources, the wgmma waits of the PTX and the layout conversions of the TTGIR.
_REPORT = r"""
import json, re
from triton.experimental.gluon import language as gl
from flashcore.kernels import backward_hopper_pipelined as bhp
from flashcore.studies.sass import compile_kernel, gluon_backward_spec, resource_usage


def spec(d, causal, dtype, new):
    s = gluon_backward_spec(d, causal, dtype)
    if not new:
        return s
    bm, gd = bhp.BLOCK_M_FOR[d], gl.bfloat16 if dtype == "bf16" else gl.float16

    def desc(rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, d], gd)
        return f"tensordesc<{dtype}[1,1,{rows},{d}],{layout!r}>"

    s["fn"] = bhp._bwd_hopper_pipelined_kernel
    s["consts"] = dict(s["consts"], BLOCK_M=bm, BLOCK_N=bhp.BLOCK_N, STAGES=bhp.STAGES)
    s["descs"] = dict(q_desc=desc(bm), do_desc=desc(bm), k_desc=desc(128), v_desc=desc(128))
    s["num_warps"] = bhp.NUM_WARPS
    return s


out = {}
for d in (64, 128):
    for causal in (False, True):
        for dtype in ("fp16", "bf16"):
            for new in (False, True):
                c = compile_kernel(spec(d, causal, dtype, new))
                r = resource_usage(c)
                r["waits"] = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", c.asm["ptx"])
                r["convert_layout"] = c.asm["ttgir"].count("convert_layout")
                name = f"{'pipelined' if new else 'original'} D{d} "
                out[name + f"{'causal' if causal else 'full'} {dtype}"] = r
print(json.dumps(out))
"""


def test_offline_compile_for_sm90(record_property):
    """Compiled for sm_90 without a GPU: wgmma in the SASS, no spills at D64 (BLOCK_M 128)
    nor D128, shared memory within Hopper's 227 KB, no layout conversion (the original has
    none either), and the step's waits: dQ alone (2 groups left: dV, dK), S (1 left: dP),
    dP (0), and the last dV, dK after the loop (0); the original's are 1, 0, 1, 0."""
    pytest.importorskip("triton.experimental.gluon")
    if not bhp.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    report = offline_report(_REPORT)
    assert len(report) == 16
    for name, r in report.items():
        record_property(
            "measured",
            f"backward_hopper {name}: {r['n_regs']} registers, {r['n_spills']} spill stores, "
            f"{r['stack']} B stack, {r['shared']} B shared, {r['hgmma']} HGMMA, "
            f"wgmma waits {r['waits']}",
        )
        assert r["hgmma"] > 0, f"{name}: no wgmma in the SASS"
        assert r["n_spills"] == 0 and r["ldl"] == 0 and r["stack"] == 0, (name, r)
        assert r["n_regs"] <= 255 and r["shared"] <= 227 * 1024, (name, r)
        assert r["convert_layout"] == 0, (name, r)
        expected = ["0", "0", "1", "2"] if name.startswith("pipelined") else ["0", "0", "1", "1"]
        assert sorted(r["waits"]) == expected, (name, r["waits"])


def _warp_bases(layout, shape):
    """The warp bases of a distributed layout's linear layout (Triton's own conversion, as the
    compiler lowers it; no GPU, and no compile)."""
    from triton._C.libtriton import gluon_ir, ir

    context = ir.context()
    ir.load_dialects(context)
    builder = gluon_ir.GluonOpBuilder(context)
    return builder.to_linear_layout(layout._to_ir(builder), list(shape)).warp_bases


@pytest.mark.parametrize("d", [64, 128])
def test_warpgroup_owns_its_key_columns(d):
    """The claim the missing top-of-step barrier rests on, from the kernel's own layouts: in
    the S/dP layout, warps 4-7 (warpgroup 1) hold key columns [64, 128) (warp basis [0, 64];
    the other two bases step 16 and 32 rows inside a warpgroup); in the dK/dV layout they
    hold rows [64, 128). So a warpgroup's dV wgmma (A = P^T, its 64 rows) reads exactly the
    P columns it stored, and likewise its dK wgmma the dS columns."""
    if not bhp.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    nw, bm, bn = bhp.NUM_WARPS, bhp.BLOCK_M_FOR[d], bhp.BLOCK_N
    s_bases = _warp_bases(bhp._split_columns_layout(nw, bn), (bm, bn))
    kv_bases = _warp_bases(bhp._split_rows_layout(nw, d), (bn, d))
    assert s_bases == [[16, 0], [32, 0], [0, bn // 2]], s_bases
    assert kv_bases == [[16, 0], [32, 0], [bn // 2, 0]], kv_bases


# --------------------------------------------------------------------------- Hopper GPU

# A handful of cases: D64 (BLOCK_M 128) and D128 (64), fp16/bf16; 1, 2, 3 and many steps a
# program (the prefetch's first two copies, the ring's wrap, the dS buffers' alternation);
# GQA and MQA (steps across the heads of a group); both causal alignments; Sq != Sk; lengths
# off the block sizes; the (B, S, H, D) layout.
GPU_CASES = [
    AttentionCase(1, 2, 2, 1, 1, 64, "float16", False),
    AttentionCase(1, 2, 2, 64, 64, 128, "bfloat16", False),
    AttentionCase(1, 2, 2, 150, 90, 128, "bfloat16", False),
    AttentionCase(2, 4, 4, 100, 130, 128, "float16", True),
    AttentionCase(1, 4, 2, 129, 257, 64, "bfloat16", True, "bottom_right"),
    AttentionCase(2, 8, 2, 300, 300, 128, "bfloat16", True, "bottom_right", "bshd"),
    AttentionCase(1, 8, 1, 333, 200, 64, "float16", False),
    AttentionCase(1, 4, 4, 1000, 1000, 128, "float16", True),
    AttentionCase(2, 4, 1, 517, 1000, 64, "bfloat16", True, "bottom_right"),
    AttentionCase(1, 2, 2, 1000, 333, 64, "float16", True),
]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.name)
def test_gradient_rule(case):
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name), kernel="gluon_pipelined")
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}
