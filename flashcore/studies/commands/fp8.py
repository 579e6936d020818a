"""``fp8``: the FP8 study, errors against float64 over seeds (any machine), the launch-config
sweep and speed (GPU)."""

from __future__ import annotations

from . import device


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
    from tqdm import tqdm

    from ...results import write_result
    from .. import fp8_study as F

    dev = device()
    on_gpu = dev == "cuda"
    payload: dict = {"variants": list(F.VARIANTS), "p_scale": F.P_SCALE}
    rows = []
    combos = [(dist, causal, s) for dist in args.dists for causal in (False, True) for s in args.s]
    baselines = ("bfloat16", "float16") if on_gpu else ("float16",)
    for dist, causal, seqlen in tqdm(combos, desc="fp8 errors", mininterval=5):
        rows += F.error_rows(
            dist,
            heads=args.heads,
            seqlen=seqlen,
            head_dim=128,
            causal=causal,
            seeds=tuple(range(args.seeds)),
            baselines=baselines,
            device=dev,
        )
    payload["error_shape"] = dict(B=1, H=args.heads, D=128, S=list(args.s), seeds=args.seeds)
    payload["errors"] = rows
    payload["error_summary"] = F.summarize(rows)
    for r in payload["error_summary"]:
        print(
            f"{r['dist']:>16} causal={r['causal']!s:5} S={r['S']:<6} {r['impl']:<24} "
            f"rmse {r['rmse_median']:.2e} [{r['rmse_min']:.2e}, {r['rmse_max']:.2e}] "
            f"max {r['max_err']:.2e} own-bound {r['own_bound_ratio']:.2f}"
        )
    if on_gpu and not args.no_speed:
        tuning = []
        for causal in (False, True):
            tuning += F.tune_fp8(
                dict(B=2, H=16, S=8192, D=128, causal=causal), F.FP8_TUNING_CONFIGS
            )
        payload["tuning"] = tuning
        best = {
            c: min(
                (t for t in tuning if t["causal"] == c and "median_ms" in t),
                key=lambda t: t["median_ms"],
            )["config"]
            for c in (False, True)
        }
        payload["tuned_config"] = {str(c): cfg for c, cfg in best.items()}
        speed = []
        for shape in tqdm(F.fp8_shapes(), desc="fp8 speed"):
            speed += F.bench_fp8([shape], config=best[shape["causal"]], reps=args.reps)
        payload["speed"] = speed
        for r in speed:
            print(
                f"{r['impl']:<14} causal={r['causal']!s:5} S={r['S']:<6} {r['tflops']:7.1f} TFLOP/s"
                + (f"  quantize {r['quantize_ms']:.3f} ms" if "quantize_ms" in r else "")
            )
    if args.record:
        print("recorded:", write_result("fp8", payload))
    return 0
