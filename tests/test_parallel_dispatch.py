"""The context-parallel strategy choice (flashcore/parallel_dispatch.py): the measured table
read as it says, the chosen function called, bad strategies refused."""

import pytest
import torch

from flashcore import parallel, parallel_ulysses
from flashcore import parallel_dispatch as PD

HALF_M = 1 << 19


@pytest.mark.parametrize(
    "seqlen, causal, heads, grad, expected",
    [
        (HALF_M, False, (8, 2), False, "ulysses"),  # full from 512K: measured faster
        (HALF_M - 1, False, (8, 2), False, "ring"),
        (HALF_M * 4, True, (8, 2), False, "ring"),  # causal: not measured faster
        (HALF_M, False, (8, 1), False, "ring"),  # Hkv does not divide over 2 ranks
        (HALF_M, False, (8, 2), True, "ring"),  # gradients: the training step's measurement
    ],
)
def test_choose_strategy_reads_the_table(seqlen, causal, heads, grad, expected):
    got = PD.choose_strategy(
        num_q_heads=heads[0],
        num_kv_heads=heads[1],
        seqlen=seqlen,
        causal=causal,
        world_size=2,
        needs_grad=grad,
    )
    assert got == expected


def test_unmeasured_rank_counts_take_the_ring():
    kw = dict(num_q_heads=8, num_kv_heads=8, seqlen=1 << 22, causal=False, needs_grad=False)
    assert [PD.choose_strategy(world_size=n, **kw) for n in (4, 8)] == ["ring", "ring"]


def _stubbed(monkeypatch):
    calls = []
    for module, name in ((parallel, "ring_attention"), (parallel_ulysses, "ulysses_attention")):
        monkeypatch.setattr(module, name, lambda *a, _n=name, **kw: calls.append((_n, kw)))
    monkeypatch.setattr(PD.dist, "get_world_size", lambda group=None: 2)
    return calls


def test_auto_calls_the_chosen_strategy_with_the_callers_arguments(monkeypatch):
    calls = _stubbed(monkeypatch)
    q, k = torch.zeros(1, 8, 4, 16), torch.zeros(1, 2, 4, 16)
    PD.context_parallel_attention(q, k, k, seqlen=HALF_M, causal=False, sharding="contiguous")
    PD.context_parallel_attention(q, k, k, seqlen=HALF_M, causal=True)
    assert [name for name, _ in calls] == ["ulysses_attention", "ring_attention"]
    assert calls[0][1]["sharding"] == "contiguous" and calls[0][1]["seqlen"] == HALF_M
    leaf = q.clone().requires_grad_()
    PD.context_parallel_attention(leaf, k, k, seqlen=HALF_M, causal=False)
    assert calls[-1][0] == "ring_attention"


def test_a_named_strategy_is_used_and_a_bad_one_refused(monkeypatch):
    calls = _stubbed(monkeypatch)
    q, k = torch.zeros(1, 8, 4, 16), torch.zeros(1, 2, 4, 16)
    PD.context_parallel_attention(q, k, k, seqlen=8, strategy="ulysses")
    assert calls[-1][0] == "ulysses_attention"
    with pytest.raises(ValueError, match="strategy must be one of"):
        PD.context_parallel_attention(q, k, k, seqlen=8, strategy="hybrid")
    assert len(calls) == 1
