"""Command line: ``python -m flashcore {info,validate,sanitize,bench,tune} ...``.

    python -m flashcore info
    python -m flashcore validate --grid full --determinism --large-offsets --record
    python -m flashcore sanitize            # compute-sanitizer memcheck + racecheck (GPU)
    python -m flashcore bench --suite forward --d 128 --s 4096 8192 --record   (GPU)
    python -m flashcore tune --record       # launch-config sweep of the forward kernel (GPU)
    python -m flashcore fp8 --record        # FP8 errors (any machine) and speed (GPU)
    python -m flashcore long --record       # long-context sweep, windows, 2^31 offsets (GPU)
    python -m flashcore launch --record     # host cost per call and graph replay vs SDPA (GPU)
    python -m flashcore varlen --record     # varlen grid vs float64 (any machine), speed (GPU)
    torchrun --nproc-per-node 2 -m flashcore cp check     # ring attention vs float64 (gloo on CPU)
    torchrun --nproc-per-node 2 -m flashcore cp bench --record   # context parallelism (GPUs)
    python -m flashcore backward --memory --fwd-bwd --train --record   # gradients, speed (GPU)

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
    from .interface import describe_dispatch

    print(f"{'forward dispatch':>18}: {describe_dispatch()}")
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
        print(
            f"determinism: {sum(r['bitwise_identical'] for r in det)}/{len(det)} cases bitwise identical over "
            f"{det[0]['repeats']} launches"
        )
    if args.large_offsets:
        payload["large_offsets"] = V.check_large_offsets(device)
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
        f"{summary['worst_ratio']:.3f} ({summary['worst_case']})"
    )
    if args.record:
        path = write_result("correctness", payload)
        print(f"recorded {path}")
    ok = (
        not failed
        and all(r["bitwise_identical"] for r in payload.get("determinism", []))
        and all(r["passed"] for r in payload.get("large_offsets", []))
    )
    return 0 if ok else 1


def cmd_sanitize(args) -> int:
    """Run the sanitizer grid under compute-sanitizer's memcheck and racecheck tools.

    PyTorch's caching allocator is switched off so every tensor is its own allocation and
    an out-of-bounds access cannot land inside a neighbouring tensor's pool block."""
    from .results import write_result

    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    # The forward grid (incl. sliding windows, TMA and pointer paths) and the fp8 kernel on an
    # S that is not a multiple of its 128-key padding, every recipe, causal and not.
    workloads = {
        "forward": ["validate", "--grid", "sanitizer", "--quiet"],
        "fp8": [
            "fp8",
            "--dists",
            "outlier",
            "--s",
            "200",
            "--heads",
            "2",
            "--seeds",
            "1",
            "--no-speed",
        ],
        # The same grid with every case the Gluon Hopper kernel supports forced onto it;
        # then forced onto it with 3 programs, so every program walks many work tiles.
        "forward_hopper": ["validate", "--grid", "sanitizer", "--quiet"],
        "forward_hopper_walk": ["validate", "--grid", "sanitizer", "--quiet"],
    }
    if args.workloads:
        workloads = {w: a for w, a in workloads.items() if w in args.workloads}
    report = []
    for tool in args.tools:
        for workload, flashcore_args in workloads.items():
            hopper = workload.startswith("forward_hopper")
            run_env = dict(env, FLASHCORE_FORWARD_HOPPER="always" if hopper else "never")
            if workload == "forward_hopper_walk":
                run_env.update(FLASHCORE_HOPPER_MAX_PROGRAMS="3")
            cmd = [
                "compute-sanitizer",
                "--tool",
                tool,
                "--error-exitcode",
                "3",
                sys.executable,
                "-m",
                "flashcore",
                *flashcore_args,
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
            report.append(entry)
            print(
                f"{tool} on {workload}: exit {proc.returncode}, errors/hazards reported: {entry['errors']}"
            )
            if proc.returncode not in (0,):
                print(text[-4000:])
    if args.record:
        print(f"recorded {write_result('sanitizer', {'grid': 'sanitizer', 'runs': report})}")
    return 0 if all(r["returncode"] == 0 and r["errors"] == 0 for r in report) else 1


def _progress(total, desc):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, mininterval=2.0)


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


Bm_DECODE_PEERS_HELP = (
    "flashcore_decode",
    "flashcore",
    "sdpa_flash",
    "sdpa_cudnn",
    "sdpa_efficient",
)


