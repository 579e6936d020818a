"""Offline (no GPU): the split-KV decode kernel's key loop in SASS, paged (pages of 16 and 256
tokens) beside the dense cache, as ``launch_decode`` launches it for a decode step on the
H100 (132 SMs): bf16, D 128, one query per sequence, GQA 32/8, B 1, 32K cached tokens, no
append (``attention_with_kvcache(..., check_lengths=False)``, the record's call). Launches are
captured from CPU tensors, not run, and compiled for sm_90a.

    python tools/paged_decode_sass.py [--against REV] [--log FILE] [--opcodes]

Per case: the launch (grid, tile, stages, warps), registers, and the key loop (the innermost
loop that computes exponentials, one iteration per key tile): its instructions by class.
``--against REV`` compiles the kernels of commit REV too (``git archive`` into a temporary
directory, compiled there in a subprocess) and prints them first, for an A/B of a kernel
change. Classes (per thread, one iteration):

* ``LDGSTS``: the K/V tile copies (cp.async); ``LDG``: other global loads (block table);
* ``int``: integer/address ALU work (IMAD*, IADD3*, VIADD, LEA*, SHF*, LOP3, SEL, ISETP*,
  PLOP3, P2R, MOV, CS2R);
* ``64-bit``: of those, the 64-bit address halves: wide multiplies (IMAD.WIDE*), carry
  consumers (``.X``: IADD3.X, IMAD.X, LEA.HI.X) and sign-extension/high shifts (SHF.*.HI);
* ``uniform``: the warp-uniform datapath (U*), not per thread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPE = dict(B=1, Hq=32, Hkv=8, S=32768, D=128)
CASES = ((0, "dense"), (256, "paged 256"), (16, "paged 16"))
SMS = 132  # H100 SXM: what _num_sms answers on the GPU the records come from

INT_PREFIXES = (
    "IMAD",
    "IADD3",
    "VIADD",
    "LEA",
    "SHF",
    "LOP3",
    "SEL",
    "ISETP",
    "PLOP3",
    "P2R",
    "MOV",
    "CS2R",
)


def _is_64bit(op: str) -> bool:
    parts = op.split(".")
    return (
        op.startswith("IMAD.WIDE")
        or "X" in parts[1:]
        or (parts[0] == "SHF" and "HI" in parts[1:])
        or op.startswith("LEA.HI.X")
    )


def classify(ops: list[str]) -> dict:
    counts = Counter(ops)
    out = {"total": len(ops)}
    out["LDGSTS"] = sum(n for op, n in counts.items() if op.startswith("LDGSTS"))
    out["LDG"] = sum(n for op, n in counts.items() if op.startswith("LDG.") or op == "LDG")
    ints = {op: n for op, n in counts.items() if op.startswith(INT_PREFIXES)}
    out["int"] = sum(ints.values())
    out["64-bit"] = sum(n for op, n in ints.items() if _is_64bit(op))
    out["IMAD"] = sum(n for op, n in ints.items() if op.startswith("IMAD"))
    out["uniform"] = sum(n for op, n in counts.items() if op.startswith("U"))
    out["HMMA"] = sum(n for op, n in counts.items() if "MMA" in op)
    out["MUFU"] = sum(n for op, n in counts.items() if op.startswith("MUFU"))
    out["BAR"] = sum(n for op, n in counts.items() if op.startswith("BAR"))
    return out


def key_loop(sass_text: str) -> list[str]:
    """Opcodes of the kernel's key loop: the innermost backward-branch loop holding MUFU.EX2
    (sass_budget.softmax_loops); the decode kernel has one."""
    from flashcore.studies import sass_budget as sb

    loops = sb.softmax_loops(sass_text)
    if len(loops) != 1:
        raise SystemExit(f"expected one key loop, found {len(loops)}")
    return [sb._opcode(ins) for ins in sb.loop_instructions(sass_text, loops[0])]


def compile_cases() -> list[dict]:
    """This process's flashcore (the current directory's): every case compiled."""
    import torch
    from sm90_compile import capture_launches, compile_launch  # pops TRITON_INTERPRET

    from flashcore.kernels import decode
    from flashcore.studies import sass

    b, hq, hkv, s, d = (SHAPE[k] for k in ("B", "Hq", "Hkv", "S", "D"))
    rows = []
    for page, name in CASES:
        q = torch.empty(b, hq, 1, d, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        lengths = torch.full((b,), s, dtype=torch.int32)
        table = None
        if page:
            k = torch.empty(b * s // page, hkv, page, d, dtype=torch.bfloat16)
            table = torch.arange(b * s // page, dtype=torch.int32).view(b, -1)
        else:
            k = torch.empty(b, hkv, s, d, dtype=torch.bfloat16)
        grids = {}
        launches = capture_launches(
            decode,
            ("_decode_split_kernel", "_decode_combine_kernel"),
            # as attention_with_kvcache's checked path calls it without new tokens
            lambda: decode.launch_decode(
                q,
                k,
                k,
                lengths,
                0,
                out,
                None,
                None,
                None,
                None,
                None,
                1,
                s,
                True,
                block_table=table,
            ),  # fmt: skip
            grids=grids,
            on_interpreter=lambda t: False,
            _num_sms=lambda index: SMS,
        )
        kw = launches["_decode_split_kernel"]
        compiled = compile_launch(decode._decode_split_kernel, kw)
        ttgir = compiled.asm["ttgir"]
        usage = sass.resource_usage(compiled)
        ops = key_loop(sass.disassemble(compiled.asm["cubin"]))
        rows.append(
            {
                "case": name,
                "grid": list(grids["_decode_split_kernel"]),
                "tile": f"{kw['BLOCK_M']}x{kw['BLOCK_N']}",
                "num_stages": kw["num_stages"],
                "num_warps": kw["num_warps"],
                "regs": usage["n_regs"],
                "spills": usage["n_spills"],
                "shared": usage["shared"],
                "async_wait": [int(n) for n in re.findall(r"async_wait.*\{num = (\d+)", ttgir)],
                "loop": classify(ops),
                "opcodes": dict(Counter(ops).most_common()),
            }
        )
    return rows


def _short(rev: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()


def compile_at(rev: str) -> list[dict]:
    """The cases compiled from commit ``rev``'s flashcore, by this script, in a subprocess."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(
            ["git", "archive", rev, "flashcore"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--json"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(f"compiling {rev} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout)


