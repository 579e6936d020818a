"""Which records today's kernels still match: ``python -m flashcore records``, the line a
notebook prints under a record it renders, and ``results/SUMMARY.md``.

A record written by ``results.write_result`` carries ``kernel_fingerprint``: the git object id
of every kernel source behind the kernels the run ran (``results.ran_kernel_files``: the
``flashcore/kernels`` modules whose kernels it compiled, the kernel sources those import and
those that import them, the Gluon kernels' routing files and the dispatch files; records made
before this rule (2026-11-27), or by a run that ran no kernel in its own process, list every
kernel source it imported), computed from the files' bytes. Today's files are hashed the same way,
so a record is

* **current**: every file it ran has today's bytes (the fingerprint equals today's over the
  same files);
* **stale (kernels changed: forward.py, ...)**: the files named differ today in their code
  (or are gone);
* **current (text only changed since: forward_hopper.py)**: the files named differ today
  only in docstrings and comments: their syntax trees without docstrings are identical
  (``code_of``), so the kernels compiled from them are the same; needs git, to read the
  record's version of the file by its object id (without it, the file counts as changed);
* for a record made before fingerprints, the same comparison against the kernel files at
  the record's commit (``git ls-tree``), marked **by commit**: every kernel file of the tree
  at that commit or today counts, so a file added since (``_mask.py (new)``) makes it stale;
* **no fingerprint (recorded before fingerprints; commit X)** where that commit cannot be
  read here.

A fingerprinted record is also checked against the commit it declares: "its kernels differ
from commit X" means the run had kernel edits not in that commit (or the commit is wrong).

Notebooks print ``status_line(path)`` (or ``status_line_for(topic)``) under each record they
render. ``summary_markdown()`` builds results/SUMMARY.md from the records alone (relative paths,
no clock), so the committed file can be compared with what the records generate.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from flashcore import results as R

SUMMARY_NAME = "SUMMARY.md"
SUMMARY_COMMAND = "python -m flashcore records --summary"
# Implementations that are not flashcore's: the peers a speed row is compared with.
PEER_PREFIXES = ("sdpa", "flex", "torch", "cudnn", "fa2", "fa3", "fa4", "flash_attn")
# What makes two timing rows the same problem (an implementation's row is compared with the
# peers' rows of equal values of these keys).
SHAPE_KEYS = (
    "B",
    "batch",
    "Hq",
    "H",
    "Hkv",
    "num_q_heads",
    "num_kv_heads",
    "S",
    "Sk",
    "seqlen",
    "D",
    "head_dim",
    "causal",
    "dtype",
    "window",
)
MAX_TEXT = 80  # longer strings (method descriptions, logs) stay out of the summary
MAX_DICT = 12  # a top-level dict with more entries is data, not a summary


@dataclass(frozen=True)
class Status:
    """Whether today's kernels match a record's."""

    kind: str  # "current", "stale" or "unknown"
    text: str  # what a reader sees
    changed: tuple[str, ...] = ()  # kernel files that differ, by short name
    by_commit: bool = False  # no fingerprint: compared with the files at the record's commit
    needs_git: bool = False  # git history, absent here (no .git, shallow), would say more
    check: str | None = None  # a fingerprinted record's files against its declared commit


@dataclass
class _Here:
    """Today's tree and its git, read once per listing."""

    root: Path
    _today: dict | None = None
    _commits: dict = field(default_factory=dict)
    _git: str | None = None
    _sources: dict = field(default_factory=dict)

    def today(self) -> dict[str, str | None]:
        if self._today is None:
            self._today = R.file_blobs(R.tree_kernel_files(self.root), self.root)
        return self._today

    def blobs(self, files) -> dict[str, str | None]:
        today = self.today()
        missing = [f for f in files if f not in today]
        return {f: today[f] for f in files if f in today} | R.file_blobs(missing, self.root)

    def code_unchanged(self, path: str, then: str | None, now: str | None) -> bool:
        """Whether file ``path`` at object id ``then`` (read from git) and today's (object id
        ``now``) hold the same code (``code_of``): False where either is absent or unreadable."""
        if then is None or now is None:
            return False
        if then not in self._sources:
            self._sources[then] = R.git_output(["cat-file", "-p", then], self.root)
        old = self._sources[then]
        file = self.root / path
        if old is None or not file.is_file():
            return False
        new = file.read_text()
        if R.blob_id(new.encode()) != now:
            return False
        return code_of(old) is not None and code_of(old) == code_of(new)

    def at_commit(self, commit: str) -> dict[str, str] | None:
        if commit not in self._commits:
            # The parallel modules too: the multi-GPU records' fingerprints list them.
            self._commits[commit] = R.committed_blobs(commit, self.root, R.PARALLEL_FILES)
        return self._commits[commit]

    def git(self) -> str:
        """What git is here: "full" (a clone with its history), "shallow" or "absent"."""
        if self._git is None:
            if not R.has_git(self.root):
                self._git = "absent"
            else:
                shallow = R.git_output(["rev-parse", "--is-shallow-repository"], self.root)
                self._git = "shallow" if (shallow or "").strip() == "true" else "full"
        return self._git


