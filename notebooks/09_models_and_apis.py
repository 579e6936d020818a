# %% [markdown]
# # 09 · Models and APIs: learnable sinks, a value head dim of its own, paged KV, the doors
#
# The models people train and serve now need three things a plain attention kernel lacks:
# gpt-oss's **learnable sinks** (a per-head logit in every row's softmax denominator, with a
# gradient), DeepSeek-V3's **value head dim of its own** (MLA: q.k over 192 dims, v over 128),
# and the serving engines' **paged KV cache** (K/V in fixed-size pages, a block table per
# sequence). Code reaches attention through `torch.nn.functional.scaled_dot_product_attention`
# or through `flash_attn`'s functions: flashcore stands behind both doors.
#
# **What this notebook claims, and how it could fail.** Each feature computes what the float64
# reference computes, under the project's error rule, forward and (where it has one)
# backward; a planted bug of each kind fails the same check; the two small models run through
# flashcore within the rule of their own eager attention. Every verdict prints `False` when
# the measurement says so. Speed is not claimed here: what was and was not measured is listed
# at the end.
#
# Sections: (1) sinks: the gradient derived, checked in float64, then flashcore and gpt-oss;
# (2) D_v ≠ D: why zero padding is exact, the kernel, DeepSeek-V3, the GPU grid;
# (3) paged KV; (4) the doors; (5) what is not yet measured.

# %% tags=["parameters"]
PROFILE = "auto"  # "auto" | "gpu" | "cpu"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"  # whose GPU test logs section 2 shows

# %%
from flashcore.notebook import setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
import math

import torch

import flashcore
from flashcore import results
from flashcore.reference import attention_reference, kvcache_reference
from flashcore.validate import error_rule

# The interpreter cannot run bfloat16 (flashcore._checks says why): float32 there.
HALF = torch.bfloat16 if DEVICE == "cuda" else torch.float16
WIDE = torch.bfloat16 if DEVICE == "cuda" else torch.float32

# %% [markdown]
# ## 1. Learnable sinks
#
# A sink is one logit $\sigma_h$ per head that joins every row's softmax denominator and has
# no value row. For row $i$ with scaled scores $s_{ij}$:
#
# $$Z_i = e^{\sigma} + \sum_j e^{s_{ij}}, \qquad O_i = \sum_j \frac{e^{s_{ij}}}{Z_i} v_j,
# \qquad \mathrm{lse}_i = \log Z_i, \qquad P_{\mathrm{sink},i} = e^{\sigma - \mathrm{lse}_i}.$$
#
# The kernel starts each row's running state as if the sink were the first key seen (max
# $\sigma$, denominator $e^0 = 1$, nothing accumulated), so every row's denominator and the
# lse the backward reads include it. The gradient: $\sigma$ enters $O_i$ only through $Z_i$,
# and $\partial O_i / \partial \sigma = -O_i\, e^{\sigma} / Z_i = -P_{\mathrm{sink},i}\, O_i$, so
#
# $$\frac{\partial L}{\partial \sigma_h} = \sum_i dO_i \cdot \frac{\partial O_i}{\partial \sigma_h}
# = -\sum_i P_{\mathrm{sink},i}\, \delta_i, \qquad \delta_i = \textstyle\sum_d dO_{id} O_{id},$$
#
# the same $\delta_i$ the backward already computes for $dS = P \circ (dP - \delta)$, whose form
# the sink does not change (it changes $P$ through $\mathrm{lse}$). So the sink's gradient costs
# one more reduction over rows. First the formula against float64 autograd of the reference:

# %%
gen = torch.Generator().manual_seed(0)
q64, k64, v64 = (torch.randn(2, 4, s, 32, generator=gen, dtype=torch.float64) for s in (37, 53, 53))
k64, v64 = k64[:, :2], v64[:, :2]  # GQA 4/2
sink64 = (2 * torch.randn(4, generator=gen, dtype=torch.float64)).requires_grad_()
do64 = torch.randn(2, 4, 37, 32, generator=gen, dtype=torch.float64)
opts = dict(causal=True, causal_alignment="bottom_right")
out64, lse64 = attention_reference(q64, k64, v64, sinks=sink64, return_lse=True, **opts)
(autograd_dsink,) = torch.autograd.grad(out64, sink64, do64)
p_sink = torch.exp(sink64.detach()[None, :, None] - lse64.detach())
delta = (do64 * out64.detach()).sum(-1)
formula = -(p_sink * delta).sum((0, 2))
rel = lambda a, b: float((a - b).abs().max() / b.abs().max())  # noqa: E731
# Printed at 6 digits: the last bits of a float64 sum depend on the CPU's code path.
print("d sink: autograd", [f"{x:.6g}" for x in autograd_dsink.tolist()])
print("        formula ", [f"{x:.6g}" for x in formula.tolist()])

