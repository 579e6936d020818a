#!/usr/bin/env bash
# The Triton backward's split q/k head dim for MLA (192 = 128 + 64, v 128) on a Hopper GPU,
# one device call (about 440 s): the D_v GPU tests (correctness first), then the backward
# A/B against the padded 256-wide tiles (the B tree: `git archive <base> flashcore | tar -x
# -C .ab/other`, carried), deterministic and atomic dQ, 3 alternating rounds, then the D_v
# speed study without recording (--quick: S 4K).
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> BASE=<base commit> bash tools/gpu_mla_split.sh <outdir>
set -u
out=$1
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results" PYTHONPATH=$PWD PYTHONUNBUFFERED=1
. tools/stage.sh
bash tools/gpu_test_shards.sh "$out/tests" 170 "dv:8:-m gpu tests/test_value_head_dim.py"
TAIL=14 stage ab 190 python3 tools/ab_timing.py mla_backward_split_ab --other .ab/other \
  --other-commit "${BASE:-unknown}" --suite mla_backward --rounds 3
TAIL=20 stage dv_speed 80 python3 -m flashcore.studies.value_head_dim_speed --quick
tar -czf "$out/all.tar.gz" -C "$out" results tests ab.log dv_speed.log
