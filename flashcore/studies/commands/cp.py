"""``cp``: context parallelism, run under ``torchrun --nproc-per-node N -m flashcore cp ...``
(one process per device; gloo on CPU): the ring against float64, and speed on GPUs."""

from __future__ import annotations

import os
import sys


def add_cp_arguments(p) -> None:
    p.add_argument("action", choices=["check", "bench"])
    p.add_argument("--grid", choices=["cpu", "gpu"], help="correctness grid (default: by device)")
    p.add_argument("--filter", help="only check cases whose name contains this text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="bench without the correctness grid")
    p.add_argument(
        "--seqlens", type=int, nargs="+", help="global sequence lengths (default 128K ... 2M)"
    )
    p.add_argument("--wide", action="store_true", help="S to 4M, every impl to 2M (about 20 min)")
    p.add_argument("--cp-only-from", type=int, help="from this S only flashcore's ring is timed")
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    p.add_argument("--heads", type=int, nargs=2, default=[8, 2], metavar=("HQ", "HKV"))
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument(
        "--budget-s", type=float, default=240.0, help="skip an S predicted to end past this"
    )
    p.add_argument("--record", action="store_true", help="write results/<gpu>-x<N>/<topic>.json")
    p.add_argument("--topic", default="context_parallel", help="record name")


def run_cp(args) -> int:
    """Context parallelism; run under torchrun, one process per device (gloo on CPU)."""
    # NVLink multicast stays off (NVLS / symmetric memory are not used by the ring).
    for key, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(key, value)
    import torch
    import torch.distributed as dist

    from ...results import device_slug, write_result
    from .. import context_parallel as CP

    if args.action == "bench" and not torch.cuda.is_available():
        if args.dtype == "bfloat16":
            print(
                "cp bench on CPU (a smoke run: interpreter timings mean nothing) needs "
                "--dtype float16: the interpreter's bfloat16 dot is wrong",
                file=sys.stderr,
            )
            return 2
        print("cp bench on CPU: a smoke run of the code, the timings mean nothing", file=sys.stderr)
    rank, world_size, device = CP.init_from_env()
    log = print if rank == 0 else (lambda *a, **k: None)
    try:
        grid = args.grid or ("gpu" if device.type == "cuda" else "cpu")
        cases = []
        if args.action == "check" or not args.no_check:
            cases = CP.gpu_grid() if grid == "gpu" else CP.cpu_grid()
            if args.filter:
                cases = [c for c in cases if args.filter in c.name]
        # bench: the forward cases first, the gradient cases after the timings (the record
        # is written after each stage, so a late failure loses nothing measured before it).
        later = [c for c in cases if c.grad] if args.action == "bench" else []
        cases = [c for c in cases if c not in later]
        rows = CP.run_check(cases, device, base_seed=args.seed, progress=True) if cases else []

        def report(rows):
            summary = CP.summarize_cases(rows)
            if rows:
                log(
                    f"{summary['cases']} cases on {world_size} ranks, {summary['failed']} failed; "
                    f"worst error ratio {summary['worst_ratio']:.3f}; planted bugs caught "
                    f"{summary['planted_bugs_caught']}/{summary['planted_bugs']}"
                )
            return summary

        summary = report(rows)
        ok = summary["failed"] == 0 and summary["planted_bugs_caught"] == summary["planted_bugs"]
        if args.action == "check":
            return 0 if ok else 1

        seqlens = args.seqlens or (
            [2**k for k in range(17, 23)] if args.wide else [2**k for k in range(17, 22)]
        )
        cp_only_from = args.cp_only_from or (2**22 if args.wide else 2**21)
        causal_modes = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
        payload = {
            "world_size": world_size,
            "grid": grid,
            "summary": summary,
            "cases": rows,
            "config": {
                "batch": 1,
                "num_q_heads": args.heads[0],
                "num_kv_heads": args.heads[1],
                "head_dim": args.head_dim,
                "dtype": args.dtype,
                "seqlens": seqlens,
                "cp_only_from": cp_only_from,
                "budget_s": args.budget_s,
                "timing": "wall clock per call, barrier before, slowest rank, median of "
                "3 calls (1 call from S = 1M)",
            },
        }
        slug = f"{device_slug()}-x{world_size}"

        def record(result):
            payload.update(result)
            if args.record and rank == 0:
                print("recorded:", write_result(args.topic, payload, slug=slug), flush=True)

        record({})
        record(
            CP.bench(
                seqlens,
                causal_modes=causal_modes,
                num_q_heads=args.heads[0],
                num_kv_heads=args.heads[1],
                head_dim=args.head_dim,
                dtype=getattr(torch, args.dtype),
                cp_only_from=cp_only_from,
                budget_s=args.budget_s,
                on_row=record,
                log=log,
            )
        )
        if later:
            rows += CP.run_check(later, device, base_seed=args.seed + len(rows), progress=True)
            summary = report(rows)
            ok = (
                summary["failed"] == 0 and summary["planted_bugs_caught"] == summary["planted_bugs"]
            )
            payload.update(summary=summary, cases=rows)
            record({})
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()
