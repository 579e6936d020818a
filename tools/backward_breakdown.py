"""Where one backward call's GPU time goes, kernel by kernel, on a CUDA machine.

    python3 tools/backward_breakdown.py OUT.json [--calls 10] [--dims 64 128]

For each shape of the backward sweep (bf16, B·S = 16K, H·D = 2048, S 2K-16K, causal or not)
and each backward flashcore has on it (the warp-specialized Gluon backward, deterministic
and atomic; the Triton backward), and FA4's with ``--peers fa4``, after a warm-up:

* ``call_ms``: one call's time as the sweeps take it (``bench.time_launches``: calls queued
  back to back, median of ``--calls`` samples). Logs written before this field (e8e7e15,
  81aa2e9) hold ``wall_ms`` instead: one call between CUDA events with a synchronization
  after each, so the host's launch path before the first kernel is in it;
* ``kernels``: each kernel's device time per call (torch.profiler over ``--calls`` calls),
  so that the fixed per-call passes (delta, zeroing dQ's fp32 buffer, dQ's conversion) can
  be told apart from the main kernel, whose time grows with S;
* per head dim, a least-squares fit of the main Gluon kernel's time (atomic mode, non-causal:
  programs of equal length) against its query-block steps per program,
  ``time = waves * (steps * step_us + overhead_us)``: the per-program cost that does not
  scale with the work (start-up, epilogue, the last dQ tiles).

Writes OUT.json with provenance; prints one line per (shape, kernel).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

SEQLENS = (2048, 4096, 8192, 16384)


def _kernel_times(fn, calls):
    """Device microseconds per call of each kernel ``fn`` launches."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time
    return {name: us / calls for name, us in sorted(totals.items(), key=lambda kv: -kv[1])}


def _fit(points):
    """Least squares of y = waves * (steps * a + b) over (steps, waves, y_us) points."""
    sxx = sxy = sx1 = s11 = s1y = 0.0
    for steps, waves, y in points:
        x1, x2 = waves * steps, waves
        sxx, sxy, sx1 = sxx + x1 * x1, sxy + x1 * y, sx1 + x1 * x2
        s11, s1y = s11 + x2 * x2, s1y + x2 * y
    det = sxx * s11 - sx1 * sx1
    a = (sxy * s11 - sx1 * s1y) / det
    b = (sxx * s1y - sx1 * sxy) / det
    return a, b


def _measure_shape(head_dim, seqlen, causal, calls, sms, peers=()):
    """One row per backward flashcore has on this shape (module docstring), and per peer in
    ``peers`` ("fa4": FlashAttention-4's backward through autograd, its passes included)."""
    import flashcore
    from flashcore.kernels import backward as triton_backward
    from flashcore.kernels import backward_hopper_ws as ws
    from flashcore.studies.bench import time_launches

    batch, heads = 16384 // seqlen, 2048 // head_dim
    gen = torch.Generator(device="cuda").manual_seed(seqlen + head_dim)
    q, k, v, do = (
        torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16,
                    generator=gen)
        for _ in range(4)
    )  # fmt: skip
    out, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True)
    scale = head_dim**-0.5
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))

    def ws_call(deterministic):
        return lambda: ws.attention_backward_hopper_ws(
            do, q, k, v, out, lse, dq, dk, dv, causal_offset=0, is_causal=causal,
            scale=scale, deterministic=deterministic,
        )  # fmt: skip

    calls_by_kernel = {
        "gluon_ws_det": ws_call(True),
        "gluon_ws": ws_call(False),
        "triton": lambda: triton_backward.attention_backward(
            do, q, k, v, out, lse, causal=causal, scale=scale
        ),
    }
    if "fa4" in peers:
        from flashcore.studies.bench import make_fa4

        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        fa4_out = make_fa4(causal)(*leaves)
        calls_by_kernel["fa4"] = lambda: torch.autograd.grad(fa4_out, leaves, do, retain_graph=True)
    block_m = ws.BLOCK_M_FOR[head_dim]
    n_blocks = math.ceil(seqlen / ws.BLOCK_N)
    programs = n_blocks * batch * heads
    # steps per program: every query block (non-causal) or, causal, the mean over key
    # blocks of the query blocks at or below the diagonal
    n_m = math.ceil(seqlen / block_m)
    if causal:
        steps = statistics.mean(n_m - (j * ws.BLOCK_N) // block_m for j in range(n_blocks))
    else:
        steps = n_m
    rows = []
    for name, fn in calls_by_kernel.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        call = time_launches(lambda i: fn(), 1, warmup=2, reps=calls)
        kernels = _kernel_times(fn, calls)
        row = {
            "D": head_dim, "S": seqlen, "B": batch, "H": heads, "causal": causal,
            "kernel": name, "call_ms": call.median_ms,
            "kernels_us": {n: round(us, 2) for n, us in kernels.items()},
            "programs": programs, "waves": programs / sms, "steps_per_program": steps,
        }  # fmt: skip
        main_us = [us for n, us in kernels.items() if "bwd_hopper_ws" in n]
        if name.startswith("gluon") and main_us:
            row["main_us"] = main_us[0]
            row["other_us"] = sum(kernels.values()) - main_us[0]
        rows.append(row)
        top = ", ".join(f"{n[:40]} {us:.0f}" for n, us in list(kernels.items())[:5])
        print(f"D{head_dim} S{seqlen} causal={causal} {name}: {call.median_ms:.3f} ms; {top}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument(
        "--peers", nargs="*", default=[], choices=["fa4"], help="peers timed alike (FA4)"
    )
    args = parser.parse_args()

    from flashcore.results import provenance

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, fits = [], {}
    for head_dim in args.dims:
        points = []
        for seqlen in SEQLENS:
            for causal in (False, True):
                shape_rows = _measure_shape(
                    head_dim, seqlen, causal, args.calls, sms, peers=args.peers
                )
                for row in shape_rows:
                    rows.append(row)
                    if row["kernel"] == "gluon_ws" and not causal and "main_us" in row:
                        points.append((row["steps_per_program"], row["waves"], row["main_us"]))
        if len(points) >= 2:
            step_us, overhead_us = _fit(points)
            fits[head_dim] = {
                "step_us": step_us, "overhead_us": overhead_us,
                "overhead_in_steps": overhead_us / step_us, "kernel": "gluon_ws",
            }  # fmt: skip
            print(f"D{head_dim}: step {step_us:.3f} us, per-program overhead {overhead_us:.2f} us")
    with open(args.out, "w") as fh:
        json.dump(
            {"provenance": provenance(), "sms": sms, "rows": rows, "fits": fits}, fh, indent=1
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
