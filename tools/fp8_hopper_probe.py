"""The Gluon forward's FP8 mode beside the Triton fp8 kernel and the bf16 forward, on a CUDA
machine (Hopper), in one process: bf16 inputs quantized per block + Hadamard (the default
recipe), B * S = 16K tokens, H * D = 2048, S 4K/8K/16K, causal and not, at D 64/128/256.

    python tools/fp8_hopper_probe.py OUT.json [--d 128 64 256] [--s 4096 8192 16384]

Rows per shape: ``triton_fp8`` (kernels/fp8.py's kernel), ``gluon_fp8`` at each (BLOCK_N,
STAGES, consumer warpgroups) of ``CONFIGS`` (kernels/forward_hopper.py's FP8 mode, called
directly), ``bf16`` (``flashcore.attention`` on the unquantized inputs, the dispatch as it
ships). Median ms of ``bench.time_launches`` (CUDA events, eager; quantization
is outside the timed call), TFLOP/s (the forward's FLOPs), and each fp8 row's largest
difference from the Triton fp8 kernel's output (the same quantized inputs: the two may differ
by P's rounding and fp32 sums). Writes OUT.json with provenance and the kernel fingerprint;
prints a line per row."""

from __future__ import annotations

import argparse
import json
import os
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
    from flashcore.results import kernel_fingerprint, provenance
    from flashcore.studies.bench import TOKENS_PER_BATCH, attention_flops, time_launches

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d", type=int, nargs="+", default=[128, 64, 256])
    ap.add_argument("--s", type=int, nargs="+", default=[4096, 8192, 16384])
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
            x = quantize(q, k, v, "per_block_hadamard")
            for causal in (False, True):
                flops = attention_flops(b, h, s, s, d, causal)
                reference = fp8_attention(x, causal=causal, config=pick_config(x, causal)).float()
                triton = pick_config(x, causal)  # explicit: the dispatch would pick the Gluon mode
                calls = {"triton_fp8": lambda i: fp8_attention(x, causal=causal, config=triton)}
                for block_n, stages, num_wg in CONFIGS[d]:

                    def gluon(i, block_n=block_n, stages=stages, num_wg=num_wg):
                        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
                        return forward_hopper.attention_hopper_fp8(
                            x,
                            out,
                            causal=causal,
                            scale=d**-0.5,
                            block_n=block_n,
                            stages=stages,
                            num_wg=num_wg,
                        )

                    calls[f"gluon_fp8 {block_n}x{stages}x{num_wg}wg"] = gluon
                calls["bf16"] = lambda i: attention(q, k, v, causal=causal)
                for impl, fn in calls.items():
                    row = dict(B=b, H=h, S=s, D=d, causal=causal, impl=impl)
                    try:
                        out = fn(0)
                        torch.cuda.synchronize()
                        if impl != "bf16":
                            row["max_diff_vs_triton_fp8"] = float(
                                (out.float() - reference).abs().max()
                            )
                        t = time_launches(fn, 1, warmup=5, reps=args.reps)
                        row["median_ms"] = t.median_ms
                        row["tflops"] = flops / t.median_ms / 1e9
                    except Exception as exc:  # a config that does not fit is a result
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    print(
                        f"D{d} S{s} {'causal' if causal else 'full  '} {impl:<18} "
                        f"{row.get('tflops', row.get('error'))}"
                        f"  diff {row.get('max_diff_vs_triton_fp8', '-')}",
                        flush=True,
                    )
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(
            dict(
                provenance=provenance(
                    "tools/fp8_hopper_probe.py OUT.json " + " ".join(sys.argv[2:])
                ),
                kernel_fingerprint=kernel_fingerprint(),
                rows=rows,
            ),
            f,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
