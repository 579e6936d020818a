"""The error rule for gradients, the backward correctness grids, and planted backward bugs.

For each of dQ, dK and dV (``flashcore.validate.error_rule`` applied per gradient):

    max|g - g64|  <=  2 * max|g_same_precision - g64|  +  floor

``g64`` is float64 autograd through ``attention_reference``; ``g_same_precision`` is autograd
through the same PyTorch computation in the inputs' dtype (what a plain PyTorch training
step gets). Gradient buffers are NaN-poisoned before the kernels run, so an element never
written fails.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from .reference import attention_reference
from .validate import GQA_SHAPES, AttentionCase, _shuffled, error_rule, make_inputs

GRADIENTS = ("dq", "dk", "dv")


def reference_gradients(q, k, v, grad_out, *, compute_dtype, **kwargs):
    """(dq, dk, dv) of ``attention_reference`` by autograd, every operation in compute_dtype."""
    leaves = [t.detach().to(compute_dtype).requires_grad_() for t in (q, k, v)]
    out = attention_reference(*leaves, compute_dtype=compute_dtype, **kwargs)
    grads = torch.autograd.grad(out, leaves, grad_out.to(compute_dtype))
    return tuple(g.detach() for g in grads)


def cancellation_magnitudes(
    q, k, v, grad_out, *, causal=False, causal_alignment="top_left", window=None, scale=None
):
    """The floor's magnitude for each gradient, in float64: the sum of the absolute values
    of the terms that make it up, before they cancel.

    dS = P o (dP - delta) subtracts two nearly equal terms (exactly equal when a row sees
    one key: dQ is then exactly 0, and any rounding in dP or delta is an infinite multiple
    of a floor taken at |dQ|). The standard bound on a rounded sum is u * sum|terms|; with
    T_ij = P_ij (sum_d |dO_id V_jd| + sum_d |dO_id O_id|), the terms of dP_ij and delta_i:
    dQ: scale * T |K|, dK: scale * T^T |Q| (summed over the GQA group), dV: 0 (no
    cancellation; its floor stays u * max|dV|).
    """
    import math

    from .reference import expand_kv_heads, visible_keys

    hq, hkv = q.shape[1], k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if q.numel() == 0 or k.numel() == 0:
        return 0.0, 0.0, 0.0
    q64, do64 = q.detach().double(), grad_out.detach().double()
    k64, v64 = expand_kv_heads(k.detach(), hq).double(), expand_kv_heads(v.detach(), hq).double()
    mask = visible_keys(
        q.shape[2],
        k.shape[2],
        causal=causal,
        alignment=causal_alignment,
        window=window,
        device=q.device,
    )
    s = (q64 @ k64.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))
    has_key = mask.any(-1)
    p = torch.softmax(s.masked_fill(~has_key[:, None], 0.0), -1) * has_key[:, None]
    # Sums of |products|: dP_ij = sum_d dO_id V_jd and delta_i = sum_d dO_id O_id.
    dp_terms = do64.abs() @ v64.abs().transpose(-1, -2)
    delta_terms = (do64.abs() * (p @ v64).abs()).sum(-1, keepdim=True)
    terms = p * (dp_terms + delta_terms)
    dq_mag = float((terms @ k64.abs()).max()) * scale
    dk_full = terms.transpose(-1, -2) @ q64.abs()
    dk_mag = (
        float(dk_full.reshape(dk_full.shape[0], hkv, hq // hkv, *dk_full.shape[2:]).sum(2).max())
        * scale
    )
    return dq_mag, dk_mag, 0.0


def gradient_rule(grads, ref64, same, magnitudes) -> dict:
    """name -> ErrorReport for dq, dk, dv.

    The floor is max(u * max|g64|, u_fp32 * magnitude): dP and delta are accumulated in
    fp32 (by the kernels and by any fp16/bf16 matmul), so the cancellation in dP - delta
    costs fp32 roundoff of the terms, not the gradient dtype's."""
    from .validate import UNIT_ROUNDOFF

    return {
        name: error_rule(
            g, g64, gs, floor_magnitude=m * UNIT_ROUNDOFF[torch.float32] / UNIT_ROUNDOFF[g.dtype]
        )
        for name, g, g64, gs, m in zip(GRADIENTS, grads, ref64, same, magnitudes)
    }