# %%
# NBVAL_CHECK_OUTPUT
print("the formula equals float64 autograd (relative 1e-12):", rel(formula, autograd_dsink) < 1e-12)
print("without its minus sign it does not:", rel(-formula, autograd_dsink) > 1e-3)

# %% [markdown]
# flashcore's forward and backward with sinks (dense, GQA, causal bottom-right, a window),
# float32 on the CPU profile and bfloat16 on a GPU: dq, dk, dv under the gradient rule, the
# sinks' gradient under the rule with the floor of its sum over rows
# (`validate_backward.sinks_gradient_rule` says how), and the same gradient with its sign
# flipped, which must fail.

# %%
from flashcore.validate_backward import sinks_gradient_rule

sink_rows = []
for b, hq, hkv, sq, sk, d, window in [(1, 4, 2, 33, 47, 32, None), (2, 4, 1, 40, 40, 64, 16)]:
    g = torch.Generator().manual_seed(sq + sk)
    q, k, v = (torch.randn(b, h, s, d, generator=g) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    sinks = 2 * torch.randn(hq, generator=g)
    do = torch.randn(b, hq, sq, d, generator=g)
    q, k, v, do = (t.to(DEVICE, WIDE) for t in (q, k, v, do))
    reports = sinks_gradient_rule(
        q, k, v, sinks.to(DEVICE), do, causal=True, causal_alignment="bottom_right", window=window
    )
    sink_rows.append(
        {"case": f"B{b} H{hq}/{hkv} Sq{sq} Sk{sk} D{d} window {window}"}
        | {name: r.ratio for name, r in reports.items()}
    )
# Ratios to the rule's bound (passes at <= 1) differ from one CPU code path to another by up
# to 2x at these sizes (both the kernel's rounding and the baseline's change), so the
# committed output shows pass/fail, not the ratios, which the notebook can print: sink_rows.
print(table([{k: (v if k == "case" else ("pass" if v <= 1 else "FAIL")) for k, v in r.items()}
             for r in sink_rows], list(sink_rows[0]), {}))  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
print(
    "every gradient with sinks passes the rule:",
    all(r[n] <= 1 for r in sink_rows for n in ("dq", "dk", "dv", "dsinks")),
)
print(
    "the sign-flipped sinks' gradient fails it:",
    all(r["dsinks_sign_flipped"] > 1 for r in sink_rows),
)

# %% [markdown]
# gpt-oss itself: transformers' `GptOss` (random init, a small config with a sliding and a full
# layer, 4 experts), its attention routed to flashcore, against the same model with eager
# attention in float64: fp32 logits, the loss and every parameter gradient, the sinks'
# included (`studies/models.py`; its docstring says what this smoke check can and cannot show).

# %%
from flashcore.studies.models import gpt_oss_check

gpt_oss = gpt_oss_check(DEVICE)
print(
    f"logits pass: {gpt_oss['logits']['passed']}; loss passes: {gpt_oss['loss']['passed']}; "
    f"{gpt_oss['gradients']} parameter gradients ({gpt_oss['sink_gradients']} of sinks) pass: "
    f"{gpt_oss['gradients_passed']}"
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "gpt-oss through flashcore: logits, loss and every gradient pass (sinks' gradients among them):",
    gpt_oss["passed"] and gpt_oss["sink_gradients"] > 0,
)

# %% [markdown]
# ## 2. A value head dim of its own (D_v ≠ D)
#
# DeepSeek-V3's MLA attends with q.k over $D = 192$ dims and v over $D_v = 128$. The Triton
# kernels carry a mode for it (`HEAD_DIM_V`: a V tile and accumulator $D_v$ wide). Under the
# interpreter that mode passes every test; compiled for the H100 it gave a wrong output at
# D 40 / D_v 24 and an illegal memory access at 24 / 8 (and at 40 / 24 without softcap, in a
# process that also ran the backward), and passed at D 64 / D_v 24 and where $D_v = D$
# (tools/dv_gpu_diagnose.py, its log below; failures at 192/128 in an earlier run came after
# an illegal access had poisoned the process, and are not evidence). An offline sm_90 analysis
# (`tools/dv_offline/REPORT.md`) found one difference that separates the failing compiles: V
# placed in K's shared-memory slot with another shape and swizzle, which happens when neither
# is pipelined (strides that are not multiples of 16, as at D 40 and D_v 24); it is a
# correlation until a GPU run confirms it. Meanwhile compiled launches take another route,
# exact by construction: pad the narrower operand with zero columns to $W = \max(D, D_v)$ and
# run the one-head-dim kernel.
#
# * $D_v < D$: $v' = [v, 0]$. Then $O' = P v' = [P v, P\,0] = [O, 0]$: drop the last
#   $D - D_v$ columns. Backward: $dV' = P^\top dO'$ with $dO' = [dO, 0]$ gives $[dV, 0]$;
#   $dP = dO' v'^\top = dO\, v^\top$ and $\delta = \mathrm{rowsum}(dO' \circ O') =
#   \mathrm{rowsum}(dO \circ O)$ are unchanged, so $dQ$ and $dK$ are too.
# * $D_v > D$: $q' = [q, 0]$, $k' = [k, 0]$: $q' k'^\top = q k^\top$, so $P$ and $O$ are
#   unchanged (the scale stays $1/\sqrt{D}$, passed explicitly); $dQ' = dS\, k' = [dQ, 0]$.
#
# The cost is the copies and the padded columns' FLOPs (at 192/128 the P V product is 1.5x
# as wide). Below, both routes on the CPU (the mode itself, and the padded route the GPU takes)
# against float64, then DeepSeek-V3.

# %%
from flashcore.kernels import _launch
from flashcore.kernels.backward import attention_backward
from flashcore.validate_backward_softcap_varlen import softcap_rule

dv_rows = []
routes = ["padded"] if DEVICE == "cuda" else ["HEAD_DIM_V mode", "padded"]
for d, dv, causal, softcap in [(192, 128, True, None), (40, 24, True, 5.0), (32, 64, False, None)]:
    g = torch.Generator().manual_seed(d + dv)
    q, k = torch.randn(1, 4, 49, d, generator=g), torch.randn(1, 2, 61, d, generator=g)
    v, do = torch.randn(1, 2, 61, dv, generator=g), torch.randn(1, 4, 49, dv, generator=g)
    q, k, v, do = (t.to(DEVICE, HALF) for t in (q, k, v, do))
    opts = dict(causal=causal, causal_alignment="bottom_right", window=None, softcap=softcap)
    for route in routes:
        saved = set(_launch.PAD_VALUE_HEAD_DIM_ON)
        _launch.PAD_VALUE_HEAD_DIM_ON.clear()
        _launch.PAD_VALUE_HEAD_DIM_ON.update({"cpu", "cuda"} if route == "padded" else set())
        try:
            out, lse = flashcore.attention(q, k, v, return_lse=True, **opts)
            grads = attention_backward(do, q, k, v, out, lse, **opts)
        finally:
            _launch.PAD_VALUE_HEAD_DIM_ON.clear()
            _launch.PAD_VALUE_HEAD_DIM_ON.update(saved)
        fwd = error_rule(
            out,
            attention_reference(q, k, v, **opts),
            attention_reference(q, k, v, compute_dtype=q.dtype, **opts),
        )
        bwd = softcap_rule(grads, q, k, v, do, **opts)
        dv_rows.append(
            {"D / D_v": f"{d} / {dv}", "route": route, "out": fwd.ratio}
            | {name: r.ratio for name, r in bwd.items()}
        )
print(table([{k: (v if k in ("D / D_v", "route") else ("pass" if v <= 1 else "FAIL")) for k, v in r.items()}
             for r in dv_rows], list(dv_rows[0]), {}))  # fmt: skip
same_route = all(
    a[n] == b[n] for a, b in zip(dv_rows[::2], dv_rows[1::2]) for n in ("out", "dq", "dk", "dv")
) if len(routes) == 2 else None  # fmt: skip
print("the two routes give bitwise the same ratios (same outputs to the rule):", same_route)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "D_v != D: output and gradients pass the rule on every route run here:",
    all(r[n] <= 1 for r in dv_rows for n in ("out", "dq", "dk", "dv")),
)

