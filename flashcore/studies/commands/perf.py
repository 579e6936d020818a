"""``bench``, ``tune`` and ``launch``: forward and decode speed beside the peers, the
forward kernel's launch-config sweep, and the host cost of one call (GPU)."""

from __future__ import annotations

from . import causal_choice, device, progress, progress_iter


def add_bench_arguments(p) -> None:
    p.add_argument("--suite", default="all", choices=["forward", "prior", "decode", "all"])
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


def _print_perf_rows(rows):
    for r in rows:
        what = (
            f"{r['dtype']:>8} B{r['B']:<3} H{r['Hq']:<3} S{r['S']:<6} D{r['D']:<4} "
            f"{'causal' if r['causal'] else 'full  '} {r['impl']:<15}"
        )
        if "timing" in r:
            g = (
                f"  graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us"
                if "graph_timing" in r
                else ""
            )
            print(f"{what} {r['timing']['median_ms'] * 1e3:10.1f} us {r['tflops']:7.1f} TFLOP/s{g}")
        else:
            print(f"{what} {r.get('error') or r.get('skipped')}")


def run_bench(args) -> int:
    from ...results import write_result
    from .. import bench as Bm

    shapes = []
    if args.suite in ("forward", "all"):
        dtypes = args.dtype or ["bfloat16", "float16"]
        shapes += Bm.forward_shapes(
            head_dims=args.d or (64, 128, 256),
            seqlens=args.s or (512, 1024, 2048, 4096, 8192, 16384),
            dtypes=dtypes,
            causal=causal_choice(args.causal),
        )
    prior = []
    if args.suite in ("prior", "all"):
        prior = Bm.prior_report_shapes()
    impls = args.impls or Bm.PEERS
    payload = {"method": Bm.__doc__.strip(), "ceilings": Bm.ceilings()}
    c = payload["ceilings"]
    print(
        f"ceilings: matmul {c['matmul']['tflops']:.1f} TFLOP/s, copy {c['copy']['tbps']:.2f} TB/s"
    )
    rows = []
    bar = progress(len(shapes) + len(prior), "bench")
    for shape in shapes:
        rows += Bm.bench_attention_shape(shape, impls, reps=args.reps)
        bar.update(1)
    prior_rows = []
    for shape in prior:
        prior_rows += Bm.bench_attention_shape(
            shape,
            [i for i in impls if i != "sdpa_math"],
            reps=args.reps,
            graph=True,
            keep_samples=True,
        )
        bar.update(1)
    bar.close()
    _print_perf_rows(rows + prior_rows)
    payload.update({"forward": rows, "prior_regime": prior_rows})
    if args.suite in ("decode", "all"):
        decode_rows = []
        decode_impls = args.decode_impls or Bm.DECODE_PEERS
        for shape in progress_iter(Bm.decode_shapes(), "decode"):
            decode_rows += Bm.bench_attention_shape(shape, decode_impls, reps=args.reps, graph=True)
        for r in decode_rows:
            if "timing" in r:
                r["tbps"] = Bm.kv_bytes(r) / r["timing"]["median_ms"] / 1e9
                r["graph_tbps"] = Bm.kv_bytes(r) / r["graph_timing"]["median_ms"] / 1e9
                print(
                    f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17} "
                    f"{r['timing']['median_ms'] * 1e3:8.1f} us {r['tbps']:5.2f} TB/s "
                    f"(graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us "
                    f"{r['graph_tbps']:5.2f} TB/s)"
                )
            else:
                print(
                    f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17} "
                    f"{r.get('error') or r.get('skipped')}"
                )
        payload["decode"] = decode_rows
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
    configs = Bm.tuning_configs()
    bar = progress(len(shapes) * len(configs), "tune")
    rows = Bm.tune_forward(shapes, configs, progress=bar)
    bar.close()
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
        print(f"recorded {write_result('tuning', {'configs': configs, 'rows': rows})}")
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
    rows = launch.measure(calls=args.calls, repeats=args.repeats)
    for line in launch.summary(rows):
        print(line)
    if args.record:
        payload = {"rows": rows, "calls": args.calls, "repeats": args.repeats}
        print(f"recorded {write_result('launch', payload)}")
    return 0
