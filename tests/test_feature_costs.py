"""The feature-cost study's pairing (flashcore/studies/feature_costs.py), with the GPU timer
replaced by a scripted one: with/without alternate each round, the ratio is the medians', and
every round's pair is kept."""

from flashcore.studies import feature_costs


def test_pairs_alternate_and_every_round_is_kept(monkeypatch):
    calls = []
    times = iter([2.0, 1.0, 1.0, 2.2, 2.1, 1.0] * 2)  # forward, then forward + backward

    def scripted(fn, rounds):
        calls.append(fn)
        return next(times)

    monkeypatch.setattr(feature_costs, "_time", scripted)
    fns = {"with": {"forward": "w", "forward_backward": "W"},
           "without": {"forward": "o", "forward_backward": "O"}}  # fmt: skip
    row = feature_costs._pair_rows(
        "sinks", dict(D=64, S=4096), fns["with"], fns["without"], ("gluon", "gluon"), 3
    )
    assert calls[:6] == ["w", "o", "o", "w", "w", "o"]  # the order flips every round
    assert row["forward_ratio_rounds"] == [2.0, 2.2, 2.1]
    assert row["forward_ms_with"] == 2.1 and row["forward_ms_without"] == 1.0
    assert row["forward_ratio"] == 2.1
    assert len(row["forward_backward_ratio_rounds"]) == 3