def short_name(path: str) -> str:
    """``flashcore/kernels/forward.py`` -> ``forward.py``; ``flashcore/interface.py`` ->
    ``interface.py``."""
    for prefix in (R.KERNELS_DIR + "/", "flashcore/"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def code_of(source: str) -> str | None:
    """A Python source's code without its docstrings and comments: the dump of its syntax tree
    (no line numbers) with the leading string of every module, class and function body
    removed. Two sources with the same ``code_of`` compile to the same kernels (Triton and
    Gluon compile a function's syntax tree; a docstring is not code). None if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _changed(then: dict, now: dict, here: _Here | None = None) -> tuple[tuple, tuple]:
    """(files whose code differs, files that differ only in docstrings and comments), by
    short name; without ``here`` every differing file counts as code."""
    code, text = [], []
    for path in sorted(set(then) | set(now)):
        a, b = then.get(path), now.get(path)
        if a == b:
            continue
        if here is not None and here.code_unchanged(path, a, b):
            text.append(short_name(path))
            continue
        suffix = " (new)" if a is None else " (removed)" if b is None else ""
        code.append(short_name(path) + suffix)
    return tuple(code), tuple(text)


def _parallel_moved(committed, here) -> tuple[tuple, str, bool]:
    """A fingerprinted context-parallel record whose fingerprint lists no parallel module (it
    predates e6c5d37): those modules at its commit (the ones that existed then) against
    today's. Returns (the modules whose code changed, the note a status line without them
    ends with, whether git history would say more)."""
    if committed is None:
        return (), f"; parallel modules not checked here ({_why_not(here)})", here.git() != "full"
    then = {p: b for p, b in committed.items() if p in R.PARALLEL_FILES}
    moved, _ = _changed(then, here.blobs(sorted(then)), here)
    return moved, " (parallel modules as at its commit)", False


def record_commit(record: dict) -> str | None:
    """The commit a record names (the first hex hash in ``provenance.commit``), or None."""
    text = str((record.get("provenance") or {}).get("commit") or "")
    found = re.search(r"\b[0-9a-f]{7,40}\b", text)
    return found.group(0) if found else None


def record_status(record: dict, root: Path | None = None, *, _here: _Here | None = None) -> Status:
    """Whether the kernel sources under ``root`` (default: this checkout) match ``record``'s."""
    here = _here or _Here(Path(root or R.REPO_ROOT))
    commit = record_commit(record)
    fp = record.get("kernel_fingerprint")
    if isinstance(fp, dict) and isinstance(fp.get("files"), dict):
        ran = fp["files"]
        now = here.blobs(sorted(ran))
        changed, text_only = _changed(ran, now, here)
        committed = here.at_commit(commit) if commit else None
        moved, parallel_note, needs_git = (), "", False
        if R.is_parallel_topic(record.get("topic")) and not set(ran) & set(R.PARALLEL_FILES):
            # A context-parallel record from before the parallel modules joined its
            # fingerprint: the ring it ran is the one at its commit.
            moved, parallel_note, needs_git = _parallel_moved(committed, here)
            changed += moved
        if R.fingerprint_digest(ran) != fp.get("sha256"):
            kind, text = "stale", "stale (its fingerprint does not match its own file list)"
        elif moved:
            kind, text = (
                "stale",
                f"stale (kernels changed: {', '.join(changed)}; parallel modules by commit)",
            )
        elif changed:
            kind, text = "stale", f"stale (kernels changed: {', '.join(changed)})"
        elif text_only:
            kind, text = "current", f"current (text only changed since: {', '.join(text_only)})"
        else:
            kind, text = "current", "current"
        if not moved:
            text += parallel_note
        check = None
        if committed is not None:
            differ = [short_name(p) for p in sorted(ran) if committed.get(p) != ran[p]]
            if differ:  # the run had kernel edits that commit lacks (or names the wrong one)
                check = f"its kernels differ from commit {commit}'s: {', '.join(differ)}"
                text += f"; {check}"
            else:
                check = f"its kernels are commit {commit}'s"
        elif commit:
            needs_git = here.git() != "full"
            check = f"not checked against commit {commit} here ({_why_not(here)})"
        return Status(kind, text, changed, check=check, needs_git=needs_git)

    if commit is None:
        return Status("unknown", "no fingerprint (recorded before fingerprints; commit unknown)")
    committed = here.at_commit(commit)
    if committed is None:
        return Status(
            "unknown",
            f"no fingerprint (recorded before fingerprints; commit {commit}: {_why_not(here)})",
            needs_git=here.git() != "full",
        )
    # By bytes: these records predate the rule. Against the kernel sources only (a record
    # without a fingerprint names no parallel module it ran).
    committed = {p: b for p, b in committed.items() if p not in R.PARALLEL_FILES}
    changed, _ = _changed(committed, here.today())
    if not changed:
        return Status("current", "current (by commit; no fingerprint)", by_commit=True)
    return Status(
        "stale",
        f"stale (by commit; no fingerprint; kernels changed: {', '.join(changed)})",
        changed,
        by_commit=True,
    )


