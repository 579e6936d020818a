"""Each notebook is a jupytext pair: notebooks/NN_name.py (percent-format source) and
notebooks/NN_name.ipynb (executed, committed). They must hold the same cells; an edit to one
that was not synced (`jupytext --sync notebooks/NN_name.py`) fails here."""

import shutil
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def cells_of(path: Path) -> list[tuple[str, str, list[str]]]:
    """(cell type, source, tags) of every cell, read through jupytext for either file type."""
    import jupytext

    nb = jupytext.read(path)
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def pair_differences(py: Path, ipynb: Path) -> list[str]:
    """Human-readable differences between the cells of a .py source and its .ipynb."""
    if not py.exists() or not ipynb.exists():
        return [f"{py.stem}: missing {py.name if not py.exists() else ipynb.name}"]
    a, b = cells_of(py), cells_of(ipynb)
    if len(a) != len(b):
        return [f"{py.stem}: {len(a)} cells in {py.name}, {len(b)} in {ipynb.name}"]
    diffs = []
    for i, (ca, cb) in enumerate(zip(a, b)):
        for what, x, y in zip(("type", "source", "tags"), ca, cb):
            if x != y:
                first = x.splitlines()[0][:60] if what == "source" and x else x
                diffs.append(f"{py.stem}: cell {i} {what} differs ({first!r} ...)")
    return diffs


def notebook_names() -> list[str]:
    stems = {p.stem for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")}
    stems |= {p.stem for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.py")}
    return sorted(stems)


@pytest.mark.parametrize("name", notebook_names())
def test_pair_in_sync(name):
    diffs = pair_differences(NOTEBOOK_DIR / f"{name}.py", NOTEBOOK_DIR / f"{name}.ipynb")
    assert not diffs, (
        "notebook pair out of sync (run `jupytext --sync notebooks/*.py`):\n" + "\n".join(diffs)
    )


def test_pair_check_catches_an_unsynced_edit(tmp_path):
    """The check above must be able to fail: edit a copy of one side only."""
    name = notebook_names()[0]
    py, ipynb = tmp_path / f"{name}.py", tmp_path / f"{name}.ipynb"
    shutil.copy(NOTEBOOK_DIR / f"{name}.py", py)
    shutil.copy(NOTEBOOK_DIR / f"{name}.ipynb", ipynb)
    assert pair_differences(py, ipynb) == []
    text = py.read_text()
    py.write_text(text.replace('PROFILE = "auto"', 'PROFILE = "cpu"', 1))
    assert any("cell 1 source" in d for d in pair_differences(py, ipynb))
    py.write_text(text + "\n# %%\nprint('a cell only the source has')\n")
    assert pair_differences(py, ipynb) == [
        f"{name}: {len(cells_of(ipynb)) + 1} cells in {py.name}, "
        f"{len(cells_of(ipynb))} in {ipynb.name}"
    ]
    py.unlink()
    assert pair_differences(py, ipynb) == [f"{name}: missing {py.name}"]
