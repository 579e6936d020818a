"""``validate``, ``sanitize`` and ``varlen``: correctness grids against float64, and the
sanitizer runs over them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from . import device, progress_iter


def add_validate_arguments(p) -> None:
    p.add_argument("--grid", default="cpu", choices=["full", "cpu", "sanitizer"])
    p.add_argument("--filter", help="only cases whose name contains this text")
    p.add_argument("--limit", type=int, help="only the first N cases")
    p.add_argument("--seed", type=int, default=0, help="base seed (case i uses seed + i)")
    p.add_argument("--determinism", action="store_true", help="also check bitwise repeatability")
    p.add_argument(
        "--large-offsets",
        action="store_true",
        help="also check views whose element offsets exceed 2^31 (GPU, ~5 GB)",
    )
    p.add_argument("--record", action="store_true", help="write results/<gpu>/correctness.json")
    p.add_argument(
        "--shard",
        help="i/n: every n-th case from the i-th, recorded as <topic>.shard<i>of<n> (a GPU "
        "run checks the grid in parallel processes, whose compiles are CPU-bound)",
    )
    p.add_argument(
        "--merge-shards",
        type=int,
        metavar="N",
        help="run nothing: merge the N shard records of --record-as into one record",
    )
    p.add_argument(
        "--record-as",
        default="correctness",
        help="the record's topic (e.g. correctness_gluon for a run forced onto the Gluon "
        "kernel with FLASHCORE_FORWARD_HOPPER=always)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run_validate(args) -> int:
    from ... import validate as V
    from ...results import write_result

    if args.merge_shards:
        return _merge_shards(args.record_as, args.merge_shards)
    dev = device()
    cases = V.correctness_grid(args.grid)
    if args.filter:
        cases = [c for c in cases if args.filter in c.name]
    if args.limit:
        cases = cases[: args.limit]
    seeds = [args.seed + i for i in range(len(cases))]  # a case's seed: its place in the grid
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        cases, seeds = cases[index::count], seeds[index::count]
        args.record_as = f"{args.record_as}.shard{index}of{count}"
    rows = V.run_grid(cases, dev, seeds=seeds, progress=not args.quiet)
    summary = V.summarize(rows)
    payload = {
        "grid": args.grid,
        "forward_dispatch": os.environ.get("FLASHCORE_FORWARD_HOPPER", "auto"),
        "summary": summary,
        "cases": rows,
    }
    if args.determinism:
        det = V.check_determinism(V.determinism_cases(dev), dev)
        payload["determinism"] = det
        print(
            f"determinism: {sum(r['bitwise_identical'] for r in det)}/{len(det)} cases "
            f"bitwise identical over "
            f"{det[0]['repeats']} launches"
        )
    if args.large_offsets:
        payload["large_offsets"] = V.check_large_offsets(dev)
        for r in payload["large_offsets"]:
            print(
                f"large offsets: {r['name']}: max element offset {r['max_element_offset']:.3e}, "
                f"ratio {r['ratio']:.3f}, passed {r['passed']}"
            )
    failed = [r for r in rows if not r["passed"]]
    for r in failed:
        print(
            f"FAIL {r['name']}: max err {r['max_abs_err']:.3e} > bound {r['bound']:.3e} "
            f"(nan mismatch {r['nan_mismatch']})"
        )
    print(
        f"{summary['cases']} cases, {summary['failed']} failed; worst error ratio "
        f"{summary['worst_ratio']:.3f} ({summary['worst_case']}); cases by kernel "
        f"{summary['cases_by_kernel']}"
    )
    if args.record:
        path = write_result(args.record_as, payload)
        print(f"recorded {path}")
    ok = (
        not failed
        and all(r["bitwise_identical"] for r in payload.get("determinism", []))
        and all(r["passed"] for r in payload.get("large_offsets", []))
    )
    return 0 if ok else 1


def _merge_shards(topic: str, count: int) -> int:
    """One record from the shard records of one run (same commit and machine): cases in grid
    order, the summary recomputed, each shard's provenance kept; the shard files removed."""
    from ... import validate as V
    from ...results import read_result, result_path, write_result

    shards = [read_result(f"{topic}.shard{i}of{count}") for i in range(count)]
    rows = sorted((r for sh in shards for r in sh["cases"]), key=lambda r: r["seed"])
    payload = {
        "grid": shards[0]["grid"],
        "forward_dispatch": shards[0]["forward_dispatch"],
        "summary": V.summarize(rows),
        "cases": rows,
        "shards": [{"provenance": sh["provenance"], "cases": len(sh["cases"])} for sh in shards],
    }
    for sh in shards:  # the checks only one shard ran
        payload.update({k: sh[k] for k in ("determinism", "large_offsets") if k in sh})
    path = write_result(topic, payload)
    for i in range(count):
        result_path(f"{topic}.shard{i}of{count}").unlink()
    summary = payload["summary"]
    print(
        f"merged {count} shards into {path}: {summary['cases']} cases, {summary['failed']} failed"
    )
    return 0 if summary["failed"] == 0 else 1


