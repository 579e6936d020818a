"""Issue 25's training-step target, measured: tokens/s of a transformers training step (the
random Llama-style model of ``flashcore.studies.e2e.training_speed``: ~0.4B parameters, GQA
32/8, head dim 64, causal; forward, next-token loss, backward; no optimizer) through flashcore
and through SDPA, in paired rounds in one process (each round times both, in alternating
order). Writes a log (JSON: provenance, every round, the median of the per-round ratios).

    python tools/training_speed_rounds.py OUT.json [--batch 4] [--seqlen 2048] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

    rounds = []
    for i in range(args.rounds):
        order = ("flashcore", "sdpa") if i % 2 == 0 else ("sdpa", "flashcore")
        row = training_speed(
            "cuda", torch.bfloat16, batch=args.batch, seqlen=args.seqlen, steps=args.steps,
            order=order,
        )[0]  # fmt: skip
        row["order"] = list(order)
        row["flashcore_over_sdpa"] = row["tokens_per_s_flashcore"] / row["tokens_per_s_sdpa"]
        rounds.append(row)
        print(json.dumps(row), flush=True)
    ratio = statistics.median(r["flashcore_over_sdpa"] for r in rounds)
    out = {"provenance": provenance(), "rounds": rounds, "median_flashcore_over_sdpa": ratio}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"median tokens/s flashcore / sdpa over {len(rounds)} rounds: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
