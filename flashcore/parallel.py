"""Context parallelism: exact attention over a sequence split across processes (ring attention).

One process per device, in a ``torch.distributed`` process group of N ranks (NCCL on GPUs,
gloo on CPU, where the kernels run under the Triton interpreter). Every rank holds its shard
of the sequence of Q, K and V. The K/V shards travel around the ring: at step t rank r holds
the K/V of rank (r - t) mod N, sends it on to rank r + 1 and receives the next one from rank
r - 1 while it attends its queries to the block in hand (two buffers, the transfer of step
t + 1 overlapped with the attention of step t). Each (query chunk, key chunk) pair is

    skip      the mask hides every pair (causal: keys after all queries; window: keys
              before every query's window),
    full      every query sees every key: the kernel without a mask,
    masked    the causal diagonal, or the edge of a sliding window: the kernel with the
              causal mask at the pair's global offset (query i sees key j iff
              k_start + j <= q_start + i, and > q_start + i - window with a window).

Each pair returns its partial output O_b and log-sum-exp L_b (natural log) over the keys it
saw; partials over disjoint key sets merge exactly:

    L = log(exp(L_a) + exp(L_b)),   O = exp(L_a - L) O_a + exp(L_b - L) O_b,

computed with the larger of L_a, L_b subtracted first, so nothing overflows; a row that has
seen no key keeps L = -inf and O = 0 (no NaN). ``merge_partials`` is that step.

Sharding. ``"zigzag"`` (the causal load balance): the sequence is cut into 2N chunks and rank
r holds chunks r and 2N - 1 - r, one early and one late, so every rank does the same causal
work. ``"contiguous"``: rank r holds chunk r of N (non-causal; for causal it is the unbalanced
baseline: the last rank does about 2N - 1 times the work of the first). Uneven S: chunks
are uneven, not padded: the first S mod C of the C chunks hold one row more. Every position
is a real token, so no padding needs masking; the ring buffers are sized for the largest
shard and each step views the sender's length. ``shard`` / ``unshard`` move between the
global sequence and the shards.

GQA: only the Hkv key/value heads travel. Sliding windows are in global positions; pairs the
window never reaches are skipped, so a windowed ring does O(S * window) work.

Backward: ``ring_attention`` is differentiable (an autograd Function). The ring runs again:
each rank recomputes its blocks with the backward kernels (``flashcore/kernels/backward.py``)
from the saved global lse and output, adds dQ locally, and adds dK/dV into an fp32
accumulator that travels around the ring one hop behind its K/V block and ends at the block's
owner. Not supported: gradients with ``skip_comm`` (raises).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ._checks import check_attention_inputs, check_window
from .kernels._softmax import LOG2E, lse_dtype

SHARDINGS = ("zigzag", "contiguous")


# ---------------------------------------------------------------------------------------
# Sharding: which global positions each rank holds.


def chunk_bounds(seqlen: int, num_chunks: int) -> list[int]:
    """Boundaries of ``num_chunks`` chunks of ``seqlen`` positions: the first
    ``seqlen % num_chunks`` chunks hold one position more. ``len(result) == num_chunks + 1``."""
    base, extra = divmod(seqlen, num_chunks)
    bounds = [0]
    for c in range(num_chunks):
        bounds.append(bounds[-1] + base + (1 if c < extra else 0))
    return bounds


def zigzag_chunks(rank: int, world_size: int) -> tuple[int, int]:
    """The two chunks (of 2N) that rank r holds under zigzag sharding: r and 2N - 1 - r."""
    return rank, 2 * world_size - 1 - rank


def shard_spans(
    seqlen: int, world_size: int, rank: int, sharding: str = "zigzag"
) -> list[tuple[int, int]]:
    """Global ``[start, end)`` spans of rank's shard, in the order they are stored locally."""
    if sharding == "zigzag":
        bounds = chunk_bounds(seqlen, 2 * world_size)
        return [(bounds[c], bounds[c + 1]) for c in zigzag_chunks(rank, world_size)]
    if sharding == "contiguous":
        bounds = chunk_bounds(seqlen, world_size)
        return [(bounds[rank], bounds[rank + 1])]
    raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")


