"""Records say when they are stale.

``write_result`` stores the fingerprint of the kernel sources a run imported (git object ids
computed from the files' bytes) and a computed ``dirty``; ``python -m flashcore records``
compares each record with today's files (``current`` / ``stale (kernels changed: ...)``, or for
records older than fingerprints the kernel files at their commit); ``results/SUMMARY.md`` is
generated from the records and must equal what they generate now."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import flashcore.results as R
from flashcore import __main__ as cli
from flashcore.studies import records


def copy_kernels(root: Path) -> list[str]:
    """A copy of this tree's kernel sources under ``root`` (no .git there)."""
    files = R.tree_kernel_files()
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(R.REPO_ROOT / rel, root / rel)
    return files


def append(path: Path, text: str = "# an edit\n") -> None:
    path.write_bytes(path.read_bytes() + text.encode())


def committed_tree(root: Path, extra: tuple[str, ...] = ()):
    """A git repository at ``root`` holding a copy of the kernel sources (and ``extra``
    files of this repository) in one commit; returns (root, git), git(*args) -> stdout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    copy_kernels(root)
    for rel in extra:
        shutil.copyfile(R.REPO_ROOT / rel, root / rel)

    def git(*args):
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "kernels")
    return root, git


@pytest.fixture
def repo(tmp_path):
    """A git repository holding a copy of the kernel sources in one commit."""
    return committed_tree(tmp_path / "repo")


def test_write_result_fingerprints_the_imported_kernels_and_reads_back_current(
    tmp_path, monkeypatch
):
    import flashcore.kernels.forward  # noqa: F401  (what a run that launches it has imported)

    # As a run that ran no kernel in this process (on a GPU machine, earlier tests may have).
    monkeypatch.setattr(R, "ran_kernel_files", lambda root=None, modules=None: [])
    monkeypatch.setattr(R, "RESULTS_DIR", tmp_path)
    path = R.write_result("unit", {"value": 1.5}, slug="test-gpu")
    record = json.loads(path.read_text())
    fp = record["kernel_fingerprint"]
    assert fp["scope"] == "imported"
    assert {"flashcore/kernels/forward.py", "flashcore/interface.py"} <= set(fp["files"])
    for rel, blob in fp["files"].items():
        assert blob == R.blob_id((R.REPO_ROOT / rel).read_bytes())
    assert fp["sha256"] == R.fingerprint_digest(fp["files"])

    prov = record["provenance"]
    if prov["dirty"] is not None:  # computed here against the commit named, not declared
        assert isinstance(prov["dirty"], bool) and isinstance(fp["dirty_files"], list)
    else:
        assert fp["dirty_files"] is None

    status = records.record_status(record)
    assert status.kind == "current" and not status.by_commit
    # A run with uncommitted kernel edits (a shared working tree may hold some) is current
    # against today's files, and says that its kernels are not the commit it names.
    expected = f"current; {status.check}" if fp["dirty_files"] else "current"
    assert status.text == expected
    if fp["dirty_files"]:
        assert status.check.endswith(", ".join(records.short_name(p) for p in fp["dirty_files"]))
    line = records.status_line(path)
    assert line.startswith("record test-gpu/unit.json (commit ") and line.endswith(expected)
    assert records.status_line_for("unit", "test-gpu") == line


def test_a_changed_kernel_file_makes_the_record_stale_naming_it(tmp_path):
    root = tmp_path / "tree"
    files = copy_kernels(root)
    fp = R.kernel_fingerprint(files, root=root)
    assert fp["scope"] == "given" and fp["dirty_files"] is None  # a copy without .git
    record = {"provenance": {"commit": "unknown"}, "kernel_fingerprint": fp}
    assert records.record_status(record, root).text == "current"

    forward = root / "flashcore/kernels/forward.py"
    original = forward.read_bytes()
    append(forward)
    status = records.record_status(record, root)
    assert status.kind == "stale" and status.changed == ("forward.py",)
    assert status.text == "stale (kernels changed: forward.py)"

    forward.write_bytes(original)  # the bytes, not the file's time, decide
    assert records.record_status(record, root).kind == "current"
    (root / "flashcore/interface.py").unlink()
    assert records.record_status(record, root).changed == ("interface.py (removed)",)


def test_a_fingerprint_that_disagrees_with_its_files_is_not_current(tmp_path):
    root = tmp_path / "tree"
    fp = R.kernel_fingerprint(copy_kernels(root), root=root)
    fp["sha256"] = "0" * 64
    status = records.record_status({"provenance": {}, "kernel_fingerprint": fp}, root)
    assert status.kind == "stale" and "does not match" in status.text


def test_a_copy_without_git_takes_its_commit_from_the_environment(tmp_path, monkeypatch):
    root = tmp_path / "tree"
    copy_kernels(root)
    monkeypatch.setenv("FLASHCORE_COMMIT", "abc1234")
    assert R.commit_info(root) == {
        "commit": "abc1234",
        "commit_source": "FLASHCORE_COMMIT",
        "dirty": None,
    }
    monkeypatch.delenv("FLASHCORE_COMMIT")
    assert R.commit_info(root) == {"commit": "unknown", "commit_source": None, "dirty": None}


def test_commit_and_dirty_come_from_git_where_there_is_git(repo, monkeypatch):
    root, git = repo
    head = git("rev-parse", "HEAD")
    assert R.commit_info(root) == {"commit": head, "commit_source": "git", "dirty": False}
    # Declared (a GPU machine's copy may carry an older .git than its tree): the declaration
    # wins, dirty computed against it where this repository has that commit.
    monkeypatch.setenv("FLASHCORE_COMMIT", head)
    assert R.commit_info(root) == {
        "commit": head,
        "commit_source": "FLASHCORE_COMMIT",
        "dirty": False,
    }
    monkeypatch.setenv("FLASHCORE_COMMIT", "0000000")
    assert R.commit_info(root) == {
        "commit": "0000000",
        "commit_source": "FLASHCORE_COMMIT",
        "dirty": None,
    }
    monkeypatch.setenv("FLASHCORE_COMMIT", head)
    files = R.tree_kernel_files(root)
    assert R.kernel_fingerprint(files, root)["dirty_files"] == []

    decode = root / "flashcore/kernels/decode.py"
    append(decode)
    assert R.commit_info(root)["dirty"] is True  # against the declared commit
    monkeypatch.delenv("FLASHCORE_COMMIT")
    assert R.commit_info(root)["dirty"] is True  # against HEAD
    fp = R.kernel_fingerprint(files, root)
    assert fp["dirty_files"] == ["flashcore/kernels/decode.py"]
    # the ids computed without git are git's own
    assert fp["files"]["flashcore/kernels/decode.py"] == git(
        "hash-object", "flashcore/kernels/decode.py"
    )


def test_dirty_files_are_against_the_commit_the_record_names(repo, monkeypatch):
    """A GPU machine's copy of the tree may carry an older .git: with FLASHCORE_COMMIT set,
    dirty_files compares the kernels with that commit, not with the copy's HEAD, and is None
    where this repository lacks that commit."""
    root, git = repo
    files = R.tree_kernel_files(root)
    old_head = git("rev-parse", "HEAD")
    decode = root / "flashcore/kernels/decode.py"
    append(decode)
    git("commit", "-qam", "a kernel change")
    new_head = git("rev-parse", "HEAD")
    git("checkout", "-q", old_head)  # the copy's .git is older than its tree's files
    decode.write_text(git("show", f"{new_head}:flashcore/kernels/decode.py") + "\n")
    monkeypatch.setenv("FLASHCORE_COMMIT", new_head)
    assert R.kernel_fingerprint(files, root)["dirty_files"] == []
    monkeypatch.delenv("FLASHCORE_COMMIT")
    assert R.kernel_fingerprint(files, root)["dirty_files"] == ["flashcore/kernels/decode.py"]
    monkeypatch.setenv("FLASHCORE_COMMIT", "0000000")
    assert R.kernel_fingerprint(files, root)["dirty_files"] is None


def test_records_before_fingerprints_are_judged_by_their_commit(repo):
    root, git = repo
    record = {"provenance": {"commit": git("rev-parse", "--short", "HEAD") + " (first run)"}}
    status = records.record_status(record, root)
    assert status.kind == "current" and status.by_commit
    assert status.text == "current (by commit; no fingerprint)"

    append(root / "flashcore/kernels/forward.py")
    (root / "flashcore/kernels/_new.py").write_text("x = 1\n")
    status = records.record_status(record, root)
    assert status.kind == "stale" and status.changed == ("_new.py (new)", "forward.py")
    assert status.text.startswith("stale (by commit; no fingerprint; kernels changed: _new.py")

    absent = records.record_status({"provenance": {"commit": "1234567"}}, root)
    assert absent.kind == "unknown" and "not in this repository" in absent.text
    assert not absent.needs_git  # a full clone: the answer is the same everywhere
    unknown = records.record_status({"provenance": {"commit": "unknown"}}, root)
    assert unknown.text == "no fingerprint (recorded before fingerprints; commit unknown)"


def test_a_fingerprint_is_checked_against_the_commit_it_names(repo):
    root, git = repo
    head = git("rev-parse", "HEAD")
    files = R.tree_kernel_files(root)
    clean = {
        "provenance": {"commit": head},
        "kernel_fingerprint": R.kernel_fingerprint(files, root),
    }
    status = records.record_status(clean, root)
    assert status.text == "current" and status.check == f"its kernels are commit {head}'s"

    append(root / "flashcore/kernels/fp8.py", "EDITED = 1\n")  # a run with an uncommitted edit
    edited = {
        "provenance": {"commit": head},
        "kernel_fingerprint": R.kernel_fingerprint(files, root),
    }
    status = records.record_status(edited, root)
    assert status.kind == "current"
    assert status.text == f"current; its kernels differ from commit {head}'s: fp8.py"
    assert records.record_status(clean, root).changed == ("fp8.py",)


def test_multi_gpu_records_count_the_parallel_modules(tmp_path):
    """The context-parallel records add flashcore/parallel*.py to their fingerprint: a change
    to the ring (not a kernel file) makes them stale, and the commit check reads those files
    from git as it reads the kernels."""
    root, git = committed_tree(tmp_path / "tree", R.PARALLEL_FILES)
    head = git("rev-parse", "HEAD")
    fp = R.kernel_fingerprint(["flashcore/kernels/forward.py"], root, extra=R.PARALLEL_FILES)
    assert set(R.PARALLEL_FILES) <= set(fp["files"]) and fp["dirty_files"] == []
    record = {"provenance": {"commit": head}, "kernel_fingerprint": fp}
    status = records.record_status(record, root)
    assert status.text == "current" and status.check == f"its kernels are commit {head}'s"
    append(root / "flashcore/parallel.py", "EDITED = 1\n")  # code, not a comment
    status = records.record_status(record, root)
    assert status.kind == "stale" and status.changed == ("parallel.py",)
    # A record without a fingerprint is judged by its commit's kernel sources alone.
    by_commit = records.record_status({"provenance": {"commit": head}}, root)
    assert by_commit.text == "current (by commit; no fingerprint)"


def test_parallel_records_fingerprinted_without_the_parallel_modules_are_judged_by_commit(
    tmp_path,
):
    """A context-parallel record whose fingerprint predates the parallel modules (kernel files
    only) is judged by those modules at its commit: an edit to the ring after it makes it
    stale; a single-GPU record of the same fingerprint is not affected; a module added after
    its commit is not counted (it cannot have run)."""
    root, git = committed_tree(tmp_path / "tree", ("flashcore/parallel.py",))
    head = git("rev-parse", "HEAD")
    fp = R.kernel_fingerprint(["flashcore/kernels/forward.py"], root)
    assert not set(R.PARALLEL_FILES) & set(fp["files"])
    parallel = {
        "topic": "context_parallel",
        "provenance": {"commit": head},
        "kernel_fingerprint": fp,
    }
    single = dict(parallel, topic="perf")
    assert records.record_status(parallel, root).kind == "current"
    # A module that did not exist at the record's commit: not counted.
    shutil.copyfile(
        R.REPO_ROOT / "flashcore/parallel_ulysses.py", root / "flashcore/parallel_ulysses.py"
    )
    assert records.record_status(parallel, root).kind == "current"
    append(root / "flashcore/parallel.py", "EDITED = 1\n")  # code, not a comment
    status = records.record_status(parallel, root)
    assert status.kind == "stale" and status.changed == ("parallel.py",)
    assert "parallel modules by commit" in status.text
    assert records.record_status(single, root).text == "current"
    # a fingerprint that disagrees with its own list still says so
    tampered = dict(parallel, kernel_fingerprint=dict(fp, sha256="0" * 64))
    status = records.record_status(tampered, root)
    assert status.kind == "stale" and "does not match its own file list" in status.text
    assert R.is_parallel_topic("cp_train_gluon_check") and not R.is_parallel_topic("perf")


def make_results(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A results directory with one fingerprinted record of timing rows."""
    root = tmp_path / "tree"
    files = copy_kernels(root)
    results = tmp_path / "results"
    (results / "gpu-x").mkdir(parents=True)

    def row(impl, s, ms):
        return {"B": 1, "S": s, "D": 64, "impl": impl, "timing": {"median_ms": ms}}

    record = {
        "topic": "perf",
        "provenance": {
            "date": "2026-01-02T03:04:05+00:00",
            "commit": "unknown",
            "device": "GPU X",
            "torch": "2.0",
            "triton": "3.0",
            "command": "python -m flashcore bench --record",
        },
        "kernel_fingerprint": R.kernel_fingerprint(files, root),
        "method": "x" * (records.MAX_TEXT + 1),
        "summary": {"cases": 10, "failed": 0, "worst_ratio": 0.123456},
        "forward": [
            row("flashcore", 1024, 1.0),
            row("sdpa_flash", 1024, 2.0),
            row("sdpa_cudnn", 1024, 3.0),
            row("flashcore", 2048, 4.0),
            row("sdpa_cudnn", 2048, 2.0),
        ],
    }
    (results / "gpu-x" / "perf.json").write_text(json.dumps(record))
    return results, root, record


