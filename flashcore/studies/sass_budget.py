"""The issue budget of a forward kernel's softmax loop, read from its SASS (no GPU needed).

A consumer warpgroup of the Gluon forward runs one loop iteration per key tile: two
``wgmma`` (S = Q K^T, O += P V) on the tensor cores, and the online softmax of the tile on
the warps' own pipes. The tensor cores are the SM's; each of the four SM sub-partitions
(SMSPs) issues one warp instruction a clock, and every warpgroup puts one warp on each SMSP.
So, per round in which each of the W consumer warpgroups handles one key tile:

* tensor cycles  = W x (4 x 64 rows x BLOCK_N x D FLOPs) / (dense FLOPs per clock per SM)
* issue cycles   = W x (instructions in the loop body), per SMSP
* MUFU cycles    = W x (MUFU instructions in the loop body) x 32 / 4, per SMSP (the SM's 16
  special-function results a clock are 4 a clock per SMSP)

When issue or MUFU cycles reach the tensor cycles, the loop has no slack: ping-pong and the
in-warpgroup overlap can at best tie the two, and every stall (a barrier wait, a wgmma
wait, a dependency on the row max) adds to the tile's time instead of hiding under the
tensor cores. It is a budget, not a bound on throughput: it says where a kernel is fragile
and which instructions are worth removing, not how fast it runs.

Rates (H100 SXM, per SM per clock): dense bf16/fp16 ``wgmma`` 4096 FLOPs, e4m3 8192 (989
and 1979 TFLOP/s at 132 SMs and 1.83 GHz, the datasheet's peaks), MUFU 16 results (CUDA
programming guide, compute capability 9.0 arithmetic throughput table).

The loops are found in the disassembly as backward branches inside the kernel body (the
retry blocks of mbarrier waits, placed after the last ``EXIT``, branch back too and are not
loops); a softmax loop is an innermost such loop that holds ``MUFU.EX2``. A kernel with a
masked and an unmasked variant of the loop has two; the unmasked one (fewest instructions)
is the steady state.

``chain_report`` measures each build's steady loop by the longest chain of register-dependent
instructions in it (``dependency_depth``): a row max or row sum folded one value after
another is a chain of BLOCK_N / 4 - 1 instructions per row that the warp issues at one per
ALU latency, however many other instructions wait.

``barrier_report`` reads the named barriers of the same builds' PTX: the IDs triton numbers
itself, against the Gluon forward's inline ping-pong turn (tests/test_sass.py holds them
apart).
"""

from __future__ import annotations

import re
from collections import Counter

TENSOR_FLOPS_PER_CLOCK = {"bf16": 4096, "fp16": 4096, "fp8": 8192}
MUFU_CLOCKS_PER_WARP_INSTRUCTION = 32 // 4
# Opcode classes the table reports (by prefix), in order; the rest count as "other".
CLASSES = ("GMMA", "MUFU", "FMUL", "FFMA", "FADD", "FMNMX", "FSEL", "F2FP", "STS", "BAR", "SYNCS")

_LABEL = re.compile(r"\s*(\.L_x_\d+):")
_INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);")
_BRANCH = re.compile(r"\bBRA\b.*?(\.L_x_\d+)")
_GMMA_SHAPE = re.compile(r"GMMA\.(\d+)x(\d+)x(\d+)")


def _opcode(instruction: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]


def _class_of(opcode: str) -> str:
    if "GMMA" in opcode:  # HGMMA (16-bit), QGMMA (8-bit)
        return "GMMA"
    return next((c for c in CLASSES if opcode.startswith(c)), "other")


def listing(sass: str) -> list[str]:
    """A kernel's disassembly (``nvdisasm -c``) as its labels (``.L_x_3:``) and instructions
    (``MUFU.EX2 R4, R5``), in order: no addresses, encodings, comments or ``;``."""
    out = []
    for line in sass.splitlines():
        if m := _LABEL.match(line):
            out.append(m.group(1) + ":")
        elif m := _INSTRUCTION.match(line):
            out.append(" ".join(m.group(1).split()))
    return out


