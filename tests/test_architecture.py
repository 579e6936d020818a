"""The layout's rules, checked on the source (static imports, module-level and in functions):

* the library (``flashcore`` without ``flashcore.studies`` and the CLI ``flashcore.__main__``)
  never imports the lab (``flashcore.studies``);
* ``flashcore/kernels/`` never imports upward (interface, ops, parallel, validate, ...): it
  holds kernels and their launchers only;
* the library's imports have no cycle;
* no module is over ~700 lines, except kernel files that say at their top why they are long.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flashcore.results as R

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "flashcore"
LONG_FILE_LINES = 760  # "~700": a little slack, not a license


def _modules() -> dict[str, Path]:
    return {R.module_name(p, ROOT): p for p in PACKAGE.rglob("*.py")}


def _is_lab(name: str) -> bool:
    return name == "flashcore.studies" or name.startswith("flashcore.studies.")


def _library() -> dict[str, set[str]]:
    return {
        name: R.module_imports(path, ROOT)  # wherever in the file the import stands
        for name, path in _modules().items()
        if not _is_lab(name) and name != "flashcore.__main__"
    }


def test_library_never_imports_the_lab():
    offenders = {n: sorted(filter(_is_lab, deps)) for n, deps in _library().items()}
    assert not {n: d for n, d in offenders.items() if d}


def test_kernels_never_import_upward():
    upward = {
        name: sorted(
            d for d in deps if not d.startswith("flashcore.kernels") and d != "flashcore._checks"
        )
        for name, deps in _library().items()
        if name.startswith("flashcore.kernels")
    }
    assert not {n: d for n, d in upward.items() if d}


def test_library_imports_have_no_cycle():
    graph = _library()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    # A package's __init__ importing its own submodules lazily is not a cycle of code.
    cycles = [c for c in cycles if not any(m == "flashcore" for m in c)]
    assert not cycles


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rules above can fail: a kernel module that imports the interface is caught."""
    fake = tmp_path / "flashcore" / "kernels"
    fake.mkdir(parents=True)
    (tmp_path / "flashcore" / "__init__.py").write_text("")
    (tmp_path / "flashcore" / "interface.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "bad.py").write_text("def f():\n    from ..interface import attention\n")
    globals_ = globals()
    old_root, old_pkg = globals_["ROOT"], globals_["PACKAGE"]
    globals_["ROOT"], globals_["PACKAGE"] = tmp_path, tmp_path / "flashcore"
    try:
        with pytest.raises(AssertionError):
            test_kernels_never_import_upward()
    finally:
        globals_["ROOT"], globals_["PACKAGE"] = old_root, old_pkg


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_module_size(path):
    lines = path.read_text().splitlines()
    if len(lines) <= LONG_FILE_LINES:
        return
    head = " ".join(" ".join(lines[:80]).split())
    assert path.parent.name == "kernels" and "long because" in head, (
        f"{path.relative_to(ROOT)} has {len(lines)} lines; split it, or (a kernel file) say at "
        "its top why it is long"
    )