def lines(label: str, rows: list[dict], opcodes: bool) -> list[str]:
    out = [label]
    for r in rows:
        c = r["loop"]
        out.append(
            f"  {r['case']:<10} grid {tuple(r['grid'])} tile {r['tile']} stages {r['num_stages']}"
            f" warps {r['num_warps']} regs {r['regs']} spills {r['spills']} shared {r['shared']}"
            f" async_wait num {r['async_wait']}"
        )
        out.append(
            f"    key loop {c['total']} instructions per key tile: LDGSTS {c['LDGSTS']}, "
            f"LDG {c['LDG']}, int {c['int']} (IMAD* {c['IMAD']}, 64-bit {c['64-bit']}), "
            f"uniform {c['uniform']}, HMMA {c['HMMA']}, MUFU {c['MUFU']}, BAR {c['BAR']}"
        )
        if opcodes:
            out.append("    " + ", ".join(f"{op} {n}" for op, n in r["opcodes"].items()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", help="also compile this commit's kernels (printed first)")
    ap.add_argument("--log", type=Path, help="also write the report here")
    ap.add_argument("--opcodes", action="store_true", help="every loop's opcode histogram")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # compile_at's worker
    args = ap.parse_args()
    if args.json:
        print(json.dumps(compile_cases()))
        return 0
    import triton

    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "flashcore"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    head = _short("HEAD") + (" (flashcore/ modified)" if dirty else "")
    command = "python tools/paged_decode_sass.py " + " ".join(sys.argv[1:])
    report = [
        "Paged decode key loop, SASS per key tile (offline sm_90a compile, no GPU)",
        f"command: {command.strip()}",
        f"triton {triton.__version__}; shape {SHAPE} bf16, Sn 1, {SMS} SMs",
        "",
    ]
    if args.against:
        report += lines(f"commit {_short(args.against)}:", compile_at(args.against), args.opcodes)
    report += lines(f"commit {head}:", compile_cases(), args.opcodes)
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.log:
        args.log.parent.mkdir(parents=True, exist_ok=True)
        args.log.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