def _why_not(here: _Here) -> str:
    return {
        "absent": "no git history here",
        "shallow": "not in this shallow clone",
        "full": "not in this repository",
    }[here.git()]


# --- the listing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    path: str  # relative to the results directory
    commit: str
    date: str
    device: str
    fingerprint: str
    status: Status
    record: dict = field(repr=False, compare=False)


def _one_line(value) -> str:
    return " ".join(str(value).split())


def _row(path: Path, results_dir: Path, here: _Here) -> Row:
    rel = path.relative_to(results_dir).as_posix()
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return Row(rel, "-", "-", "-", "-", Status("unknown", f"unreadable ({exc})"), {})
    if not isinstance(record, dict) or not isinstance(record.get("provenance"), dict):
        return Row(rel, "-", "-", "-", "-", Status("unknown", "not a record (no provenance)"), {})
    prov = record["provenance"]
    fp = record.get("kernel_fingerprint")
    sha = fp.get("sha256") if isinstance(fp, dict) else None
    return Row(
        rel,
        (record_commit(record) or _one_line(prov.get("commit") or "unknown"))[:10],
        _one_line(prov.get("date") or "-")[:10],
        _one_line(prov.get("device") or "-"),
        sha[:12] if sha else "-",
        record_status(record, _here=here),
        record,
    )


def listing(results_dir: Path | None = None, root: Path | None = None) -> list[Row]:
    """One row per record ``results/<slug>/*.json``, sorted by path."""
    results_dir = Path(results_dir or R.RESULTS_DIR)
    here = _Here(Path(root or R.REPO_ROOT))
    return [_row(p, results_dir, here) for p in sorted(results_dir.glob("*/*.json"))]


def counts(rows: list[Row]) -> str:
    """``"31 records: 2 current, 27 stale (25 by commit), 2 with no status"``."""
    current = [r for r in rows if r.status.kind == "current"]
    stale = [r for r in rows if r.status.kind == "stale"]
    unknown = len(rows) - len(current) - len(stale)

    def by_commit(group):
        n = sum(r.status.by_commit for r in group)
        return f" ({n} by commit)" if n else ""

    return (
        f"{len(rows)} records: {len(current)} current{by_commit(current)}, "
        f"{len(stale)} stale{by_commit(stale)}, {unknown} with no status"
    )


def format_listing(rows: list[Row]) -> str:
    """The listing as aligned text columns, then the counts."""
    head = ("record", "commit", "date", "device", "fingerprint", "status")
    table = [head] + [
        (r.path, r.commit, r.date, r.device, r.fingerprint, r.status.text) for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths)) + "  " + line[-1]
        for line in table
    ]
    return "\n".join(lines + ["", counts(rows)])


def git_dependent(rows: list[Row]) -> list[str]:
    """Records whose status here lacks what git history elsewhere would give (no .git, or a
    shallow clone): a summary generated here would differ from one made in a full clone."""
    return [r.path for r in rows if r.status.needs_git]


