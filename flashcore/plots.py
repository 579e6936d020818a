"""Figure style and byte-stable saving: a figure is a pure function of its data, so a rerun
on any machine writes the same bytes (no timestamps or software tags in the files)."""

from __future__ import annotations

import os
from pathlib import Path

from .results import REPO_ROOT

FIGURES_DIR = REPO_ROOT / "figures"

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
}

DTYPE_COLORS = {"float16": "#1f77b4", "bfloat16": "#d62728", "float32": "#2ca02c"}


def use_style() -> None:
    import matplotlib

    matplotlib.rcParams.update(STYLE)
    matplotlib.rcParams["svg.hashsalt"] = "flashcore"  # deterministic SVG ids


def save_figure(fig, name: str, directory: Path | str | None = None) -> Path:
    """Save ``fig`` as figures/<name>.png with fixed metadata; returns the path.

    The path is relative to the working directory (``../figures/<name>.png`` from
    notebooks/), so a notebook cell that shows it shows the same text on every machine;
    absolute where no relative path exists (another drive on Windows)."""
    directory = Path(directory) if directory is not None else FIGURES_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.savefig(path, metadata={"Software": None}, bbox_inches="tight")
    try:
        return Path(os.path.relpath(path))
    except ValueError:
        return path.absolute()