def cmd_bench(args) -> int:
    from .results import write_result
    from .studies import bench as Bm

    shapes = []
    if args.suite in ("forward", "all"):
        dtypes = args.dtype or ["bfloat16", "float16"]
        shapes += Bm.forward_shapes(
            head_dims=args.d or (64, 128, 256),
            seqlens=args.s or (512, 1024, 2048, 4096, 8192, 16384),
            dtypes=dtypes,
            causal=_causal_choice(args.causal),
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
    bar = _progress(len(shapes) + len(prior), "bench")
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
        for shape in _progress_iter(Bm.decode_shapes(), "decode"):
            decode_rows += Bm.bench_attention_shape(shape, decode_impls, reps=args.reps, graph=True)
        for r in decode_rows:
            if "timing" in r:
                r["tbps"] = Bm.kv_bytes(r) / r["timing"]["median_ms"] / 1e9
                r["graph_tbps"] = Bm.kv_bytes(r) / r["graph_timing"]["median_ms"] / 1e9
                print(
                    f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17} "
                    f"{r['timing']['median_ms'] * 1e3:8.1f} us {r['tbps']:5.2f} TB/s "
                    f"(graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us {r['graph_tbps']:5.2f} TB/s)"
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


def _progress_iter(items, desc):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, mininterval=2.0)


def _causal_choice(text):
    return {"both": (False, True), "yes": (True,), "no": (False,)}[text]


def cmd_tune(args) -> int:
    from .results import write_result
    from .studies import bench as Bm

    shapes = Bm.forward_shapes(
        head_dims=args.d or (64, 128, 256),
        seqlens=args.s or (1024, 8192),
        dtypes=["bfloat16"],
        causal=(False, True),
    )
    configs = Bm.tuning_configs()
    bar = _progress(len(shapes) * len(configs), "tune")
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


def cmd_sass(args) -> int:
    import json as _json

    from .studies.sass import analyze_variants

    report = analyze_variants(keep_sass=args.keep_sass)
    if args.json:
        print(_json.dumps(report))
        return 0
    print(f"SASS for {report['arch']} compiled offline with triton {report['triton']}")
    for name, r in report["kernels"].items():
        b, g = r["branches"], r["guarded_memory"]
        print(
            f"{name:<44} [{r['role']}] {r['instructions']:5d} instr, {r['blocks']:3d} blocks | "
            f"branches public {b['public']:3d} metadata {b['metadata']:2d} sync {b['sync']:3d} "
            f"data {b['data']:2d} | guarded mem public {g['public']:3d} metadata {g['metadata']:3d} "
            f"data {g['data']:2d} | "
            f"data addr {r['data_dependent_addresses']}"
        )
        for item in r["data_branches"] + r["data_guarded_memory"]:
            print(f"    data-dependent: {item['text']}")
    return 0


def cmd_leak(args) -> int:
    from .results import write_result
    from .studies import timing_leak as TL

    if args.power:  # NVML clock/power/temperature per class, blocks of one class at a time
        kernels = (
            (args.kernel,)
            if args.kernel
            else ("hardware reference", "forward non-causal", "forward causal", "decode")
        )
        classes = args.classes or TL.POWER_CLASSES
        n = sum(1 for k in TL._kernels() if any(k[0].startswith(x) for x in kernels)) * len(classes)
        bar = _progress(n, "power")
        payload = TL.run_power_suite(kernels, classes, progress=bar)
        bar.close()
        print(f"power read from {payload['power_source']}, {payload['samples']} samples")
        for r in payload["rows"]:
            print(
                f"{r['kernel']:<40} vs {r['fixed_class']:<10} time {r['median_us_shift_pct']:+6.2f}%  "
                f"SM clock {r['sm_clock_mhz_shift_pct']:+6.2f}% ({r['sm_clock_mhz'][0]:.0f} MHz)  "
                f"power {r['power_w_shift_pct']:+6.2f}% ({r['power_w'][0]:.0f} W)"
            )
        if args.record:
            payload = {"method": TL.POWER_METHOD, **payload}
            print(f"recorded {write_result('timing_power', payload)}")
        return 0
    classes = args.classes or TL.SPECIAL_CLASSES
    n_kernels = sum(1 for k in TL._kernels() if not args.kernel or args.kernel in k[0])
    bar = _progress(n_kernels * len(classes), "timing")
    rows = TL.run_suite(args.n, classes, args.kernel, progress=bar)
    bar.close()
    for r in rows:
        print(
            f"{r['kernel']:<40} vs {r['fixed_class']:<10} max|t| {r['max_abs_t']:8.2f} "
            f"{'LEAK' if r['leak'] else 'ok  '} medians {r['median_us'][0]:.2f} / {r['median_us'][1]:.2f} us"
        )
    if args.record:
        payload = {
            "method": TL.__doc__.strip(),
            "threshold": TL.THRESHOLD,
            "n_per_class": args.n,
            "rows": rows,
        }
        print(f"recorded {write_result('timing_leak', payload)}")
    return 0


