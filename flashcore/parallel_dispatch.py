"""Which context-parallel strategy serves a call: the ring (``flashcore.parallel``) or the
head all-to-all (``flashcore.parallel_ulysses``), by a table measured on GPUs, as
``flashcore.dispatch`` picks a forward kernel.

``context_parallel_attention(..., strategy="auto")`` takes the same arguments as
``ring_attention`` and ``ulysses_attention`` (both exact: the choice changes the time, not
the rule the output passes).

``ULYSSES_FROM``: (number of ranks, causal) -> the shortest global S from which Ulysses's
forward was measured faster than the ring's; None: not measured faster. Two H200s over
NVLink, commit c481407 (results/nvidia-h200-x2/context_parallel.json), B1 Hq 8 Hkv 2 D 128
bf16, one forward, the ring's time over Ulysses's:

    full    128K 0.988  256K 0.965  512K 1.062  1M 1.105  2M 1.125
    causal  128K 1.050  256K 0.966  512K 1.020  1M 1.019  2M 1.001

Full attention from 512K is Ulysses's: the ring's long blocks run the forward that stores its
lse, which is 8-11% slower at 512K blocks there (notebook 08). Causal, the two stay within
5% with no trend, so the ring keeps it. A call that needs gradients takes the ring: in the
training step of a transformer block (context_parallel_training.json, commit 208a7cf) the
ring's time over Ulysses's was 0.862 at 64K, 0.952 at 128K, 1.003 at 256K and 1.011 at 512K.
Other numbers of ranks are not measured: the ring.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

STRATEGIES = ("auto", "ring", "ulysses")
ULYSSES_FROM = {
    (2, False): 1 << 19,
    (2, True): None,
}


def choose_strategy(
    *, num_q_heads: int, num_kv_heads: int, seqlen: int, causal: bool, world_size: int,
    needs_grad: bool,
) -> str:  # fmt: skip
    """``"ring"`` or ``"ulysses"`` for one call, by ``ULYSSES_FROM`` (Ulysses also needs Hq
    and Hkv divisible by the number of ranks)."""
    if needs_grad:
        return "ring"
    threshold = ULYSSES_FROM.get((world_size, bool(causal)))
    heads_divide = num_q_heads % world_size == 0 and num_kv_heads % world_size == 0
    if threshold is not None and heads_divide and seqlen >= threshold:
        return "ulysses"
    return "ring"


def context_parallel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    seqlen: int,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    sharding: str = "zigzag",
    group=None,
    strategy: str = "auto",
) -> torch.Tensor:
    """Context-parallel exact attention (differentiable) by the strategy ``strategy`` names,
    or for ``"auto"`` the one ``choose_strategy`` picks; arguments and result as
    ``flashcore.parallel.ring_attention`` (without ``return_lse``). Called by every rank of
    ``group``, which must all pass the same ``strategy`` (every rank of an ``"auto"`` call
    sees the same shapes, so each picks the same)."""
    from . import parallel, parallel_ulysses

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy == "auto":
        strategy = choose_strategy(
            num_q_heads=q.shape[1],
            num_kv_heads=k.shape[1],
            seqlen=seqlen,
            causal=causal,
            world_size=dist.get_world_size(group),
            needs_grad=torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)),
        )
    fn = parallel.ring_attention if strategy == "ring" else parallel_ulysses.ulysses_attention
    return fn(
        q, k, v, seqlen=seqlen, causal=causal, window=window, scale=scale, sharding=sharding,
        group=group,
    )  # fmt: skip