def test_summary_holds_status_and_headline_numbers(tmp_path):
    results, root, _ = make_results(tmp_path)
    text = records.summary_markdown(results, root)
    assert "1 records: 1 current, 0 stale, 0 with no status." in text
    assert "| gpu-x/perf.json | unknown | 2026-01-02 | GPU X |" in text
    assert "- kernels today: current" in text
    assert (
        "  - `summary.cases`: 10\n  - `summary.failed`: 0\n  - `summary.worst_ratio`: 0.1235"
        in text
    )
    assert "`method`" not in text  # a long text is not a headline
    # S1024: fastest peer 2.0 ms / 1.0 ms = 2; S2048: 2.0 / 4.0 = 0.5; geomean 1
    assert "| forward | flashcore | 2 | 1.00 | 0.50 | 2.00 | 1 of 2 |" in text
    # nothing of the machine: the same records elsewhere give the same text
    moved = tmp_path / "elsewhere" / "results"
    shutil.copytree(results, moved)
    assert records.summary_markdown(moved, root) == text


def test_summary_check_fails_on_an_edit_a_changed_record_or_changed_kernels(tmp_path):
    results, root, record = make_results(tmp_path)
    path = records.write_summary(results, root)
    assert records.summary_diff(results, root) == []

    text = path.read_text()
    path.write_text(text.replace("`summary.failed`: 0", "`summary.failed`: 1"))
    diff = records.summary_diff(results, root)
    assert "-  - `summary.failed`: 1" in diff and "+  - `summary.failed`: 0" in diff

    records.write_summary(results, root)
    record["summary"]["failed"] = 2
    (results / "gpu-x" / "perf.json").write_text(json.dumps(record))
    assert "+  - `summary.failed`: 2" in records.summary_diff(results, root)

    records.write_summary(results, root)
    append(root / "flashcore/kernels/forward.py")
    diff = records.summary_diff(results, root)
    assert "+- kernels today: stale (kernels changed: forward.py)" in diff


