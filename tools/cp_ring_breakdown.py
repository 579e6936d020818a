"""Where the ring's non-causal time goes, on one GPU: the pieces of one rank's step of the
contiguous non-causal ring (``flashcore.parallel._ring_forward``) timed one by one beside a
single ``flashcore.attention`` call on the same block.

At S = 1M and 2M the two-GPU record has the ring without transfers about 10% slower than
half of one GPU's call over the whole sequence, where Ulysses is not
(results/nvidia-h200-x2/context_parallel.json). A rank of that ring runs, per step, a
scratch fill (NaN poison), one forward block into that scratch with the lse stored, and an
fp32 merge into the running output. This times each, per block size, for B 1, Hq 8, Hkv 2,
D 128, bf16 (the bench's shape).

Usage on a CUDA machine, repo root:
    FLASHCORE_COMMIT=<hash> python3 tools/cp_ring_breakdown.py [--blocks 262144 524288]
        [--reps 2] [--out results/<gpu>/logs/cp_ring_breakdown_<commit>.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch


def timed_ms(fn, reps: int) -> list[float]:
    """Wall time of each of ``reps`` calls after one warm-up, the device idle between."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def breakdown(block: int, reps: int) -> dict:
    from flashcore import parallel as P
    from flashcore.interface import attention
    from flashcore.kernels import forward_hopper
    from flashcore.kernels._softmax import lse_dtype

    dev, dt = torch.device("cuda"), torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(block)
    q = torch.randn((1, 8, block, 128), generator=gen, device=dev, dtype=dt)
    k, v = (torch.randn((1, 2, block, 128), generator=gen, device=dev, dtype=dt) for _ in "kv")
    scale = 1.0 / math.sqrt(128)
    # The ring's buffers, as _ring_forward lays them out: K then V in one flat buffer.
    flat = torch.empty(2 * k.numel(), dtype=dt, device=dev)
    k_ring, v_ring = flat[: k.numel()].view(k.shape), flat[k.numel() :].view(v.shape)
    k_ring.copy_(k)
    v_ring.copy_(v)
    out_b = torch.empty_like(q)
    lse_b = torch.empty((1, 8, block), dtype=lse_dtype(dt), device=dev)
    acc = torch.zeros(q.shape, dtype=torch.float32, device=dev)
    acc_lse = torch.full((1, 8, block), float("-inf"), dtype=lse_dtype(dt), device=dev)

    def block_call(kk, vv):
        return lambda: P._block_attention(
            q, kk, vv, out_b, lse_b, causal_offset=0, causal=False, window=None, scale=scale
        )

    def hopper(store_lse):
        return lambda: forward_hopper.attention_hopper(
            q,
            k,
            v,
            out_b,
            lse_b,
            causal_offset=0,
            is_causal=False,
            qk_scale=scale * P.LOG2E,
            store_lse=store_lse,
        )

    pieces = {
        "attention (one call, as flashcore_1gpu)": lambda: attention(q, k, v, causal=False),
        "attention_hopper, lse stored": hopper(True),
        "attention_hopper, no lse": hopper(False),
        "_block_attention, separate k/v": block_call(k, v),
        "_block_attention, the ring's flat k/v": block_call(k_ring, v_ring),
        "scratch fill (NaN poison)": lambda: out_b.fill_(float("nan")),
        "merge into the running output": lambda: P._merge_into(acc, acc_lse, out_b, lse_b),
    }
    rows = []
    # Twice through, the second pass in reverse order: a piece that is slow only where it
    # comes late in a pass is the GPU's clock, not the piece (NVML's SM clock and power after
    # each piece say which).
    for order in (list(pieces), list(reversed(pieces))):
        for name in order:
            ms = timed_ms(pieces[name], reps)
            clock = sm_clock_and_power()
            rows.append({"piece": name, "ms": ms, **clock})
            print(
                f"block {block}: {name}: {', '.join(f'{m:.1f}' for m in ms)} ms; "
                f"SM {clock['sm_mhz']} MHz, {clock['power_w']} W",
                flush=True,
            )
    return {"block": block, "rows": rows}


def sm_clock_and_power() -> dict:
    """GPU 0's SM clock (MHz) and power draw (W) now, from NVML (None where unreadable)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        return {"sm_mhz": sm, "power_w": round(power, 1)}
    except Exception:
        return {"sm_mhz": None, "power_w": None}


def main() -> int:
    from flashcore.results import provenance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[1 << 18, 1 << 19])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    result = {
        "provenance": provenance(command="python tools/cp_ring_breakdown.py"),
        "shape": "B1 Hq8 Hkv2 D128 bf16, non-causal, one block of the contiguous ring",
        "blocks": [breakdown(b, args.reps) for b in args.blocks],
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
