"""The torch op, the SDPA stand-in, and the transformers integration (CPU and GPU)."""

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
    torch.library.opcheck(torch.ops.flashcore.attention.default, (q, k, v, causal, bottom_right, None))


def test_compile_fullgraph_traces_the_op():
    q, k, v = _qkv()

    def block(q, k, v):  # ops around the custom op, so the graph has more than one node
        return sdpa(q * 1.0, k, v, is_causal=True, enable_gqa=True) + 0.0

    compiled = torch.compile(block, fullgraph=True, backend="eager" if not HAS_CUDA else "inductor")
    out = compiled(q, k, v)
    ref = attention_reference(q, k, v, causal=True)
    same = attention_reference(q, k, v, causal=True, compute_dtype=q.dtype)
    assert error_rule(out, ref, same).passed


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_reference_under_the_rule(causal):
    q, k, v = _qkv(sq=23, sk=40)
    out = sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    ref = attention_reference(q, k, v, causal=causal)
    same = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
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
    result = _e2e("cpu", torch.float32)
    assert result["logits"]["passed"], result["logits"]
    assert result["generation"]["identical"], result["generation"]


@pytest.mark.gpu
def test_transformers_llama_gqa_gpu_bf16():
    result = _e2e("cuda", torch.bfloat16)
    assert result["logits"]["passed"], result["logits"]
    assert result["generation"]["identical"], result["generation"]
