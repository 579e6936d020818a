"""One Gluon Hopper forward call to profile (Nsight Compute, compute-sanitizer): bf16, B*S =
16K tokens, H*D = 2048, the shipped tile config with the ping-pong turn TURNS (1: an mbarrier,
2: a hardware named barrier; forward_hopper.PINGPONG_TURNS), run twice (the first compiles;
profile with --launch-skip 1 --launch-count 1). Checks the output against the Triton kernel's.

    python tools/gluon_forward_workload.py D S CAUSAL TURNS        # e.g. 128 8192 0 2

e.g. under ncu --clock-control none --kernel-name regex:_fa3_fwd_kernel --launch-skip 1
--launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight"""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from flashcore.interface import attention  # noqa: E402
from flashcore.kernels import forward_hopper as fh  # noqa: E402
from flashcore.kernels._softmax import LOG2E  # noqa: E402
from flashcore.kernels.forward import default_config  # noqa: E402


def main() -> int:
    d, s, causal, turns = (int(x) for x in sys.argv[1:5])
    h, b = 2048 // d, max(1, 16384 // s)
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    out = torch.empty_like(q)
    for _ in range(2):
        fh.attention_hopper(
            q, k, v, out, out, causal_offset=0, is_causal=bool(causal),
            qk_scale=LOG2E / math.sqrt(d), store_lse=False, pingpong=turns,
        )  # fmt: skip
    # The Triton kernel (an explicit config bypasses the dispatch) as a sanity check.
    ref = attention(q, k, v, causal=bool(causal), config=default_config(q, k, bool(causal)))
    diff = (out.float() - ref.float()).abs().max().item()
    print(f"D{d} S{s} causal={causal} turns={turns}: max |gluon - triton| = {diff:.3g}")
    return 0 if diff < 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
