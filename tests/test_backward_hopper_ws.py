"""The warp-specialized Gluon Hopper backward (flashcore/kernels/backward_hopper_ws.py) and the
backward dispatch that sends calls to it (flashcore/dispatch.py: ``backward_kernel``,
FLASHCORE_BACKWARD_HOPPER, ``attention(..., deterministic=False)``).

On any machine: the import guard, the dispatch rules in every mode, the launcher's plumbing,
and an offline compile for sm_90 (the register split between consumers and workers, the TMA
reduce-add in the SASS, no spills inside the step at D128, shared memory within 227 KB). On a
Hopper GPU: gradients under the gradient rule on the pipelined kernel's edge cases (its ring,
dS buffers and dQ handoff at 1, 2, 3 and many steps), and the autograd door under both ways
in. The planted bug and the GQA row coverage are tests/test_backward_hopper.py's,
parametrized over every Gluon backward."""

import functools

import pytest
import torch
from conftest import DEVICE, HAS_HOPPER, case_seed, offline_report
from test_backward_hopper_pipelined import GPU_CASES, record_launch

import flashcore
from flashcore import dispatch
from flashcore.kernels import backward_hopper as bh
from flashcore.kernels import backward_hopper_ws as bhw
from flashcore.results import read_result
from flashcore.validate import AttentionCase
from flashcore.validate_backward import (
    GRADIENTS,
    check_grad_case,
    make_grad_inputs,
    rule_rejects,
)

needs_hopper = pytest.mark.skipif(
    not (HAS_HOPPER and bhw.GLUON_AVAILABLE), reason="needs a Hopper GPU and triton with Gluon"
)


def test_import_guard_and_supports_on_cpu():
    assert bhw.GLUON_AVAILABLE is bh.GLUON_AVAILABLE
    for d in (64, 256):
        q = torch.zeros(1, 2, 8, d, dtype=torch.float16)
        assert not bhw.supports(q, q, q)  # CPU tensors never take the Gluon path


def _meta(s, d):
    return torch.empty(2, 4, s, d, device="meta", dtype=torch.bfloat16)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_dispatch_rules(monkeypatch, d):
    """auto: each mode from its table's S on (min of Sq, Sk), the deterministic mode for the
    default and the atomic one for deterministic=False; always: wherever supported, in the
    mode asked for; never: Triton; an unsupported call: Triton in every mode; an unknown mode:
    a clear error. Each mode's ``info`` line says so."""
    monkeypatch.setattr(dispatch._backward_hopper_ws, "supports", lambda q, k, v, **kw: True)
    monkeypatch.delenv("FLASHCORE_BACKWARD_HOPPER", raising=False)

    def pick(sq, sk, causal=False, deterministic=False):
        q, k = _meta(sq, d), _meta(sk, d)
        return dispatch.backward_kernel(q, k, k, causal=causal, deterministic=deterministic)

    for causal in (False, True):
        for deterministic, table, kernel in [
            (False, dispatch.BACKWARD_GLUON_FROM, "gluon_ws"),
            (True, dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM, "gluon_ws_det"),
        ]:
            ordered_s = dispatch.BACKWARD_ORDERED_FOR_ATOMIC_FROM.get((d, causal))
            from_s = table.get((d, causal))
            if from_s is None:  # never this mode: Triton, or the ordered mode from its S
                assert not deterministic and ordered_s is not None
                assert pick(ordered_s - 1, ordered_s - 1, causal, deterministic) == "triton"
                continue
            ordered = not deterministic and ordered_s is not None  # measured faster from ordered_s
            below = "gluon_ws_det" if ordered and from_s - 1 >= ordered_s else "triton"
            if ordered and from_s >= ordered_s:
                kernel = "gluon_ws_det"
            assert pick(from_s, from_s, causal, deterministic) == kernel
            assert pick(from_s - 1, 4 * from_s, causal, deterministic) == below
            assert pick(4 * from_s, from_s - 1, causal, deterministic) == below
        # deterministic=False runs the ordered mode from its own table's S, the atomic one from
        # its table's S below that, else the Triton backward
        ordered_s = dispatch.BACKWARD_ORDERED_FOR_ATOMIC_FROM.get((d, causal))
        if ordered_s is not None:
            assert pick(ordered_s, 2 * ordered_s, causal, False) == "gluon_ws_det"
            atomic_s = dispatch.BACKWARD_GLUON_FROM.get((d, causal), float("inf"))
            below = pick(ordered_s - 1, ordered_s - 1, causal, False)
            assert below == ("gluon_ws" if ordered_s - 1 >= atomic_s else "triton")
    info = dispatch.describe_backward_dispatch()
    assert "deterministic=False" in info and "backward_ws_modes.json" in info
    monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", "always")
    assert pick(1, 1, deterministic=True) == "gluon_ws_det"
    assert pick(1, 1, deterministic=False) == "gluon_ws"
    assert "FLASHCORE_BACKWARD_HOPPER=always" in dispatch.describe_backward_dispatch()
    monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", "never")
    assert pick(16384, 16384) == "triton"
    assert "never" in dispatch.describe_backward_dispatch()
    monkeypatch.setattr(dispatch._backward_hopper_ws, "supports", lambda q, k, v, **kw: False)
    for mode in dispatch.BACKWARD_MODES:
        monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", mode)
        assert pick(16384, 16384) == "triton"
    monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", "sometimes")
    with pytest.raises(ValueError, match="FLASHCORE_BACKWARD_HOPPER must be"):
        pick(16384, 16384)


