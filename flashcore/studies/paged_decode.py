"""Paged KV decode beside dense decode, against the copy ceiling (GPU).

    python -m flashcore bench --suite paged [--record]

writes results/<gpu>/paged_decode.json. One query per sequence (Sn = 1), bf16, D 128, GQA
32/8, every sequence holding the whole cache (8K to 128K tokens, nothing appended,
``check_lengths=False``: the work a CUDA-graph decode step does). For each shape:

* ``dense``: ``attention_with_kvcache`` on ``(B, Hkv, Sk, D)`` caches;
* ``paged_<P>``: the same call on page pools ``(num_pages, Hkv, P, D)`` through a block
  table whose pages are a random permutation of the pool (no two neighbouring positions'
  pages adjacent in memory), for P in 16, 64, 256;
* ``fa4_paged_<P>``: FlashAttention-4's ``flash_attn_varlen_func`` with ``page_table`` on
  the same pages in its own ``(num_pages, P, Hkv, D)`` layout, where ``flash_attn.cute``
  imports and the call runs (otherwise the row holds the error); its output's largest
  difference from flashcore's is recorded beside its time.

Times are CUDA-graph replays (``bench.time_launches(graph=True)``, GPU time without the
host); ``tbps`` is K + V bytes read per second, ``of_copy`` that over the device-copy
ceiling measured in the same process (``bench.copy_ceiling``, bytes read + written), and
``vs_dense`` the dense row's time over this row's (above 1: faster than dense).
"""

from __future__ import annotations

import torch

PAGE_SIZES = (16, 64, 256)


def paged_decode_shapes(quick: bool = False) -> list[dict]:
    caches = (8192, 32768) if quick else (8192, 32768, 131072)
    batches = (1,) if quick else (1, 4)
    return [
        dict(B=b, Hq=32, Hkv=8, Sk=sk, D=128, dtype="bfloat16") for sk in caches for b in batches
    ]


def _fa4_paged():
    """FA4's varlen entry point, or None where flash_attn.cute is not installed."""
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception:
        return None
    return flash_attn_varlen_func


def _pools(k, v, page_size, gen):
    """Dense (B, Hkv, Sk, D) caches as shuffled page pools (num_pages, Hkv, P, D) and the
    block table that reads them back."""
    batch, heads, seqlen, dim = k.shape
    per_seq = seqlen // page_size
    perm = torch.randperm(batch * per_seq, generator=gen).to(k.device)
    table = perm.view(batch, per_seq).to(torch.int32)

    def pool(x):
        pages = x.view(batch, heads, per_seq, page_size, dim).permute(0, 2, 1, 3, 4)
        out = torch.empty_like(pages.reshape(batch * per_seq, heads, page_size, dim))
        out[perm] = pages.reshape(batch * per_seq, heads, page_size, dim)
        return out

    return pool(k), pool(v), table


def bench_paged_shape(shape: dict, *, reps: int = 100, page_sizes=PAGE_SIZES) -> list[dict]:
    from ..interface import attention_with_kvcache
    from . import bench

    batch, hq, hkv, seqlen, dim = (shape[k] for k in ("B", "Hq", "Hkv", "Sk", "D"))
    dtype = getattr(torch, shape["dtype"])
    gen = torch.Generator().manual_seed(seqlen + batch)
    kv_bytes = 2 * batch * hkv * seqlen * dim * dtype.itemsize
    n_sets = bench.rotation_count(kv_bytes, budget_bytes=8 * 2**30)
    q = [torch.randn(batch, hq, 1, dim, generator=gen).to("cuda", dtype) for _ in range(n_sets)]
    k = [torch.randn(batch, hkv, seqlen, dim, generator=gen).to("cuda", dtype) for _ in q]
    v = [torch.randn(batch, hkv, seqlen, dim, generator=gen).to("cuda", dtype) for _ in q]
    lengths = torch.full((batch,), seqlen, dtype=torch.int32, device="cuda")
    rows, dense_out = [], None

    def record(impl, page_size, fn, check=None):
        row = dict(shape, impl=impl, page_size=page_size)
        try:
            if check is not None:
                row["max_diff_vs_flashcore"] = float((check() - dense_out).abs().max())
            timing = bench.time_launches(fn, n_sets, reps=reps, graph=True)
            row["graph_timing"] = timing.as_dict()
            row["tbps"] = kv_bytes / timing.median_ms / 1e9
        except Exception as exc:
            row["error"] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            )
        rows.append(row)

    def dense(i):
        return attention_with_kvcache(q[i], k[i], v[i], lengths, check_lengths=False)

    dense_out = dense(0).float()
    record("dense", 0, dense)
    fa4 = _fa4_paged()
    for page_size in page_sizes:
        pools = [_pools(k[i], v[i], page_size, gen) for i in range(n_sets)]

        def paged(i, pools=pools):
            kp, vp, table = pools[i]
            return attention_with_kvcache(
                q[i], kp, vp, lengths, block_table=table, check_lengths=False
            )

        record(f"paged_{page_size}", page_size, paged, check=lambda: paged(0).float())
        if fa4 is not None:
            # FA's layouts: q (B, 1, Hq, D), pools (num_pages, P, Hkv, D); causal with one
            # query sees every key.
            fa_pools = [
                (kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous(), t)
                for kp, vp, t in pools
            ]

            def fa4_paged(i, fa_pools=fa_pools):
                kp, vp, table = fa_pools[i]
                out = fa4(
                    q[i].transpose(1, 2), kp, vp, seqused_k=lengths, page_table=table, causal=True
                )
                return out[0] if isinstance(out, tuple) else out

            record(
                f"fa4_paged_{page_size}",
                page_size,
                fa4_paged,
                check=lambda: fa4_paged(0).transpose(1, 2).float(),
            )
        pools = None
    torch.cuda.empty_cache()
    return rows


def row_line(r: dict) -> str:
    what = f"paged decode B{r['B']:<2} {r['Hq']}/{r['Hkv']} cache {r['Sk']:<7} {r['impl']:<14}"
    if "graph_timing" not in r:
        return f"{what} {r.get('error')}"
    diff = f"  max diff {r['max_diff_vs_flashcore']:.2e}" if "max_diff_vs_flashcore" in r else ""
    return (
        f"{what} {r['graph_timing']['median_ms'] * 1e3:8.1f} us {r['tbps']:5.2f} TB/s "
        f"{r['of_copy']:5.3f} of copy, {r['vs_dense']:5.3f}x dense{diff}"
    )


def run_paged_decode_record(shapes, *, reps: int = 100, progress=None, log=None) -> dict:
    """The payload of results/<gpu>/paged_decode.json: the copy ceiling, then every shape's
    rows (``bench_paged_shape``) with ``of_copy`` and ``vs_dense`` filled in."""
    from . import bench

    progress = progress or (lambda items, desc: items)
    log = log or (lambda *lines: None)
    ceiling = bench.copy_ceiling()
    log(f"copy ceiling {ceiling['tbps']:.2f} TB/s")
    rows = []
    for shape in progress(shapes, "paged decode"):
        mine = bench_paged_shape(shape, reps=reps)
        dense = next((r for r in mine if r["impl"] == "dense" and "tbps" in r), None)
        for r in mine:
            if "tbps" in r:
                r["of_copy"] = r["tbps"] / ceiling["tbps"]
                r["vs_dense"] = r["tbps"] / dense["tbps"] if dense else float("nan")
            log(row_line(r))
        rows += mine
    return {"method": __doc__.strip(), "copy_ceiling": ceiling, "rows": rows}
