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
NCU="ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --launch-skip 3 --launch-count 1 --csv --page raw"
for impl in hopper triton cudnn; do
  timeout 45 $NCU -k "regex:fa3|attn_fwd|sdpa|fprop|fmha|flash" python3 tools/ncu_forward.py $impl > "$OUT/ncu_$impl.csv" 2>> "$OUT/ncu_err.log"
  echo "ncu $impl: exit $? $(wc -l < "$OUT/ncu_$impl.csv") lines"
done
timeout 45 python3 -m pytest -q -p no:cacheprovider tests/test_forward_hopper.py -k consumer_count > "$OUT/pytest_wg3.log" 2>&1
echo "pytest (2 and 3 consumer warpgroups): $(tail -1 "$OUT/pytest_wg3.log")"
timeout 95 python3 tools/gpu_forward_hopper.py "$OUT/sweep2.json" --head-dims 64,128 --seqlens 1024,4096,16384 --reps 15 2>&1 | tail -24