@pytest.mark.parametrize("deterministic", [True, False])
def test_unsupported_calls_fall_back_to_triton(monkeypatch, deterministic):
    # On a CPU (or with fp32 inputs) the Gluon path is never taken, even under "always" and
    # deterministic=False: the Triton backward runs and its gradients pass the rule.
    monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", "always")
    case = AttentionCase(1, 2, 1, 17, 17, 16, "float32", True)
    q, k, v, do = make_grad_inputs(case, DEVICE, 3)
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    flashcore.attention(q, k, v, causal=True, deterministic=deterministic).backward(do)
    assert rule_rejects((q.grad, k.grad, v.grad), q, k, v, do, causal=True) == {
        g: True for g in GRADIENTS
    }


def test_triton_path_stays_deterministic_for_deterministic_false(monkeypatch):
    # Where the Gluon backward does not run, deterministic=False runs the Triton backward's
    # deterministic mode (faster than its atomic mode at every shape of backward.json): the
    # mode the autograd Function asks for is checked, not only the bits (which the atomic
    # mode could happen to match on a small case), and the gradients are the default's.
    from flashcore import interface

    monkeypatch.delenv("FLASHCORE_BACKWARD_HOPPER", raising=False)
    modes = []
    launch = interface._backward.attention_backward
    monkeypatch.setattr(
        interface._backward,
        "attention_backward",
        lambda *a, **k: modes.append(k["deterministic"]) or launch(*a, **k),
    )
    case = AttentionCase(1, 2, 1, 40, 40, 16, "float32", True)
    q, k, v, do = make_grad_inputs(case, DEVICE, 4)
    grads = []
    for deterministic in (True, False):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        flashcore.attention(*leaves, causal=True, deterministic=deterministic).backward(do)
        grads.append([t.grad for t in leaves])
    assert modes == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_deterministic_is_no_forward_option():
    # The flag is the backward's: without autograd it changes nothing, and the forward never
    # receives it.
    case = AttentionCase(1, 2, 2, 9, 9, 16, "float32", False)
    q, k, v, _ = make_grad_inputs(case, DEVICE, 1)
    a = flashcore.attention(q, k, v, deterministic=False)
    b = flashcore.attention(q, k, v)
    assert torch.equal(a, b)
    from flashcore.interface import _FORWARD_DEFAULTS

    assert "deterministic" not in _FORWARD_DEFAULTS


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_launcher_binds_every_kernel_argument(monkeypatch, d, deterministic):
    """The launcher on a CPU (``record_launch``): every parameter bound, descriptors of the
    head dim's BLOCK_M (dQ's fp32 buffer in BLOCK_M x D blocks, for the reduce-add) and 8
    consumer warps; in the deterministic mode, one zeroed int32 counter per query tile."""
    if not bhw.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    if deterministic:
        monkeypatch.setattr(
            bhw,
            "attention_backward_hopper_ws",
            functools.partial(bhw.attention_backward_hopper_ws, deterministic=True),
        )
    zeroed_flags = []

    def accumulator(q, *, zeroed, partials=1):  # zeros either way: no kernel runs here
        zeroed_flags.append((zeroed, partials))
        return torch.zeros((partials * q.shape[0], *q.shape[1:]), device=q.device)

    monkeypatch.setattr(bhw, "_dq_accumulator", accumulator)
    grid, bound, q = record_launch(
        monkeypatch, bhw, "attention_backward_hopper_ws", bhw._bwd_hopper_ws_kernel, d
    )
    assert bound["DETERMINISTIC"] is deterministic
    # the atomic mode adds into zeros; the deterministic mode stores each tile's first add
    # (record_launch's causal offset is 60, so every query tile sees a key)
    # (one accumulator: the call is causal)
    assert zeroed_flags == [(not deterministic, 1)] and bound["dq_partials"] == 1
    block_m, block_n = bhw.BLOCK_M_FOR[d], bhw.BLOCK_N_FOR[d]
    # (key blocks: 130 keys in blocks of 128, or of 64 at D256; batch * KV heads)
    assert grid == (-(-130 // block_n), 4)
    assert (bound["BLOCK_M"], bound["BLOCK_N"]) == (block_m, block_n)
    assert (bound["STAGES"], bound["DQ_BUFFERS"]) == ((1, 1) if d == 256 else (2, 2))
    assert bound["SPLIT_COLUMNS"] is bhw.SPLIT_COLUMNS_FOR[d]
    assert bound["HEAD_DIM"] == d and bound["IS_CAUSAL"] is True and bound["num_warps"] == 8
    assert bound["DK_FROM_SMEM"] is bhw.DK_FROM_SMEM_FOR[d]
    # (the call is causal: rows at D64 in the deterministic mode, columns in the atomic one)
    assert bound["DQ_SPLIT_ROWS"] is (d == 64 and deterministic)
    descs = [bound[n] for n in ("q_desc", "k_desc", "do_desc", "dq_desc")]
    assert [x.block_shape for x in descs] == [
        [1, 1, block_m, d],
        [1, 1, block_n, d],
        [1, 1, block_m, d],
        [1, 1, block_m, d],
    ]
    assert bound["dq_desc"].base.dtype == torch.float32 and bound["dq_desc"].base.shape == q.shape
    if deterministic:  # (B * Hq * query tiles) counters, all zero
        b, hq, sq = q.shape[:3]
        lock = bound["Lock"]
        assert lock.dtype == torch.int32 and lock.shape == (b * hq * -(-sq // block_m),)
        assert not lock.any()


def test_dispatch_tables_are_the_rule_applied_to_their_record():
    """The three backward tables in dispatch.py are what ``tables_from_record`` derives from
    the committed record they cite (BACKWARD_TABLES_RECORD): a re-recorded kernel whose
    numbers move a threshold fails here until the tables follow."""
    rows = read_result(*dispatch.BACKWARD_TABLES_RECORD)["speed"]
    assert {r["impl"] for r in rows} == {"gluon_ws", "gluon_ws_det", "triton"}
    assert dispatch.tables_from_record(rows) == (
        dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM,
        dispatch.BACKWARD_GLUON_FROM,
        dispatch.BACKWARD_ORDERED_FOR_ATOMIC_FROM,
    )


def test_tables_from_record_needs_every_longer_length():
    """A mode that wins at 2K and 8K/16K but loses at 4K starts at 8K; one that never clears
    the margin has no entry."""
    rows = []
    for s, ws, tri in [(2048, 110, 100), (4096, 100, 100), (8192, 110, 100), (16384, 120, 100)]:
        rows += [
            dict(impl="gluon_ws_det", D=64, causal=False, S=s, tflops=ws),
            dict(impl="gluon_ws", D=64, causal=False, S=s, tflops=101),
            dict(impl="triton", D=64, causal=False, S=s, tflops=tri),
        ]
    det, atomic, ordered = dispatch.tables_from_record(rows)
    assert det == {(64, False): 8192} and atomic == {}
    assert ordered == {(64, False): 8192}  # 110 vs 101 and on; 100 < 101 at 4K


def test_tables_from_record_leaves_out_unreachable_atomic_entries():
    """An atomic entry from an S where the ordered mode already runs is left out; one below
    that S is kept (the ordered mode from 4K, the atomic one from 2K or from 8K)."""
    for atomic_from, expected in [(2048, {(64, False): 2048}), (8192, {})]:
        rows = []
        for s in (2048, 4096, 8192, 16384):
            ws = 110 if s >= atomic_from else 100
            rows += [
                dict(impl="gluon_ws_det", D=64, causal=False, S=s, tflops=120 if s >= 4096 else 90),
                dict(impl="gluon_ws", D=64, causal=False, S=s, tflops=ws),
                dict(impl="triton", D=64, causal=False, S=s, tflops=100),
            ]
        _, atomic, ordered = dispatch.tables_from_record(rows)
        assert ordered == {(64, False): 4096} and atomic == expected


# Run in a subprocess with the interpreter off (this process runs it): each config compiled
# for sm_90, with ptxas's resources and the SASS's register reallocations and reduce-adds.
_REPORT = r"""
import json, re
from triton.experimental.gluon import language as gl
from flashcore.kernels import backward_hopper_ws as bhw
from flashcore.studies.sass import compile_kernel, disassemble, resource_usage


def report(d, causal, dtype, det, split):
    bm, bn = bhw.BLOCK_M_FOR[d], bhw.BLOCK_N_FOR[d]
    gd = gl.bfloat16 if dtype == "bf16" else gl.float16

    def desc(rows, t=dtype, g=gd):
        layout = gl.NVMMASharedLayout.get_default_for([rows, d], g)
        return f"tensordesc<{t}[1,1,{rows},{d}],{layout!r}>"

    spec = dict(
        fn=bhw._bwd_hopper_ws_kernel, gluon=True,
        pointers={"Lse": "*fp32", "Delta": "*fp32", "Lock": "*i32", "dK": f"*{dtype}",
                  "dV": f"*{dtype}"},
        floats={"qk_scale", "sm_scale"},
        consts=dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGES=bhw.STAGES_FOR[d],
                    IS_CAUSAL=causal, DETERMINISTIC=det, DK_FROM_SMEM=bhw.DK_FROM_SMEM_FOR[d],
                    DQ_BUFFERS=bhw.DQ_BUFFERS_FOR[d], SPLIT_COLUMNS=split,
                    DQ_SPLIT_ROWS=bhw.DQ_SPLIT_ROWS_FOR.get((d, det, causal), False)),
        num_warps=bhw.NUM_WARPS, num_stages=1,
        descs={"q_desc": desc(bm), "do_desc": desc(bm), "k_desc": desc(bn),
               "v_desc": desc(bn), "dq_desc": desc(bm, "fp32", gl.float32)},
    )
    c = compile_kernel(spec)
    r = resource_usage(c)
    sass = disassemble(c.asm["cubin"])
    regs = re.findall(r"USETMAXREG\S* (?:UP\d, )?(0x[0-9a-f]+)", sass)
    r["setmaxnreg"] = sorted({int(x, 16) for x in regs})
    r["reduce_adds"] = sass.count("UTMAREDG")
    r["tma_stores"] = sass.count("UTMASTG")  # the deterministic mode's first adds
    # spill traffic between the first and the last wgmma: inside the consumers' step
    lines = sass.splitlines()
    mma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    r["step_spills"] = sum(("STL" in x or "LDL" in x) for x in lines[mma[0] : mma[-1]])
    # waits on the wgmma pipeline: a few a step, or one after every wgmma where ptxas
    # serializes them (its warning C7512: too few registers for the async accumulators)
    r["wgmma_waits"] = sass.count("WARPGROUP.DEPBAR")
    return r


# every (causal, dtype) in the atomic mode; bf16 in the deterministic mode
CONFIGS = [(c, t, False) for c in (False, True) for t in ("fp16", "bf16")]
CONFIGS += [(c, "bf16", True) for c in (False, True)]
out = {}
for d in (64, 128, 256):
    for causal, dtype, det in CONFIGS:
        name = f"D{d} {'causal' if causal else 'full'} {dtype}{' deterministic' if det else ''}"
        out[name] = report(d, causal, dtype, det, bhw.SPLIT_COLUMNS_FOR[d])
# the split-columns step at D64/D128 (off there, SPLIT_COLUMNS_FOR: measured slower), still
# compiled so that the table stays a switch: bf16, both masks
for d in (64, 128):
    for causal in (False, True):
        name = f"D{d} {'causal' if causal else 'full'} bf16 split columns (trial)"
        out[name] = report(d, causal, "bf16", False, True)
print(json.dumps(out))
"""


def test_offline_compile_for_sm90(record_property):
    """Compiled for sm_90 without a GPU: wgmma and the TMA reduce-add in the SASS; registers
    reallocated to 240 a consumer thread and 24 a worker thread; shared memory within Hopper's
    227 KB (two dQ buffers included); at D128 no spill inside the step. D64 (BLOCK_M 128: S^T
    and dP^T are 64 fp32 registers a thread each) may spill a few inside the step: bounded
    here so that more would fail (measured faster than 64-row tiles without spills: the
    kernel's BLOCK_M_FOR). At both head dims the wgmmas run as issued, a few waits a step:
    where ptxas lacks the registers it serializes every one (its warning C7512, about 40 waits
    at D64 while dK read dS^T from registers there), which this bound catches."""
    pytest.importorskip("triton.experimental.gluon")
    if not bhw.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    report = offline_report(_REPORT)
    assert len(report) == 22
    for name, r in report.items():
        record_property(
            "measured",
            f"backward_hopper_ws {name}: {r['n_regs']} registers at launch, setmaxnreg "
            f"{r['setmaxnreg']}, {r['n_spills']} spill stores, {r['stack']} B stack, "
            f"{r['shared']} B shared, {r['hgmma']} HGMMA, {r['reduce_adds']} reduce-adds, "
            f"{r['tma_stores']} TMA stores, "
            f"{r['step_spills']} spill instructions inside the step, "
            f"{r['wgmma_waits']} wgmma waits",
        )
        assert r["hgmma"] > 0 and r["reduce_adds"] > 0, (name, r)
        assert (r["tma_stores"] > 0) is name.endswith("deterministic"), (name, r)
        if name.endswith("(trial)"):  # the split-columns step at D64/D128: no spill at all
            assert r["step_spills"] == 0 and r["n_spills"] <= 8, (name, r)
            continue
        assert r["setmaxnreg"] == [24, 240], (name, r)
        assert r["shared"] <= 227 * 1024, (name, r)
        assert r["wgmma_waits"] <= 8, (name, r)  # the wgmmas overlap as issued
        if name.startswith(("D128", "D256")):
            assert r["step_spills"] == 0 and r["n_spills"] <= 8 and r["stack"] <= 32, (name, r)
        else:
            assert r["n_spills"] <= 16 and r["stack"] <= 64, (name, r)
    # D64's dQ split by rows (DQ_SPLIT_ROWS_FOR): 8 wgmmas of 64 columns a step where the
    # column split issues 16 of 32 (the atomic causal builds keep the columns)
    columns = report["D64 causal bf16"]["hgmma"]
    assert report["D64 causal fp16"]["hgmma"] == columns
    for name in ("D64 full bf16", "D64 full fp16", "D64 full bf16 deterministic",
                 "D64 causal bf16 deterministic"):  # fmt: skip
        assert report[name]["hgmma"] == columns - 8, (name, report[name]["hgmma"], columns)


def test_dq_postprocess_scales_and_casts():
    """dQ = scale * dQ_acc in dQ's dtype and strides (a (B, S, H, D) view here, an odd S),
    under the error rule against float64; a head dim the kernel cannot tile is refused."""
    from flashcore.kernels.backward import dq_postprocess
    from flashcore.validate import error_rule

    gen = torch.Generator(device=DEVICE).manual_seed(3)
    acc = torch.randn(2, 3, 70, 64, generator=gen, device=DEVICE)
    dq = torch.full((2, 70, 3, 64), float("nan"), dtype=torch.float16, device=DEVICE)
    dq = dq.transpose(1, 2)
    dq_postprocess(acc, dq, 0.3)
    report = error_rule(dq, acc.double() * 0.3, torch.mul(acc, 0.3).to(torch.float16))
    assert report.passed, report
    with pytest.raises(ValueError, match="power-of-two head dim"):
        dq_postprocess(torch.zeros(1, 1, 4, 96), torch.zeros(1, 1, 4, 96), 1.0)


@pytest.mark.parametrize("deterministic", [False, True])
def test_launcher_sizes_the_partial_accumulators(monkeypatch, deterministic):
    """A non-causal D256 call on a CPU (``record_launch``): the deterministic mode sums into
    min(DQ_PARTIALS_FOR, key blocks) accumulators (130 keys: 3 blocks of 64), so dQ's fp32
    buffer, its descriptor and the turn counters are that many times the single ones, and the
    kernel is told the count; the atomic mode keeps one."""
    if not bhw.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    monkeypatch.setattr(
        bhw,
        "attention_backward_hopper_ws",
        functools.partial(bhw.attention_backward_hopper_ws, deterministic=deterministic),
    )
    asked = []

    def accumulator(q, *, zeroed, partials=1):  # zeros: no kernel writes it here
        asked.append(partials)
        return torch.zeros((partials * q.shape[0], *q.shape[1:]), device=q.device)

    monkeypatch.setattr(bhw, "_dq_accumulator", accumulator)
    _, bound, q = record_launch(
        monkeypatch, bhw, "attention_backward_hopper_ws", bhw._bwd_hopper_ws_kernel, 256,
        is_causal=False,
    )  # fmt: skip
    partials = min(bhw.DQ_PARTIALS_FOR[256], 3) if deterministic else 1  # 3 key blocks
    b, hq, sq = q.shape[:3]
    assert asked == [partials] and bound["IS_CAUSAL"] is False and bound["dq_partials"] == partials
    assert bound["dq_desc"].base.shape == (partials * b, *q.shape[1:])
    if deterministic:
        lock = bound["Lock"]
        assert lock.shape == (partials * b * hq * -(-sq // bhw.BLOCK_M_FOR[256]),)
        assert not lock.any()


def test_dq_postprocess_sums_stacked_accumulators():
    """P accumulators stacked along the batch are summed (in order), scaled and cast, under the
    error rule against float64; a buffer that is not a whole number of them is refused."""
    from flashcore.kernels.backward import dq_postprocess
    from flashcore.validate import error_rule

    gen = torch.Generator(device=DEVICE).manual_seed(4)
    acc = torch.randn(3 * 2, 3, 70, 64, generator=gen, device=DEVICE)
    dq = torch.empty(2, 3, 70, 64, dtype=torch.float16, device=DEVICE)
    dq_postprocess(acc, dq, 0.3)
    parts = acc.view(3, 2, 3, 70, 64)
    same = (torch.mul(parts[0] + parts[1] + parts[2], 0.3)).to(torch.float16)
    report = error_rule(dq, parts.double().sum(0) * 0.3, same)
    assert report.passed, report
    with pytest.raises(ValueError, match="stacked along the batch"):
        dq_postprocess(torch.zeros(5, 3, 70, 64), dq, 1.0)


def test_deterministic_partials():
    """The deterministic mode's accumulators (``_dq_partials``): several only for non-causal
    calls at a head dim whose table says so and up to DQ_PARTIALS_MAX_SEQLEN_K keys, never
    more than the key blocks, one for the atomic mode; and the writer's order in each is a
    permutation of its key blocks' ranks (the Python mirror of ``_dq_writer``'s rank:
    (top - k) // P in accumulator k % P)."""
    for d, p in bhw.DQ_PARTIALS_FOR.items():
        block_n = bhw.BLOCK_N_FOR[d]
        longest = bhw.DQ_PARTIALS_MAX_SEQLEN_K
        assert bhw._dq_partials(d, longest, deterministic=True, is_causal=False) == p
        assert bhw._dq_partials(d, longest + 1, deterministic=True, is_causal=False) == 1
        assert bhw._dq_partials(d, longest, deterministic=True, is_causal=True) == 1
        assert bhw._dq_partials(d, longest, deterministic=False, is_causal=False) == 1
        assert bhw._dq_partials(d, block_n, deterministic=True, is_causal=False) == 1
    for n_k, p in [(1, 1), (7, 4), (32, 4), (130, 4), (9, 2)]:
        top = n_k - 1
        for acc in range(p):
            ranks = sorted((top - k) // p for k in range(n_k) if k % p == acc)
            assert ranks == list(range(len(ranks)))  # 0 (a plain store) first, no gap


# --------------------------------------------------------------------------- Hopper GPU


# D256 (_consumers_split_columns: 64-key blocks, one ring stage): 1, 2, 3 and many steps, ragged
# tails, GQA, both causal alignments, the (B, S, H, D) layout
D256_CASES = [
    AttentionCase(1, 2, 2, 1, 1, 256, "float16", False),
    AttentionCase(1, 2, 2, 150, 90, 256, "bfloat16", False),
    AttentionCase(2, 4, 2, 100, 130, 256, "float16", True),
    AttentionCase(1, 4, 2, 129, 257, 256, "bfloat16", True, "bottom_right"),
    AttentionCase(1, 4, 1, 333, 200, 256, "bfloat16", False, "top_left", "bshd"),
    AttentionCase(1, 2, 2, 1000, 333, 256, "float16", True),
    AttentionCase(1, 2, 2, 400, 150, 256, "bfloat16", True, "bottom_right"),
]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["gluon_ws", "gluon_ws_det"])  # atomic, deterministic
@pytest.mark.parametrize("case", GPU_CASES + D256_CASES, ids=lambda c: c.name)
def test_gradient_rule(case, kernel):
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name), kernel=kernel)
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


# Bottom-right causal with Sq > Sk: the first query tiles see no key, so no program adds to
# them and the deterministic mode's buffer is zeroed there.
UNSEEN_TILE_CASES = [
    AttentionCase(1, 4, 2, 400, 150, 128, "bfloat16", True, "bottom_right"),
    AttentionCase(1, 2, 2, 300, 70, 64, "float16", True, "bottom_right"),
]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES + D256_CASES + UNSEEN_TILE_CASES, ids=lambda c: c.name)
def test_deterministic_mode_writes_every_dq_element(monkeypatch, case):
    """The deterministic mode's dQ buffer is left as allocated where every query tile has a
    first add (a store): filled with NaN here instead, the gradients still pass the rule with
    no NaN, so the stores cover every element, in each of D256's accumulators (non-causal:
    ``DQ_PARTIALS_FOR``) too. Where a tile has no add the buffer is zeroed."""
    made = []

    def poisoned(q, *, zeroed, partials=1):
        made.append(zeroed)
        fill = 0.0 if zeroed else float("nan")
        shape = (partials * q.shape[0], *q.shape[1:])
        return torch.full(shape, fill, dtype=torch.float32, device=q.device)

    monkeypatch.setattr(bhw, "_dq_accumulator", poisoned)
    row = check_grad_case(case, DEVICE, seed=case_seed(case.name), kernel="gluon_ws_det")
    unseen = case.causal and case.alignment == "bottom_right" and case.seqlen_q > case.seqlen_k
    assert made == [unseen]
    for g in GRADIENTS:
        assert row[g]["nan_mismatch"] == 0, f"{g}: unwritten or spurious NaN elements"
    assert row["passed"], {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("way_in", ["table", "always"])
@pytest.mark.parametrize("causal", [False, True])
def test_autograd_takes_it(monkeypatch, way_in, causal, deterministic):
    # Through each table (lowered to this small case) or FLASHCORE_BACKWARD_HOPPER=always, the
    # kernel runs in the mode the caller asked for, and its gradients pass the rule.
    modes = []
    launch = bhw.attention_backward_hopper_ws
    monkeypatch.setattr(
        bhw,
        "attention_backward_hopper_ws",
        lambda *a, **k: modes.append(k["deterministic"]) or launch(*a, **k),
    )
    if way_in == "always":
        monkeypatch.setenv("FLASHCORE_BACKWARD_HOPPER", "always")
    else:
        monkeypatch.delenv("FLASHCORE_BACKWARD_HOPPER", raising=False)
        table = (
            dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM
            if deterministic
            else dispatch.BACKWARD_GLUON_FROM
        )
        monkeypatch.setitem(table, (128, causal), 1)
    case = AttentionCase(2, 8, 2, 300, 300, 128, "bfloat16", causal, "bottom_right", "bshd")
    q, k, v, do = make_grad_inputs(case, DEVICE, 7)
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    kw = dict(causal=causal, causal_alignment="bottom_right")
    flashcore.attention(q, k, v, deterministic=deterministic, **kw).backward(do)
    assert modes == [deterministic], "the warp-specialized Gluon backward did not run as asked"
    assert rule_rejects((q.grad, k.grad, v.grad), q, k, v, do, **kw) == {g: True for g in GRADIENTS}


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [True, False])
def test_default_stays_deterministic(monkeypatch, gluon):
    # The default (deterministic=True, mode auto) runs the Gluon kernel's deterministic mode
    # where its table says (lowered here to this case) and the Triton backward elsewhere (the
    # atomic mode's table lowered: it must not be used): two backwards agree bitwise.
    monkeypatch.delenv("FLASHCORE_BACKWARD_HOPPER", raising=False)
    modes = []
    launch = bhw.attention_backward_hopper_ws
    monkeypatch.setattr(
        bhw,
        "attention_backward_hopper_ws",
        lambda *a, **k: modes.append(k["deterministic"]) or launch(*a, **k),
    )
    monkeypatch.setitem(dispatch.BACKWARD_GLUON_FROM, (128, True), 1)
    if gluon:
        monkeypatch.setitem(dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM, (128, True), 1)
    case = AttentionCase(1, 4, 4, 700, 700, 128, "bfloat16", True)
    q, k, v, do = make_grad_inputs(case, DEVICE, 9)
    grads = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        flashcore.attention(*leaves, causal=True).backward(do)
        grads.append([t.grad for t in leaves])
    assert modes == ([True, True] if gluon else [])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


# Many key blocks a query tile (so the order of dQ's adds could vary), GQA, both alignments,
# Sq > Sk bottom-right (query tiles no key block sees: their counters are never waited on) and
# Sq < Sk (key blocks whose turn comes after the last tile's).
DETERMINISM_CASES = [
    AttentionCase(2, 8, 2, 1500, 1500, 128, "bfloat16", False),
    AttentionCase(2, 8, 2, 1500, 1500, 128, "bfloat16", True),
    AttentionCase(1, 4, 4, 1100, 1900, 64, "float16", True, "bottom_right"),
    AttentionCase(1, 4, 1, 1900, 700, 128, "bfloat16", True, "bottom_right"),
    AttentionCase(1, 4, 2, 1900, 700, 64, "bfloat16", True, "top_left"),
]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=lambda c: c.name)
def test_deterministic_mode_is_bitwise_reproducible(case):
    """Four backwards of the deterministic mode agree bit for bit, and pass the rule."""
    q, k, v, do = make_grad_inputs(case, DEVICE, 13)
    bottom_right = case.causal and case.alignment == "bottom_right"
    offset = case.seqlen_k - case.seqlen_q if bottom_right else 0
    kw = dict(causal=case.causal)
    if case.causal:
        kw["causal_alignment"] = case.alignment
    with torch.no_grad():
        out, lse = flashcore.attention(q, k, v, return_lse=True, **kw)
        runs = []
        for _ in range(4):
            grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
            bhw.attention_backward_hopper_ws(
                do, q, k, v, out, lse, *grads, causal_offset=offset, is_causal=case.causal,
                scale=case.head_dim**-0.5, deterministic=True,
            )  # fmt: skip
            runs.append(grads)
    for again in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], again))
    assert rule_rejects(runs[0], q, k, v, do, **kw) == {g: True for g in GRADIENTS}