def make_grad_inputs(case: AttentionCase, device, seed: int):
    """Fresh q, k, v (as the forward grid) and an N(0, 1) upstream gradient dO in q's layout."""
    q, k, v = make_inputs(case, device, seed)
    gen = torch.Generator(device="cpu").manual_seed(seed + 7919)
    do = torch.randn(q.shape, generator=gen).to(device=device, dtype=q.dtype)
    if case.layout == "bshd":
        do = do.transpose(1, 2).contiguous().transpose(1, 2)  # (B, S, H, D) memory, like q
    return q, k, v, do


def _poisoned_like(t):
    if t.dim() == 4 and t.stride(1) < t.stride(2):  # keep a strided layout strided
        buf = torch.full(
            (t.shape[0], t.shape[2], t.shape[1], t.shape[3]),
            float("nan"),
            dtype=t.dtype,
            device=t.device,
        )
        return buf.transpose(1, 2)
    return torch.full(t.shape, float("nan"), dtype=t.dtype, device=t.device)


# check_grad_case's Gluon kernels: (module under flashcore.kernels, launcher, its options)
GLUON_KERNELS = {
    "gluon": ("backward_hopper", "attention_backward_hopper", {}),
    "gluon_pipelined": ("backward_hopper_pipelined", "attention_backward_hopper_pipelined", {}),
    "gluon_ws": ("backward_hopper_ws", "attention_backward_hopper_ws", {}),
    "gluon_ws_det": ("backward_hopper_ws", "attention_backward_hopper_ws", {"deterministic": True}),
}


def _gluon_backward(case, do, q, k, v, out, lse, grads, *, kernel: str = "gluon"):
    """A Gluon Hopper backward into ``grads``: ``kernel`` "gluon" (kernels/backward_hopper.py),
    "gluon_pipelined" (kernels/backward_hopper_pipelined.py), "gluon_ws" (the
    warp-specialized kernels/backward_hopper_ws.py) or "gluon_ws_det" (the same in its
    deterministic mode); raises where it does not support the case."""
    import importlib
    import math

    module, name, options = GLUON_KERNELS[kernel]
    kernel_module = importlib.import_module(f"flashcore.kernels.{module}")
    if not kernel_module.supports(q, k, v, window=case.window):
        raise ValueError(f"the Gluon backward does not support {case.name} on {q.device}")
    bottom_right = case.causal and case.alignment == "bottom_right"
    launch = getattr(kernel_module, name)
    launch(
        do, q, k, v, out, lse, *grads,
        causal_offset=case.seqlen_k - case.seqlen_q if bottom_right else 0,
        is_causal=case.causal, scale=1.0 / math.sqrt(case.head_dim), **options,
    )  # fmt: skip


def check_grad_case(
    case: AttentionCase, device, seed: int, *, deterministic: bool = True, kernel: str = "triton"
) -> dict:
    """Forward (saving lse), backward into NaN-poisoned buffers, the rule on dq, dk, dv.
    ``kernel``: ``"triton"`` (kernels/backward.py), ``"gluon"`` (kernels/backward_hopper.py,
    Hopper only; atomic dQ whatever ``deterministic`` says), ``"gluon_pipelined"``
    (kernels/backward_hopper_pipelined.py, likewise) or ``"gluon_ws"``
    (kernels/backward_hopper_ws.py, likewise)."""
    from .interface import attention
    from .kernels.backward import attention_backward

    q, k, v, do = make_grad_inputs(case, device, seed)
    kwargs = dict(causal=case.causal, causal_alignment=case.alignment, window=case.window)
    with torch.no_grad():
        out, lse = attention(q, k, v, return_lse=True, **kwargs)
        grads = tuple(_poisoned_like(t) for t in (q, k, v))
        if kernel in GLUON_KERNELS:
            _gluon_backward(case, do, q, k, v, out, lse, grads, kernel=kernel)
        else:
            attention_backward(
                do, q, k, v, out, lse, deterministic=deterministic,
                dq=grads[0], dk=grads[1], dv=grads[2], **kwargs,
            )  # fmt: skip
    ref64 = reference_gradients(q, k, v, do, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, **kwargs)
    reports = gradient_rule(grads, ref64, same, cancellation_magnitudes(q, k, v, do, **kwargs))
    row = {
        **dataclasses.asdict(case),
        "name": case.name,
        "seed": seed,
        "deterministic": deterministic and kernel == "triton",
        "kernel": kernel,
    }
    passed, ratio = True, 0.0
    for name, report in reports.items():
        row[name] = {
            "ratio": report.ratio,
            "max_abs_err": report.max_abs_err,
            "baseline_err": report.baseline_err,
            "bound": report.bound,
            "rel_l2_err": report.rel_l2_err,
            "nan_mismatch": report.nan_mismatch,
            "passed": report.passed,
        }
        passed &= report.passed
        ratio = max(ratio, report.ratio)
    row["passed"] = bool(passed)
    row["ratio"] = ratio  # the worst of the three
    return row


