"""Error metrics, the pass/fail rule, and the correctness grid.

The rule (FlashAttention's, measured against float64 instead of an fp32 PyTorch run):

    max|out - ref64|  <=  2 * max|out_same_precision - ref64|  +  floor

``out_same_precision`` is the plain PyTorch computation in the inputs' dtype: the error any
implementation in that precision pays. ``floor`` is one unit roundoff of the output dtype at
the largest reference magnitude, so a case whose baseline happens to be exact (S = 1: the
output is a copy of v) does not demand a bit-exact kernel. NaN must appear exactly where
the reference has NaN; an element the kernel never wrote is NaN (outputs are poisoned) and
fails. A hand-picked ``allclose`` tolerance is not the rule: notebooks/02_correctness.ipynb
shows how one can be tuned until anything passes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable

import torch

from .reference import attention_reference

UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}


@dataclasses.dataclass
class ErrorReport:
    max_abs_err: float  # max |out - ref64| over non-NaN reference elements
    baseline_err: float  # max |out_same_precision - ref64|
    floor: float  # ulp-scale floor of the rule
    bound: float  # 2 * baseline_err + floor
    ratio: float  # max_abs_err / bound; the rule passes iff ratio <= 1
    rel_l2_err: float  # ||out - ref64||_2 / ||ref64||_2
    baseline_rel_l2_err: float
    nan_mismatch: int  # elements NaN in exactly one of (out, ref64)
    passed: bool
    # Diagnostic, not the pass/fail rule: the same rule applied to each output row (query)
    # on its own. The global rule's bound comes from the largest-magnitude rows, which can
    # hide a bug confined to small-magnitude rows (notebook 02, planted bugs).
    row_ratio: float = 0.0


def error_rule(
    out: torch.Tensor,
    ref64: torch.Tensor,
    out_same_precision: torch.Tensor,
    *,
    floor_magnitude: float = 0.0,
) -> ErrorReport:
    """Apply the rule to one output. All three tensors have the same shape.

    ``floor_magnitude``: the floor is one unit roundoff at max(max|ref64|, this). The
    gradient rule passes the size of the terms that cancel in dS (validate_backward.py)."""
    out64 = out.double()
    base64 = out_same_precision.double()
    ref_nan = torch.isnan(ref64)
    nan_mismatch = int((torch.isnan(out64) != ref_nan).sum())
    finite = ~ref_nan
    err = (out64 - ref64)[finite].abs()
    base_err = (base64 - ref64)[finite].abs()
    ref_f = ref64[finite]
    ref_max = float(ref_f.abs().max()) if ref_f.numel() else 0.0
    max_err = float(err.max()) if err.numel() else 0.0
    if math.isnan(max_err):  # NaN where the reference is finite (caught above too)
        max_err = math.inf
    baseline = float(base_err.nan_to_num(nan=math.inf).max()) if base_err.numel() else 0.0
    floor = UNIT_ROUNDOFF[out.dtype] * max(ref_max, floor_magnitude, 1e-30)
    bound = 2.0 * baseline + floor
    ref_norm = float(ref_f.norm()) if ref_f.numel() else 0.0
    rel = float((out64 - ref64)[finite].norm()) / ref_norm if ref_norm > 0 else float(max_err > 0)
    base_rel = float((base64 - ref64)[finite].norm()) / ref_norm if ref_norm > 0 else 0.0
    ratio = max_err / bound if bound > 0 else (0.0 if max_err == 0 else math.inf)
    passed = nan_mismatch == 0 and max_err <= bound
    return ErrorReport(
        max_err,
        baseline,
        floor,
        bound,
        ratio,
        rel,
        base_rel,
        nan_mismatch,
        passed,
        _row_ratio(out64, ref64, base64, UNIT_ROUNDOFF[out.dtype]),
    )


def reduction_rule(
    value: torch.Tensor,
    ref64: torch.Tensor,
    value_same_precision: torch.Tensor,
    terms64: torch.Tensor,
    *,
    mean: bool = True,
) -> ErrorReport:
    """The rule for a scalar that is a sum (``mean=False``) or a mean of N terms, e.g. a loss.

    ``value`` and ``value_same_precision``: the scalar computed by the code under test and by
    the plain PyTorch computation, both in the working dtype; ``ref64`` the float64 value;
    ``terms64`` the N terms in float64 (any shape).

    The elementwise rule's floor, one unit roundoff u at the reference's magnitude, is the
    rounding of one result. A scalar summed from N terms is rounded at every addition, by
    amounts that depend on the order of the additions and on the last bits of each term, so
    a same-precision baseline that rounds to the exact value is luck, and the rule would then
    demand that the code under test round exactly too. Summation in a tree of depth
    ceil(log2 N) (pairwise) errs by at most ceil(log2 N) * u * sum|t_i| (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., section 4.2), and a mean rounds once more when
    it divides by N. The floor is that bound:

        floor = u * (ceil(log2 N) + [mean]) * sum|t_i| / (N if mean else 1)

    at least the elementwise floor. It is the scale of one correct summation's rounding, not a
    worst case for every order (sequential summation can reach (N - 1) * u * sum|t_i|); each
    term's own error stays under the 2x same-precision term, as in the elementwise rule.
    """
    n = terms64.numel()
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    total = float(terms64.double().abs().sum())
    magnitude = (depth + int(mean)) * (total / max(n, 1) if mean else total)
    return error_rule(
        value.reshape(1),
        ref64.double().reshape(1),
        value_same_precision.reshape(1),
        floor_magnitude=magnitude,
    )


def _row_ratio(out64, ref64, base64, unit_roundoff) -> float:
    """max over rows of  max_row|out - ref| / (2 max_row|same - ref| + u max_row|ref|)."""
    if ref64.numel() == 0:
        return 0.0
    width = ref64.shape[-1]
    ref_rows = ref64.reshape(-1, width)
    keep = ~torch.isnan(ref_rows).any(-1)
    err = (out64 - ref64).reshape(-1, width)[keep].abs().nan_to_num(nan=math.inf).amax(-1)
    base = (base64 - ref64).reshape(-1, width)[keep].abs().nan_to_num(nan=math.inf).amax(-1)
    bound = 2 * base + unit_roundoff * ref_rows[keep].abs().amax(-1).clamp_min(1e-30)
    return float((err / bound).max()) if err.numel() else 0.0


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """One forward-kernel correctness case."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    dtype: str  # "float16" | "bfloat16" | "float32"
    causal: bool = False
    alignment: str = "top_left"  # causal alignment
    layout: str = "bhsd"  # "bhsd" contiguous, or "bshd" = (B,S,H,D) memory transposed
    window: int | None = None  # causal sliding window (keys each query sees)

    @property
    def name(self) -> str:
        mask = f"causal-{self.alignment}" if self.causal else "full"
        if self.window is not None:
            mask += f" window{self.window}"
        return (
            f"B{self.batch} Hq{self.num_q_heads} Hkv{self.num_kv_heads} Sq{self.seqlen_q} "
            f"Sk{self.seqlen_k} D{self.head_dim} {self.dtype} {mask} {self.layout}"
        )


