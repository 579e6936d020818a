"""Known-failing launch configs are recorded as failed compiles without being compiled."""

from flashcore.studies import bench
from flashcore.studies.fp8_study import FP8_TUNING_CONFIGS


def test_warp_specialized_four_warp_configs_are_skipped_and_the_rest_are_not():
    for configs in (bench.tuning_configs(), FP8_TUNING_CONFIGS):
        skipped = [c for c in configs if bench.known_compile_failure(c)]
        assert skipped and all(c.get("WARP_SPECIALIZE") and c["num_warps"] == 4 for c in skipped)
        assert all(bench.known_compile_failure(c) is None for c in configs if c not in skipped)
    assert "failed compile" in bench.known_compile_failure(
        dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3, WARP_SPECIALIZE=True)
    )
