"""The context-parallel training step (flashcore/studies/cp_train.py): a transformer
block with the sequence split over two local gloo ranks, against the float64 step on one
process, and the report rows notebook 08 prints from its records."""

import subprocess
import sys

import pytest

from flashcore.studies import cp_report as R
from flashcore.studies import cp_train as T

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="local gloo ranks")


@pytest.fixture(scope="module")
def two_rank_rows():
    return T.spawn_training_check(67, world_size=2)


@pytest.mark.parametrize("strategy", ["ring", "ulysses"])
def test_block_training_step_split_over_two_ranks_passes_the_error_rule(two_rank_rows, strategy):
    (row,) = [r for r in two_rank_rows if r["strategy"] == strategy]
    names = {"loss", "y", "dx"} | {f"d{n}" for n in T.PARAM_NAMES}
    assert set(row["ratios"]) == names  # every quantity was checked
    assert row["passed"], row
    assert row["loss"] == pytest.approx(row["loss_float64"], rel=1e-4)


def test_block_training_check_catches_the_planted_ring_bug():
    (row,) = T.spawn_training_check(67, world_size=2, planted_bug="dkv_not_accumulated")
    assert not row["passed"]
    assert row["ratio"] > 1.0


def test_summarize_checks_counts_planted_rows_apart():
    rows = [
        {"planted_bug": None, "passed": True, "ratio": 0.4},
        {"planted_bug": None, "passed": False, "ratio": 3.0},
        {"planted_bug": "x", "passed": False, "ratio": 70.0},
        {"planted_bug": "y", "passed": True, "ratio": 0.2},
    ]
    assert T.summarize_checks(rows) == {
        "cases": 2,
        "failed": 1,
        "worst_ratio": 3.0,
        "planted_bugs": 2,
        "planted_bugs_caught": 1,
    }


def test_rope_tables_of_a_shard_are_the_rows_of_the_whole_table():
    import torch

    whole = T.rope_tables(torch.arange(50), 16, torch.float32)
    picks = torch.tensor([3, 4, 40, 41])
    part = T.rope_tables(picks, 16, torch.float32)
    for w, p in zip(whole, part):
        assert torch.equal(w[picks], p)


def test_training_rows_give_efficiency_to_flashcore_only_and_the_ring_over_cudnn():
    rows = [
        {"S": 8, "impl": "flashcore_ring", "time_ms": 2.0, "tokens_per_s": 4.0, "peak_gib": 1},
        {"S": 8, "impl": "torch_cp_cudnn", "time_ms": 1.0, "tokens_per_s": 8.0, "peak_gib": 1},
    ]
    rows[0]["scaling_efficiency"] = 0.9
    rows[1]["scaling_efficiency"] = 1.8  # against flashcore's one GPU: not shown
    out = {r["impl"]: r for r in R.training_rows({"rows": rows})}
    assert out["flashcore_ring"]["eff"] == "0.900"
    assert out["torch_cp_cudnn"]["eff"] == ""
    assert out["flashcore_ring"]["ring / torch_cp_cudnn"] == "0.500"


def test_fwd_bwd_rows_ratio_is_pytorch_time_over_the_ring():
    rows = [
        {"impl": "flashcore_cp_fwd_bwd", "S": 4, "causal": True, "time_ms": 2.0},
        {"impl": "torch_cp_cudnn_fwd_bwd", "S": 4, "causal": True, "time_ms": 1.0},
    ]
    (row,) = R.fwd_bwd_rows({"rows": rows})
    assert row["x torch_cudnn"] == "0.500"
    assert row["x torch_flash"] == "-"


def test_cp_bench_refuses_an_unknown_implementation_before_starting():
    proc = subprocess.run(
        [sys.executable, "-m", "flashcore", "cp", "bench", "--impls", "no_such_impl"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "unknown --impls" in proc.stderr
