#!/bin/bash
# GPU checks of the Gluon Hopper forward kernel, one device call (about 9 minutes on an H100):
# the full correctness grid with every supported case forced onto the Gluon kernel (plus
# determinism and offsets past 2^31), compute-sanitizer memcheck/racecheck/synccheck on it,
# Nsight Compute of the Gluon kernel, today's Triton kernel and cuDNN, tests of the
# 3-consumer-warpgroup variant and a short sweep of the variants.
# Usage (repo root, CUDA machine): OUT=<dir> bash tools/gpu_forward_hopper.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p "$OUT"
FLASHCORE_FORWARD_HOPPER=always timeout 130 python3 -m flashcore validate --grid full --determinism \
    --large-offsets --quiet > "$OUT/validate_always.log" 2>&1; echo "validate (Gluon forced): exit $?"
tail -4 "$OUT/validate_always.log"
timeout 150 python3 -m flashcore sanitize --workloads forward_hopper > "$OUT/sanitize.log" 2>&1
echo "sanitize: exit $?"; grep -E "on forward_hopper|SUMMARY" "$OUT/sanitize.log" | head -12
# Nsight Compute at D=128 on the shipped forward, the Triton kernel and cuDNN (FA4 too, where it
# imports): tools/gpu_ncu_compare.sh, forward cases only.
NCU_ONLY="forward .* 128" FLASHCORE_RESULTS_DIR="$OUT/results" bash tools/gpu_ncu_compare.sh "$OUT/ncu" | tail -n 6
timeout 45 python3 -m pytest -q -p no:cacheprovider tests/test_forward_hopper.py -k consumer_count > "$OUT/pytest_wg3.log" 2>&1
echo "pytest (2 and 3 consumer warpgroups): $(tail -1 "$OUT/pytest_wg3.log")"
timeout 95 python3 tools/gpu_forward_hopper.py "$OUT/sweep2.json" --head-dims 64,128 --seqlens 1024,4096,16384 --reps 15 2>&1 | tail -24
