"""The Gluon bf16 forward with part of its exps on the FMA pipe (forward_hopper's
EXP2_EMULATED = K of every 8 exps of an unmasked tile), beside the same kernel with K = 0 and
flashcore's dispatch as shipped, on a Hopper GPU, in one process: bf16, B * S = 16K tokens,
H * D = 2048, the kernel called directly (``forward_hopper.attention_hopper``).

    python tools/exp2_emulation_probe.py OUT.json [--d 64 128] [--s 4096 16384] [--k 0 1 2]
        [--rounds 3]

Per shape: every K, timed with ``bench.time_launches`` (CUDA events, eager), alternating the
order over rounds (median over rounds); each K's largest |difference| from K = 0's output on
the same inputs, and both outputs' largest error against a float64 reference on the first
query rows (the sizes are too large for a whole float64 reference). D64 is a shape the
dispatch does not send to the Gluon kernel (its MUFU time equals its matmul time at peak,
as FP8 D128's does): the row ``shipped`` is what ``flashcore.attention`` runs there.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())


def main() -> int:
    from flashcore.interface import attention
    from flashcore.kernels import forward_hopper
    from flashcore.kernels._softmax import LOG2E
    from flashcore.results import write_log
    from flashcore.studies.bench import TOKENS_PER_BATCH, attention_flops, time_launches

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--s", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--k", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    rows = []
    for d in args.d:
        for s in args.s:
            b, h = max(1, TOKENS_PER_BATCH // s), 2048 // d
            gen = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (
                torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(3)
            )
            # float64 reference of the first 128 query rows of head 0 (non-causal)
            q0, k0, v0 = (t[0, 0].double() for t in (q, k, v))
            ref = torch.softmax(q0[:128] @ k0.T / math.sqrt(d), -1) @ v0
            for causal in (False, True):
                flops = attention_flops(b, h, s, s, d, causal)
                calls = {}
                for emu in args.k:

                    def gluon(i, emu=emu):
                        out = torch.empty_like(q)
                        return forward_hopper.attention_hopper(
                            q, k, v, out, out, causal_offset=0, is_causal=causal,
                            qk_scale=d**-0.5 * LOG2E, store_lse=False, exp2_emulated=emu,
                        )  # fmt: skip

                    calls[f"gluon exp2emu{emu}"] = gluon
                calls["shipped"] = lambda i: attention(q, k, v, causal=causal)
                outs = {name: fn(0) for name, fn in calls.items()}
                torch.cuda.synchronize()
                base = outs[f"gluon exp2emu{args.k[0]}"].float()
                times = {name: [] for name in calls}
                for r in range(args.rounds):
                    for name in calls if r % 2 == 0 else reversed(calls):
                        times[name].append(
                            time_launches(calls[name], 1, warmup=5, reps=args.reps).median_ms
                        )
                for name, ms in times.items():
                    out = outs[name]
                    row = dict(B=b, H=h, S=s, D=d, causal=causal, impl=name,
                               median_ms=statistics.median(ms), median_ms_rounds=ms)  # fmt: skip
                    row["tflops"] = flops / row["median_ms"] / 1e9
                    row["max_diff_vs_first"] = float((out.float() - base).abs().max())
                    if not causal:
                        row["max_err_vs_fp64_head0_rows128"] = float(
                            (out[0, 0, :128].double() - ref).abs().max()
                        )
                    rows.append(row)
                    print(
                        f"D{d} S{s} {'causal' if causal else 'full  '} {name:<16} "
                        f"{row['tflops']:7.1f} TFLOP/s  diff {row['max_diff_vs_first']:.2e}  "
                        f"err64 {row.get('max_err_vs_fp64_head0_rows128', float('nan')):.2e}",
                        flush=True,
                    )
            torch.cuda.empty_cache()
    write_log(args.out, dict(rows=rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