def backward_grid(name: str) -> list[AttentionCase]:
    """Named case lists for the gradient rule.

    ``full`` (GPU record, > 300 cases): awkward square lengths for every head dim, Sq != Sk
    pairs, every GQA ratio, both causal alignments and non-causal, windows, padded head
    dims, fp32, a (B, S, H, D) strided layout; fp16 and bf16. ``hopper`` (240 cases): what
    the Gluon backward supports (D64/D128, fp16/bf16, no windows), for
    ``check_grad_case(..., kernel="gluon")``; ``hopper_d256`` (126 cases) the same at D256
    for the warp-specialized kernel. ``cpu``: a subset for the Triton interpreter
    (fp16/fp32, small shapes).
    """
    masks = [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]
    cases = []
    if name == "full":
        half = ("float16", "bfloat16")
        for dtype, (causal, align), s in itertools.product(
            half, masks, (1, 17, 63, 64, 65, 113, 239, 1023)
        ):
            for d in (16, 64, 128, 256):
                cases.append(AttentionCase(2, 4, 2, s, s, d, dtype, causal, align))
        for dtype, (causal, align), (sq, sk) in itertools.product(
            half,
            masks,
            ((1, 1023), (17, 239), (113, 64), (239, 17), (1023, 65), (64, 2048), (2048, 63)),
        ):
            for d in (64, 128):
                cases.append(AttentionCase(1, 4, 1, sq, sk, d, dtype, causal, align))
        for dtype, (causal, align), (hq, hkv) in itertools.product(half, masks, GQA_SHAPES):
            cases.append(AttentionCase(2, hq, hkv, 239, 239, 128, dtype, causal, align))
            cases.append(AttentionCase(1, hq, hkv, 65, 1023, 64, dtype, causal, align))
        for (causal, align), s, d in itertools.product(masks, (17, 239), (16, 64, 128)):
            cases.append(AttentionCase(1, 2, 1, s, s, d, "float32", causal, align))
        for dtype, (causal, align), d in itertools.product(half, masks, (32, 80, 200)):
            cases.append(
                AttentionCase(1, 2, 1, 113, 239, d, dtype, causal, align)
            )  # padded head dims
        for dtype, (causal, align) in itertools.product(half, masks):
            cases.append(AttentionCase(2, 8, 2, 239, 1023, 128, dtype, causal, align, "bshd"))
            cases.append(AttentionCase(1, 8, 8, 2048, 2048, 64, dtype, causal, align, "bshd"))
        for dtype, align, (sq, sk), w in itertools.product(
            half,
            ("top_left", "bottom_right"),
            ((1023, 1023), (239, 1023), (1023, 239)),
            (1, 64, 129, 1000),
        ):
            cases.append(AttentionCase(1, 4, 2, sq, sk, 128, dtype, True, align, window=w))
        return _shuffled(cases)
    if name in ("hopper", "hopper_d256"):
        # The Gluon backward (kernels/backward_hopper.py: D64/D128, fp16/bf16, no windows):
        # lengths around its 64-row query and 128-row key blocks, Sq != Sk both ways, GQA,
        # a (B, S, H, D) layout. "hopper_d256": the same at D256 alone (the warp-specialized
        # kernel's 64-key blocks), lengths around 64 added.
        half = ("float16", "bfloat16")
        dims = (64, 128) if name == "hopper" else (256,)
        lengths = (1, 17, 64, 65, 127, 128, 129, 300, 1000)
        if name == "hopper_d256":
            lengths = (1, 17, 63, 64, 65, 127, 128, 129, 300, 1000)
        for dtype, (causal, align), s, d in itertools.product(half, masks, lengths, dims):
            cases.append(AttentionCase(1, 4, 2, s, s, d, dtype, causal, align))
        pairs = ((17, 300), (300, 17), (65, 1000), (1000, 65), (1, 129), (129, 1), (128, 300))
        for dtype, (causal, align), (sq, sk), d in itertools.product(half, masks, pairs, dims):
            cases.append(AttentionCase(1, 2, 1, sq, sk, d, dtype, causal, align))
        for dtype, (causal, align), (hq, hkv), d in itertools.product(
            half, masks, ((2, 2), (4, 1), (8, 2)), dims
        ):
            cases.append(AttentionCase(2, hq, hkv, 129, 257, d, dtype, causal, align))
        for dtype, (causal, align), d in itertools.product(half, masks, dims):
            cases.append(AttentionCase(2, 4, 2, 300, 257, d, dtype, causal, align, "bshd"))
        return _shuffled(cases)
    if name == "cpu":
        for (causal, align), s in itertools.product(masks, (1, 17, 64, 65)):
            cases.append(AttentionCase(1, 2, 1, s, s, 32, "float16", causal, align))
        for (causal, align), (sq, sk) in itertools.product(masks, ((17, 70), (70, 17))):
            cases.append(AttentionCase(1, 2, 2, sq, sk, 16, "float16", causal, align))
        for (hq, hkv), d in zip(((4, 4), (4, 2), (8, 2), (7, 1)), (16, 64, 40, 16)):
            cases.append(AttentionCase(1, hq, hkv, 33, 33, d, "float16", True, "top_left"))
        for d in (16, 40):
            cases.append(AttentionCase(1, 2, 1, 33, 47, d, "float32", True, "bottom_right"))
        cases.append(AttentionCase(1, 4, 2, 47, 65, 32, "float16", True, "bottom_right", "bshd"))
        cases.append(AttentionCase(1, 4, 2, 70, 70, 32, "float16", True, "top_left", window=17))
        cases.append(AttentionCase(1, 2, 1, 40, 70, 32, "float32", True, "bottom_right", window=33))
        return _shuffled(cases)
    raise ValueError(f"unknown backward grid {name!r}; expected 'full', 'hopper' or 'cpu'")


