"""The Gluon FP8 forward's softmax loop at D128, compiled offline for sm_90a with P's scale at
256 (the scaled recipes, per_block among them) and at 1 (the naive recipe, whose multiply
folds away): the two builds `fp8.json` times as `fp8_per_block` and `fp8_naive`. On the H100
the naive build ran 0.92-0.94 of per_block at D128 non-causal (c530054), as the P-scale fold
branch did; this prints what differs in their loops: instruction counts by class, and where
in the loop the exponentials and the fp8 conversions and stores of P sit.

    python tools/fp8_pscale_sass.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.getcwd())

from flashcore.studies import sass, sass_budget  # noqa: E402

PLACES = ("MUFU.EX2", "F2FP", "STS", "FMNMX", "WARPGROUP.DEPBAR", "SYNCS", "BAR")


def opcodes(text: str, loop: dict) -> list[str]:
    """The loop's opcodes in order (``sass_budget.loop_instructions``: its start and end
    index instructions, not lines of the disassembly)."""
    return [sass_budget._opcode(ins) for ins in sass_budget.loop_instructions(text, loop)]


def main() -> int:
    for p_scale in (256.0, 1.0):
        spec = sass.gluon_fp8_forward_spec(128, False)
        spec["consts"] = dict(spec["consts"], P_SCALE=p_scale)
        text = sass.compile_sass(spec)
        loop = sass_budget.softmax_loops(text)[0]
        counts = {k: v for k, v in loop.items() if isinstance(v, int) and k not in ("start", "end")}
        print(f"P_SCALE {p_scale:g}: {counts}")
        ops = opcodes(text, loop)
        for name in PLACES:
            where = [i for i, op in enumerate(ops) if op.startswith(name)]
            if where:
                print(f"  {name:<17} {len(where):3d} at {where[0]:4d}-{where[-1]:4d} of {len(ops)}"
                      f" (a span of {where[-1] - where[0] + 1})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
