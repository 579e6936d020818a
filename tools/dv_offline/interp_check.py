"""Interpreter check (TRITON_INTERPRET=1) of the HEAD_DIM_V mode at the interpreter config and
at the compiled one (BLOCK 64x64, 3 stages). DV_VARIANT=hoist_v runs the V-hoist variant."""

import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from flashcore.reference import attention_reference  # noqa: E402

if os.environ.get("DV_VARIANT") == "hoist_v":
    import hoist_v  # noqa: E402

    fwd = hoist_v.load()
else:
    from flashcore.kernels import forward as fwd  # noqa: E402


def run(d, dv, sq=113, sk=33, softcap=5.0, causal=True, cfg=None, hq=4, hkv=1):
    g = torch.Generator().manual_seed(1234)
    q = torch.randn(1, hq, sq, d, generator=g).half()
    k = torch.randn(1, hkv, sk, d, generator=g).half()
    v = torch.randn(1, hkv, sk, dv, generator=g).half()
    out = torch.full((1, hq, sq, dv), float("nan"), dtype=torch.half)
    lse = torch.full((1, hq, sq), float("nan"))
    fwd.launch_forward(
        q, k, v, out, lse, seqs=None, max_seqlen_q=None, causal=causal, bottom_right=False,
        window=None, softcap=softcap, scale=None, return_lse=True, config=cfg, key=None,
    )  # fmt: skip
    opts = dict(causal=causal, causal_alignment="top_left", window=None, softcap=softcap)
    err = (out.double() - attention_reference(q, k, v, **opts)).abs().amax(-1)
    block = cfg and cfg["BLOCK_M"]
    print(d, dv, block, "max err", float(err.max()), "rows>0.02:", int((err > 0.02).sum()),
          "nan", int(out.isnan().sum()))  # fmt: skip


for cfg in (None, dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)):
    run(40, 24, cfg=cfg)
    run(40, 24, softcap=None, cfg=cfg)
    run(64, 24, cfg=cfg)
    run(40, 40, cfg=cfg)
