#!/usr/bin/env bash
# The backward record and notebook 07's GPU profile in one device session (about 7 minutes):
#   1. python -m flashcore backward: the gradient grid (compiled from parallel processes),
#      determinism, memory against S, bf16 and fp16 speed at D=128 beside SDPA flash and
#      cuDNN, forward + backward; written to <outdir>/results/<gpu>/backward.json
#   2. notebook 07's GPU profile under papermill (quick sweep), timed
#   3. the forward grid's bf16 D=128 cases forced onto the Gluon kernel (log only)
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_backward_record.sh <outdir>
set -u
out=$1
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results"
. tools/device_prefix.sh
stage() {  # stage NAME SECONDS CMD...: log to $out/NAME.log, never abort the script
  local name=$1 secs=$2; shift 2
  echo "== $name"; local t0=$SECONDS
  timeout "$secs" "$@" >"$out/$name.log" 2>&1; echo "   rc=$? $((SECONDS - t0)) s"
  grep -v "gradients" "$out/$name.log" | tail -n "${TAIL:-6}"
}
TAIL=40 stage backward "${BWD_TIMEOUT:-230}" python3 -m flashcore backward --jobs 14 --d 128 \
  --s 2048 4096 8192 16384 --dtype bfloat16 float16 --fwd-bwd --memory --record
stage nb07 "${NB_TIMEOUT:-110}" python3 tools/time_reproduce.py --profile gpu \
  --out-dir "$out" notebooks/07_backward.ipynb
FLASHCORE_FORWARD_HOPPER=always stage gluon_grid "${GRID_TIMEOUT:-80}" python3 -m flashcore \
  validate --grid full --filter "D128 bfloat16"