def shard_positions(
    seqlen: int, world_size: int, rank: int, sharding: str = "zigzag"
) -> torch.Tensor:
    """The global positions of rank's shard, one per local row (int64)."""
    return torch.cat(
        [torch.arange(a, b) for a, b in shard_spans(seqlen, world_size, rank, sharding)]
    )


def shard(
    x: torch.Tensor, world_size: int, rank: int, sharding: str = "zigzag", seq_dim: int = 2
) -> torch.Tensor:
    """Rank's shard of a global tensor along ``seq_dim`` (a contiguous copy)."""
    spans = shard_spans(x.shape[seq_dim], world_size, rank, sharding)
    return torch.cat([x.narrow(seq_dim, a, b - a) for a, b in spans], dim=seq_dim).contiguous()


def unshard(shards: list[torch.Tensor], sharding: str = "zigzag", seq_dim: int = 2) -> torch.Tensor:
    """The global tensor from all ranks' shards (``shards[r]`` from rank r)."""
    world_size = len(shards)
    seqlen = sum(s.shape[seq_dim] for s in shards)
    shape = list(shards[0].shape)
    shape[seq_dim] = seqlen
    out = shards[0].new_empty(shape)
    for rank, local in enumerate(shards):
        spans = shard_spans(seqlen, world_size, rank, sharding)
        expected = sum(b - a for a, b in spans)
        if local.shape[seq_dim] != expected:
            raise ValueError(
                f"shard of rank {rank} has {local.shape[seq_dim]} positions along dim "
                f"{seq_dim}, expected {expected} for S={seqlen}, N={world_size}, {sharding}"
            )
        offset = 0
        for a, b in spans:
            out.narrow(seq_dim, a, b - a).copy_(local.narrow(seq_dim, offset, b - a))
            offset += b - a
    return out


# ---------------------------------------------------------------------------------------
# Which (query chunk, key chunk) pairs to compute.


def classify_pair(
    q_span: tuple[int, int], k_span: tuple[int, int], causal: bool, window: int | None
) -> str:
    """``"skip"``, ``"full"`` or ``"masked"`` for queries ``q_span`` and keys ``k_span``
    (global [start, end) positions). Causal: query p sees key j iff j <= p (and
    j > p - window with a window)."""
    (qs, qe), (ks, ke) = q_span, k_span
    if qe <= qs or ke <= ks:
        return "skip"
    if not causal:
        return "full"
    if ks > qe - 1:  # every key after the last query
        return "skip"
    if window is not None and ke - 1 <= qs - window:  # every key before the first window
        return "skip"
    sees_all = ke - 1 <= qs and (window is None or ks > qe - 1 - window)
    return "full" if sees_all else "masked"


def work_per_rank(
    seqlen: int, world_size: int, sharding: str, causal: bool, window: int | None = None
) -> list[int]:
    """Visible (query, key) pairs each rank computes: the load-balance picture."""
    work = []
    for rank in range(world_size):
        total = 0
        for qs, qe in shard_spans(seqlen, world_size, rank, sharding):
            pos = torch.arange(qs, qe, dtype=torch.int64)
            if not causal:
                total += (qe - qs) * seqlen
            elif window is None:
                total += int((pos + 1).sum())
            else:
                total += int(torch.clamp(pos + 1, max=window).sum())
        work.append(total)
    return work


# ---------------------------------------------------------------------------------------
# The partial-output merge.


