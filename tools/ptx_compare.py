"""Offline (no GPU): do two source trees compile the same kernels? Compiles, for sm_90, the
Gluon forward (D 64/128/256, causal and not, bf16, lse, no sinks) and the Triton backward's
dK/dV and dQ kernels (D 64/128/256, causal and not, bf16, deterministic mode, TMA path) from
this checkout and from another tree, each in its own process, and compares their PTX with the
debug sections and source-line markers removed.

    git archive <commit> flashcore | tar -x -C .ab/other
    python tools/ptx_compare.py --other .ab/other [--wide] [--fp8] [--sass]

Prints one line per kernel: identical, or the first differing line. ``--fp8`` adds the Gluon
forward's FP8 mode (D 64/128/256, causal and not, as it ships). ``--sass`` also compares the
machine code (nvdisasm of the cubin, addresses and encodings removed), which is the
comparison that decides: identical PTX instructions do not imply identical SASS. The line
info Triton emits marks each inlined @jit call with labels (``$L__tmpN``) that ptxas
schedules around, so adding a helper call changes the schedule even where the helper
compiles to the very instruction it replaced (2026-11-28: the Gluon forward's ``_exp2``
wrapper at EXP2_EMULATED = 0; ``logs/sass_lineinfo_c530054_5403789.log``). Shifting lines
(comments, docstrings) leaves the SASS as it was. A kernel change whose machine code differs
only where a new option is on leaves the calls without that option running what they ran;
the records stay marked stale all the same (their fingerprint names the source files), but
this says which of them a re-record could change."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # flashcore, for strip_sass

WORKER = r"""
import json, os, sys
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.environ["PTX_COMPARE_TOOLS"])  # this checkout's tools/: sm90_compile
import torch, triton
from triton.compiler import ASTSource
from sm90_compile import capture_launches, compile_launch

def code(compiled):  # PTX, and SASS too where asked (the cubin through nvdisasm)
    out = {"ptx": compiled.asm["ptx"]}
    if os.environ.get("PTX_COMPARE_SASS"):
        from flashcore.studies.sass import disassemble
        out["sass"] = disassemble(compiled.asm["cubin"])
    return out

def compile_jit(fn, args, kw, source_cls):
    allkw = dict(zip(fn.arg_names, args))
    allkw.update(kw)
    return code(compile_launch(fn, allkw, source_cls))

out = {}
if os.environ.get("PTX_COMPARE_FP8"):
    from flashcore.studies import sass
    for d in (64, 128, 256):
        for causal in (False, True):
            out[f"gluon fp8 forward D{d} causal={causal}"] = code(
                sass.compile_kernel(sass.gluon_fp8_forward_spec(d, causal)))
from flashcore.kernels import forward_hopper as fh
from triton.experimental.gluon._runtime import GluonASTSource
for d in (64, 128, 256):
    for causal in (False, True):
        q = torch.empty(2, 16, 4096, d, dtype=torch.bfloat16)
        lse = torch.empty(2, 16, 4096)
        grid, args, kw = fh._launch_args(q, q, q, q, lse, causal_offset=0, is_causal=causal,
                                         qk_scale=0.1, store_lse=True, max_programs=132)
        out[f"gluon forward D{d} causal={causal}"] = compile_jit(
            fh._fa3_fwd_kernel, args, kw, GluonASTSource)

from flashcore.kernels import backward as bw
def backward(*tensors, causal, tma=lambda *a: True):
    return capture_launches(
        bw, ("_bwd_dkdv_kernel", "_bwd_dq_kernel", "_bwd_preprocess"),
        lambda: bw._launch_backward(*tensors, seqs=None, varlen=0, causal=causal,
            causal_offset=0, window=None, softcap=None, scale=None, config=None),
        tma_compatible=tma, on_interpreter=lambda t: False)
def compile_bwd(launches, names, label):
    for n in names:
        out[f"backward {n} {label}"] = code(compile_launch(getattr(bw, n), launches[n], ASTSource))
for d in (64, 128, 256):
    for causal in (False, True):
        q = torch.empty(1, 4, 1024, d, dtype=torch.bfloat16)
        lse = torch.empty(1, 4, 1024)
        launches = backward(q, q, q, q, q, lse, lse, q, q, q, None, causal=causal)
        compile_bwd(launches, ("_bwd_dkdv_kernel", "_bwd_dq_kernel"), f"D{d} causal={causal}")
