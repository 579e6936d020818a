"""Time each notebook's headless run (papermill), as `make reproduce` executes it, and record it.

    python tools/time_reproduce.py [--profile gpu] [-p NAME VALUE ...] [--out-dir DIR] [--record]
                                   [--merge] [--timeout SECONDS] [--budget SECONDS]
                                   notebooks/01_derivation.ipynb ...

Each notebook runs in its own papermill process from the notebooks/ directory; the executed
copy goes to --out-dir (a temporary directory by default), never over the committed notebook.
With --record, writes results/<gpu>/reproduce_timing.json: one row per notebook (`notebook`,
`seconds`, `profile`, the parameters, whether it finished, its slowest cells, and the commit
and date it ran at; recording needs the commit: git, or FLASHCORE_COMMIT on a copy without
.git). --budget bounds the whole run: no notebook gets more than what is left of it, and a
notebook with less than a minute left is not started (and not recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def slowest_cells(executed: Path, n: int = 3) -> list[dict]:
    """The n longest cells by papermill's per-cell duration, with their first source line."""
    if not executed.exists():
        return []
    nb = json.loads(executed.read_text())
    cells = []
    for i, cell in enumerate(nb["cells"]):
        duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if duration is not None and cell["cell_type"] == "code":
            lines = [
                ln for ln in "".join(cell["source"]).splitlines() if ln and not ln.startswith("#")
            ]
            cells.append(
                {
                    "cell": i,
                    "seconds": round(float(duration), 2),
                    "first_line": (lines or [""])[0][:80],
                }
            )
    return sorted(cells, key=lambda c: -c["seconds"])[:n]


def time_notebook(
    path: Path, profile: str, params: list[tuple[str, str]], out_dir: Path, timeout_s: float
) -> dict:
    executed = out_dir / path.name
    cmd = [
        sys.executable,
        "-m",
        "papermill",
        "--kernel",
        "python3",
        "--cwd",
        str(path.parent),
        "-p",
        "PROFILE",
        profile,
    ]
    for name, value in params:
        cmd += ["-p", name, value]
    cmd += [str(path), str(executed)]
    t0 = time.perf_counter()
    # A session of its own, so a timeout stops the kernel process too (it holds the GPU's memory).
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        status = "ok" if proc.returncode == 0 else f"failed (papermill exit {proc.returncode})"
        tail = (stderr or "").strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        status, tail = f"timed out after {timeout_s:.0f} s", []
    seconds = time.perf_counter() - t0
    return {
        "notebook": path.stem,
        "seconds": round(seconds, 1),
        "profile": profile,
        "parameters": dict(params),
        "status": status,
        "slowest_cells": slowest_cells(executed),
        "stderr_tail": tail if status != "ok" else [],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--profile", default="gpu", choices=("gpu", "cpu", "auto"))
    ap.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="papermill parameter for every notebook (e.g. -p SWEEP full)",
    )
    ap.add_argument(
        "--out-dir", type=Path, help="where the executed copies go (default: a temporary directory)"
    )
    ap.add_argument(
        "--timeout", type=float, default=600, help="seconds per notebook before it is stopped"
    )
    ap.add_argument(
        "--budget",
        type=float,
        help="seconds for all the notebooks together (each one's timeout is cut to what is left)",
    )
    ap.add_argument(
        "--record", action="store_true", help="write results/<gpu>/reproduce_timing.json"
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="with --record: keep the recorded rows of notebooks not run now (each row names "
        "the commit and date it was measured at)",
    )
    args = ap.parse_args(argv)

    missing = [str(p) for p in args.notebooks if not p.exists() or p.suffix != ".ipynb"]
    if missing:
        ap.error(f"expected existing .ipynb files, got {', '.join(missing)}")
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="reproduce-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    params = [tuple(p) for p in args.parameter]

    sys.path.insert(0, str(ROOT))
    from flashcore.results import provenance, read_result

    here = provenance()
    if args.record and here.get("commit") in (None, "unknown"):
        ap.error("--record needs the commit: run in a git checkout or set FLASHCORE_COMMIT")
    kept = []
    if args.merge:
        run_now = {p.stem for p in args.notebooks}
        try:
            previous = read_result("reproduce_timing", here.get("gpu_slug"))
        except FileNotFoundError:
            previous = {}
        for row in previous.get("rows", []):
            if row["notebook"] not in run_now:
                # Rows from before per-row provenance carry the record's own.
                row.setdefault("commit", previous["provenance"].get("commit"))
                row.setdefault("date", previous["provenance"].get("date"))
                kept.append(row)

    def record(rows):  # after every notebook, so a run stopped part-way still leaves a record
        from flashcore.results import write_result

        rows = sorted(kept + rows, key=lambda r: r["notebook"])

        return write_result(
            "reproduce_timing",
            {
                "method": "wall time of one papermill process per notebook (kernel start, "
                "imports, compiles and every cell), one after another on an otherwise idle machine",
                "total_seconds": round(sum(r["seconds"] for r in rows), 1),
                # False while a row timed out or failed: the total is then a lower bound.
                "all_finished": all(r["status"] == "ok" for r in rows),
                "rows": rows,
            },
            command=" ".join(
                [
                    "python tools/time_reproduce.py",
                    "--profile",
                    args.profile,
                    *(f"-p {n} {v}" for n, v in params),
                    *(f"notebooks/{p.name}" for p in args.notebooks),
                ]
            ),
        )

    rows, not_run = [], []
    start = time.perf_counter()
    for path in args.notebooks:
        timeout = args.timeout
        if args.budget is not None:
            left = args.budget - (time.perf_counter() - start)
            if left < 60:
                not_run.append(path.stem)
                print(f"{path.stem:<24} not run: {left:.0f} s of the budget left", flush=True)
                continue
            timeout = min(timeout, left)
        row = time_notebook(path.resolve(), args.profile, params, out_dir, timeout)
        row.update(commit=here.get("commit"), date=here.get("date"))
        rows.append(row)
        cells = ", ".join(f"cell {c['cell']} {c['seconds']:.0f} s" for c in row["slowest_cells"])
        print(
            f"{row['notebook']:<24} {row['seconds']:7.1f} s  {row['status']}  (slowest: {cells})",
            flush=True,
        )
        if args.record:
            written = record(rows)
    total = sum(r["seconds"] for r in rows)
    print(f"total {total:.1f} s over {len(rows)} notebooks ({args.profile} profile)")
    if not_run:
        print("not run (budget):", " ".join(not_run))
    if args.record:
        print(f"recorded {written}")
    return 0 if all(r["status"] == "ok" for r in rows) and not not_run else 1


if __name__ == "__main__":
    sys.exit(main())