def run_backward_grid(
    cases, device, *, base_seed: int = 0, deterministic: bool = True, progress: bool = True
) -> list[dict]:
    from tqdm import tqdm

    return [
        check_grad_case(c, device, base_seed + i, deterministic=deterministic)
        for i, c in enumerate(tqdm(cases, desc="gradients", disable=not progress, mininterval=10))
    ]


def summarize_backward(rows: list[dict]) -> dict:
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    return {
        "cases": len(rows),
        "failed": sum(not r["passed"] for r in rows),
        "worst_ratio": worst["ratio"] if worst else None,
        "worst_case": worst["name"] if worst else None,
        "worst_ratio_per_gradient": {
            g: max((r[g]["ratio"] for r in rows), default=None) for g in GRADIENTS
        },
    }


def check_backward_determinism(cases, device, *, repeats: int = 5, seed: int = 4321) -> list[dict]:
    """Run the backward ``repeats`` times on the same inputs, both modes; deterministic mode
    must be bitwise identical, atomic mode is reported as it comes."""
    from .interface import attention
    from .kernels.backward import attention_backward

    rows = []
    for i, case in enumerate(cases):
        q, k, v, do = make_grad_inputs(case, device, seed + i)
        kwargs = dict(causal=case.causal, causal_alignment=case.alignment, window=case.window)
        out, lse = attention(q, k, v, return_lse=True, **kwargs)
        row = {"name": case.name, "repeats": repeats}
        for mode, det in (("deterministic", True), ("atomic", False)):
            first = attention_backward(do, q, k, v, out, lse, deterministic=det, **kwargs)
            same = all(
                all(
                    torch.equal(a, b)
                    for a, b in zip(
                        first,
                        attention_backward(do, q, k, v, out, lse, deterministic=det, **kwargs),
                    )
                )
                for _ in range(repeats - 1)
            )
            row[f"{mode}_bitwise_identical"] = bool(same)
        rows.append(row)
    return rows


# ------------------------------------------------------------- planted bugs (mutants)
# Wrong backward passes, each a bug a hand-written attention backward can ship with. The
# rule must reject every one (tests/test_backward.py). Computed in the inputs' dtype from
# an explicit P, like the same-precision baseline, so only the planted bug differs.


