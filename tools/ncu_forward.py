"""One forward launch per implementation for Nsight Compute (run under ncu, which picks the
launch after the warm-up by --launch-skip). D=128, S=8192, B=2, H=16, bf16, non-causal.

    python tools/ncu_forward.py {hopper,triton,cudnn} [--causal]   (under ncu, GPU)
    python tools/ncu_forward.py --record DIR                           (parse, on the same GPU)

``hopper`` is ``flashcore.attention`` as it ships (its dispatch sends this shape to the Gluon
kernel; the script checks that it does), ``triton`` the same call with
FLASHCORE_FORWARD_HOPPER=never (the Triton kernel, its default config), ``cudnn`` SDPA's cuDNN
backend. The second form reads DIR/ncu_{hopper,triton,cudnn}.csv (``ncu --csv --page raw``)
and writes results/<gpu>/ncu_forward.json through ``write_result``: provenance (commit, dirty,
versions) and the kernel fingerprint are computed there, on the machine that ran ncu, not
typed in. It records tensor-pipe utilization, issue activity and the stall reasons per issued
instruction of each kernel. ``tools/gpu_ncu_forward.sh`` runs both forms."""

import csv
import io
import os
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


def parse_csv_rows(text: str) -> list[dict]:
    """Every profiled kernel of an ``ncu --csv --page raw`` dump (ncu's own lines dropped;
    the row after the header holds the units)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return [_kernel_metrics(dict(zip(rows[0], values))) for values in rows[2:] if values]


def _kernel_metrics(raw: dict) -> dict:
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


def parse_csv(text: str) -> dict:
    """The one profiled kernel of an ``ncu --csv --page raw`` dump."""
    return parse_csv_rows(text)[0]


def record(folder):
    sys.path.insert(0, ".")
    from flashcore.kernels import forward, forward_hopper  # noqa: F401 (the fingerprint's scope)
    from flashcore.results import write_result

    kernels = {
        impl: parse_csv(open(f"{folder}/ncu_{impl}.csv").read())
        for impl in ("hopper", "triton", "cudnn")
    }
    payload = {
        "shape": {"B": 2, "H": 16, "S": 8192, "D": 128, "dtype": "bfloat16", "causal": False},
        "what": {
            "hopper": "flashcore.attention as shipped: its dispatch runs this shape on the Gluon "
            "FA3-structured kernel (kernels/forward_hopper.py)",
            "triton": "flashcore.attention with FLASHCORE_FORWARD_HOPPER=never: the Triton "
            "kernel (kernels/forward.py), its default config",
            "cudnn": "SDPA's cuDNN backend",
        },
        "ncu": NCU_COMMAND,
        "kernels": kernels,
    }
    path = write_result("ncu_forward", payload, command="bash tools/gpu_ncu_forward.sh OUT")
    print("wrote", path)


NCU_COMMAND = (
    "ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis "
    "--section WarpStateStats --section Occupancy --launch-skip 3 --launch-count 1 --csv --page raw"
)


def run(impl: str, causal: bool) -> None:
    """Four launches of ``impl`` (ncu profiles the fourth: --launch-skip 3)."""
    import torch

    from flashcore import dispatch, interface
    from flashcore.studies import bench

    if impl == "triton":
        os.environ["FLASHCORE_FORWARD_HOPPER"] = "never"  # read per call by flashcore.dispatch
    B, H, S, D = 2, 16, 8192, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    if impl in ("hopper", "triton"):
        ran = dispatch.forward_kernel(q, k, v, causal=causal)
        if ran != {"hopper": "gluon", "triton": "triton"}[impl]:
            sys.exit(
                f"flashcore.attention dispatches this shape to {ran}, not the kernel {impl!r} names"
            )

        def fn():
            interface.attention(q, k, v, causal=causal)
    else:
        sdpa = bench.make_sdpa("cudnn", causal, False)

        def fn():
            sdpa(q, k, v)

    for _ in range(4):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if sys.argv[1] == "--record":
        record(sys.argv[2])
    else:
        run(sys.argv[1], "--causal" in sys.argv)