def test_records_command_checks_the_summary(tmp_path, monkeypatch, capsys):
    results, _, _ = make_results(tmp_path)
    monkeypatch.setattr(R, "RESULTS_DIR", results)
    assert cli.main(["records", "--check"]) == 1  # no summary yet
    assert cli.main(["records", "--summary"]) == 0
    assert (results / "SUMMARY.md").exists()
    assert cli.main(["records", "--check"]) == 0
    out = capsys.readouterr().out
    assert "gpu-x/perf.json" in out and "1 records: " in out


def test_committed_summary_is_what_the_records_generate():
    rows = records.listing()
    partial = records.git_dependent(rows)
    if partial:
        pytest.skip(
            f"{len(partial)} records need the repository's history for their status (no .git "
            "or a shallow clone here)"
        )
    diff = records.summary_diff()
    assert not diff, (
        f"results/SUMMARY.md differs from what the records generate; run "
        f"`{records.SUMMARY_COMMAND}` and commit it:\n" + "\n".join(diff[:60])
    )


def test_a_change_of_docstrings_or_comments_only_keeps_the_record_current(repo):
    """A record stays current across an edit that leaves the kernel files' code (their syntax
    trees without docstrings) as it was, and says which files changed in text; a code edit
    makes it stale. The record's version of the file is read from git by its object id."""
    root, git = repo
    files = R.tree_kernel_files(root)
    record = {
        "provenance": {"commit": git("rev-parse", "HEAD")},
        "kernel_fingerprint": R.kernel_fingerprint(files, root),
    }
    fp8 = root / "flashcore/kernels/fp8.py"
    source = fp8.read_text()
    assert source.startswith('"""')
    fp8.write_text('"""A rewritten module docstring."""' + source[source.index('"""', 3) + 3 :])
    append(fp8, "# a comment\n")
    status = records.record_status(record, root)
    assert status.kind == "current" and status.changed == ()
    assert status.text.startswith("current (text only changed since: fp8.py)")
    append(fp8, "EDITED = 1\n")  # code
    status = records.record_status(record, root)
    assert status.kind == "stale" and status.changed == ("fp8.py",)


