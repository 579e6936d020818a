"""Launch-config sweep of the Triton backward for MLA's pair (q/k 192, v 128; another pair
with --pair, e.g. 256/256) on a CUDA machine: the deterministic backward (the dK/dV kernel,
then the dQ kernel) with one kernel's config varied at a time, the other at the first of its
list: the D256 bucket's configs before commit 6c8aae4, which MLA's pair ran (its widest padded
head dim is 256). The table kernels/backward.py ships took its MLA and D256 entries from this
sweep.

Usage: python tools/dv_backward_probe.py OUT.json [--seqlens 4096 8192] [--pair 192/128]
                                          [--atomic] [--around-shipped]
With --around-shipped, the kernel not varied stays at the config kernels/backward.py ships for
the pair (its ``_pick_config``), and the shipped configs join the lists: a re-sweep after a
kernel change (the 192/128 split tiles of 23f9d53 ran configs swept on padded tiles).
With --atomic, the atomic mode instead (dQ summed inside the dK/dV kernel: the backward's
``deterministic=False``; autograd, varlen's included, runs the deterministic mode): only the
dK/dV config varies; the first is the atomic config both pairs shipped before e5df583.
bf16, B * S = 16K tokens, H = 16 at D_v 128 (value_head_dim_speed's shapes), else H * D_v = 2048
(backward.json's), causal and not; every
config is compiled first in a process pool, then timed (CUDA events, median of 10 after 2
warm-ups). Writes OUT.json (provenance, kernel fingerprint, rows and the best config per
kernel by geomean) and prints a line per row.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.getcwd())

D, DV, H = 192, 128, 16
# (BLOCK_M, BLOCK_N, warps, stages); first = the baseline (the D256 bucket before 6c8aae4).
DKDV = [
    (64, 64, 8, 1),
    (64, 64, 8, 2),
    (64, 64, 8, 3),
    (64, 64, 4, 1),
    (64, 64, 4, 2),
    (32, 64, 4, 2),
    (32, 64, 4, 3),
    (64, 128, 8, 1),
    (64, 128, 8, 2),
    (32, 128, 8, 2),
    (128, 64, 8, 1),
    (128, 64, 8, 2),
    (32, 128, 8, 3),
    (32, 128, 4, 2),
    (64, 128, 8, 3),
]
DQ = [
    (64, 32, 4, 1),
    (64, 32, 4, 2),
    (64, 32, 4, 3),
    (64, 64, 4, 1),
    (64, 64, 4, 2),
    (64, 64, 8, 2),
    (128, 32, 8, 2),
    (128, 64, 8, 1),
    (128, 64, 8, 2),
    (128, 64, 8, 3),
    (128, 128, 8, 2),
]


def _bases(pair, atomic, around_shipped):
    """(dK/dV config, dQ config) each list's rows hold fixed for the other kernel."""
    if not around_shipped:
        return DKDV[0], DQ[0]
    from flashcore.kernels.backward import _pick_config

    def padded(width):
        return max(16, 1 << (width - 1).bit_length())

    d, dv = pair  # as attention_backward picks: the wider padded head dim, v's where it differs
    from flashcore.kernels.backward import QK_TAIL

    shipped = _pick_config(
        max(padded(d), padded(dv)),
        torch.bfloat16,
        False,
        padded(dv) if dv != d else 0,
        split_qk=d if dv != d and d in QK_TAIL else 0,
    )
    return (shipped["dkdv_atomic"] if atomic else shipped["dkdv"]), shipped["dq"]


def _runs(atomic=False, bases=(DKDV[0], DQ[0])):
    dkdv_base, dq_base = bases
    runs = [dict(dkdv=c, dq=dq_base) for c in dict.fromkeys([dkdv_base, *DKDV])]
    if not atomic:
        runs += [dict(dkdv=dkdv_base, dq=c) for c in dict.fromkeys(DQ) if c != dq_base]
    return runs


def _inputs(b, h, s, causal, pair, seed=0):
    from flashcore.interface import attention

    d, dv = pair
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (
        torch.randn(b, h, s, width, device="cuda", dtype=torch.bfloat16, generator=gen)
        for width in (d, d, dv, dv)
    )
    with torch.no_grad():
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
    return q, k, v, do, out, lse


