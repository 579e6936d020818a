"""``e2e``: a transformers Llama with flashcore as its attention, checked against SDPA's
(logits under the error rule, greedy tokens) and, on a GPU, generation speed."""

from __future__ import annotations

from . import device


def add_e2e_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument(
        "--record", action="store_true", help="write results/<gpu>/e2e_transformers.json"
    )


def run_e2e(args) -> int:
    import torch

    from ...results import write_result
    from .. import e2e

    dev = device()
    dtype = torch.float32  # bf16 rounding of the model hides attention errors; fp32 does not
    result = e2e.run_e2e(dev, dtype, steps=args.steps)
    # Every attention call on its own inputs, counted over models (e2e.per_layer_over_seeds)
    pl = result["per_layer"] = e2e.per_layer_over_seeds(dev, dtype)
    print(
        f"per-layer attention: {pl['calls_per_model']} calls in each of {pl['seeds']} models, "
        f"{len(pl['failed'])} fail the error rule (at most {pl['max_failed']} may): {pl['passed']} "
        f"(worst ratio {pl['worst_ratio']:.3f})"
    )
    print(
        f"logits: max err {result['logits']['max_abs_err']:.3e}, "
        f"sdpa {result['logits']['sdpa_max_abs_err']:.3e}, "
        f"ratio {result['logits']['ratio']:.3f}, passed {result['logits']['passed']}"
    )
    g = result["generation"]
    print(
        f"greedy {g['steps']} steps identical: {g['identical']} "
        f"(smallest top-2 margin {g['min_top2_margin']:.3f})"
    )
    payload = {"check_fp32": result}
    if dev == "cuda" and not args.no_speed:
        payload["generation"] = e2e.issue_generation_speed(repeats=2)
        for r in payload["generation"]:
            print(
                f"generation B{r['batch']} padded={r['padded']} window={r['window']}: flashcore "
                f"{r['tokens_per_s_flashcore']:.0f} tok/s, sdpa {r['tokens_per_s_sdpa']:.0f} tok/s "
                f"({r['ratio']:.2f}x)"
            )
    if args.record:  # the layout notebook 03 reads: {"check_fp32": ..., "generation": [rows]}
        print(f"recorded {write_result('e2e_transformers', payload)}")
    return 0 if result["logits"]["passed"] and pl["passed"] and g["identical"] else 1