def test_a_text_only_change_counts_as_a_change_without_git(tmp_path):
    """Without git the record's version of a file cannot be read: any byte change is stale."""
    root = tmp_path / "tree"
    files = copy_kernels(root)
    record = {"kernel_fingerprint": R.kernel_fingerprint(files, root)}
    append(root / "flashcore/kernels/fp8.py", "# a comment\n")
    assert records.record_status(record, root).changed == ("fp8.py",)


def test_code_of_ignores_docstrings_and_comments_but_not_strings_in_code():
    base = 'def f(x):\n    """Doc."""\n    return x + 1  # one\n'
    assert records.code_of(base) == records.code_of("def f(x):\n    return x + 1\n")
    assert records.code_of(base) != records.code_of("def f(x):\n    return x + 2\n")
    msg = 'def f(x):\n    assert x, "message a"\n'
    assert records.code_of(msg) != records.code_of(msg.replace("message a", "message b"))
    assert records.code_of("def (") is None


def test_import_closure_follows_the_kernel_sources_imports():
    forward = R.kernel_import_closure(["flashcore/kernels/forward.py"])
    assert {"flashcore/kernels/_mask.py", "flashcore/kernels/_softmax.py"} <= set(forward)
    assert "flashcore/kernels/backward.py" not in forward
    # the Gluon backward reuses the Triton backward's preprocess kernel
    gluon_bwd = R.kernel_import_closure(["flashcore/kernels/backward_hopper.py"])
    assert "flashcore/kernels/backward.py" in gluon_bwd


