#!/bin/bash
# Closing GPU checks of the Gluon Hopper forward path (kernels/forward_hopper.py); logs and
# records under the output directory. Each step has its own time limit.
#   A (up to 9 minutes on an H100):
#     1. the full correctness grid with every case the Gluon kernel supports forced onto it,
#        bitwise determinism and offsets past 2^31 (log);
#   S (about 3 minutes):
#     2. compute-sanitizer memcheck, racecheck and synccheck on the sanitizer grid forced onto
#        the Gluon kernel, once with its own grid and once with 3 programs walking every work
#        tile (records sanitizer.json under <out>/results);
#     3. tests/test_forward_hopper.py: grids, many work tiles per program, determinism.
#   B (about 8 minutes):
#     4. the performance record (perf.json): forward bf16, D 64/128/256, S 1K-16K, beside
#        SDPA flash, cuDNN and FlexAttention (interleaved timing), the prior-report regime
#        and decode.
# Usage (repo root, CUDA machine): FLASHCORE_COMMIT=<hash> bash tools/gpu_forward_hopper_final.sh <out> A|S|B
set -u
out=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD FLASHCORE_RESULTS_DIR=$out/results
mkdir -p "$out/results"
step() {  # step NAME SECONDS CMD...: log to <out>/NAME.log, never abort the script
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s"; tail -n "${TAIL:-4}" "$out/$name.log"
}
case "${2:-A}" in
A)
  # 280 s was not enough on 2026-11-23 (the Gluon variants compile one by one): the grid has
  # this call to itself.
  FLASHCORE_FORWARD_HOPPER=always step grid_gluon_forced 540 python3 -m flashcore validate \
    --grid full --determinism --large-offsets --quiet
  ;;
S)
  TAIL=8 step sanitize_gluon 170 python3 -m flashcore sanitize --workloads forward_hopper \
    forward_hopper_walk --record
  step pytest_forward_hopper 100 python3 -m pytest -q -p no:cacheprovider tests/test_forward_hopper.py \
    tests/test_launch.py -k "many_work or deterministic or supports or gluon or (error_rule and True-)"
  ;;
B)
  TAIL=40 step bench 420 python3 -m flashcore bench --suite all --dtype bfloat16 \
    --s 1024 2048 4096 8192 16384 --impls flashcore flashcore_triton sdpa_flash sdpa_cudnn flex \
    --decode-impls flashcore_decode sdpa_flash sdpa_cudnn --reps 32 --record
  ;;
esac