# %% [markdown]
# DeepSeek-V3 (random init; MLA with q.k over 32 + 16 = 48 dims and v over 32; transformers
# hands the attention function v at its own head dim) through flashcore, against eager in
# float64: fp32 logits, then a training step's loss and every parameter gradient.

# %%
from flashcore.studies.models import deepseek_v3_check

ds = deepseek_v3_check(DEVICE)  # batch 2, 17 tokens (studies/models.py)
print(f"logits pass: {ds['logits']['passed']}")
print(
    f"training step: {ds['parameters']} parameter gradients pass: {ds['gradients_passed']}; "
    f"loss passes: {ds['loss_passed']}"
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "DeepSeek-V3 through flashcore: logits and a training step pass the rule:",
    ds["passed"] and ds["loss_passed"],
)

# %% [markdown]
# On the H100 (2026-11-25): the diagnosis of the mode itself (each variant changes one thing
# of the failing case; the run stopped at its time limit after five), then the GPU test grids
# at commit `34c60c8`, through the padded route: `tests/test_value_head_dim.py`'s 156 dense
# cases (D/D_v 192/128, 64/32, 128/64, 40/24, 32/64, 256/128; bf16 and fp16; S up to 2K,
# ragged, windows, softcap) and 20 varlen cases in 8 shards, and the paged-KV and launch
# tests. These are test logs, not records: they carry no kernel fingerprint.