def merge_partials(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
):
    """Exact merge of two attention partials over disjoint key sets.

    ``out_*``: (..., S, D) normalised partial outputs; ``lse_*``: (..., S) natural-log
    log-sum-exp of the scaled scores each partial saw (-inf: saw no key, its output is
    ignored). Returns out in float32 and lse in float32, or float64 where either lse is
    (float32 inputs: ``kernels._softmax.lse_dtype``). A row where both are -inf stays -inf
    with zero output."""
    dtype = torch.float64 if torch.float64 in (lse_a.dtype, lse_b.dtype) else torch.float32
    lse_a = lse_a.to(dtype)
    lse_b = lse_b.to(dtype)
    top = torch.maximum(lse_a, lse_b)
    # Rows that saw nothing on both sides: subtract 0, so exp(-inf - 0) = 0, not NaN.
    top = torch.where(top == float("-inf"), torch.zeros_like(top), top)
    w_a = torch.exp(lse_a - top)
    w_b = torch.exp(lse_b - top)
    total = w_a + w_b
    lse = top + torch.log(total)  # log(0) = -inf for rows that saw nothing
    inv = 1.0 / torch.where(total == 0, torch.ones_like(total), total)
    w_a, w_b = (w_a * inv).float(), (w_b * inv).float()  # the output's weights, in fp32
    out = out_a.float() * w_a[..., None] + out_b.float() * w_b[..., None]
    return out, lse


