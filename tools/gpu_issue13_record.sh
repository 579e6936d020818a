#!/bin/bash
# Issue 13 on the GPU: tests of the launch path / varlen / ops, host profile, and the records
# launch.json, varlen.json, e2e_transformers.json (written under FLASHCORE_RESULTS_DIR).
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
timeout 110 python3 -m pytest -q -x -p no:cacheprovider tests/test_launch.py tests/test_varlen.py \
  tests/test_ops.py -k "not gpu_bf16" 2>&1 | tail -15 | tee $OUT/tests.log
timeout 40 python3 tools/profile_launch.py 2>&1 | tee $OUT/profile.log
timeout 200 python3 - <<'PY' 2>&1 | tee $OUT/records.log
import torch
from flashcore.results import write_result
from flashcore.studies import launch, e2e
rows = launch.measure(calls=300, repeats=5, replays=200)
print("launch measured", flush=True)
for line in launch.summary(rows):
    print(line)
print("recorded", write_result("launch", {"rows": rows, "calls": 300, "repeats": 5,
      "method": "eager: wall time of 300 back-to-back calls / 300, median of 5 repeats in alternating order; graph: CUDA-graph replay, median of 3"}))
results = [launch.run_varlen_case(c, "cuda", torch.bfloat16) for c in launch.varlen_cases(seed=11, count=240)]
failed = [r for r in results if not r["passed"]]
speed = launch.varlen_speed()
print("varlen grid:", len(results), "cases,", len(failed), "failed; speed ms", speed["ms"])
print("recorded", write_result("varlen", {"grid": {"cases": len(results), "failed": len(failed), "dtype": "bfloat16",
      "worst_ratio": max(r["ratio"] for r in results), "results": results}, "speed": speed}))
check = e2e.run_e2e("cuda", torch.float32, steps=32)
print("fp32 check: logits", check["logits"]["passed"], check["logits"]["ratio"], "per layer", check["per_layer"]["passed"],
      check["per_layer"]["worst_ratio"], "greedy identical", check["generation"]["identical"],
      check["generation"]["compared_steps"])
gen = e2e.issue_generation_speed()
for r in gen:
    print({k: v for k, v in r.items() if not k.endswith("repeats")})
print("recorded", write_result("e2e_transformers", {"check_fp32": check, "generation": gen}))
PY
