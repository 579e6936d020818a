#!/usr/bin/env bash
# FlashAttention-4 beside flashcore, in device calls made back to back on one warm machine
# (FA4 is unpacked into the machine's /root/fa4site by the first two calls; see
# ../shared/tools/fa4-wheels.sh for how its two halves travel). The .fa4a half is 50 MB
# (already xz -9e) and a call carries 64 MiB with the tracked tree (about 20 MB on
# 2026-11-29), so an .fa4a call was refused as too large: for that one call, move
# results/nvidia-h100-80gb-hbm3 and figures/ out of the checkout (nothing on the GPU reads
# them) and put them back after it; .fa4b (23 MB) and .whl (19 MB) fit together:
#   check     (carry .fa4a) unpack FA4's compiler library; the GPU tests of v's own head dim
#             (the HEAD_DIM_V mode, no padded route), sharded
#   dv        (carry .fa4b) finish FA4's install; the flash_attn door's GPU tests (the same
#             calls through FA4, both under the rule); D 192 / D_v 128 forward and backward beside
#             FA4, SDPA and the padded route (value_head_dim_speed.json); paged decode beside
#             FA4's paged varlen (paged_decode.json)
#   host_a    (carry .fa4a) unpack FA4's compiler library; the "ran" scope check; the GPU tests of
#             the decode launcher (its plan cache), dense and paged (HOST_TESTS_K: a -k filter); compute-sanitizer memcheck
#             on the decode lse tests (split and single) and the cached decode launches;
#             launch.json (every door's host cost)
#   forward   (carry .fa4b, right after an .fa4a call) the forward sweep beside FA4, SDPA flash, cuDNN and Flex, with the prior regime
#             and decode (perf.json); with .ab/before carried too (`mkdir -p .ab/before && git
#             archive <commit> flashcore | tar -x -C .ab/before`), the decode host-time A/B
#             against that tree (tools/decode_host_ab.py)
#   stale     (carry .fa4a) unpack FA4's compiler library; the records no FA4 run needs that
#             went stale with the D_v change: varlen.json, decode.json, decode_splits.json
#   ncu       (carry .fa4b) Nsight Compute on flashcore, cuDNN and FA4, forward and backward
#             (tools/gpu_ncu_compare.sh: ncu_compare.json); the FP8 study (fp8.json)
#   ncu_fa4   (carry .fa4b) FA4's Nsight Compute cases alone (merged with tools/merge_ncu_compare.py)
#   current_a (carry .fa4a) unpack FA4's compiler library; then every record the kernel
#             fingerprint makes stale that needs no FA4 (each stage's time at 833b4cf in
#             brackets): correctness, correctness_gluon and sanitizer (tools/gpu_evidence.sh,
#             240 s), feature_costs.json (170 s), decode.json (55 s), decode_splits.json (20 s);
#             about 490 s, so the stages' own timeouts (which add up past a call's 600 s) only
#             stop a hang
#   current_b (carry .fa4b and .whl, right after current_a) the ones that need FA4 or
#             Jupyter: value_head_dim_speed.json (105 s), models.json (115 s),
#             paged_decode.json (45 s), the GPU profiles of notebooks 09 and 02
#             (reproduce_timing.json, correctness_quick.json; 100 + 95 s); about 455 s
#   backward  (carry .fa4b, as forward) the bf16 backward sweep at D 128, 64, 256 beside FA4, SDPA and Flex (D128),
#             forward + backward too (backward.json's speed rows; merged with the grid part
#             by tools/merge_backward_records.py)
#   rerecord_a (carry .fa4a and .whl) unpack FA4's compiler library; the GPU check of the
#             fingerprint's "ran" scope (tests/test_records.py, first, so no record is written
#             under a scope that misses kernels); the FP8 study (fp8.json, ~250 s); the backward
#             grid part (tools/gpu_backward_record.sh grid, ~120 s)
#   rerecord_b (carry .fa4b, right after rerecord_a) the backward speed part beside FA4 (as
#             `backward` above, ~240 s), paged decode (paged_decode.json), the transformers
#             models (models.json, 7 paired generation rounds)
#   probes    (FA4 not needed) the GPU check of the fingerprint's "ran" scope first, then the
#             MLA backward's launch configs re-swept on its split tiles (both modes, ~50 s each)
#             and Nsight Compute on the FP8 mode's per_block and naive builds at D128
#             (NCU_ONLY=fp8; ncu_compare.json under <outdir>/results: merge, never overwrite)
#   rerecord_c varlen.json (~210 s), feature_costs.json (~170 s), the MLA backward's launch
#             configs re-swept on its split tiles (tools/dv_backward_probe.py --around-shipped,
#             both modes, ~50 s each; under <outdir>/probe); the notebooks' GPU profiles
#             then go through tools/gpu_reproduce_timing.sh in a call of their own
#   tests     (carry .fa4a) unpack FA4's compiler library; the GPU check of the "ran" scope;
#             the GPU tests of every kernel file a change touches (forward_hopper, backward,
#             both Gluon backwards, decode/paged, v's own head dim), 16 shards under one timeout
#   correct   (FA4 not needed) the correctness grids and sanitizer (tools/gpu_evidence.sh), then
#             the backward grid part (tools/gpu_backward_record.sh grid)
#   studies   (FA4 not needed) varlen.json, feature_costs.json, decode.json, decode_splits.json
#   fp8       (FA4 not needed) the FP8 study (fp8.json)
#   dv_speed  (after an FA4 install on the same machine) value_head_dim_speed.json
#   trials    (FA4 not needed; carry .ab/tmadq, made here by `mkdir -p .ab/tmadq && git archive
#             58d199b flashcore tools tests pyproject.toml | tar -x -C .ab/tmadq`) the copy
#             engine's reduce-add probe (tools/gluon_tma_reduce_probe.py), then, in the trial
#             branch's tree, the Gluon backward's GPU tests with dQ summed by it and its timing
#             beside the atomic sum and the Triton backward (--kernel dq_sum); about 4 minutes
#   ws_a      (carry .fa4a) unpack FA4's compiler library; the GPU check of the "ran" scope; the
#             warp-specialized Gluon backward's GPU tests (and every Gluon backward's shared
#             ones), compute-sanitizer's three tools on it (log only: sanitizer.json keeps the
#             full run), and its grid and speed beside the pipelined kernel and the Triton
#             backward (tools/backward_hopper_check.py --kernel ws_vs_pipelined:
#             backward_ws_check.json)
#   ws_b      (carry .fa4b, right after ws_a) the warp-specialized backward's own GPU tests;
#             the backward speed part beside FA4 (as `backward`, with deterministic=False's
#             path: flashcore_nondeterministic)
#   ws_c      (FA4 not needed) the "ran" scope check, the warp-specialized backward's GPU
#             tests, compute-sanitizer on it (log only), its grid and speed (backward_ws_check.json, as ws_a), the FP8 study (fp8.json)
#   det_a     (carry .fa4a) the "ran" scope check, the warp-specialized backward's GPU tests
#             (both modes, and the dispatch), compute-sanitizer's three tools on both modes
#             (log only), then the Triton backward's grid part of backward.json
#             (tools/gpu_backward_record.sh grid)
#   det_b     (carry .fa4b, right after det_a) both modes of the warp-specialized backward
#             beside the Triton one (backward_hopper_check.py --kernel ws_modes:
#             backward_ws_modes.json), the backward speed part beside FA4, SDPA and
#             Flex (flashcore: the default, deterministic; flashcore_nondeterministic; the
#             Triton backward's deterministic mode alone); merge the two backward.json files
#             with tools/merge_backward_records.py
#   ncu_ws    (FA4 not needed) Nsight Compute on the default backward at D128 and D64 where it
#             runs the warp-specialized kernel (a log, logs/ncu_backward_ws_<commit>.json)
#   race_probe (FA4 not needed) tools/mbarrier_race_probe.py's four hand-offs under
#             compute-sanitizer racecheck (is an mbarrier-ordered shared-memory hand-off
#             flagged? the warp-specialized backward's lse/delta ring is one; logs only)
#   fp8_ab    (FA4 not needed; carry .ab/exp2k0, made here by `mkdir -p .ab/exp2k0 && git archive
#             b831276 flashcore | tar -x -C .ab/exp2k0`) the FP8 forward as shipped on main's
#             machine code against branch exp2-k0-inline's (the same PTX, c530054's schedule),
#             5 alternating rounds (tools/ab_timing.py --suite fp8: fp8_schedule_ab_timing.json)
#   ws_modes  (FA4 not needed) the "ran" scope check, the warp-specialized backward's GPU tests
#             (both modes, the dispatch, the shared Gluon ones), compute-sanitizer's three tools
#             on both modes (log only), both modes beside the Triton backward
#             (backward_ws_modes.json: the dispatch tables' record), the race probe's control
#   grid_a    (carry .fa4a, after the tables are set from ws_modes) unpack FA4's compiler
#             library; the Triton backward's grid part of backward.json
#   speed_b   (carry .fa4b, right after grid_a) the backward speed part beside FA4, SDPA and Flex
#             (as det_b's second half); merge with tools/merge_backward_records.py
#   train_speed (FA4 not needed) issue 25's training-step target: tools/training_speed_rounds.py
#             (B4 S2048 bf16, 3 paired rounds; a log, logs/training_speed_rounds_<commit>.json)
#   breakdown_fa4 (carry .fa4b, right after an .fa4a call) the same with FA4's backward beside
#             (its preprocess and dQ conversion against ours)
#   ws_record (FA4 not needed; after the GPU tests ran) the "ran" scope check, compute-sanitizer on
#             both modes, backward_ws_modes.json (ws_modes without its tests and race probe)
#   turns     (FA4 not needed) the Gluon forward's ping-pong turn, an mbarrier (1) against a
#             named barrier (2): its GPU tests (every schedule), both beside the Triton kernel
#             and cuDNN (tools/gpu_forward_hopper.py --variants mbar_turns,named_turns:
#             <outdir>/logs/forward_turns_<commit>.json), and Nsight Compute's source page of
#             both at TURNS_NCU_CASES (default D128 S 8K full; D64 S 8K causal), parsed by
#             tools/ncu_sass_stalls.py into logs/ncu_sass_fwd_turns<T>_d<D>[_causal]_<commit>.json
#   qbufs     (at a0ed685 only; FA4 not needed; carry .ab/masklimit) the Gluon forward's GPU tests here and in the
#             masked-step trial's tree; one against two Q buffers (logs/forward_qbufs_<commit>.json);
#             the trial against this tree (ab_timing --suite gluon_forward: masklimit_ab_timing.json)
#   tmask     (FA4 not needed; carry .ab/tmask) the Gluon forward's GPU tests here, the Triton
#             forward's in the masked-step trial's tree; the trial against this tree (ab_timing
#             --suite triton_forward: tmask_ab_timing.json); Nsight Compute at D64 S 2K
#   bn64      (FA4 not needed) the Gluon forward with 64-key tiles beside its shipped config at
#             short S: D64 (three and two warpgroups) and D128 (logs/forward_bn64_*_<commit>.json)
#   d64_dispatch (FA4 not needed) the GPU tests of the KV-cache lse (the interface's and the
#             flash_attn door's); the D=64 forward dispatch measured again: the Triton kernel,
#             the call as dispatched and the Gluon kernel forced at its shipped config, S 1K-16K
#             (tools/gpu_forward_hopper.py: logs/d64_gluon_sweep_<commit>.json)
#   dq_rows   (FA4 not needed) the "ran" scope check, the warp-specialized backward's GPU tests
#             (both modes, the dispatch, the shared Gluon ones), both modes beside the Triton
#             backward (backward_ws_modes.json: the dispatch tables' record); ws_modes without
#             compute-sanitizer and the race probe
#   trial_fwd (FA4 not needed; carry .ab/<name>, TRIAL=name:commit) the Gluon forward's GPU tests
#             in a trial's tree, then the trial against this tree (ab_timing --suite gluon_forward)
#   trial_tfwd (FA4 not needed; carry .ab/<name> as trial_fwd; TRIAL=name:commit) the Triton
#             forward's GPU tests (dense and varlen) in a trial's tree, then the trial (B) against
#             this tree (A) (ab_timing --suite triton_forward: <name>_ab_timing.json)
#   host_b    (FA4 not needed) the "ran" scope check; the GPU tests of the files the lean launch
#             paths touch, 16 shards; launch.json; with .ab/before, each door's host time A/B
#   turns_a   (carry .fa4a; then `forward` with .fa4b) unpack FA4's compiler library; the "ran"
#             scope check; compute-sanitizer's three tools on the Gluon forward's two sanitizer
#             workloads (log only); launch.json
#   scale_a   (carry .fa4a; then `forward` with .fa4b) unpack FA4's compiler library; the "ran"
#             scope check; the error tests (a bad softmax scale on every entry point, CUDA's
#             cached routes included), the SDPA door's and the launch tests on the GPU; the
#             KV-cache lse's tests; launch.json
#   ncu_sass_ws (FA4 not needed) Nsight Compute's source page of the warp-specialized backward
#             per NCU_SASS_CASES (default D256 S 8K full, both modes; ~2 x 60 s), parsed into
#             logs/ncu_sass_ws_*_<commit>.json (tools/ncu_sass_stalls.py)
#   breakdown (FA4 not needed) one backward call's GPU time kernel by kernel, D64/D128 x S
#             2K-16K, both Gluon modes and the Triton backward, with the main kernel's per-program
#             overhead fitted (tools/backward_breakdown.py; logs/backward_breakdown_<commit>.json)
#   ws_trials (FA4 not needed; WS_TRIALS="name:commit ...", each tree made here by `mkdir -p
#             .ab/<name> && git archive <commit> flashcore tests pyproject.toml | tar -x -C
#             .ab/<name>`, carried) per trial: the warp-specialized backward's GPU tests in the
#             trial's own tree, then tools/ab_timing.py --suite ws_backward (WS_TRIAL_SUITE:
#             ws_backward_d256 for D256), this checkout (A) against the trial (B), 3
#             alternating rounds (logs/ws_trial_<name>_ab_timing.json)
# Usage on a CUDA machine: FLASHCORE_COMMIT=<hash> bash tools/gpu_peers.sh PART <outdir>
set -u
part=$1; out=$2
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results"
. tools/device_prefix.sh
. tools/stage.sh
fa4site=/root/fa4site
case "$part" in
  forward | backward | dv | dv_speed | ncu | ncu_fa4 | current_b | rerecord_b | ws_b | det_b | speed_b | breakdown_fa4)
    fa4b=1 ;;
  *) fa4b=0 ;;
