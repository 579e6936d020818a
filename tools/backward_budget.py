"""Offline (no GPU): the Triton backward's kernels as `_launch_backward` launches them for a
bf16 (4, 16, 4096, D) problem, compiled for sm_90, deterministic and atomic dQ, D 64/128/256:
the launch config, registers, spills and shared memory per CTA (so how many CTAs fit an SM),
and the main loop (`studies/sass_budget.softmax_loops`): instructions, exponentials and the
matmul FLOPs it issues per (query, key) pair against the five matmuls' 10 D the FLOP count
assumes. Launches are captured, not run; the result is written as JSON.

    python tools/backward_budget.py OUT.json"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from sm90_compile import capture_launches, compile_launch  # noqa: E402  (pops TRITON_INTERPRET)
from triton.compiler import ASTSource  # noqa: E402

from flashcore.kernels import backward as bw  # noqa: E402
from flashcore.studies import sass, sass_budget  # noqa: E402

REGISTERS_PER_SM, SHARED_PER_SM = 65536, 227 * 1024  # H100


def kernels(head_dim: int, atomic: bool) -> dict:
    q = torch.empty(4, 16, 4096, head_dim, dtype=torch.bfloat16)
    lse = torch.empty(4, 16, 4096)
    acc = torch.empty(q.shape, dtype=torch.float32) if atomic else None

    def backward():
        bw._launch_backward(q, q, q, q, q, lse, lse, q, q, q, acc, seqs=None, varlen=0,
                            causal=False, causal_offset=0, window=None, softcap=None,
                            scale=None, config=None)  # fmt: skip

    names = ("_bwd_dkdv_kernel", "_bwd_dq_kernel", "_bwd_preprocess")
    launches = capture_launches(
        bw, names, backward, tma_compatible=lambda *a: True, on_interpreter=lambda t: False
    )
    out = {}
    for n in ("_bwd_dkdv_kernel", "_bwd_dq_kernel"):
        if n not in launches:
            continue  # the atomic mode has no dQ kernel
        launch = launches[n]
        compiled = compile_launch(getattr(bw, n), launch, ASTSource)
        usage = sass.resource_usage(compiled)
        loop = sass_budget.softmax_loops(sass.disassemble(compiled.asm["cubin"]))[0]
        warps = launch["num_warps"]
        threads = 32 * warps
        regs = -(-usage["n_regs"] // 8) * 8
        ctas = min(REGISTERS_PER_SM // (regs * threads), SHARED_PER_SM // max(1, usage["shared"]))
        pairs = launch["BLOCK_M"] * launch["BLOCK_N"]  # (query, key) pairs per iteration
        out[n] = {
            "BLOCK_M": launch["BLOCK_M"],
            "BLOCK_N": launch["BLOCK_N"],
            "num_warps": warps,
            "num_stages": launch["num_stages"],
            **usage,
            "ctas_per_sm": ctas,
            "loop_instructions": loop["instructions"],
            "loop_mufu": loop["MUFU"],
            # every warpgroup issues the loop's wgmma for its share of the tile
            "matmul_flops_per_pair": loop["gmma_flops"] * (warps // 4) / pairs,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the JSON file to write")
    args = parser.parse_args()  # before any compile: --help answers at once
    rows = []
    for head_dim in (64, 128, 256):
        for atomic in (False, True):
            ks = kernels(head_dim, atomic)
            per_pair = sum(k["matmul_flops_per_pair"] for k in ks.values())
            mode = "atomic" if atomic else "deterministic"
            rows.append({"D": head_dim, "mode": mode, "kernels": ks,
                         "matmuls_run": per_pair / (2 * head_dim)})  # fmt: skip
            print(f"D{head_dim} {mode}: {rows[-1]['matmuls_run']:.2f} matmuls per pair")
            for n, k in ks.items():
                tile = f"{k['BLOCK_M']}x{k['BLOCK_N']} w{k['num_warps']} s{k['num_stages']}"
                print(f"  {n}: {tile} regs {k['n_regs']} spills {k['n_spills']} shared "
                      f"{k['shared']} B -> {k['ctas_per_sm']} CTA/SM; loop "
                      f"{k['loop_instructions']} instructions")  # fmt: skip
    git = ["git", "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True).stdout.strip()
    import triton

    payload = {
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        # nothing ran on a GPU: the kernels were compiled for the H100's architecture only
        "device": "none (compiled offline for sm_90a, the H100's architecture, on a CPU machine)",
        "triton": triton.__version__,
        "arch": "sm_90a (offline)",
        "problem": "bf16 (4, 16, 4096, D), non-causal",
        "rows": rows,
    }
    with open(args.out, "w") as f:
        f.write(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