def _resolve(path) -> Path:
    path = Path(path)
    for candidate in (path, R.RESULTS_DIR / path, R.REPO_ROOT / path):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no record at {path} (nor under {R.RESULTS_DIR.name}/)")


def status_line(path, root: Path | None = None) -> str:
    """One line for a notebook to print under a record it renders: which record, its commit
    and date, and whether today's kernels still match it. ``path``: the record's file (or a
    path relative to results/, e.g. ``"nvidia-h100-80gb-hbm3/perf.json"``)."""
    file = _resolve(path).resolve()
    row = _row(file, file.parent.parent, _Here(Path(root or R.REPO_ROOT)))  # <slug>/<topic>.json
    return f"record {row.path} (commit {row.commit}, {row.date}): {row.status.text}"


def status_line_for(topic: str, slug: str | None = None, root: Path | None = None) -> str:
    """``status_line`` of the record ``results.read_result(topic, slug)`` reads."""
    if slug is None:
        found = R.recorded_devices(topic)
        if not found:
            raise FileNotFoundError(f"no recorded result for {topic!r} under {R.RESULTS_DIR}")
        slug = found[0]
    return status_line(R.result_path(topic, slug), root=root)


def prefer_current(topics: list[str], slug: str | None = None) -> str:
    """The first of ``topics`` (records of the same measurement, the preferred first, e.g. a
    full sweep before its quick variant) whose record matches today's kernels; the first that
    exists where none does. A notebook's CPU profile renders that one, and its status line
    says which it is."""
    existing = [t for t in topics if R.result_path(t, slug).exists()]
    for topic in existing:
        if record_status(json.loads(R.result_path(topic, slug).read_text())).kind == "current":
            return topic
    return existing[0] if existing else topics[0]


# --- results/SUMMARY.md -----------------------------------------------------------------------


def _value(value) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    text = _one_line(value)
    return f"`{text}`" if "`" not in text else text


def _is_scalar(value) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_TEXT
    return value is None or isinstance(value, (bool, int, float))


def headline_fields(record: dict) -> list[tuple[str, str]]:
    """Top-level scalars, and the scalars of small top-level dicts (``summary.cases``)."""
    out = []
    for key, value in record.items():
        if key in ("topic", "kernel_fingerprint") or key.startswith("provenance"):
            continue
        if _is_scalar(value):
            out.append((key, _value(value)))
        elif isinstance(value, dict) and len(value) <= MAX_DICT:
            out += [(f"{key}.{k}", _value(v)) for k, v in value.items() if _is_scalar(v)]
    return out


def _median_ms(row) -> float | None:
    timing = row.get("timing") if isinstance(row, dict) else None
    ms = timing.get("median_ms") if isinstance(timing, dict) else None
    return float(ms) if isinstance(ms, (int, float)) and ms > 0 else None


def speed_table(record: dict) -> list[str]:
    """For each list of timing rows (``impl`` and ``timing.median_ms``): each of flashcore's
    implementations against the fastest peer measured at the same shape."""
    lines = []
    for key, rows in record.items():
        if not isinstance(rows, list):
            continue
        timed = [r for r in rows if isinstance(r, dict) and "impl" in r and _median_ms(r)]
        shapes: dict[tuple, dict[str, float]] = {}
        for r in timed:
            shape = tuple((k, json.dumps(r.get(k))) for k in SHAPE_KEYS if k in r)
            shapes.setdefault(shape, {})[str(r["impl"])] = _median_ms(r)
        ours = sorted({i for s in shapes.values() for i in s if not i.startswith(PEER_PREFIXES)})
        for impl in ours:
            ratios = []
            for times in shapes.values():
                peers = [t for i, t in times.items() if i.startswith(PEER_PREFIXES)]
                if impl in times and peers:
                    ratios.append(min(peers) / times[impl])
            if not ratios:
                continue
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            ahead = sum(x > 1 for x in ratios)
            lines.append(
                f"| {key} | {impl} | {len(ratios)} | {geomean:.2f} | {min(ratios):.2f} | "
                f"{max(ratios):.2f} | {ahead} of {len(ratios)} |"
            )
    if not lines:
        return []
    return [
        "",
        "Speed against the fastest peer (sdpa, flex, torch, ...) measured at each shape: the "
        "peer's `timing.median_ms` / the implementation's (above 1: faster).",
        "",
        "| rows | implementation | shapes | geomean | min | max | faster at |",
        "|---|---|---:|---:|---:|---:|---:|",
        *lines,
    ]


