#!/bin/bash
# Issue 13 on the GPU: host profile of the launch path, GPU tests of the launch cache and the
# transformers integration, and the records launch.json and e2e_transformers.json (written
# under FLASHCORE_RESULTS_DIR). The varlen record: python -m flashcore varlen --record.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
cd "$(dirname "$0")/.."
timeout 70 python3 tools/profile_launch.py --cprofile > $OUT/profile.log 2>&1
head -24 $OUT/profile.log
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_launch.py tests/test_ops.py \
  -k "not gpu_bf16" 2>&1 | tail -6 | tee $OUT/tests.log
timeout 240 python3 - <<'PY' 2>&1 | tee $OUT/records.log
import torch
from flashcore.results import write_result
from flashcore.studies import launch, e2e
rows = launch.measure(calls=300, repeats=5, replays=200)
for line in launch.summary(rows):
    print(line)
print("recorded", write_result("launch", {"rows": rows, "calls": 300, "repeats": 5,
      "method": "eager: wall time of 300 back-to-back calls / 300, median of 5 repeats in alternating order; graph: CUDA-graph replay, median of 3"}))
check = e2e.run_e2e("cuda", torch.float32, steps=32)
print("fp32 check: logits", check["logits"]["passed"], check["logits"]["ratio"], "per layer", check["per_layer"]["passed"],
      check["per_layer"]["worst_ratio"], "greedy identical", check["generation"]["identical"],
      check["generation"]["compared_steps"])
gen = e2e.issue_generation_speed(repeats=2)
for r in gen:
    print({k: v for k, v in r.items() if not k.endswith("repeats")})
print("recorded", write_result("e2e_transformers", {"check_fp32": check, "generation": gen}))
PY
