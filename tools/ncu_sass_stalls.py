"""Where a kernel's warps wait, instruction by instruction, from Nsight Compute's source page.

    ncu --section SourceCounters -o REPORT python3 ...        # on the GPU machine
    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
    ncu --import REPORT.ncu-rep --page raw --csv > RAW.csv
    python tools/ncu_sass_stalls.py SASS.csv OUT.json --raw RAW.csv --commit C --date D
                                    --command "the profiled command" [--top 30] [--label TEXT]

OUT.json: where the profile ran (``provenance``: the device from RAW.csv, the commit and date
of the profiled tree and run, the profiled command), the kernel's duration and tensor-pipe
use; the stall samples by reason over the whole kernel, the same over the instructions the
warps that issue the wgmmas run (those executed 0.5-2x as often as the HGMMAs: in a
warp-specialized kernel, the consumers; the workers' waits and spin loops are left out), and
the TOP instructions by samples, each with its SASS, execution count and
three largest reasons. Notebook 07 and the README cite these logs."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def summarize(path: Path, top: int) -> dict:
    rows = list(csv.reader(path.open()))
    header = next(r for r in rows if SAMPLES in r)
    data = rows[rows.index(header) + 1 :]
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def count(row, name):
        value = row[col[name]]
        return int(value) if value not in ("", "-") else 0

    # The consumers issue every wgmma once a step: their instructions run about as often as
    # the HGMMAs. (The most executed instruction overall can be a worker's spin loop, as the
    # deterministic dQ writer's at D64; logs before eaeece4 anchored on it.)
    wgmma = [count(r, EXECUTED) for r in data if "HGMMA" in r[col["Source"]]]
    busiest = max(wgmma) if wgmma else max(count(r, EXECUTED) for r in data)

    def by_reason(selected):
        totals = {h[len("stall_") :]: sum(count(r, h) for r in selected) for h in reasons}
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))

    main = [r for r in data if busiest <= 2 * count(r, EXECUTED) <= 4 * busiest]
    total = sum(count(r, SAMPLES) for r in data)
    ranked = sorted(range(len(data)), key=lambda n: -count(data[n], SAMPLES))[:top]
    return {
        "samples": total,
        "instructions": len(data),
        "by_reason": by_reason(data),
        "busiest_warps": {
            "executions": busiest,
            "samples": sum(count(r, SAMPLES) for r in main),
            "by_reason": by_reason(main),
        },
        "top": [
            {
                "index": n,
                "sass": data[n][col["Source"]].strip(),
                "samples": count(data[n], SAMPLES),
                "share": round(count(data[n], SAMPLES) / total, 4),
                "executed": count(data[n], EXECUTED),
                "reasons": dict(
                    sorted(
                        ((h[len("stall_") :], count(data[n], h)) for h in reasons),
                        key=lambda kv: -kv[1],
                    )[:3]
                ),
            }
            for n in ranked
        ],
    }


def raw_metrics(path: Path) -> tuple[dict, dict]:
    """The first kernel's row of an ncu raw page (header, units, values), by metric name, and
    each metric's unit."""
    header, units, values = list(csv.reader(path.open()))[:3]
    return dict(zip(header, values)), dict(zip(header, units))


# ncu prints a duration in the unit that suits its size (a 0.6 ms kernel as 608 usecond).
# ncu's unit row names a duration in either spelling ("usecond" or "us", by version/locale)
MILLISECONDS_PER = {
    "nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3,
    "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3,
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--label", default="")
    parser.add_argument("--raw", type=Path, required=True, help="the same report's raw page")
    parser.add_argument("--commit", required=True, help="the profiled tree's commit")
    parser.add_argument("--date", required=True, help="when the profile ran (ISO 8601)")
    parser.add_argument("--command", required=True, help="the profiled command")
    args = parser.parse_args()
    raw, units = raw_metrics(args.raw)
    provenance = {
        "device": raw["device__attribute_display_name"],
        "commit": args.commit,
        "date": args.date,
        "command": args.command,
    }
    summary = {
        "provenance": provenance,
        "label": args.label,
        "kernel": raw["Kernel Name"],
        "duration_ms": float(raw["gpu__time_duration.sum"])
        * MILLISECONDS_PER[units["gpu__time_duration.sum"]],
        "tensor_pipe_pct_of_peak_elapsed": float(
            raw["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"]
        ),
        **summarize(args.csv, args.top),
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    for row in summary["top"][:12]:
        print(f"{row['share']:6.1%} {row['sass'][:60]:60s} {row['reasons']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
