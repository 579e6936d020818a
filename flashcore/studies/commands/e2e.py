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
    from ...results import write_result
    from .. import e2e

    dev = device()
    # The logits and every attention call on its own inputs, counted over models at the
    # default init; the one wide-init model of run_e2e is for generation (e2e.check_fp32).
    result = e2e.check_fp32(dev, steps=args.steps)
    counted = result["counted"]
    print("\n".join(e2e.counted_lines(counted)))
    print(
        f"logits of the generation model: max err {result['logits']['max_abs_err']:.3e}, "
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
        payload["generation"] = e2e.issue_generation_speed(repeats=3)
        for r in payload["generation"]:
            print(
                f"generation B{r['batch']} padded={r['padded']} window={r['window']}: flashcore "
                f"{r['tokens_per_s_flashcore']:.0f} tok/s, sdpa {r['tokens_per_s_sdpa']:.0f} tok/s "
                f"({r['ratio']:.2f}x)"
            )
    if args.record:  # the layout notebook 03 reads: {"check_fp32": ..., "generation": [rows]}
        print(f"recorded {write_result('e2e_transformers', payload)}")
    passed = counted["logits"]["passed"] and counted["per_layer"]["passed"] and g["identical"]
    return 0 if passed else 1


def add_models_arguments(p) -> None:
    p.add_argument("--repeats", type=int, default=7, help="paired generation rounds")
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/models.json")


def run_models(args) -> int:
    from ...results import write_result
    from .. import models

    dev = device()
    payload = {"gpt_oss": models.gpt_oss_check(dev), "deepseek_v3": models.deepseek_v3_check(dev)}
    for key in ("gpt_oss", "deepseek_v3"):
        print(f"{key}: fp32 checks under the rule pass: {payload[key]['passed']} ({payload[key]})")
    if dev == "cuda" and not args.no_speed:
        payload["generation"] = models.generation_speed(repeats=args.repeats)
        for r in payload["generation"]:
            rounds = ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
            print(
                f"generation {r['model']} B{r['batch']}: flashcore "
                f"{r['tokens_per_s_flashcore']:.0f} tok/s, {r['default_attention']} "
                f"{r['tokens_per_s_sdpa']:.0f} tok/s, ratio {r['ratio']:.2f} (rounds {rounds})"
            )
    if args.record:
        print(f"recorded {write_result('models', payload)}")
    return 0 if payload["gpt_oss"]["passed"] and payload["deepseek_v3"]["passed"] else 1