def softmax_loops(sass: str) -> list[dict]:
    """The innermost loops of a kernel's disassembly (``nvdisasm -c``) that compute
    exponentials: for each, its instruction span and counts by opcode class, fewest
    instructions first."""
    labels, body = {}, []
    for item in listing(sass):
        if item.endswith(":"):
            labels[item[:-1]] = len(body)
        else:
            body.append(item)
    exits = [i for i, ins in enumerate(body) if _opcode(ins) == "EXIT"]
    end = exits[-1] if exits else len(body)
    loops = []
    for j, ins in enumerate(body[:end]):
        m = _BRANCH.search(ins)
        if m and labels.get(m.group(1), j + 1) <= j:
            loops.append((labels[m.group(1)], j))
    innermost = [
        (a, b)
        for a, b in loops
        if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)
    ]
    out = []
    for a, b in innermost:
        ops = Counter(_opcode(ins) for ins in body[a : b + 1])
        if not any(op.startswith("MUFU.EX2") for op in ops):
            continue
        counts = Counter()
        for op, n in ops.items():
            counts[_class_of(op)] += n
        # matmul FLOPs one warpgroup issues per iteration: 2 M N K per wgmma instruction
        shapes = [_GMMA_SHAPE.search(op) for op in ops.elements()]
        out.append(
            {
                "start": a,
                "end": b,
                "instructions": b - a + 1,
                **{c: counts[c] for c in (*CLASSES, "other")},
                "gmma_flops": sum(2 * int(m[1]) * int(m[2]) * int(m[3]) for m in shapes if m),
            }
        )
    return sorted(out, key=lambda r: r["instructions"])


def loop_instructions(sass: str, loop: dict) -> list[str]:
    """The instructions of one of ``softmax_loops(sass)``'s loops, in order: its ``start``
    and ``end`` index the kernel's instructions alone, labels left out (not the lines of the
    disassembly, which hold headers, labels and comments too)."""
    body = [item for item in listing(sass) if not item.endswith(":")]
    return body[loop["start"] : loop["end"] + 1]


# Instructions that do not take part in a register dependency chain of the softmax: the
# tensor-core and barrier instructions, branches, and the uniform datapath's (U*) scalars.
_CHAIN_SKIP = ("HGMMA", "QGMMA", "WARPGROUP", "BAR", "SYNCS", "BRA", "NOP", "DEPBAR")
_REGISTER = re.compile(r"\bR(\d+)\b")


def dependency_depth(instructions: list[str]) -> int:
    """The longest chain of instructions in ``instructions`` (one straight pass, in order) in
    which each reads a register the one before it wrote: every instruction counts 1, so the
    result is a length, not a latency. The first register of an instruction is its
    destination (stores and reductions have none); predicates and uniform registers are not
    followed."""
    written: dict[str, int] = {}
    deepest = 0
    for ins in instructions:
        op = _opcode(ins)
        if op.startswith(_CHAIN_SKIP) or op.startswith("U"):
            continue
        regs = _REGISTER.findall(ins)
        if not regs:
            continue
        stores = op.startswith(("ST", "RED", "ATOM"))
        dst, srcs = (None, regs) if stores else (regs[0], regs[1:])
        depth = 1 + max((written.get(r, 0) for r in srcs), default=0)
        if dst is not None:
            written[dst] = depth
        deepest = max(deepest, depth)
    return deepest


def tile_flops(*, head_dim: int, block_n: int, head_dim_v: int | None = None, rows: int = 64):
    """The FLOPs of one warpgroup's forward key tile: S = Q K^T and O += P V over ``rows``
    queries and ``block_n`` keys."""
    return 2 * rows * block_n * (head_dim + (head_dim_v or head_dim))


def budget(loop: dict, *, warpgroups: int, dtype: str) -> dict:
    """Tensor, issue and MUFU cycles of one round (each of ``warpgroups`` consumer warpgroups
    one loop iteration) of a loop found by ``softmax_loops``, and the ratios of issue and
    MUFU to tensor cycles. The tensor cycles come from the matmul FLOPs the loop's ``wgmma``
    issue (``gmma_flops``, per warpgroup), so the same function serves the forward's two
    matmuls and the backward's five."""
    tensor = warpgroups * loop["gmma_flops"] / TENSOR_FLOPS_PER_CLOCK[dtype]
    issue = warpgroups * loop["instructions"]
    mufu = warpgroups * loop["MUFU"] * MUFU_CLOCKS_PER_WARP_INSTRUCTION
    return {
        "tensor_cycles": tensor,
        "issue_cycles": issue,
        "mufu_cycles": mufu,
        "issue_over_tensor": issue / tensor,
        "mufu_over_tensor": mufu / tensor,
    }


