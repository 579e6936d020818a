"""The backward's atomic mode (dQ summed into fp32 inside the dK/dV kernel) on a CUDA machine:
its dK/dV launch configs timed beside the deterministic mode as shipped and SDPA cuDNN, in
one process, bf16, B*S = 16K tokens, H*D = 2048 (the backward record's shapes).

    python tools/backward_atomic_probe.py OUT.json [--d 128 64 256] [--s 4096 16384]

Writes OUT.json (provenance: device, commit, command, versions; the kernel fingerprint; rows:
shape, mode, config, median ms, TFLOP/s; FLOPs = 2.5 x forward) and prints one line per row.
The candidates: every dkdv config of ``tuning_configs`` plus the atomic table's own."""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())

from flashcore import results  # noqa: E402
from flashcore.interface import attention  # noqa: E402
from flashcore.kernels.backward import _pick_config, attention_backward  # noqa: E402
from flashcore.studies.backward_bench import tuning_configs  # noqa: E402
from flashcore.studies.bench import attention_flops, time_launches  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d", type=int, nargs="+", default=[128, 64, 256])
    ap.add_argument("--s", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    rows = []
    for d in args.d:
        shipped = _pick_config(d, torch.bfloat16, False)
        candidates = [shipped["dkdv_atomic"]] + [
            c["dkdv"] for c in tuning_configs(d) if c["dkdv"] != shipped["dkdv_atomic"]
        ]
        candidates = list(dict.fromkeys(candidates))
        for s in args.s:
            for causal in (False, True):
                h, b = 2048 // d, max(1, 16384 // s)
                q, k, v, do = (
                    torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)
                )
                with torch.no_grad():
                    out, lse = attention(q, k, v, causal=causal, return_lse=True)
                flops = 2.5 * attention_flops(b, h, s, s, d, causal)
                runs = [("deterministic", None)] + [("atomic", c) for c in candidates]
                for mode, cfg in runs:
                    config = None if cfg is None else dict(shipped, dkdv_atomic=cfg)

                    def call(i, mode=mode, config=config):
                        attention_backward(
                            do, q, k, v, out, lse, causal=causal,
                            deterministic=mode == "deterministic", config=config,
                        )  # fmt: skip

                    row = dict(D=d, S=s, B=b, H=h, causal=causal, mode=mode)
                    row["dkdv"] = list(cfg or shipped["dkdv"])
                    try:
                        t = time_launches(call, 1, warmup=3, reps=args.reps)
                        row.update(median_ms=t.median_ms, tflops=flops / t.median_ms / 1e9)
                    except Exception as exc:  # a config that does not fit: its error
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                    rows.append(row)
                    print(row, flush=True)
                # SDPA cuDNN's backward on the same tensors
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ref = torch.nn.functional.scaled_dot_product_attention(
                        *leaves, is_causal=causal
                    )

                    def cudnn(i):
                        torch.autograd.grad(ref, leaves, do, retain_graph=True)

                    t = time_launches(cudnn, 1, warmup=3, reps=args.reps)
                row = dict(D=d, S=s, B=b, H=h, causal=causal, mode="sdpa_cudnn")
                row.update(median_ms=t.median_ms, tflops=flops / t.median_ms / 1e9)
                rows.append(row)
                print(row, flush=True)
                torch.cuda.empty_cache()
        record = dict(
            topic="backward_atomic_probe",
            provenance=results.provenance(),
            kernel_fingerprint=results.kernel_fingerprint(),
            rows=rows,
        )
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