if os.environ.get("PTX_COMPARE_WIDE"):
    # TMA where a GPU would take it: half precision, a power-of-two head dim.
    pow2 = lambda ts, d: d == triton.next_power_of_2(d)
    # --wide: the backward's other modes and head-dim pairs: atomic dQ (TMA path, bulk dQ
    # reduce), D192 with v at 192 (TMA), v of its own (pointer path: 128/64, MLA's 192/128).
    for d, dv, det in ((64, 64, False), (128, 128, False), (256, 256, False), (192, 192, True),
                       (192, 192, False), (128, 64, True), (128, 64, False), (192, 128, True),
                       (192, 128, False)):
        for causal in (False, True):
            q = torch.empty(1, 4, 1024, d, dtype=torch.bfloat16)
            v = torch.empty(1, 4, 1024, dv, dtype=torch.bfloat16)
            lse = torch.empty(1, 4, 1024)
            acc = None if det else torch.empty(1, 4, 1024, d)
            launches = backward(v, q, q, v, v, lse, lse, q, q, v, acc, causal=causal, tma=pow2)
            mode = "deterministic" if det else "atomic"
            names = ("_bwd_dkdv_kernel", "_bwd_dq_kernel") if det else ("_bwd_dkdv_kernel",)
            compile_bwd(launches, names, f"D{d}/{dv} {mode} causal={causal}")
print("RESULT " + json.dumps(out))
"""


def strip_debug(ptx: str) -> list[str]:
    """PTX lines without source-line markers, comments, the DWARF sections and the labels only
    they refer to (``$L__tmpN:``, which mark inlined calls' scopes; branch targets are
    ``$L__BB``)."""
    body = re.split(r"^\s*\.section\s+\.debug", ptx, maxsplit=1, flags=re.M)[0]
    lines = []
    for line in body.splitlines():
        line = line.split("//")[0].rstrip()
        if not line or line.lstrip().startswith(".loc") or line.lstrip().startswith(".file"):
            continue
        if re.fullmatch(r"\$L__tmp\d+:", line.strip()):
            continue
        lines.append(line)
    return lines


def strip_sass(sass: str) -> list[str]:
    """nvdisasm's labels and instructions, without addresses, encodings and comments."""
    from flashcore.studies.sass_budget import listing

    return listing(sass)


def compile_tree(tree: Path, wide: bool = False, fp8: bool = False, sass: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PTX_COMPARE_TOOLS=str(Path(__file__).parent))
    for flag, name in ((wide, "WIDE"), (fp8, "FP8"), (sass, "SASS")):
        if flag:
            env[f"PTX_COMPARE_{name}"] = "1"
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER], cwd=tree, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"compiling in {tree} failed:\n{proc.stderr[-2000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", type=Path, required=True, help="the other source tree")
    ap.add_argument(
        "--wide",
        action="store_true",
        help="also the backward's atomic mode, D192/192 and v of its own (128/64, 192/128)",
    )
    ap.add_argument("--fp8", action="store_true", help="also the Gluon forward's FP8 mode")
    ap.add_argument("--sass", action="store_true", help="also compare the machine code")
    args = ap.parse_args()
    opts = dict(wide=args.wide, fp8=args.fp8, sass=args.sass)
    here = compile_tree(Path(__file__).resolve().parents[1], **opts)
    other = compile_tree(args.other.resolve(), **opts)
    differ = 0
    for name in here:
        verdicts = []
        for kind, strip in (("ptx", strip_debug), ("sass", strip_sass)):
            if kind not in here[name]:
                continue
            a, b = strip(here[name][kind]), strip(other.get(name, {}).get(kind, ""))
            if a == b:
                verdicts.append(f"{kind.upper()} identical ({len(a)} lines)")
                continue
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = f"{a[first : first + 1]} vs {b[first : first + 1]}"
            verdicts.append(f"{kind.upper()} differs at line {first}: {where}")
        differ += any("differs" in v for v in verdicts)
        print(f"{name}: " + "; ".join(verdicts))
    print(f"{len(here) - differ} of {len(here)} kernels identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
