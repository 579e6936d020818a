"""Widen a record's kernel fingerprint from scope "ran" to every kernel source of its commit.

Records written at c530054 took scope "ran" from a check that saw only kernels launched
through ``CachedKernel``: a plain ``@triton.jit`` kernel's own ``.kernel`` attribute (None)
hid its compile cache (fixed in d0f8574; tests/test_records.py's GPU test had caught it).
Their file lists can therefore miss sources whose kernels ran (backward.json named no
backward.py), and such a record would read as current after those sources changed.

This tool replaces the file list with the kernel and dispatch sources at the record's commit
(``results.committed_blobs``: what a ``python -m flashcore`` process imports, the "imported"
scope), which can only make the record go stale sooner, never later. It keeps what the run
wrote under ``kernel_fingerprint.widened_from`` and says why under ``.widened``.

    python tools/widen_fingerprint.py RECORD.json [RECORD.json ...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())

from flashcore.results import committed_blobs, fingerprint_digest  # noqa: E402

WHY = (
    "scope widened offline from 'ran' to the kernel and dispatch sources at the record's "
    "commit: the run's 'ran' check missed plain @triton.jit kernels (fixed in d0f8574)"
)


def widen(path: Path) -> bool:
    record = json.loads(path.read_text())
    fingerprint = record["kernel_fingerprint"]
    if fingerprint.get("scope") != "ran":
        return False
    commit = record["provenance"]["commit"]
    files = committed_blobs(commit)
    if files is None:
        raise SystemExit(f"{path}: commit {commit} is not in this repository")
    record["kernel_fingerprint"] = {
        "sha256": fingerprint_digest(files),
        "scope": "imported",
        "hash": fingerprint["hash"],
        "files": dict(sorted(files.items())),
        "dirty_files": fingerprint.get("dirty_files"),
        "widened": WHY,
        "widened_from": {k: fingerprint[k] for k in ("sha256", "scope", "files")},
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return True


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, "widened" if widen(Path(arg)) else "unchanged (scope is not 'ran')")
