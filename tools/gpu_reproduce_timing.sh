#!/usr/bin/env bash
# On a CUDA machine, in one session: notebook 06's power/clock study (NVML, observation only),
# then every notebook's GPU profile timed with papermill (default sweeps) and recorded.
# Usage: FLASHCORE_COMMIT=<hash> bash tools/gpu_reproduce_timing.sh <outdir> [notebooks/NN_name.ipynb ...]
# Writes <outdir>/records.tar.gz (every record the run wrote, paths from the repo root),
# <outdir>/results/<gpu>/{reproduce_timing,timing_power}.json, <outdir>/run.log and
# <outdir>/executed_notebooks.tar.gz (the executed copies; the committed notebooks are not touched).
set -u
out=$1; shift
if [ $# -gt 0 ]; then nbs=("$@"); else nbs=(notebooks/0[1-6]_*.ipynb); fi
mkdir -p "$out/results" "$out/nb"
# Records go to this tree's results/ (the notebooks also read the committed ones from there);
# what the run writes is copied to <outdir>/results at the end.
marker=$(mktemp); touch "$marker"
. tools/device_prefix.sh
log="$out/run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv >"$log" 2>&1
echo "== power study" | tee -a "$log"
timeout "${POWER_TIMEOUT:-120}" python3 -m flashcore leak --power --record \
  --kernel "${POWER_KERNELS:-}" >>"$log" 2>&1
echo "   rc=$?" | tee -a "$log"
grep -E "power read|time .*SM clock" "$log" | tail -n 20
echo "== notebooks" | tee -a "$log"
python3 tools/time_reproduce.py --profile gpu --timeout "${NB_TIMEOUT:-110}" --out-dir "$out/nb" --record \
  "${nbs[@]}" 2>&1 | tee -a "$log"
tar -czf "$out/executed_notebooks.tar.gz" -C "$out" nb && rm -rf "$out/nb"
# Every record the run wrote goes into one archive (the notebooks' quick records among them);
# the timing and power records also come back as plain files.
find results -name '*.json' -newer "$marker" >"$out/new_records.txt"
tar -czf "$out/records.tar.gz" -T "$out/new_records.txt"
grep -E "/(reproduce_timing|timing_power)\.json$" "$out/new_records.txt" | while read -r f; do
  mkdir -p "$out/$(dirname "$f")"; cp "$f" "$out/$f"; done
cat "$out/new_records.txt" | tee -a "$log"; rm "$out/new_records.txt"
