#!/usr/bin/env bash
# Run pytest selections on a CUDA machine, each split over parallel processes (the tests'
# Triton compiles are CPU-bound; one GPU holds them all), every process under a timeout.
#   bash tools/gpu_test_shards.sh <outdir> SECONDS "NAME:SHARDS:PYTEST ARGS" ...
# e.g. "dv:8:-m gpu tests/test_value_head_dim.py". Each shard logs to <outdir>/NAME.i.log
# (FLASHCORE_TEST_SHARD=i/SHARDS, tests/conftest.py); prints each shard's summary line.
set -u
out=$1; secs=$2; shift 2
mkdir -p "$out"
for spec in "$@"; do
  name=${spec%%:*}; rest=${spec#*:}; shards=${rest%%:*}; args=${rest#*:}
  for ((i = 0; i < shards; i++)); do
    # shellcheck disable=SC2086  # args is a word list
    FLASHCORE_TEST_SHARD=$i/$shards timeout "$secs" python3 -m pytest -q -p no:cacheprovider \
      $args >"$out/$name.$i.log" 2>&1 &
  done
done
wait
for log in "$out"/*.log; do
  echo "$(basename "$log"): $(grep -E '(passed|failed|error|no tests ran)' "$log" | tail -n 1)"
  grep -E '^(FAILED|ERROR)' "$log" | head -n 5
done
