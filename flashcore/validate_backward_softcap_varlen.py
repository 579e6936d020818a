"""The gradient rule for softcap and packed variable-length attention, their case lists and
planted bugs: ``validate_backward``'s rule (float64 autograd of the reference, twice the
same-precision error plus a floor from the terms that cancel in dS) extended to

* softcap (Gemma 2): the score is z = c * tanh(s / c) of the scaled score s; the floor's
  cancellation terms carry the cap's slope 1 - tanh^2(s / c);
* varlen (``flashcore.attention_varlen``): each packed sequence is differentiated on its
  own, so the reference is autograd through ``varlen_reference`` and the floor's
  magnitudes are the largest of the sequences'.

Planted bugs (a backward without the cap's slope, one that ignores the cap, a sequence
boundary off by one row) show that the same checks fail (tests/test_backward_varlen_softcap.py).
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from .reference import attention_reference
from .validate import AttentionCase
from .validate_backward import (
    _poisoned_like,
    gradient_rule,
    make_grad_inputs,
    reference_gradients,
)

# ------------------------------------------------------------------------------ softcap
# Gemma 2's logit capping: the score is z = c * tanh(s / c) of the scaled score s. Its
# gradient carries dS through the cap, dS_s = dS_z * (1 - tanh^2(s / c)).


def capped_cancellation_magnitudes(
    q,
    k,
    v,
    grad_out,
    *,
    causal=False,
    causal_alignment="top_left",
    window=None,
    scale=None,
    softcap=None,
):
    """``cancellation_magnitudes`` with an optional softcap: P from the capped scores, and
    each term T_ij of dS times the cap's slope 1 - tanh^2(s_ij / c) (dS is rounded before
    the slope multiplies it, so the slope scales the cancellation's error with it). Without
    softcap the same numbers as ``cancellation_magnitudes``."""
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
    s = q64 @ k64.transpose(-1, -2) * scale
    slope = torch.ones_like(s)
    if softcap is not None:
        t = torch.tanh(s / softcap)
        s, slope = t * softcap, (1 - t) * (1 + t)
    s = s.masked_fill(~mask, float("-inf"))
    has_key = mask.any(-1)
    p = torch.softmax(s.masked_fill(~has_key[:, None], 0.0), -1) * has_key[:, None]
    dp_terms = do64.abs() @ v64.abs().transpose(-1, -2)
    delta_terms = (do64.abs() * (p @ v64).abs()).sum(-1, keepdim=True)
    terms = p * (dp_terms + delta_terms) * slope
    dq_mag = float((terms @ k64.abs()).max()) * scale
    dk_full = terms.transpose(-1, -2) @ q64.abs()
    dk_mag = (
        float(dk_full.reshape(dk_full.shape[0], hkv, hq // hkv, *dk_full.shape[2:]).sum(2).max())
        * scale
    )
    return dq_mag, dk_mag, 0.0


def _grad_row(base: dict, reports: dict) -> dict:
    """A grid row: ``base`` plus each gradient's report, ``passed`` and the worst ratio."""
    row = dict(base)
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
    row["ratio"] = ratio
    return row


def softcap_rule(grads, q, k, v, do, **kwargs) -> dict:
    """name -> ErrorReport of candidate (dq, dk, dv) for ``attention(q, k, v, **kwargs)``
    (kwargs may hold softcap, scale, causal, causal_alignment, window)."""
    ref64 = reference_gradients(q, k, v, do, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, **kwargs)
    magnitudes = capped_cancellation_magnitudes(q, k, v, do, **kwargs)
    return gradient_rule(grads, ref64, same, magnitudes)


