"""Recorded results: JSON files under results/<gpu-slug>/<topic>.json, each with provenance.

A figure in the notebooks is a pure function of these files, so a machine without a GPU
renders the same figure as the machine that measured. Every record says where it came
from: device, driver, library versions, git commit, date and the command that made it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(os.environ.get("FLASHCORE_RESULTS_DIR", REPO_ROOT / "results"))


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _run(cmd: list[str]) -> str | None:
    try:
        return (
            subprocess.run(
                cmd, capture_output=True, text=True, timeout=20, check=True, cwd=REPO_ROOT
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> tuple[str, bool | None]:
    """(commit, dirty). FLASHCORE_COMMIT overrides: a copy of the tree without .git (e.g. a
    remote GPU machine) is told the commit it was copied from."""
    env = os.environ.get("FLASHCORE_COMMIT")
    if env:
        return env, None
    commit = _run(["git", "rev-parse", "HEAD"]) or "unknown"
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return commit, (bool(status) if commit != "unknown" else None)


def _invocation() -> str:
    """The command line, without machine paths: ``python -m flashcore ...`` for the CLI."""
    argv = list(sys.argv)
    if argv and argv[0].endswith("ipykernel_launcher.py"):
        return "a notebook kernel"  # its arguments are a temporary connection file
    if argv and argv[0].endswith(("flashcore/__main__.py", "flashcore")):
        argv[0] = "python -m flashcore"
    else:
        argv[0] = Path(argv[0]).name if argv else "python"
    return " ".join([argv[0]] + [shlex.quote(a) for a in argv[1:]])


def provenance(command: str | None = None) -> dict:
    """Where a measurement came from. Cheap; call it once per record."""
    import torch
    import triton

    commit, dirty = git_commit()
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": commit,
        "dirty": dirty,
        "command": command if command is not None else _invocation(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": "cpu (Triton interpreter)",
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            {
                "device": props.name,
                "gpu": props.name,
                "gpu_slug": slugify(props.name),
                "sm_count": props.multi_processor_count,
                "memory_gib": round(props.total_memory / 2**30, 1),
                "compute_capability": f"{props.major}.{props.minor}",
                "driver": _run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
                ),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
            }
        )
    return info


def device_slug() -> str:
    import torch

    return slugify(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else "cpu"


def result_path(topic: str, slug: str | None = None) -> Path:
    return RESULTS_DIR / (slug or device_slug()) / f"{topic}.json"


def write_result(
    topic: str, payload: dict, *, command: str | None = None, slug: str | None = None
) -> Path:
    """Write ``payload`` with provenance to results/<slug>/<topic>.json (stable key order)."""
    path = result_path(topic, slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"topic": topic, "provenance": provenance(command), **payload}
    path.write_text(json.dumps(record, indent=1, sort_keys=False, default=float) + "\n")
    return path


def recorded_devices(topic: str) -> list[str]:
    """Slugs of devices with a record for ``topic`` (GPU records first, then cpu)."""
    if not RESULTS_DIR.exists():
        return []
    slugs = sorted(p.parent.name for p in RESULTS_DIR.glob(f"*/{topic}.json"))
    return [s for s in slugs if s != "cpu"] + [s for s in slugs if s == "cpu"]


def read_result(topic: str, slug: str | None = None) -> dict:
    """Load a record: for ``slug`` if given, else the first GPU that has one."""
    if slug is None:
        found = recorded_devices(topic)
        if not found:
            raise FileNotFoundError(f"no recorded result for {topic!r} under {RESULTS_DIR}")
        slug = found[0]
    return json.loads(result_path(topic, slug).read_text())


def describe(record: dict) -> str:
    """One line of provenance for a notebook: device, date, commit, versions."""
    p = record["provenance"]
    extra = f", driver {p['driver']}, CUDA {p['cuda']}" if p.get("driver") else ""
    return (
        f"{p['device']} — recorded {p['date']} at commit {p['commit'][:10]} "
        f"(torch {p['torch']}, triton {p['triton']}{extra})"
    )
