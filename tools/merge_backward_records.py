"""Join the two device sessions of the backward record (tools/gpu_backward_record.sh):
the "grid" session's record (determinism, gradient grid, memory, fp16 speed) and the "speed"
session's (bf16 speed at D 64/128/256 with Flex, forward + backward). Both must come from
the same commit. The speed rows of both are kept; the summaries are recomputed from them.

Usage: python tools/merge_backward_records.py GRID.json SPEED.json OUT.json
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, ".")


def main():
    from flashcore.studies.backward_bench import speed_summary

    grid, speed = (json.load(open(p)) for p in sys.argv[1:3])
    out = sys.argv[3]
    pg, ps = grid["provenance"], speed["provenance"]
    if pg["commit"] != ps["commit"]:
        raise SystemExit(f"records from different commits: {pg['commit']} vs {ps['commit']}")
    fg, fs = grid.get("kernel_fingerprint"), speed.get("kernel_fingerprint")
    if (fg or {}).get("sha256") != (fs or {}).get("sha256"):
        raise SystemExit("records of different kernel sources: their fingerprints differ")
    rows = speed.get("speed", []) + grid.get("speed", [])
    keys = sorted({(r["dtype"], r["D"]) for r in rows})
    merged = {
        "topic": "backward",
        "provenance": pg,
        "provenance_speed_session": ps,
        "kernel_fingerprint": fg,
        "method": grid["method"],
        "stages_done": sorted(set(grid["stages_done"]) | set(speed["stages_done"])),
        "determinism": grid["determinism"],
        "grid": grid.get("grid"),
        "summary": grid.get("summary"),
        "cases": grid.get("cases"),
        "memory": grid.get("memory"),
        "tuning": grid.get("tuning"),
        "speed": rows,
        "speed_summary": {f"{dt} D{d}": speed_summary(rows, d, dt) for dt, d in keys},
        "fwd_bwd_summary": {
            f"{dt} D{d}": speed_summary(rows, d, dt, key="fwd_bwd_tflops") for dt, d in keys
        },
    }
    with open(out, "w") as f:
        f.write(json.dumps(merged, indent=1, default=float) + "\n")
    print("wrote", out, len(rows), "speed rows,", len(merged["cases"] or []), "cases")


if __name__ == "__main__":
    main()
