"""The models of issue 28 through flashcore, small and randomly initialised, against their
own eager attention in float64: gpt-oss (learnable sinks, sliding and full layers) and
DeepSeek-V3 (MLA: q.k and v of different head dims). Used by the tests and notebook 09.
"""

from __future__ import annotations

import math

import torch

from ..validate import error_rule


def gpt_oss_config():
    import transformers

    return transformers.GptOssConfig(
        vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=8, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip


def deepseek_v3_config():
    """MLA with qk_nope 32 + qk_rope 16 = 48 for q.k and v_head_dim 32; dense MLP layers."""
    import transformers

    return transformers.DeepseekV3Config(
        vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
        num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=2,
        num_key_value_heads=2, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=32,
        qk_rope_head_dim=16, v_head_dim=32, max_position_embeddings=64, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, initializer_range=0.1,
    )  # fmt: skip


def gpt_oss_check(device, *, batch: int = 2, seqlen: int = 23, seed: int = 0) -> dict:
    """GptOss with ``attn_implementation`` set to flashcore: fp32 logits, loss and every
    parameter gradient (the sinks' included) against eager in float64, with eager in fp32
    as the same-precision baseline of the rule. The sinks are drawn with std 1 (the init
    leaves them near 0, where they would not matter); weights, sinks and token ids come
    from ``torch.manual_seed(seed)``.

    A smoke check of the model, not a proof of the sinks' gradient (that is
    tests/test_sinks.py's rule on the kernel, with the terms' magnitudes known): a parameter
    gradient is a sum over tokens whose terms can cancel, and the floor below sees only the
    sum. Measured on a 2-core AVX2 CPU: seeds 0-15 as drawn here, 0 of 16 fail (worst
    ratio 0.76); with the token ids drawn from a generator of their own instead, 2 of 16
    failed (ratios 1.04 and 1.5, in 4-element gradients: the router bias and a layer's
    sinks), so a failure here at ratios near 1 calls for that kernel-level rule first."""
    import transformers

    import flashcore.ops

    name = flashcore.ops.register_transformers()
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(gpt_oss_config()).to(device).eval()
    model.config._experts_implementation = "eager"  # the grouped-matmul path has no float64
    for module in model.modules():
        if hasattr(module, "sinks"):
            torch.nn.init.normal_(module.sinks, std=1.0)
    ids = torch.randint(0, model.config.vocab_size, (batch, seqlen), device=device)

    def run(impl, dtype):
        m = model.to(dtype)
        m.config._attn_implementation = impl
        m.zero_grad()
        out = m(ids, labels=ids)
        out.loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}
        return out.logits.detach().clone(), out.loss.detach().clone(), grads

    logits64, loss64, grads64 = run("eager", torch.float64)
    logits32, loss32, grads32 = run("eager", torch.float32)
    logits, loss, grads = run(name, torch.float32)
    model.to(torch.float32)
    logits_report = error_rule(logits, logits64, logits32)
    # The loss, a mean of B * (S - 1) token losses: twice eager fp32's own error, plus 64
    # fp32 ulps of 1 for the summation's rounding (the two implementations sum differently).
    loss_err, loss_base = abs(float(loss) - float(loss64)), abs(float(loss32) - float(loss64))
    loss_passed = loss_err <= 2 * loss_base + 64 * 2**-24
    # Every parameter's gradient is a sum over the B * S tokens' contributions (a sink's:
    # -sum P_sink * delta over its head's rows). The rule for a sum of N terms
    # (validate.reduction_rule) has the floor u * ceil(log2 N) * sum |t_i|; the terms are
    # inside the model, and sum |t_i| >= |sum t_i|, so the floor is taken at
    # ceil(log2 N) * max |reference|: never more lenient than the sum's own floor.
    depth = math.ceil(math.log2(batch * seqlen))
    grad_reports = {
        n: error_rule(
            grads[n], grads64[n], grads32[n], floor_magnitude=depth * float(grads64[n].abs().max())
        )
        for n in grads64
    }
    return {
        "logits": {"ratio": logits_report.ratio, "passed": logits_report.passed},
        "loss": {"error": loss_err, "eager_fp32_error": loss_base, "passed": loss_passed},
        "gradients": len(grad_reports),
        "sink_gradients": sum("sinks" in n for n in grads),
        "worst_gradient_ratio": max(r.ratio for r in grad_reports.values()),
        "gradients_passed": all(r.passed for r in grad_reports.values()),
        "passed": logits_report.passed
        and loss_passed
        and all(r.passed for r in grad_reports.values()),
    }


