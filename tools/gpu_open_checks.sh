#!/usr/bin/env bash
# The GPU runs the open issues wait on that need no peer wheels, in two parts that each fit
# one device call (every stage under its own timeout):
#   part A: where the host time of an eager call goes (tools/host_profile.py), where the
#           D_v != D path fails (tools/dv_gpu_diagnose.py, its variants), and the GPU tests
#           of the features no GPU run has passed at HEAD, each file in a process of its own
#           (an illegal memory access poisons the rest of its process)
#   part B: the op layer's host cost (tools/op_overhead.py), the host-cost record
#           (launch.json), the runs that test the D_v mode's suspected cause
#           (tools/dv_offline/REPORT.md; dv_gpu_diagnose.py --root-cause, memcheck on failures)
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_open_checks.sh A|B <outdir>
# Records go to <outdir>/results (copy them into results/ with the commit they ran at).
set -u
part=$1; out=$2
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results"
. tools/device_prefix.sh
. tools/stage.sh
gpu_tests() {  # gpu_tests NAME SECONDS FILE...: the file's GPU-marked tests, one process
  local name=$1 secs=$2; shift 2
  stage "pytest_$name" "$secs" python3 -m pytest -q -p no:cacheprovider -m gpu "$@"
}
if [ "$part" = A ]; then
  stage host_profile 60 python3 tools/host_profile.py "$out/host_profile.json" --calls 300
  stage dv_variants 90 python3 tools/dv_gpu_diagnose.py "$out/dv_variants.json" --variants-only
  gpu_tests paged_kv 110 tests/test_paged_kv.py
  gpu_tests sinks 80 tests/test_sinks.py
  gpu_tests backward_hopper 100 tests/test_backward_hopper.py
  gpu_tests value_head_dim 30 tests/test_value_head_dim.py
  gpu_tests ops 150 tests/test_ops.py  # the counted e2e checks: 60 models
  gpu_tests timing_gluon 50 tests/test_timing_power.py -k gluon
else
  stage op_overhead 60 python3 tools/op_overhead.py "$out/op_overhead.json"
  stage launch 200 python3 -m flashcore launch --record
  stage dv_root_cause 200 python3 tools/dv_gpu_diagnose.py "$out/dv_root_cause.json" --root-cause --sanitize
fi