# The columns a notebook prints of a budget row, and their formats.
TABLE_COLUMNS = ("instructions", "MUFU", "STS", "tensor_cycles", "issue_over_tensor",
                 "mufu_over_tensor")  # fmt: skip
TABLE_FORMATS = {"matmuls": "{:.0f}", "tensor_cycles": "{:.0f}", "issue_over_tensor": "{:.2f}",
                 "mufu_over_tensor": "{:.2f}"}  # fmt: skip


def gluon_backward_report() -> list[dict]:
    """The opt-in Gluon backward (kernels/backward_hopper.py, sass.gluon_backward_spec: 8
    warps, two warpgroups, 64 queries x 128 keys a step), bf16, D 64 and 128, non-causal:
    its loop's counts, the matmuls it runs per (query, key) pair (one = 2 D FLOPs) and
    ``budget``. Compiled offline, in a subprocess under the interpreter."""
    from . import sass

    done = sass.in_compiler_process("flashcore.studies.sass_budget", "--gluon-backward")
    if done is not None:
        return done

    rows = []
    for head_dim in (64, 128):
        loop = softmax_loops(sass.compile_sass(sass.gluon_backward_spec(head_dim, False)))[0]
        pairs = 64 * 128
        rows.append({"D": head_dim, "matmuls": 2 * loop["gmma_flops"] / pairs / (2 * head_dim)}
                    | loop | budget(loop, warpgroups=2, dtype="bf16"))  # fmt: skip
    return rows


# The Gluon forward's kernels the budget is read for: (label, head dim, dtype, causal), each in
# its shipped tile config, non-causal as the measurements set beside them (a causal kernel's
# unmasked loop, which ``softmax_loops`` lists first, is the same to an instruction). D64 bf16
# runs three consumer warpgroups (forward_hopper.VARIANTS[64]; dispatched from S = 4K
# non-causal, dispatch.FORWARD_GLUON_FROM): the head dim the Gluon kernel is slowest at.
KERNELS = (
    ("bf16 D64 non-causal (three warpgroups)", 64, "bf16", False),
    ("bf16 D128 non-causal", 128, "bf16", False),
    ("bf16 D256 non-causal", 256, "bf16", False),
    ("fp8 D128 non-causal", 128, "fp8", False),
    ("fp8 D256 non-causal", 256, "fp8", False),
)


def budget_report() -> list[dict]:
    """Compile the ``KERNELS`` for sm_90 (offline) and return, per kernel, its steady-state
    softmax loop's instruction counts and ``budget``. Runs in a subprocess when the current
    process has the Triton interpreter switched on (its @jit functions cannot be compiled)."""
    from ..kernels import forward_hopper as fh
    from . import sass

    done = sass.in_compiler_process("flashcore.studies.sass_budget")
    if done is not None:
        return done

    rows = []
    for label, head_dim, dtype, causal in KERNELS:
        if dtype == "fp8":
            spec, cfg = sass.gluon_fp8_forward_spec(head_dim, causal), fh.FP8_VARIANTS[head_dim]
        else:
            spec, cfg = sass.gluon_forward_spec(head_dim, causal), fh.VARIANTS[head_dim]
        block_n, warpgroups = cfg["BLOCK_N"], cfg.get("NUM_WG", 2)
        loop = softmax_loops(sass.compile_sass(spec))[0]
        # The loop found must issue exactly one key tile's matmuls: a cross-check that the
        # innermost exp loop is the steady-state softmax loop and not some other one.
        expected = tile_flops(head_dim=head_dim, block_n=block_n)
        if loop["gmma_flops"] != expected:
            raise RuntimeError(
                f"{label}: the loop's wgmma do {loop['gmma_flops']} FLOPs, a key tile {expected}"
            )
        cycles = budget(loop, warpgroups=warpgroups, dtype=dtype)
        rows.append({"kernel": label, "D": head_dim, "BLOCK_N": block_n, "dtype": dtype}
                    | loop | cycles)  # fmt: skip
    return rows