def _compile(job):
    """Compile one config (a small call with the sweep's constexprs); the error or None."""
    from flashcore.kernels.backward import attention_backward

    causal, cfg, s, pair, atomic = job
    try:
        q, k, v, do, out, lse = _inputs(1, 1, s, causal, pair)
        attention_backward(
            do, q, k, v, out, lse, causal=causal, config=cfg, deterministic=not atomic
        )
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # a config that does not fit is a result, not a crash
        return f"{type(exc).__name__}: {str(exc)[:160]}"


def main():
    from flashcore.kernels.backward import attention_backward
    from flashcore.results import kernel_fingerprint, provenance
    from flashcore.studies.bench import TOKENS_PER_BATCH, attention_flops, time_launches

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seqlens", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--pair", default=f"{D}/{DV}", help="q/k head dim / v head dim")
    ap.add_argument("--atomic", action="store_true", help="time the atomic mode's dK/dV kernel")
    ap.add_argument(
        "--around-shipped", action="store_true", help="hold the other kernel at the shipped config"
    )
    args = ap.parse_args()
    pair = tuple(int(x) for x in args.pair.split("/"))
    h = 2048 // pair[1] if pair[1] != 128 else H  # H * D_v = 2048 but at D_v 128, as the speed rows
    t0 = time.time()
    bases = _bases(pair, args.atomic, args.around_shipped)
    print(f"held fixed: dkdv {bases[0]}, dq {bases[1]}", flush=True)
    runs = _runs(args.atomic, bases)
    jobs = [
        (c, cfg, s, pair, args.atomic)
        for s in args.seqlens[:1]
        for c in (False, True)
        for cfg in runs
    ]
    with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
        errors = {repr(j[:2]): e for j, e in zip(jobs, pool.map(_compile, jobs)) if e}
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f} s; errors: {errors}", flush=True)
    rows = []
    for s in args.seqlens:
        b = max(1, TOKENS_PER_BATCH // s)
        for causal in (False, True):
            q, k, v, do, out, lse = _inputs(b, h, s, causal, pair)
            # FLOPs: the forward's over one head dim of (D + D_v) / 2, times 2.5
            flops = 2.5 * attention_flops(b, h, s, s, sum(pair) // 2, causal)
            for cfg in runs:
                row = dict(
                    B=b, H=h, S=s, D=pair[0], Dv=pair[1], causal=causal, atomic=args.atomic, **cfg
                )
                if repr((causal, cfg)) in errors:
                    row["error"] = errors[repr((causal, cfg))]
                else:
                    t = time_launches(
                        lambda i, cfg=cfg: attention_backward(
                            do,
                            q,
                            k,
                            v,
                            out,
                            lse,
                            causal=causal,
                            config=cfg,
                            deterministic=not args.atomic,
                        ),
                        1,
                        warmup=2,
                        reps=10,
                    )
                    row["median_ms"] = t.median_ms
                    row["tflops"] = flops / t.median_ms / 1e9
                rows.append(row)
                print(
                    f"S{s} {'causal' if causal else 'full  '} dkdv={cfg['dkdv']} dq={cfg['dq']}: "
                    f"{row.get('tflops', row.get('error'))}",
                    flush=True,
                )
            torch.cuda.empty_cache()
    best = {}
    kernels = (("dkdv", ("dq", bases[1])),) + (() if args.atomic else (("dq", ("dkdv", bases[0])),))
    for kernel, baseline_other in kernels:
        groups = defaultdict(list)
        for r in rows:
            if "tflops" in r and tuple(r[baseline_other[0]]) == baseline_other[1]:
                groups[tuple(r[kernel])].append(r["tflops"])
        n = max(len(g) for g in groups.values())
        ranked = sorted(
            (math.exp(sum(map(math.log, g)) / len(g)), c) for c, g in groups.items() if len(g) == n
        )[::-1]
        best[kernel] = [dict(config=c, geomean_tflops=g) for g, c in ranked]
        for g, c in ranked:
            print(f"{kernel:<4} {str(c):<18} geomean {g:6.1f} TFLOP/s", flush=True)
    with open(args.out, "w") as f:
        record = dict(
            provenance=provenance(
                f"tools/dv_backward_probe.py OUT.json --pair {args.pair}"
                + (" --atomic" if args.atomic else "")
                + (" --around-shipped" if args.around_shipped else "")
            ),
            kernel_fingerprint=kernel_fingerprint(),
            rows=rows,
            held_fixed=dict(dkdv=bases[0], dq=bases[1]),
            ranked=best,
            compile_errors=errors,
        )
        json.dump(record, f, indent=1)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