# %%
logs = results.RESULTS_DIR / RECORDED_GPU / "logs"
for name in ("dv_variants_d231668.log", "gpu_tests_dv_paged_launch_34c60c8.txt"):
    path = logs / name
    print(f"--- {name}")
    print(path.read_text().strip() if path.exists() else "(not in this checkout)")

# %% [markdown]
# ## 3. Paged KV
#
# A serving engine keeps K/V in a pool of fixed-size pages, `(num_pages, Hkv, page_size, D)`,
# and a block table per sequence: token $p$ of sequence $b$ lives at row $p \bmod P$ of page
# `block_table[b, p // P]`. `attention_with_kvcache(..., block_table=)` reads through the table
# (pages in any order, pages shared between sequences) and appends new tokens into their pages
# in place. Below: three sequences in a shuffled pool of 16-token pages, sequences 0 and 2
# sharing their first page (a common prefix), two new tokens appended per sequence; the output
# against float64 attention over the dense cache the table describes, the pool against the
# appends written one row at a time; then the same call with one table entry pointing at a
# spare page, which the rule must reject.

# %%
page, hq, hkv, d = 16, 8, 2, 64
lengths = torch.tensor([37, 70, 21], dtype=torch.int32)
g = torch.Generator().manual_seed(9)
pages_used = [math.ceil((n + 2) / page) for n in lengths.tolist()]
num_pages = sum(pages_used) + 3
order = torch.randperm(num_pages, generator=g).tolist()
table_ = torch.full((3, max(pages_used)), -1, dtype=torch.int32)
for b, n in enumerate(pages_used):
    table_[b, :n] = torch.tensor(order[:n])
    order = order[n:]
# Sequences 0 and 2 share their first page (a common prefix); both hold more than a page
# (37 and 21 tokens), so no append lands in it.
table_[2, 0] = table_[0, 0]
k_pool, v_pool = (torch.randn(num_pages, hkv, page, d, generator=g).to(DEVICE, HALF) for _ in "kv")
q = torch.randn(3, hq, 2, d, generator=g).to(DEVICE, HALF)
k_new, v_new = (torch.randn(3, hkv, 2, d, generator=g).to(DEVICE, HALF) for _ in "kv")
table_, lengths = table_.to(DEVICE), lengths.to(DEVICE)


def dense_view(pool, table):
    """The dense (B, Hkv, pages * page, D) cache a block table describes."""
    pages = pool[table.clamp(min=0).long()]  # (B, pages, Hkv, page, D)
    b, n, h, p, dd = pages.shape
    return pages.permute(0, 2, 1, 3, 4).reshape(b, h, n * p, dd)


