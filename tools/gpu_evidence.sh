#!/usr/bin/env bash
# The correctness and sanitizer re-records, none of them timing-sensitive, in parallel on one
# GPU (Triton compiles are CPU-bound; 16 cores):
#   the 450-case forward grid through the shipped dispatch (4 shards; shard 0 also checks
#   determinism and element offsets past 2^31) -> correctness.json,
#   the same grid with every case the Gluon kernel supports forced onto it -> correctness_gluon.json,
#   compute-sanitizer memcheck/racecheck/synccheck over every kernel family -> sanitizer.json.
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_evidence.sh <outdir> [SECONDS]
# Records go to this tree's results/<gpu>/; logs to <outdir>.
set -u
out=$1; secs=${2:-480}; shards=4
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
for ((i = 0; i < shards; i++)); do
  extra=(); [ "$i" = 0 ] && extra=(--determinism --large-offsets)
  timeout "$secs" python3 -m flashcore validate --grid full --quiet --record --shard "$i/$shards" \
    "${extra[@]}" >"$out/validate.$i.log" 2>&1 &
  FLASHCORE_FORWARD_HOPPER=always timeout "$secs" python3 -m flashcore validate --grid full \
    --quiet --record --record-as correctness_gluon --shard "$i/$shards" \
    >"$out/validate_gluon.$i.log" 2>&1 &
done
timeout "$secs" python3 -m flashcore sanitize --jobs 4 --record >"$out/sanitize.log" 2>&1 &
wait
for topic in correctness correctness_gluon; do
  python3 -m flashcore validate --merge-shards "$shards" --record-as "$topic" >>"$out/merge.log" 2>&1
done
tail -n 2 "$out"/validate*.log; cat "$out/merge.log"; grep -E "^(memcheck|racecheck|synccheck) on" "$out/sanitize.log"