def _explicit_backward(
    q,
    k,
    v,
    do,
    *,
    causal,
    alignment="top_left",
    drop_delta=False,
    scale_ds=True,
    gqa_reduction="sum",
):
    import math

    from .reference import expand_kv_heads, visible_keys

    dtype = q.dtype
    hq, hkv = q.shape[1], k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1])
    kk, vv = expand_kv_heads(k, hq).to(dtype), expand_kv_heads(v, hq).to(dtype)
    s = (q @ kk.transpose(-1, -2)) * scale
    mask = visible_keys(q.shape[2], k.shape[2], causal=causal, alignment=alignment, device=q.device)
    s = s.masked_fill(~mask, float("-inf"))
    has_key = mask.any(-1)
    p = torch.softmax(s.masked_fill(~has_key[:, None], 0.0), -1)
    p = torch.where(has_key[:, None], p, torch.zeros((), dtype=p.dtype, device=p.device))
    dv = p.transpose(-1, -2) @ do
    dp = do @ vv.transpose(-1, -2)
    delta = 0.0 if drop_delta else (p * dp).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    if scale_ds:
        ds = ds * scale
    dq = ds @ kk
    dk = ds.transpose(-1, -2) @ q
    group = hq // hkv

    def reduce(g):
        g = g.reshape(g.shape[0], hkv, group, *g.shape[2:])
        return g[:, :, 0] if gqa_reduction == "first" else g.sum(2)

    return dq, reduce(dk), reduce(dv)


def planted_backward_bugs() -> dict:
    """name -> fn(q, k, v, do, causal, alignment) returning a wrong (dq, dk, dv)."""
    return {
        "dS without the delta term": lambda q, k, v, do, causal, align: _explicit_backward(
            q, k, v, do, causal=causal, alignment=align, drop_delta=True
        ),
        "softmax scale missed in dS": lambda q, k, v, do, causal, align: _explicit_backward(
            q, k, v, do, causal=causal, alignment=align, scale_ds=False
        ),
        "GQA: dK/dV from the first head of the group only": lambda q, k, v, do, causal, align: (
            _explicit_backward(q, k, v, do, causal=causal, alignment=align, gqa_reduction="first")
        ),
    }


def rule_rejects(grads, q, k, v, do, **kwargs) -> dict:
    """Apply the gradient rule to candidate (dq, dk, dv); name -> passed."""
    ref64 = reference_gradients(q, k, v, do, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, **kwargs)
    magnitudes = cancellation_magnitudes(q, k, v, do, **kwargs)
    return {name: r.passed for name, r in gradient_rule(grads, ref64, same, magnitudes).items()}


def sinks_gradient_rule(q, k, v, sinks, grad_out, **options) -> dict:
    """flashcore's gradients with learnable sinks (``flashcore.attention(..., sinks=)``)
    against float64 autograd of ``attention_reference``: dq, dk, dv under the gradient rule;
    the sinks' gradient d sink_h = -sum_i P_sink,i * delta_i (delta_i = rowsum(dO_i * O_i))
    under the rule with the floor of that sum. Each term carries delta_i's rounding, u times
    sum_d |dO_id O_id| (O is stored rounded), so the floor's magnitude is
    sum_i P_sink,i * sum_d |dO_id O_id| per head. ``dsinks_sign_flipped``: the same rule on
    the gradient with its sign flipped, which must fail (the check can fail).

    The cancellation floor of dq, dk, dv is computed without the sinks, whose P is larger:
    conservative."""
    import flashcore

    def grads(fn, leaves, do):
        leaves = [t.detach().clone().requires_grad_() for t in leaves]
        out = fn(*leaves)
        return out, torch.autograd.grad(out, leaves, do)

    leaves = (q, k, v, sinks)
    out, got = grads(
        lambda q, k, v, s: flashcore.attention(q, k, v, sinks=s, **options), leaves, grad_out
    )
    _, ref = grads(
        lambda q, k, v, s: attention_reference(q, k, v, sinks=s, **options),
        [t.double() for t in leaves],
        grad_out.double(),
    )
    _, same = grads(
        lambda q, k, v, s: attention_reference(q, k, v, sinks=s, compute_dtype=q.dtype, **options),
        leaves,
        grad_out,
    )
    reports = gradient_rule(
        got[:3], ref[:3], same[:3], cancellation_magnitudes(q, k, v, grad_out, **options)
    )
    _, lse64 = attention_reference(
        *[t.double() for t in leaves[:3]], sinks=sinks.double(), return_lse=True, **options
    )
    p_sink = torch.exp(sinks.double()[None, :, None] - lse64)
    terms = p_sink * (grad_out.double().abs() * out.detach().double().abs()).sum(-1)
    magnitude = float(terms.sum((0, 2)).max())
    reports["dsinks"] = error_rule(got[3], ref[3], same[3], floor_magnitude=magnitude)
    reports["dsinks_sign_flipped"] = error_rule(-got[3], ref[3], same[3], floor_magnitude=magnitude)
    return reports
