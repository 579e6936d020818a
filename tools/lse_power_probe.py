"""The Gluon forward with and without its lse store under sustained load: each build called
back to back for a fixed wall time, the two interleaved over rounds, NVML's SM clock and
power read at the end of each window.

At a 512K block the lse build is 8-11% slower at the 700 W cap, at a lower SM clock
(logs/cp_ring_breakdown_4580ed8.json); in SASS its loops hold the same instructions
(results/cpu-interpreter/logs/lse_variant_sass_54329ce.json), and under Nsight Compute one
launch of each at B2 H16 S8K is alike in time, tensor-pipe use and stalls
(logs/ncu_lse_df14a73/). This asks whether the gap appears for short calls repeated as long
as the long ones run (the benchmarks' regime) or only within one long launch.

Usage on a CUDA machine, repo root:
    python3 tools/lse_power_probe.py [--seconds 3] [--rounds 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

SHAPES = [(2, 16, 8192), (1, 8, 131072)]  # (B, Hq, S), Hkv = Hq / 4, D 128, non-causal


def window(fn, seconds: float) -> dict:
    """Call ``fn`` back to back for ``seconds``; ms per call, then the clock and power."""
    import sys

    sys.path.insert(0, "tools")
    from cp_ring_breakdown import sm_clock_and_power

    torch.cuda.synchronize()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / calls
    return {"ms_per_call": ms, "calls": calls, **sm_clock_and_power()}


def main() -> int:
    from flashcore.kernels import forward_hopper
    from flashcore.kernels._softmax import LOG2E, lse_dtype
    from flashcore.results import provenance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for b, hq, s in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(s)
        q = torch.randn((b, hq, s, 128), generator=gen, device="cuda", dtype=torch.bfloat16)
        k, v = (
            torch.randn((b, hq // 4, s, 128), generator=gen, device="cuda", dtype=torch.bfloat16)
            for _ in "kv"
        )
        out = torch.empty_like(q)
        lse = torch.empty((b, hq, s), dtype=lse_dtype(q.dtype), device="cuda")
        for store_lse in (False, True):  # compile both before timing
            forward_hopper.attention_hopper(
                q, k, v, out, lse, causal_offset=0, is_causal=False,
                qk_scale=LOG2E / math.sqrt(128), store_lse=store_lse,
            )  # fmt: skip
        for rnd in range(args.rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for store_lse in order:
                res = window(
                    lambda st=store_lse: forward_hopper.attention_hopper(
                        q,
                        k,
                        v,
                        out,
                        lse,
                        causal_offset=0,
                        is_causal=False,
                        qk_scale=LOG2E / math.sqrt(128),
                        store_lse=st,
                    ),  # fmt: skip
                    args.seconds,
                )
                row = {"B": b, "Hq": hq, "S": s, "store_lse": store_lse, "round": rnd, **res}
                rows.append(row)
                print(row, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"provenance": provenance(command="python tools/lse_power_probe.py"),
                       "rows": rows}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
