#!/usr/bin/env bash
# Time every notebook's GPU profile (papermill, default quick sweeps) on a CUDA machine and
# record the rows in results/<gpu>/reproduce_timing.json (one row per notebook, each naming
# the commit and date it ran at; rows of notebooks not run now are kept).
#
# Usage, repo root:
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_reproduce_timing.sh <outdir> A     # 02 03 01 08
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_reproduce_timing.sh <outdir> B     # 07 05 04 06
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_reproduce_timing.sh <outdir> notebooks/0[1-9]_*.ipynb
# The two groups split the notebooks by their recorded H100 times (A about 260 s, B about
# 215 s), so each fits one call of under 9 minutes. Between the two calls, copy the first
# call's <outdir>/results/<gpu>/reproduce_timing.json over the tree's, so the second call
# merges with it rather than with the committed record.
#
# Environment: NB_TIMEOUT (seconds per notebook, default 240), BUDGET (seconds for the whole
# group: no notebook is given more than what is left of it, default 480), POWER=1 (first run
# notebook 06's NVML power/clock study, POWER_TIMEOUT seconds, default 120; off by default),
# SWEEP (default quick).
#
# Writes <outdir>/results/<gpu>/reproduce_timing.json (and timing_power.json with POWER=1),
# <outdir>/records.tar.gz (every record the run wrote, paths from the repo root),
# <outdir>/run.log and <outdir>/executed_notebooks.tar.gz (the executed copies; the
# committed notebooks are not touched).
set -u
out=${1:?usage: bash tools/gpu_reproduce_timing.sh <outdir> A|B|notebooks...}; shift
case "${1:-all}" in
  A) nbs=(notebooks/02_*.ipynb notebooks/03_*.ipynb notebooks/01_*.ipynb notebooks/08_*.ipynb) ;;
  B) nbs=(notebooks/07_*.ipynb notebooks/05_*.ipynb notebooks/04_*.ipynb notebooks/06_*.ipynb) ;;
  all) nbs=(notebooks/0[1-9]_*.ipynb) ;;
  *) nbs=("$@") ;;
esac
if [ -z "${FLASHCORE_COMMIT:-}" ] && ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "no git here: set FLASHCORE_COMMIT to the commit this tree was copied from" >&2
  exit 2
fi
mkdir -p "$out/results" "$out/nb"
# Records go to this tree's results/ (the notebooks also read the committed ones from there);
# what the run writes is copied to <outdir> at the end.
marker=$(mktemp); touch "$marker"
. tools/device_prefix.sh
log="$out/run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv >"$log" 2>&1
if [ "${POWER:-0}" = 1 ]; then
  echo "== power study" | tee -a "$log"
  timeout "${POWER_TIMEOUT:-120}" python3 -m flashcore leak --power --record \
    --kernel "${POWER_KERNELS:-}" >>"$log" 2>&1
  echo "   rc=$?" | tee -a "$log"
  grep -E "power read|time .*SM clock" "$log" | tail -n 20
fi
echo "== notebooks: ${nbs[*]}" | tee -a "$log"
python3 tools/time_reproduce.py --profile gpu -p SWEEP "${SWEEP:-quick}" \
  --timeout "${NB_TIMEOUT:-240}" --budget "${BUDGET:-480}" --out-dir "$out/nb" --record --merge \
  "${nbs[@]}" 2>&1 | tee -a "$log"
tar -czf "$out/executed_notebooks.tar.gz" -C "$out" nb && rm -rf "$out/nb"
# Every record the run wrote goes into one archive (the notebooks' quick records among them);
# the timing and power records also come back as plain files.
find results -name '*.json' -newer "$marker" >"$out/new_records.txt"
tar -czf "$out/records.tar.gz" -T "$out/new_records.txt"
grep -E "/(reproduce_timing|timing_power)\.json$" "$out/new_records.txt" | while read -r f; do
  mkdir -p "$out/$(dirname "$f")"; cp "$f" "$out/$f"; done
cat "$out/new_records.txt" | tee -a "$log"; rm "$out/new_records.txt" "$marker"