def test_race_probe_compiles_each_hand_off():
    """tools/mbarrier_race_probe.py (the lse/delta ring's hand-off alone, for racecheck on a
    GPU) compiles for sm_90: every synchronized variant arrives on and waits for mbarriers,
    the expect-tx one issues its TMA copy, and the unsynchronized control has no mbarrier
    operation at all (a plain race; with only the consumers' wait removed it hung)."""
    pytest.importorskip("triton.experimental.gluon")
    if not bhw.GLUON_AVAILABLE:
        pytest.skip("this triton has no Gluon Hopper API")
    counts = offline_report(
        "import json, sys; sys.path.insert(0, 'tools'); import mbarrier_race_probe as p; "
        "print(json.dumps(p.offline_counts()))"
    )
    assert set(counts) == {"plain", "no_warp_bar", "expect_tx", "unsync"}
    synced = [v for v in counts if v != "unsync"]
    assert all(counts[v]["SYNCS.ARRIVE"] > 0 and counts[v]["SYNCS.PHASECHK"] > 0 for v in synced)
    assert counts["expect_tx"]["UTMALDG"] > 0 and counts["plain"]["UTMALDG"] == 0
    assert counts["unsync"]["SYNCS.ARRIVE"] == counts["unsync"]["SYNCS.PHASECHK"] == 0
