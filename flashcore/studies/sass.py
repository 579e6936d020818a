"""Offline SASS inspection: compile for sm_90 without a GPU, build the control-flow graph,
and classify every branch and predicated memory access by where its predicate comes from.

What "constant-time" can mean for attention: the kernel's time may depend on the shapes
(public: batch, heads, lengths, causal) but should not depend on the values in q, k, v.
The machine-code question is therefore: does any branch, or any guarded memory access,
depend on a value loaded from memory?

Method: a forward taint analysis over the basic-block graph. Each register / predicate
carries two bits:

* ``data``: derived from a value read from global or shared memory (LDG, LDS, LDSM, LD,
  ATOM*, local-memory spills, conservatively) or produced by the tensor cores (HGMMA,
  HMMA, ...), which only ever multiply loaded values;
* ``sync``: derived from a barrier / mbarrier try-wait (SYNCS.PHASECHK...): these loops
  wait for asynchronous copies; their trip count depends on memory latency, not on values.

Everything else propagates: an instruction's results carry the union of its operands' bits
(kernel parameters ``c[..][..]``, thread/block ids and immediates carry none). A write under
a guard predicate keeps the old bits and adds the guard's (implicit flow). Flow-sensitive:
each block starts from the union of its predecessors' exit states, iterated to a fixpoint,
and a plain write replaces a register's bits. Special-function results (MUFU) and FCHK are
data exactly when their inputs are: MUFU.RCP of a sequence length is public.

Registers that ptxas uses as packed predicate masks are tracked per bit: ``LOP3.LUT`` with an
immediate mask clears, sets or tests single bits, and ``P2R`` / ``R2P`` move predicates
P0..P6 into and out of register bits. A bit test then depends on that bit's writers only,
not on whatever the allocator left in the register's other bits (in the epilogues of the
forward and decode kernels, a reused register that held a softmax value or a loaded element
carries the row masks of the output stores). Indirect branches (``BRX``) have their jump
tables as successors.

Shared memory is not modelled by address: every LDS is data. This over-approximates loads of
slots written only with public values, such as the one-byte-per-warp dispatch table through
which Triton's warp_specialize lowering sends worker warps to their partition (constant
STS before a named barrier, LDS + BRX after it); telling them apart would need the extent of
every TMA write, which lives in the tensor map, not in the instruction.

A branch (BRA/EXIT/... under a guard, BRX/JMX through a register) or a guarded memory
access is classified ``data`` if its predicate carries the data bit, else ``sync`` if it
carries the sync bit, else ``public``. Memory accesses whose *address* registers carry the
data bit are listed too (a value-dependent address is the classic cache-timing leak).

Compilation needs no GPU: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``
runs ptxas from the triton wheel; the cubin is disassembled whole by the bundled nvdisasm
(``asm["sass"]`` stops at 4096 instructions, see ``disassemble``). The kernels must not be
in interpreter mode, so when TRITON_INTERPRET is set (CPU notebooks) ``analyze_variants``
runs the compilation in a subprocess.

The analysis (parsing, control-flow graph, taint, classes) is in ``sass_flow``; this module
compiles the kernels flashcore ships and runs it on each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .sass_flow import PARAM_BASE, analyze_sass, cfg_edges, parse_sass

__all__ = ["analyze_sass", "analyze_variants", "cfg_edges", "compile_sass", "parse_sass"]


# ----------------------------------------------------------------------------- variants


# The Gluon forward as compile specs (``compile_kernel``), shared by _variants and
# studies/sass_budget.py.
def _gluon_consts(fh, d, causal, cfg, **extra):
    # The constexprs every launch of the Gluon kernel sets, for one tile config.
    num_wg = cfg.get("NUM_WG", 2)
    return dict(
        HEAD_DIM=d,
        BLOCK_N=cfg["BLOCK_N"],
        STAGES=cfg["STAGES"],
        IS_CAUSAL=causal,
        STORE_LSE=False,
        # The shipped ping-pong turn (fp16/bf16: per head dim; the FP8 mode: an mbarrier).
        PINGPONG=1 if extra.get("FP8") else fh._turns(True, d),
        NUM_WG=num_wg,
        CONSUMER_REGS=fh.CONSUMER_REGS[num_wg],
        **extra,
    )


def gluon_forward_spec(d, causal, dv=None, num_wg=None, exp2_emulated=None):
    # The Gluon Hopper kernel (kernels/forward_hopper.py) in the tile config it ships; dv:
    # v's head dim where it differs (MLA's 192/128: q/k through a main and a tail descriptor).
    # num_wg: consumer warpgroups other than the shipped config's (a candidate config).
    # exp2_emulated: emulated exps of every 8; None: what the launcher picks (_launch_args:
    # EXP2_EMULATED_FULL for non-causal calls, 0 for causal).
    from triton.experimental.gluon import language as gl

    from ..kernels import forward_hopper as fh

    cfg = dict(fh.VARIANTS[d], **({"NUM_WG": num_wg} if num_wg else {}))
    layout = gl.NVMMASharedLayout.get_default_for
    tail = fh.QK_TAIL.get(d, 0)

    def desc(rows, cols=d - tail):
        return f"tensordesc<bf16[1,1,{rows},{cols}],{layout([rows, cols], gl.bfloat16)!r}>"

    if exp2_emulated is None:
        exp2_emulated = 0 if causal else fh.EXP2_EMULATED_FULL.get(d, 0)
    consts = _gluon_consts(
        fh, d, causal, cfg, HEAD_DIM_V=dv or 0, QK_TAIL=tail, EXP2_EMULATED=exp2_emulated
    )
    tails = (
        {"q_tail_desc": desc(fh.BLOCK_M_WG, tail), "k_tail_desc": desc(cfg["BLOCK_N"], tail)}
        if tail
        else {"q_tail_desc": None, "k_tail_desc": None}
    )
    return dict(
        fn=fh._fa3_fwd_kernel,
        gluon=True,
        pointers={"Out": "*bf16", "Lse": "*fp32"},
        floats={"qk_scale"},
        consts=consts,
        num_warps=4,
        num_stages=1,
        descs={
            "q_desc": desc(fh.BLOCK_M_WG),
            "k_desc": desc(cfg["BLOCK_N"]),
            "v_desc": desc(cfg["BLOCK_N"], dv or d),
            **tails,
        },
    )


def gluon_fp8_forward_spec(d, causal):
    # The Gluon kernel's FP8 mode (forward_hopper.attention_hopper_fp8) in the config it
    # ships: e4m3 q, k and v^T through descriptors, fp32 block and channel scales.
    from triton.experimental.gluon import language as gl

    from ..kernels import forward_hopper as fh
    from ..kernels.fp8 import P_SCALE

    cfg = fh.FP8_VARIANTS[d]
    layout = gl.NVMMASharedLayout.get_default_for

    def desc(rows, cols):
        return f"tensordesc<fp8e4nv[1,1,{rows},{cols}],{layout([rows, cols], gl.float8e4nv)!r}>"

    consts = _gluon_consts(fh, d, causal, cfg, FP8=True, P_SCALE=float(P_SCALE), Sinks=None)
    return dict(
        fn=fh._fa3_fwd_kernel,
        gluon=True,
        pointers={
            "Out": "*bf16",
            "Lse": "*bf16",  # the launcher passes out here: never written (no lse)
            "QScale": "*fp32",
            "KScale": "*fp32",
            "VScale": "*fp32",
        },
        floats={"qk_scale", "inv_p_scale"},
        consts=consts,
        num_warps=4,
        num_stages=1,
        descs={
            "q_desc": desc(fh.BLOCK_M_WG, d),
            "k_desc": desc(cfg["BLOCK_N"], d),
            "v_desc": desc(d, cfg["BLOCK_N"]),  # v^T: D rows of BLOCK_N keys
            "q_tail_desc": None,
            "k_tail_desc": None,
        },
    )


def _variants():
    """Every kernel flashcore ships, in the configs the launchers pick on Hopper (bf16), plus
    the two positive controls. GQA needs no variant of its own: the group size is a runtime
    integer, so GQA runs the same binary as MHA."""
    from ..kernels.decode import _decode_combine_kernel, _decode_split_kernel
    from ..kernels.forward import _HOPPER_TABLE, _attn_fwd_kernel
    from .leaky_controls import EXIT_ON_NAN, SKIP_RESCALE, sass_spec

    def fwd(d, causal, long_keys, dtype="bf16", window=False):
        bm, bn, w, st, mode = _HOPPER_TABLE[(d, causal, long_keys)]
        tma = mode in ("tma", "ws")
        consts = dict(
            HEAD_DIM=d,
            HEAD_DIM_PADDED=d,
            BLOCK_M=bm,
            BLOCK_N=bn,
            IS_CAUSAL=causal,
            HAS_WINDOW=window,
            STORE_LSE=False,
            FP32_IEEE=False,
            USE_TMA=tma,
            WARP_SPECIALIZE=mode == "ws",
            SOFTCAP=False,
            VARLEN=0,
        )
        desc = f"tensordesc<{dtype}[1, 1, {bn}, {d}]>" if tma else None
        ptrs = {
            "Q": f"*{dtype}",
            "K": f"*{dtype}",
            "V": f"*{dtype}",
            "Out": f"*{dtype}",
            "Lse": "*fp32",
        }
        return dict(
            fn=_attn_fwd_kernel,
            pointers=ptrs,
            floats={"qk_scale"},
            consts=consts,
            descs={"k_desc": desc, "v_desc": desc},
            num_warps=w,
            num_stages=st,
        )

    def fp8_forward(causal):
        from ..kernels.fp8 import _HOPPER_FP8, P_SCALE, QUANT_BLOCK, _fp8_attn_fwd_kernel

        bm, bn, w, st = _HOPPER_FP8[causal]
        consts = dict(
            HEAD_DIM=128,
            BLOCK_M=bm,
            BLOCK_N=bn,
            QUANT_BLOCK=QUANT_BLOCK,
            P_SCALE=P_SCALE,
            IS_CAUSAL=causal,
            USE_TMA=True,
            EMULATE_P_CAST=False,
            WARP_SPECIALIZE=False,
        )
        ptrs = {
            "Q8": "*fp8e4nv",
            "K8": "*fp8e4nv",
            "V8T": "*fp8e4nv",
            "QScale": "*fp32",
            "KScale": "*fp32",
            "VScale": "*fp32",
            "Out": "*bf16",
        }
        descs = {
            "k_desc": f"tensordesc<fp8e4nv[1, 1, {bn}, 128]>",
            "v_desc": f"tensordesc<fp8e4nv[1, 1, 128, {bn}]>",
        }
        # v is stored transposed: its unit stride is along the keys (stride_vn), not along D.
        return dict(
            fn=_fp8_attn_fwd_kernel,
            pointers=ptrs,
            floats={"qk_scale", "inv_p_scale"},
            consts=consts,
            descs=descs,
            num_warps=w,
            num_stages=st,
            unit_strides={"stride_qk", "stride_kk", "stride_vn", "stride_ok"},
        )

    def decode_split():
        consts = dict(
            HEAD_DIM=128,
            HEAD_DIM_PADDED=128,
            BLOCK_M=16,
            BLOCK_N=64,
            SINGLE_SPLIT=False,
            HAS_WINDOW=False,
            SOFTCAP=False,
            HAS_KEY_MASK=False,
            KeyMask=None,
            BlockTable=None,
        )
        ptrs = {
            "Q": "*bf16",
            "K": "*bf16",
            "V": "*bf16",
            "SeqLens": "*i32",
            "OutPartial": "*fp32",
            "LsePartial": "*fp32",
            "Out": "*bf16",
        }
        # SeqLens, the 4th pointer parameter, holds the cache lengths: public metadata.
        return dict(
            fn=_decode_split_kernel,
            pointers=ptrs,
            floats={"qk_scale"},
            consts=consts,
            descs={},
            num_warps=4,
            num_stages=3,
            public_params=[PARAM_BASE + 3 * 8],
        )

    def decode_combine():
        consts = dict(HEAD_DIM=128, HEAD_DIM_PADDED=128, SPLITS_PADDED=32)
        ptrs = {"OutPartial": "*fp32", "LsePartial": "*fp32", "Out": "*bf16"}
        return dict(
            fn=_decode_combine_kernel,
            pointers=ptrs,
            floats=set(),
            consts=consts,
            descs={},
            num_warps=4,
            num_stages=1,
        )

    from ..kernels.forward_hopper import GLUON_AVAILABLE

    gluon = {}
    if GLUON_AVAILABLE:
        gluon = {
            "forward D64 non-causal (Gluon, three warpgroups)": (
                gluon_forward_spec(64, False),
                "shipped (Gluon)",
            ),
            "forward D128 causal (Gluon, warp-specialized)": (
                gluon_forward_spec(128, True),
                "shipped (Gluon)",
            ),
            "forward D256 non-causal (Gluon, warp-specialized)": (
                gluon_forward_spec(256, False),
                "shipped (Gluon)",
            ),
            "forward D192/128 causal (Gluon, MLA)": (
                gluon_forward_spec(192, True, dv=128),
                "shipped (Gluon)",
            ),
            "fp8 forward D128 causal (Gluon FP8 mode)": (
                gluon_fp8_forward_spec(128, True),
                "shipped (Gluon)",
            ),
            "fp8 forward D256 non-causal (Gluon FP8 mode)": (
                gluon_fp8_forward_spec(256, False),
                "shipped (Gluon)",
            ),
        }
    return {
        **gluon,
        "forward D128 non-causal (TMA)": (fwd(128, False, True), "shipped"),
        "forward D128 causal (TMA)": (fwd(128, True, True), "shipped"),
        "forward D128 causal sliding window (TMA)": (fwd(128, True, True, window=True), "shipped"),
        "forward D64 non-causal (warp-specialized)": (fwd(64, False, True), "shipped"),
        "forward D64 causal (pointer loads)": (fwd(64, True, True), "shipped"),
        "fp8 forward D128 causal (TMA)": (fp8_forward(True), "shipped"),
        "decode split-KV": (decode_split(), "shipped"),
        "decode combine": (decode_combine(), "shipped"),
        # Positive controls: lab kernels (studies/leaky_controls.py), never shipped.
        "control: skip rescale if max unchanged": (sass_spec(SKIP_RESCALE), "leaky control"),
        "control: early exit on NaN": (sass_spec(EXIT_ON_NAN), "leaky control"),
    }


def gluon_backward_spec(d: int, causal: bool, dtype: str = "bf16") -> dict:
    """The Gluon Hopper backward (kernels/backward_hopper.py) in the config it ships, as a
    ``compile_kernel`` spec: tensor descriptors with the launcher's block shapes and layouts."""
    from triton.experimental.gluon import language as gl

    from ..kernels import backward_hopper as bh

    gl_dtype = gl.bfloat16 if dtype == "bf16" else gl.float16

    def desc(rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, d], gl_dtype)
        return f"tensordesc<{dtype}[1,1,{rows},{d}],{layout!r}>"

    return dict(
        fn=bh._bwd_hopper_kernel,
        gluon=True,
        pointers={"Lse": "*fp32", "Delta": "*fp32", "DQacc": "*fp32", "dK": f"*{dtype}",
                  "dV": f"*{dtype}"},
        floats={"qk_scale", "sm_scale"},
        consts=dict(HEAD_DIM=d, BLOCK_M=bh.BLOCK_M, BLOCK_N=bh.BLOCK_N, STAGES=bh.STAGES,
                    IS_CAUSAL=causal),
        num_warps=bh.NUM_WARPS,
        num_stages=1,
        descs={
            "q_desc": desc(bh.BLOCK_M),
            "do_desc": desc(bh.BLOCK_M),
            "k_desc": desc(bh.BLOCK_N),
            "v_desc": desc(bh.BLOCK_N),
        },
    )  # fmt: skip


