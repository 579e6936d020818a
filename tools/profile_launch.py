"""Host-side cost of one call, piece by piece (CUDA machine). Prints microseconds per call.

    python tools/profile_launch.py            # the pieces, lean path and the JIT path
    python tools/profile_launch.py --cprofile # plus a cProfile of 2000 cached calls

FLASHCORE_JIT_LAUNCH=1 turns the cached launch off (every call through kernel[grid]).
"""

import cProfile
import pstats
import sys
import time

import torch

from flashcore import _checks, interface
from flashcore.kernels import _launch, decode, forward


def per_call(fn, n=300):
    """Host time per call: the loop's wall time before the final synchronize (a GPU queue
    that fills up would make the host wait: n stays small)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def jit_path(fn):
    """Run fn with the cached launch off."""

    def run():
        _launch.ENABLED = False
        try:
            fn()
        finally:
            _launch.ENABLED = enabled

    enabled = _launch.ENABLED
    return run


q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
kc = torch.randn(1, 8, 8192, 128, device="cuda", dtype=torch.bfloat16)
lens = torch.full((1,), 8192, dtype=torch.int32, device="cuda")
qf = torch.randn(8, 8, 128, 64, device="cuda", dtype=torch.float16)
qt = torch.randn(1, 32, 1024, 128, device="cuda", dtype=torch.bfloat16)
qg = torch.randn(1, 32, 2048, 128, device="cuda", dtype=torch.bfloat16)
kg = torch.randn(1, 8, 2048, 128, device="cuda", dtype=torch.bfloat16)
kg8 = torch.randn(1, 8, 8192 + 256, 128, device="cuda", dtype=torch.bfloat16)
_step = [0]


def grow():
    """A cache one token longer each call (cycling over 256 lengths), as generation makes."""
    _step[0] = (_step[0] + 1) % 256
    return kg8[:, :, : 8192 + _step[0]], kg8[:, :, : 8192 + _step[0]]


from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from flashcore.kernels import forward_hopper  # noqa: E402

_gluon = [forward_hopper._FA3_LAUNCH] if forward_hopper.GLUON_AVAILABLE else []


def gluon_jit(fn):
    """fn with the Gluon kernel launched through the JIT (``kernel[grid]``) instead of the
    module's launch cache."""
    original = forward_hopper._FA3_LAUNCH
    forward_hopper._FA3_LAUNCH = forward_hopper._fa3_fwd_kernel
    try:
        return fn()
    finally:
        forward_hopper._FA3_LAUNCH = original


import flashcore.ops  # noqa: E402,F401

rows = {
    "check_attention_inputs": lambda: _checks.check_attention_inputs(qf, qf, qf, max_head_dim=256),
    "check_kvcache_inputs": lambda: _checks.check_kvcache_inputs(q, kc, kc, lens, None, None, None),
    "torch.empty x1": lambda: torch.empty((1, 32, 1, 32, 128), device="cuda"),
    "TensorDescriptor x1": lambda: TensorDescriptor(
        qt, list(qt.shape), list(qt.stride()), [1, 1, 64, 128]
    ),
    "forward key": lambda: forward._forward_key(
        qf, qf, qf, None, None, True, "top_left", None, None, False, None
    ),
    "current stream": lambda: _launch.current_stream(0),
    "attention D64 ptr (lean)": lambda: interface.attention(qf, qf, qf, causal=True),
    "attention D64 ptr (JIT)": jit_path(lambda: interface.attention(qf, qf, qf, causal=True)),
    "attention D128 TMA (lean)": lambda: interface.attention(qt, qt, qt, causal=True),
    "attention D128 TMA (JIT)": jit_path(lambda: interface.attention(qt, qt, qt, causal=True)),
    "attention_with_kvcache 8K (lean)": lambda: interface.attention_with_kvcache(
        q, kc, kc, lens, check_lengths=False
    ),
    "attention_with_kvcache 8K (JIT)": jit_path(
        lambda: interface.attention_with_kvcache(q, kc, kc, lens, check_lengths=False)
    ),
    "attend_full_cache 8K growing (lean)": lambda: decode.attend_full_cache(q, *grow()),
    "attend_full_cache 8K growing (JIT)": jit_path(lambda: decode.attend_full_cache(q, *grow())),
    "transformers fn decode 8K growing": lambda: flashcore.ops._transformers_attention(
        None, q, *grow(), None, is_causal=True
    ),
    "sdpa decode 8K growing (default)": lambda: torch.nn.functional.scaled_dot_product_attention(
        q, *grow(), enable_gqa=True
    ),
    "attention GQA S2048 D128 TMA (lean)": lambda: interface.attention(qg, kg, kg, causal=True),
    "attention GQA S2048 D128 TMA (JIT)": jit_path(
        lambda: interface.attention(qg, kg, kg, causal=True)
    ),
    "attention GQA S2048 D128 Gluon (cached launch)": lambda: interface.attention(
        qg, kg, kg, causal=True
    ),
    "attention GQA S2048 D128 Gluon (JIT)": lambda: gluon_jit(
        lambda: interface.attention(qg, kg, kg, causal=True)
    ),
    "flashcore.ops.sdpa D64": lambda: flashcore.ops.sdpa(qf, qf, qf, is_causal=True),
    "torch.ops.flashcore.attention D64": lambda: torch.ops.flashcore.attention(
        qf, qf, qf, True, False, None
    ),
    "torch.ops.flashcore.attention decode": lambda: torch.ops.flashcore.attention(
        q, kc, kc, False, True, None
    ),
    "sdpa D64 (default dispatch)": lambda: torch.nn.functional.scaled_dot_product_attention(
        qf, qf, qf, is_causal=True
    ),
    "sdpa D128 (default dispatch)": lambda: torch.nn.functional.scaled_dot_product_attention(
        qt, qt, qt, is_causal=True
    ),
}
for name, fn in rows.items():
    host = per_call(fn)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t0) / 300 * 1e6
    print(f"{name:<40} host {host:8.1f} us   eager {eager:8.1f} us", flush=True)
if _gluon:
    print("gluon launch cache entries", len(_gluon[0].cache), "hits", _gluon[0].cache.hits)
print(
    "launch cache entries: forward",
    len(forward._FORWARD_LAUNCHES),
    "decode",
    len(decode._DECODE_LAUNCHES),
)

if "--cprofile" in sys.argv:
    for name in (
        "attention D128 TMA (lean)",
        "attend_full_cache 8K growing (lean)",
        "torch.ops.flashcore.attention decode",
    ):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            rows[name]()
        prof.disable()
        torch.cuda.synchronize()
        print(f"--- cProfile: {name}, 2000 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