def paged_call(table):
    kp, vp = k_pool.clone(), v_pool.clone()
    out = flashcore.attention_with_kvcache(q, kp, vp, lengths, k_new, v_new, block_table=table)
    total = lengths + 2
    k_dense, v_dense = dense_view(kp, table), dense_view(vp, table)
    ref = kvcache_reference(q, k_dense, v_dense, total)
    same = kvcache_reference(q, k_dense, v_dense, total, compute_dtype=q.dtype)
    return error_rule(out, ref, same), kp, vp


report, kp, vp = paged_call(table_)
expected_k, expected_v = k_pool.clone(), v_pool.clone()
for b, start in enumerate(lengths.tolist()):
    for r in range(2):
        where = int(table_[b, (start + r) // page]), slice(None), (start + r) % page
        expected_k[where], expected_v[where] = k_new[b, :, r], v_new[b, :, r]
appends_right = torch.equal(kp, expected_k) and torch.equal(vp, expected_v)
# The planted bug: sequence 1's first page read from a spare page of the pool instead (two
# of its pages swapped would not do: attention is invariant to the order of the keys a query
# sees); its output is compared with attention over the true cache.
swapped = table_.clone()
swapped[1, 0] = order[0]  # a spare page: in the pool, in no sequence
planted_out = flashcore.attention_with_kvcache(
    q, k_pool.clone(), v_pool.clone(), lengths, k_new, v_new, block_table=swapped
)
true_k, true_v = dense_view(kp, table_), dense_view(vp, table_)
planted_report = error_rule(
    planted_out,
    kvcache_reference(q, true_k, true_v, lengths + 2),
    kvcache_reference(q, true_k, true_v, lengths + 2, compute_dtype=q.dtype),
)
print(
    f"a wrong page against the true cache: ratio to the bound above 100: {planted_report.ratio > 100}"
)

# %%
# NBVAL_CHECK_OUTPUT
print(
    "paged KV: output passes the rule, and the appends land in their pages:",
    report.passed and appends_right,
)
print("a table that points one page at the wrong page fails the rule:", not planted_report.passed)

# %% [markdown]
# ## 4. The doors
#
# `flashcore.flash_attn_func`, `flash_attn_varlen_func` and `flash_attn_with_kvcache` take
# flash_attn's layout `(B, S, H, D)` and argument names (`softmax_scale`, `causal`,
# `window_size=(left, right)`, `softcap`, `return_attn_probs`, `cache_seqlens`,
# `page_table`/`block_table`) and refuse what flashcore lacks with an error naming the
# argument. The SDPA door (`flashcore.sdpa_backend`) registers flashcore as an SDPA
# flash-attention implementation where the installed torch has
# `torch.nn.attention.register_flash_attention_impl`; its tests prove which kernel ran and that
# every call flashcore cannot serve falls back to PyTorch's own.

# %%
g = torch.Generator().manual_seed(4)
qs, ks, vs = (torch.randn(2, 45, h, 64, generator=g).to(DEVICE, HALF) for h in (8, 2, 2))
fa_out = flashcore.flash_attn_func(qs, ks, vs, causal=True, window_size=(16, 0), softcap=30.0)
t = lambda x: x.transpose(1, 2)  # noqa: E731
# FA's window_size=(left, 0) sees keys i - left .. i: flashcore's window of left + 1 keys.
fa_opts = dict(causal=True, causal_alignment="bottom_right", window=17, softcap=30.0)
fa_report = error_rule(
    t(fa_out),
    attention_reference(t(qs), t(ks), t(vs), **fa_opts),
    attention_reference(t(qs), t(ks), t(vs), compute_dtype=qs.dtype, **fa_opts),
)
try:
    flashcore.flash_attn_func(qs, ks, vs, dropout_p=0.1)
    refusal = "no error"
except (NotImplementedError, ValueError) as err:
    refusal = str(err)
print(f"flash_attn_func, (B, S, H, D), GQA, window (16, 0), softcap 30: passes {fa_report.passed}")
print("dropout_p=0.1:", refusal)
has_registry = hasattr(torch.nn.attention, "register_flash_attention_impl")
print(f"torch {torch.__version__}: register_flash_attention_impl available: {has_registry}")

# %%
# NBVAL_CHECK_OUTPUT
print(
    "the flash_attn door passes the rule and names the argument it refuses:",
    fa_report.passed and "dropout" in refusal,
)

# %% [markdown]
# ### The models on the H100: checks and generation speed (recorded)
#
# `python -m flashcore models --record` (`results/<gpu>/models.json`): the two checks above on
# the GPU, then greedy generation in bf16 (prompt 512, 128 new tokens, B1 and B8) at mid-size
# configs with each model's real attention shapes (`models.speed_configs`: gpt-oss with 16/4
# heads of dim 64, sinks, sliding window 128 on every other layer; DeepSeek-V3 with MLA, q.k
# over 192 dims and v over 128), random init, flashcore against the attention transformers
# picks by default (gpt-oss has no SDPA path, so eager; DeepSeek-V3: sdpa). Paired rounds as in
# notebook 03; `ratio` is the median of the rounds' own ratios. The CPU profile renders the
# record.

# %%
from flashcore.studies.records import status_line_for

models_record = results.read_result("models", RECORDED_GPU)
print("recorded on", results.describe(models_record))
print(status_line_for("models", RECORDED_GPU))
print(
    "fp32 checks on the GPU pass the rule: gpt-oss",
    models_record["gpt_oss"]["passed"],
    "| DeepSeek-V3",
    models_record["deepseek_v3"]["passed"],
)
gen = models_record["generation"]
for r in gen:  # the record keeps the default's numbers under e2e's "sdpa" keys
    r["tokens_per_s_default"] = r["tokens_per_s_sdpa"]
    r["rounds"] = ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
print(
    table(
        gen,
        ["model", "batch", "default_attention", "tokens_per_s_flashcore", "tokens_per_s_default",
         "ratio", "rounds"],
        {"tokens_per_s_flashcore": "{:.0f}", "tokens_per_s_default": "{:.0f}", "ratio": "{:.2f}"},
    )
)  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
for model_name in ("gpt-oss", "deepseek-v3"):
    print(
        f"{model_name}: generation at least as fast as its default attention at every batch:",
        all(r["ratio"] >= 1.0 for r in gen if r["model"] == model_name),
    )

# %% [markdown]
# gpt-oss generates faster through flashcore than through eager attention at both batches
# (the table: 1.05 at B1, where one of three rounds is below 1, and 1.36 at B8). DeepSeek-V3
# misses the target at both: 0.80 at B1 and 0.71 at B8 against SDPA, every round below 1. Not
# measured, so not claimed: which part of flashcore's path costs the time. On CUDA, D_v != D
# runs the zero-padded route (each call copies v into a zero-padded tensor of 192 columns and
# the kernel reads and multiplies the padded columns: `flashcore.attention`'s docstring), and
# the host cost of flashcore's decode call is above SDPA's (notebook 03's host profile); both
# are candidates, neither is measured here.

# %% [markdown]
# ## 5. What is measured, and what is not yet
#
# Measured on the H100 (2026-11-25), through the tests above and the logs of section 2: the
# D_v grid (156 dense + 20 varlen cases, padded route), paged KV (199 tests: page sizes 16-256,
# D 64/128/256, shared pages, the flash_attn door's `page_table`), sinks (26 tests), the op,
# the flash_attn door (91 tests) and the SDPA door (31 tests), all passing
# (`results/nvidia-h100-80gb-hbm3/logs/gpu_tests_*`). Not yet measured, each a target of
# issue 28: the sinks' cost over the same call without them (target ≤ 3%); D 192/128 forward
# and backward against FA4 at S ≥ 4K (target ≥ 0.95x; the padded route will cost the
# padded columns); paged decode against the copy ceiling and FA4's paged decode
# (`python -m flashcore bench --suite paged`). None of these has run. gpt-oss's and
# DeepSeek-V3's bf16 generation speed against their default attention was recorded on
# 2026-11-26 (the section above). This notebook's GPU profile ran on
# the H100 on 2026-11-26 (papermill, 71.6 s, every cell passing; `reproduce_timing.json`). The
# padded route exists because the D_v kernel mode fails compiled on sm_90 when q/k's head dim is
# padded; the GPU runs of 2026-11-26 traced that to V's shared buffer reusing K's slot with
# another shape and swizzle (`tools/dv_offline/REPORT.md`); the fix is not yet applied.
