"""References for the error rule: the same attention function in float64 and in the inputs'
own precision (what a plain PyTorch implementation gets), both written the obvious way.

The float64 result stands in for the exact answer. The same-precision result measures how
much error is unavoidable when the arithmetic is done in fp16/bf16/fp32 at all; the rule in
``flashcore.validate`` allows the kernel twice that, plus an ulp-scale floor.
"""

from __future__ import annotations

import math

import torch

# Queries per chunk: bounds the (chunk, Sk) score matrix the references materialise.
_MAX_SCORE_ELEMENTS = 1 << 26


def causal_offset(seqlen_q: int, seqlen_k: int, alignment: str) -> int:
    """Query i sees key j iff j <= i + offset (top-left: 0; bottom-right: Sk - Sq)."""
    if alignment == "top_left":
        return 0
    if alignment == "bottom_right":
        return seqlen_k - seqlen_q
    raise ValueError(f"causal_alignment must be 'top_left' or 'bottom_right', got {alignment!r}")


def visible_keys(
    seqlen_q: int,
    seqlen_k: int,
    *,
    causal: bool,
    alignment: str = "top_left",
    window: int | None = None,
    device=None,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Boolean (Sq, Sk) mask (or (len(rows), Sk) for the given query rows): True where the
    query may attend to the key. ``window`` (causal only): also require
    j > i + offset - window, i.e. only the ``window`` most recent keys."""
    if rows is None:
        rows = torch.arange(seqlen_q, device=device)
    cols = torch.arange(seqlen_k, device=rows.device)
    if not causal:
        return torch.ones(rows.numel(), seqlen_k, dtype=torch.bool, device=rows.device)
    diagonal = rows[:, None] + causal_offset(seqlen_q, seqlen_k, alignment)
    mask = cols[None, :] <= diagonal
    if window is not None:
        mask &= cols[None, :] > diagonal - window
    return mask


def expand_kv_heads(t: torch.Tensor, num_q_heads: int) -> torch.Tensor:
    group = num_q_heads // t.shape[1]
    return t.repeat_interleave(group, dim=1) if group > 1 else t


def attention_reference(
    q,
    k,
    v,
    *,
    causal=False,
    causal_alignment="top_left",
    window=None,
    scale=None,
    compute_dtype=torch.float64,
    return_lse=False,
    query_rows=None,
    softcap=None,
    key_padding_mask=None,
    sinks=None,
):
    """softmax(q k^T * scale + mask) v, with every operation in ``compute_dtype``.

    ``compute_dtype=torch.float64`` gives the reference the error rule measures against;
    ``compute_dtype=q.dtype`` gives the same-precision baseline. Rows that see no key are
    zeros (lse -inf). Shapes as ``flashcore.attention`` (v may have its own head dim D_v:
    the output is ``(B, Hq, Sq, D_v)``, the default scale ``1 / sqrt(q's D)``); returns
    ``compute_dtype`` tensors.

    ``window``: causal sliding window, as ``flashcore.attention`` (masked, not truncated:
    the reference builds the full (rows, Sk) mask).

    ``query_rows`` (1-D index tensor): compute only those query rows, e.g. a sample of a
    sequence too long to reference whole; the result has ``len(query_rows)`` rows.

    ``softcap``: Gemma 2's logit capping, ``softcap * tanh(s / softcap)`` of the scaled
    score s, in ``compute_dtype``, before the mask and the softmax.

    ``key_padding_mask``: optional ``(B, Sk)`` bool, False for keys no query may see
    (padding), on top of the causal / window mask.

    ``sinks``: optional ``(Hq,)`` learnable sink logits (gpt-oss), as transformers' eager
    gpt-oss computes them: one more column of scores per row, the head's sink, joins the
    softmax and is dropped after it (it has no value row); the lse includes it. A row that
    sees no key then puts all its weight on the sink: zeros, lse = the sink. Differentiable
    in ``sinks``.
    """
    batch, num_q_heads, seqlen_q, head_dim = q.shape
    all_rows = (
        torch.arange(seqlen_q, device=q.device) if query_rows is None else query_rows.to(q.device)
    )
    seqlen_k = k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    q_c = q[:, :, all_rows].to(compute_dtype)
    k_c = expand_kv_heads(k, num_q_heads).to(compute_dtype)
    v_c = expand_kv_heads(v, num_q_heads).to(compute_dtype)

    out_shape = (batch, num_q_heads, all_rows.numel(), v.shape[3])  # v's head dim
    out = torch.zeros(out_shape, dtype=compute_dtype, device=q.device)
    lse = torch.full(out_shape[:3], float("-inf"), dtype=compute_dtype, device=q.device)
    if seqlen_k == 0 or out.numel() == 0:
        if sinks is not None:
            lse = sinks.to(compute_dtype)[None, :, None].expand(out_shape[:3]).clone()
        return (out, lse) if return_lse else out

    per_row = max(1, batch * num_q_heads * seqlen_k)
    chunk = max(1, _MAX_SCORE_ELEMENTS // per_row)
    for start in range(0, all_rows.numel(), chunk):
        local = slice(start, min(start + chunk, all_rows.numel()))
        rows = all_rows[local]
        scores = torch.matmul(q_c[:, :, local], k_c.transpose(-1, -2)) * scale
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        mask = visible_keys(
            seqlen_q, seqlen_k, causal=causal, alignment=causal_alignment, window=window, rows=rows
        )
        if key_padding_mask is not None:
            mask = (
                mask[None, None] & key_padding_mask.to(torch.bool).to(mask.device)[:, None, None, :]
            )
        scores = scores.masked_fill(~mask, float("-inf"))
        # softmax of an all -inf row is NaN (and so is its gradient, which would spread to
        # every dK/dV): such a row sees no key, gets finite scores here and zeros below.
        # (NaN from NaN inputs is kept: only rows with no visible key are zeroed.)
        if sinks is not None:
            col = sinks.to(device=q.device, dtype=compute_dtype).view(1, -1, 1, 1)
            full = torch.cat([scores, col.expand(*scores.shape[:3], 1)], dim=-1)
            out[:, :, local] = torch.matmul(torch.softmax(full, dim=-1)[..., :-1], v_c)
            if return_lse:
                lse[:, :, local] = torch.logsumexp(full, dim=-1)
            continue
        has_key = mask.any(dim=-1)
        probs = torch.softmax(scores.masked_fill(~has_key[..., None], 0.0), dim=-1)
        probs = torch.where(
            has_key[..., None], probs, torch.zeros((), dtype=probs.dtype, device=probs.device)
        )
        out[:, :, local] = torch.matmul(probs, v_c)
        if return_lse:
            lse[:, :, local] = torch.logsumexp(scores, dim=-1)
    return (out, lse) if return_lse else out


def kvcache_reference(
    q,
    k_cache,
    v_cache,
    total_lengths,
    *,
    scale=None,
    compute_dtype=torch.float64,
    window=None,
    softcap=None,
    key_padding_mask=None,
    sinks=None,
):
    """Reference for KV-cache attention: sequence b's Sn queries are the last Sn of its
    ``total_lengths[b]`` cached positions (bottom-right causal). ``k_cache``/``v_cache`` must
    already hold the appended tokens. ``window``, ``softcap``, ``key_padding_mask``
    ``(B, S_max)``, ``sinks`` ``(Hq,)``: as ``attention_reference``. Returns ``(B, Hq, Sn, D)`` in
    ``compute_dtype``."""
    outs = []
    for b, length in enumerate(torch.as_tensor(total_lengths).tolist()):
        outs.append(
            attention_reference(
                q[b : b + 1],
                k_cache[b : b + 1, :, :length],
                v_cache[b : b + 1, :, :length],
                causal=True,
                causal_alignment="bottom_right",
                scale=scale,
                compute_dtype=compute_dtype,
                window=window,
                softcap=softcap,
                key_padding_mask=None
                if key_padding_mask is None
                else key_padding_mask[b : b + 1, :length],
                sinks=sinks,
            )
        )
    return torch.cat(outs, 0)


def varlen_reference(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    *,
    causal=False,
    causal_alignment="bottom_right",
    window=None,
    softcap=None,
    scale=None,
    compute_dtype=torch.float64,
):
    """Reference for packed variable-length attention: q ``(total_q, Hq, D)``, k/v
    ``(total_k, Hkv, D)``; sequence b is rows ``cu_seqlens[b]:cu_seqlens[b+1]``, attended on
    its own. Returns ``(total_q, Hq, D_v)`` (v's head dim) in ``compute_dtype``."""
    out = torch.zeros((*q.shape[:2], v.shape[2]), dtype=compute_dtype, device=q.device)
    cq, ck = torch.as_tensor(cu_seqlens_q).tolist(), torch.as_tensor(cu_seqlens_k).tolist()
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        seq = attention_reference(
            q[qs].transpose(0, 1)[None],
            k[ks].transpose(0, 1)[None],
            v[ks].transpose(0, 1)[None],
            causal=causal,
            causal_alignment=causal_alignment,
            window=window,
            softcap=softcap,
            scale=scale,
            compute_dtype=compute_dtype,
        )
        out[qs] = seq[0].transpose(0, 1)
    return out


def tiled_attention(
    q,
    k,
    v,
    *,
    block_n: int = 64,
    scale: float | None = None,
    rescale: bool = True,
    use_exp2: bool = True,
    acc_dtype=None,
    p_dtype=None,
):
    """FlashAttention-2's loop in torch: one pass over key blocks with a running max m, a
    running denominator l and an unnormalised accumulator, divided once at the end.

    rescale=False drops the exp(m_old - m_new) correction: the bug this derivation is about
    (correct only while the running max never changes). use_exp2 folds log2(e) into the
    scale as the kernel does. acc_dtype: accumulator dtype (default q's); p_dtype: dtype the
    probabilities are rounded to before p @ v (the kernel uses v's dtype).
    """
    acc_dtype = acc_dtype or q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    sm = scale / math.log(2) if use_exp2 else scale  # log2(e) folded in, as the kernel
    expf = torch.exp2 if use_exp2 else torch.exp
    m = torch.full((q.shape[0],), -math.inf, dtype=acc_dtype)
    l = torch.zeros((q.shape[0],), dtype=acc_dtype)
    acc = torch.zeros((q.shape[0], v.shape[-1]), dtype=acc_dtype)
    for start in range(0, k.shape[0], block_n):
        kb, vb = k[start : start + block_n], v[start : start + block_n]
        s = (q.to(acc_dtype) @ kb.to(acc_dtype).T) * sm
        m_new = torch.maximum(m, s.amax(-1))
        p = expf(s - m_new[:, None])
        alpha = expf(m - m_new) if rescale else torch.ones_like(m)
        l = l * alpha + p.sum(-1)
        if p_dtype is not None:
            p = p.to(p_dtype)
        acc = (acc * alpha[:, None] + (p.to(vb.dtype) @ vb).to(acc_dtype)).to(acc_dtype)
        m = m_new
    return acc / l[:, None]
