"""Why the fp32 backward failed the gradient rule once (B1 Hq2 Hkv1 S239 D16 fp32 non-causal,
seed 166 of the GPU grid; dK 1.38e-6 against a bound of 1.24e-6): the order of the dK sum.

On the H100, the probe (tools/backward_probe.py; results/<gpu>/logs/backward_probe_40dbf8f.*)
fed the kernel an exact P (float64 lse, exponent and exp in fp64) and an exact O: dK's error stayed
at 1.38e-6, so neither the approximate exp2 nor the forward's lse nor delta was the cause.
Here, on the CPU and in float64 except for the one rounding under test, dS (rounded to fp32
once, as the kernel holds it) times Q is summed in fp32 in the kernel's order: tl.dot(a, b,
acc) with fp32 IEEE operands is one FMA chain through acc, so dK_j was a sequential sum of
Sq x group = 478 products. That reproduces the GPU's error exactly; summing each 32-row
tile's product first and then adding the tiles (the fix in kernels/backward.py) brings it
below PyTorch fp32's own.

Usage: python tools/backward_fp32_order.py  (CPU, a few seconds)
"""

from __future__ import annotations

import sys

import numpy as np
import torch

sys.path.insert(0, ".")

from flashcore.validate import AttentionCase  # noqa: E402
from flashcore.validate_backward import (  # noqa: E402
    cancellation_magnitudes,
    gradient_rule,
    make_grad_inputs,
    reference_gradients,
)

SQ, D, GROUP, SCALE = 239, 16, 2, 0.25


def fp32_sum(ds, q, block):
    """sum_g sum_i ds[g, i, j] q[g, i, :] with fp32 FMAs: one chain (block=None) or per
    block of rows, then the blocks added."""
    acc = np.zeros((SQ, D), dtype=np.float32)
    for g in range(GROUP):
        for t0 in range(0, SQ, block or SQ):
            part = np.zeros((SQ, D), dtype=np.float32) if block else acc
            for i in range(t0, min(SQ, t0 + (block or SQ))):
                prod = ds[g, i, :, None] * q[g, i][None, :]  # exact in float64
                part = (part.astype(np.float64) + prod).astype(np.float32)  # the FMA's rounding
            acc = (acc.astype(np.float64) + part).astype(np.float32) if block else part
    return torch.from_numpy(acc * np.float32(SCALE))[None, None]


def main():
    case = AttentionCase(1, GROUP, 1, SQ, SQ, D, "float32", False)
    for seed in (166, 1166, 4166):
        q, k, v, do = make_grad_inputs(case, "cpu", seed)
        ref64 = reference_gradients(q, k, v, do, compute_dtype=torch.float64)
        same = reference_gradients(q, k, v, do, compute_dtype=torch.float32)
        mags = cancellation_magnitudes(q, k, v, do)
        q64, k64, v64, do64 = (t.double() for t in (q, k, v, do))
        k64, v64 = k64.expand(1, GROUP, SQ, D), v64.expand(1, GROUP, SQ, D)
        p = torch.softmax(q64 @ k64.transpose(-1, -2) * SCALE, -1)
        dp = do64 @ v64.transpose(-1, -2)
        delta = (do64 * (p @ v64)).sum(-1, keepdim=True)
        ds = (p * (dp - delta)).float()[0].double().numpy()
        qn = q[0].double().numpy()
        for name, dk in (
            ("one FMA chain (tl.dot with acc)", fp32_sum(ds, qn, None)),
            ("per 32-row tile, then the tiles", fp32_sum(ds, qn, 32)),
            ("PyTorch fp32 (the baseline)", same[1]),
        ):
            grads = (ref64[0].float(), dk, ref64[2].float())
            r = gradient_rule(grads, ref64, same, mags)["dk"]
            print(
                f"seed {seed:5d} {name:<33} dK max err {r.max_abs_err:.3g} "
                f"bound {r.bound:.3g} ratio {r.ratio:.3f}"
            )


if __name__ == "__main__":
    main()
