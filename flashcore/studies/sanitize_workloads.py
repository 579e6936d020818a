"""Small workloads for compute-sanitizer beyond the forward grid: the backward (Triton,
both dQ modes, softcap, varlen), the varlen forward, KV-cache decode (dense and paged,
split and single, sinks, softcap, window), the Gluon backwards, and MLA's head dims (q/k 192,
v 128) on the forward the dispatch picks (``python -m flashcore sanitize`` runs that one
forced onto the Gluon kernel with 3 programs), on awkward sizes. Every
call's result goes under its rule as well, so a run shows both the tool's verdict and
that the calls computed what they should.

    python -m flashcore.studies.sanitize_workloads backward|varlen|decode|backward_hopper|
        backward_hopper_ws|mla

Prints one line per family and then "N cases, M failed" (the line ``python -m flashcore
sanitize`` keeps). Sizes are small: under memcheck and racecheck a kernel runs orders of
magnitude slower than alone.
"""

from __future__ import annotations

import sys

import torch


def _backward(device) -> list[dict]:
    from ..validate_backward import backward_grid, check_grad_case
    from ..validate_backward_softcap_varlen import (
        check_softcap_grad_case,
        check_varlen_grad_case,
        softcap_backward_cases,
        varlen_backward_cases,
    )

    rows = []
    for i, case in enumerate(backward_grid("cpu")[::6]):
        for deterministic in (True, False):
            rows.append(check_grad_case(case, device, 100 + i, deterministic=deterministic))
    for i, (case, cap, scale) in enumerate(softcap_backward_cases("cpu")[:4]):
        rows.append(check_softcap_grad_case(case, device, 200 + i, softcap=cap, scale=scale))
    for i, case in enumerate(varlen_backward_cases("cpu")[:4]):
        for deterministic in (True, False):
            rows.append(check_varlen_grad_case(case, device, 300 + i, deterministic=deterministic))
    return rows


def _backward_hopper(device) -> list[dict]:
    from ..validate_backward import backward_grid, check_grad_case

    return [
        check_grad_case(case, device, 400 + i, kernel="gluon")
        for i, case in enumerate(backward_grid("hopper")[::30])
    ]


def _backward_hopper_ws(device) -> list[dict]:
    """The warp-specialized Gluon backward in both modes (its loader and dQ writer warps, the
    ring and the dQ handoff: racecheck and synccheck see the partitions' barriers; memcheck
    the deterministic mode's counters), D256's split-columns step included."""
    from ..validate_backward import backward_grid, check_grad_case

    cases = backward_grid("hopper")[::40] + backward_grid("hopper_d256")[::40]
    return [
        check_grad_case(case, device, 500 + i, kernel=kernel)
        for kernel in ("gluon_ws", "gluon_ws_det")
        for i, case in enumerate(cases)
    ]


def _varlen(device) -> list[dict]:
    from .launch import run_varlen_case, varlen_cases

    return [run_varlen_case(c, device, _half(device)) for c in varlen_cases(7, 8, small=True)]


def _half(device):  # the interpreter cannot run bfloat16 (flashcore._checks says why)
    return torch.bfloat16 if device == "cuda" else torch.float16


def _decode(device) -> list[dict]:
    from ..interface import attention_with_kvcache
    from ..reference import attention_reference
    from ..validate import error_rule, kvcache_rule, kvcache_session
    from .paged_decode import _pools

    rows = []
    for splits in (1, 3):  # a generation session: chunked prefill, then decode steps
        reports = kvcache_session(
            3, 8, 2, 300, 64, [1, 37, 200], 3, dtype=torch.float16, device=device, seed=splits
        )
        rows += [{"family": "session", "passed": r.passed} for r in reports]
    gen = torch.Generator(device=device).manual_seed(7)
    batch, hq, hkv, seqlen, dim = 2, 8, 2, 256, 128
    q = torch.randn(batch, hq, 1, dim, device=device, dtype=_half(device), generator=gen)
    k = torch.randn(batch, hkv, seqlen, dim, device=device, dtype=_half(device), generator=gen)
    v = torch.randn(batch, hkv, seqlen, dim, device=device, dtype=_half(device), generator=gen)
    lengths = torch.tensor([77, 256], dtype=torch.int32, device=device)
    for page_size in (16, 64):
        k_pool, v_pool, table = _pools(k, v, page_size, torch.Generator().manual_seed(page_size))
        for splits in (1, 4):
            out = attention_with_kvcache(
                q, k_pool, v_pool, lengths, block_table=table, num_splits=splits
            )
            report = kvcache_rule(out, q, k, v, lengths)
            rows.append({"family": f"paged {page_size}", "passed": report.passed})
    sinks = torch.randn(hq, device=device, generator=gen)
    for kw in (dict(sinks=sinks), dict(softcap=20.0), dict(window=50)):
        out = attention_with_kvcache(q, k, v, lengths, num_splits=3, **kw)
        for b, length in enumerate(lengths.tolist()):  # per sequence: its keys, bottom-right
            keys = (k[b : b + 1, :, :length], v[b : b + 1, :, :length])
            opts = dict(causal=True, causal_alignment="bottom_right", **kw)
            ref = attention_reference(q[b : b + 1], *keys, **opts)
            same = attention_reference(q[b : b + 1], *keys, compute_dtype=q.dtype, **opts)
            report = error_rule(out[b : b + 1], ref, same)
            rows.append({"family": f"decode {sorted(kw)[0]}", "passed": report.passed})
    return rows


def _mla(device) -> list[dict]:
    from ..interface import attention
    from ..reference import attention_reference
    from ..validate import error_rule

    rows = []
    # (B, Hq, Hkv, Sq, Sk, causal, alignment): one row, ragged tails, rows that see no key
    cases = [
        (1, 2, 1, 1, 1, False, "top_left"),
        (2, 4, 2, 113, 239, True, "bottom_right"),
        (1, 4, 2, 239, 113, True, "bottom_right"),
        (1, 2, 2, 300, 300, False, "top_left"),
        (1, 3, 1, 65, 700, True, "top_left"),
    ]
    for i, (b, hq, hkv, sq, sk, causal, alignment) in enumerate(cases):
        gen = torch.Generator(device=device).manual_seed(500 + i)
        dtype = _half(device)
        q = torch.randn(b, hq, sq, 192, device=device, dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, sk, 192, device=device, dtype=dtype, generator=gen)
        v = torch.randn(b, hkv, sk, 128, device=device, dtype=dtype, generator=gen)
        opts = dict(causal=causal, causal_alignment=alignment)
        out = attention(q, k, v, **opts)
        ref = attention_reference(q, k, v, **opts)
        same = attention_reference(q, k, v, compute_dtype=dtype, **opts)
        rows.append({"family": "mla 192/128", "passed": error_rule(out, ref, same).passed})
    return rows


WORKLOADS = {
    "mla": _mla,
    "backward": _backward,
    "backward_hopper": _backward_hopper,
    "backward_hopper_ws": _backward_hopper_ws,
    "varlen": _varlen,
    "decode": _decode,
}


def main(argv=None) -> int:
    name = (argv or sys.argv[1:])[0]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = WORKLOADS[name](device)
    torch.cuda.synchronize() if device == "cuda" else None
    failed = sum(not r["passed"] for r in rows)
    print(f"{name}: {len(rows)} cases, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
