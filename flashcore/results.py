"""Recorded results: JSON files under results/<gpu-slug>/<topic>.json, each with provenance.

A figure in the notebooks is a pure function of these files, so a machine without a GPU
renders the same figure as the machine that measured. Every record says where it came
from: device, driver, library versions, git commit, date and the command that made it.

Beside its provenance a record stores the fingerprint of the kernel sources it ran
(``kernel_fingerprint``): each file's git object id, computed from the file's bytes, so a
copy of the tree without ``.git`` (a GPU machine told its commit through FLASHCORE_COMMIT)
fingerprints what it actually ran, and any checkout can tell whether today's kernels still
match (``python -m flashcore records``). ``dirty`` is computed by git where there is one,
never declared; ``commit_source`` says where the commit came from.
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
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


def git_output(args: list[str], root: Path = REPO_ROOT) -> str | None:
    """``git args`` run in ``root``: its stdout (possibly empty), or None where git fails."""
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=20, check=True, cwd=root
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def has_git(root: Path = REPO_ROOT) -> bool:
    """Whether ``root`` is the top of a git work tree (not a copy inside some other repository)."""
    top = git_output(["rev-parse", "--show-toplevel"], root)
    return bool(top) and Path(top.strip()).resolve() == Path(root).resolve()


def commit_info(root: Path = REPO_ROOT) -> dict:
    """``{"commit", "commit_source", "dirty"}`` of the tree at ``root``.

    FLASHCORE_COMMIT, where set, names the commit the tree was copied from and wins: the GPU
    machine gets a copy of the working tree whose ``.git``, if it travels at all, may be an
    older one than the tree's (``commit_source`` ``"FLASHCORE_COMMIT"``; ``dirty`` computed
    against that commit where this repository has it, else None: the record's kernel
    fingerprint is what can be checked against that commit later). Otherwise, in a git
    checkout the commit is HEAD and ``dirty`` whether a tracked file differs from it
    (``git status``); ``commit_source`` is ``"git"``. Neither: commit ``"unknown"``, source
    None.
    """
    env = os.environ.get("FLASHCORE_COMMIT")
    if env:
        dirty = None
        if has_git(root) and git_output(["cat-file", "-e", f"{env}^{{commit}}"], root) is not None:
            diff = git_output(["diff", "--name-only", env, "--"], root)
            dirty = None if diff is None else bool(diff.strip())
        return {"commit": env, "commit_source": "FLASHCORE_COMMIT", "dirty": dirty}
    if has_git(root):
        head = (git_output(["rev-parse", "HEAD"], root) or "").strip()
        status = git_output(["status", "--porcelain", "--untracked-files=no"], root)
        if head:
            dirty = None if status is None else bool(status.strip())
            return {"commit": head, "commit_source": "git", "dirty": dirty}
    return {"commit": "unknown", "commit_source": None, "dirty": None}


def git_commit() -> tuple[str, bool | None]:
    """(commit, dirty) of this checkout: git's HEAD and status where the tree is a git checkout;
    else FLASHCORE_COMMIT (a copy of the tree without .git, e.g. a remote GPU machine, is told
    the commit it was copied from), dirty None. See ``commit_info``."""
    info = commit_info()
    return info["commit"], info["dirty"]


# --- kernel source fingerprint ------------------------------------------------------------

KERNELS_PACKAGE = "flashcore.kernels"
KERNELS_DIR = "flashcore/kernels"
# Beside the kernels: the files that decide which kernel a call reaches (the dispatch table;
# ops.py routes the torch op's few-query calls to the decode kernel, and its registration is
# the op path's host cost that launch.json measures; the two other doors' modules likewise:
# the SDPA door's override picks flashcore's kernel or PyTorch's, and both doors' host paths
# are launch.json's rows).
DISPATCH_FILES = (
    "flashcore/interface.py",
    "flashcore/dispatch.py",
    "flashcore/ops.py",
    "flashcore/sdpa_backend.py",
    "flashcore/flash_attn_interface.py",
)
# The kernel modules whose functions the dispatch consults to route a call (``supports``,
# the Gluon kernels' tile tables): a change there can send a call to another kernel, so every
# record of a run that ran kernels counts them, whether or not their own kernels ran.
ROUTING_FILES = ("flashcore/kernels/forward_hopper.py", "flashcore/kernels/backward_hopper.py")
# The multi-GPU algorithms: the context-parallel records (``cp`` command) add them to their
# fingerprint (``write_result(..., fingerprint_extra=PARALLEL_FILES)``), since the ring's blocks,
# merges and kernel choice live there; single-GPU records do not depend on them.
PARALLEL_FILES = (
    "flashcore/parallel.py",
    "flashcore/parallel_ulysses.py",
    "flashcore/parallel_dispatch.py",
)
# The topics of those records: a record of one whose fingerprint lists no parallel module was
# written before they joined it (e6c5d37), and is judged by the modules at its commit.
PARALLEL_TOPIC_PREFIXES = ("context_parallel", "cp_")


def is_parallel_topic(topic) -> bool:
    """Whether a record's topic is a context-parallel one (its ring and merges ran)."""
    return isinstance(topic, str) and topic.startswith(PARALLEL_TOPIC_PREFIXES)


