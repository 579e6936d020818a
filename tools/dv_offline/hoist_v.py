"""The V-hoist variant of kernels/forward.py (V's load moved above q @ k^T; REPORT.md says
why), built on first use from forward_hoist_v.patch into forward_hoist_v.py (ignored), so the
repository holds the change and not a second copy of the kernel."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def load():
    target = HERE / "forward_hoist_v.py"
    if not target.exists():
        subprocess.run(
            ["patch", "-s", "-o", str(target), str(ROOT / "flashcore/kernels/forward.py"),
             str(HERE / "forward_hoist_v.patch")],
            check=True,
        )  # fmt: skip
    sys.path.insert(0, str(HERE))
    import forward_hoist_v

    return forward_hoist_v