def _merge_into(
    acc: torch.Tensor, acc_lse: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> None:
    """In-place merge of a block's fp32 partial into the running (acc, acc_lse) rows."""
    out, lse = merge_partials(acc, acc_lse, out_b, lse_b)
    acc.copy_(out)
    acc_lse.copy_(lse)


# ---------------------------------------------------------------------------------------
# One block: the forward kernel at an arbitrary causal offset, fp32 partial output.


def _block_attention(
    q, k, v, out, lse, *, causal_offset: int, causal: bool, window: int | None, scale: float
) -> None:
    """Launch the forward kernel on one (query chunk, key chunk) pair.

    Both kernels take any causal offset (query i sees key j iff j <= i + offset); here it is
    q_start - k_start in global positions. The same choice as ``flashcore.attention``: the
    Gluon Hopper kernel (``kernels/forward_hopper.py``) where its dispatch table picks it
    for this block's shape (then ``out`` is in q's dtype, the precision it stores), else
    the Triton kernel, which stores ``out`` in whatever dtype it has (float32 here: the
    partial is not rounded before the merge). ``lse`` (B, Hq, Sq) contiguous, of
    ``lse_dtype(q.dtype)``."""
    from .interface import forward_kernel
    from .kernels import forward_hopper
    from .kernels.forward import launch_forward

    if out.dtype == q.dtype and forward_kernel(q, k, v, causal=causal, window=window) == "gluon":
        forward_hopper.attention_hopper(
            q,
            k,
            v,
            out,
            lse,
            causal_offset=causal_offset,
            is_causal=causal,
            qk_scale=scale * LOG2E,
            store_lse=True,
        )
        return
    launch_forward(
        q,
        k,
        v,
        out,
        lse,
        seqs=None,
        max_seqlen_q=None,
        causal=causal,
        bottom_right=False,
        window=window,
        softcap=None,
        scale=scale,
        return_lse=True,
        config=None,
        key=None,
        causal_offset=causal_offset,
    )


# ---------------------------------------------------------------------------------------
# The ring.


def _global_rank(group, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def ring_exchange(send: torch.Tensor, recv: torch.Tensor, group=None, tag: int = 0) -> list:
    """Post one ring step: send ``send`` to the next rank, receive the previous rank's into
    ``recv``. Returns the works to wait on (``batch_isend_irecv``). ``tag`` keeps the K/V
    stream and the dK/dV stream of the backward apart on gloo (NCCL matches by order)."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    ops = [
        dist.P2POp(dist.isend, send, _global_rank(group, (rank + 1) % world_size), group, tag),
        dist.P2POp(dist.irecv, recv, _global_rank(group, (rank - 1) % world_size), group, tag),
    ]
    return dist.batch_isend_irecv(ops)


def check_context_parallel_call(fn, q, k, v, seqlen, causal, window, scale, sharding) -> float:
    """The argument checks every context-parallel entry point shares (``fn`` names it in the
    errors); returns the softmax scale (default ``1 / sqrt(D)``)."""
    with torch.no_grad():
        check_attention_inputs(q, k, v, max_head_dim=256)
    check_window(window, causal)
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{fn} needs an initialised torch.distributed process group "
            "(e.g. run under torchrun and call dist.init_process_group)"
        )
    if not isinstance(seqlen, int) or seqlen < 0:
        raise ValueError(f"expected seqlen to be a non-negative int, got {seqlen!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3]) if q.shape[3] else 1.0
    return scale


def ring_attention(
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
    return_lse: bool = False,
    skip_comm: bool = False,
):
    """Context-parallel exact attention (differentiable), called by every rank of ``group``.

    Args:
        q: this rank's query shard ``(B, Hq, L, D)``; k, v: its key/value shard
            ``(B, Hkv, L, D)``, where L is the shard length ``shard`` gives for global
            length ``seqlen`` (any strides). Same dtype/device rules as
            ``flashcore.attention`` (fp16/bf16 on CUDA, fp32 anywhere, fp16/fp32 on CPU
            under the Triton interpreter).
        seqlen: the global sequence length S (fixes every rank's positions).
        causal: causal mask in global positions (query p sees key j <= p).
        window: causal sliding window in global positions (requires causal).
        sharding: ``"zigzag"`` (chunks r and 2N-1-r of 2N; balanced causal work) or
            ``"contiguous"`` (chunk r of N). Both must match how the shards were cut.
        group: the process group (default: the world).
        return_lse: also return the (B, Hq, L) natural-log log-sum-exp (float32, float64
            for float32 inputs, as ``flashcore.attention``).
        skip_comm: benchmarks only: the same compute with every transfer skipped (each
            step attends to the local buffer as if it had arrived). The result is wrong.

    Returns ``out`` (q's shape and dtype) or ``(out, lse)``.

    Gradients: when q, k or v requires grad (grad mode on), the call is an autograd
    Function whose backward is the ring backward: K/V travel the ring again, each rank adds
    its queries' dK/dV contributions to the block in hand, and the dK/dV accumulators travel
    with their block and return to the owner after the last step. The saved global lse and
    output make every block's P and delta exact. Not with ``skip_comm`` (raises).
    """
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)
    )
    scale = check_context_parallel_call(
        "ring_attention", q, k, v, seqlen, causal, window, scale, sharding
    )
    kwargs = dict(
        seqlen=seqlen, causal=causal, window=window, scale=scale, sharding=sharding, group=group
    )
    if needs_grad:
        if skip_comm:
            raise ValueError("skip_comm is a forward-only benchmark switch")
        out, lse = _RingAttentionFunction.apply(q, k, v, kwargs)
    else:
        out, lse = _ring_forward(q, k, v, skip_comm=skip_comm, **kwargs)
    return (out, lse) if return_lse else out


def _shard_layout(seqlen, world_size, rank, sharding, q, k):
    my_spans = shard_spans(seqlen, world_size, rank, sharding)
    my_len = sum(b - a for a, b in my_spans)
    if q.shape[2] != my_len or k.shape[2] != my_len:
        raise ValueError(
            f"rank {rank}: expected q, k, v shards of {my_len} positions "
            f"(S={seqlen}, N={world_size}, {sharding}), got q {q.shape[2]}, k {k.shape[2]}"
        )
    lengths = [
        sum(b - a for a, b in shard_spans(seqlen, world_size, r, sharding))
        for r in range(world_size)
    ]
    q_offsets, offset = [], 0
    for a, b in my_spans:
        q_offsets.append(offset)
        offset += b - a
    return my_spans, my_len, lengths, q_offsets


def _block_pairs(seqlen, world_size, rank, source, sharding, causal, window):
    """The blocks rank computes against source's K/V: yields (query chunk index, query rows,
    key rows (local slices), "full" | "masked", causal offset q_start - k_start: query i of
    the block sees key j iff j <= i + offset)."""
    k_offset = 0
    for ks, ke in shard_spans(seqlen, world_size, source, sharding):
        q_offset = 0
        for chunk, (qs, qe) in enumerate(shard_spans(seqlen, world_size, rank, sharding)):
            kind = classify_pair((qs, qe), (ks, ke), causal, window)
            if kind != "skip":
                yield (
                    chunk,
                    slice(q_offset, q_offset + qe - qs),
                    slice(k_offset, k_offset + ke - ks),
                    kind,
                    qs - ks,
                )
            q_offset += qe - qs
        k_offset += ke - ks


def _ring_forward(q, k, v, *, seqlen, causal, window, scale, sharding, group, skip_comm=False):
    """The forward ring; returns (out in q's dtype, lse of lse_dtype(q.dtype))."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    my_spans, my_len, lengths, q_offsets = _shard_layout(seqlen, world_size, rank, sharding, q, k)
    batch, num_q_heads, _, head_dim = q.shape
    num_kv_heads = k.shape[1]

    max_len = max(lengths)

    acc = torch.zeros((batch, num_q_heads, my_len, head_dim), dtype=torch.float32, device=q.device)
    acc_lse = torch.full(
        (batch, num_q_heads, my_len), float("-inf"), dtype=lse_dtype(q.dtype), device=q.device
    )
    if seqlen == 0:  # every rank agrees: nothing to send. (A rank with an empty shard
        return acc.to(q.dtype), acc_lse  # when S < N still forwards the others' blocks.)

    # Two flat buffers of the largest shard, K then V: one message per step.
    per_tensor = batch * num_kv_heads * max_len * head_dim
    buffers = [torch.empty(2 * per_tensor, dtype=k.dtype, device=k.device)]
    if world_size > 1 and not skip_comm:
        buffers.append(torch.empty_like(buffers[0]))

    def kv_views(buf, length):
        n = batch * num_kv_heads * length * head_dim
        shape = (batch, num_kv_heads, length, head_dim)
        return buf[:n].view(shape), buf[n : 2 * n].view(shape)

    k0, v0 = kv_views(buffers[0], my_len)
    k0.copy_(k)
    v0.copy_(v)

    # Each block's partial lands in a contiguous per-chunk scratch (the kernel writes lse
    # as a contiguous (B, Hq, rows) array), then merges into the running rows.
    # Partials in float32, or in q's dtype where the Gluon Hopper kernel can take blocks
    # (it stores its output in the inputs' precision, as for a single-device call).
    partial_dtype = torch.float32
    if q.is_cuda and q.dtype != torch.float32:
        from .kernels import forward_hopper

        if forward_hopper.supports(q, k, v, window=window):
            partial_dtype = q.dtype
    scratch = [
        (
            torch.empty(
                (batch, num_q_heads, b - a, head_dim), dtype=partial_dtype, device=q.device
            ),
            torch.empty((batch, num_q_heads, b - a), dtype=lse_dtype(q.dtype), device=q.device),
        )
        for a, b in my_spans
    ]
    for step in range(world_size):
        source = (rank - step) % world_size
        current = buffers[step % len(buffers)]
        works = []
        if step + 1 < world_size and len(buffers) == 2:
            works = ring_exchange(current, buffers[(step + 1) % 2], group)
        k_blk, v_blk = kv_views(current, lengths[source])
        for chunk, rows, k_rows, kind, offset in _block_pairs(
            seqlen, world_size, rank, source, sharding, causal, window
        ):
            out_b, lse_b = scratch[chunk]
            out_b.fill_(float("nan"))  # poisoned: an element the kernel skips fails the check
            _block_attention(
                q[:, :, rows],
                k_blk[:, :, k_rows],
                v_blk[:, :, k_rows],
                out_b,
                lse_b,
                causal_offset=offset,
                causal=kind == "masked",
                window=window if kind == "masked" else None,
                scale=scale,
            )
            _merge_into(acc[:, :, rows], acc_lse[:, :, rows], out_b, lse_b)
        for work in works:
            work.wait()

    return acc.to(q.dtype), acc_lse


# ---------------------------------------------------------------------------------------
# The ring backward.


def _block_backward(
    dout, q, k, v, out, lse, *, causal_offset: int, causal: bool, window: int | None, scale: float
):
    """(dq, dk, dv) of one (query chunk, key chunk) pair, in the inputs' dtype, from the
    final (global) output and lse of the query rows: P = exp(S - lse) is then this block of
    the whole row's softmax and delta = rowsum(dO o O) the whole row's, so the blocks'
    contributions add up to the exact gradients (``attention_backward``, the documented
    backward of ``flashcore.attention``).

    That function takes the causal offsets 0 (top-left) and Sk - Sq (bottom-right); a
    window block at another offset d = q_start - k_start gets zero keys appended until
    Sk - Sq = d. A zero key adds nothing to dQ (its dS is multiplied by K = 0) and its own
    dK/dV rows are dropped, so the real gradients are unchanged.

    Where ``flashcore.attention``'s autograd would run the warp-specialized Gluon backward
    on this block's shape (``dispatch.backward_kernel``, deterministic mode), the block runs
    it too, on contiguous copies of its rows: the ring's blocks are long (S / 2N rows and
    more), where that kernel is the faster (results/<gpu>/backward.json)."""
    from .dispatch import backward_kernel
    from .kernels.backward import attention_backward

    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    kw = dict(causal=causal, window=window, scale=scale)
    aligned = not causal or causal_offset in (0, seqlen_k - seqlen_q)
    if aligned and backward_kernel(q, k, v, causal=causal, deterministic=True, window=window) == (
        "gluon_ws_det"
    ):
        return _block_backward_gluon(dout, q, k, v, out, lse, causal, causal_offset, scale)
    if not causal or (causal_offset == 0 and seqlen_q == seqlen_k):
        return attention_backward(dout, q, k, v, out, lse, **kw)
    pad = causal_offset - (seqlen_k - seqlen_q)
    if pad < 0:  # never produced by the chunk-aligned pairs of _block_pairs
        raise AssertionError(
            f"unexpected block: offset {causal_offset}, Sq {seqlen_q}, Sk {seqlen_k}"
        )
    zeros = k.new_zeros((k.shape[0], k.shape[1], pad, k.shape[3]))
    dq, dk, dv = attention_backward(
        dout,
        q,
        torch.cat([k, zeros], 2),
        torch.cat([v, zeros], 2),
        out,
        lse,
        causal_alignment="bottom_right",
        **kw,
    )
    return dq, dk[:, :, :seqlen_k], dv[:, :, :seqlen_k]


def _block_backward_gluon(dout, q, k, v, out, lse, causal, causal_offset, scale):
    """One block through the warp-specialized Gluon backward (deterministic), as
    ``flashcore.attention``'s autograd calls it; the rows' views copied contiguous (its TMA
    descriptors read each tensor as one (rows, D) matrix)."""
    from .kernels import backward_hopper_ws

    q, k, v, dout, out = (t.contiguous() for t in (q, k, v, dout, out))
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    backward_hopper_ws.attention_backward_hopper_ws(
        dout, q, k, v, out, lse.contiguous(), dq, dk, dv, scale=scale,
        causal_offset=causal_offset if causal else 0, is_causal=causal, deterministic=True,
    )  # fmt: skip
    return dq, dk, dv


def _ring_backward(dout, q, k, v, out, lse, *, seqlen, causal, window, scale, sharding, group):
    """(dq, dk, dv) of this rank's shards. K/V travel the ring as in the forward; the fp32
    dK/dV accumulator of each block travels one hop behind it (each rank adds its
    contribution, then passes it on), and after the last step every block's accumulator
    arrives back at its owner."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    my_spans, my_len, lengths, _ = _shard_layout(seqlen, world_size, rank, sharding, q, k)
    batch, num_q_heads, _, head_dim = q.shape
    num_kv_heads = k.shape[1]
    dev = q.device

    # Per query chunk, contiguous (B, Hq, rows) lse, as the backward takes it.
    chunk_lse, offset = [], 0
    for a, b in my_spans:
        chunk_lse.append(lse[:, :, offset : offset + b - a].contiguous())
        offset += b - a
    dq_acc = torch.zeros((batch, num_q_heads, my_len, head_dim), dtype=torch.float32, device=dev)

    def flat_len(length):
        return batch * num_kv_heads * length * head_dim

    def views(buf, length):
        n, shape = flat_len(length), (batch, num_kv_heads, length, head_dim)
        return buf[:n].view(shape), buf[n : 2 * n].view(shape)

    max_len = max(lengths)
    kv_bufs = [
        torch.empty(2 * flat_len(max_len), dtype=k.dtype, device=dev)
        for _ in range(min(world_size, 2))
    ]
    k0, v0 = views(kv_bufs[0], my_len)
    k0.copy_(k)
    v0.copy_(v)
    dkv_works, dkv_recv = [], None
    for step in range(world_size):
        source = (rank - step) % world_size
        current = kv_bufs[step % len(kv_bufs)]
        kv_works = (
            ring_exchange(current, kv_bufs[(step + 1) % 2], group, tag=0)
            if step + 1 < world_size
            else []
        )
        k_blk, v_blk = views(current, lengths[source])
        dkv = torch.zeros(2 * flat_len(lengths[source]), dtype=torch.float32, device=dev)
        dk_blk, dv_blk = views(dkv, lengths[source])
        for chunk, rows, k_rows, kind, offset in _block_pairs(
            seqlen, world_size, rank, source, sharding, causal, window
        ):
            dq_b, dk_b, dv_b = _block_backward(
                dout[:, :, rows],
                q[:, :, rows],
                k_blk[:, :, k_rows],
                v_blk[:, :, k_rows],
                out[:, :, rows],
                chunk_lse[chunk],
                causal_offset=offset,
                causal=kind == "masked",
                window=window if kind == "masked" else None,
                scale=scale,
            )
            dq_acc[:, :, rows] += dq_b
            dk_blk[:, :, k_rows] += dk_b
            dv_blk[:, :, k_rows] += dv_b
        if world_size > 1:
            if step > 0:  # what the ranks before added to this block's dK/dV
                for work in dkv_works:
                    work.wait()
                _add_received_dkv(dkv, dkv_recv)
            # Pass it on; receive the accumulator of the block this rank holds next (after
            # the last step: its own block, complete).
            dkv_recv = torch.empty(
                2 * flat_len(lengths[(rank - step - 1) % world_size]),
                dtype=torch.float32,
                device=dev,
            )
            dkv_works = ring_exchange(dkv, dkv_recv, group, tag=1)
        for work in kv_works:
            work.wait()
    if world_size > 1:
        for work in dkv_works:
            work.wait()
        dkv = dkv_recv
    dk, dv = views(dkv, my_len)
    return dq_acc.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _add_received_dkv(dkv: torch.Tensor, received: torch.Tensor) -> None:
    """Add to the fp32 dK/dV accumulator of the block in hand what the ranks before this one
    added to it (``received``, from the previous rank), in place: the step that makes each
    block's gradient the sum over every rank's queries."""
    dkv += received


class _RingAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, kwargs):
        out, lse = _ring_forward(q, k, v, **kwargs)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.kwargs = kwargs
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(grad_out.to(q.dtype), q, k, v, out, lse, **ctx.kwargs)
        return dq, dk, dv, None