def cmd_e2e(args) -> int:
    import torch

    from .results import write_result
    from .studies import e2e

    _ensure_backend()
    device = _device()
    dtype = torch.float32  # bf16 rounding of the model hides attention errors; fp32 does not
    result = e2e.run_e2e(device, dtype, steps=args.steps)
    pl = result["per_layer"]
    print(
        f"per-layer attention: {len(pl['layers'])} calls, all pass the error rule: {pl['passed']} "
        f"(worst ratio {pl['worst_ratio']:.3f})"
    )
    print(
        f"logits: max err {result['logits']['max_abs_err']:.3e}, sdpa {result['logits']['sdpa_max_abs_err']:.3e}, "
        f"ratio {result['logits']['ratio']:.3f}, passed {result['logits']['passed']}"
    )
    g = result["generation"]
    print(
        f"greedy {g['steps']} steps identical: {g['identical']} (smallest top-2 margin {g['min_top2_margin']:.3f})"
    )
    payload = {"check_fp32": result}
    if device == "cuda" and not args.no_speed:
        payload["generation"] = e2e.issue_generation_speed(repeats=2)
        for r in payload["generation"]:
            print(
                f"generation B{r['batch']} padded={r['padded']} window={r['window']}: flashcore "
                f"{r['tokens_per_s_flashcore']:.0f} tok/s, sdpa {r['tokens_per_s_sdpa']:.0f} tok/s "
                f"({r['ratio']:.2f}x)"
            )
    if args.record:  # the layout notebook 03 reads: {"check_fp32": ..., "generation": [rows]}
        print(f"recorded {write_result('e2e_transformers', payload)}")
    return 0 if result["logits"]["passed"] and pl["passed"] and g["identical"] else 1


def cmd_launch(args) -> int:
    """Host cost per call (eager) and CUDA-graph replay, flashcore beside SDPA's backends."""
    _ensure_backend()
    from .results import write_result
    from .studies import launch

    if _device() != "cuda":
        print("launch needs a CUDA device (host cost of real launches)")
        return 1
    rows = launch.measure(calls=args.calls, repeats=args.repeats)
    for line in launch.summary(rows):
        print(line)
    if args.record:
        print(
            f"recorded {write_result('launch', {'rows': rows, 'calls': args.calls, 'repeats': args.repeats})}"
        )
    return 0


def cmd_varlen(args) -> int:
    """Varlen correctness grid under the error rule (any machine) and speed (GPU)."""
    _ensure_backend()
    import torch

    from .results import write_result
    from .studies import launch

    device = _device()
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    cases = launch.varlen_cases(seed=args.seed, count=args.cases, small=device != "cuda")
    results = [
        launch.run_varlen_case(c, device, dtype) for c in _progress_iter(cases, "varlen cases")
    ]
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
    if device == "cuda":
        payload["speed"] = launch.varlen_speed()
        print("speed (ms):", payload["speed"]["ms"])
    if args.record:
        print(f"recorded {write_result('varlen', payload)}")
    return 0 if not failed else 1


def cmd_fp8(args) -> int:
    """FP8 study: errors against float64 (many seeds), launch-config sweep, speed."""
    _ensure_backend()
    from tqdm import tqdm

    from .results import write_result
    from .studies import fp8_study as F

    device = _device()
    on_gpu = device == "cuda"
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
            device=device,
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


