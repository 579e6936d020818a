"""One forward launch per implementation for Nsight Compute (run under ncu, which picks the
launch after the warm-up by --launch-skip). D=128, S=8192, B=2, H=16, bf16, non-causal.

    python tools/ncu_forward.py {hopper,triton,cudnn} [--causal]"""

import math
import sys

import torch

from flashcore.kernels import forward, forward_hopper
from flashcore.studies import bench

impl = sys.argv[1]
causal = "--causal" in sys.argv
B, H, S, D = 2, 16, 8192, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
if impl == "hopper":
    out = torch.empty_like(q)
    def fn():
        forward_hopper.attention_hopper(q, k, v, out, out, causal_offset=0, is_causal=causal,
                                        qk_scale=forward_hopper.LOG2E / math.sqrt(D), store_lse=False)
elif impl == "triton":
    cfg = forward.default_config(q, k, causal)
    def fn():
        forward.attention(q, k, v, causal=causal, config=cfg)
else:
    sdpa = bench.make_sdpa("cudnn", causal, False)
    def fn():
        sdpa(q, k, v)
for _ in range(4):
    fn()
torch.cuda.synchronize()
