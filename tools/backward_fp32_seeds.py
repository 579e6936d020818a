"""How often fp32 gradients fail the error rule: the CPU grid's float32 cases over many seeds.

The grid draws one seed per case, so a failure rate of a few percent hides there. This runs
each float32 case of ``backward_grid("cpu")`` (plus ``--extra`` non-causal and GQA shapes)
at seeds [first, first + count) under the Triton interpreter and prints, per case, the
failures, the worst ratio of each gradient, and how its max error compares with PyTorch
fp32's own (the rule allows 2x plus a floor). Run it at two commits to compare them.

Usage: TRITON_INTERPRET=1 python tools/backward_fp32_seeds.py --count 100 [--first 0]
(CPU; about a second per case and seed)
"""

from __future__ import annotations

import argparse
import statistics
import sys

sys.path.insert(0, ".")

from flashcore.validate import AttentionCase  # noqa: E402
from flashcore.validate_backward import GRADIENTS, backward_grid, check_grad_case  # noqa: E402

EXTRA = [
    AttentionCase(1, 2, 1, 33, 70, 16, "float32", False),
    AttentionCase(1, 4, 1, 47, 47, 32, "float32", True),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--extra", action="store_true", help="also the non-grid shapes above")
    parser.add_argument("--case", default=None, help="only cases whose name contains this")
    args = parser.parse_args()
    cases = [c for c in backward_grid("cpu") if c.dtype == "float32"]
    if args.extra:
        cases += EXTRA
    if args.case:
        cases = [c for c in cases if args.case in c.name]
    seeds = range(args.first, args.first + args.count)
    for case in cases:
        failed, worst = [], dict.fromkeys(GRADIENTS, 0.0)
        vs_torch = {name: [] for name in GRADIENTS}  # our max error / PyTorch fp32's
        for seed in seeds:
            row = check_grad_case(case, "cpu", seed=seed)
            for name in GRADIENTS:
                worst[name] = max(worst[name], row[name]["ratio"])
                vs_torch[name].append(row[name]["max_abs_err"] / row[name]["baseline_err"])
            if not row["passed"]:
                failed.append((seed, round(row["ratio"], 3)))
        ratios = " ".join(f"{name} {worst[name]:.3f}" for name in GRADIENTS)
        medians = " ".join(
            f"{name} {statistics.median(vs_torch[name]):.2f}/{max(vs_torch[name]):.2f}"
            for name in GRADIENTS
        )
        print(f"{case.name}: {len(failed)}/{len(seeds)} failed {failed}; worst ratio {ratios}")
        print(f"    max error / PyTorch fp32's, median/max over seeds: {medians}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