def chain_report() -> list[dict]:
    """The shipped bf16 Gluon forward builds at D 64, 128 and 256, causal and not, and MLA's
    192/128, then the Triton forward's Hopper builds (``sass``'s variants), compiled offline
    for sm_90: per build, its steady-state softmax loop's instruction count and the longest
    register-dependent chain in it (``dependency_depth``)."""
    from . import sass

    done = sass.in_compiler_process("flashcore.studies.sass_budget", "--chains")
    if done is not None:
        return done

    builds = [
        (f"gluon bf16 D{d} {'causal' if causal else 'full'}", sass.gluon_forward_spec(d, causal))
        for d in (64, 128, 256)
        for causal in (False, True)
    ]
    builds += [
        (f"gluon bf16 D192/128 {'causal' if causal else 'full'}",
         sass.gluon_forward_spec(192, causal, dv=128))
        for causal in (False, True)
    ]  # fmt: skip
    builds += [
        (f"triton bf16 {name.removeprefix('forward ')}", spec)
        for name, (spec, _) in sass._variants().items()
        if name.startswith("forward D") and "Gluon" not in name
    ]
    rows = []
    for label, spec in builds:
        text = sass.compile_sass(spec)
        steady = loop_instructions(text, softmax_loops(text)[0])
        rows.append(
            {"kernel": label, "instructions": len(steady), "chain": dependency_depth(steady)}
        )
    return rows


# Named barriers in the PTX: an immediate ID is triton's own (one per partition, and the
# warp-specialize handshake); a register ID is the Gluon forward's inline ping-pong turn.
_BARRIER = re.compile(r"\b(?:bar|barrier)\.(?:cta\.)?(?:sync|arrive|red)(?:\.\w+)*\s+(%?\w+)")


def barrier_report() -> list[dict]:
    """Every shipped Gluon forward build (fp16/bf16 at each head dim, causal and not, and the
    FP8 mode at D128), compiled offline for sm_90: the named-barrier IDs triton's own
    barriers use, how many barrier instructions take a register ID (the inline turn,
    forward_hopper.TURN_BARRIER_0 and up), and the kernel's PINGPONG. A triton release that
    numbered its barriers up to TURN_BARRIER_0 would make the turn wait on them."""
    from . import sass

    done = sass.in_compiler_process("flashcore.studies.sass_budget", "--barriers")
    if done is not None:
        return done

    rows = []
    builds = [(d, causal, False) for d in (64, 128, 256) for causal in (False, True)]
    for head_dim, causal, fp8 in builds + [(128, False, True)]:
        spec = (
            sass.gluon_fp8_forward_spec(head_dim, causal)
            if fp8
            else sass.gluon_forward_spec(head_dim, causal)
        )
        ids = _BARRIER.findall(sass.compile_kernel(spec).asm["ptx"])
        mode = "causal" if causal else "full"
        rows.append(
            {
                "kernel": f"{'fp8' if fp8 else 'bf16'} D{head_dim} {mode}",
                "pingpong": int(spec["consts"]["PINGPONG"]),
                "triton_ids": sorted({int(i) for i in ids if i.isdigit()}),
                "register_id_barriers": sum(not i.isdigit() for i in ids),
            }
        )
    return rows


def p_conversion_report() -> list[dict]:
    """The shipped bf16 Gluon forward builds at D 64, 128 and 256, causal and not, compiled
    offline for sm_90: per build, its softmax loops and the PRMT (byte permute) instructions in
    them. P reaches the P V wgmma through paired conversions (forward_hopper._p_operand);
    converted one value at a time and packed, ptxas swapped the halves of every packed register
    back with a PRMT, one per two scores."""
    from . import sass

    done = sass.in_compiler_process("flashcore.studies.sass_budget", "--p-conversion")
    if done is not None:
        return done

    rows = []
    for head_dim in (64, 128, 256):
        for causal in (False, True):
            text = sass.compile_sass(sass.gluon_forward_spec(head_dim, causal))
            loops = softmax_loops(text)
            prmt = sum(
                _opcode(ins).startswith("PRMT")
                for loop in loops
                for ins in loop_instructions(text, loop)
            )
            mode = "causal" if causal else "full"
            rows.append({"kernel": f"bf16 D{head_dim} {mode}", "loops": len(loops), "prmt": prmt})
    return rows


if __name__ == "__main__":
    import json
    import sys

    if "--barriers" in sys.argv[1:]:
        report = barrier_report
    elif "--p-conversion" in sys.argv[1:]:
        report = p_conversion_report
    elif "--chains" in sys.argv[1:]:
        report = chain_report
    else:
        report = gluon_backward_report if "--gluon-backward" in sys.argv[1:] else budget_report
    print(json.dumps(report()))
