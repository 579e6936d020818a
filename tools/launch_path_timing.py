"""One Gluon forward kernel timed through three launch paths, to tell GPU time from harness:
``flashcore.attention`` as dispatched (its cached direct launch after the first call),
``forward_hopper.attention_hopper`` with a fresh output each call (tools/gpu_forward_hopper.py's
path for forced configs) and the same into one preallocated output; each eager (CUDA events
around every launch, rotated inputs: the perf.json harness) and replayed from a CUDA graph
(GPU time alone), 3 rounds in rotated order. bf16, B*S = 16K tokens, H*D = 2048.

    python tools/launch_path_timing.py OUT.json

Why: forced sweeps have timed the shipped config up to 5% below the same kernel dispatched
(logs/d64_gluon_sweep_2e66d0f.*, logs/turns_e068d29.log, logs/forward_pingpong_33312c7.log)."""

from __future__ import annotations

import json
import math
import statistics
import sys

import torch

from flashcore.interface import attention
from flashcore.kernels import forward_hopper as fh
from flashcore.kernels._softmax import LOG2E
from flashcore.results import provenance
from flashcore.studies import bench

SHAPES = [(256, 16384), (256, 8192), (128, 8192), (64, 8192)]  # (D, S), non-causal


def paths(d):
    def forced(q, k, v):
        out = torch.empty_like(q)
        return fh.attention_hopper(
            q, k, v, out, out, causal_offset=0, is_causal=False,
            qk_scale=LOG2E / math.sqrt(d), store_lse=False,
        )  # fmt: skip

    held = {}

    def forced_prealloc(q, k, v):
        out = held.setdefault(q.shape, torch.empty_like(q))
        return fh.attention_hopper(
            q, k, v, out, out, causal_offset=0, is_causal=False,
            qk_scale=LOG2E / math.sqrt(d), store_lse=False,
        )  # fmt: skip

    return {"dispatched": attention, "forced": forced, "forced_prealloc": forced_prealloc}


def main() -> int:
    rows = []
    for d, s in SHAPES:
        h, b = 2048 // d, max(1, bench.TOKENS_PER_BATCH // s)
        n_sets = bench.rotation_count(b * h * s * d * 3 * 2)
        sets = bench.rotated_inputs(n_sets, *[(b, h, s, d)] * 3)
        flops = bench.attention_flops(b, h, s, s, d, False)
        fns = paths(d)
        times = {(n, m): [] for n in fns for m in ("eager", "graph")}
        for r in range(3):
            names = list(fns)[r % 3 :] + list(fns)[: r % 3]
            for name in names:
                for mode in ("eager", "graph"):
                    t = bench.time_launches(
                        lambda i, f=fns[name]: f(*sets[i]), n_sets, warmup=3, reps=7,
                        graph=mode == "graph",
                    )  # fmt: skip
                    times[(name, mode)].append(t.median_ms)
        for (name, mode), ms in times.items():
            med = statistics.median(ms)
            row = dict(D=d, S=s, path=name, mode=mode, round_medians_ms=ms, median_ms=med,
                       tflops=flops / med / 1e9)  # fmt: skip
            rows.append(row)
            print(f"D{d} S{s} {name:>16} {mode:>5}: {row['tflops']:6.1f} TFLOP/s", flush=True)
        sets = None
        torch.cuda.empty_cache()
    json.dump({"provenance": provenance(), "rows": rows}, open(sys.argv[1], "w"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
