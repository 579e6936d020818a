"""Helpers shared by the notebooks: profile selection, printing tables, and the step that
makes an executed notebook's outputs the same on every run (``python -m flashcore.notebook``)."""

from __future__ import annotations

import math
import os
import sys


def setup(profile: str = "auto") -> tuple[str, str]:
    """The first code cell of every notebook after its parameters.

    Resolves PROFILE ("auto" -> "gpu" with CUDA, else "cpu"); for the CPU profile, switches
    Triton to its interpreter before any kernel module is imported (the interpreter flag is
    read when ``@triton.jit`` decorates); sets the figure style; sends progress bars to the
    terminal (see ``progress_to_terminal``); prints the profile and device.
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
    progress_to_terminal()
    where = torch.cuda.get_device_name(0) if profile == "gpu" else "CPU (Triton interpreter)"
    print(f"profile {profile!r} on {where}")
    return profile, ("cuda" if profile == "gpu" else "cpu")


def progress_to_terminal() -> None:
    """Make tqdm's bars write to the terminal that started the kernel, not into cell outputs.

    A bar's text holds its timings (``54.66s/it``) and is split into a stream output per
    refresh, so a notebook that kept it would differ on every run. In a Jupyter kernel,
    ``sys.stderr`` is the cell's output stream and its ``fileno()`` is a copy of the kernel
    process's own stderr: the terminal running ``jupyter lab`` or ``make reproduce``, where the
    bars still show. Where there is no such descriptor the bars are turned off. Also silences
    tqdm.auto's "IProgress not found" warning (it asks for ipywidgets; the text bar is the
    one wanted). Safe to call more than once."""
    import warnings
    from functools import partialmethod

    import tqdm.std

    warnings.filterwarnings("ignore", message="IProgress not found", category=tqdm.std.TqdmWarning)
    cls = tqdm.std.tqdm
    init = getattr(cls.__dict__["__init__"], "_flashcore_original", cls.__dict__["__init__"])
    try:
        terminal = open(sys.stderr.fileno(), "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as the kernel)
        defaults = {"file": terminal}
    except (AttributeError, OSError, ValueError):
        defaults = {"disable": True}
    patched = partialmethod(init, **defaults)
    patched._flashcore_original = init
    cls.__init__ = patched


def _power_of_ten(k: int) -> str:
    return str(10**k) if 0 <= k <= 3 else f"1e{k:+03d}"


def order_of(x: float) -> str:
    """``x`` as the power of ten just above it: ``order_of(3.0e-7) == "< 1e-06"``.

    For an error measured live on a CPU whose digits move with the CPU's code paths (numpy's
    and ATen's SIMD exp, OpenBLAS's summation order: 3.03e-07 on an AVX-512 EPYC, 4.35e-07
    under its AVX2 path) while its size does not, so the committed notebook shows what holds
    on any machine. 0 prints as "0"."""
    x = abs(float(x))
    if x == 0 or not math.isfinite(x):
        return str(x)
    return "< " + _power_of_ten(math.floor(math.log10(x)) + 1)


def live_error(err: float, profile: str) -> str:
    """An error measured live, as a notebook prints it: ``"{:.2e}"`` in the GPU profile,
    ``order_of(err)`` in the CPU profile (see there)."""
    return f"{float(err):.2e}" if profile == "gpu" else order_of(err)


def live_ratio(ratio: float, profile: str) -> str:
    """An error-rule ratio (error / the rule's bound) measured live, as a notebook prints it.

    GPU profile: three decimals. CPU profile: the side of the rule's 1 it falls on ("<= 1",
    "> 1"), and "> 100" for a failure by more than a hundredfold (a planted bug's 958 on one
    machine, its 4e5 and 9e5 that differ by the machine too). On a CPU the ratio compares two
    errors of a few float32 or float16 roundings, and the same call gives 0.30 on one machine
    and 0.87 on another (AVX-512 and AVX2 code paths), so its digits describe the CPU rather
    than the kernel; which side of 1 it is on does not."""
    ratio = float(ratio)
    if profile == "gpu" or not math.isfinite(ratio):
        return f"{ratio:.3f}"
    return "<= 1" if ratio <= 1 else "> 1" if ratio <= 100 else "> 100"


def table(rows: list[dict], columns: list[str], formats: dict | None = None) -> str:
    """A plain-text table (no pandas dependency). ``formats`` maps a column to a format
    string (``"{:.2e}"``) or to a function of the value that returns its text."""
    formats = formats or {}

    def cell(value, fmt):
        return fmt(value) if callable(fmt) else fmt.format(value)

    cells = [[cell(r[c], formats.get(c, "{}")) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
        for i, c in enumerate(columns)
    ]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(out)


def merge_streams(path: str | os.PathLike) -> bool:
    """Join consecutive stream outputs of one cell that go to the same stream, in place.

    The kernel sends what a cell prints in pieces, one per flush (every 0.2 s), so the same
    text lands in one output on a fast machine and in several on a slow one. Joined, the
    committed notebook depends only on the text. Returns whether the file changed."""
    import nbformat

    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    changed = False
    for cell in nb.cells:
        outputs = cell.get("outputs") or []
        merged = []
        for out in outputs:
            last = merged[-1] if merged else None
            if (
                out.get("output_type") == "stream"
                and last is not None
                and last.get("output_type") == "stream"
                and last.get("name") == out.get("name")
            ):
                last["text"] = "".join(last["text"]) + "".join(out["text"])
            else:
                merged.append(out)
        if len(merged) < len(outputs):
            cell["outputs"] = merged
            changed = True
    if changed:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m flashcore.notebook merge-streams NB.ipynb ...`` (run by ``make reproduce``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flashcore.notebook")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge-streams", help=merge_streams.__doc__.splitlines()[0])
    merge.add_argument("notebooks", nargs="+")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        merge_streams(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