def check_softcap_grad_case(
    case: AttentionCase,
    device,
    seed: int,
    *,
    softcap: float,
    scale: float | None = None,
    deterministic: bool = True,
    softcap_in_backward: bool = True,
) -> dict:
    """``check_grad_case`` with a softcap (and optionally an explicit softmax scale): forward
    with lse, the backward into NaN-poisoned buffers, the gradient rule against float64
    autograd of the capped reference. ``softcap_in_backward=False`` runs the backward as if
    the forward had no cap (a planted bug: the rule must reject it)."""
    from .interface import attention
    from .kernels.backward import attention_backward

    q, k, v, do = make_grad_inputs(case, device, seed)
    kwargs = dict(
        causal=case.causal,
        causal_alignment=case.alignment,
        window=case.window,
        softcap=softcap,
        scale=scale,
    )
    with torch.no_grad():
        out, lse = attention(q, k, v, return_lse=True, **kwargs)
        grads = tuple(_poisoned_like(t) for t in (q, k, v))
        attention_backward(
            do,
            q,
            k,
            v,
            out,
            lse,
            deterministic=deterministic,
            dq=grads[0],
            dk=grads[1],
            dv=grads[2],
            **dict(kwargs, softcap=softcap if softcap_in_backward else None),
        )
    base = {
        **dataclasses.asdict(case),
        "name": f"{case.name} softcap{softcap}" + ("" if scale is None else f" scale{scale}"),
        "softcap": softcap,
        "scale": scale,
        "seed": seed,
        "deterministic": deterministic,
    }
    return _grad_row(base, softcap_rule(grads, q, k, v, do, **kwargs))


