"""Nsight Compute on flashcore's kernels beside SDPA cuDNN and FlashAttention-4, forward at D
64/128/256 and backward at D 64/128: where the tensor pipe idles and why (issue stalls,
registers, shared memory, occupancy). bf16, B * S = 16K tokens (S = 8192, B = 2), H = 2048 / D.
D ``192`` is MLA's pair (q/k 192, v and dO 128; H = 16 as value_head_dim_speed), forward and
backward, flashcore beside cuDNN and FA4.

    python tools/ncu_compare.py run PHASE IMPL D [--causal]   (under ncu, GPU)
    python tools/ncu_compare.py record DIR                      (parse, on the same GPU)

PHASE ``forward``: IMPL ``flashcore`` (``flashcore.attention`` as it ships; the kernel its
dispatch picks is recorded), ``flashcore_lse`` (the same call with ``return_lse=True``; not in
CASES, run by hand), ``triton`` (FLASHCORE_FORWARD_HOPPER=never), ``cudnn`` (SDPA),
``fa4`` (``flash_attn.cute``, its sm90 path), and at D 128 ``fp8_per_block`` and ``fp8_naive``
(``flashcore.fp8_attention`` on inputs quantized before the range, so the Gluon FP8 mode as
dispatched: the two builds of one loop that differ by P's multiply, notebook 04 section 9;
``NCU_ONLY=fp8`` runs just these). PHASE ``backward``: ``flashcore`` (the Triton
backward autograd runs by default), ``gluon`` (FLASHCORE_BACKWARD_HOPPER=always: the opt-in
Gluon backward), ``cudnn``, ``fa4``; the forward runs before the profiled range.

Each run makes three warm-up calls, then one call inside the NVTX start/end range
``profiled``; ncu profiles every kernel in that range (``--nvtx --nvtx-include profiled``), so a
backward's preprocessing, main and dQ kernels each get a row. A start/end range, not push/pop:
autograd launches the backward from its own device thread, outside a push/pop range of the
calling thread (the first H100 run, with push/pop, profiled no backward kernel). ``record``
reads DIR/ncu_*.csv (``ncu --csv --page raw``: ``METRICS`` and the stall reasons ``STALLS`` of
every kernel) and writes
results/<gpu>/ncu_compare.json through ``write_result`` (provenance and the kernel fingerprint
computed on the machine that ran ncu). ``tools/gpu_ncu_compare.sh`` runs both forms."""

from __future__ import annotations

import csv
import glob
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


CASES = [("forward", impl, d) for d in (128, 64, 256) for impl in ("flashcore", "cudnn", "fa4")]
CASES += [("forward", "triton", 128)]
FP8_IMPLS = ("fp8_per_block", "fp8_naive")
CASES += [("forward", impl, 128) for impl in FP8_IMPLS]
BACKWARD_IMPLS = ("flashcore", "gluon", "cudnn", "fa4")
PEERS = ("flashcore", "cudnn", "fa4")
CASES += [("backward", impl, d) for d in (128, 64) for impl in BACKWARD_IMPLS]
CASES += [(phase, impl, 192) for phase in ("forward", "backward") for impl in PEERS]
MLA_HEADS, MLA_V_HEAD_DIM = 16, 128  # d = 192: MLA's pair
NCU_COMMAND = (
    "ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis "
    "--section WarpStateStats --section Occupancy --nvtx --nvtx-include profiled --csv --page raw"
)


def csv_name(phase: str, impl: str, d: int) -> str:
    return f"ncu_{phase}_{impl}_d{d}.csv"


