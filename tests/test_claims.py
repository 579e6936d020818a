"""The prior reports' claims table: every claim of reports 000-004 answered from the records,
and verdicts that follow the records (a record that says otherwise flips them)."""

import copy

from flashcore import results as R
from flashcore.studies import claims

SLUG = claims.RECORDED_GPU
VERDICTS = {"holds", "refuted", "reframed", "not testable"}


def reader(overrides=None):
    cache = {}

    def read(topic):
        if topic not in cache:
            cache[topic] = R.read_result(topic, SLUG)
            if overrides and topic in overrides:
                cache[topic] = overrides[topic](copy.deepcopy(cache[topic]))
        return cache[topic]

    return read


def stale(_record):
    return "stale"


def by_claim(rows, text):
    (row,) = [r for r in rows if text in r["claim"]]
    return row


def test_every_report_answered_with_record_and_status():
    rows = claims.claims_table()  # the committed records, statuses from today's tree
    assert {r["report"] for r in rows} == {"000", "001", "002", "003", "004"}
    assert all(r["verdict"] in VERDICTS and r["why"] and r["measurement"] for r in rows)
    for r in rows:
        if r["report"] == "004":
            assert r["verdict"] == "not testable" and r["record"] == "-"
        else:
            topic, kind = r["record"].split(".json (")
            assert topic in claims.TOPICS and kind.rstrip(")") in ("current", "stale", "unknown")
    md = claims.markdown(rows).splitlines()
    assert len(md) == len(rows) + 2 and all(line.count(" | ") == 6 for line in md)
    assert claims.text(rows).count("    verdict:  ") == len(rows)


def test_verdicts_follow_the_records():
    rows = claims.claims_table(reader(), stale)
    assert by_claim(rows, "47% error")["verdict"] == "refuted"
    assert by_claim(rows, "constant-time")["verdict"] == "refuted"
    assert by_claim(rows, "long context")["verdict"] == "refuted"

    def fail_short_case(rec):
        short = next(c for c in rec["cases"] if min(c["seqlen_q"], c["seqlen_k"]) < 64)
        short["passed"] = False
        return rec

    def quiet_clock(rec):
        for row in rec["rows"]:
            row["max_abs_t"] = 1.0
        return rec

    def slow_growth(rec):
        for row in rec["sweep"]:
            if row["impl"] == "flashcore" and "timing" in row and row["S"] >= 32768:
                row["timing"]["median_ms"] *= row["S"] / 16384  # cubic from 32K on
        return rec

    rows = claims.claims_table(
        reader(
            {
                "correctness": fail_short_case,
                "timing_leak": quiet_clock,
                "long_context": slow_growth,
            }
        ),
        stale,
    )
    assert by_claim(rows, "47% error")["verdict"] == "holds"
    assert by_claim(rows, "allclose")["verdict"] == "refuted"
    assert by_claim(rows, "constant-time")["verdict"] == "holds"
    assert by_claim(rows, "long context")["verdict"] == "holds"
    assert all(r["record"].endswith("(stale)") for r in rows if r["report"] != "004")


def test_readme_table_is_the_generated_one():
    from pathlib import Path

    text = (Path(R.REPO_ROOT) / "README.md").read_text()
    start = text.index("<!-- claims table: generated -->\n") + len(
        "<!-- claims table: generated -->\n"
    )
    end = text.index("\n<!-- end of claims table -->")
    assert text[start:end] == claims.markdown(claims.claims_table()), (
        "README's claims table differs from the records: regenerate it with "
        "claims.markdown(claims.claims_table())"
    )
