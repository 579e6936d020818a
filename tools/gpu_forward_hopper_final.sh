#!/bin/bash
# Closing GPU checks of the Gluon Hopper forward path (kernels/forward_hopper.py), for one
# device call of about 9 minutes on an H100 (each step has its own limit; logs under $OUT):
#   1. the full correctness grid with every case the Gluon kernel supports forced onto it,
#      plus bitwise determinism and offsets past 2^31 (no record: the shipped dispatch's
#      record is step 2);
#   2. the full grid through flashcore.attention with the shipped dispatch, recorded
#      (results/<gpu>/correctness.json in $OUT/results);
#   3. tests/test_forward_hopper.py (error rule, 2 and 3 consumer warpgroups, determinism);
#   4. compute-sanitizer memcheck/racecheck/synccheck with the Gluon kernel forced.
# Usage (repo root, CUDA machine): FLASHCORE_COMMIT=<hash> OUT=<dir> bash tools/gpu_forward_hopper_final.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD FLASHCORE_RESULTS_DIR=$OUT/results
mkdir -p "$OUT/results"
FLASHCORE_FORWARD_HOPPER=always timeout 240 python3 -m flashcore validate --grid full --determinism \
    --large-offsets --quiet > "$OUT/validate_gluon_forced.log" 2>&1
echo "1. full grid, Gluon forced: exit $?"; tail -4 "$OUT/validate_gluon_forced.log"
timeout 120 python3 -m flashcore validate --grid full --determinism --large-offsets --quiet --record \
    > "$OUT/validate_dispatch.log" 2>&1
echo "2. full grid, shipped dispatch (recorded): exit $?"; tail -3 "$OUT/validate_dispatch.log"
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_forward_hopper.py > "$OUT/pytest_forward_hopper.log" 2>&1
echo "3. tests/test_forward_hopper.py: $(tail -1 "$OUT/pytest_forward_hopper.log")"
timeout 150 python3 -m flashcore sanitize --workloads forward_hopper > "$OUT/sanitize_gluon.log" 2>&1
echo "4. sanitizer, Gluon forced: exit $?"; grep -E "on forward_hopper" "$OUT/sanitize_gluon.log"