def run(phase: str, impl: str, d: int, causal: bool) -> None:
    import torch

    if impl == "triton":
        os.environ["FLASHCORE_FORWARD_HOPPER"] = "never"  # read per call by flashcore.dispatch
    if impl == "gluon":
        os.environ["FLASHCORE_BACKWARD_HOPPER"] = "always"
    from flashcore import dispatch, interface
    from flashcore.studies import bench

    b, h, s = 2, 2048 // d, 8192
    dv = d
    if d == 192:
        h, dv = MLA_HEADS, MLA_V_HEAD_DIM
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (
        torch.randn(b, h, s, width, device="cuda", dtype=torch.bfloat16, generator=gen)
        for width in (d, d, dv, dv)
    )
    if impl in ("flashcore", "triton", "gluon", "flashcore_nondeterministic"):
        print("forward kernel:", dispatch.forward_kernel(q, k, v, causal=causal), file=sys.stderr)
        # flashcore_nondeterministic: the backward of deterministic=False (its atomic mode)
        det = impl != "flashcore_nondeterministic"
        fwd = lambda q, k, v: interface.attention(q, k, v, causal=causal, deterministic=det)  # noqa: E731
    elif impl == "flashcore_lse":  # the same forward storing its lse (what training runs)
        fwd = lambda q, k, v: interface.attention(q, k, v, causal=causal, return_lse=True)  # noqa: E731
    elif impl == "cudnn":
        fwd = bench.make_sdpa("cudnn", causal, False)
    elif impl == "fa4":
        fwd = bench.make_fa4(causal)
    elif impl in FP8_IMPLS:
        from flashcore.kernels.fp8 import quantize

        x = quantize(q, k, v, impl.removeprefix("fp8_"))
        print("fp8 kernel:", dispatch.fp8_kernel(x, causal=causal), file=sys.stderr)
        fwd = lambda *_: interface.fp8_attention(x, causal=causal)  # noqa: E731
    else:
        raise SystemExit(f"unknown implementation {impl!r}")
    leaves = [t.detach().requires_grad_(phase == "backward") for t in (q, k, v)]

    def once(profiled: bool) -> None:
        out = None
        if phase == "backward":
            out = fwd(*leaves)  # the forward stays outside the profiled range
            torch.cuda.synchronize()
        rng = torch.cuda.nvtx.range_start("profiled") if profiled else None
        if phase == "forward":
            with torch.no_grad():
                fwd(*leaves)
        else:
            torch.autograd.grad(out, leaves, do)
        torch.cuda.synchronize()
        if profiled:
            torch.cuda.nvtx.range_end(rng)

    for profiled in (False, False, False, True):
        once(profiled)


def record(folder: str) -> None:
    sys.path.insert(0, ".")
    from flashcore.kernels import backward, backward_hopper, forward, forward_hopper  # noqa: F401
    from flashcore.results import write_result

    rows = []
    for phase, impl, d in CASES:
        path = os.path.join(folder, csv_name(phase, impl, d))
        row = dict(phase=phase, impl=impl, D=d, causal=False)
        try:
            kernels = parse_csv_rows(open(path).read())
        except (OSError, StopIteration, IndexError) as exc:
            row["error"] = f"no ncu rows ({type(exc).__name__})"
        else:
            row["kernels"] = kernels
            # The kernel that takes the time: the row the comparison reads.
            main = max(kernels, key=lambda k: k["duration_ns"] or 0.0)
            row["main_kernel"] = main
            row["kernel_ns_total"] = sum(k["duration_ns"] or 0.0 for k in kernels)
        rows.append(row)
    leftover = sorted(
        set(map(os.path.basename, glob.glob(os.path.join(folder, "ncu_*.csv"))))
        - {csv_name(*c) for c in CASES}
    )
    payload = {
        "method": __doc__.strip(),
        "shape": {
            "B": 2,
            "S": 8192,
            "H": "2048 / D (D 192: 16, v head dim 128)",
            "dtype": "bfloat16",
            "causal": False,
        },
        "ncu": NCU_COMMAND,
        "rows": rows,
        "unparsed_files": leftover,
    }
    command = "bash tools/gpu_ncu_compare.sh OUT"
    print("wrote", write_result("ncu_compare", payload, command=command))
    for r in rows:
        m = r.get("main_kernel")
        what = r.get("error") or (
            f"tensor pipe {m['tensor_pipe_pct_of_peak_active']:.1f}% active, "
            f"{m['registers_per_thread']:.0f} regs, {m['duration_ns'] / 1e3:.0f} us of "
            f"{r['kernel_ns_total'] / 1e3:.0f} us ({len(r['kernels'])} kernels): {m['kernel'][:60]}"
        )
        print(f"{r['phase']:<8} D{r['D']:<3} {r['impl']:<9} {what}")


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), "--causal" in sys.argv)
