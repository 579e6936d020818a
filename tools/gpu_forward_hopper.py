"""Side-by-side sweep of the Gluon Hopper forward kernel's variants against today's Triton
kernel and SDPA cuDNN (one process, rotated inputs, CUDA events; the perf.json harness).

    python tools/gpu_forward_hopper.py OUT.json [--dtypes bfloat16,float16]
        [--head-dims 64,128,256,192/128] [--variants mbar_turns,named_turns]

Writes per shape and implementation the median time and TFLOP/s, and prints a table. A head
dim "D/Dv" gives v a head dim of its own (MLA: 192/128); H = 2048 / Dv, FLOPs over (D + Dv)/2."""

import argparse
import json
import math
import statistics
import sys
import time

import torch

from flashcore.interface import FORWARD_GLUON_FROM
from flashcore.interface import attention as triton_attention
from flashcore.kernels import forward_hopper as fh
from flashcore.kernels._softmax import LOG2E
from flashcore.kernels.forward import default_config
from flashcore.results import provenance
from flashcore.studies import bench

VARIANTS = {  # name -> (head dim -> kwargs for attention_hopper); wg3: three consumer warpgroups
    # tile: one program per work unit (two query tiles); pers: persistent grid (one per SM)
    64: {
        "tile_bn128_s3": dict(block_n=128, stages=3, persistent=False),
        "pers_bn128_s3": dict(block_n=128, stages=3, persistent=True),
        # FA3's D64 tile: 192 query rows (three consumer warpgroups) x 128 keys
        "pers_bn128_s2_wg3": dict(block_n=128, stages=2, persistent=True, num_wg=3),
        "pers_bn128_s3_wg3": dict(block_n=128, stages=3, persistent=True, num_wg=3),
    },
    128: {
        "tile_bn128_s2": dict(block_n=128, stages=2, persistent=False),
        "pers_bn128_s2": dict(block_n=128, stages=2, persistent=True),
    },
    256: {
        "tile_bn64_s2": dict(block_n=64, stages=2, persistent=False),
        "pers_bn64_s2": dict(block_n=64, stages=2, persistent=True),
    },
    192: {  # with v's 128 (MLA)
        "tile_bn128_s2": dict(block_n=128, stages=2, persistent=False),
        "pers_bn128_s2": dict(block_n=128, stages=2, persistent=True),
    },
}


# The shipped tile config of every head dim with the ping-pong turn passed by an mbarrier (1)
# or a hardware named barrier (2) (forward_hopper.PINGPONG_TURNS).
for _d in VARIANTS:
    VARIANTS[_d].update(mbar_turns=dict(pingpong=1), named_turns=dict(pingpong=2))
    # The shipped config (its turn) with k of every 8 exps on the FMA pipe, causal calls too
    # (forward_hopper.EXP2_EMULATED_FULL ships 1 for D64 non-causal only), and with 3 stages.
    VARIANTS[_d].update(shipped=dict(), e1=dict(exp2_emulated=1), e2=dict(exp2_emulated=2))
    VARIANTS[_d].update(e0=dict(exp2_emulated=0), s3=dict(stages=3))
    # No ping-pong: the consumer warpgroups issue their GEMMs without taking turns (FA4's sm90
    # forward takes turns only at head dims up to 128).
    VARIANTS[_d].update(no_pingpong=dict(pingpong=False))
    # 64-key tiles in the shipped consumer count: half the scores per step, and about two
    # thirds of the machine code (D64 causal three warpgroups 7664 -> 5120 SASS instructions,
    # offline), for short causal tiles, whose prologue, masked steps and epilogue come round
    # every few steps.
    VARIANTS[_d].update(bn64=dict(block_n=64))
# D64 with two consumer warpgroups (128-row tiles) and 64-key tiles, three stages.
VARIANTS[64].update(bn64_wg2=dict(block_n=64, num_wg=2, stages=3))


