"""flashcore's float32 attention error against SDPA's, on the CPU (Triton interpreter), at
the attention call itself: is flashcore's float32 arithmetic systematically less accurate?

A model-level check (notebook 09, the DeepSeek-V3 training step) once failed a 16-element
gradient at 1.06 of the rule's bound against SDPA's error alone, on one CPU code path. This
asks whether that reflects the attention call: for random causal draws at that check's head
dims (q.k 48, v 32, 17 tokens), the largest error against float64 of flashcore's float32 out,
dq, dk, dv over SDPA's float32 ones. A ratio steadily above 1 would say flashcore's float32
path is the less accurate; ratios on both sides of 1 say the two are level and a model-level
miss is a draw.

    TRITON_INTERPRET=1 python tools/cpu_fp32_error_draws.py [--draws 12]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())

from flashcore import attention  # noqa: E402

NAMES = ("out", "dq", "dk", "dv")


def errors(fn, dtype, q, k, v, grad_out, ref=None):
    """(out, dq, dk, dv) of ``fn`` in ``dtype``; with ``ref``, their largest errors."""
    leaves = [t.detach().to(dtype).clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad_out.to(dtype))
    values = [out.detach().double()] + [t.grad.double() for t in leaves]
    if ref is None:
        return values
    return [float((a - r).abs().max()) for a, r in zip(values, ref)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=12)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    b, h, s, d, dv = 2, 4, 17, 48, 32

    def sdpa(a, k_, c):
        return F.scaled_dot_product_attention(a, k_, c, is_causal=True)

    def ours(a, k_, c):
        return attention(a, k_, c, causal=True)

    print(f"torch {torch.__version__}, {platform.machine()}, "
          f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    print(f"B{b} H{h} S{s} q.k {d} v {dv}, causal; logits scale: q, k ~ N(0, 4)")
    print("flashcore float32 error / SDPA float32 error (largest |x - float64|):")
    ratios = {n: [] for n in NAMES}
    for i in range(args.draws):
        q, k = (2.0 * torch.randn(b, h, s, d, dtype=torch.float64, generator=gen) for _ in "qk")
        v, grad_out = (torch.randn(b, h, s, dv, dtype=torch.float64, generator=gen) for _ in "vo")
        ref = errors(sdpa, torch.float64, q, k, v, grad_out)
        base = errors(sdpa, torch.float32, q, k, v, grad_out, ref)
        mine = errors(ours, torch.float32, q, k, v, grad_out, ref)
        row = [m / e if e > 0 else float("nan") for m, e in zip(mine, base)]
        for n, r in zip(NAMES, row):
            ratios[n].append(r)
        print(f"  draw {i:2d}: " + "  ".join(f"{n} {r:.2f}" for n, r in zip(NAMES, row)))
    for n in NAMES:
        xs = sorted(ratios[n])
        print(f"{n}: {xs[0]:.2f}-{xs[-1]:.2f}, median {xs[len(xs) // 2]:.2f}, "
              f"above 1 in {sum(x > 1 for x in xs)} of {len(xs)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