def _explicit_softcap_backward(
    q, k, v, do, *, causal, alignment, window, softcap, scale=None, slope=True
):
    """The softcapped backward written out in the inputs' dtype from an explicit P (as
    ``_explicit_backward``); ``slope=False`` drops the cap's 1 - tanh^2 factor from dS."""
    import math

    from .reference import expand_kv_heads, visible_keys

    hq, hkv = q.shape[1], k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kk, vv = expand_kv_heads(k, hq), expand_kv_heads(v, hq)
    t = torch.tanh((q @ kk.transpose(-1, -2)) * scale / softcap)
    mask = visible_keys(
        q.shape[2], k.shape[2], causal=causal, alignment=alignment, window=window, device=q.device
    )
    z = (t * softcap).masked_fill(~mask, float("-inf"))
    has_key = mask.any(-1)
    p = torch.softmax(z.masked_fill(~has_key[:, None], 0.0), -1)
    p = torch.where(has_key[:, None], p, torch.zeros((), dtype=p.dtype, device=p.device))
    dv = p.transpose(-1, -2) @ do
    dp = do @ vv.transpose(-1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    if slope:
        ds = ds * (1 - t * t)
    ds = ds * scale
    dq, dk = ds @ kk, ds.transpose(-1, -2) @ q
    group = hq // hkv

    def reduce(g):
        return g.reshape(g.shape[0], hkv, group, *g.shape[2:]).sum(2)

    return dq, reduce(dk), reduce(dv)


def planted_softcap_bugs() -> dict:
    """name -> fn(q, k, v, do, **attention kwargs with softcap) returning a wrong
    (dq, dk, dv). The rule must reject each (tests/test_backward_varlen_softcap.py)."""

    def no_slope(q, k, v, do, *, causal, causal_alignment, window, softcap, scale=None):
        return _explicit_softcap_backward(
            q,
            k,
            v,
            do,
            causal=causal,
            alignment=causal_alignment,
            window=window,
            softcap=softcap,
            scale=scale,
            slope=False,
        )

    def uncapped(q, k, v, do, *, causal, causal_alignment, window, softcap, scale=None):
        # The uncapped gradient: what a backward that ignores softcap computes from its own P.
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = attention_reference(
            *leaves,
            causal=causal,
            causal_alignment=causal_alignment,
            window=window,
            scale=scale,
            compute_dtype=q.dtype,
        )
        return tuple(g.detach() for g in torch.autograd.grad(out, leaves, do))

    return {
        "softcap: dS without the 1 - tanh^2 factor": no_slope,
        "softcap: gradient of the uncapped attention": uncapped,
    }


def softcap_backward_cases(name: str) -> list[tuple[AttentionCase, float, float | None]]:
    """(case, softcap, scale) lists for the softcapped gradient rule. ``cpu``: the Triton
    interpreter's subset (fp16/fp32, S 1/17/65/113, Sq != Sk, GQA, windows, both
    alignments; caps that saturate: scale 0.5 makes |s| of a few units against c = 2..5).
    ``gpu``: the same shapes in bfloat16 and float16, plus head dims 64/128/256 and longer
    sequences."""
    masks = [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]
    cases = []
    if name == "cpu":
        for (causal, align), s, (cap, scale) in zip(
            itertools.cycle(masks),
            (1, 17, 65, 113),
            itertools.cycle(((2.0, None), (5.0, 0.5))),
        ):
            cases.append((AttentionCase(1, 2, 1, s, s, 32, "float16", causal, align), cap, scale))
        for (causal, align), (sq, sk) in zip(masks, ((17, 65), (65, 17), (113, 40))):
            cases.append((AttentionCase(1, 4, 2, sq, sk, 16, "float16", causal, align), 3.0, 0.5))
        cases.append(
            (AttentionCase(1, 4, 2, 70, 70, 32, "float16", True, "top_left", window=17), 4.0, 0.5)
        )
        cases.append(
            (AttentionCase(1, 8, 2, 33, 47, 40, "float16", True, "bottom_right", "bshd"), 2.0, None)
        )
        cases.append(
            (AttentionCase(1, 2, 1, 33, 47, 16, "float32", True, "bottom_right"), 3.0, 0.5)
        )
        cases.append(
            (AttentionCase(1, 2, 1, 40, 70, 32, "float32", True, "top_left", window=33), 2.0, None)
        )
        return cases
    if name == "gpu":
        for dtype, (causal, align), s, d in itertools.product(
            ("bfloat16", "float16"), masks, (1, 17, 113, 1023), (64, 128, 256)
        ):
            cases.append((AttentionCase(2, 4, 2, s, s, d, dtype, causal, align), 5.0, 0.5))
        for dtype, align, w in itertools.product(
            ("bfloat16", "float16"), ("top_left", "bottom_right"), (1, 64, 129)
        ):
            cases.append(
                (AttentionCase(1, 8, 2, 239, 1023, 128, dtype, True, align, window=w), 50.0, None)
            )
        return cases
    raise ValueError(f"unknown softcap grid {name!r}; expected 'cpu' or 'gpu'")


# ------------------------------------------------------------------------------- varlen
# Packed variable-length sequences (attention_varlen): each sequence is differentiated on
# its own, so the reference is autograd through varlen_reference (one attention_reference
# per sequence) and the floor's magnitudes are the largest of the sequences'.


@dataclasses.dataclass(frozen=True)
class VarlenGradCase:
    """One packed batch for the varlen gradient rule: sequence b has lens_q[b] queries and
    lens_k[b] keys (0 and 1 allowed)."""

    lens_q: tuple
    lens_k: tuple
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    causal: bool = False
    alignment: str = "bottom_right"
    window: int | None = None
    softcap: float | None = None
    scale: float | None = None

    @property
    def name(self) -> str:
        mask = f"causal-{self.alignment}" if self.causal else "full"
        if self.window is not None:
            mask += f" window{self.window}"
        extra = "" if self.softcap is None else f" softcap{self.softcap}"
        extra += "" if self.scale is None else f" scale{self.scale}"
        return (
            f"q{list(self.lens_q)} k{list(self.lens_k)} Hq{self.num_q_heads} "
            f"Hkv{self.num_kv_heads} D{self.head_dim} {self.dtype} {mask}{extra}"
        )

    def options(self) -> dict:
        return dict(
            causal=self.causal,
            causal_alignment=self.alignment,
            window=self.window,
            softcap=self.softcap,
            scale=self.scale,
        )


def cu_seqlens(lengths, device) -> torch.Tensor:
    """int32 offsets [0, l0, l0 + l1, ...] of packed sequences."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def make_varlen_grad_inputs(case: VarlenGradCase, device, seed: int):
    """Fresh packed N(0, 1) q ``(total_q, Hq, D)``, k, v ``(total_k, Hkv, D)`` and dO, with
    cu_seqlens_q and cu_seqlens_k."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, case.dtype)

    def rand(rows, heads):
        return torch.randn(rows, heads, case.head_dim, generator=gen).to(device=device, dtype=dtype)

    total_q, total_k = sum(case.lens_q), sum(case.lens_k)
    q = rand(total_q, case.num_q_heads)
    k, v = rand(total_k, case.num_kv_heads), rand(total_k, case.num_kv_heads)
    do = rand(total_q, case.num_q_heads)
    return q, k, v, do, cu_seqlens(case.lens_q, device), cu_seqlens(case.lens_k, device)


def varlen_reference_gradients(q, k, v, grad_out, cu_q, cu_k, *, compute_dtype, **kwargs):
    """(dq, dk, dv) of ``varlen_reference`` by autograd, every operation in compute_dtype."""
    from .reference import varlen_reference

    leaves = [t.detach().to(compute_dtype).requires_grad_() for t in (q, k, v)]
    out = varlen_reference(*leaves, cu_q, cu_k, compute_dtype=compute_dtype, **kwargs)
    if out.numel() == 0:
        return tuple(torch.zeros_like(t) for t in leaves)
    grads = torch.autograd.grad(out, leaves, grad_out.to(compute_dtype), allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g.detach() for t, g in zip(leaves, grads))


def varlen_cancellation_magnitudes(q, k, v, grad_out, cu_q, cu_k, **kwargs):
    """``capped_cancellation_magnitudes`` of each sequence (its (1, H, len, D) slices), the
    largest per gradient."""
    mags = [0.0, 0.0, 0.0]
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):

        def part(t, cu):
            return t[cu[b] : cu[b + 1]].transpose(0, 1)[None]

        seq = capped_cancellation_magnitudes(
            part(q, cq), part(k, ck), part(v, ck), part(grad_out, cq), **kwargs
        )
        mags = [max(a, b_) for a, b_ in zip(mags, seq)]
    return tuple(mags)


