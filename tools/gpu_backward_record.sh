#!/usr/bin/env bash
# The backward record: part "all" in one device session (about 8.5 minutes: the grid, memory,
# bf16 speed at D 64/128/256 with Flex at D=128, fp16 at D 128/64/256 as time allows, the
# shapes in that order, each recorded as it lands), or in two sessions at one commit:
#   part "grid":  python -m flashcore backward: determinism, the full gradient grid (compiled
#                 from parallel processes), memory against S, fp16 speed at D=128 beside SDPA
#                 flash and cuDNN, the launch-config sweep at D=128 (bf16, S 4K/16K); written
#                 to <outdir>/results/<gpu>/backward.json
#   part "speed": bf16 speed at D=64/128/256 beside SDPA flash, cuDNN and (at D=128)
#                 FlexAttention, forward + backward at D=128; the same file under <outdir>
#   tools/merge_backward_records.py joins the two (the speed rows of both, provenance of each).
# Notebook 07's GPU profile (python3 tools/time_reproduce.py --profile gpu ...) runs separately.
# Usage on a CUDA machine:
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_backward_record.sh <outdir> all|grid|speed
set -u
out=$1
part=${2:-grid}
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
. tools/stage.sh
TAIL=6 STAGE_HIDE="gradients\|UserWarning\|return Variable"
if [ "$part" = all ]; then  # one session: everything the notebook renders
  TAIL=90 stage backward "${BWD_TIMEOUT:-515}" python3 -m flashcore backward --jobs 14 \
    --d 128 64 256 --s 2048 4096 8192 16384 --dtype bfloat16 float16 --flex-d 128 \
    --fwd-bwd --memory --record
elif [ "$part" = grid ]; then
  TAIL=30 stage backward_grid "${BWD_TIMEOUT:-500}" python3 -m flashcore backward --jobs 14 \
    --d 128 --s 2048 4096 8192 16384 --dtype float16 --impls flashcore flashcore_atomic \
    sdpa_flash sdpa_cudnn --memory --tune --tune-s 4096 16384 --record
else
  TAIL=70 stage backward_speed "${BWD_TIMEOUT:-500}" python3 -m flashcore backward --jobs 14 \
    --grid none --repeats 2 --d 128 64 256 --s 2048 4096 8192 16384 --dtype bfloat16 \
    --flex-d 128 --fwd-bwd --record
fi
