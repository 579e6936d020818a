"""Command line: ``python -m flashcore {info,validate,sanitize} ...``.

    python -m flashcore info
    python -m flashcore validate --grid full --determinism --large-offsets --record
    python -m flashcore sanitize            # compute-sanitizer memcheck + racecheck (GPU)

On a machine without a GPU, set TRITON_INTERPRET=1 (the CLI does it for you) and use
``--grid cpu``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys


def _ensure_backend() -> None:
    # The interpreter flag is read when @triton.jit decorates, i.e. at import of the kernels.
    if "flashcore.kernels.forward" in sys.modules:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_info(_args) -> int:
    _ensure_backend()
    from .results import provenance

    for key, value in provenance().items():
        print(f"{key:>18}: {value}")
    return 0


def cmd_validate(args) -> int:
    _ensure_backend()
    from . import validate as V
    from .results import write_result

    device = _device()
    cases = V.correctness_grid(args.grid)
    if args.filter:
        cases = [c for c in cases if args.filter in c.name]
    if args.limit:
        cases = cases[: args.limit]
    rows = V.run_grid(cases, device, base_seed=args.seed, progress=not args.quiet)
    summary = V.summarize(rows)
    payload = {"grid": args.grid, "summary": summary, "cases": rows}
    if args.determinism:
        det = V.check_determinism(V.determinism_cases(device), device)
        payload["determinism"] = det
        print(f"determinism: {sum(r['bitwise_identical'] for r in det)}/{len(det)} cases bitwise identical over "
              f"{det[0]['repeats']} launches")
    if args.large_offsets:
        payload["large_offsets"] = V.check_large_offsets(device)
        for r in payload["large_offsets"]:
            print(f"large offsets: {r['name']}: max element offset {r['max_element_offset']:.3e}, "
                  f"ratio {r['ratio']:.3f}, passed {r['passed']}")
    failed = [r for r in rows if not r["passed"]]
    for r in failed:
        print(f"FAIL {r['name']}: max err {r['max_abs_err']:.3e} > bound {r['bound']:.3e} "
              f"(nan mismatch {r['nan_mismatch']})")
    print(f"{summary['cases']} cases, {summary['failed']} failed; worst error ratio "
          f"{summary['worst_ratio']:.3f} ({summary['worst_case']})")
    if args.record:
        path = write_result("correctness", payload)
        print(f"recorded {path}")
    ok = not failed and all(r["bitwise_identical"] for r in payload.get("determinism", [])) and all(
        r["passed"] for r in payload.get("large_offsets", []))
    return 0 if ok else 1


def cmd_sanitize(args) -> int:
    """Run the sanitizer grid under compute-sanitizer's memcheck and racecheck tools.

    PyTorch's caching allocator is switched off so every tensor is its own allocation and
    an out-of-bounds access cannot land inside a neighbouring tensor's pool block."""
    from .results import write_result

    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    report = []
    for tool in args.tools:
        cmd = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "3",
               sys.executable, "-m", "flashcore", "validate", "--grid", "sanitizer", "--quiet"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        text = proc.stdout + proc.stderr
        m = re.search(r"ERROR SUMMARY: (\d+) error", text)
        hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", text)
        # memcheck prints "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: N hazards".
        found = m or hazards
        entry = {"tool": tool, "returncode": proc.returncode,
                 "errors": int(found.group(1)) if found else None,
                 "summary_lines": [ln for ln in text.splitlines() if "SUMMARY" in ln or "cases," in ln]}
        report.append(entry)
        print(f"{tool}: exit {proc.returncode}, errors/hazards reported: {entry['errors']}")
        if proc.returncode not in (0,):
            print(text[-4000:])
    if args.record:
        print(f"recorded {write_result('sanitizer', {'grid': 'sanitizer', 'runs': report})}")
    return 0 if all(r["returncode"] == 0 and r["errors"] == 0 for r in report) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flashcore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="print the device and library versions").set_defaults(fn=cmd_info)

    p = sub.add_parser("validate", help="run a correctness grid against float64")
    p.add_argument("--grid", default="cpu", choices=["full", "cpu", "sanitizer"])
    p.add_argument("--filter", help="only cases whose name contains this text")
    p.add_argument("--limit", type=int, help="only the first N cases")
    p.add_argument("--seed", type=int, default=0, help="base seed (case i uses seed + i)")
    p.add_argument("--determinism", action="store_true", help="also check bitwise repeatability")
    p.add_argument("--large-offsets", action="store_true",
                   help="also check views whose element offsets exceed 2^31 (GPU, ~5 GB)")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/correctness.json")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("sanitize", help="compute-sanitizer memcheck/racecheck over a sample grid (GPU)")
    p.add_argument("--tools", nargs="+", default=["memcheck", "racecheck"])
    p.add_argument("--record", action="store_true", help="add the result to correctness.json")
    p.set_defaults(fn=cmd_sanitize)

    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
