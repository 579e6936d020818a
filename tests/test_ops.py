"""The torch op, the SDPA stand-in, and the transformers integration (CPU and GPU)."""

import os

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

import flashcore.ops  # noqa: F401  (registers torch.ops.flashcore.attention)
from flashcore.ops import sdpa
from flashcore.reference import attention_reference
from flashcore.validate import error_rule

DTYPE = torch.float16 if HAS_CUDA else torch.float32


def _qkv(b=2, hq=4, hkv=2, sq=19, sk=19, d=32, dtype=DTYPE, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype).to(DEVICE)  # noqa: E731
    return mk(b, hq, sq, d), mk(b, hkv, sk, d), mk(b, hkv, sk, d)


@pytest.mark.parametrize("causal,bottom_right", [(False, False), (True, False), (True, True)])
def test_opcheck(causal, bottom_right):
    q, k, v = _qkv(sq=9, sk=21)
    torch.library.opcheck(
        torch.ops.flashcore.attention.default, (q, k, v, causal, bottom_right, None)
    )


def test_compile_fullgraph_traces_the_op():
    q, k, v = _qkv()

    def block(q, k, v):  # ops around the custom op, so the graph has more than one node
        return sdpa(q * 1.0, k, v, is_causal=True, enable_gqa=True) + 0.0

    compiled = torch.compile(block, fullgraph=True, backend="eager" if not HAS_CUDA else "inductor")
    out = compiled(q, k, v)
    ref = attention_reference(q, k, v, causal=True)
    same = attention_reference(q, k, v, causal=True, compute_dtype=q.dtype)
    assert error_rule(out, ref, same).passed


