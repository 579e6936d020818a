"""``bench``, ``tune`` and ``launch``: forward and decode speed beside the peers, the
forward kernel's launch-config sweep, and the host cost of one call (GPU)."""

from __future__ import annotations

from . import causal_choice, device, progress, progress_iter


def add_bench_arguments(p) -> None:
    p.add_argument(
        "--suite",
        default="all",
        choices=["forward", "prior", "decode", "all", "paged"],
        help="paged: paged vs dense decode against the copy ceiling (not part of all)",
    )
    p.add_argument("--d", type=int, nargs="+", help="head dims (default 64 128 256)")
    p.add_argument("--s", type=int, nargs="+", help="sequence lengths (default 512 ... 16384)")
    p.add_argument("--dtype", nargs="+", choices=["bfloat16", "float16"])
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    p.add_argument(
        "--impls",
        nargs="+",
        help="subset of: " + "flashcore sdpa_flash sdpa_cudnn sdpa_efficient sdpa_math flex",
    )
    p.add_argument(
        "--decode-impls",
        nargs="+",
        help="the decode suite's subset of: "
        + "flashcore_decode flashcore sdpa_flash sdpa_cudnn sdpa_efficient sdpa_math",
    )
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--topic", default="perf", help="record name (results/<gpu>/<topic>.json)")
    p.add_argument("--record", action="store_true")


def run_bench(args) -> int:
    from ...results import write_result
    from .. import bench as Bm

    if args.suite == "paged":
        from .. import paged_decode

        payload = paged_decode.run_paged_decode_record(
            paged_decode.paged_decode_shapes(),
            reps=args.reps,
            progress=progress_iter,
            log=print,
        )
        if args.record:
            topic = "paged_decode" if args.topic == "perf" else args.topic
            print(f"recorded {write_result(topic, payload)}")
        return 0
    forward = []
    if args.suite in ("forward", "all"):
        forward = Bm.forward_shapes(
            head_dims=args.d or (64, 128, 256),
            seqlens=args.s or (512, 1024, 2048, 4096, 8192, 16384),
            dtypes=args.dtype or ["bfloat16", "float16"],
            causal=causal_choice(args.causal),
        )
    payload = Bm.run_perf_record(
        forward,
        Bm.prior_report_shapes() if args.suite in ("prior", "all") else [],
        Bm.decode_shapes() if args.suite in ("decode", "all") else None,
        impls=args.impls,
        decode_impls=args.decode_impls,
        reps=args.reps,
        progress=progress_iter,
        log=print,
    )
    if args.record:
        print(f"recorded {write_result(args.topic, payload)}")
    return 0


def add_tune_arguments(p) -> None:
    p.add_argument("--d", type=int, nargs="+")
    p.add_argument("--s", type=int, nargs="+")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/tuning.json")


def run_tune(args) -> int:
    from ...results import write_result
    from .. import bench as Bm

    shapes = Bm.forward_shapes(
        head_dims=args.d or (64, 128, 256),
        seqlens=args.s or (1024, 8192),
        dtypes=["bfloat16"],
        causal=(False, True),
    )
    bar = progress(len(shapes) * len(Bm.tuning_configs()), "tune")
    payload = Bm.run_tuning_record(shapes, progress=bar)
    bar.close()
    rows = payload["rows"]
    for shape in shapes:
        mine = [r for r in rows if all(r[k] == shape[k] for k in ("B", "Hq", "S", "D", "causal"))]
        ok = sorted((r for r in mine if "tflops" in r), key=lambda r: -r["tflops"])
        print(
            f"S{shape['S']} D{shape['D']} causal={shape['causal']}: "
            + ", ".join(f"{r['config']} {r['tflops']:.0f}" for r in ok[:5])
        )
        for r in mine:
            if "error" in r:
                print(f"   {r['config']}: {r['error']}")
    if args.record:
        print(f"recorded {write_result('tuning', payload)}")
    return 0


def add_launch_arguments(p) -> None:
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--record", action="store_true", help="write results/<gpu>/launch.json")


def run_launch(args) -> int:
    """Host cost per call (eager) and CUDA-graph replay, flashcore beside SDPA's backends."""
    from ...results import write_result
    from .. import launch

    if device() != "cuda":
        print("launch needs a CUDA device (host cost of real launches)")
        return 1
    payload = launch.run_launch_record(calls=args.calls, repeats=args.repeats)
    for line in launch.summary(payload["rows"]):
        print(line)
    if args.record:
        print(f"recorded {write_result('launch', payload)}")
    return 0