def varlen_rule(grads, q, k, v, do, cu_q, cu_k, **kwargs) -> dict:
    """name -> ErrorReport of candidate packed (dq, dk, dv) for ``attention_varlen``."""
    ref64 = varlen_reference_gradients(
        q, k, v, do, cu_q, cu_k, compute_dtype=torch.float64, **kwargs
    )
    same = varlen_reference_gradients(q, k, v, do, cu_q, cu_k, compute_dtype=q.dtype, **kwargs)
    magnitudes = varlen_cancellation_magnitudes(q, k, v, do, cu_q, cu_k, **kwargs)
    return gradient_rule(grads, ref64, same, magnitudes)


def shifted_boundary(cu: torch.Tensor) -> torch.Tensor:
    """A planted off-by-one: the first interior sequence boundary that lies between two
    non-empty sequences moves one row later (the earlier sequence takes the later one's
    first row)."""
    values = cu.tolist()
    for b in range(1, len(values) - 1):
        if values[b] > values[b - 1] and values[b + 1] > values[b]:
            values[b] += 1
            return torch.tensor(values, dtype=cu.dtype, device=cu.device)
    raise ValueError(f"no boundary between two non-empty sequences in {values}")


def check_varlen_grad_case(
    case: VarlenGradCase, device, seed: int, *, deterministic: bool = True, plant: str | None = None
) -> dict:
    """Varlen forward (out and the packed lse), the varlen backward into NaN-poisoned
    buffers, the gradient rule per gradient against float64 autograd of the per-sequence
    reference. ``plant`` runs the backward with a planted bug that the rule must reject:
    ``"query_start"`` / ``"key_start"`` move one sequence boundary of cu_seqlens_q /
    cu_seqlens_k by a row (``shifted_boundary``) in the backward only."""
    from .kernels.backward import attention_varlen_backward
    from .kernels.varlen import attention_varlen_into

    q, k, v, do, cu_q, cu_k = make_varlen_grad_inputs(case, device, seed)
    max_q, max_k = max(case.lens_q, default=0), max(case.lens_k, default=0)
    options = case.options()
    with torch.no_grad():
        out, lse = attention_varlen_into(q, k, v, cu_q, cu_k, max_q, return_lse=True, **options)
        grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
        bwd_q, bwd_k = cu_q, cu_k
        if plant == "query_start":
            bwd_q, max_q = shifted_boundary(cu_q), max_q + 1
        elif plant == "key_start":
            bwd_k, max_k = shifted_boundary(cu_k), max_k + 1
        elif plant is not None:
            raise ValueError(f"unknown planted varlen bug {plant!r}")
        attention_varlen_backward(
            do,
            q,
            k,
            v,
            out,
            lse,
            bwd_q,
            bwd_k,
            max_q,
            max_k,
            deterministic=deterministic,
            dq=grads[0],
            dk=grads[1],
            dv=grads[2],
            **options,
        )
    base = {
        **dataclasses.asdict(case),
        "name": case.name,
        "varlen": True,
        "seed": seed,
        "deterministic": deterministic,
        "plant": plant,
    }
    return _grad_row(base, varlen_rule(grads, q, k, v, do, cu_q, cu_k, **options))