def blob_id(data: bytes) -> str:
    """Git's object id of a file's bytes: sha1 of ``b"blob <size>\\0" + data``.

    What ``git hash-object FILE`` prints and ``git ls-tree COMMIT`` lists, computed without git,
    so a fingerprint taken on a copy of the tree compares file by file with any commit."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_kernel_files(root: Path = REPO_ROOT) -> list[str]:
    """Every kernel source of the tree at ``root``: flashcore/kernels/*.py and the dispatch."""
    files = sorted(p.relative_to(root).as_posix() for p in (root / KERNELS_DIR).glob("*.py"))
    files += [f for f in DISPATCH_FILES if (root / f).exists()]
    return sorted(files)


def imported_kernel_files(root: Path = REPO_ROOT) -> list[str]:
    """The kernel sources this process has imported (``flashcore.kernels`` and its modules in
    ``sys.modules``), plus the dispatch files, as paths relative to ``root``."""
    found = set()
    base = Path(root).resolve()
    for name, module in list(sys.modules.items()):
        if name != KERNELS_PACKAGE and not name.startswith(KERNELS_PACKAGE + "."):
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        try:
            found.add(Path(file).resolve().relative_to(base).as_posix())
        except ValueError:  # a module from outside this tree is not this tree's source
            continue
    if found:
        found.update(f for f in DISPATCH_FILES if (base / f).exists())
    return sorted(found)


def _compiled_here(obj) -> bool:
    """Whether ``obj`` (a module attribute) is a Triton or Gluon ``@jit`` kernel, or a
    ``CachedKernel`` around one, that this process compiled for a GPU: its per-device compile
    cache holds a kernel. (On the interpreter nothing compiles, and nothing counts.)"""
    # A CachedKernel launches its .kernel. (A @jit function has a .kernel too, always None:
    # unwrap only where the attribute is itself a kernel with compile caches.)
    inner = getattr(obj, "kernel", None)
    if getattr(inner, "device_caches", None) is not None:
        obj = inner
    caches = getattr(obj, "device_caches", None)
    if not isinstance(caches, dict):
        return False
    return any(entry and entry[0] for entry in list(caches.values()))


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """The dotted module name of a source under ``root`` (``flashcore/kernels/__init__.py``
    -> ``flashcore.kernels``)."""
    parts = list(Path(path).relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_imports(path: Path, root: Path = REPO_ROOT) -> set[str]:
    """Every flashcore module the source at ``path`` imports, wherever in the file the import
    stands (module level or in a function), relative imports resolved: dotted names of the
    sources under ``root``/flashcore. (tests/test_architecture.py checks the layout with it.)"""
    path, root = Path(path), Path(root)
    name, is_package = module_name(path, root), path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{a.name}" for a in node.names)
    modules = {module_name(p, root) for p in (root / "flashcore").rglob("*.py")}
    return {m for m in found if m in modules and m != name}


def kernel_import_closure(files: list[str], root: Path = REPO_ROOT) -> list[str]:
    """``files`` (kernel sources, repository-relative) and every kernel source they import,
    directly or through each other: the code a kernel of theirs can call or read."""
    base = Path(root)
    seen, todo = set(), list(files)
    while todo:
        rel = todo.pop()
        if rel in seen or not (base / rel).is_file():
            continue
        seen.add(rel)
        imported = module_imports(base / rel, base)
        todo += [
            f"{KERNELS_DIR}/{m[len(KERNELS_PACKAGE) + 1 :]}.py"
            for m in imported
            if m.startswith(KERNELS_PACKAGE + ".")
        ]
    return sorted(seen)


def ran_kernel_files(root: Path = REPO_ROOT, modules: dict | None = None) -> list[str]:
    """The kernel sources behind the kernels this process ran on a GPU: each flashcore.kernels
    module with a ``@jit`` kernel it compiled, every kernel source those import, every kernel
    source that imports one of them (its launchers may have run), the routing files
    (``ROUTING_FILES``) and the dispatch files; [] where it ran none (the interpreter,
    or a run whose kernels ran in other processes). ``modules``: {name: module} to look in,
    default ``sys.modules``."""
    base = Path(root).resolve()
    ran = []
    for name, module in list((sys.modules if modules is None else modules).items()):
        if not name.startswith(KERNELS_PACKAGE + ".") or module is None:
            continue
        file = getattr(module, "__file__", None)
        if not file or not any(_compiled_here(v) for v in list(vars(module).values())):
            continue
        try:
            ran.append(Path(file).resolve().relative_to(base).as_posix())
        except ValueError:  # a module from outside this tree is not this tree's source
            continue
    if not ran:
        return []
    # The sources that import a module that ran, too: a module with launchers and no kernel
    # of its own (varlen.py packs its batches for forward.py's kernel) ran as host code.
    launchers = [
        f for f in tree_kernel_files(base) if set(kernel_import_closure([f], base)) & set(ran)
    ]
    fixed = [KERNELS_DIR + "/__init__.py", *ROUTING_FILES, *DISPATCH_FILES]
    fixed = [f for f in fixed if (base / f).exists()]
    return sorted(set(kernel_import_closure(ran, base)) | set(launchers) | set(fixed))


def fingerprint_digest(files: dict[str, str | None]) -> str:
    """sha256 over the sorted ``"<blob id> <path>"`` lines (``-`` for a file that is absent)."""
    lines = "".join(f"{files[p] or '-'} {p}\n" for p in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def file_blobs(files: list[str], root: Path = REPO_ROOT) -> dict[str, str | None]:
    """``{path: git object id of the file today}`` (None where it is absent)."""
    out = {}
    for rel in files:
        path = Path(root) / rel
        out[rel] = blob_id(path.read_bytes()) if path.is_file() else None
    return out


def committed_blobs(
    commit: str, root: Path = REPO_ROOT, extra: tuple[str, ...] = ()
) -> dict[str, str] | None:
    """``{path: object id}`` of the kernel sources at ``commit`` (the files ``tree_kernel_files``
    would list there, plus ``extra``), or None where git or the commit is not available."""
    if not has_git(root):
        return None
    listed = (KERNELS_DIR, *DISPATCH_FILES, *extra)
    out = git_output(["ls-tree", "-r", commit, "--", *listed], root)
    if out is None:
        return None
    blobs = {}
    for line in out.splitlines():
        meta, _, path = line.partition("\t")
        parts = meta.split()
        top_level = (
            path in DISPATCH_FILES
            or path in extra
            or (path.startswith(KERNELS_DIR + "/") and "/" not in path[len(KERNELS_DIR) + 1 :])
        )
        if len(parts) == 3 and parts[1] == "blob" and path.endswith(".py") and top_level:
            blobs[path] = parts[2]
    return blobs


def kernel_fingerprint(
    files: list[str] | None = None, root: Path = REPO_ROOT, extra: tuple[str, ...] = ()
) -> dict:
    """The fingerprint a record stores: which kernel sources it ran, byte for byte.

    ``files``: repository-relative paths; default, the sources behind the kernels this process
    ran on a GPU (scope ``"ran"``, ``ran_kernel_files``: a record is stale when code that ran
    for it, or that routes its calls, changed, and not when a kernel it never ran did); where
    it ran none, the kernel modules it imported (scope ``"imported"``), or every kernel source
    of the tree where it imported none (scope ``"tree"``: a run whose kernels ran in other
    processes, e.g. papermill's). Returns
    ``{"sha256", "scope", "files": {path: git object id}, "dirty_files"}``: ``sha256`` is
    ``fingerprint_digest(files)``; ``dirty_files`` lists the files that differ from the
    commit the record names (FLASHCORE_COMMIT where set, else HEAD; computed by git, None
    where git or that commit is not available: a GPU machine's copy of the tree may carry an
    older ``.git``, against whose HEAD every later kernel change would read as dirty).
    ``extra``: sources added to whichever list (``PARALLEL_FILES`` for the multi-GPU records).
    """
    scope = "given"
    if files is None:
        files, scope = ran_kernel_files(root), "ran"
        if not files:
            files, scope = imported_kernel_files(root), "imported"
        if not files:
            files, scope = tree_kernel_files(root), "tree"
    blobs = file_blobs(sorted(set(files) | set(extra)), root)
    named = committed_blobs(os.environ.get("FLASHCORE_COMMIT") or "HEAD", root, tuple(extra))
    dirty = None if named is None else sorted(p for p, b in blobs.items() if named.get(p) != b)
    return {
        "sha256": fingerprint_digest(blobs),
        "scope": scope,
        "hash": "per file: git object id (sha1 of 'blob <size>\\0' + bytes); sha256 over "
        "the sorted '<id> <path>' lines",
        "files": blobs,
        "dirty_files": dirty,
    }


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

    where = commit_info()
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": where["commit"],
        "commit_source": where["commit_source"],
        "dirty": where["dirty"],
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
                # One GPU's line: nvidia-smi prints one per GPU, the same driver on each.
                "driver": _run(
                    ["nvidia-smi", "-i", "0", "--query-gpu=driver_version", "--format=csv,noheader"]
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
    topic: str,
    payload: dict,
    *,
    command: str | None = None,
    slug: str | None = None,
    fingerprint_extra: tuple[str, ...] = (),
) -> Path:
    """Write ``payload`` with provenance to results/<slug>/<topic>.json (stable key order).

    Beside the provenance the record gets ``kernel_fingerprint`` (``kernel_fingerprint()``: the
    kernel sources behind the kernels this process ran, else those it imported, as they are on
    disk now; plus ``fingerprint_extra``)."""
    path = result_path(topic, slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "topic": topic,
        "provenance": provenance(command),
        "kernel_fingerprint": kernel_fingerprint(extra=fingerprint_extra),
        **payload,
    }
    path.write_text(json.dumps(record, indent=1, sort_keys=False, default=float) + "\n")
    return path


def write_log(path, payload: dict, *, command: str | None = None) -> None:
    """Write a probe's log ``payload`` to ``path`` (any place: logs are not records) with the
    provenance and kernel fingerprint a record carries. ``command``: by default this
    process's command line, the script relative to the repository and ``path`` itself as
    OUT.json (where it lands is the machine's business, not the log's)."""
    if command is None:
        argv = ["OUT.json" if a == str(path) else a for a in sys.argv]
        script = Path(argv[0]).resolve()
        if script.is_relative_to(REPO_ROOT):
            argv[0] = str(script.relative_to(REPO_ROOT))
        command = " ".join(shlex.quote(a) for a in argv)
    record = {"provenance": provenance(command), "kernel_fingerprint": kernel_fingerprint()}
    Path(path).write_text(json.dumps({**record, **payload}, indent=1, default=float) + "\n")


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
    # Records made on several GPUs before provenance() asked for one list the driver per GPU.
    driver = p["driver"].splitlines()[0] if p.get("driver") else None
    extra = f", driver {driver}, CUDA {p['cuda']}" if driver else ""
    return (
        f"{p['device']} — recorded {p['date']} at commit {p['commit'][:10]} "
        f"(torch {p['torch']}, triton {p['triton']}{extra})"
    )