def resource_usage(compiled) -> dict:
    """What ptxas allotted a compiled kernel, read offline (the driver fills
    ``metadata.n_regs``/``n_spills`` only when it loads the kernel on a GPU): ``n_regs``
    and ``stack`` bytes a thread (cuobjdump -res-usage), ``n_spills`` (local-memory stores,
    STL, in the SASS), ``shared`` (dynamic shared memory, bytes, from the metadata), and the
    counts of wgmma instructions (``hgmma``) and local loads (``ldl``)."""
    import re
    import tempfile

    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "-res-usage", path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    sass = disassemble(compiled.asm["cubin"])
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass, re.M)
    return {
        "n_regs": int(re.search(r"REG:(\d+)", usage).group(1)),
        "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "n_spills": ops.count("STL"),
        "ldl": ops.count("LDL"),
        "hgmma": ops.count("HGMMA"),
        "shared": int(compiled.metadata.shared),
    }


def backward_hopper_report(head_dims=(64, 128), dtypes=("fp16", "bf16")) -> dict:
    """``resource_usage`` of the Gluon backward per (D, causal, dtype), compiled for sm_90;
    {} where this triton has no Gluon. Needs TRITON_INTERPRET off (a subprocess does it
    from a test)."""
    from ..kernels.backward_hopper import GLUON_AVAILABLE

    if not GLUON_AVAILABLE:
        return {}
    return {
        f"D{d} {'causal' if causal else 'full'} {dtype}": resource_usage(
            compile_kernel(gluon_backward_spec(d, causal, dtype))
        )
        for d in head_dims
        for causal in (False, True)
        for dtype in dtypes
    }


