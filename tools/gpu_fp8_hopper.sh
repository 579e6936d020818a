#!/usr/bin/env bash
# The Gluon forward's FP8 mode on a Hopper GPU, one device call (about 500 s): its GPU tests
# (and the MLA atomic-config tests) sharded, the speed probe beside the Triton fp8 kernel and
# the bf16 forward, and compute-sanitizer on the fp8_hopper workload.
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_fp8_hopper.sh <outdir>
set -u
out=$1
mkdir -p "$out"
. tools/device_prefix.sh
. tools/stage.sh
bash tools/gpu_test_shards.sh "$out/tests" 200 "fp8h:4:-m gpu tests/test_fp8.py -k hopper" \
  "mlaatomic:4:-m gpu tests/test_value_head_dim.py -k mla_atomic"
TAIL=40 stage probe 200 python3 tools/fp8_hopper_probe.py "$out/fp8_hopper_probe.json"
TAIL=8 stage sanitize 200 python3 -m flashcore sanitize --workloads fp8_hopper --jobs 3
tar -czf "$out/logs.tar.gz" -C "$out" tests probe.log sanitize.log fp8_hopper_probe.json
