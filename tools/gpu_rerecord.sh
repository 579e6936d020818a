#!/usr/bin/env bash
# Re-records of the evidence that went stale when the kernels changed, in parts that each fit
# one device call of under ten minutes (every stage under its own timeout, so one that hangs
# costs its own time only). Records written by the flashcore commands go to <outdir>/results;
# the notebooks' go through tools/gpu_reproduce_timing.sh (its <outdir>/records.tar.gz).
#   notebooks  the GPU profiles of notebooks 09 and 02 (reproduce_timing.json rows), Nsight
#              Compute on flashcore and cuDNN, forward and backward (ncu_compare.json; FA4's rows
#              need tools/gpu_peers.sh ncu_fa4 and tools/merge_ncu_compare.py), the transformers e2e record
#              (e2e_transformers.json: the counted float32 checks and generation speed)
#   host       host cost per call (launch.json), the dudect timing test over every forward
#              kernel, Gluon included (timing_leak.json), NVML power/clock (timing_power.json)
#   speed      the FP8 study (fp8.json), the forward/decode sweep beside SDPA and Flex (perf.json)
#   backward   the backward record (backward.json; tools/gpu_backward_record.sh all)
#   long       the long-context study (long_context.json)
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_rerecord.sh PART <outdir>
set -u
part=$1; out=$2
mkdir -p "$out/results"
. tools/device_prefix.sh
. tools/stage.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
cli() {  # cli NAME SECONDS ARGS...: python -m flashcore ARGS, its records under <outdir>/results
  local name=$1 secs=$2; shift 2
  FLASHCORE_RESULTS_DIR="$out/results" stage "$name" "$secs" python3 -m flashcore "$@"
}
case "$part" in
  notebooks)
    BUDGET=330 NB_TIMEOUT=240 bash tools/gpu_reproduce_timing.sh "$out/nb" \
      notebooks/09_*.ipynb notebooks/02_*.ipynb | tail -n 12
    TAIL=8 FLASHCORE_RESULTS_DIR="$out/results" stage ncu 300 bash tools/gpu_ncu_compare.sh "$out/ncu"
    TAIL=14 cli e2e 170 e2e --record
    ;;
  host)
    TAIL=30 cli launch 200 launch --record
    TAIL=30 cli leak 230 leak --record
    TAIL=20 cli power 130 leak --power --record
    ;;
  speed)
    TAIL=20 cli fp8 280 fp8 --record
    TAIL=40 STAGE_HIDE="it/s\]" cli perf 280 bench --suite all --dtype bfloat16 \
      --s 1024 2048 4096 8192 16384 --impls flashcore flashcore_triton sdpa_flash sdpa_cudnn flex \
      --decode-impls flashcore_decode sdpa_flash sdpa_cudnn --reps 32 --record
    ;;
  backward)
    BWD_TIMEOUT=540 bash tools/gpu_backward_record.sh "$out" all
    ;;
  long)
    TAIL=40 cli long 570 long --record
    ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
# One archive of every record this part wrote (the call's output keeps a shallow tree).
tar -czf "$out/records.tar.gz" -C "$out" results && echo "records: $(tar -tzf "$out/records.tar.gz" | grep -c json)"
