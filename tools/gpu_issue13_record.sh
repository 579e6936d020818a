#!/bin/bash
# Issue 13 on the GPU: GPU tests of the launch cache, decode and the transformers
# integration; the records launch.json and e2e_transformers.json (written under
# FLASHCORE_RESULTS_DIR); decode GPU time by split count beside SDPA
# (tools/decode_splits.py); where a generation step's time goes
# (tools/profile_generate.py); a host profile of the launch path; the varlen GPU tests.
# Logs go to $OUT (packed into one logs.tgz at the end, so that the records and the logs
# are four files); a short summary is printed last. The varlen record:
# python -m flashcore varlen --record.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
cd "$(dirname "$0")/.."
timeout ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider tests/test_launch.py \
  tests/test_decode.py tests/test_ops.py -k "not gpu_bf16" > $OUT/tests.log 2>&1
timeout ${RECORDS_S:-150} python3 - > $OUT/records.log 2>&1 <<'PY'
import torch
from flashcore.results import write_result
from flashcore.studies import launch, e2e
rows = launch.measure(calls=300, repeats=5, replays=200)
for line in launch.summary(rows):
    print(line)
print("recorded", write_result("launch", {"rows": rows, "calls": 300, "repeats": 5,
      "method": "eager: wall time of 300 back-to-back calls / 300, median of 5 repeats in alternating order; graph: CUDA-graph replay, median of 3; 'growing' rows: every call's cache one token longer (cycling over 256 lengths)"}))
check = e2e.run_e2e("cuda", torch.float32, steps=32)
print("fp32 check: logits", check["logits"]["passed"], check["logits"]["ratio"], "per layer", check["per_layer"]["passed"],
      check["per_layer"]["worst_ratio"], "greedy identical", check["generation"]["identical"],
      check["generation"]["compared_steps"])
gen = e2e.issue_generation_speed(repeats=9)
for r in gen:
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if not k.endswith("repeats")})
print("recorded", write_result("e2e_transformers", {"check_fp32": check, "generation": gen}))
PY
timeout ${SPLITS_S:-70} python3 tools/decode_splits.py --record > $OUT/splits.log 2>&1
timeout ${GENPROF_S:-60} python3 tools/profile_generate.py 1 8 > $OUT/profile_generate.log 2>&1
timeout ${PROFILE_S:-40} python3 tools/profile_launch.py > $OUT/profile.log 2>&1
timeout ${VARLEN_S:-50} python3 -m pytest -q -x -p no:cacheprovider tests/test_varlen.py > $OUT/varlen_tests.log 2>&1
echo "== tests"; tail -1 $OUT/tests.log; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -8
echo "== varlen tests"; tail -1 $OUT/varlen_tests.log
echo "== records"; grep -v "^recorded" $OUT/records.log | grep -v Warning | tail -12 | cut -c1-400
echo "== splits"; grep "^B" $OUT/splits.log | sed 's/^\(.*\) | chosen/chosen/' | cut -c1-150
echo "== generate"; grep -E "tok/s|Error" $OUT/profile_generate.log
echo "== profile"; grep -E "gluon" $OUT/profile.log; grep -E " host " $OUT/profile.log | grep -E "growing|decode|ops|sdpa D|lean|Gluon" | cut -c1-80
tar czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log) && (cd $OUT && rm -f *.log)
