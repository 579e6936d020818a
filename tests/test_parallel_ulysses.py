"""Context parallelism by head all-to-all (flashcore.parallel_ulysses): forward and gradients
on 2 gloo processes under the Triton interpreter, under the error rule vs float64 on the whole
sequence; its planted bug (rows put back in rank order under zigzag) must fail; calls whose
heads do not divide across the ranks are refused before any exchange."""

import pytest
import torch

from flashcore import parallel_ulysses as U
from flashcore.studies import context_parallel as CP
from flashcore.studies.cp_planted import PLANTED_BUGS


@pytest.fixture(scope="module")
def two_rank_rows():
    from flashcore._checks import interpreter_blocker

    blocker = interpreter_blocker()
    if blocker:
        pytest.skip(f"the 2-process CPU check runs under Triton's interpreter: {blocker}")
    return {r["name"]: r for r in CP.spawn_check(CP.ulysses_cpu_grid(), world_size=2)}


@pytest.mark.parametrize(
    "case", [c for c in CP.ulysses_cpu_grid() if not c.planted_bug], ids=lambda c: c.name
)
def test_ulysses_two_ranks_passes_the_error_rule(two_rank_rows, case):
    row = two_rank_rows[case.name]
    assert "error" not in row, row["error"]
    assert row["world_size"] == 2 and row["rows_checked"] == case.seqlen
    assert row["nan_mismatch"] == 0
    assert row["output_passed"], (
        f"{case.name}: max err {row['max_abs_err']:.3e} > bound {row['bound']:.3e}"
    )
    if case.grad:
        assert row["grad_passed"], f"{case.name}: gradient ratios {row['grad_ratios']}"


def test_ulysses_planted_bug_fails_the_error_rule(two_rank_rows):
    bugs = [c for c in CP.ulysses_cpu_grid() if c.planted_bug]
    ulysses_bugs = {name for name, (module, _, _) in PLANTED_BUGS.items() if module is U}
    assert {c.planted_bug for c in bugs} == ulysses_bugs
    for case in bugs:
        row = two_rank_rows[case.name]
        assert "error" not in row, row["error"]
        assert not row["passed"] and row["ratio"] > 2, f"{case.name}: ratio {row['ratio']:.3f}"


def test_ulysses_refuses_heads_that_do_not_divide_and_a_missing_group():
    q = torch.randn(1, 3, 8, 16)
    k = torch.randn(1, 1, 8, 16)
    with pytest.raises(RuntimeError, match="process group"):
        U.ulysses_attention(q, k, k, seqlen=8)
    with pytest.raises(ValueError, match="expected Hq \\(3\\) to be divisible"):
        U._check_divides("Hq", 3, 2)
    with pytest.raises(ValueError, match="window"):
        U.ulysses_attention(q, k, k, seqlen=8, window=4)  # a window needs causal
