"""Helpers shared by the notebooks: profile selection and printing tables."""

from __future__ import annotations

import os


def setup(profile: str = "auto") -> tuple[str, str]:
    """The first code cell of every notebook after its parameters.

    Resolves PROFILE ("auto" -> "gpu" with CUDA, else "cpu"); for the CPU profile, switches
    Triton to its interpreter before any kernel module is imported (the interpreter flag is
    read when ``@triton.jit`` decorates); sets the figure style; prints the profile and device.
    Returns (profile, device)."""
    import torch

    if profile == "auto":
        profile = "gpu" if torch.cuda.is_available() else "cpu"
    if profile not in ("gpu", "cpu"):
        raise ValueError(f"PROFILE must be 'auto', 'gpu' or 'cpu', got {profile!r}")
    if profile == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("PROFILE='gpu' needs a CUDA device; use 'cpu' or 'auto'")
    if profile == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from . import plots

    plots.use_style()
    where = torch.cuda.get_device_name(0) if profile == "gpu" else "CPU (Triton interpreter)"
    print(f"profile {profile!r} on {where}")
    return profile, ("cuda" if profile == "gpu" else "cpu")


def table(rows: list[dict], columns: list[str], formats: dict | None = None) -> str:
    """A plain-text table (no pandas dependency)."""
    formats = formats or {}
    cells = [[(formats.get(c, "{}")).format(r[c]) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
        for i, c in enumerate(columns)
    ]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(out)