def hopper_fn(causal, kw):
    def run(q, k, v):
        out = torch.empty((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)
        return fh.attention_hopper(
            q,
            k,
            v,
            out,
            out,
            causal_offset=0,
            is_causal=causal,
            qk_scale=LOG2E / math.sqrt(q.shape[3]),
            store_lse=False,
            **kw,
        )

    return run


def summarize(rows):
    """Per dtype and head dim, each implementation / cuDNN: geomean over S 2K-16K x {causal,
    full}, the worst of those shapes, and S=1K; and / today's Triton kernel likewise."""
    out = {"lines": []}
    keyed = {(r["dtype"], r["D"], r["S"], r["causal"], r["impl"]): r.get("tflops") for r in rows}
    for dtype, d in sorted({(r["dtype"], r["D"]) for r in rows}):
        impls = sorted({r["impl"] for r in rows if r["dtype"] == dtype and r["D"] == d})
        for impl in impls:
            for base in ("cudnn", "triton"):
                ratios = {
                    (s, c): keyed.get((dtype, d, s, c, impl)) / keyed[(dtype, d, s, c, base)]
                    for (dt, dd, s, c, i) in keyed
                    if dt == dtype
                    and dd == d
                    and i == base
                    and keyed.get((dtype, d, s, c, impl))
                    and keyed[(dtype, d, s, c, base)]
                }
                long = [v for (s, c), v in ratios.items() if 2048 <= s <= 16384]
                short = [v for (s, c), v in ratios.items() if s == 1024]
                entry = {
                    "geomean_2k_16k": bench.geomean(long),
                    "worst_2k_16k": min(long) if long else None,
                    "worst_1k": min(short) if short else None,
                }
                out[f"{dtype} D{d} {impl} / {base}"] = entry
                if impl not in (base, "cudnn"):
                    out["lines"].append(
                        f"{dtype} D{d} {impl:>14} / {base:<6}: geomean "
                        f"{entry['geomean_2k_16k']:.3f}, worst "
                        f"{entry['worst_2k_16k'] or float('nan'):.3f} (S 2K-16K); S=1K worst "
                        f"{entry['worst_1k'] or float('nan'):.3f}"
                    )
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--variants", default=None, help="only these Gluon variants (comma list)")
    ap.add_argument("--reps", type=int, default=7, help="samples per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, implementation order rotated")
    ap.add_argument(
        "--record", action="store_true", help="also write results/<gpu>/fa3_attempt.json"
    )
    args = ap.parse_args()
    where = provenance()  # commit, device, versions: written with every partial dump
    seqlens = [int(s) for s in args.seqlens.split(",")]
    rows = []
    t0 = time.time()
    for dtype in args.dtypes.split(","):
        for pair in args.head_dims.split(","):
            d, dv = (int(x) for x in (pair.split("/") if "/" in pair else (pair, pair)))
            for s in seqlens:
                for causal in (False, True):
                    h = 2048 // dv
                    b = max(1, bench.TOKENS_PER_BATCH // s)
                    shape = dict(B=b, Hq=h, S=s, D=d, Dv=dv, causal=causal, dtype=dtype)
                    dt = getattr(torch, dtype)
                    per_set = b * h * s * (2 * d + dv) * 2
                    n_sets = bench.rotation_count(per_set)
                    sets = bench.rotated_inputs(
                        n_sets, *[(b, h, s, width) for width in (d, d, dv)], dtype=dt
                    )
                    flops = bench.attention_flops(b, h, s, s, (d + dv) / 2, causal)
                    # "triton": today's kernel (an explicit config bypasses the dispatch);
                    # "flashcore": what flashcore.attention runs now (the dispatch table).
                    cfg = default_config(sets[0][0], sets[0][1], causal)
                    impls = {
                        "triton": lambda q, k, v, c=causal, g=cfg: triton_attention(
                            q, k, v, causal=c, config=g
                        ),
                        "flashcore": lambda q, k, v, c=causal: triton_attention(q, k, v, causal=c),
                        "cudnn": bench.make_sdpa("cudnn", causal, False),
                    }
                    chosen = args.variants.split(",") if args.variants else list(VARIANTS[d])
                    for name in chosen:
                        impls[name] = hopper_fn(causal, VARIANTS[d][name])
                    # Every implementation is timed in each of ROUNDS rounds, the order rotated
                    # by one per round, and its time is the median over its round medians: a
                    # fixed order measured later implementations on a hotter, more
                    # power-capped GPU (up to 8% apart for one kernel, 2026-11-23).
                    ref = None
                    line = [f"{dtype[:4]} D{d} S{s:5d} {'causal' if causal else 'full  '}"]
                    results = {name: {**shape, "impl": name, "flops": flops} for name in impls}
                    medians = {name: [] for name in impls}
                    for name, fn in impls.items():
                        try:
                            with torch.inference_mode():
                                o = fn(*sets[0]).float()
                            if ref is None:
                                ref = o
                            results[name]["max_abs_diff_vs_triton"] = float((o - ref).abs().max())
                        except Exception as exc:
                            results[name]["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    names = [n for n in impls if "error" not in results[n]]
                    for r in range(args.rounds):
                        for name in names[r % len(names) :] + names[: r % len(names)]:
                            fn = impls[name]
                            with torch.inference_mode():
                                t = bench.time_launches(
                                    lambda i: fn(*sets[i]), n_sets, warmup=3, reps=args.reps
                                )
                            medians[name].append(t.median_ms)
                    for name in impls:
                        row = results[name]
                        if medians[name]:
                            row["round_medians_ms"] = medians[name]
                            row["median_ms"] = statistics.median(medians[name])
                            row["tflops"] = flops / row["median_ms"] / 1e9
                            line.append(f"{name}={row['tflops']:.0f}")
                        else:
                            line.append(f"{name}=ERR")
                        rows.append(row)
                    print(" ".join(line), f"[{time.time() - t0:.0f}s]", flush=True)
                    sets = None  # free the inputs before the next shape
                    torch.cuda.empty_cache()
                    json.dump({"provenance": where, "rows": rows}, open(args.out, "w"), indent=1)
    summary = summarize(rows)
    for line in summary["lines"]:
        print(line)
    if args.record:
        from flashcore.results import write_result

        payload = {
            "method": __doc__.strip(),
            "dispatch": {
                f"D{d} {'causal' if c else 'full'}": t for (d, c), t in FORWARD_GLUON_FROM.items()
            },
            "variants": {str(d): v for d, v in VARIANTS.items()},
            "summary": summary,
            "rows": rows,
        }
        print("recorded", write_result("fa3_attempt", payload))
    errs = [r for r in rows if "error" in r]
    for r in errs[:5]:
        print("ERROR", r["impl"], r["D"], r["S"], r["causal"], r["error"], file=sys.stderr)


if __name__ == "__main__":
    main()