class _FakeJit:
    """A stand-in for a @jit kernel: Triton's per-device cache of (kernel cache, ...)."""

    def __init__(self, compiled: bool):
        self.device_caches = {0: ({"key": object()} if compiled else {}, {}, None, None, None)}
        self.kernel = None  # as a JITFunction has (see the test above)


def test_a_real_jit_kernel_and_its_cached_launcher_count_once_compiled():
    """The compile-cache check on Triton's own classes, not only the stand-in: a
    ``JITFunction`` carries a ``.kernel`` attribute of its own (None), which must not be
    taken for a ``CachedKernel``'s wrapped kernel (it was, and on the GPU the "ran" scope
    then saw nothing)."""
    from triton.runtime.jit import JITFunction  # what @triton.jit makes off the interpreter

    from flashcore.kernels._launch import CachedKernel

    def body(X):
        pass

    kernel = JITFunction(body)
    assert hasattr(kernel, "kernel") and kernel.kernel is None
    kernel.device_caches = {0: ({}, {}, None, None, None)}  # what a first launch creates
    assert not R._compiled_here(kernel) and not R._compiled_here(CachedKernel(kernel))
    kernel.device_caches[0][0]["key"] = object()  # a compiled kernel in the cache
    assert R._compiled_here(kernel) and R._compiled_here(CachedKernel(kernel))


