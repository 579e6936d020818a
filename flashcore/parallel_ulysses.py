"""Context parallelism by all-to-all (DeepSpeed-Ulysses): heads split across ranks, not keys.

The ring (``flashcore.parallel``) keeps every rank's queries in place and moves K/V around N - 1
steps; each step's block is 1/N of the keys, so at large N the blocks get small and the
per-step kernel launches and transfers dominate. The all-to-all strategy instead trades the
sequence split for a head split, once before and once after the attention:

    shard (B, H, L_r, D) on rank r, L_r = the rank's positions (zigzag or contiguous)
      -- all-to-all -->  rank g holds heads [g H/N, (g+1) H/N) of every position, (B, H/N, S, D)
      -- flashcore.attention on the whole sequence (one kernel launch, causal/window exact)
      -- all-to-all -->  back to (B, H, L_r, D) on rank r

Each all-to-all moves (N - 1)/N of the local tensor: 4 of them in the forward (q, k, v, out),
4 in the backward (dout in; dq, dk, dv out), independent of how many steps a ring would take.
Only the Hkv key/value heads travel. The cost: every rank must hold H/N heads of the whole
sequence (the same bytes as its shard), and the heads must divide: Hq % N == 0 and
Hkv % N == 0 (query head group g reads exactly key/value head group g, since query head h
reads KV head h // (Hq / Hkv)). Calls that do not divide raise; the ring serves them.

Positions: the shards are cut as ``flashcore.parallel.shard`` cuts them (zigzag or contiguous,
uneven lengths allowed); the gathered sequence is put back in global order
(``shard_positions``), so the causal mask and sliding windows are the single-device ones.

Gradients: the two exchanges are each other's adjoint (an all-to-all is a permutation of
blocks), so each is an autograd Function whose backward is the other; the attention in the
middle is ``flashcore.attention``'s own autograd (deterministic dQ by default).

Which strategy is faster at a given N and S is a measurement on the GPUs (the ring overlaps
its transfers with compute; the all-to-all does not, but runs one long kernel); nothing here
assumes an answer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .parallel import check_context_parallel_call, shard_positions


def _check_divides(name: str, heads: int, world_size: int) -> None:
    if heads % world_size:
        raise ValueError(
            f"ulysses_attention splits heads across ranks: expected {name} ({heads}) to be "
            f"divisible by the number of ranks ({world_size}); ring_attention serves any head count"
        )


def _exchange(x: torch.Tensor, send_splits: list[int], recv_splits: list[int], group):
    """One all-to-all of a flat tensor: ``send_splits[g]`` elements go to rank g,
    ``recv_splits[r]`` elements arrive from rank r (in rank order)."""
    out = x.new_empty(sum(recv_splits))
    dist.all_to_all_single(out, x, recv_splits, send_splits, group=group)
    return out


class _SeqToHeads(torch.autograd.Function):
    """(B, H, L_r, D) shard -> (B, H/N, S, D) head group in global order; backward: the inverse."""

    @staticmethod
    def forward(ctx, x, seqlen, sharding, group):
        ctx.meta = (seqlen, sharding, group)
        return _seq_to_heads(x, seqlen, sharding, group)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_seq(grad.contiguous(), *ctx.meta), None, None, None


class _HeadsToSeq(torch.autograd.Function):
    """(B, H/N, S, D) head group -> (B, H, L_r, D) shard; backward: the inverse."""

    @staticmethod
    def forward(ctx, x, seqlen, sharding, group):
        ctx.meta = (seqlen, sharding, group)
        return _heads_to_seq(x, seqlen, sharding, group)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_heads(grad.contiguous(), *ctx.meta), None, None, None


def _layout(seqlen, sharding, group):
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    positions = [shard_positions(seqlen, world_size, r, sharding) for r in range(world_size)]
    return world_size, rank, positions


def _seq_to_heads(x, seqlen, sharding, group):
    world_size, rank, positions = _layout(seqlen, sharding, group)
    b, h, length, d = x.shape
    hg = h // world_size
    # Head group g of this shard goes to rank g: (N, B, H/N, L_r, D), contiguous per group.
    send = x.reshape(b, world_size, hg, length, d).transpose(0, 1).contiguous().flatten()
    per_position = b * hg * d
    recv = _exchange(
        send,
        [per_position * length] * world_size,
        [per_position * p.numel() for p in positions],
        group,
    )
    # From rank r: its L_r positions of this rank's head group; put them at their global places.
    pieces = recv.split([per_position * p.numel() for p in positions])
    whole = x.new_empty(b, hg, seqlen, d)
    for r, piece in enumerate(pieces):
        idx = positions[r].to(x.device)
        whole.index_copy_(2, idx, piece.view(b, hg, idx.numel(), d))
    return whole


def _heads_to_seq(x, seqlen, sharding, group):
    world_size, rank, positions = _layout(seqlen, sharding, group)
    b, hg, _, d = x.shape
    mine = positions[rank]
    # Rank r gets this head group at its own positions; this rank gets every head group at its.
    send = torch.cat([x.index_select(2, p.to(x.device)).flatten() for p in positions])
    per_position = b * hg * d
    recv = _exchange(
        send,
        [per_position * p.numel() for p in positions],
        [per_position * mine.numel()] * world_size,
        group,
    )
    groups = recv.view(world_size, b, hg, mine.numel(), d)
    return groups.transpose(0, 1).reshape(b, world_size * hg, mine.numel(), d)


def ulysses_attention(
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
) -> torch.Tensor:
    """Context-parallel exact attention by head all-to-all (differentiable), called by every
    rank of ``group``; the same contract as :func:`flashcore.parallel.ring_attention`.

    Args:
        q: this rank's query shard ``(B, Hq, L, D)``; k, v: its key/value shard
            ``(B, Hkv, L, D)``, cut by ``flashcore.parallel.shard`` for global length
            ``seqlen`` with ``sharding`` (zigzag or contiguous; any strides).
        seqlen: the global sequence length S.
        causal, window, scale: as ``flashcore.attention`` on the whole sequence (causal in
            global positions; window requires causal).
        group: the process group (default: the world).

    Returns this rank's output shard, q's shape and dtype.

    Raises ValueError when Hq or Hkv is not divisible by the number of ranks (the ring has
    no such limit), and RuntimeError without an initialised process group.
    """
    from .interface import attention

    scale = check_context_parallel_call(
        "ulysses_attention", q, k, v, seqlen, causal, window, scale, sharding
    )
    world_size = dist.get_world_size(group)
    _check_divides("Hq", q.shape[1], world_size)
    _check_divides("Hkv", k.shape[1], world_size)
    expected = shard_positions(seqlen, world_size, dist.get_rank(group), sharding).numel()
    if q.shape[2] != expected or k.shape[2] != expected:
        raise ValueError(
            f"expected shards of {expected} positions (seqlen {seqlen}, {world_size} ranks, "
            f"{sharding}), got q {q.shape[2]}, k {k.shape[2]}"
        )
    meta = (seqlen, sharding, group)
    qh, kh, vh = (_SeqToHeads.apply(t.contiguous(), *meta) for t in (q, k, v))
    out = attention(qh, kh, vh, causal=causal, window=window, scale=scale)
    return _HeadsToSeq.apply(out.contiguous(), *meta)