SANITIZER_WORKLOADS = [
    "forward",
    "fp8",
    "forward_hopper",
    "forward_hopper_walk",
    "forward_hopper_mla",
    "fp8_hopper",
    "backward",
    "backward_hopper",
    "backward_hopper_ws",
    "varlen",
    "decode",
]


def add_sanitize_arguments(p) -> None:
    p.add_argument("--tools", nargs="+", default=["memcheck", "racecheck", "synccheck"])
    p.add_argument(
        "--workloads",
        nargs="+",
        choices=SANITIZER_WORKLOADS,
        help="subset of the workloads (default: all)",
    )
    p.add_argument("--jobs", type=int, default=1, help="sanitizer processes at once")
    p.add_argument(
        "--record",
        action="store_true",
        help="write results/<gpu>/sanitizer.json (after every run: a cut run keeps what it did)",
    )


def run_sanitize(args) -> int:
    """Run the sanitizer grid under compute-sanitizer's memcheck and racecheck tools.

    PyTorch's caching allocator is switched off so every tensor is its own allocation and
    an out-of-bounds access cannot land inside a neighbouring tensor's pool block."""
    from ...results import write_result

    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    # The forward grid (incl. sliding windows, TMA and pointer paths) and the fp8 kernel on an
    # S that is not a multiple of its 128-key padding, every recipe, causal and not.
    fp8_small = ["fp8", "--dists", "outlier", "--s", "200", "--heads", "2", "--seeds", "1"]
    workloads = {
        "forward": ["validate", "--grid", "sanitizer", "--quiet"],
        "fp8": [*fp8_small, "--no-speed"],
        # The same fp8 study on the Gluon forward's FP8 mode, 3 programs walking the tiles.
        "fp8_hopper": [*fp8_small, "--no-speed"],
        # The same grid with every case the Gluon Hopper kernel supports forced onto it;
        # then forced onto it with 3 programs, so every program walks many work tiles.
        "forward_hopper": ["validate", "--grid", "sanitizer", "--quiet"],
        "forward_hopper_walk": ["validate", "--grid", "sanitizer", "--quiet"],
        # MLA's head dims (q/k 192 as 128 + 64 columns, v 128) forced onto it, 3 programs.
        "forward_hopper_mla": ["-m", "flashcore.studies.sanitize_workloads", "mla"],
        # Every other kernel family on small awkward sizes (studies/sanitize_workloads.py).
        **{
            name: ["-m", "flashcore.studies.sanitize_workloads", name]
            for name in ("backward", "backward_hopper", "backward_hopper_ws", "varlen", "decode")
        },
    }
    if args.workloads:
        workloads = {w: a for w, a in workloads.items() if w in args.workloads}
    from concurrent.futures import ThreadPoolExecutor
    from threading import Lock

    runs = [(tool, workload) for tool in args.tools for workload in workloads]
    report, recorded, lock = [], [], Lock()

    def one(tool, workload):
        hopper = workload.startswith("forward_hopper")
        run_env = dict(env, FLASHCORE_FORWARD_HOPPER="always" if hopper else "never")
        if workload in ("forward_hopper_walk", "forward_hopper_mla", "fp8_hopper"):
            run_env.update(FLASHCORE_HOPPER_MAX_PROGRAMS="3")
        run_env.update(FLASHCORE_FP8_HOPPER="always" if workload == "fp8_hopper" else "never")
        if workload.startswith("backward_hopper"):
            run_env.update(FLASHCORE_BACKWARD_HOPPER="always")
        flashcore_args = workloads[workload]
        # A module of its own ("-m ...") or a flashcore command.
        target = (
            flashcore_args if flashcore_args[0] == "-m" else ["-m", "flashcore", *flashcore_args]
        )
        cmd = [
            "compute-sanitizer",
            "--tool",
            tool,
            "--error-exitcode",
            "3",
            sys.executable,
            *target,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
        text = proc.stdout + proc.stderr
        m = re.search(r"ERROR SUMMARY: (\d+) error", text)
        hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", text)
        # memcheck prints "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: N hazards".
        found = m or hazards
        entry = {
            "tool": tool,
            "workload": workload,
            "returncode": proc.returncode,
            "errors": int(found.group(1)) if found else None,
            "summary_lines": [
                ln
                for ln in text.splitlines()
                if "SUMMARY" in ln or "cases," in ln or "own-bound" in ln
            ],
        }
        with lock:
            report.append(entry)
            print(
                f"{tool} on {workload}: exit {proc.returncode}, "
                f"errors/hazards reported: {entry['errors']}",
                flush=True,
            )
            if proc.returncode not in (0,):
                print(text[-4000:], flush=True)
            if args.record:  # after every run, in the order of the plan
                order = {run: i for i, run in enumerate(runs)}
                done = sorted(report, key=lambda e: order[(e["tool"], e["workload"])])
                payload = {"grid": "sanitizer", "runs": done, "complete": len(done) == len(runs)}
                recorded.append(write_result("sanitizer", payload))
        return entry

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(lambda run: one(*run), runs))
    if recorded:
        print(f"recorded {recorded[-1]}")
    return 0 if all(r["returncode"] == 0 and r["errors"] == 0 for r in report) else 1