def deepseek_v3_check(device, *, batch: int = 2, seqlen: int = 17, seed: int = 3) -> dict:
    """DeepseekV3 (``deepseek_v3_config``) through flashcore: fp32 logits, then a training
    step's loss and every parameter gradient, each under the rule against eager in float64
    (``e2e.compare_logits`` and ``e2e.compare_training_step``, the Llama checks' helpers)."""
    from .e2e import build_model, compare_logits, compare_training_step

    cfg = deepseek_v3_config()
    model = build_model(cfg, device, torch.float32)
    ids = torch.randint(
        1, cfg.vocab_size, (batch, seqlen), generator=torch.Generator().manual_seed(seed)
    )
    logits = compare_logits(model, ids.to(device))
    step = compare_training_step(device, torch.float32, batch=batch, seqlen=seqlen, config=cfg)
    return {
        "logits": {"ratio": logits["ratio"], "passed": logits["passed"]},
        "loss_passed": step["loss"]["passed"],
        "parameters": step["parameters"],
        "gradients_passed": step["passed"],
        "passed": logits["passed"] and step["passed"],
    }


def speed_configs(prompt_len: int, new_tokens: int) -> dict:
    """Mid-size configs for generation speed (random init, bf16): each model's attention at
    its real head dims, with fewer layers and narrower MLPs than the released models.
    gpt-oss: 8 layers alternating sliding (window 128) and full attention, 16 query heads
    over 4 KV heads of dim 64, learnable sinks, 8 experts (top 2). DeepSeek-V3: 8 layers of
    MLA (q.k over 128 + 64 = 192 dims, v over 128; KV rank 256), dense MLPs."""
    import transformers

    positions = prompt_len + new_tokens
    gpt_oss = transformers.GptOssConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=1024, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=128, max_position_embeddings=positions,
        layer_types=["sliding_attention", "full_attention"] * 4,
    )  # fmt: skip
    deepseek = transformers.DeepseekV3Config(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
        first_k_dense_replace=8, num_attention_heads=16, num_key_value_heads=16,
        q_lora_rank=None, kv_lora_rank=256, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, max_position_embeddings=positions, n_routed_experts=8,
        num_experts_per_tok=2, n_group=1, topk_group=1,
    )  # fmt: skip
    return {"gpt-oss": gpt_oss, "deepseek-v3": deepseek}


def generation_speed(
    device="cuda", *, prompt_len=512, new_tokens=128, repeats=7, batches=(1, 8)
) -> list[dict]:
    """Greedy generation tokens/s in bf16, flashcore against each model's default attention
    in transformers (gpt-oss: eager, the model has no SDPA path; DeepSeek-V3: sdpa), same
    process, paired rounds and their medians (``e2e.paired_generation``, whose ``sdpa``
    columns hold the default's numbers). 7 rounds: at batch 1, which is host-bound, the
    record of d8fa890 had 3 rounds spreading 0.77-1.14 and 0.60-0.95, too few to place a
    median against 1.00 (about 2 s a round and side)."""
    import flashcore.ops

    from .e2e import build_model, paired_generation

    name = flashcore.ops.register_transformers()
    rows = []
    for model_name, config in speed_configs(prompt_len, new_tokens).items():
        model = build_model(config, device, torch.bfloat16)
        default = model.config._attn_implementation
        for batch in batches:
            ids = torch.randint(
                1,
                config.vocab_size,
                (batch, prompt_len),
                generator=torch.Generator().manual_seed(batch),
            ).to(device)
            row = {
                "model": model_name,
                "default_attention": default,
                "batch": batch,
                "prompt_len": prompt_len,
                "new_tokens": new_tokens,
            }
            mask = torch.ones_like(ids)
            rows.append(
                row | paired_generation(model, ids, mask, name, default, new_tokens, repeats)
            )
        del model
        torch.cuda.empty_cache()
    return rows
