"""``long``: the long-context study (GPU): the S sweep to 1M tokens, sliding windows,
offsets past 2^31 elements, decode over long caches, the 32K whole-row tile."""

from __future__ import annotations

from . import device


def add_long_arguments(p) -> None:
    p.add_argument(
        "--parts", nargs="+", default=["sweep", "offsets", "window", "decode", "compile32k"]
    )
    p.add_argument("--s", type=int, nargs="+", default=[2**i for i in range(10, 21)])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--windows", type=int, nargs="*", default=[4096])
    p.add_argument(
        "--max-seconds", type=float, default=6.0, help="skip an impl once a call would exceed this"
    )
    p.add_argument("--topic", default="long_context")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/long_context.json")


def run_long(args) -> int:
    """Long-context study: the S sweep, sliding window, >2^31 offsets, decode on long caches."""
    from ...results import write_result
    from .. import long_context as L

    if device() != "cuda":
        print("the long-context measurements need a CUDA device")
        return 2
    payload: dict = {}
    if "sweep" in args.parts:

        def show(r):
            t = r.get("timing", {}).get("median_ms")
            print(
                f"S={r['S']:<8} causal={r['causal']!s:5} {r['impl']:<24} "
                + (
                    f"{t:10.3f} ms {r['tflops']:6.1f} TFLOP/s "
                    f"extra {r['extra_bytes'] / 2**20:8.1f} MiB"
                    if t
                    else r.get("error", r.get("skipped", ""))
                ),
                flush=True,
            )

        rows = L.bench_long_context(
            args.s,
            heads=args.heads,
            windows=tuple(args.windows),
            max_seconds_per_call=args.max_seconds,
            progress=show,
        )
        payload["sweep"] = rows
        payload["sweep_shape"] = dict(B=1, H=args.heads, D=128, dtype="bfloat16")
        payload["slopes"] = {
            f"{impl} causal={c}": L.loglog_slope(rows, impl, c)
            for impl in {r["impl"] for r in rows}
            for c in (False, True)
        }
        print(payload["slopes"])
    if "offsets" in args.parts:
        from ...validate import check_large_offsets

        payload["large_offsets"] = check_large_offsets("cuda", seqlen=2**20)
        payload["int32_demo"] = L.int32_offset_demo()
        print(payload["large_offsets"], payload["int32_demo"])
    if "window" in args.parts:
        from ...validate import correctness_grid, run_grid, summarize

        rows = run_grid(correctness_grid("window"), "cuda", progress=False)
        payload["window_correctness"] = {"summary": summarize(rows), "cases": rows}
        print(payload["window_correctness"]["summary"])
    if "decode" in args.parts:
        from ..bench import bench_attention_shape

        rows = []
        for shape in L.long_decode_shapes():
            rows += bench_attention_shape(
                shape, ["flashcore_decode", "sdpa_flash", "sdpa_cudnn"], reps=50, graph=True
            )
            print(
                [
                    (r["impl"], r.get("graph_timing", {}).get("median_ms"), r.get("error"))
                    for r in rows[-3:]
                ],
                flush=True,
            )
        payload["decode"] = rows
    if "compile32k" in args.parts:
        payload["whole_sequence_tile"] = {
            str(s): L.whole_sequence_tile_compile(s) for s in (32768,)
        }
        print(payload["whole_sequence_tile"])
    if args.record:
        print("recorded:", write_result(args.topic, payload))
    return 0