def make_inputs(case: AttentionCase, device, seed: int):
    """Fresh N(0, 1) q, k, v for a case (never zeros), in the case's memory layout."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, case.dtype)

    def rand(heads, seqlen):
        if case.layout == "bshd":  # (B, S, H, D) in memory, viewed as (B, H, S, D)
            t = torch.randn(case.batch, seqlen, heads, case.head_dim, generator=gen)
            return t.to(device=device, dtype=dtype).transpose(1, 2)
        t = torch.randn(case.batch, heads, seqlen, case.head_dim, generator=gen)
        return t.to(device=device, dtype=dtype)

    q = rand(case.num_q_heads, case.seqlen_q)
    k = rand(case.num_kv_heads, case.seqlen_k)
    v = rand(case.num_kv_heads, case.seqlen_k)
    return q, k, v


def check_case(case: AttentionCase, device, seed: int) -> dict:
    """Run the forward kernel on fresh inputs (NaN-poisoned output) and apply the rule."""
    from .dispatch import forward_kernel
    from .interface import attention

    q, k, v = make_inputs(case, device, seed)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
    kwargs = dict(causal=case.causal, causal_alignment=case.alignment, window=case.window)
    attention(q, k, v, out=out, **kwargs)
    ref64 = attention_reference(q, k, v, compute_dtype=torch.float64, **kwargs)
    same = attention_reference(q, k, v, compute_dtype=q.dtype, **kwargs)
    report = error_rule(out, ref64, same)
    # Which kernel the dispatch ran (FLASHCORE_FORWARD_HOPPER applies): "gluon" or "triton".
    kernel = forward_kernel(q, k, v, causal=case.causal, window=case.window)
    return {
        **dataclasses.asdict(case),
        "name": case.name,
        "seed": seed,
        "kernel": kernel,
        **dataclasses.asdict(report),
    }


# ---------------------------------------------------------------------------- grids

AWKWARD_LENGTHS = (1, 17, 63, 64, 65, 113, 239, 1023)
GQA_SHAPES = ((4, 4), (4, 2), (8, 2), (14, 2), (8, 1), (32, 1))  # ratios 1, 2, 4, 7, 8, 32
HEAD_DIMS = (16, 32, 64, 128, 256)


def _shuffled(cases: Iterable[AttentionCase], seed: int = 0) -> list[AttentionCase]:
    cases = list(dict.fromkeys(cases))  # de-duplicate, keep order
    random.Random(seed).shuffle(cases)
    return cases


def correctness_grid(name: str) -> list[AttentionCase]:
    """Named case lists.

    ``full`` (GPU record): every awkward length as Sq = Sk and as Sq != Sk pairs, both
    causal alignments and non-causal, every GQA ratio, every head dim, fp16 and bf16, plus
    a fp32 and a transposed-layout slice. ``cpu``: a subset small enough for the Triton
    interpreter (fp16/fp32). ``sanitizer``: a small sample for compute-sanitizer.
    """
    masks = [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]
    if name == "full":
        cases = []
        for dtype, (causal, align), s in itertools.product(
            ("float16", "bfloat16"), masks, AWKWARD_LENGTHS
        ):
            for d in HEAD_DIMS:  # square sequences, every head dim
                cases.append(AttentionCase(2, 4, 2, s, s, d, dtype, causal, align))
        for dtype, (causal, align), (sq, sk) in itertools.product(
            ("float16", "bfloat16"),
            masks,
            ((1, 1023), (17, 239), (113, 64), (239, 17), (1023, 65), (64, 2048), (2048, 63)),
        ):
            for d in (64, 128):
                cases.append(AttentionCase(1, 4, 1, sq, sk, d, dtype, causal, align))
        for dtype, (causal, align), (hq, hkv) in itertools.product(
            ("float16", "bfloat16"), masks, GQA_SHAPES
        ):
            cases.append(AttentionCase(2, hq, hkv, 239, 239, 128, dtype, causal, align))
            cases.append(AttentionCase(1, hq, hkv, 65, 1023, 64, dtype, causal, align))
        for (causal, align), s, d in itertools.product(masks, (17, 239), (16, 64, 128, 256)):
            cases.append(AttentionCase(1, 2, 1, s, s, d, "float32", causal, align))
        for dtype, (causal, align), d in itertools.product(
            ("float16", "bfloat16"), masks, (40, 80, 96, 200)
        ):
            cases.append(
                AttentionCase(1, 2, 1, 113, 239, d, dtype, causal, align)
            )  # padded head dims
        for dtype, (causal, align) in itertools.product(("float16", "bfloat16"), masks):
            cases.append(AttentionCase(2, 8, 2, 239, 1023, 128, dtype, causal, align, "bshd"))
            cases.append(AttentionCase(2, 8, 8, 4096, 4096, 64, dtype, causal, align, "bshd"))
        return _shuffled(cases)
    if name == "cpu":
        cases = []
        for (causal, align), s in itertools.product(masks, (1, 17, 63, 64, 65, 113)):
            cases.append(AttentionCase(1, 2, 1, s, s, 64, "float16", causal, align))
        for (causal, align), (sq, sk) in itertools.product(
            masks, ((1, 65), (17, 113), (113, 17), (65, 33))
        ):
            cases.append(AttentionCase(1, 2, 2, sq, sk, 32, "float16", causal, align))
        for (hq, hkv), d in zip(GQA_SHAPES, (16, 32, 64, 128, 256, 16)):
            cases.append(AttentionCase(1, hq, hkv, 33, 33, d, "float16", True, "top_left"))
        for d in (16, 40, 128):
            cases.append(AttentionCase(1, 2, 1, 33, 47, d, "float32", True, "bottom_right"))
        cases.append(AttentionCase(2, 4, 2, 47, 65, 64, "float16", True, "bottom_right", "bshd"))
        return _shuffled(cases)
    if name in ("window", "window-cpu"):
        # Sliding windows against the masked float64 reference: windows narrower than,
        # equal to and wider than a tile, not multiples of it, and wider than the sequence.
        gpu = name == "window"
        cases = []
        dtypes = ("float16", "bfloat16") if gpu else ("float16", "float32")
        lengths = (
            ((1023, 1023), (239, 1023), (1023, 239), (4096, 4096))
            if gpu
            else ((113, 113), (17, 65), (65, 17))
        )
        windows = (1, 17, 64, 100, 129, 1000, 5000) if gpu else (1, 17, 32, 50, 200)
        for dtype, align, (sq, sk), w in itertools.product(
            dtypes, ("top_left", "bottom_right"), lengths, windows
        ):
            d = 128 if gpu else 32
            cases.append(AttentionCase(1, 4, 2, sq, sk, d, dtype, True, align, window=w))
        if gpu:
            for d in (64, 256):
                cases.append(
                    AttentionCase(2, 8, 1, 2048, 2048, d, "bfloat16", True, "top_left", window=300)
                )
        return _shuffled(cases)
    if name == "sanitizer":
        return [
            AttentionCase(1, 4, 2, 113, 113, 64, "float16", True, "top_left"),
            AttentionCase(1, 4, 1, 65, 239, 128, "bfloat16", True, "bottom_right"),
            AttentionCase(1, 4, 1, 239, 65, 128, "float16", True, "bottom_right"),
            AttentionCase(2, 7, 1, 17, 63, 256, "bfloat16", False, "top_left"),
            AttentionCase(1, 2, 1, 1, 1023, 80, "float16", True, "bottom_right"),
            AttentionCase(1, 2, 2, 63, 63, 32, "float32", True, "top_left"),
            AttentionCase(1, 4, 2, 113, 239, 64, "float16", False, "top_left", "bshd"),
            AttentionCase(1, 4, 2, 239, 239, 128, "bfloat16", True, "top_left", window=100),
            AttentionCase(1, 2, 1, 113, 239, 64, "float16", True, "bottom_right", window=17),
        ]
    raise ValueError(
        f"unknown grid {name!r}; expected 'full', 'cpu', 'window', 'window-cpu' or 'sanitizer'"
    )


def run_grid(
    cases: list[AttentionCase],
    device,
    *,
    base_seed: int = 0,
    progress: bool = True,
    seeds: list[int] | None = None,
) -> list[dict]:
    """Check every case on fresh inputs (seed = base_seed + index, or ``seeds``)."""
    from tqdm import tqdm

    seeds = seeds if seeds is not None else [base_seed + i for i in range(len(cases))]
    rows = []
    for case, seed in zip(
        tqdm(cases, desc="correctness", disable=not progress, mininterval=10), seeds
    ):
        rows.append(check_case(case, device, seed=seed))
    return rows


def determinism_cases(device) -> list[AttentionCase]:
    """The sanitizer sample, less bf16 on CPU (the interpreter cannot run it)."""
    return [
        c
        for c in correctness_grid("sanitizer")
        if str(device).startswith("cuda") or c.dtype != "bfloat16"
    ]


def check_determinism(
    cases: list[AttentionCase], device, *, repeats: int = 5, seed: int = 1234
) -> list[dict]:
    """Launch each case ``repeats`` times on the same inputs; outputs must be bitwise equal."""
    from .interface import attention

    rows = []
    for i, case in enumerate(cases):
        q, k, v = make_inputs(case, device, seed + i)
        first = attention(q, k, v, causal=case.causal, causal_alignment=case.alignment)
        identical = all(
            torch.equal(
                first, attention(q, k, v, causal=case.causal, causal_alignment=case.alignment)
            )
            for _ in range(repeats - 1)
        )
        rows.append({"name": case.name, "repeats": repeats, "bitwise_identical": bool(identical)})
    return rows


def summarize(rows: list[dict]) -> dict:
    """Case count, failures, the worst error ratio and where it occurred."""
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    return {
        "cases": len(rows),
        "failed": sum(not r["passed"] for r in rows),
        "worst_ratio": worst["ratio"] if worst else None,
        "worst_case": worst["name"] if worst else None,
        "max_rel_l2_err": max((r["rel_l2_err"] for r in rows), default=None),
        "worst_row_ratio": max((r["row_ratio"] for r in rows), default=None),
        "cases_by_kernel": dict(Counter(r.get("kernel", "triton") for r in rows)),
    }


def check_large_offsets(
    device, *, seqlen: int = 131072, head_dim: int = 128, sample_rows: int = 64, seed: int = 7
) -> list[dict]:
    """Attention on (1, 1, S, D) views into a (1, S, H, D) buffer of more than 2^31 elements,
    so row offsets (row * H * D) pass 2^31: int32 offset arithmetic would read the wrong
    memory. Checked with the rule on a sample of rows, both ends of the sequence included.
    Needs ~4.5 GB of device memory per dtype."""
    from .interface import attention

    heads = (2**31) // (seqlen * head_dim) + 3  # the last heads start past 2^31 elements
    rows_out = []
    for dtype, causal in ((torch.float16, False), (torch.bfloat16, True)):
        gen = torch.Generator(device=device).manual_seed(seed)
        base = torch.randn(1, seqlen, heads, head_dim, device=device, dtype=dtype, generator=gen)
        q, k, v = (base[:, :, h : h + 1].transpose(1, 2) for h in (heads - 1, heads - 2, heads - 3))
        max_offset = (seqlen - 1) * q.stride(2) + (heads - 1) * head_dim + head_dim - 1
        out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)
        attention(q, k, v, causal=causal, out=out)
        pick = (
            torch.randperm(seqlen - 8, generator=torch.Generator().manual_seed(seed))[
                : sample_rows - 8
            ]
            + 4
        )
        rows = torch.cat(
            [torch.arange(4), pick.sort().values, torch.arange(seqlen - 4, seqlen)]
        ).to(device)
        ref64 = attention_reference(q, k, v, causal=causal, query_rows=rows)
        same = attention_reference(q, k, v, causal=causal, query_rows=rows, compute_dtype=dtype)
        report = error_rule(out[:, :, rows], ref64, same)
        mask = "causal" if causal else "full"
        name = f"B1 H1 S{seqlen} D{head_dim} {str(dtype)[6:]} {mask} view of {heads} heads"
        rows_out.append(
            {
                "name": name,
                "buffer_elements": base.numel(),
                "max_element_offset": max_offset,
                "rows_checked": int(rows.numel()),
                **dataclasses.asdict(report),
            }
        )
        del base, q, k, v, out
    return rows_out


# ------------------------------------------------------------- planted bugs (mutants)
# Wrong attention implementations, each a bug real kernels have shipped with. A check that
# passes one of them is too weak; notebooks/02_correctness.ipynb and tests/test_validate.py
# run every check against every mutant.


def _mutant_attention(q, k, v, *, causal, extra_visible=0, p_dtype=None):
    """Same-precision attention with the causal diagonal moved by ``extra_visible`` keys and
    the probabilities optionally rounded to ``p_dtype`` before p @ v."""
    from .reference import expand_kv_heads

    scale = 1.0 / math.sqrt(q.shape[-1])
    kk = expand_kv_heads(k, q.shape[1])
    vv = expand_kv_heads(v, q.shape[1])
    s = (q.float() @ kk.float().transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None, :]
        s = s.masked_fill(j > i + extra_visible, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if p_dtype is not None:
        p = p.to(p_dtype).float()
    return (p @ vv.float()).to(q.dtype)


def planted_bugs(block_n: int = 64) -> dict:
    """name -> fn(q, k, v, causal) returning a subtly wrong attention output."""
    from .reference import tiled_attention

    def drop_tail_block(q, k, v, causal):
        keep = (k.shape[2] // block_n) * block_n or block_n
        return attention_reference(
            q, k[:, :, :keep], v[:, :, :keep], causal=causal, compute_dtype=q.dtype
        )

    def one_future_key(q, k, v, causal):
        return _mutant_attention(q, k, v, causal=True, extra_visible=1)

    def p_in_bf16(q, k, v, causal):
        return _mutant_attention(q, k, v, causal=causal, p_dtype=torch.bfloat16)

    def no_rescale(q, k, v, causal):
        from .reference import expand_kv_heads

        kk, vv = expand_kv_heads(k, q.shape[1]), expand_kv_heads(v, q.shape[1])
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            for h in range(q.shape[1]):
                out[b, h] = tiled_attention(
                    q[b, h].float(),
                    kk[b, h].float(),
                    vv[b, h].float(),
                    block_n=block_n,
                    rescale=False,
                ).to(q.dtype)
        return out

    return {
        "drops the last partial key block": drop_tail_block,
        "causal mask one key too late": one_future_key,
        "probabilities rounded to bf16": p_in_bf16,
        "online softmax without the rescale": no_rescale,
    }


def weak_checks() -> dict:
    """The checks the prior reports used, as name -> fn(out, ref) -> bool."""
    return {
        "max_diff < 2e-3": lambda out, ref: float((out.double() - ref).abs().max()) < 2e-3,
        "allclose(rtol=1e-3, atol=2e-3)": lambda out, ref: bool(
            torch.allclose(out.double(), ref, rtol=1e-3, atol=2e-3)
        ),
    }


def _randn(*shape, dtype, gen, device):
    return torch.randn(*shape, generator=gen).to(dtype).to(device)


def kvcache_rule(out, q, k_cache, v_cache, total_lengths):
    """The error rule for one KV-cache call (caches already holding the appended tokens)."""
    from .reference import kvcache_reference

    ref = kvcache_reference(q, k_cache, v_cache, total_lengths)
    same = kvcache_reference(q, k_cache, v_cache, total_lengths, compute_dtype=q.dtype)
    return error_rule(out, ref, same)


def kvcache_session(
    batch, hq, hkv, capacity, d, prompt_lens, steps, dtype=torch.float16, device="cpu", seed=0
):
    """KV-cache attention over a whole generation session, every call under the error rule.

    Prefill each sequence's prompt (chunked prefill from an empty cache, padded to the
    longest prompt per call and then trimmed by lengths), then `steps` decode steps; every
    call checked under the error rule. Returns the reports."""
    from .interface import attention_with_kvcache

    gen = torch.Generator().manual_seed(seed)
    k_cache = _randn(
        batch, hkv, capacity, d, dtype=dtype, gen=gen, device=device
    )  # garbage beyond lengths
    v_cache = _randn(batch, hkv, capacity, d, dtype=dtype, gen=gen, device=device)
    reports = []
    lengths = torch.zeros(batch, dtype=torch.int32, device=device)
    # Prefill: one chunk per distinct prompt length group (sequences of equal length).
    for length in sorted(set(prompt_lens)):
        idx = [i for i, n in enumerate(prompt_lens) if n == length]
        sub = torch.tensor(idx, device=device)
        q = _randn(len(idx), hq, length, d, dtype=dtype, gen=gen, device=device)
        kn = _randn(len(idx), hkv, length, d, dtype=dtype, gen=gen, device=device)
        vn = _randn(len(idx), hkv, length, d, dtype=dtype, gen=gen, device=device)
        kc, vc = k_cache[sub].clone(), v_cache[sub].clone()
        out = attention_with_kvcache(q, kc, vc, lengths[sub], kn, vn)
        k_cache[sub], v_cache[sub] = kc, vc
        reports.append(kvcache_rule(out, q, kc, vc, lengths[sub] + length))
    lengths = torch.tensor(prompt_lens, dtype=torch.int32, device=device)
    for _ in range(steps):
        q = _randn(batch, hq, 1, d, dtype=dtype, gen=gen, device=device)
        kn = _randn(batch, hkv, 1, d, dtype=dtype, gen=gen, device=device)
        vn = _randn(batch, hkv, 1, d, dtype=dtype, gen=gen, device=device)
        out = attention_with_kvcache(q, k_cache, v_cache, lengths, kn, vn)
        reports.append(kvcache_rule(out, q, k_cache, v_cache, lengths + 1))
        if not torch.equal(k_cache[torch.arange(batch), :, lengths.long()], kn[:, :, 0]):
            raise RuntimeError("the append did not write the new keys at cache_seqlens")
        lengths = lengths + 1
    return reports
