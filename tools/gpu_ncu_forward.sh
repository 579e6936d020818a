#!/usr/bin/env bash
# Nsight Compute on one forward launch of each implementation (tools/ncu_forward.py: the
# shipped flashcore.attention, which runs the Gluon kernel at this shape; the Triton kernel;
# SDPA cuDNN), then the record results/<gpu>/ncu_forward.json, written on this machine.
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_ncu_forward.sh <outdir>
set -u
out=$1; mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=(ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis
  --section WarpStateStats --section Occupancy --launch-skip 3 --launch-count 1 --csv --page raw)
for impl in hopper triton cudnn; do
  timeout 90 "${NCU[@]}" -k "regex:fa3|attn_fwd|attention|sdpa|fprop|fmha|flash" \
    python3 tools/ncu_forward.py "$impl" >"$out/ncu_$impl.csv" 2>>"$out/ncu_err.log"
  echo "ncu $impl: exit $? $(wc -l <"$out/ncu_$impl.csv") lines"
done
python3 tools/ncu_forward.py --record "$out"
