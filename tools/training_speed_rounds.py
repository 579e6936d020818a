"""Issue 25's training-step target, measured: tokens/s of a transformers training step
(``flashcore.studies.e2e.training_speed``: a ~0.4B-parameter random Llama-style model, GQA
32/8, head dim 64, causal; forward, next-token loss, backward; no optimizer) through flashcore
and through SDPA on one model, in paired rounds of alternating order. Writes a log (JSON:
provenance and the row: every round, the medians, the median of the per-round ratios).

    python tools/training_speed_rounds.py OUT.json [--batch 4] [--seqlen 2048] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    import torch

    from flashcore.results import provenance
    from flashcore.studies.e2e import training_speed

    (row,) = training_speed(
        "cuda", torch.bfloat16, batch=args.batch, seqlen=args.seqlen, steps=args.steps,
        repeats=args.rounds,
    )  # fmt: skip
    with open(args.out, "w") as fh:
        json.dump({"provenance": provenance(), "training_speed": row}, fh, indent=1)
    print(json.dumps(row))
    print(f"median of the rounds' tokens/s ratios, flashcore / sdpa: {row['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
