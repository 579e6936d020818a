"""Packed variable-length attention (and the padded-range form) against the float64
per-sequence reference, under the error rule; outputs poisoned before launch."""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

from flashcore.interface import attention_varlen
from flashcore.kernels.varlen import attention_ranges
from flashcore.reference import attention_reference
from flashcore.studies.launch import run_varlen_case, varlen_cases
from flashcore.validate import error_rule

DTYPE = torch.float16


@pytest.mark.parametrize(
    "case", varlen_cases(seed=1, count=24, small=True), ids=lambda c: str(c["lens_q"])
)
def test_varlen_grid_cpu(case):
    result = run_varlen_case(case, DEVICE, DTYPE)
    assert result["passed"], result


def test_lengths_zero_and_one():
    case = dict(
        lens_q=[0, 1, 0, 5, 1],
        lens_k=[0, 1, 3, 0, 9],
        hq=4,
        hkv=2,
        d=16,
        causal=True,
        alignment="bottom_right",
        window=None,
        softcap=None,
        seed=3,
    )
    assert run_varlen_case(case, DEVICE, DTYPE)["passed"]
    case.update(causal=False, alignment="top_left")
    assert run_varlen_case(case, DEVICE, DTYPE)["passed"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_varlen_grid_gpu(dtype):
    cases = varlen_cases(seed=7, count=120)
    results = [run_varlen_case(c, "cuda", dtype) for c in cases]
    failed = [r for r in results if not r["passed"]]
    assert not failed, failed[:3]


@pytest.mark.parametrize("padding", ["left", "right"])
def test_padded_ranges_match_per_sequence_reference(padding):
    g = torch.Generator().manual_seed(0)
    b, s, d = 3, 24, 32
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(DTYPE).to(DEVICE) for h in (4, 2, 2))
    lengths = [24, 9, 1]
    starts = torch.tensor([s - n if padding == "left" else 0 for n in lengths], device=DEVICE)
    ends = starts + torch.tensor(lengths, device=DEVICE)
    out = attention_ranges(q, k, v, starts, ends, starts, ends, max(lengths), causal=True, window=6)
    for i in range(len(lengths)):
        rows = slice(int(starts[i]), int(ends[i]))
        args = (q[i : i + 1, :, rows], k[i : i + 1, :, rows], v[i : i + 1, :, rows])
        ref = attention_reference(*args, causal=True, window=6)
        same = attention_reference(*args, causal=True, window=6, compute_dtype=DTYPE)
        assert error_rule(out[i : i + 1, :, rows], ref, same).passed
        pad = torch.ones(s, dtype=torch.bool)
        pad[rows] = False
        assert bool((out[i, :, pad.to(DEVICE)] == 0).all())  # padding rows are zeros


def test_varlen_errors():
    q = torch.randn(5, 2, 16, dtype=DTYPE, device=DEVICE)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="3-D"):
        attention_varlen(q[None], q, q, cu, cu, 3, 3)
    with pytest.raises(TypeError, match="int32 or int64"):
        attention_varlen(q, q, q, cu.float(), cu, 3, 3)
    with pytest.raises(ValueError, match="rise from 0 to 5"):
        attention_varlen(
            q, q, q, torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE), cu, 3, 3
        )
    with pytest.raises(ValueError, match="max_seqlen"):
        attention_varlen(q, q, q, cu, cu, 2, 3)  # a sequence of 3 > max_seqlen_q 2
    with pytest.raises(ValueError, match="same length"):
        attention_varlen(q, q, q, cu, torch.tensor([0, 5], dtype=torch.int32, device=DEVICE), 3, 5)
    with pytest.raises(ValueError, match="window requires causal"):
        attention_varlen(q, q, q, cu, cu, 3, 3, window=4)
    with pytest.raises(ValueError, match="softcap"):
        attention_varlen(q, q, q, cu, cu, 3, 3, softcap=-1.0)


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's cost only")
def test_empty_batch_returns_empty():
    q = torch.randn(0, 2, 16, dtype=DTYPE)
    cu = torch.zeros(1, dtype=torch.int32)
    assert attention_varlen(q, q, q, cu, cu, 0, 0).shape == (0, 2, 16)


@pytest.mark.gpu
def test_gpu_offsets_check_waits_for_the_device_once_per_tensor():
    """check_lengths=True reads each offsets tensor once (two waits for the device a call),
    counted by PyTorch's synchronization debug mode (a prototype: a wait it misses is not
    counted)."""
    import warnings

    gen = torch.Generator().manual_seed(3)
    lens = [5, 17, 9]
    cu = torch.tensor([0, 5, 22, 31], dtype=torch.int32, device=DEVICE)
    q, k, v = (
        torch.randn(sum(lens), 4, 64, generator=gen).to(torch.float16).to(DEVICE) for _ in range(3)
    )
    attention_varlen(q, k, v, cu, cu, max(lens), max(lens))  # compiled outside the count
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            attention_varlen(q, k, v, cu, cu, max(lens), max(lens))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert len(waits) == 2, waits
