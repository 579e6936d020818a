"""``backward``: the backward pass, gradients against float64, determinism, memory, speed
beside SDPA and FlexAttention, launch-config sweep, a transformers training step."""

from __future__ import annotations


def add_backward_arguments(p) -> None:
    p.add_argument("--grid", default="full", choices=["full", "cpu", "none"])
    p.add_argument("--limit", type=int, help="only the first N grid cases")
    p.add_argument(
        "--both-modes", action="store_true", help="grid in deterministic and atomic mode"
    )
    p.add_argument(
        "--jobs", type=int, default=8, help="processes compiling/checking the grid at once (GPU)"
    )
    p.add_argument("--repeats", type=int, default=5, help="repeats of the determinism check")
    p.add_argument("--d", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--s", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--dtype", nargs="+", default=["bfloat16"], choices=["bfloat16", "float16"])
    p.add_argument(
        "--impls",
        nargs="+",
        default=["flashcore", "flashcore_atomic", "sdpa_flash", "sdpa_cudnn", "flex"],
    )
    p.add_argument(
        "--flex-d",
        type=int,
        nargs="*",
        default=[],
        help="head dims at which Flex is timed (compiled per shape, ~30 s each)",
    )
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--fwd-bwd", action="store_true", help="also time forward + backward")
    p.add_argument("--memory", action="store_true", help="peak memory against S")
    p.add_argument(
        "--tune", action="store_true", help="launch-config sweep of the backward kernels"
    )
    p.add_argument("--tune-s", type=int, nargs="+", default=[4096])
    p.add_argument(
        "--train", action="store_true", help="transformers training step: fp32 rule, bf16 tokens/s"
    )
    p.add_argument("--record", action="store_true", help="write results/<gpu>/backward.json")


def run_backward(args) -> int:
    from ...results import write_result
    from ..backward_bench import run_backward_record

    def record(payload):  # after every stage: a run cut short keeps what it measured
        if args.record:
            print(f"recorded {write_result('backward', payload)}", flush=True)

    payload = run_backward_record(
        grid=args.grid,
        limit=args.limit,
        both_modes=args.both_modes,
        jobs=args.jobs,
        repeats=args.repeats,
        head_dims=args.d,
        seqlens=args.s,
        dtypes=args.dtype,
        impls=args.impls,
        flex_head_dims=args.flex_d,
        reps=args.reps,
        fwd_bwd=args.fwd_bwd,
        memory=args.memory,
        tune=args.tune,
        tune_seqlens=args.tune_s,
        train=args.train,
        on_stage=record,
    )
    failed = payload.get("summary", {}).get("failed", 0)
    return 0 if failed == 0 else 1
