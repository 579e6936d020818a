"""Where a generation step's time goes, flashcore vs SDPA (CUDA machine).

    python tools/profile_generate.py [batch ...]

The issue's random Llama (8 layers, hidden 1024, GQA 16/4, D64, bf16), prompt 512, 64
new tokens. Per impl: tokens/s, the attention function's host time per call (a timing
wrapper around the registered function), and the top host/GPU ops of one profiled run.
"""

import sys
import time

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as AttentionInterface

from flashcore.studies import e2e

NEW = 64


def main():
    name = e2e.register_transformers()
    shape = dict(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=512 + NEW,
        initializer_range=0.02,
    )
    model = e2e.build_model(e2e.small_llama_config(**shape), "cuda", torch.bfloat16)
    # Hybrids (unpadded batches only): which half of generation makes the difference.
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    from flashcore import ops

    def decode_only(module, q, k, v, mask, **kw):
        if q.shape[2] == k.shape[2]:
            return sdpa_attention_forward(module, q, k, v, mask, **kw)
        return ops._transformers_attention(module, q, k, v, mask, **kw)

    def prefill_only(module, q, k, v, mask, **kw):
        if q.shape[2] != k.shape[2]:
            return sdpa_attention_forward(module, q, k, v, mask, **kw)
        return ops._transformers_attention(module, q, k, v, mask, **kw)

    for hybrid, fn in (("fc_decode_only", decode_only), ("fc_prefill_only", prefill_only)):
        AttentionInterface.register(hybrid, fn)
        AttentionMaskInterface.register(hybrid, ops._padding_only_mask)
    impls = (name, "sdpa", "fc_decode_only", "fc_prefill_only")
    stats = {}
    for impl in impls:
        inner = AttentionInterface[impl]

        def timed(*a, _inner=inner, _impl=impl, **kw):
            t0 = time.perf_counter()
            out = _inner(*a, **kw)
            s = stats.setdefault(_impl, [0, 0.0])
            s[0] += 1
            s[1] += time.perf_counter() - t0
            return out

        AttentionInterface.register(impl, timed)
    for batch in [int(x) for x in sys.argv[1:]] or [1, 8]:
        ids = torch.randint(1, 32000, (batch, 512), generator=torch.Generator().manual_seed(0))
        ids = ids.cuda()

        def gen(impl):
            e2e._with_impl(model, impl)
            with torch.no_grad():
                model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=NEW,
                    min_new_tokens=NEW,
                    do_sample=False,
                    use_cache=True,
                    pad_token_id=0,
                )

        for impl in impls + impls:
            gen(impl)  # warm-up
        for rep in range(2):
            for impl in impls if rep == 0 else impls[::-1]:
                stats.pop(impl, None)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                gen(impl)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                n, host = stats[impl]
                print(
                    f"B{batch} {impl:<10} {batch * NEW / dt:8.1f} tok/s, "
                    f"{dt / NEW * 1e3:6.2f} ms/token;"
                    f" attention fn {n} calls, host {host / n * 1e6:6.1f} us/call,"
                    f" {host / NEW * 1e3:5.2f} ms/token",
                    flush=True,
                )
        for impl in (name, "sdpa"):
            with torch.profiler.profile(
                activities=[
                    torch.profiler.ProfilerActivity.CPU,
                    torch.profiler.ProfilerActivity.CUDA,
                ]
            ) as prof:
                gen(impl)
                torch.cuda.synchronize()
            print(f"--- B{batch} {impl}: top by self CPU")
            print(
                prof.key_averages().table(
                    sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50
                )
            )
            print(f"--- B{batch} {impl}: top by device time")
            print(
                prof.key_averages().table(
                    sort_by="self_device_time_total", row_limit=10, max_name_column_width=50
                )
            )


if __name__ == "__main__":
    main()
