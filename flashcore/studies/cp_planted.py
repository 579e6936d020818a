"""Planted bugs of the context-parallel ring: each must fail the checker (``cp_check``).

A planted bug replaces one step of ``flashcore.parallel`` for the duration of a
``with planted(name):`` block and puts the shipped step back in ``finally``; the shipped
module holds nothing for them (as ``flashcore.validate``'s planted bugs are wrappers of
their own). Each step is a module-level function the ring looks up when it calls it:

    merge_without_rescale   ``merge_partials``: the running output is added unscaled,
                            O = O_a + w_b O_b instead of w_a O_a + w_b O_b
    zigzag_off_by_one       ``zigzag_chunks``: rank r computes as if it held chunks r and
                            2N - 2 - r, not 2N - 1 - r. With S a multiple of 2N (the planted
                            cases) every chunk has the same length, so the shards are laid
                            out as before and only the positions the masks see move
    dkv_not_accumulated     ``_add_received_dkv``: in the ring backward a rank passes on the
                            block's dK/dV without what the ranks before it added
    ulysses_rank_order      ``flashcore.parallel_ulysses``'s ``shard_positions``: the
                            all-to-all puts each rank's rows back in rank order (the
                            contiguous layout) whatever the sharding, so under zigzag the
                            gathered sequence is permuted and the causal mask sees the wrong
                            positions (the exchange and its inverse still agree)

The replacement is made in the process that runs the ring. Under torchrun or the local gloo
spawner every rank is its own process, and every rank enters the block itself
(``cp_check.check_case`` wraps its ring call, forward and backward, in it), so each rank
runs the mutated step.
"""

from __future__ import annotations

import contextlib

import torch

from .. import parallel as P
from .. import parallel_ulysses as U

_merge_partials = P.merge_partials  # the shipped merge, whatever is patched later


def merge_without_rescale(out_a, lse_a, out_b, lse_b):
    """``merge_partials`` with the running output not rescaled: the right lse, and
    O = O_a + exp(L_b - L) O_b."""
    _, lse = _merge_partials(out_a, lse_a, out_b, lse_b)
    seen = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)  # no -inf - -inf
    w_b = torch.exp(lse_b.to(lse.dtype) - seen).float()
    return out_a.float() + out_b.float() * w_b[..., None], lse


def zigzag_off_by_one(rank: int, world_size: int) -> tuple[int, int]:
    """``zigzag_chunks`` with the second chunk one early: 2N - 2 - r."""
    return rank, 2 * world_size - 2 - rank


def drop_received_dkv(dkv, received) -> None:
    """``_add_received_dkv`` that adds nothing: the block's dK/dV travels on without the
    contributions of the ranks before this one."""


def positions_in_rank_order(seqlen: int, world_size: int, rank: int, sharding: str):
    """``shard_positions`` as if every shard were contiguous."""
    return _shard_positions(seqlen, world_size, rank, "contiguous")


_shard_positions = P.shard_positions

# bug -> (the module it patches, the step it replaces, the replacement)
PLANTED_BUGS = {
    "merge_without_rescale": (P, "merge_partials", merge_without_rescale),
    "zigzag_off_by_one": (P, "zigzag_chunks", zigzag_off_by_one),
    "dkv_not_accumulated": (P, "_add_received_dkv", drop_received_dkv),
    "ulysses_rank_order": (U, "shard_positions", positions_in_rank_order),
}


@contextlib.contextmanager
def planted(bug: str | None):
    """Run the block with ``bug`` planted in ``flashcore.parallel`` (None: nothing planted).
    Raises ValueError for an unknown name, before anything is replaced."""
    if bug is None:
        yield
        return
    if bug not in PLANTED_BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; known: {tuple(PLANTED_BUGS)}")
    module, step, mutant = PLANTED_BUGS[bug]
    shipped = getattr(module, step)
    setattr(module, step, mutant)
    try:
        yield
    finally:
        setattr(module, step, shipped)
