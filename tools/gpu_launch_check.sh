#!/bin/bash
# GPU checks of the launch path, varlen, softcap/window (issue 13): tests, host profile,
# launch table preview. Logs under $OUT.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
python3 -m pytest -q -x -p no:cacheprovider tests/test_launch.py tests/test_varlen.py tests/test_decode.py \
  tests/test_ops.py 2>&1 | tail -25 | tee $OUT/tests.log
python3 tools/profile_launch.py --cprofile 2>&1 | tee $OUT/profile.log | head -60
python3 - <<'PY' 2>&1 | tee $OUT/launch_preview.log
from flashcore.studies import launch
rows = launch.measure(calls=200, repeats=3, replays=100)
for line in launch.summary(rows):
    print(line)
for r in rows:
    if r.get("error"):
        print(r["shape"], r["impl"], "error:", r["error"])
PY
