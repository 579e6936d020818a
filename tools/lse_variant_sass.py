"""Offline (no GPU): the Gluon Hopper forward with and without the lse store, side by side in
SASS. Both builds are compiled for sm_90a exactly as ``attention_hopper`` launches them for
tools/cp_ring_breakdown.py's call (B 1, Hq 8, Hkv 2, D 128, bf16, non-causal, Sq = Sk =
524288, 132 programs): the launch arguments come from ``forward_hopper._launch_args`` on CPU
tensors (allocated, never touched), specialized as Triton's launcher specializes them
(tools/sm90_compile.py), disassembled whole by the nvdisasm bundled with Triton.

    python tools/lse_variant_sass.py [--out FILE.json] [--breakdown CP_RING_BREAKDOWN.json]

Prints, per build: registers and spills (cuobjdump's REG/STACK, STL/LDL in the SASS, and the
``ptxas -v`` line of the build's PTX), each warp-specialize partition's setmaxnreg and the
highest register it touches, the softmax loops (``sass_budget.softmax_loops``: per consumer
warpgroup, the steady unmasked loop and the masked one) with their instruction counts by
opcode class, ``budget`` and ``dependency_depth``; then, per loop pair, whether the loops are
identical, identical up to register names, or hold the same instructions in another order,
with the differing stretches; and the whole kernels' instruction counts and opcode deltas,
and in which partition the extra instructions are. Cross-checks: the same builds at Sq = Sk
= 262144 (the same machine code, or not) and through ``sass.gluon_forward_spec`` with
STORE_LSE toggled (its int arguments unspecialized: its loops' opcode counts, no-lse vs lse).
``--breakdown``: a cp_ring_breakdown log; its two attention_hopper rows'
times times their sampled SM clocks (SM cycles per call) are added for context.

The Triton interpreter must be off to compile: this script removes TRITON_INTERPRET from its
own environment before importing triton (``sass.in_compiler_process``'s rule).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

SHAPE = dict(B=1, Hq=8, Hkv=2, D=128, S=524288)
PROGRAMS = 132  # the H200's (and H100 SXM's) SM count: the persistent grid
LOG2E = 1.4426950408889634
_REG = re.compile(r"\bR(\d+)\b")
_GUARD = re.compile(r"^@!?U?P\w+\s+")


# ----------------------------------------------------------------------------- compiling


def compile_build(store_lse: bool, seqlen: int):
    """The compiled kernel of one ``attention_hopper`` launch (see the module docstring)."""
    import torch
    from sm90_compile import compile_launch
    from triton.experimental.gluon._runtime import GluonASTSource

    from flashcore.kernels import forward_hopper as fh

    b, hq, hkv, d = SHAPE["B"], SHAPE["Hq"], SHAPE["Hkv"], SHAPE["D"]
    q = torch.empty(b, hq, seqlen, d, dtype=torch.bfloat16)
    k = torch.empty(b, hkv, seqlen, d, dtype=torch.bfloat16)
    v = torch.empty(b, hkv, seqlen, d, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    lse = torch.empty(b, hq, seqlen, dtype=torch.float32)
    grid, args, kwargs = fh._launch_args(
        q,
        k,
        v,
        out,
        lse,
        causal_offset=0,
        is_causal=False,
        qk_scale=LOG2E / math.sqrt(d),
        store_lse=store_lse,
        max_programs=PROGRAMS,
    )
    bound = dict(zip(fh._fa3_fwd_kernel.arg_names, args)) | kwargs
    compiled = compile_launch(fh._fa3_fwd_kernel, bound, GluonASTSource)
    constexprs = {k: v for k, v in kwargs.items() if k.isupper() or k == "num_warps"}
    return compiled, {"grid": list(grid), "constexprs": constexprs}


def ptxas_verbose(ptx: str) -> dict:
    """``ptxas -v`` (Triton's ptxas, its flags: -lineinfo, sm_90a) on a build's PTX."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        proc = subprocess.run(
            [
                knobs.nvidia.ptxas.path,
                "-lineinfo",
                "-v",
                "--gpu-name=sm_90a",
                src,
                "-o",
                os.path.join(tmp, "k.cubin"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    log = proc.stderr + proc.stdout
    num = lambda pat: int(m.group(1)) if (m := re.search(pat, log)) else None  # noqa: E731
    return {
        "registers": num(r"Used (\d+) registers"),
        "spill_store_bytes": num(r"(\d+) bytes spill stores"),
        "spill_load_bytes": num(r"(\d+) bytes spill loads"),
        "stack_frame_bytes": num(r"(\d+) bytes stack frame"),
        "line": " ".join(ln.strip() for ln in log.splitlines() if "Used" in ln or "spill" in ln),
    }


# ----------------------------------------------------------------------------- reading SASS


def instructions_and_labels(sass: str) -> tuple[list[str], dict[str, int]]:
    from flashcore.studies.sass_budget import listing

    body, labels = [], {}
    for item in listing(sass):
        if item.endswith(":"):
            labels[item[:-1]] = len(body)
        else:
            body.append(item)
    return body, labels


def opcode(ins: str) -> str:
    return _GUARD.sub("", ins).split()[0]


def normalized(ins: str) -> str:
    """An instruction with its register names masked (R12 -> R, UR4 -> UR) and reuse flags
    dropped: two lines equal here differ in register allocation only."""
    ins = re.sub(r"\bUR\d+\b", "UR", ins)
    return re.sub(r"\bR\d+\b", "R", ins).replace(".reuse", "")


def partitions(body: list[str], labels: dict[str, int]) -> list[dict]:
    """The kernel split at the warp-specialize entry points: the targets of the dispatch
    ``BRX`` (the worker partitions) and of the kernel's first branch (the default partition,
    warps 0-3), up to the ``EXIT``. Each with its span, its ``USETMAXREG`` immediates, the
    highest general register it names, its local-memory accesses and its role (consumer: holds
    exponentials; producer: issues TMA loads)."""
    starts = {0}
    for ins in body:
        if m := re.search(r'BRANCH_TARGETS ([^"]+)"', ins):
            starts |= {labels[t.strip()] for t in m.group(1).split(",")}
    first_branch = next(ins for ins in body if opcode(ins) == "BRA")
    starts.add(labels[re.search(r"(\.L_x_\d+)", first_branch).group(1)])
    end = max(i for i, ins in enumerate(body) if opcode(ins) == "EXIT")
    bounds = sorted(s for s in starts if s < end) + [end]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        part = body[a:b]
        ops = [opcode(x) for x in part]
        regs = [int(r) for x in part for r in _REG.findall(x)]
        role = (
            "consumer"
            if any(o.startswith("MUFU.EX2") for o in ops)
            else "producer"
            if any(o.startswith("UTMALDG") for o in ops)
            else "dispatch"
            if a == 0
            else "idle"
        )
        out.append(
            {
                "start": a,
                "end": b - 1,
                "role": role,
                "instructions": b - a,
                "setmaxnreg": [x.split()[-1] for x in part if "SETMAXREG" in x],
                "max_register": max(regs, default=-1),
                "STL": ops.count("STL"),
                "LDL": ops.count("LDL"),
            }
        )
    return out


def operand_traffic(instructions: list[str]) -> dict:
    """A rough model of register-file traffic (Hopper's register banks are not documented):
    per instruction, the source registers (operands after the destination; HGMMA, barrier and
    uniform-datapath instructions left out) not served by the operand reuse cache (the same
    register in the same operand slot, marked ``.reuse`` by the instruction before), and, in
    a two-bank model (register index mod 2, as microbenchmarks measured on Volta and Turing),
    the reads beyond one per bank in one instruction."""
    skip = ("HGMMA", "WARPGROUP", "BAR", "SYNCS", "BRA", "NOP", "DEPBAR", "U")
    reuse_flags = sum(x.count(".reuse") for x in instructions)
    cached: dict[int, str] = {}
    reads = conflicts = hits = 0
    for ins in instructions:
        op = opcode(ins)
        if op.startswith(skip):
            cached = {}
            continue
        operands = [o.strip() for o in _GUARD.sub("", ins)[len(op) :].split(",")]
        stores = op.startswith(("ST", "RED", "ATOM"))
        sources = operands if stores else operands[1:]
        fresh, nxt = set(), {}
        for slot, text in enumerate(sources):
            m = _REG.search(text)
            if not m:
                continue
            reg = m.group(0)
            if cached.get(slot) == reg:
                hits += 1
            else:
                fresh.add(int(m.group(1)))
            if ".reuse" in text:
                nxt[slot] = reg
        cached = nxt
        reads += len(fresh)
        per_bank = Counter(r % 2 for r in fresh)
        conflicts += sum(n - 1 for n in per_bank.values() if n > 1)
    return {
        "reuse_flags": reuse_flags,
        "reuse_hits": hits,
        "register_reads": reads,
        "two_bank_conflicts": conflicts,
    }


def class_mix(instructions: list[str]) -> dict:
    from flashcore.studies.sass_budget import _class_of

    mix = Counter(_class_of(opcode(x)) for x in instructions)
    mix["MUFU.EX2"] = sum(opcode(x).startswith("MUFU.EX2") for x in instructions)
    return dict(sorted(mix.items()))


def analyze(compiled) -> dict:
    from flashcore.studies import sass, sass_budget

    text = sass.disassemble(compiled.asm["cubin"])
    body, labels = instructions_and_labels(text)
    parts = partitions(body, labels)
    loops = []
    for loop in sass_budget.softmax_loops(text):
        part = next(p for p in parts if p["start"] <= loop["start"] <= p["end"])
        ins = sass_budget.loop_instructions(text, loop)
        loops.append(
            {
                "partition_start": part["start"],
                "partition_setmaxnreg": part["setmaxnreg"],
                **loop,
                "byte_offset": hex(16 * loop["start"]),
                "MUFU.EX2": sum(opcode(x).startswith("MUFU.EX2") for x in ins),
                "dependency_depth": sass_budget.dependency_depth(ins),
                **sass_budget.budget(loop, warpgroups=2, dtype="bf16"),
                **operand_traffic(ins),
                "_instructions": ins,
            }
        )
    # Per consumer partition (in code order), its loops: steady (fewest instructions) first.
    loops.sort(key=lambda r: (r["partition_start"], r["instructions"]))
    for r in loops:
        same = [x for x in loops if x["partition_start"] == r["partition_start"]]
        r["kind"] = "steady (unmasked)" if r is same[0] else "masked"
    # Where a consumer partition's instructions lie: before its first softmax loop (once per
    # work tile), in and between its loops, after its last loop (the epilogue, once per tile).
    for part in parts:
        own = [r for r in loops if r["partition_start"] == part["start"]]
        if own:
            first, last = min(r["start"] for r in own), max(r["end"] for r in own)
            part["before_loops"] = first - part["start"]
            part["loops_span"] = last - first + 1
            part["after_loops"] = part["end"] - last
    return {
        "text": text,
        "body": body,
        "resources": sass.resource_usage(compiled),
        "ptxas": ptxas_verbose(compiled.asm["ptx"]),
        "shared_bytes": int(compiled.metadata.shared),
        "cubin_sha256": hashlib.sha256(compiled.asm["cubin"]).hexdigest()[:16],
        "partitions": parts,
        "loops": loops,
        "instructions": len(body),
        "class_mix": class_mix(body),
        "opcodes": Counter(opcode(x) for x in body),
    }


# ----------------------------------------------------------------------------- comparing


def compare_sequences(a: list[str], b: list[str]) -> dict:
    """How two instruction sequences differ: identical; the same up to register names; the
    same opcodes / normalized instructions as a multiset (a schedule difference); and the
    stretches where the normalized sequences part (difflib), first few shown."""
    na, nb = [normalized(x) for x in a], [normalized(x) for x in b]
    sm = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    stretches = [
        {"op": tag, "a": [i1, i2], "b": [j1, j2], "no_lse": a[i1:i2][:4], "lse": b[j1:j2][:4]}
        for tag, i1, i2, j1, j2 in sm.get_opcodes()
        if tag != "equal"
    ]
    return {
        "identical": a == b,
        "same_up_to_register_names": na == nb,
        "same_opcode_multiset": Counter(map(opcode, a)) == Counter(map(opcode, b)),
        "same_normalized_multiset": Counter(na) == Counter(nb),
        "positions_with_other_registers": sum(
            x != y and normalized(x) == normalized(y) for x, y in zip(a, b)
        ),
        "instructions_out_of_place": sum(
            i2 - i1 for _, i1, i2, _, _ in (s for s in sm.get_opcodes() if s[0] != "equal")
        ),
        "stretches": stretches[:12],
        "stretch_count": len(stretches),
    }


def breakdown_cycles(path: Path) -> list[dict]:
    """SM cycles per call of the two attention_hopper rows of a cp_ring_breakdown log: each
    time times the SM clock NVML read after that piece (one sample, not an average), beside
    the tensor-bound count (4 B Hq S^2 D FLOPs at 4096 dense bf16 FLOPs a clock per SM)."""
    record = json.loads(path.read_text())
    tensor = lambda s: 4 * SHAPE["B"] * SHAPE["Hq"] * s * s * SHAPE["D"] / (4096 * PROGRAMS)  # noqa: E731
    rows = []
    for block in record["blocks"]:
        for r in block["rows"]:
            if r["piece"].startswith("attention_hopper") and r.get("sm_mhz"):
                rows.append(
                    {
                        "block": block["block"],
                        "piece": r["piece"],
                        "ms": [round(x, 1) for x in r["ms"]],
                        "sm_mhz": r["sm_mhz"],
                        "power_w": r["power_w"],
                        "gcycles": [round(x * r["sm_mhz"] * 1e-6, 3) for x in r["ms"]],
                        "tensor_bound_gcycles": round(tensor(block["block"]) * 1e-9, 3),
                    }
                )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the comparison here (JSON)")
    ap.add_argument("--breakdown", type=Path, help="a cp_ring_breakdown log, for context")
    args = ap.parse_args()

    import triton

    from flashcore.studies import sass, sass_budget

    builds, launches = {}, {}
    for name, store in (("no_lse", False), ("lse", True)):
        compiled, launches[name] = compile_build(store, SHAPE["S"])
        builds[name] = analyze(compiled)
    # Cross-checks: half the length (the same specialization, so the same code?), and the
    # studies' spec with STORE_LSE toggled (the path sass_budget reads). The spec leaves the
    # int arguments unspecialized (no divisibility by 16), so its code is not the launch's;
    # its loops, no-lse vs lse, are compared by opcode counts.
    checks, spec_loop_code = {}, {}
    for name, store in (("no_lse", False), ("lse", True)):
        half, _ = compile_build(store, SHAPE["S"] // 2)
        spec = sass.gluon_forward_spec(128, False)
        spec["consts"] = dict(spec["consts"], STORE_LSE=store)
        spec_text = sass.compile_sass(spec)
        spec_loop_code[name] = [
            sass_budget.loop_instructions(spec_text, lp)
            for lp in sorted(sass_budget.softmax_loops(spec_text), key=lambda r: r["start"])
        ]
        checks[name] = {
            "S=262144 cubin identical": hashlib.sha256(half.asm["cubin"]).hexdigest()[:16]
            == builds[name]["cubin_sha256"],
            "gluon_forward_spec SASS identical": instructions_and_labels(spec_text)[0]
            == builds[name]["body"],
        }
    spec_loops = []
    for x, y in zip(spec_loop_code["no_lse"], spec_loop_code["lse"]):
        cx, cy = Counter(map(opcode, x)), Counter(map(opcode, y))
        delta = {k: cy[k] - cx[k] for k in sorted(set(cx) | set(cy)) if cx[k] != cy[k]}
        spec_loops.append({"instructions": [len(x), len(y)], "opcode_delta_lse": delta})
    checks["gluon_forward_spec loops (code order), no_lse vs lse"] = spec_loops

    a, b = builds["no_lse"], builds["lse"]
    loop_pairs = []
    for la, lb in zip(a["loops"], b["loops"]):
        assert la["kind"] == lb["kind"]
        cmp = compare_sequences(la["_instructions"], lb["_instructions"])
        loop_pairs.append(
            {"partition_setmaxnreg": la["partition_setmaxnreg"], "kind": la["kind"], **cmp}
        )
    kernel_cmp = compare_sequences(a["body"], b["body"])
    op_delta = {
        op: b["opcodes"][op] - a["opcodes"][op]
        for op in sorted(set(a["opcodes"]) | set(b["opcodes"]))
        if b["opcodes"][op] != a["opcodes"][op]
    }
    part_delta = [
        {
            "role": pa["role"],
            "setmaxnreg": pa["setmaxnreg"],
            "no_lse": pa["instructions"],
            "lse": pb["instructions"],
        }
        for pa, pb in zip(a["partitions"], b["partitions"])
    ]
    loops_same_code = all(p["same_normalized_multiset"] for p in loop_pairs)
    steady = [r for r in a["loops"] if r["kind"].startswith("steady")]
    steady_lse = [r for r in b["loops"] if r["kind"].startswith("steady")]
    placement = {
        name: {
            "steady_loop_offsets": [r["byte_offset"] for r in rows],
            "bytes_between_the_two_steady_loops": 16 * (rows[1]["start"] - rows[0]["start"]),
            "steady_loop_bytes": [16 * r["instructions"] for r in rows],
        }
        for name, rows in (("no_lse", steady), ("lse", steady_lse))
    }

    def public(build: dict) -> dict:
        keep = (
            "resources",
            "ptxas",
            "shared_bytes",
            "cubin_sha256",
            "partitions",
            "instructions",
            "class_mix",
        )
        loops = [{k: v for k, v in r.items() if not k.startswith("_")} for r in build["loops"]]
        return {k: build[k] for k in keep} | {"loops": loops}

    report = {
        "what": "Gluon Hopper forward (_fa3_fwd_kernel) compiled offline for sm_90a, "
        "STORE_LSE False vs True, as attention_hopper launches it for cp_ring_breakdown",
        "shape": SHAPE | {"dtype": "bf16", "causal": False, "programs": PROGRAMS},
        "triton": triton.__version__,
        "launch": launches,
        "builds": {k: public(v) for k, v in builds.items()},
        "cross_checks": checks,
        "loop_pairs": loop_pairs,
        "kernel": {
            "instructions": {"no_lse": a["instructions"], "lse": b["instructions"]},
            "opcode_delta_lse_minus_no_lse": op_delta,
            "per_partition": part_delta,
            "same_up_to_register_names": kernel_cmp["same_up_to_register_names"],
            "stretch_count": kernel_cmp["stretch_count"],
        },
        "code_placement": placement,
        "hot_loops_same_instructions": loops_same_code,
    }
    if args.breakdown:
        report["breakdown_cycles"] = breakdown_cycles(args.breakdown)

    # ---- print
    p = print
    p(f"triton {triton.__version__}, sm_90a; {report['what']}")
    p(f"shape {SHAPE}, grid {launches['no_lse']['grid']}")
    for name, r in builds.items():
        res, px = r["resources"], r["ptxas"]
        p(
            f"\n[{name}] cuobjdump REG {res['n_regs']}, STACK {res['stack']}, "
            f"STL {res['n_spills']}, LDL {res['ldl']}, HGMMA {res['hgmma']}, "
            f"shared {r['shared_bytes']} B;"
            f" ptxas -v: {px['line']}"
        )
        p(f"  whole kernel {r['instructions']} instructions; classes {r['class_mix']}")
        for part in r["partitions"]:
            p(
                f"  partition {part['role']:<8} [{part['start']}, {part['end']}] "
                f"{part['instructions']} instr, setmaxnreg {part['setmaxnreg']}, highest R"
                f"{part['max_register']}, STL {part['STL']} LDL {part['LDL']}"
                + (
                    f"; before loops {part['before_loops']}, loops {part['loops_span']}, after "
                    f"{part['after_loops']}"
                    if "loops_span" in part
                    else ""
                )
            )
        for lp in r["loops"]:
            cls = {
                k: lp[k]
                for k in (
                    "GMMA",
                    "MUFU",
                    "MUFU.EX2",
                    "FMUL",
                    "FFMA",
                    "FADD",
                    "FMNMX",
                    "FSEL",
                    "F2FP",
                    "BAR",
                    "SYNCS",
                    "other",
                )
            }
            p(
                f"  loop {lp['kind']:<17} setmaxnreg {lp['partition_setmaxnreg'][:1]} at "
                f"{lp['byte_offset']}: {lp['instructions']} instr {cls}; depth "
                f"{lp['dependency_depth']}, issue/tensor {lp['issue_over_tensor']:.3f}, MUFU/tensor"
                f" {lp['mufu_over_tensor']:.3f}; reuse flags {lp['reuse_flags']}, RF reads "
                f"{lp['register_reads']}, 2-bank conflicts {lp['two_bank_conflicts']}"
            )
    p("\nloops, no_lse vs lse:")
    for lp in loop_pairs:
        p(
            f"  {lp['kind']:<17} setmaxnreg {lp['partition_setmaxnreg'][:1]}: identical "
            f"{lp['identical']}, same up to register names {lp['same_up_to_register_names']}, "
            f"same instructions (multiset) {lp['same_normalized_multiset']}; "
            f"{lp['positions_with_other_registers']} positions differ only in registers, "
            f"{lp['instructions_out_of_place']} out of place in {lp['stretch_count']} stretches"
        )
        for s in lp["stretches"][:4]:
            p(f"      {s['op']:<7} {s['no_lse']} | {s['lse']}")
    k = report["kernel"]
    p(f"\nwhole kernel: {k['instructions']}; opcode delta (lse - no_lse): {op_delta}")
    for pd in part_delta:
        p(f"  {pd['role']:<8} setmaxnreg {pd['setmaxnreg'][:1]}: {pd['no_lse']} -> {pd['lse']}")
    p(f"cross-checks: {checks}")
    p(f"code placement: {placement}")
    for r in report.get("breakdown_cycles", []):
        p(
            f"  log: {r['piece']}: {r['ms']} ms at {r['sm_mhz']} MHz, {r['power_w']} W -> "
            f"{r['gcycles']} G SM cycles (tensor-bound {r['tensor_bound_gcycles']})"
        )
    p(f"\nhot loops hold the same instructions in both builds: {loops_same_code}")
    if args.out:
        from flashcore.results import write_log

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_log(args.out, report)
        p(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
