"""``fp8``: the FP8 study, errors against float64 over seeds (any machine), the launch-config
sweep and speed (GPU)."""

from __future__ import annotations

from . import device, progress_iter


def add_fp8_arguments(p) -> None:
    p.add_argument("--dists", nargs="+", default=["normal", "outlier", "massive_channels"])
    p.add_argument("--s", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/fp8.json")


def run_fp8(args) -> int:
    """FP8 study: errors against float64 (many seeds), launch-config sweep, speed."""
    from ...results import write_result
    from .. import fp8_study as F

    payload = F.run_fp8_record(
        dists=args.dists,
        seqlens=args.s,
        heads=args.heads,
        seeds=args.seeds,
        device=device(),
        speed=not args.no_speed,
        reps=args.reps,
        progress=lambda items, desc: progress_iter(items, desc, mininterval=5),
        log=print,
    )
    if args.record:
        print("recorded:", write_result("fp8", payload))
    return 0
