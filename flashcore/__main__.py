"""Command line: ``python -m flashcore {info,validate,sanitize,bench,tune} ...``.

    python -m flashcore info
    python -m flashcore validate --grid full --determinism --large-offsets --record
    python -m flashcore sanitize            # compute-sanitizer memcheck + racecheck (GPU)
    python -m flashcore bench --suite forward --d 128 --s 4096 8192 --record   (GPU)
    python -m flashcore tune --record       # launch-config sweep of the forward kernel (GPU)

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


def _progress(total, desc):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, mininterval=2.0)


def _print_perf_rows(rows):
    for r in rows:
        what = (f"{r['dtype']:>8} B{r['B']:<3} H{r['Hq']:<3} S{r['S']:<6} D{r['D']:<4} "
                f"{'causal' if r['causal'] else 'full  '} {r['impl']:<15}")
        if "timing" in r:
            g = f"  graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us" if "graph_timing" in r else ""
            print(f"{what} {r['timing']['median_ms'] * 1e3:10.1f} us {r['tflops']:7.1f} TFLOP/s{g}")
        else:
            print(f"{what} {r.get('error') or r.get('skipped')}")


def cmd_bench(args) -> int:
    from . import bench as Bm
    from .results import write_result

    shapes = []
    if args.suite in ("forward", "all"):
        dtypes = args.dtype or ["bfloat16", "float16"]
        shapes += Bm.forward_shapes(head_dims=args.d or (64, 128, 256),
                                    seqlens=args.s or (512, 1024, 2048, 4096, 8192, 16384),
                                    dtypes=dtypes, causal=_causal_choice(args.causal))
    prior = []
    if args.suite in ("prior", "all"):
        prior = Bm.prior_report_shapes()
    impls = args.impls or Bm.PEERS
    payload = {"method": Bm.__doc__.strip(), "ceilings": Bm.ceilings()}
    c = payload["ceilings"]
    print(f"ceilings: matmul {c['matmul']['tflops']:.1f} TFLOP/s, copy {c['copy']['tbps']:.2f} TB/s")
    rows = []
    bar = _progress(len(shapes) + len(prior), "bench")
    for shape in shapes:
        rows += Bm.bench_attention_shape(shape, impls, reps=args.reps)
        bar.update(1)
    prior_rows = []
    for shape in prior:
        prior_rows += Bm.bench_attention_shape(shape, [i for i in impls if i != "sdpa_math"],
                                               reps=args.reps, graph=True, keep_samples=True)
        bar.update(1)
    bar.close()
    _print_perf_rows(rows + prior_rows)
    payload.update({"forward": rows, "prior_regime": prior_rows})
    if args.suite in ("decode", "all"):
        decode_rows = []
        decode_impls = args.impls or Bm.DECODE_PEERS
        for shape in _progress_iter(Bm.decode_shapes(), "decode"):
            decode_rows += Bm.bench_attention_shape(shape, decode_impls, reps=args.reps, graph=True)
        for r in decode_rows:
            if "timing" in r:
                r["tbps"] = Bm.kv_bytes(r) / r["timing"]["median_ms"] / 1e9
                r["graph_tbps"] = Bm.kv_bytes(r) / r["graph_timing"]["median_ms"] / 1e9
                print(f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17} "
                      f"{r['timing']['median_ms'] * 1e3:8.1f} us {r['tbps']:5.2f} TB/s "
                      f"(graph {r['graph_timing']['median_ms'] * 1e3:8.1f} us {r['graph_tbps']:5.2f} TB/s)")
            else:
                print(f"decode B{r['B']:<3} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<17} "
                      f"{r.get('error') or r.get('skipped')}")
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
    from . import bench as Bm
    from .results import write_result

    shapes = Bm.forward_shapes(head_dims=args.d or (64, 128, 256), seqlens=args.s or (1024, 8192),
                               dtypes=["bfloat16"], causal=(False, True))
    configs = Bm.tuning_configs()
    bar = _progress(len(shapes) * len(configs), "tune")
    rows = Bm.tune_forward(shapes, configs, progress=bar)
    bar.close()
    for shape in shapes:
        mine = [r for r in rows if all(r[k] == shape[k] for k in ("B", "Hq", "S", "D", "causal"))]
        ok = sorted((r for r in mine if "tflops" in r), key=lambda r: -r["tflops"])
        print(f"S{shape['S']} D{shape['D']} causal={shape['causal']}: " + ", ".join(
            f"{r['config']} {r['tflops']:.0f}" for r in ok[:5]))
        for r in mine:
            if "error" in r:
                print(f"   {r['config']}: {r['error']}")
    if args.record:
        print(f"recorded {write_result('tuning', {'configs': configs, 'rows': rows})}")
    return 0


def cmd_sass(args) -> int:
    import json as _json

    from .sass import analyze_variants

    report = analyze_variants(keep_sass=args.keep_sass)
    if args.json:
        print(_json.dumps(report))
        return 0
    print(f"SASS for {report['arch']} compiled offline with triton {report['triton']}")
    for name, r in report["kernels"].items():
        b, g = r["branches"], r["guarded_memory"]
        print(f"{name:<44} [{r['role']}] {r['instructions']:5d} instr, {r['blocks']:3d} blocks | "
              f"branches public {b['public']:3d} metadata {b['metadata']:2d} sync {b['sync']:3d} "
              f"data {b['data']:2d} | guarded mem public {g['public']:3d} metadata {g['metadata']:3d} "
              f"data {g['data']:2d} | "
              f"data addr {r['data_dependent_addresses']}")
        for item in r["data_branches"] + r["data_guarded_memory"]:
            print(f"    data-dependent: {item['text']}")
    return 0


def cmd_leak(args) -> int:
    from . import timing_leak as TL
    from .results import write_result

    classes = args.classes or TL.SPECIAL_CLASSES
    n_kernels = sum(1 for k in TL._kernels() if not args.kernel or args.kernel in k[0])
    bar = _progress(n_kernels * len(classes), "timing")
    rows = TL.run_suite(args.n, classes, args.kernel, progress=bar)
    bar.close()
    for r in rows:
        print(f"{r['kernel']:<40} vs {r['fixed_class']:<10} max|t| {r['max_abs_t']:8.2f} "
              f"{'LEAK' if r['leak'] else 'ok  '} medians {r['median_us'][0]:.2f} / {r['median_us'][1]:.2f} us")
    if args.record:
        payload = {"method": TL.__doc__.strip(), "threshold": TL.THRESHOLD, "n_per_class": args.n,
                   "rows": rows}
        print(f"recorded {write_result('timing_leak', payload)}")
    return 0


def cmd_e2e(args) -> int:
    import torch

    from . import e2e
    from .results import write_result

    _ensure_backend()
    device = _device()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    result = e2e.run_e2e(device, dtype, steps=args.steps)
    print(f"logits: max err {result['logits']['max_abs_err']:.3e}, sdpa {result['logits']['sdpa_max_abs_err']:.3e}, "
          f"ratio {result['logits']['ratio']:.3f}, passed {result['logits']['passed']}")
    g = result["generation"]
    print(f"greedy {g['steps']} steps identical: {g['identical']} (smallest top-2 margin {g['min_top2_margin']:.3f})")
    if device == "cuda" and not args.no_speed:
        result["speed"] = e2e.generation_speed()
        for r in result["speed"]:
            print(f"generation B{r['batch']}: flashcore {r['tokens_per_s_flashcore']:.0f} tok/s, "
                  f"sdpa {r['tokens_per_s_sdpa']:.0f} tok/s")
    if args.record:
        print(f"recorded {write_result('e2e_transformers', result)}")
    return 0 if result["logits"]["passed"] and g["identical"] else 1


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

    p = sub.add_parser("bench", help="time flashcore beside SDPA backends and FlexAttention (GPU)")
    p.add_argument("--suite", default="all", choices=["forward", "prior", "decode", "all"])
    p.add_argument("--d", type=int, nargs="+", help="head dims (default 64 128 256)")
    p.add_argument("--s", type=int, nargs="+", help="sequence lengths (default 512 ... 16384)")
    p.add_argument("--dtype", nargs="+", choices=["bfloat16", "float16"])
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    p.add_argument("--impls", nargs="+", help="subset of: " + "flashcore sdpa_flash sdpa_cudnn "
                   "sdpa_efficient sdpa_math flex")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--topic", default="perf", help="record name (results/<gpu>/<topic>.json)")
    p.add_argument("--record", action="store_true")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("tune", help="sweep launch configs of the forward kernel (GPU)")
    p.add_argument("--d", type=int, nargs="+")
    p.add_argument("--s", type=int, nargs="+")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/tuning.json")
    p.set_defaults(fn=cmd_tune)

    p = sub.add_parser("sass", help="compile for sm_90 offline and classify branches (no GPU needed)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--keep-sass", action="store_true", help="include the SASS text in the JSON")
    p.set_defaults(fn=cmd_sass)

    p = sub.add_parser("leak", help="dudect timing-leak test of the kernels and the leaky controls (GPU)")
    p.add_argument("--n", type=int, default=10000, help="measurements per class")
    p.add_argument("--classes", nargs="+", help="fixed input classes (default: all)")
    p.add_argument("--kernel", help="only kernels whose name contains this text")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/timing_leak.json")
    p.set_defaults(fn=cmd_leak)

    p = sub.add_parser("e2e", help="transformers Llama check: logits under the rule, greedy tokens, tokens/s")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/e2e_transformers.json")
    p.set_defaults(fn=cmd_e2e)

    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