esac
if [ "$fa4b" = 1 ]; then
  # shellcheck disable=SC1091
  source .fa4b/install.sh
elif [ -d "$fa4site" ]; then
  export PYTHONPATH=$fa4site:$fa4site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
fi
if ! python3 -c 'import flash_attn.cute, importlib.metadata as m; print("fa4", m.version("flash-attn-4"))' \
  2>&1 | tail -n 1 | grep '^fa4 ' && [ "$fa4b" = 1 ]; then
  echo "FA4 does not import: part $part measures it, so nothing is recorded" >&2; exit 3
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
# Stages more than one part runs.
ran_scope_check() {  # the fingerprint's "ran" scope on the GPU, before any record is written
  TAIL=4 stage ran_scope 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_records.py
}
backward_speed() {  # backward_speed SECONDS [TRITON_IMPL]: the bf16 backward sweep beside FA4,
  # SDPA and Flex (TRITON_IMPL: the Triton backward's mode timed alone, default its atomic one)
  TAIL=70 STAGE_HIDE="gradients\|UserWarning\|return Variable" stage backward_speed "$1" \
    python3 -m flashcore backward --jobs 14 --grid none --repeats 2 --d 128 64 256 \
    --s 2048 4096 8192 16384 --dtype bfloat16 --flex-d 128 --fwd-bwd \
    --impls flashcore flashcore_nondeterministic "${2:-flashcore_atomic}" sdpa_flash sdpa_cudnn \
    flex fa4 --record
}
ws_sanitize() {  # ws_sanitize SECONDS: compute-sanitizer on the warp-specialized backward, both
  # modes (log only: sanitizer.json keeps the full run)
  FLASHCORE_BACKWARD_HOPPER=always TAIL=12 stage sanitize_ws "$1" python3 -m flashcore sanitize \
    --workloads backward_hopper_ws --jobs 3
}
# The dispatch tables' record: every head dim the warp-specialized backward serves (D256 runs
# its own case list: 64-key blocks). 123 s for D256 alone warm (b159195)
WS_MODES_ARGS=(--d 64 128 256 --grid hopper hopper_d256)
ws_check() {  # ws_check RECORD KERNEL SECONDS [ARGS]: tools/backward_hopper_check.py --kernel
  # KERNEL (its grid and speed) into results/<gpu>/RECORD.json
  local ws_json
  ws_json=$(python3 -c "from flashcore.results import result_path as p; print(p('$1'))")
  mkdir -p "$(dirname "$ws_json")"
  TAIL=24 stage "$1" "$3" python3 tools/backward_hopper_check.py "$ws_json" \
    --kernel "$2" --s 2048 4096 8192 16384 "${@:4}"
}
ws_sanitize_and_check() {  # compute-sanitizer, then the grid and speed (backward_ws_check.json)
  ws_sanitize 170
  ws_check backward_ws_check ws_vs_pipelined 200
}
ws_tests_and_sanitize() {  # the "ran" scope check, the warp-specialized backward's GPU tests
  # (both modes, the dispatch) and the shared Gluon ones, compute-sanitizer on both modes
  ran_scope_check
  bash tools/gpu_test_shards.sh "$out/tests" 150 "ws:8:-m gpu tests/test_backward_hopper_ws.py" \
    "shared:4:-m gpu tests/test_backward_hopper.py -k gluon_ws"
  ws_sanitize 200
}
kvcache_lse_tests() {  # the KV-cache lse's tests on the GPU (device tests: no -m gpu), the
  # interface's and the flash_attn door's
  TAIL=4 stage gpu_tests_lse 240 python3 -m pytest -q -p no:cacheprovider \
    tests/test_decode.py tests/test_flash_attn_interface.py -k lse
}
trial_tree_tests() {  # trial_tree_tests NAME COMMIT SECONDS "NAME:SHARDS:PYTEST ARGS": GPU tests
  # in a trial's tree .ab/NAME (its package on the path, its commit the label), logs under
  # $out/tests_NAME
  local name=$1 commit=$2 secs=$3 spec=$4 root=$PWD
  (
    cd ".ab/$name" && export PYTHONPATH=$PWD FLASHCORE_COMMIT=$commit &&
      bash "$root/tools/gpu_test_shards.sh" "$out/tests_$name" "$secs" "$spec"
  )
}
mla_probes() {  # mla_probes SECONDS: the MLA backward's launch configs around the shipped ones
  mkdir -p "$out/probe"
  for mode in deterministic atomic; do
    TAIL=16 stage "mla_probe_$mode" "$1" python3 tools/dv_backward_probe.py \
      "$out/probe/mla_backward_probe_$mode.json" --around-shipped \
      $([ $mode = atomic ] && echo --atomic)
  done
}
ncu_source_page() {  # ncu_source_page NAME KERNEL_REGEX SECONDS LOG_PREFIX WORKLOAD...:
  # Nsight Compute's source page of the second launch of KERNEL_REGEX in WORKLOAD (the first
  # compiles), parsed by tools/ncu_sass_stalls.py into
  # $out/logs/ncu_sass_<LOG_PREFIX><NAME>_<commit>.json (reports and CSVs stay on the machine)
  local name=$1 kernel=$2 secs=$3 prefix=$4 when
  shift 4
  local rep=/tmp/ncu_sass/$name
  local profiler=(ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 1
    --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight)
  mkdir -p "$out/logs" /tmp/ncu_sass
  when=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  timeout "$secs" "${profiler[@]}" -f -o "$rep" "$@" >"$rep.log" 2>&1
  echo "ncu $name: exit $? $(grep 'max |gluon' "$rep.log")"
  ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.sass.csv" &&
    ncu --import "$rep.ncu-rep" --page raw --csv >"$rep.raw.csv" &&
    python3 tools/ncu_sass_stalls.py "$rep.sass.csv" \
      "$out/logs/ncu_sass_${prefix}${name}_${FLASHCORE_COMMIT:-unknown}.json" --raw "$rep.raw.csv" \
      --commit "${FLASHCORE_COMMIT:-unknown}" --date "$when" --label "$name" \
      --command "${profiler[*]} $*"
}
case "$part" in
  tests)
    bash .fa4a/install.sh
    ran_scope_check
    bash tools/gpu_test_shards.sh "$out/tests" 430 "gpu:16:-m gpu tests/test_forward_hopper.py \
tests/test_value_head_dim.py tests/test_paged_kv.py tests/test_decode.py tests/test_backward.py \
tests/test_backward_hopper.py tests/test_backward_hopper_pipelined.py \
tests/test_backward_varlen_softcap.py"
    ;;
  correct)
    TAIL=40 stage evidence 330 bash tools/gpu_evidence.sh "$out/evidence" 300
    BWD_TIMEOUT=200 bash tools/gpu_backward_record.sh "$out/grid" grid | tail -n 30
    ;;
  studies)
    TAIL=6 stage varlen 260 python3 -m flashcore varlen --record
    TAIL=6 stage feature_costs 220 python3 flashcore/studies/feature_costs.py --record
    TAIL=6 STAGE_HIDE="it/s\]" stage decode 100 python3 -m flashcore bench --suite decode --topic decode --record
    TAIL=4 stage decode_splits 50 python3 tools/decode_splits.py --record
    ;;
  fp8)
    TAIL=20 stage fp8 300 python3 -m flashcore fp8 --record
    ;;
  trials)
    mkdir -p "$out/logs"
    TAIL=6 stage tma_reduce_probe 120 python3 tools/gluon_tma_reduce_probe.py \
      "$out/logs/gluon_tma_reduce_probe.json"
    (
      # the branch's own commit labels what runs in its tree (main's would mislabel the log)
      cd .ab/tmadq && export PYTHONPATH=$PWD FLASHCORE_COMMIT=58d199b
      bash tools/gpu_test_shards.sh "$out/tma_dq_tests" 200 \
        "bwd:8:-m gpu tests/test_backward_hopper.py"
      TAIL=20 stage tma_dq_check 240 python3 tools/backward_hopper_check.py \
        "$out/logs/backward_hopper_tma_dq_check.json" --kernel dq_sum --grid-stride 2
    )
    ;;
  ws_a)
    bash .fa4a/install.sh
    ran_scope_check
    bash tools/gpu_test_shards.sh "$out/tests" 200 "ws:8:-m gpu tests/test_backward_hopper_ws.py" \
      "shared:4:-m gpu tests/test_backward_hopper.py -k gluon_ws"
    ws_sanitize_and_check
    ;;
  ws_b)
    bash tools/gpu_test_shards.sh "$out/tests" 100 "ws:8:-m gpu tests/test_backward_hopper_ws.py"
    backward_speed 400
    ;;
  ws_c)
    ran_scope_check
    bash tools/gpu_test_shards.sh "$out/tests" 120 "ws:8:-m gpu tests/test_backward_hopper_ws.py"
    ws_sanitize_and_check
    TAIL=20 stage fp8 200 python3 -m flashcore fp8 --record
    ;;
  det_a)
    bash .fa4a/install.sh
    ws_tests_and_sanitize
    # into $out/results itself: a record under $out/grid/results/<gpu>/ is too deep to come back
    BWD_TIMEOUT=200 bash tools/gpu_backward_record.sh "$out" grid | tail -n 30
    ;;
  det_b)
    ws_check backward_ws_modes ws_modes 420 "${WS_MODES_ARGS[@]}"
    backward_speed 450 flashcore_deterministic
    ;;
  ws_modes)
    ws_tests_and_sanitize
    ws_check backward_ws_modes ws_modes 420 "${WS_MODES_ARGS[@]}"
    TAIL=8 stage race_probe_unsync 90 compute-sanitizer --tool racecheck \
      python3 tools/mbarrier_race_probe.py --variant unsync
    ;;
  ws_record)
    ran_scope_check
    ws_sanitize 170
    ws_check backward_ws_modes ws_modes 420 "${WS_MODES_ARGS[@]}"
    ;;
  dq_rows)
    ran_scope_check
    bash tools/gpu_test_shards.sh "$out/tests" 150 "ws:8:-m gpu tests/test_backward_hopper_ws.py" \
      "shared:4:-m gpu tests/test_backward_hopper.py -k gluon_ws"
    ws_check backward_ws_modes ws_modes 420 "${WS_MODES_ARGS[@]}"
    ;;
  grid_a)
    bash .fa4a/install.sh
    # into $out/results itself: a record under $out/grid/results/<gpu>/ is too deep to come back
    BWD_TIMEOUT=300 bash tools/gpu_backward_record.sh "$out" grid | tail -n 30
    ;;
  speed_b)
    backward_speed 480 flashcore_deterministic
    ;;
  train_speed)
    mkdir -p "$out/logs"
    TAIL=6 stage training_speed 240 python3 tools/training_speed_rounds.py \
      "$out/logs/training_speed_rounds_${FLASHCORE_COMMIT:-unknown}.json" --batch 4 --seqlen 2048
    ;;
  breakdown)
    mkdir -p "$out/logs"
    TAIL=6 stage backward_breakdown 300 python3 tools/backward_breakdown.py \
      "$out/logs/backward_breakdown_${FLASHCORE_COMMIT:-unknown}.json"
    ;;
  breakdown_fa4)
    mkdir -p "$out/logs"
    TAIL=6 stage backward_breakdown_fa4 300 python3 tools/backward_breakdown.py \
      "$out/logs/backward_breakdown_fa4_${FLASHCORE_COMMIT:-unknown}.json" --peers fa4
    ;;
  ws_trials)
    mkdir -p "$out/logs"
    for trial in ${WS_TRIALS:?}; do
      name=${trial%%:*}; commit=${trial##*:}
      trial_tree_tests "$name" "$commit" 150 "ws:8:-m gpu tests/test_backward_hopper_ws.py"
      TAIL=20 stage "ab_$name" 240 python3 tools/ab_timing.py "ws_trial_${name}_ab_timing" \
        --other ".ab/$name" --other-commit "$commit" --rounds 3 --suite "${WS_TRIAL_SUITE:-ws_backward}"
    done
    ;;
  race_probe)
    for v in plain no_warp_bar expect_tx unsync; do
      TAIL=8 stage "race_probe_$v" 90 compute-sanitizer --tool racecheck \
        python3 tools/mbarrier_race_probe.py --variant "$v"
    done
    ;;
  turns)
    bash tools/gpu_test_shards.sh "$out/tests" 300 "fwd:12:-m gpu tests/test_forward_hopper.py"
    TAIL=40 STAGE_HIDE="it/s\]" stage turns_speed 330 python3 tools/gpu_forward_hopper.py \
      "$out/logs/forward_turns_${FLASHCORE_COMMIT:-unknown}.json" --head-dims 128,64,256 \
      --variants mbar_turns,named_turns --rounds 3
    IFS=';' read -ra cases <<<"${TURNS_NCU_CASES:-128 8192 0;64 8192 1}"
    for case in "${cases[@]}"; do
      read -r d s causal <<<"$case"
      for turns in 1 2; do
        ncu_source_page "fwd_turns${turns}_d${d}$([ "$causal" = 1 ] && echo _causal)" \
          _fa3_fwd_kernel 150 "" python3 tools/gluon_forward_workload.py "$d" "$s" "$causal" "$turns"
      done
    done
    ;;
  qbufs)  # (run at a0ed685, the one tree with the kernel's Q_BUFS and the q1/q2 variants; FA4
    # not needed; carry .ab/masklimit, made here by `mkdir -p .ab/masklimit && git
    # archive <commit> flashcore tests pyproject.toml | tar -x -C .ab/masklimit`, MASKLIMIT_COMMIT
    # its commit) the Gluon forward's GPU tests in this tree (two Q buffers included) and in the
    # mask trial's, side by side; one and two Q buffers beside the Triton kernel and cuDNN
    # (logs/forward_qbufs_<commit>.json); the Gluon forward at its shipped config against the
    # trial's (tools/ab_timing.py --suite gluon_forward: speed and bitwise equality)
    bash tools/gpu_test_shards.sh "$out/tests" 280 "fwd:10:-m gpu tests/test_forward_hopper.py" &
    trial_tree_tests masklimit "${MASKLIMIT_COMMIT:?}" 280 "fwd:6:-m gpu tests/test_forward_hopper.py"
    wait
    mkdir -p "$out/logs"
    TAIL=40 STAGE_HIDE="it/s\]" stage qbufs_speed 150 python3 tools/gpu_forward_hopper.py \
      "$out/logs/forward_qbufs_${FLASHCORE_COMMIT:-unknown}.json" --head-dims 64,128 \
      --variants q1,q2 --rounds 3
    TAIL=30 stage ab_masklimit 200 python3 tools/ab_timing.py masklimit_ab_timing \
      --other .ab/masklimit --other-commit "$MASKLIMIT_COMMIT" --rounds 3 --suite gluon_forward
    ;;
  tmask)  # (FA4 not needed; carry .ab/tmask, made here by `mkdir -p .ab/tmask && git archive
    # <commit> flashcore tests pyproject.toml | tar -x -C .ab/tmask`, TMASK_COMMIT its commit)
    # the Gluon forward's GPU tests here and the Triton forward's in the trial's tree, side by
    # side; the Triton forward against the trial's (ab_timing --suite triton_forward); Nsight
    # Compute's source page of the Gluon forward at D64 S 2K causal and full (shipped turn)
    bash tools/gpu_test_shards.sh "$out/tests" 330 "fwd:10:-m gpu tests/test_forward_hopper.py" &
    trial_tree_tests tmask "${TMASK_COMMIT:?}" 330 "tfwd:6:-m gpu tests/test_forward.py"
    wait
    mkdir -p "$out/logs"
    TAIL=16 stage ab_tmask 150 python3 tools/ab_timing.py tmask_ab_timing \
      --other .ab/tmask --other-commit "$TMASK_COMMIT" --rounds 3 --suite triton_forward
    for causal in 1 0; do
      ncu_source_page "fwd_d64_s2k$([ "$causal" = 1 ] && echo _causal)" _fa3_fwd_kernel 90 "" \
        python3 tools/gluon_forward_workload.py 64 2048 "$causal" 1
    done
    ;;
  bn64)  # (FA4 not needed) the Gluon forward with 64-key tiles beside its shipped config at
    # short S (logs/forward_bn64_<commit>.json), D64 three and two warpgroups, D128
    mkdir -p "$out/logs"
    TAIL=30 STAGE_HIDE="it/s\]" stage bn64_d64 120 python3 tools/gpu_forward_hopper.py \
      "$out/logs/forward_bn64_d64_${FLASHCORE_COMMIT:-unknown}.json" --head-dims 64 \
      --seqlens 1024,2048,4096,8192 --variants shipped,bn64,bn64_wg2 --rounds 3
    TAIL=30 STAGE_HIDE="it/s\]" stage bn64_d128 100 python3 tools/gpu_forward_hopper.py \
      "$out/logs/forward_bn64_d128_${FLASHCORE_COMMIT:-unknown}.json" --head-dims 128 \
      --seqlens 1024,2048,4096 --variants shipped,bn64 --rounds 3
    ;;
  trial_fwd)  # (FA4 not needed; carry .ab/<name>, made here by `mkdir -p .ab/<name> && git
    # archive <commit> flashcore tests pyproject.toml | tar -x -C .ab/<name>`; TRIAL=name:commit)
    # the Gluon forward's GPU tests in the trial's tree, then the trial (B) against this tree (A)
    # at the Gluon forward's shipped configs (ab_timing --suite gluon_forward: speed and output
    # bytes; <name>_ab_timing.json)
    name=${TRIAL%%:*}; commit=${TRIAL##*:}
    trial_tree_tests "$name" "$commit" 240 "fwd:12:-m gpu tests/test_forward_hopper.py"
    TAIL=30 stage "ab_$name" 200 python3 tools/ab_timing.py "${name}_ab_timing" \
      --other ".ab/$name" --other-commit "$commit" --rounds 3 --suite gluon_forward
    ;;
  d64_dispatch)
    kvcache_lse_tests
    mkdir -p "$out/logs"
    TAIL=30 stage d64_sweep 330 python3 tools/gpu_forward_hopper.py \
      "$out/logs/d64_gluon_sweep_${FLASHCORE_COMMIT:-unknown}.json" --head-dims 64 --variants shipped
    ;;
  trial_tfwd)
    name=${TRIAL%%:*}; commit=${TRIAL##*:}
    trial_tree_tests "$name" "$commit" 330 "tfwd:8:-m gpu tests/test_forward.py tests/test_varlen.py"
    TAIL=30 stage "ab_$name" 200 python3 tools/ab_timing.py "${name}_ab_timing" \
      --other ".ab/$name" --other-commit "$commit" --rounds 3 --suite triton_forward
    ;;
  turns_a)
    bash .fa4a/install.sh
    ran_scope_check
    FLASHCORE_FORWARD_HOPPER=always TAIL=12 stage sanitize_forward_hopper 300 python3 -m flashcore \
      sanitize --workloads forward_hopper forward_hopper_walk --jobs 6
    TAIL=12 stage launch 150 python3 -m flashcore launch --record
    ;;
  scale_a)
    bash .fa4a/install.sh
    ran_scope_check
    TAIL=6 stage gpu_tests_scale 240 python3 -m pytest -q -p no:cacheprovider tests/test_errors.py \
      tests/test_sdpa_backend.py tests/test_launch.py
    kvcache_lse_tests
    TAIL=12 stage launch 150 python3 -m flashcore launch --record
    ;;
  ncu_sass_ws)  # (FA4 not needed) Nsight Compute's source page of the warp-specialized
    # backward (tools/ws_backward_workload.py), one case per "D S CAUSAL DET" in NCU_SASS_CASES
    # (;-separated; default D256 S 8K full in both modes: where the deterministic mode pays
    # most), parsed into logs/ncu_sass_ws_<mode>_d<D>_<commit>.json (ncu_source_page)
    IFS=';' read -ra cases <<<"${NCU_SASS_CASES:-256 8192 0 1;256 8192 0 0}"
    for case in "${cases[@]}"; do
      read -r d s causal det <<<"$case"
      ncu_source_page \
        "$([ "$det" = 1 ] && echo det || echo atomic)_d${d}$([ "$causal" = 1 ] && echo _causal)" \
        _bwd_hopper_ws 240 ws_ python3 tools/ws_backward_workload.py "$d" "$s" "$causal" "$det"
    done
    ;;
  ncu_ws)  # (FA4 not needed) Nsight Compute on the default backward where it runs the
    # warp-specialized Gluon kernel (D128, D64: S 8K, ncu_compare.py's backward shape), parsed
    # into a log (logs/ncu_backward_ws_<commit>.json), not a record; NCU_WS_IMPLS: the impls
    # (default flashcore; flashcore_nondeterministic: the atomic mode)
    mkdir -p "$out/ncu"
    read -ra NCU <<<"$(python3 -c 'import sys; sys.path.insert(0, "tools")