def add_varlen_arguments(p) -> None:
    p.add_argument("--cases", type=int, default=240)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--record", action="store_true", help="write results/<gpu>/varlen.json")


def run_varlen(args) -> int:
    """Varlen correctness grid under the error rule (any machine) and speed (GPU)."""
    import torch

    from ...results import write_result
    from .. import launch

    dev = device()
    dtype = torch.bfloat16 if dev == "cuda" else torch.float16
    cases = launch.varlen_cases(seed=args.seed, count=args.cases, small=dev != "cuda")
    results = [launch.run_varlen_case(c, dev, dtype) for c in progress_iter(cases, "varlen cases")]
    failed = [r for r in results if not r["passed"]]
    print(
        f"varlen: {len(results)} cases, {len(failed)} fail the error rule "
        f"(worst ratio {max(r['ratio'] for r in results):.3f})"
    )
    payload = {
        "grid": {
            "cases": len(results),
            "failed": len(failed),
            "dtype": str(dtype).replace("torch.", ""),
            "results": results,
        }
    }
    if dev == "cuda":
        payload["speed"] = launch.varlen_speed()
        print("speed (ms, eager):", payload["speed"]["ms"])
        print("speed (ms, graph replay):", payload["speed"]["graph_ms"])
    if args.record:
        print(f"recorded {write_result('varlen', payload)}")
    return 0 if not failed else 1
