"""The tools that turn device runs into records: the Nsight Compute CSV parser, the join of
ncu_compare records from two sessions, the join of the backward record's two sessions, and
the D_v study's flashcore / FA4 summary. CPU only: synthetic inputs of the shapes the GPU
runs write, each test built so that the defect it guards against makes it fail. Also the PTX
comparison of two source trees (tools/ptx_compare.py): what it ignores and what it must not."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from ncu_compare import parse_csv_rows  # noqa: E402
from ptx_compare import strip_debug, strip_sass  # noqa: E402

from flashcore.studies import report, value_head_dim_speed  # noqa: E402

NCU_CSV = "\n".join(
    [
        "==PROF== Connected to process 1",
        '"ID","Kernel Name","gpu__time_duration.sum","launch__registers_per_thread",'
        '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"',
        '"","","ns","register/thread","ratio"',
        '"0","_bwd_preprocess","1,500","32","0.10"',
        '"1","_bwd_dkdv_kernel","3,548,000","255","2.34"',
        '"2","_bwd_dq_kernel","2,400,000","255","1.90"',
    ]
)


def test_ncu_parser_reads_every_kernel_row_with_units_skipped():
    rows = parse_csv_rows(NCU_CSV)
    assert [r["kernel"] for r in rows] == ["_bwd_preprocess", "_bwd_dkdv_kernel", "_bwd_dq_kernel"]
    assert rows[1]["duration_ns"] == 3_548_000.0  # thousands separators dropped
    assert rows[1]["registers_per_thread"] == 255.0
    assert rows[2]["stalls_per_issue"]["barrier"] == 1.90
    assert rows[0]["stalls_per_issue"]["wait"] is None  # a metric the dump lacks is None, not 0


def _ncu_record(commit, fingerprint, profiled):
    rows = []
    for phase, impl, d in [("forward", "flashcore", 128), ("forward", "fa4", 128)]:
        row = dict(phase=phase, impl=impl, D=d, causal=False)
        if impl in profiled:
            row["kernels"] = [{"kernel": f"{impl}_{commit}", "duration_ns": 1.0}]
            row["main_kernel"] = row["kernels"][0]
        else:
            row["error"] = "no ncu rows (FileNotFoundError)"
        rows.append(row)
    return {
        "topic": "ncu_compare",
        "provenance": {"commit": commit},
        "kernel_fingerprint": {"sha256": fingerprint},
        "rows": rows,
    }


def _merge(tmp_path, *records):
    paths = []
    for i, rec in enumerate(records):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(rec))
    out = tmp_path / "merged.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "merge_ncu_compare.py"), *map(str, paths), str(out)],
        capture_output=True,
        text=True,
    )
    return done, (json.loads(out.read_text()) if out.exists() else None)


def test_ncu_join_takes_each_row_from_the_session_that_profiled_it(tmp_path):
    first = _ncu_record("aaa", "same", profiled={"flashcore"})
    second = _ncu_record("bbb", "same", profiled={"fa4"})
    done, merged = _merge(tmp_path, first, second)
    assert done.returncode == 0, done.stderr
    by = {r["impl"]: r for r in merged["rows"]}
    assert by["flashcore"]["session"] == 0 and by["fa4"]["session"] == 1
    assert by["flashcore"]["kernels"][0]["kernel"] == "flashcore_aaa"
    assert by["fa4"]["kernels"][0]["kernel"] == "fa4_bbb"
    assert [s["commit"] for s in merged["sessions"]] == ["aaa", "bbb"]


def test_ncu_join_refuses_records_of_different_kernel_sources(tmp_path):
    done, merged = _merge(
        tmp_path,
        _ncu_record("aaa", "one", profiled={"flashcore"}),
        _ncu_record("bbb", "two", profiled={"fa4"}),
    )
    assert done.returncode != 0 and merged is None
    assert "different" in done.stderr


def _backward_record(commit, fingerprint, speed_rows, **extra):
    return {
        "provenance": {"commit": commit},
        "kernel_fingerprint": {"sha256": fingerprint},
        "method": "m",
        "stages_done": ["speed"],
        "determinism": [],
        "speed": speed_rows,
        **extra,
    }


def _speed_row(impl, tflops, causal=False):
    return dict(dtype="bfloat16", D=128, S=4096, causal=causal, impl=impl, tflops=tflops)


def test_backward_join_keeps_fingerprint_tuning_and_refuses_mixed_sources(tmp_path):
    grid = _backward_record(
        "c1", "fp", [], grid="full", summary={"failed": 0}, cases=[], tuning=[{"x": 1}]
    )
    speed = _backward_record("c1", "fp", [_speed_row("flashcore", 200.0), _speed_row("fa4", 400.0)])
    paths = [tmp_path / "g.json", tmp_path / "s.json"]
    for p, rec in zip(paths, (grid, speed)):
        p.write_text(json.dumps(rec))
    out = tmp_path / "b.json"
    tool = str(ROOT / "tools" / "merge_backward_records.py")
    done = subprocess.run(
        [sys.executable, tool, *map(str, paths), str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    merged = json.loads(out.read_text())
    assert merged["kernel_fingerprint"] == {"sha256": "fp"} and merged["tuning"] == [{"x": 1}]
    assert merged["speed_summary"]["bfloat16 D128"]["fa4"]["geomean"] == pytest.approx(0.5)
    speed["kernel_fingerprint"] = {"sha256": "other"}
    paths[1].write_text(json.dumps(speed))
    done = subprocess.run(
        [sys.executable, tool, *map(str, paths), str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode != 0


def test_value_head_dim_summary_is_flashcore_over_fa4_per_shape():
    def row(s, causal, impl, tflops):
        return dict(S=s, causal=causal, impl=impl, tflops=tflops)

    forward = [
        row(4096, False, "flashcore", 100.0),
        row(4096, False, "fa4", 400.0),
        row(8192, True, "flashcore", 300.0),
        row(8192, True, "fa4", 300.0),
        row(8192, True, "sdpa_flash", None),  # a peer that refused: no tflops
        row(4096, False, "flashcore_triton", 50.0),
    ]
    backward = [row(4096, False, "flashcore", 50.0), dict(S=4096, causal=False, impl="fa4")]
    out = value_head_dim_speed.summary(forward, backward)
    assert out["forward"]["flashcore_over_fa4"] == {"S4096 full": 0.25, "S8192 causal": 1.0}
    assert out["forward"]["geomean"] == pytest.approx(0.5)
    # what the Gluon path bought over the Triton kernel, where both ran
    assert out["forward"]["flashcore_over_triton"] == {"S4096 full": 2.0}
    # FA4 did not run the backward: no ratio, no geomean, rather than a made-up one
    assert out["backward"] == {"flashcore_over_fa4": {}, "geomean": None}


def test_value_head_dim_shapes_are_mla_head_dims_at_the_sweeps_token_budget():
    shapes = value_head_dim_speed.shapes()
    assert {(s["D"], s["Dv"]) for s in shapes} == {(192, 128)}
    assert all(s["B"] * s["S"] == 16384 for s in shapes)
    assert {s["causal"] for s in shapes} == {False, True}


PTX = """//
// Generated by LLVM NVPTX Back-End
.version 8.7
.target sm_90a
	.file	1 "/somewhere/forward_hopper.py"
