"""The Gluon forward's FP8 mode beside the Triton fp8 kernel and the bf16 forward, on a CUDA
machine (Hopper), in one process: bf16 inputs quantized per block + Hadamard (the default
recipe), B * S = 16K tokens, H * D = 2048, S 4K/8K/16K, causal and not, at D 64/128/256.

    python tools/fp8_hopper_probe.py OUT.json [--d 128 64 256] [--s 4096 8192 16384]
        [--exp2-emulated 0 1 2] [--shipped-only] [--rounds R] [--causal both|full|causal]

Rows per shape: ``triton_fp8`` (kernels/fp8.py's kernel), ``gluon_fp8`` at each (BLOCK_N,
STAGES, consumer warpgroups) of ``CONFIGS`` (kernels/forward_hopper.py's FP8 mode, called
directly), ``bf16`` (``flashcore.attention`` on the unquantized inputs, the dispatch as it
ships). Median ms of ``bench.time_launches`` (CUDA events, eager; quantization
is outside the timed call), TFLOP/s (the forward's FLOPs), and each fp8 row's largest
difference from the Triton fp8 kernel's output (the same quantized inputs: the two may differ
by P's rounding and fp32 sums). ``--exp2-emulated K ...`` times each Gluon config once per K
(forward_hopper's EXP2_EMULATED: K of every 8 exps of an unmasked tile on the FMA pipe);
``--shipped-only`` keeps FP8_VARIANTS' config alone; ``--rounds R`` times every row R times,
the rows' order reversed every other round, and keeps the median (``median_ms_rounds``).
Writes OUT.json with provenance and the kernel fingerprint;
prints a line per row."""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())

CONFIGS = {  # head dim -> (BLOCK_N, STAGES, consumer warpgroups) candidates of the FP8 mode
    64: [(128, 2, 2), (128, 2, 3), (128, 4, 3)],
    128: [(128, 2, 2), (128, 4, 2), (128, 2, 3), (128, 3, 3)],
    256: [(128, 2, 2), (64, 3, 2)],
}


def main() -> int:
    from flashcore.interface import attention, fp8_attention
    from flashcore.kernels import forward_hopper
    from flashcore.kernels.fp8 import pick_config, quantize
    from flashcore.results import write_log
    from flashcore.studies.bench import TOKENS_PER_BATCH, attention_flops, time_launches

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d", type=int, nargs="+", default=[128, 64, 256])
    ap.add_argument("--s", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--exp2-emulated", type=int, nargs="+", default=[0])
    ap.add_argument("--shipped-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--causal", choices=("both", "full", "causal"), default="both")
    args = ap.parse_args()
    causal_modes = {"both": (False, True), "full": (False,), "causal": (True,)}[args.causal]
    rows = []
    for d in args.d:
        for s in args.s:
            b, h = max(1, TOKENS_PER_BATCH // s), 2048 // d
            gen = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (
                torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(3)
            )
            x = quantize(q, k, v, "per_block_hadamard")
            for causal in causal_modes:
                flops = attention_flops(b, h, s, s, d, causal)
                reference = fp8_attention(x, causal=causal, config=pick_config(x, causal)).float()
                triton = pick_config(x, causal)  # explicit: the dispatch would pick the Gluon mode
                calls = {"triton_fp8": lambda i: fp8_attention(x, causal=causal, config=triton)}
                shipped = forward_hopper.FP8_VARIANTS[d]
                configs = (
                    [(shipped["BLOCK_N"], shipped["STAGES"], shipped.get("NUM_WG", 2))]
                    if args.shipped_only
                    else CONFIGS[d]
                )
                for (block_n, stages, num_wg), emu in (
                    (c, e) for c in configs for e in args.exp2_emulated
                ):

                    def gluon(i, block_n=block_n, stages=stages, num_wg=num_wg, emu=emu):
                        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
                        return forward_hopper.attention_hopper_fp8(
                            x,
                            out,
                            causal=causal,
                            scale=d**-0.5,
                            block_n=block_n,
                            stages=stages,
                            num_wg=num_wg,
                            exp2_emulated=emu,
                        )

                    name = f"gluon_fp8 {block_n}x{stages}x{num_wg}wg"
                    calls[name + (f" exp2emu{emu}" if emu else "")] = gluon
                calls["bf16"] = lambda i: attention(q, k, v, causal=causal)
                shape_rows = {}
                for impl, fn in calls.items():
                    row = dict(B=b, H=h, S=s, D=d, causal=causal, impl=impl)
                    try:
                        out = fn(0)
                        torch.cuda.synchronize()
                        if impl != "bf16":
                            row["max_diff_vs_triton_fp8"] = float(
                                (out.float() - reference).abs().max()
                            )
                        row["median_ms_rounds"] = []
                    except Exception as exc:  # a config that does not fit is a result
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    shape_rows[impl] = row
                for r in range(args.rounds):
                    order = list(calls) if r % 2 == 0 else list(reversed(calls))
                    for impl in order:
                        if "error" not in shape_rows[impl]:
                            t = time_launches(calls[impl], 1, warmup=5, reps=args.reps)
                            shape_rows[impl]["median_ms_rounds"].append(t.median_ms)
                for impl, row in shape_rows.items():
                    if "error" not in row:
                        row["median_ms"] = statistics.median(row["median_ms_rounds"])
                        row["tflops"] = flops / row["median_ms"] / 1e9
                    rows.append(row)
                    print(
                        f"D{d} S{s} {'causal' if causal else 'full  '} {impl:<18} "
                        f"{row.get('tflops', row.get('error'))}"
                        f"  diff {row.get('max_diff_vs_triton_fp8', '-')}",
                        flush=True,
                    )
            torch.cuda.empty_cache()
    write_log(args.out, dict(rows=rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