def test_op_inference_call_runs_the_kernel_directly_and_modes_still_see_the_op(monkeypatch):
    """The op's autograd kernel (ops._attention_autograd) runs the backend kernel itself for
    an inference call on plain tensors, and redispatches below autograd (counted here) when
    a gradient is needed, and under a dispatch mode or fake tensors, which must see the op."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    overload = torch.ops.flashcore.attention.default
    honest, redispatched = overload.redispatch, []

    def counted(*args, **kwargs):
        redispatched.append(1)
        return honest(*args, **kwargs)

    monkeypatch.setattr(overload, "redispatch", counted)
    q, k, v = _qkv(sq=9, sk=21)
    args = (True, True, None)
    ref = attention_reference(q, k, v, causal=True, causal_alignment="bottom_right")
    same = attention_reference(
        q, k, v, causal=True, causal_alignment="bottom_right", compute_dtype=q.dtype
    )
    with torch.no_grad():
        out = torch.ops.flashcore.attention(q, k, v, *args)
    assert redispatched == [] and error_rule(out, ref, same).passed
    out = torch.ops.flashcore.attention(q, k, v, *args)  # grad mode, no input needs one
    assert redispatched == [] and error_rule(out, ref, same).passed and out.grad_fn is None

    leaf = q.detach().clone().requires_grad_()
    out = torch.ops.flashcore.attention(leaf, k, v, *args)
    assert redispatched == [1] and out.grad_fn is not None
    assert error_rule(out.detach(), ref, same).passed

    class Seen(TorchDispatchMode):
        ops_seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops_seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as mode, torch.no_grad():
        out = torch.ops.flashcore.attention(q, k, v, *args)
    assert "flashcore.attention.default" in mode.ops_seen and redispatched == [1, 1]
    assert error_rule(out, ref, same).passed
    with FakeTensorMode() as fake_mode:
        fakes = [fake_mode.from_tensor(t) for t in (q, k, v)]
        out = torch.ops.flashcore.attention(*fakes, *args)
    assert out.shape == q.shape and redispatched == [1, 1, 1]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_reference_under_the_rule(causal):
    q, k, v = _qkv(sq=23, sk=40)
    out = sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    ref = attention_reference(q, k, v, causal=causal)
    same = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=True
    )
    assert error_rule(out, ref, same).passed


def test_sdpa_three_d_inputs():
    q, k, v = _qkv(b=1, hkv=4)
    out = sdpa(q[0], k[0], v[0])
    assert out.shape == q[0].shape


def test_op_cpu_path_without_interpreter_is_plain_pytorch(monkeypatch):
    # bf16 cannot run under the interpreter: the op's CPU kernel computes it in fp32 PyTorch.
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = (t.cpu().to(torch.bfloat16) for t in _qkv())
    out = torch.ops.flashcore.attention(q, k, v, True, False, None)
    ref = attention_reference(q, k, v, causal=True)
    same = attention_reference(q, k, v, causal=True, compute_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and error_rule(out, ref, same).passed


def test_sdpa_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="attn_mask"):
        sdpa(q, k, v, attn_mask=torch.ones(19, 19, dtype=torch.bool, device=DEVICE))
    with pytest.raises(ValueError, match="dropout"):
        sdpa(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa"):
        sdpa(q, k, v)


def _e2e(device, dtype):
    pytest.importorskip("transformers")
    from flashcore.studies.e2e import run_e2e

    return run_e2e(device, dtype, steps=32)


def test_transformers_llama_gqa_cpu():
    # The float32 logits and per-layer checks are counted over models below
    # (checks_over_models); this one wide-init model is for greedy generation.
    result = _e2e("cpu", torch.float32)
    assert result["generation"]["compared_steps"] > 0
    assert result["generation"]["identical"], result["generation"]


def _assert_counted(counted, record_property):
    from flashcore.studies.e2e import counted_lines

    for line in counted_lines(counted):
        record_property("measured", line)
    assert counted["logits"]["passed"], counted["logits"]
    assert counted["per_layer"]["passed"], counted["per_layer"]


def test_transformers_float32_checks_over_models_cpu(record_property):
    pytest.importorskip("transformers")
    from flashcore.studies.e2e import checks_over_models

    _assert_counted(checks_over_models("cpu", torch.float32), record_property)


@pytest.mark.gpu
def test_transformers_llama_gqa_gpu_fp32_per_layer(record_property):
    pytest.importorskip("transformers")
    from flashcore.studies.e2e import check_fp32

    result = check_fp32("cuda", steps=32)
    assert result["generation"]["identical"], result["generation"]
    _assert_counted(result["counted"], record_property)


@pytest.mark.gpu
def test_transformers_llama_gqa_gpu_bf16():
    result = _e2e("cuda", torch.bfloat16)
    assert result["logits"]["passed"], result["logits"]
    assert result["generation"]["identical"], result["generation"]


@pytest.mark.parametrize("window,softcap", [(5, None), (None, 4.0), (9, 2.5)])
def test_op_window_and_softcap_under_the_rule(window, softcap):
    q, k, v = _qkv(sq=23, sk=23)
    out = sdpa(q, k, v, is_causal=True, enable_gqa=True, window=window, softcap=softcap)
    ref = attention_reference(q, k, v, causal=True, window=window, softcap=softcap)
    same = attention_reference(
        q, k, v, causal=True, window=window, softcap=softcap, compute_dtype=q.dtype
    )
    assert error_rule(out, ref, same).passed


def test_op_window_needs_causal():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="window requires causal"):
        sdpa(q, k, v, enable_gqa=True, window=4)


def _mistral(sliding_window, layers=2):
    pytest.importorskip("transformers")
    from transformers import MistralConfig, MistralForCausalLM

    from flashcore.studies.e2e import small_llama_config

    base = small_llama_config(num_hidden_layers=layers)
    keys = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "initializer_range",
    )
    torch.manual_seed(0)
    return (
        MistralForCausalLM(
            MistralConfig(**{k: getattr(base, k) for k in keys}, sliding_window=sliding_window)
        )
        .eval()
        .to(DEVICE)
    )


def test_transformers_sliding_window_matches_eager_convention():
    """transformers' sliding_window = W means key j is visible from query i iff
    i - W < j <= i (W keys, itself included). Logits of a Mistral model with W = 5 on 20
    tokens, flashcore vs float64 eager, under the rule with sdpa as the baseline: an
    off-by-one window would attend to another set of keys and fail by far."""
    from flashcore.ops import register_transformers

    model = _mistral(5)
    name = register_transformers()
    ids = torch.randint(1, 128, (2, 20), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        model.set_attn_implementation(name)
        ours = model(ids).logits
        model.set_attn_implementation("sdpa")
        same = model(ids).logits
        model.set_attn_implementation("eager")
        ref = model.to(torch.float64)(ids).logits
        model.to(torch.float32)
    report = error_rule(ours, ref, same)
    assert report.passed, report


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("sliding_window", [None, 6])
def test_transformers_padded_batch_greedy_tokens_match_sdpa(padding, sliding_window):
    """A padded batch (lengths 20, 12, 5) generates with the padding mask and no dense
    mask: greedy tokens identical to sdpa's where margins allow: fp32 on CPU (noise ~1e-5),
    fp16 on a GPU (the KV-cache kernel takes half precision; noise ~1e-2)."""
    from flashcore.ops import register_transformers

    model = _mistral(sliding_window)
    dtype, noise = (
        (torch.float16, 5e-2)
        if (HAS_CUDA or os.environ.get("FC_TEST_FP16"))
        else (torch.float32, 1e-3)
    )
    model.to(dtype)
    name = register_transformers()
    lengths = [20, 12, 5]
    ids = torch.randint(1, 128, (3, 20), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    mask = torch.zeros(3, 20, dtype=torch.long, device=DEVICE)
    for b, n in enumerate(lengths):
        if padding == "left":
            mask[b, 20 - n :] = 1
        else:
            mask[b, :n] = 1
    result = {}
    for impl in (name, "sdpa"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=6,
                min_new_tokens=6,
                do_sample=False,
                pad_token_id=0,
                output_scores=True,
                return_dict_in_generate=True,
            )
        result[impl] = out
    ours, ref = result[name].sequences, result["sdpa"].sequences
    margins = torch.stack(
        [
            s.float().topk(2).values[:, 0] - s.float().topk(2).values[:, 1]
            for s in result["sdpa"].scores
        ],
        1,
    )
    decided = margins > noise  # closer calls are not compared
    assert bool(decided.any())
    new = slice(ids.shape[1], None)
    # A right-padded sequence whose last prompt row (a padding row, whose logits pick the
    # first new token) sees no valid key inside the window has no defined output there:
    # SDPA's result for a fully masked row depends on the backend (zeros on CPU, not on every
    # CUDA backend); flashcore returns zeros. Such sequences are not compared.
    defined = [
        padding == "left" or sliding_window is None or 20 - n < sliding_window for n in lengths
    ]
    assert any(defined)
    # Compare each sequence up to its first undecided step.
    for b in [i for i in range(3) if defined[i]]:
        upto = int(decided[b].int().cumprod(0).sum())
        assert torch.equal(ours[b, new][:upto], ref[b, new][:upto]), (b, ours[b], ref[b])


def test_per_layer_check_catches_a_planted_attention_error(monkeypatch):
    """The per-layer check can fail: a softmax scale off by 1e-5 (relative) in the attention
    calls is caught on the calls' own inputs."""
    pytest.importorskip("transformers")
    import flashcore.ops as ops
    from flashcore.studies.e2e import checks_over_models

    if HAS_CUDA:
        pytest.skip("plants the bug in the CPU path")
    honest = ops._attention_cpu

    def off_scale(q, k, v, is_causal, bottom_right, scale, window=None, softcap=None):
        # 1e-5 relative: 170 units of float32 roundoff in the scale
        scale = (scale if scale is not None else q.shape[-1] ** -0.5) * (1 + 1e-5)
        return honest(q, k, v, is_causal, bottom_right, scale, window, softcap)

    # The honest kernel's side is test_transformers_float32_checks_over_models_cpu (at most
    # COUNTED_MAX_FAILED of 60 models fail); with the bug planted every model fails.
    monkeypatch.setattr(ops, "_attention_cpu", off_scale)
    counted = checks_over_models("cpu", torch.float32, seeds=8, max_failed=0)
    assert len(counted["per_layer"]["failed"]) == 8, counted["per_layer"]
