#!/usr/bin/env bash
# The FP8 and long-context records, in two parts that each fit one device session:
#   part 1: GPU tests of the changed kernels, the full correctness grid, the FP8 study
#   part 2: the long-context study
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_fp8_long.sh 1|2 <outdir>
set -u
part=$1; out=$2
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results"
. tools/device_prefix.sh
. tools/stage.sh
if [ "$part" = 1 ]; then
  stage pytest_gpu 200 python3 -m pytest -q -m gpu -x tests/test_forward.py tests/test_fp8.py
  stage fp8 260 python3 -m flashcore fp8 --record
  stage validate 120 python3 -m flashcore validate --grid full --large-offsets --quiet --record
else
  stage long 560 python3 -m flashcore long --record
fi