def varlen_backward_cases(name: str, seed: int = 0) -> list[VarlenGradCase]:
    """Packed batches for the varlen gradient rule. ``cpu``: ragged lengths with 0 and 1
    (queries without keys, keys without queries), self and cross lengths, both causal
    alignments and non-causal, windows, softcap, GQA 1/2/4/7, fp16 and fp32, D 16/32/40.
    ``gpu``: the same kinds at D 64/128/256 in bfloat16 and float16, lengths up to 1000
    (random, seeded), and a packed batch of equal lengths."""
    V = VarlenGradCase
    if name == "cpu":
        ragged_q, ragged_k = (0, 1, 17, 5, 1, 40), (3, 1, 17, 0, 9, 33)
        return [
            V(ragged_q, ragged_k, 4, 2, 16, "float16", True, "bottom_right"),
            V(ragged_q, ragged_k, 4, 2, 16, "float16", True, "top_left"),
            V((17, 1, 33, 2), (40, 1, 0, 65), 2, 1, 32, "float16", False),
            V((70, 1, 33, 0), (70, 1, 33, 0), 4, 1, 32, "float16", True, "bottom_right", 17),
            V((33, 7, 1, 0), (47, 7, 2, 5), 4, 2, 16, "float16", True, "top_left", None, 3.0, 0.5),
            V((20, 3, 1), (20, 3, 1), 7, 1, 40, "float16", True, "bottom_right"),
            V((1, 40, 0, 17), (1, 65, 4, 17), 2, 1, 16, "float32", True, "bottom_right"),
            V((33, 65), (33, 65), 2, 2, 16, "float32", True, "top_left", 9, 2.0),
        ]
    if name == "gpu":
        import random

        rng = random.Random(seed)
        cases = []
        for dtype, d, (causal, align), (hq, hkv) in itertools.product(
            ("bfloat16", "float16"),
            (64, 128, 256),
            ((False, "top_left"), (True, "top_left"), (True, "bottom_right")),
            ((8, 8), (8, 2), (8, 1)),
        ):
            lens_q = [
                rng.choice([0, 1, rng.randint(2, 130), rng.randint(2, 1000)]) for _ in range(6)
            ]
            lens_k = (
                lens_q
                if rng.random() < 0.5
                else [rng.choice([0, 1, rng.randint(2, 1000)]) for _ in lens_q]
            )
            window = rng.choice([None, 1, 64, 257]) if causal else None
            softcap = rng.choice([None, 30.0])
            cases.append(
                V(tuple(lens_q), tuple(lens_k), hq, hkv, d, dtype, causal, align, window, softcap)
            )
        for dtype in ("bfloat16", "float16"):
            cases.append(V((512,) * 8, (512,) * 8, 16, 4, 128, dtype, True, "bottom_right"))
        return cases
    raise ValueError(f"unknown varlen grid {name!r}; expected 'cpu' or 'gpu'")