def compile_sass(spec: dict, arch: int = 90) -> str:
    return disassemble(compile_kernel(spec, arch).asm["cubin"])


def compile_kernel(spec: dict, arch: int = 90):
    """``triton.compile`` of a spec for sm_``arch`` (no GPU needed): the compiled kernel,
    with ``asm`` (ttgir, ptx, cubin) and ``metadata`` (n_regs, n_spills, shared)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = spec["fn"]
    signature, constexprs = {}, dict(spec["consts"])
    # A constexpr flag the spec leaves out takes its default, as at a launch that omits it
    # (HAS_SINKS=False: the kernel as it runs without sinks).
    defaults = {p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}
    for name in fn.arg_names:
        if name not in constexprs and name in defaults:
            constexprs[name] = defaults[name]
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in spec["pointers"]:
            signature[name] = spec["pointers"][name]
        elif name in spec["descs"]:
            if spec["descs"][name] is None:
                signature[name] = "constexpr"
                constexprs[name] = None
            else:
                signature[name] = spec["descs"][name]
        elif name in spec["floats"]:
            signature[name] = "fp32"
        elif name in spec.get("unit_strides", ()) or (
            "unit_strides" not in spec and name.startswith("stride") and name.endswith("k")
        ):
            signature[name] = "constexpr"  # unit inner stride: Triton specializes 1 at launch
            constexprs[name] = 1
        else:
            signature[name] = "i32"
    # Pointers 16-byte aligned, as the launcher's tensors are (Triton specializes this too).
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(fn.arg_names)
        if signature[n].startswith("*")
    }
    if spec.get("gluon"):
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn, signature, constexprs, attrs)
    else:
        src = ASTSource(fn, signature, constexprs, attrs)
    compiled = triton.compile(
        src,
        target=GPUTarget("cuda", arch, 32),
        options=dict(num_warps=spec["num_warps"], num_stages=spec["num_stages"]),
    )
    return compiled


def disassemble(cubin: bytes) -> str:
    """The whole kernel, disassembled by the nvdisasm bundled with Triton.

    Not ``compiled.asm["sass"]``: Triton's cuobjdump post-processing matches instruction
    addresses of exactly four hex digits, so it silently stops at offset 0x10000 (4096
    instructions) and drops the rest of a longer kernel. nvdisasm also names the targets of
    indirect branches (``BRX ... BRANCH_TARGETS``), which the control-flow graph needs."""
    import tempfile

    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run(
            [knobs.nvidia.nvdisasm.path, "-c", path], capture_output=True, text=True, check=True
        ).stdout


def in_compiler_process(module: str, *args: str):
    """The JSON that ``python -m MODULE ARGS`` prints, run with the Triton interpreter off,
    when this process has it on (its @jit functions cannot be compiled there); None when it
    is off and the caller can compile in process."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return None
    env = dict(os.environ, TRITON_INTERPRET="0")
    cmd = [sys.executable, "-m", module, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def analyze_variants(keep_sass: bool = False) -> dict:
    """Compile and analyze every variant. Runs in a subprocess when the current process has
    the Triton interpreter switched on (its @jit functions cannot be compiled)."""
    flags = ["--json", "--keep-sass"] if keep_sass else ["--json"]
    done = in_compiler_process("flashcore", "sass", *flags)
    if done is not None:
        return done
    import triton

    out = {"triton": triton.__version__, "arch": "sm_90", "kernels": {}}
    for name, (spec, role) in _variants().items():
        sass = compile_sass(spec)
        result = analyze_sass(sass, spec.get("public_params", ()))
        result["role"] = role
        result["public_params"] = list(spec.get("public_params", ()))
        if keep_sass:
            result["sass"] = sass
        out["kernels"][name] = result
    return out


# The forward kernels flashcore's public forward functions can run: the Triton kernel's
# variants ("shipped"), the Gluon kernel that flashcore.attention dispatches to at D64, D128,
# D256 and MLA's D192/128 (dispatch.FORWARD_GLUON_FROM, "shipped (Gluon)"), the fp8 forward and
# the Gluon kernel's FP8 mode that flashcore.fp8_attention dispatches to (dispatch.FP8_GLUON_FROM).
DISPATCHED_ROLES = ("shipped", "shipped (Gluon)")
GLUON_DISPATCH_REASON = "warp_specialize's partition dispatch, not proven public by this analysis"


def _entry_dispatch(result: dict, within: int = 64) -> bool:
    """Whether every flagged branch of a kernel sits in its first ``within`` instructions and
    one of them is an indirect jump (``BRX``): the shape of warp_specialize's entry, where each
    worker warp loads its partition id from shared memory and jumps through a table."""
    flagged = result["data_branches"]
    return (
        bool(flagged)
        and all(b["index"] < within for b in flagged)
        and any("BRX" in b["text"].split() for b in flagged)
    )


def forward_branch_verdict(report: dict) -> tuple[bool, str]:
    """(verdict, reason) for "no data-dependent branch" over every shipped forward kernel in an
    ``analyze_variants`` report, the Gluon kernels included. The verdict is False when any of
    them has a branch the analysis classes as data; the reason names each such kernel and its
    count, and says where the flagged branches are warp_specialize's entry dispatch (which this
    analysis does not prove public: it counts every shared-memory load as data). An empty set of
    forward kernels is False too (nothing was checked)."""
    forward = {
        n: r
        for n, r in report["kernels"].items()
        if r["role"] in DISPATCHED_ROLES and "forward" in n
    }
    if not forward:
        return False, "no shipped forward kernel in the report"
    reasons = []
    for name, r in forward.items():
        count = r["branches"]["data"]
        if count == 0:
            continue
        why = f"{count} in {name}"
        if r["role"] == "shipped (Gluon)" and _entry_dispatch(r):
            why += f": {GLUON_DISPATCH_REASON}"
        reasons.append(why)
    return not reasons, "; ".join(reasons)