def cmd_long(args) -> int:
    """Long-context study: the S sweep, sliding window, >2^31 offsets, decode on long caches."""
    _ensure_backend()
    from .results import write_result
    from .studies import long_context as L

    if _device() != "cuda":
        print("the long-context measurements need a CUDA device")
        return 2
    payload: dict = {}
    if "sweep" in args.parts:

        def show(r):
            t = r.get("timing", {}).get("median_ms")
            print(
                f"S={r['S']:<8} causal={r['causal']!s:5} {r['impl']:<24} "
                + (
                    f"{t:10.3f} ms {r['tflops']:6.1f} TFLOP/s extra {r['extra_bytes'] / 2**20:8.1f} MiB"
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
        from .validate import check_large_offsets

        payload["large_offsets"] = check_large_offsets("cuda", seqlen=2**20)
        payload["int32_demo"] = L.int32_offset_demo()
        print(payload["large_offsets"], payload["int32_demo"])
    if "window" in args.parts:
        from .validate import correctness_grid, run_grid, summarize

        rows = run_grid(correctness_grid("window"), "cuda", progress=False)
        payload["window_correctness"] = {"summary": summarize(rows), "cases": rows}
        print(payload["window_correctness"]["summary"])
    if "decode" in args.parts:
        from .studies.bench import bench_attention_shape

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


def cmd_cp(args) -> int:
    """Context parallelism; run under torchrun, one process per device (gloo on CPU)."""
    # NVLink multicast stays off (NVLS / symmetric memory are not used by the ring).
    for key, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(key, value)
    _ensure_backend()
    import torch
    import torch.distributed as dist

    from .results import device_slug, write_result
    from .studies import context_parallel as CP

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


def cmd_backward(args) -> int:
    _ensure_backend()
    from .results import write_result
    from .studies.backward_bench import run_backward_study

    def record(payload):  # after every stage: a run cut short keeps what it measured
        if args.record:
            print(f"recorded {write_result('backward', payload)}", flush=True)

    payload = run_backward_study(args, on_stage=record)
    failed = payload.get("summary", {}).get("failed", 0)
    return 0 if failed == 0 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="flashcore", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="print the device and library versions").set_defaults(fn=cmd_info)

    p = sub.add_parser("validate", help="run a correctness grid against float64")
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
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser(
        "sanitize", help="compute-sanitizer memcheck/racecheck over a sample grid (GPU)"
    )
    p.add_argument("--tools", nargs="+", default=["memcheck", "racecheck", "synccheck"])
    p.add_argument(
        "--workloads",
        nargs="+",
        choices=["forward", "fp8", "forward_hopper", "forward_hopper_walk"],
        help="subset of the workloads (default: all)",
    )
    p.add_argument("--record", action="store_true", help="add the result to correctness.json")
    p.set_defaults(fn=cmd_sanitize)

    p = sub.add_parser("bench", help="time flashcore beside SDPA backends and FlexAttention (GPU)")
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
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("tune", help="sweep launch configs of the forward kernel (GPU)")
    p.add_argument("--d", type=int, nargs="+")
    p.add_argument("--s", type=int, nargs="+")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/tuning.json")
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser(
        "sass", help="compile for sm_90 offline and classify branches (no GPU needed)"
    )
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--keep-sass", action="store_true", help="include the SASS text in the JSON")
    p.set_defaults(fn=cmd_sass)

    p = sub.add_parser(
        "leak", help="dudect timing-leak test of the kernels and the leaky controls (GPU)"
    )
    p.add_argument("--n", type=int, default=10000, help="measurements per class")
    p.add_argument("--classes", nargs="+", help="fixed input classes (default: all)")
    p.add_argument("--kernel", help="only kernels whose name contains this text")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/timing_leak.json")
    p.add_argument(
        "--power",
        action="store_true",
        help="instead: NVML SM clock/power/temperature per class (records timing_power.json)",
    )
    p.set_defaults(fn=cmd_leak)

    p = sub.add_parser(
        "e2e", help="transformers Llama check: logits under the rule, greedy tokens, tokens/s"
    )
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument(
        "--record", action="store_true", help="write results/<gpu>/e2e_transformers.json"
    )
    p.set_defaults(fn=cmd_e2e)

    p = sub.add_parser("launch", help="host cost per call and graph replay vs SDPA backends (GPU)")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--record", action="store_true", help="write results/<gpu>/launch.json")
    p.set_defaults(fn=cmd_launch)

    p = sub.add_parser(
        "varlen", help="varlen correctness grid vs float64 (any machine), speed (GPU)"
    )
    p.add_argument("--cases", type=int, default=240)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--record", action="store_true", help="write results/<gpu>/varlen.json")
    p.set_defaults(fn=cmd_varlen)

    p = sub.add_parser(
        "fp8", help="FP8 study: errors vs float64 over seeds; tuning and speed on a GPU"
    )
    p.add_argument("--dists", nargs="+", default=["normal", "outlier", "massive_channels"])
    p.add_argument("--s", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/fp8.json")
    p.set_defaults(fn=cmd_fp8)

    p = sub.add_parser(
        "long", help="long-context study: S sweep to 1M, window, 2^31 offsets, long decode (GPU)"
    )
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
    p.set_defaults(fn=cmd_long)

    p = sub.add_parser(
        "cp",
        help="context parallelism (run under torchrun --nproc-per-node N): "
        "check against float64, bench on GPUs",
    )
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
    p.set_defaults(fn=cmd_cp)

    p = sub.add_parser(
        "backward",
        help="backward pass: gradient grid vs float64, determinism, memory, "
        "speed beside SDPA/Flex, training step (GPU; --grid cpu on CPU)",
    )
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
    p.set_defaults(fn=cmd_backward)

    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