def _provenance_line(record: dict) -> str:
    p = record["provenance"]
    source = p.get("commit_source")
    dirty = p.get("dirty")
    where = (
        f"commit {_one_line(p.get('commit'))}"
        + (f" (from {source})" if source else "")
        + ("" if dirty is None else f", uncommitted changes: {'yes' if dirty else 'no'}")
    )
    versions = ", ".join(
        f"{name} {_one_line(p[key])}"
        for name, key in (("torch", "torch"), ("triton", "triton"), ("CUDA", "cuda"))
        if p.get(key)
    )
    if p.get("driver"):
        versions += f", driver {' / '.join(sorted(set(str(p['driver']).split())))}"
    return f"{_one_line(p.get('device') or '-')}, {_one_line(p.get('date') or '-')}, {where}; " + (
        versions or "versions not recorded"
    )


def _section(row: Row) -> list[str]:
    lines = ["", f"## {row.path}", ""]
    if not row.record:
        return lines + [f"- {row.status.text}"]
    record = row.record
    command = _one_line(record["provenance"].get("command") or "not recorded")
    lines += [
        f"- recorded: {_provenance_line(record)}",
        f"- command: {f'`{command}`' if '`' not in command else command}",
        f"- kernels today: {row.status.text}",
    ]
    fp = record.get("kernel_fingerprint")
    if isinstance(fp, dict) and isinstance(fp.get("files"), dict):
        what = f"{str(fp.get('sha256'))[:12]} over {len(fp['files'])} files"
        what += f" ({fp.get('scope', '?')})"
        if row.status.check and row.status.check not in row.status.text:
            what += f"; {row.status.check}"
        lines.append(f"- kernel fingerprint: {what}")
    fields = headline_fields(record)
    if fields:
        lines += ["- numbers:"] + [f"  - `{k}`: {v}" for k, v in fields]
    return lines + speed_table(record)


def summary_markdown(results_dir: Path | None = None, root: Path | None = None) -> str:
    """results/SUMMARY.md, generated from the records alone (deterministic: relative paths, no
    clock, the same text on any machine with the repository's history)."""
    rows = listing(results_dir, root)
    lines = [
        "# Recorded results",
        "",
        f"Generated by `{SUMMARY_COMMAND}` from the records under `results/`; do not edit it "
        "by hand: `make test` (tests/test_records.py) fails when it differs from what the "
        "records generate.",
        "",
        "**kernels today** compares the kernel sources a record ran (`flashcore/kernels/*.py`, "
        "`flashcore/interface.py`) with today's: *current* (its fingerprint equals today's "
        "files), *stale* (the files named changed since), and, for a record made before "
        "records carried a fingerprint, the same comparison with the kernel files at the "
        "record's commit (*by commit*). A verdict on a stale record is a stale verdict. "
        f"Numbers: each record's top-level scalars and the scalars of its small top-level "
        f"dicts; texts over {MAX_TEXT} characters left out.",
        "",
        counts(rows) + ".",
        "",
        "| record | commit | date | device | fingerprint | kernels today |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.path} | {r.commit} | {r.date} | {r.device} | {r.fingerprint} | {r.status.text} |"
        for r in rows
    ]
    for row in rows:
        lines += _section(row)
    return "\n".join(lines) + "\n"


def summary_path(results_dir: Path | None = None) -> Path:
    return Path(results_dir or R.RESULTS_DIR) / SUMMARY_NAME


def summary_diff(results_dir: Path | None = None, root: Path | None = None) -> list[str]:
    """The unified diff from the committed SUMMARY.md to what the records generate now
    (empty: they agree)."""
    path = summary_path(results_dir)
    committed = path.read_text() if path.exists() else ""
    generated = summary_markdown(results_dir, root)
    return list(
        difflib.unified_diff(
            committed.splitlines(),
            generated.splitlines(),
            "committed " + SUMMARY_NAME,
            "generated from the records",
            lineterm="",
        )
    )


def write_summary(results_dir: Path | None = None, root: Path | None = None) -> Path:
    path = summary_path(results_dir)
    path.write_text(summary_markdown(results_dir, root))
    return path
