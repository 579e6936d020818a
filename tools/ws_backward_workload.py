"""One warp-specialized Gluon backward call to profile (Nsight Compute, compute-sanitizer):
bf16, B*S = 16K tokens, H*D = 2048, on a saved forward's output and lse, run twice (the
first compiles; profile with --launch-skip 1 --launch-count 1).

    python tools/ws_backward_workload.py D S CAUSAL DETERMINISTIC     # e.g. 128 8192 0 1

notebook 07 section 9c's source-level profiles (tools/ncu_sass_stalls.py) ran it as
    ncu --clock-control none --kernel-name regex:_bwd_hopper_ws --launch-skip 1 --launch-count 1
        --section SourceCounters --section WarpStateStats --section SpeedOfLight -o REPORT
        python3 tools/ws_backward_workload.py 128 8192 0 1"""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import flashcore  # noqa: E402
from flashcore.kernels.backward_hopper_ws import attention_backward_hopper_ws  # noqa: E402


def main() -> int:
    d, s, causal, det = (int(x) for x in sys.argv[1:5])
    h, b = 2048 // d, max(1, 16384 // s)
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(4)
    )
    out, lse = flashcore.attention(q, k, v, causal=bool(causal), return_lse=True)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for _ in range(2):
        attention_backward_hopper_ws(
            do, q, k, v, out, lse, *grads, causal_offset=0, is_causal=bool(causal),
            scale=1 / math.sqrt(d), deterministic=bool(det),
        )  # fmt: skip
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
