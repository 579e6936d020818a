#!/bin/bash
# Closing GPU checks of the Gluon Hopper forward path (kernels/forward_hopper.py), in two
# device calls (each step has its own time limit; logs under $OUT):
#   part A (about 8 minutes on an H100):
#     1. the full correctness grid with every case the Gluon kernel supports forced onto it,
#        plus bitwise determinism and offsets past 2^31 (no record);
#     2. compute-sanitizer memcheck/racecheck/synccheck with the Gluon kernel forced;
#   part B (about 5 minutes):
#     3. the full grid through flashcore.attention with the shipped dispatch, recorded
#        (results/<gpu>/correctness.json under $OUT/results);
#     4. tests/test_forward_hopper.py (error rule, 2 and 3 consumer warpgroups, determinism).
# Usage (repo root, CUDA machine):
#   FLASHCORE_COMMIT=<hash> OUT=<dir> bash tools/gpu_forward_hopper_final.sh A   (then B)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD FLASHCORE_RESULTS_DIR=$OUT/results
mkdir -p "$OUT/results"
case "${1:-A}" in
A)
  FLASHCORE_FORWARD_HOPPER=always timeout 330 python3 -m flashcore validate --grid full --determinism \
      --large-offsets --quiet > "$OUT/validate_gluon_forced.log" 2>&1
  echo "1. full grid, Gluon forced: exit $?"; tail -4 "$OUT/validate_gluon_forced.log"
  timeout 170 python3 -m flashcore sanitize --workloads forward_hopper > "$OUT/sanitize_gluon.log" 2>&1
  echo "2. sanitizer, Gluon forced: exit $?"; grep -E "on forward_hopper" "$OUT/sanitize_gluon.log"
  ;;
B)
  timeout 200 python3 -m flashcore validate --grid full --determinism --large-offsets --quiet --record \
      > "$OUT/validate_dispatch.log" 2>&1
  echo "3. full grid, shipped dispatch (recorded): exit $?"; tail -3 "$OUT/validate_dispatch.log"
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_forward_hopper.py \
      > "$OUT/pytest_forward_hopper.log" 2>&1
  echo "4. tests/test_forward_hopper.py: $(tail -1 "$OUT/pytest_forward_hopper.log")"
  ;;
esac
