#!/usr/bin/env bash
# Nsight Compute on flashcore, SDPA cuDNN and FlashAttention-4, forward and backward
# (tools/ncu_compare.py: its CASES, one process under ncu each), then the record
# results/<gpu>/ncu_compare.json, written on this machine. FA4 must import (tools/gpu_peers.sh).
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_ncu_compare.sh <outdir>
# (NCU_ONLY=<regex>: only the cases whose "phase impl D" line matches; tools/merge_ncu_compare.py
# joins records of two sessions at the same kernel sources)
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
NCU=(ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis
  --section WarpStateStats --section Occupancy --nvtx --nvtx-include profiled --csv --page raw)
python3 -c 'import sys; sys.path.insert(0, "tools"); import ncu_compare as n
for c in n.CASES: print(*c)' | grep -E "${NCU_ONLY:-.}" | while read -r phase impl d; do
  f="$out/ncu_${phase}_${impl}_d${d}.csv"
  timeout "${NCU_CASE_SECONDS:-80}" "${NCU[@]}" python3 tools/ncu_compare.py run "$phase" "$impl" "$d" \
    >"$f" 2>>"$out/ncu_err.log"
  echo "ncu $phase $impl D$d: exit $? $(grep -c '^"' "$f") csv lines"
done
python3 tools/ncu_compare.py record "$out"