def test_a_record_names_the_sources_behind_the_kernels_it_ran(monkeypatch):
    import torch

    import flashcore.interface  # noqa: F401  (imports every kernel module)
    from flashcore.kernels import decode, forward

    # Look at two kernel modules only (on a GPU machine this process may have run others).
    here = {"flashcore.kernels.decode": decode, "flashcore.kernels.forward": forward}
    monkeypatch.setattr(decode, "_fake_kernel", _FakeJit(compiled=False), raising=False)
    if not torch.cuda.is_available():  # nothing compiled for a GPU: no "ran" scope
        assert R.ran_kernel_files(modules=here) == []
        assert R.kernel_fingerprint()["scope"] == "imported"
    # A decode kernel ran: decode.py, what it imports, the routing and dispatch files; not
    # the forward's or the backward's Triton sources, which no kernel of this run came from.
    monkeypatch.setattr(decode, "_fake_kernel", _FakeJit(compiled=True), raising=False)
    files = R.ran_kernel_files(modules=here)
    assert {"flashcore/kernels/decode.py", "flashcore/kernels/_softmax.py"} <= set(files)
    assert set(R.ROUTING_FILES) | set(R.DISPATCH_FILES) <= set(files)
    assert not {"flashcore/kernels/forward.py", "flashcore/kernels/backward.py"} & set(files)
    # A forward kernel ran: varlen.py, which launches it for packed batches, counts too.
    monkeypatch.setattr(decode, "_fake_kernel", _FakeJit(compiled=False), raising=False)
    monkeypatch.setattr(forward, "_fake_kernel", _FakeJit(compiled=True), raising=False)
    ran_forward = R.ran_kernel_files(modules=here)
    assert {"flashcore/kernels/forward.py", "flashcore/kernels/varlen.py"} <= set(ran_forward)
    assert not {"flashcore/kernels/decode.py", "flashcore/kernels/backward.py"} & set(ran_forward)
    monkeypatch.setattr(forward, "_fake_kernel", _FakeJit(compiled=False), raising=False)
    monkeypatch.setattr(decode, "_fake_kernel", _FakeJit(compiled=True), raising=False)
    if not torch.cuda.is_available():
        fp = R.kernel_fingerprint()
        assert fp["scope"] == "ran" and sorted(fp["files"]) == files


# A log named in the code, the notebooks or the README: `logs/<file>` (globs and placeholders
# such as `logs/*_0099be1.log` or `logs/sanitize_<commit>.log` name no one file).
_CITED_LOG = re.compile(r"logs/([A-Za-z0-9_.-]*[A-Za-z0-9])(?![A-Za-z0-9_*<{-]|\.[A-Za-z0-9])")


def cited_logs(text: str) -> set[str]:
    """The log file names ``text`` cites (with an extension; not globs or placeholders)."""
    return {m.group(1) for m in _CITED_LOG.finditer(text) if "." in m.group(1)}


def test_cited_logs_reads_names_not_globs():
    text = (
        "see `logs/perf_0099be1.log`, logs/*_0099be1.log, logs/sanitize_<commit>.log, logs/x.json."
    )
    assert cited_logs(text) == {"perf_0099be1.log", "x.json"}


def test_every_log_the_project_cites_is_committed():
    roots = [R.REPO_ROOT / p for p in ("flashcore", "notebooks", "tools")]
    texts = [R.REPO_ROOT / "README.md", *(f for root in roots for f in root.rglob("*.py"))]
    committed = {p.name for p in R.REPO_ROOT.glob("results/*/logs/*")}
    cited = {(path, name) for path in texts for name in cited_logs(path.read_text())}
    assert len(cited) > 30  # the pattern still finds the citations
    missing = sorted(
        f"{p.relative_to(R.REPO_ROOT)}: logs/{n}" for p, n in cited if n not in committed
    )
    assert not missing, missing


@pytest.mark.gpu
def test_gpu_the_ran_scope_sees_the_kernels_a_call_ran():
    """On the GPU, with Triton's real compile caches: a decode call (a Triton kernel of
    decode.py through its own launcher) shows up in ``ran_kernel_files``."""
    import torch

    from flashcore import attention_with_kvcache
    from flashcore.kernels import decode

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k_new, v_new = (
        torch.randn(1, 8, 1, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    k_cache, v_cache = (
        torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(2)
    )
    lens = torch.full((1,), 100, device="cuda", dtype=torch.int32)
    attention_with_kvcache(q, k_cache, v_cache, lens, k_new, v_new)
    torch.cuda.synchronize()
    here = {"flashcore.kernels.decode": decode}
    assert "flashcore/kernels/decode.py" in R.ran_kernel_files(modules=here)
    assert R.kernel_fingerprint()["scope"] == "ran"
