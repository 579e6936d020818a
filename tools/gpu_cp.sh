#!/usr/bin/env bash
# Context parallelism on N GPUs of one host (default 2): the GPU correctness grid, then the
# bench (flashcore's ring with and without transfers, the transfers alone, one GPU on the
# whole sequence, PyTorch's context_parallel + SDPA cuDNN / flash), one record:
#   results/<gpu>-x<N>/context_parallel.json
# Usage on a CUDA machine, repo root:
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_cp.sh <outdir> [extra `cp bench` args, e.g. --wide]
# Default: S 128K..1M for every impl, 2M for flashcore's ring alone; about 4 minutes on two
# H200s. --wide: every impl to 2M and the ring to 4M (about 20 minutes).
#   FLASHCORE_COMMIT=<hash> bash tools/gpu_cp.sh <outdir> torch-check [--seqlen S]
# only re-checks PyTorch's context_parallel + SDPA output at one S (default 128K; about a
# minute): results/<gpu>-x<N>/context_parallel_torch_check.json.
set -u
out=${1:?usage: bash tools/gpu_cp.sh <outdir> [torch-check | cp bench args]}; shift
mkdir -p "$out/results"
export FLASHCORE_RESULTS_DIR="$out/results" PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast stays off: the ring uses point-to-point sends only.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nproc=${NPROC:-2}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -lt "$nproc" ]; then
  echo "needs $nproc GPUs, found $ngpu"; exit 2
fi
nvidia-smi topo -m >"$out/topo.txt" 2>&1
t0=$SECONDS
if [ "${1:-}" = torch-check ]; then
  shift
  python3 -m torch.distributed.run --standalone --nproc-per-node "$nproc" \
    -m flashcore.studies.context_parallel --record "$@" >"$out/cp_torch_check.log" 2>&1
  echo "torch check rc=$? $((SECONDS - t0)) s"
  tail -n 20 "$out/cp_torch_check.log"
  exit 0
fi
python3 -m torch.distributed.run --standalone --nproc-per-node "$nproc" -m flashcore cp bench --record "$@" \
  >"$out/cp_bench.log" 2>&1
echo "cp bench rc=$? $((SECONDS - t0)) s"
grep -E "cases on|FAIL|Error|error" "$out/cp_bench.log" | grep -v "passed True" | head -20
python3 - "$out/results" <<'EOF'
import glob, json, sys
for path in glob.glob(f"{sys.argv[1]}/*/context_parallel.json"):
    rec = json.load(open(path))
    print(path.split("/")[-2], rec["provenance"]["commit"][:10], "summary:", rec.get("summary"))
    for r in rec.get("rows", []):
        extra = "".join(f" {k}={r[k]:.3f}" for k in ("scaling_efficiency", "comm_hidden_fraction") if r.get(k) is not None)
        print(f"  S={r['S']:>8} causal={r['causal']!s:5} {r['impl']:<20} {r['time_ms']:10.1f} ms "
              f"{r['tflops'] or 0:6.0f} TFLOP/s peak {r['peak_mem_gib']} GiB{extra}")
    for r in rec.get("torch_cp_checks", []):
        print("  torch check:", r)
    for r in rec.get("skipped", []):
        print("  skipped:", r)
EOF
