"""One forward launch per implementation for Nsight Compute (run under ncu, which picks the
launch after the warm-up by --launch-skip). D=128, S=8192, B=2, H=16, bf16, non-causal.

    python tools/ncu_forward.py {hopper,triton,cudnn} [--causal]       (under ncu, GPU)
    python tools/ncu_forward.py --record DIR COMMIT DATE                  (parse, any machine)

The second form reads DIR/ncu_{hopper,triton,cudnn}.csv (``ncu --csv --page raw``) and writes
results/nvidia-h100-80gb-hbm3/ncu_forward.json: tensor-pipe utilization, issue activity,
and the stall reasons per issued instruction of each kernel."""

import csv
import io
import json
import math
import sys

STALLS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "gmma",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained"  # HGMMA counts here
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "tensor_pipe_pct_of_peak_active": TENSOR_PIPE + "_active",
    "tensor_pipe_pct_of_peak_elapsed": TENSOR_PIPE + "_elapsed",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_active_per_cycle": "smsp__issue_active.avg.per_cycle_active",
    "warps_active_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
    "registers_per_thread": "launch__registers_per_thread",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "shared_mem_per_block": "launch__shared_mem_per_block_dynamic",
}


def parse_csv(text: str) -> dict:
    """The one profiled kernel of an ``ncu --csv --page raw`` dump (ncu's own lines dropped)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, values = rows[0], rows[2]
    raw = dict(zip(header, values))

    def num(key):
        v = raw.get(key, "").replace(",", "")
        try:
            return float(v)
        except ValueError:
            return None

    out = {"kernel": raw.get("Kernel Name")}
    out.update({name: num(key) for name, key in METRICS.items()})
    out["stalls_per_issue"] = {
        s: num(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio") for s in STALLS
    }
    return out


def record(folder, commit, date):
    sys.path.insert(0, ".")
    from flashcore.results import REPO_ROOT

    kernels = {
        impl: parse_csv(open(f"{folder}/ncu_{impl}.csv").read())
        for impl in ("hopper", "triton", "cudnn")
    }
    payload = {
        "topic": "ncu_forward",
        "provenance": {
            "date": date,
            "commit": commit,
            "device": "NVIDIA H100 80GB HBM3",
            "gpu": "NVIDIA H100 80GB HBM3",
            "gpu_slug": "nvidia-h100-80gb-hbm3",
            "torch": "2.11.0+cu130",
            "triton": "3.6.0",
            "command": "tools/gpu_forward_hopper.sh (ncu --clock-control none "
            "--section SpeedOfLight ComputeWorkloadAnalysis WarpStateStats Occupancy --page raw)",
        },
        "shape": {"B": 2, "H": 16, "S": 8192, "D": 128, "dtype": "bfloat16", "causal": False},
        "what": {
            "hopper": "Gluon FA3-structured kernel (kernels/forward_hopper.py), ping-pong, "
            "BLOCK_N 128, 2 stages",
            "triton": "today's Triton kernel (kernels/forward.py, its default config)",
            "cudnn": "SDPA's cuDNN backend",
        },
        "kernels": kernels,
    }
    path = REPO_ROOT / "results" / "nvidia-h100-80gb-hbm3" / "ncu_forward.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__" and sys.argv[1] == "--record":
    record(*sys.argv[2:5])
    sys.exit(0)

import torch  # noqa: E402

from flashcore import interface  # noqa: E402
from flashcore.kernels import forward, forward_hopper  # noqa: E402
from flashcore.studies import bench  # noqa: E402

impl = sys.argv[1]
causal = "--causal" in sys.argv
B, H, S, D = 2, 16, 8192, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)
)
if impl == "hopper":
    out = torch.empty_like(q)

    def fn():
        forward_hopper.attention_hopper(
            q,
            k,
            v,
            out,
            out,
            causal_offset=0,
            is_causal=causal,
            qk_scale=forward_hopper.LOG2E / math.sqrt(D),
            store_lse=False,
        )
elif impl == "triton":
    cfg = forward.default_config(q, k, causal)

    def fn():
        interface.attention(q, k, v, causal=causal, config=cfg)
else:
    sdpa = bench.make_sdpa("cudnn", causal, False)

    def fn():
        sdpa(q, k, v)


for _ in range(4):
    fn()
torch.cuda.synchronize()
