"""The prior reports' claims, answered in one table from the records.

One row per claim of reports 000-004: the claim, our measurement (numbers read from the
record that holds them), the notebook section that shows it, the record's status (whether
today's kernels still match it, from ``studies.records``) and a verdict with its reason:

- **holds**: the measurement agrees with the claim as stated;
- **refuted**: the measurement contradicts it;
- **reframed**: the number can be reproduced, but it does not mean what the report said
  (a throughput quoted as a latency, an error blamed on the wrong cause);
- **not testable**: nothing in this project can measure it.

Where a verdict depends on a number, it is computed from the record (so a different record
can give a different verdict); the reasons name what decides it. ``claims_table(read=...)``
takes the record reader, so a test can hand it a modified record.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import results as R
from . import report
from .fp8_study import summary_lookup
from .long_context import PRIOR_REPORT_US, loglog_slope
from .records import record_status

RECORDED_GPU = "nvidia-h100-80gb-hbm3"
FP8_RECIPES = ("fp8_naive", "fp8_per_tensor", "fp8_per_block", "fp8_per_block_hadamard")
COLUMNS = ["report", "claim", "measurement", "section", "record", "verdict", "why"]


def _reader(slug: str) -> Callable[[str], dict]:
    return lambda topic: R.read_result(topic, slug)


TOPICS = ("correctness", "perf", "fp8", "long_context", "timing_leak")  # the records it reads


def _status(record: dict, topic: str, status: Callable[[dict], str] | None) -> str:
    kind = status(record) if status else record_status(record).kind
    return f"{topic}.json ({kind})"


def _row(report_id, claim, measurement, section, record, verdict, why):
    return dict(
        report=report_id,
        claim=claim,
        measurement=measurement,
        section=section,
        record=record,
        verdict=verdict,
        why=why,
    )


def claims_table(
    read: Callable[[str], dict] | None = None, status: Callable[[dict], str] | None = None
) -> list[dict]:
    """The claims of reports 000-004 against the records (``read(topic) -> record``, default
    the committed H100 records; ``status(record) -> kind``, default ``record_status``)."""
    read = read or _reader(RECORDED_GPU)
    rows = []

    # --- 000: a test loosened until it passes; "per head" at S=512 B=16 H=96 D=64
    grid = read("correctness")
    cases = grid["cases"]
    fails = sum(not c["passed"] for c in cases)
    worst = max(c["ratio"] for c in cases)
    rows.append(
        _row(
            "000",
            'multi-head kernel "correct" after the test moved from max_diff < 2e-3 to '
            "allclose(rtol=1e-3, atol=2e-3)",
            f"{len(cases)}-case GPU grid under the error rule against float64: {fails} fail, "
            f"worst ratio {worst:.2f}",
            "02 §1 (the rule vs allclose), §3",
            _status(grid, "correctness", status),
            "reframed" if fails == 0 else "refuted",
            "a tolerance loosened until the test passes proves nothing; correctness is shown by "
            "a rule derived from the dtype and size"
            + ("" if fails == 0 else f", and {fails} cases fail it"),
        )
    )
    perf = read("perf")
    fc = {(r["B"], r["H"], r["S"]): r for r in report.prior_table(perf) if r["impl"] == "flashcore"}
    h96 = fc.get((16, 96, 512))
    if h96:
        holds = h96["per_head_us"] <= 0.49
        rows.append(
            _row(
                "000",
                "0.27-0.49 µs per head at S=512, B=16 (H=96, D=64)",
                f"per head (graph time / B·H) {h96['per_head_us']:.2f} µs; one call "
                f"{h96['graph_us']:.0f} µs graph, {h96['eager_us']:.0f} µs eager",
                "03 (the prior reports' regime)",
                _status(perf, "perf", status),
                "reframed" if holds else "refuted",
                ("reached" if holds else "not reached")
                + " as a throughput; no head finishes sooner than the launch it is part of",
            )
        )

    # --- 001: fp8 "blocked" (29% error without scales); long context "blocked"
    fp8 = read("fp8")
    summary = fp8["error_summary"]
    naive = [
        summary_lookup(summary, "normal", c, s, "fp8_naive")
        for c in (False, True)
        for s in (1024, 4096)
    ]
    worst_naive = max(r["max_err"] for r in naive)
    spread = max(
        max(g) / min(g)
        for g in (
            [summary_lookup(summary, "normal", c, s, i)["rmse_median"] for i in FP8_RECIPES]
            for c in (False, True)
            for s in (1024, 4096)
        )
    )
    rows.append(
        _row(
            "001",
            'fp8 "blocked": 0.294 (29%) max error without scaling, "needs 3-6 months"',
            f"no scales, N(0,1): worst max error {worst_naive:.3f} (causal); the four recipes' "
            f"RMSE within {100 * (spread - 1):.1f}% of each other",
            "04 §5",
            _status(fp8, "fp8", status),
            "reframed" if spread < 1.05 else "holds",
            "an error of that order, but from e4m3's 3-bit mantissa, not the missing scales "
            "(scaling does not change the RMSE on N(0,1)); the fp8 forward with scales exists"
            if spread < 1.05
            else "scaling changes the RMSE by more than 5%: the missing scales matter",
        )
    )
    long = read("long_context")
    sweep = long["sweep"]
    t = {
        r["S"]: r["timing"]["median_ms"]
        for r in sweep
        if r["impl"] == "flashcore" and not r["causal"] and "timing" in r
    }
    longest = max(r["S"] for r in sweep if r["impl"] == "flashcore" and "timing" in r)
    slope = loglog_slope(sweep, "flashcore", False)
    prior_growth = PRIOR_REPORT_US[16384] / PRIOR_REPORT_US[4096]
    rows.append(
        _row(
            "001",
            'long context "blocked": S=4K 337 µs, S=16K 11.7 ms (34.8x for 4x the tokens), '
            "S=32K fails to compile",
            f"S=16K {t[16384]:.2f} ms; 4K -> 16K {t[16384] / t[4096]:.1f}x (prior "
            f"{prior_growth:.1f}x); runs to S={longest // 1024}K, slope {slope:.2f} from 8K",
            "05 §1, §3",
            _status(long, "long_context", status),
            "refuted" if longest >= 32768 and abs(slope - 2) < 0.1 else "holds",
            "every length to the longest measured runs, and time grows as the FLOPs (slope 2)"
            if longest >= 32768 and abs(slope - 2) < 0.1
            else "the sweep does not reach S=32K at quadratic cost",
        )
    )

    # --- 002: sub-5 µs per sequence; within 4-22% of SDPA; constant time
    # The report's nine configurations: S 128/256/512 x B 8/16/32 (H=8 in our runs).
    configs = [
        r
        for r in report.prior_table(perf)
        if r["H"] == 8 and r["B"] in (8, 16, 32) and r["S"] in (128, 256, 512)
    ]
    per_seq = [r["per_seq_us"] for r in configs if r["impl"] == "flashcore"]
    everyone = max(r["per_seq_us"] for r in configs) < 5
    rows.append(
        _row(
            "002",
            'sub-5 µs "per sequence" at S <= 512, B >= 8',
            f"per sequence (graph time / B) {min(per_seq):.2f}-{max(per_seq):.2f} µs over "
            f"the report's {len(per_seq)} configurations (S 128-512, B 8-32)",
            "03 (the prior reports' regime)",
            _status(perf, "perf", status),
            "reframed" if max(per_seq) < 5 else "refuted",
            (
                "a throughput (graph time / B), "
                + ("reached by every backend measured" if everyone else "not by every backend")
                + "; not a latency: no sequence finishes sooner than its launch"
            )
            if max(per_seq) < 5
            else "above 5 µs at some configuration",
        )
    )
    verdicts = report.prior_verdicts(perf)
    graph = [v["graph_ratio"] for v in verdicts]
    eager = [v["eager_ratio"] for v in verdicts]
    rows.append(
        _row(
            "002",
            '"within 4-22% of SDPA"',
            f"fastest SDPA backend's time / flashcore's: graph {min(graph):.2f}-{max(graph):.2f}, "
            f"eager {min(eager):.2f}-{max(eager):.2f} ({len(verdicts)} shapes)",
            "03 (the prior reports' regime)",
            _status(perf, "perf", status),
            "reframed",
            "which side of SDPA flashcore lands on depends on the shape and on graph vs eager; "
            "one percentage range does not describe it",
        )
    )
    leak = read("timing_leak")
    forward = [r for r in report.leak_table(leak) if r["kernel"].startswith("forward")]
    t_max = max(r["max_abs_t"] for r in forward)
    rows.append(
        _row(
            "002",
            '"constant-time, no timing side-channels", asserted without inspection',
            f"dudect on the forward kernels: max |t| {t_max:.0f} (threshold "
            f"{leak['threshold']}); SASS: the Gluon kernels' dispatch branches not proven public",
            "06",
            _status(leak, "timing_leak", status),
            "refuted" if t_max > leak["threshold"] else "holds",
            "time depends on the values (mostly the chip's power limit, which a cuBLAS matmul "
            "shows too)"
            if t_max > leak["threshold"]
            else "no value dependence measured above dudect's threshold",
        )
    )

    # --- 003: KV cache "minor precision issues"; S < 64 "47% error"
    cache = [c for c in cases if c["causal"] and c["alignment"] == "bottom_right"]
    cache_fail = sum(not c["passed"] for c in cache)
    rows.append(
        _row(
            "003",
            'KV cache: "minor precision issues" (errors 0.007-1.05), "production-ready"',
            f"{len(cache)} cache-shaped cases (bottom-right causal) in the GPU grid: "
            f"{cache_fail} fail, largest error {max(c['max_abs_err'] for c in cache):.1e}; "
            "whole KV-cache sessions checked live",
            "02 §4 and KV-cache attention",
            _status(grid, "correctness", status),
            "refuted" if cache_fail == 0 else "holds",
            "errors up to 1.05 are bugs, not precision: a correct cache path passes the rule"
            if cache_fail == 0
            else "cache-shaped cases fail the rule",
        )
    )
    short = [c for c in cases if min(c["seqlen_q"], c["seqlen_k"]) < 64]
    short_fail = sum(not c["passed"] for c in short)
    short_err = max(c["max_abs_err"] for c in short)
    rows.append(
        _row(
            "003",
            'S < 64: "47% error"',
            f"{len(short)} cases with S < 64 in the GPU grid: {short_fail} fail, largest error "
            f"{short_err:.1e}",
            "02 §3, §4",
            _status(grid, "correctness", status),
            "refuted" if short_fail == 0 else "holds",
            "short sequences pass the rule; the report's 0.468 (S=32) is a bug's size, not "
            "attention's at short S"
            if short_fail == 0
            else "short sequences fail the rule",
        )
    )

    # --- 004: a CUDA C++ kernel, not in this project
    rows.append(
        _row(
            "004",
            "CUDA C++ kernel (PyBind11), 8.3x slower than SDPA at S=512 on an L4, blamed on "
            "not using tensor cores",
            "not measured: the kernel is not in this project, and its numbers are from an L4",
            "-",
            "-",
            "not testable",
            "nothing here runs that kernel or that GPU, so neither the 8.3x nor its cause can be "
            "checked; what can be said is that the claim is the kind that tensor cores would "
            "decide (every forward kernel flashcore ships issues tensor-core MMAs: 06), and that "
            "flashcore's speed says nothing about that kernel's",
        )
    )
    return rows


def markdown(rows: list[dict]) -> str:
    """The table as GitHub markdown (pipes inside cells escaped)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in rows:
        cells = [str(r[c]).replace("|", "\\|") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def text(rows: list[dict]) -> str:
    """The table as plain text for a notebook: one block per claim."""
    out = []
    for r in rows:
        out.append(f"{r['report']} · {r['claim']}")
        out.append(f"    measured: {r['measurement']}")
        out.append(f"    shown in: {r['section']}; record: {r['record']}")
        out.append(f"    verdict:  {r['verdict']}: {r['why']}")
    return "\n".join(out)
