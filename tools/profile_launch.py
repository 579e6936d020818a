"""Host-side cost of one call, piece by piece (CUDA machine). Prints microseconds per call."""
import time

import torch

from flashcore import _checks
from flashcore.kernels import decode, forward


def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
kc = torch.randn(1, 8, 8192, 128, device="cuda", dtype=torch.bfloat16)
lens = torch.full((1,), 8192, dtype=torch.int32, device="cuda")
qf = torch.randn(8, 8, 128, 64, device="cuda", dtype=torch.float16)
rows = {
    "check_attention_inputs": lambda: _checks.check_attention_inputs(qf, qf, qf, max_head_dim=256),
    "check_kvcache_inputs": lambda: _checks.check_kvcache_inputs(q, kc, kc, lens, None, None, None),
    "torch.empty x1": lambda: torch.empty((1, 32, 1, 32, 128), device="cuda"),
    "get_device_properties": lambda: torch.cuda.get_device_properties(q.device),
    "attention (forward, small)": lambda: forward.attention(qf, qf, qf),
    "attention_with_kvcache (8K)": lambda: decode.attention_with_kvcache(q, kc, kc, lens, check_lengths=False),
    "sdpa (default dispatch)": lambda: torch.nn.functional.scaled_dot_product_attention(qf, qf, qf),
    "torch.ops.flashcore.attention": None,
}
import flashcore.ops  # noqa: E402,F401
rows["torch.ops.flashcore.attention"] = lambda: torch.ops.flashcore.attention(qf, qf, qf, False, False, None)
for name, fn in rows.items():
    print(f"{name:<34} {per_call(fn):8.1f} us")