.visible .entry kern(
{
	.loc	1 271 44
	bar.sync 	0, 128;
	mbarrier.try_wait.parity.shared.b64 complete, [%r2446], %r2447; // wait
	ret;
}
	.section	.debug_info
	{
.b8 209 // DW_AT_call_line
	}
"""


def test_ptx_compare_ignores_line_markers_and_debug_sections_only():
    # The same code from a file edited elsewhere: other line numbers, paths, DWARF bytes.
    moved = PTX.replace("271 44", "290 12").replace("/somewhere", "/elsewhere")
    moved = moved.replace(".b8 209", ".b8 199")
    assert strip_debug(moved) == strip_debug(PTX)
    # An inlined helper's scope labels (referenced by the DWARF only) are no instruction
    # either, though ptxas schedules around them: --sass compares the machine code itself...
    scoped = PTX.replace("\tbar.sync", "$L__tmp39:\n\tbar.sync")
    assert strip_debug(scoped) == strip_debug(PTX)
    # ...but a branch target is.
    assert strip_debug(PTX.replace("\tbar.sync", "$L__BB0_3:\n\tbar.sync")) != strip_debug(PTX)
    # One instruction more (the reverted trial's bar.sync changes) is a difference.
    extra = PTX.replace("\tret;", "\tbar.sync \t0, 128;\n\tret;")
    assert strip_debug(extra) != strip_debug(PTX)
    # So is an operand: a barrier count, a register.
    assert strip_debug(PTX.replace("0, 128", "0, 256")) != strip_debug(PTX)
    assert strip_debug(PTX.replace("%r2447", "%r2448")) != strip_debug(PTX)


def test_ncu_top_stalls_rank_the_largest_and_count_a_missing_metric_as_zero():
    kernel = {
        "stalls_per_issue": {"wait": None, "barrier": 2.0, "selected": 5.0, "long_scoreboard": 1.0}
    }
    # "selected" is the issuing warp, not a stall; None (a metric the dump lacks) sorts as 0
    assert report.top_stalls(kernel) == "barrier 2.00, long_scoreboard 1.00, wait 0.00"
    assert report.top_stalls(kernel, n=1) == "barrier 2.00"


def test_probe_log_names_its_script_and_hides_where_it_was_written(tmp_path, monkeypatch):
    from flashcore.results import REPO_ROOT, write_log

    out = tmp_path / "deep" / "probe.json"
    out.parent.mkdir()
    script = str(REPO_ROOT / "tools" / "some_probe.py")
    monkeypatch.setattr(sys, "argv", [script, str(out), "--d", "64"])
    write_log(out, dict(rows=[1]))
    log = json.loads(out.read_text())
    assert log["rows"] == [1] and "kernel_fingerprint" in log
    assert log["provenance"]["command"] == "tools/some_probe.py OUT.json --d 64"
    assert str(tmp_path) not in out.read_text()


SASS = """
        /*0000*/      LDC R1, c[0x0][0x28] ;        /* 0x00000a00ff017b82 */
                                                    /* 0x000fe20000000800 */
        /*0010*/      S2R R0, SR_TID.X ;  // a comment
.L_x_3:
        /*0020*/      MUFU.EX2 R4, R5 ;
"""


def test_sass_compare_drops_addresses_and_encodings_but_keeps_registers_and_labels():
    lines = strip_sass(SASS)
    assert lines == ["LDC R1, c[0x0][0x28]", "S2R R0, SR_TID.X", ".L_x_3:", "MUFU.EX2 R4, R5"]
    shifted = SASS.replace("/*0010*/", "/*0110*/").replace(
        "0x000fe20000000800", "0x000fc40000000800"
    )
    assert strip_sass(shifted) == lines
    assert strip_sass(SASS.replace("R4, R5", "R6, R5")) != lines  # another register is other code


def test_door_ab_workers_import_flashcore_from_their_own_tree(tmp_path):
    """tools/door_host_profile.py --base: the process that times tree B imports the tool
    first; flashcore must still come from B, not from the checkout the tool lives in (a
    module-level import did that once, and tree B's run measured this checkout's code)."""
    import shutil

    from decode_host_ab import run_in_tree

    shutil.copytree(ROOT / "flashcore", tmp_path / "flashcore")
    got = run_in_tree(tmp_path, "door_host_profile:flashcore_tree")
    assert Path(got).resolve() == tmp_path.resolve()
    assert Path(run_in_tree(ROOT, "door_host_profile:flashcore_tree")).resolve() == ROOT.resolve()