import ncu_compare; print(ncu_compare.NCU_COMMAND)')"  # the record's own command line
    for impl in ${NCU_WS_IMPLS:-flashcore}; do
      for d in 128 64; do
        timeout 150 "${NCU[@]}" python3 tools/ncu_compare.py run backward "$impl" "$d" \
          >"$out/ncu/ncu_backward_${impl}_d$d.csv" 2>>"$out/ncu/ncu_err.log"
        echo "ncu backward $impl D$d: exit $?"
      done
    done
    python3 - "$out" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "tools")
import ncu_compare as n
from flashcore.results import provenance
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/ncu/ncu_backward_*_d*.csv")):
    rows[os.path.basename(f)] = n.parse_csv_rows(open(f).read())
    for k in rows[os.path.basename(f)]:
        top = sorted(k["stalls_per_issue"].items(), key=lambda kv: -(kv[1] or 0))[:5]
        print(os.path.basename(f), k["kernel"][:40], k["duration_ns"], "tensor pipe",
              k["tensor_pipe_pct_of_peak_active"], "issue", k["issue_active_per_cycle"], top)
commit = os.environ.get("FLASHCORE_COMMIT", "unknown")
with open(f"{out}/ncu_backward_ws_{commit}.json", "w") as fh:
    json.dump({"provenance": provenance(), "command": n.NCU_COMMAND, "rows": rows}, fh, indent=1)
