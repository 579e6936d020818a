"""``sass`` and ``leak``: notebook 06's two views of constant time, the machine code
(compiled offline, no GPU) and the clock (dudect on a GPU)."""

from __future__ import annotations

from . import progress


def add_sass_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--keep-sass", action="store_true", help="include the SASS text in the JSON")


def run_sass(args) -> int:
    import json as _json

    from ..sass import analyze_variants

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
            f"data {b['data']:2d} | guarded mem public {g['public']:3d} "
            f"metadata {g['metadata']:3d} "
            f"data {g['data']:2d} | "
            f"data addr {r['data_dependent_addresses']}"
        )
        for item in r["data_branches"] + r["data_guarded_memory"]:
            print(f"    data-dependent: {item['text']}")
    return 0


def add_leak_arguments(p) -> None:
    p.add_argument("--n", type=int, default=10000, help="measurements per class")
    p.add_argument("--classes", nargs="+", help="fixed input classes (default: all)")
    p.add_argument("--kernel", help="only kernels whose name contains this text")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/timing_leak.json")
    p.add_argument(
        "--power",
        action="store_true",
        help="instead: NVML SM clock/power/temperature per class (records timing_power.json)",
    )


def run_leak(args) -> int:
    from ...results import write_result
    from .. import timing_leak as TL

    if args.power:  # NVML clock/power/temperature per class, blocks of one class at a time
        kernels = (args.kernel,) if args.kernel else TL.POWER_KERNELS
        classes = args.classes or TL.POWER_CLASSES
        n = sum(1 for k in TL._kernels() if any(k[0].startswith(x) for x in kernels)) * len(classes)
        bar = progress(n, "power")
        payload = TL.run_power_record(kernels, classes, progress=bar)
        bar.close()
        print(f"power read from {payload['power_source']}, {payload['samples']} samples")
        for r in payload["rows"]:
            print(
                f"{r['kernel']:<40} vs {r['fixed_class']:<10} "
                f"time {r['median_us_shift_pct']:+6.2f}%  "
                f"SM clock {r['sm_clock_mhz_shift_pct']:+6.2f}% ({r['sm_clock_mhz'][0]:.0f} MHz)  "
                f"power {r['power_w_shift_pct']:+6.2f}% ({r['power_w'][0]:.0f} W)"
            )
        if args.record:
            print(f"recorded {write_result('timing_power', payload)}")
        return 0
    classes = args.classes or TL.SPECIAL_CLASSES
    n_kernels = sum(1 for k in TL._kernels() if not args.kernel or args.kernel in k[0])
    bar = progress(n_kernels * len(classes), "timing")
    payload = TL.run_leak_record(args.n, classes, args.kernel, progress=bar)
    bar.close()
    for r in payload["rows"]:
        print(
            f"{r['kernel']:<40} vs {r['fixed_class']:<10} max|t| {r['max_abs_t']:8.2f} "
            f"{'LEAK' if r['leak'] else 'ok  '} "
            f"medians {r['median_us'][0]:.2f} / {r['median_us'][1]:.2f} us"
        )
    if args.record:
        print(f"recorded {write_result('timing_leak', payload)}")
    return 0