PY
    ;;
  fp8_ab)
    TAIL=16 stage fp8_ab 500 python3 tools/ab_timing.py fp8_schedule_ab_timing \
      --other .ab/exp2k0 --other-commit b831276 --suite fp8 --rounds 5
    ;;
  check)
    bash .fa4a/install.sh
    bash tools/gpu_test_shards.sh "$out/tests" 400 "dv:8:-m gpu tests/test_value_head_dim.py"
    ;;
  stale)
    bash .fa4a/install.sh
    cli() { local name=$1 secs=$2; shift 2; stage "$name" "$secs" python3 -m flashcore "$@"; }
    TAIL=6 cli varlen 330 varlen --record
    TAIL=16 STAGE_HIDE="it/s\]" cli decode 120 bench --suite decode --topic decode --record
    TAIL=12 stage decode_splits 60 python3 tools/decode_splits.py --record
    ;;
  current_a)
    bash .fa4a/install.sh
    # (its records follow FLASHCORE_RESULTS_DIR, exported above, like every stage's)
    TAIL=40 stage evidence 330 bash tools/gpu_evidence.sh "$out/evidence" 300
    TAIL=6 stage feature_costs 220 python3 flashcore/studies/feature_costs.py --record
    TAIL=6 STAGE_HIDE="it/s\]" stage decode 100 python3 -m flashcore bench --suite decode --topic decode --record
    TAIL=4 stage decode_splits 50 python3 tools/decode_splits.py --record
    ;;
  current_b)
    TAIL=12 stage dv_speed 180 python3 -m flashcore.studies.value_head_dim_speed --record
    TAIL=8 stage models 170 python3 -m flashcore models --record
    TAIL=4 STAGE_HIDE="it/s\]" stage paged 90 python3 -m flashcore bench --suite paged --record
    # The notebooks read the committed records: this stage writes into the tree's results/.
    env -u FLASHCORE_RESULTS_DIR BUDGET=230 NB_TIMEOUT=140 bash tools/gpu_reproduce_timing.sh "$out/nb" \
      notebooks/09_*.ipynb notebooks/02_*.ipynb | tail -n 6
    tar -xzf "$out/nb/records.tar.gz" -C "$out" 2>/dev/null  # results/<gpu>/... beside the rest
    ;;
  ncu)
    TAIL=30 stage ncu 300 bash tools/gpu_ncu_compare.sh "$out/ncu"
    TAIL=20 stage fp8 270 python3 -m flashcore fp8 --record
    ;;
  ncu_fa4)  # (carry .fa4b) FA4's ncu cases alone, after a session that ran the others
    TAIL=30 NCU_ONLY=fa4 stage ncu 200 bash tools/gpu_ncu_compare.sh "$out/ncu"
    ;;
  dv_speed)
    TAIL=12 stage dv_speed 200 python3 -m flashcore.studies.value_head_dim_speed --record
    ;;
  dv)
    bash tools/gpu_test_shards.sh "$out/tests" 150 "doors:4:-m gpu tests/test_flash_attn_interface.py"
    TAIL=40 stage dv_speed 330 python3 -m flashcore.studies.value_head_dim_speed --record
    TAIL=20 stage paged 200 python3 -m flashcore bench --suite paged --record
    ;;
  host_a)
    bash .fa4a/install.sh
    ran_scope_check
    TAIL=4 stage gpu_tests_host 240 python3 -m pytest -q -p no:cacheprovider -m gpu -x \
      tests/test_launch.py tests/test_decode.py tests/test_paged_kv.py ${HOST_TESTS_K:+-k "$HOST_TESTS_K"}
    TAIL=4 stage memcheck_decode 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py tests/test_launch.py \
      -k "returns_the_lse or decode_cached_path or growing_cache"
    TAIL=12 stage launch 150 python3 -m flashcore launch --record
    ;;
  host_b)  # (FA4 not needed) the "ran" scope check; the GPU tests of every file the lean
    # launch paths touch (launcher, decode and paged, SDPA door, op, flash_attn door, v's own
    # head dim, both forwards), 16 shards; launch.json; with .ab/before carried, every door's
    # host time against that tree (tools/door_host_profile.py --base: logs/door_host_ab_*)
    ran_scope_check
    bash tools/gpu_test_shards.sh "$out/tests_host" 240 "host:16:-m gpu tests/test_launch.py \
tests/test_decode.py tests/test_paged_kv.py tests/test_sdpa_backend.py tests/test_ops.py \
tests/test_flash_attn_interface.py tests/test_value_head_dim.py tests/test_forward.py \
tests/test_forward_hopper.py"
    TAIL=12 stage launch 150 python3 -m flashcore launch --record
    if [ -d .ab/before ]; then  # made as forward's .ab/before (see above)
      mkdir -p "$out/logs"
      TAIL=20 stage door_ab 170 python3 tools/door_host_profile.py \
        "$out/logs/door_host_ab_${FLASHCORE_COMMIT:-unknown}.json" --base .ab/before \
        --shapes 0 3 5 --rounds 4 --calls 1000
    fi
    ;;
  forward)
    TAIL=40 STAGE_HIDE="it/s\]" stage perf 560 python3 -m flashcore bench --suite all \
      --dtype bfloat16 --s 1024 2048 4096 8192 16384 \
      --impls flashcore flashcore_triton sdpa_flash sdpa_cudnn flex fa4 \
      --decode-impls flashcore_decode sdpa_flash sdpa_cudnn --reps 32 --record
    if [ -d .ab/before ]; then
      TAIL=9 stage decode_host_ab 150 python3 tools/decode_host_ab.py "$out/decode_host_ab.json" \
        --base .ab/before --rounds 5
    fi
    ;;
  backward)
    backward_speed 560
    ;;
  rerecord_a)
    bash .fa4a/install.sh
    ran_scope_check
    TAIL=20 stage fp8 300 python3 -m flashcore fp8 --record
    BWD_TIMEOUT=200 bash tools/gpu_backward_record.sh "$out/grid" grid | tail -n 30
    ;;
  rerecord_b)
    backward_speed 300
    TAIL=4 STAGE_HIDE="it/s\]" stage paged 90 python3 -m flashcore bench --suite paged --record
    TAIL=12 stage models 200 python3 -m flashcore models --record
    ;;
  probes)
    ran_scope_check
    mla_probes 150
    NCU_ONLY=fp8 TAIL=8 stage ncu_fp8 200 bash tools/gpu_ncu_compare.sh "$out/ncu"
    ;;
  rerecord_c)
    TAIL=6 stage varlen 260 python3 -m flashcore varlen --record
    TAIL=6 stage feature_costs 220 python3 flashcore/studies/feature_costs.py --record
    mla_probes 120
    ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
tar -czf "$out/records.tar.gz" -C "$out" results && echo "records: $(tar -tzf "$out/records.tar.gz" | grep -c json)"
