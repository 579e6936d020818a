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
# flashcore within the rule of their own eager attention (the training step's baseline is the
# worse of PyTorch's two attention paths since one CPU failed the check against SDPA's alone:
# section 2). Every verdict prints `False`
# when the measurement says so. Speed is not claimed from this notebook's own runs: the H100
# records rendered below (sinks' cost, D 192 / D_v 128 beside FlashAttention-4, paged decode
# beside FA4 and the copy ceiling, the models' generation, the host cost per call) are
# checked against issue 28's targets, each verdict computed from its record. Every record
# rendered here is **stale** by its status line, not re-recorded, and what each shows is of
# the kernels of its commit. The sinks' cost (`feature_costs.json`), D 192/128 beside FA4
# (`value_head_dim_speed.json`), paged decode (`paged_decode.json`) and the models' checks and
# generation (`models.json`) are of commit `65d6c6c` (2026-11-27), the record of the
# notebooks' GPU-profile runs (`reproduce_timing.json`) of `253067a` (2026-11-28; this
# notebook's row in it is of `d807aaa`: the last cell). They matched the kernels until two
# changes of 2026-11-28 reached files in every record's kernel scope: the FP8 schedule fix in
# `kernels/forward_hopper.py` (`a651e4a`: `gl.exp2` inline where no exp is emulated, which
# gives the six FP8 Gluon kernels `c530054`'s machine code again) and the backward dispatch in
# `interface.py`, `dispatch.py` and `kernels/backward_hopper.py` (`de47f37`:
# `attention(..., deterministic=False)` runs the warp-specialized Gluon backward at D64/D128
# from S 4K; the default stays the deterministic Triton backward). By `tools/ptx_compare.py`
# the fix left the bf16 Gluon forward kernels it compiles (D 64/128/256, not MLA's 192/128)
# with the machine code they had, but no record here was measured on the new tree. Two
# records are older: the Nsight profile of MLA's pair (`ncu_compare.json`, commit `6b0fa16`,
# whose kernel sources are `d8fa890`'s) and the host cost per call (`launch.json`, commit
# `6c8aae4`). Between `d8fa890` and `65d6c6c` three kernel files changed: `kernels/backward.py`
# (MLA's split 192/128 backward has launch configs of its own, `6960808`, `65d6c6c`),
# `kernels/decode.py` (the paged small-pages variant, `17faf1b`) and
# `kernels/forward_hopper.py` (the exp2-emulation option, on by default for D64 calls without a
# mask, `32159e0`, `840fd14`); before them, for `launch.json`, `3f5270a` changed `decode.py`'s
# paged branch, `e5df583` MLA's atomic-mode backward config, and the Gluon forward's FP8 mode
# went in before `8739133`.
#
# Sections: (1) sinks: the gradient derived, checked in float64, then flashcore, gpt-oss and
# the sinks' cost; (2) D_v ≠ D: the kernel's own mode and the zero-padded route, DeepSeek-V3,
# how the mode failed on the H100 and the fix, its speed; (3) paged KV and paged decode's
# speed; (4) the doors, and the models' generation speed; (5) what is not yet measured.

# %% tags=["parameters"]
PROFILE = "auto"  # "auto" | "gpu" | "cpu"
RECORDED_GPU = "nvidia-h100-80gb-hbm3"  # whose records and GPU test logs are rendered

# %%
from flashcore.notebook import setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
import json
import math
import re

import torch

import flashcore
from flashcore import results
from flashcore.reference import attention_reference, kvcache_reference
from flashcore.studies.records import status_line_for
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
# ### The sinks' cost on the H100 (recorded)
#
# `feature_costs.json`: bf16, H·D = 2048, each call timed beside the same call without sinks
# in one process, alternating, forward and forward + backward (`ratio` = with / without).
# Sinks run on both forward kernels: the Gluon kernel, like the Triton one, starts every row
# as if it had seen the sink (running max = the sink, denominator 1), so a call with sinks
# takes the kernel the call without them takes (`kernel_with` = `kernel_without` in every
# `sinks` row: Gluon at D128 from S 1-2K, and since `d8fa890` at D64 from S 4K, causal from
# 16K, so D64 S4K causal runs Triton; since `840fd14` the Gluon kernel's D64 calls without a
# mask emulate one exp in 8, so both sides of the D64 S4K `sinks` row without a mask do). The
# `sinks_vs_triton` rows pin both sides to the Triton kernel: the sinks' cost there. (Until
# commit cc2f32f the Gluon kernel had no sinks and a call with them fell back to the Triton
# kernel: 1.14-1.24x the forward at D128, the record of b44173b in the history of this file.)
# Issue 28's target: that cost ≤ 3%.

# %%
costs_record = results.read_result("feature_costs", RECORDED_GPU)
print("recorded on", results.describe(costs_record))
print(status_line_for("feature_costs", RECORDED_GPU))
sink_cost_rows = [r for r in costs_record["rows"] if r["feature"] in ("sinks", "sinks_vs_triton")]
print(
    table(
        sink_cost_rows,
        ["feature", "D", "S", "B", "H", "causal", "kernel_with", "kernel_without",
         "forward_ratio", "forward_backward_ratio"],
        {"forward_ratio": "{:.3f}", "forward_backward_ratio": "{:.3f}"},
    )
)  # fmt: skip
same_kernel = [r for r in sink_cost_rows if r["kernel_with"] == r["kernel_without"]]
across = [r for r in sink_cost_rows if r["kernel_with"] != r["kernel_without"]]
own_cost = [r[p] for r in same_kernel for p in ("forward_ratio", "forward_backward_ratio")]
print(
    f"sinks' cost (same kernel both sides, {len(same_kernel)} of {len(sink_cost_rows)} rows): "
    f"ratios {min(own_cost):.3f} to {max(own_cost):.3f}"
)
ratio_at = {
    f"{r['feature']} D{r['D']} S{r['S']} {'causal' if r['causal'] else 'full'} "
    f"{p.split('_ratio')[0]}": r[p]
    for r in same_kernel
    for p in ("forward_ratio", "forward_backward_ratio")
}
lowest, highest = min(ratio_at, key=ratio_at.get), max(ratio_at, key=ratio_at.get)
print(f"lowest: {lowest} {ratio_at[lowest]:.3f}; highest: {highest} {ratio_at[highest]:.3f}")
print("rows where sinks changed the kernel:", len(across))
over = [
    f"D{r['D']} S{r['S']} {'causal' if r['causal'] else 'full'} {p.split('_ratio')[0]} {r[p]:.3f}"
    for r in same_kernel
    for p in ("forward_ratio", "forward_backward_ratio")
    if r[p] > 1.03
]
print("same-kernel ratios over 1.03:", "; ".join(over) or "none")

# %%
# NBVAL_CHECK_OUTPUT
print("issue 28: the sinks cost <= 3% over the same call without them:", max(own_cost) <= 1.03)

# %% [markdown]
# The target is computed over the same-kernel rows, forward and forward + backward, which are
# every row of this record: what a user sees is the sinks' own cost, on the kernel the call
# would take anyway. **Missed in this record, at one of its 22 ratios:** the Triton kernel's
# forward at D64 S4K causal, 1.037 (0.746 ms with sinks against 0.720 without, from the
# record); the same call's forward + backward is at 0.995. The record is of commit `65d6c6c`
# (2026-11-27, log `feature_costs_65d6c6c.log`) and stale (its status line: the FP8 schedule
# fix in `forward_hopper.py` and the backward dispatch in `interface.py` and `dispatch.py`
# came after it; not re-recorded); its ratios run from 0.992 to 1.037 (the lines above name
# the shapes), every other one under the 1.03 bound. That row's kernel did not change from
# `c530054` to `65d6c6c` (`kernels/forward.py` and the dispatch were the same; the kernel
# changes between them touched `forward_hopper.py`, `backward.py` and `decode.py`), and the
# record of `c530054` had 1.005 there (0.738 against 0.734 ms), those of
# `8739133`, `6c8aae4`, `4e9f906` and `044ea55` 1.003-1.008 (in the history of this file). In
# this record the call without sinks at that shape took 0.720, 0.725 and 0.721 ms in its three
# pairings (sinks, softcap, varlen; the record), so the side that moved is the call with
# sinks. Whether 1.037 is a cost the sinks now have at that shape or one run's noise (the
# pairing's run-to-run noise at these shapes has been a percent or two) one record does not
# establish: not measured again. At D128 S16K causal the call takes the Gluon kernel, where
# the sinks cost 1.013 forward and 1.013 forward + backward. The record of `c530054` (in the
# history of this file) had 0.986-1.023 and met the target; that of `8739133` 0.951-1.029;
# that of `6c8aae4` 0.976-1.027.

# %% [markdown]
# ## 2. A value head dim of its own (D_v ≠ D)
#
# DeepSeek-V3's MLA attends with q.k over $D = 192$ dims and v over $D_v = 128$. The Triton
# kernels carry a mode for it (`HEAD_DIM_V`: V's tile and the accumulator $D_v$ wide, so
# $PV$ costs $D_v$'s FLOPs, not the wider head dim's). Compiled and interpreted launches both
# run that mode. On Hopper, MLA's pair itself (192/128) runs the Gluon forward (since commit
# `98e26a3`, from S = 128 since `a075789`: section "at speed" below); every other pair, and
# the backward, run the mode (the backward with launch configs of its own for 192/128 since
# `d444f79`, q/k's 192 columns split into tiles of 128 and 64 since `0e0358b`, and configs
# re-swept on those split tiles since `6960808`). A second
# route, exact by construction, stays as a switch (`kernels/_launch.py`'s
# `PAD_VALUE_HEAD_DIM_ON`, empty by default; the tests and this notebook switch it on to
# compare): pad the narrower operand with zero columns to
# $W = \max(D, D_v)$ and run the one-head-dim kernel.
#
# * $D_v < D$: $v' = [v, 0]$. Then $O' = P v' = [P v, P\,0] = [O, 0]$: drop the last
#   $D - D_v$ columns. Backward: $dV' = P^\top dO'$ with $dO' = [dO, 0]$ gives $[dV, 0]$;
#   $dP = dO' v'^\top = dO\, v^\top$ and $\delta = \mathrm{rowsum}(dO' \circ O') =
#   \mathrm{rowsum}(dO \circ O)$ are unchanged, so $dQ$ and $dK$ are too.
# * $D_v > D$: $q' = [q, 0]$, $k' = [k, 0]$: $q' k'^\top = q k^\top$, so $P$ and $O$ are
#   unchanged (the scale stays $1/\sqrt{D}$, passed explicitly); $dQ' = dS\, k' = [dQ, 0]$.
#
# The padded route costs the copies and the padded columns' FLOPs (at 192/128 the $PV$
# product is 1.5x as wide). Below, both routes on this device against float64, then
# DeepSeek-V3.

# %%
from flashcore.kernels import _launch
from flashcore.kernels.backward import attention_backward
from flashcore.validate_backward_softcap_varlen import softcap_rule

dv_rows = []
routes = ["HEAD_DIM_V mode", "padded"]
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
)
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
# The training step's same-precision baseline is the worse of PyTorch's two attention paths
# in float32, SDPA and eager (`studies.e2e.compare_training_step`). Against SDPA's alone, this
# check failed on one host's CPU code path (an AMD EPYC with AVX-512, 2026-11-27): one of the 23
# gradients, layer 1's `kv_a_layernorm.weight` (16 elements), at 1.06 of the bound (error
# 2.4e-8, SDPA's 1.0e-8, eager's 1.3e-8), while the same host passed under the AVX2 and SSE
# code paths `make test` also runs, and an earlier host passed. On that path flashcore's
# errors were 1.4-2.4x SDPA's at the six largest ratios, eager's 0.9-1.3x: one path's largest
# error over a small tensor is one draw of the rounding of a whole model, and SDPA's was the
# smaller draw. Against the worse of the two the worst gradient is at 0.84 there. The same
# float32 check on the H100 passed against SDPA's alone (`models.json`, section 4). At the
# attention call itself flashcore's float32 arithmetic is not the less accurate: over 12 random
# causal draws at this check's head dims on that host (`tools/cpu_fp32_error_draws.py`, log
# `results/cpu-interpreter/logs/cpu_fp32_error_draws_cdbeed9.log`), its largest errors over
# SDPA's had medians 0.47 (out), 0.76 (dq), 0.81 (dk), 0.65 (dv), above 1 in 2 to 4 of the 12.
# (The 1.4-2.4x above are the six largest of 23 ratios, picked for being largest.)

# %% [markdown]
# ### How the mode failed on the H100, and the fix
#
# Under the interpreter the mode passed every test, but compiled for the H100 (2026-11-25) it
# gave a wrong output at D 40 / D_v 24 (softcap) and an illegal memory access at 40/24
# without softcap and at 24/8, while D 64 / D_v 24 and $D_v = D$ passed (the first log below:
# each variant changes one thing of the failing case). Until the cause was found, compiled
# launches took the zero-padded route. An offline sm_90 analysis of the compiled kernels
# (`tools/dv_offline/REPORT.md`) found one difference that separates the failing compiles:
# the V tile, loaded after $q k^\top$ and not pipelined (row strides that are not multiples of
# 16, as at D 40 and D_v 24), was placed in K's shared-memory slot with another shape and
# swizzle. The GPU runs of 2026-11-26 (commit `382853b`, the table below) confirmed it: the
# failure is not reproducible run to run (a race, not a miscompute), the unpadded control
# 64/24 faults exactly when its V tile sits over K's slot (one stage) and passes at three, and
# the kernel with V loaded before $q k^\top$ (`V hoisted`: a buffer of its own) passes with and
# without softcap. That is the fix now in `kernels/forward.py`: in the `HEAD_DIM_V` mode V is
# loaded before $q k^\top$; kernels with $D_v = D$ are unchanged.

# %%
logs = results.RESULTS_DIR / RECORDED_GPU / "logs"
path = logs / "dv_variants_d231668.log"
print(f"--- {path.name}")
print(path.read_text().strip() if path.exists() else "(not in this checkout)")
root_cause_path = logs / "dv_root_cause_382853b.json"
if root_cause_path.exists():
    root_cause = json.loads(root_cause_path.read_text())
    print(f"--- {root_cause_path.name}:", results.describe(root_cause))
    cause_rows = []
    for c in root_cause["cases"]:
        if "forward" in c:
            result = f"forward ratio {c['forward']['ratio']:.3g}"
            if "backward" in c:
                result += ", dq/dk/dv " + "/".join(
                    f"{b['ratio']:.2f}" for b in c["backward"].values()
                )
            if c.get("forward_repeat_bitwise_identical") is False:
                result += "; two runs differ bitwise"
        else:
            result = (c.get("error") or "").strip().splitlines()[-1].split(": ", 1)[-1]
        cause_rows.append({"case": c["case"][0], "D / D_v": f"{c['case'][6]} / {c['case'][7]}",
                           "passed": c["passed"], "result": result})  # fmt: skip
    print(table(cause_rows, ["case", "D / D_v", "passed", "result"]))
else:
    print(f"--- {root_cause_path.name}: (not in this checkout)")

# %% [markdown]
# The evidence after the fix: `tests/test_value_head_dim.py -m gpu` through the mode itself on
# the H100. Last at commit `65d6c6c` (the split pair's re-swept configs included): 215 tests in
# 16 pytest processes, all passed, the 30 atomic-mode MLA tests among them
# (`gpu_tests_value_head_dim_65d6c6c.txt`, not rendered below). The run before it, at
# `97f60fb`, failed 26 cases of the padded D256 / D_v 128 pair with OutOfResources
# (`gpu_tests_97f60fb.txt`; the D 192 / D_v 128 speed section says why, and what `65d6c6c`
# changed). At commit `6c8aae4` (the backward's own 192/128 configs included): 179 tests in
# 7 pytest processes, all passed; the same log holds `tests/test_launch.py -m gpu` (12 passed).
# Before that at commit `b44173b`, 178 tests (156 dense cases: D/D_v 192/128, 64/32, 128/64,
# 40/24, 32/64, 256/128, bf16 and fp16, S up to 2K, ragged, windows, softcap; 20 varlen
# cases; 2 tests of the dispatch and the launch cache), in 8 pytest processes: seven
# processes' logs came back whole; the eighth's did not, and its summary line is the one the
# same call printed (marked in the log). Test logs, not records (no kernel fingerprint). Below,
# the summary lines each committed log holds, one per process, and their sums. Before the fix
# the same grid passed through the padded route (commit `34c60c8`, the last log). At `f9591a6`
# the grid's varlen tests ran again (`dvvarlen` lines, 5 processes) beside
# `tests/test_paged_kv.py` (`paged` lines; section 3) in `gpu_tests_f9591a6.txt`; its summary
# lines have no prefix, so each is named by the `== <process>.log` line above it. Those varlen
# tests run the backward's deterministic mode (the tests' default), so they do not run the
# atomic-mode config `e5df583` gave MLA's pair (end of this section).

# %%
gpu_test_logs = (logs / "gpu_tests_f9591a6.txt", logs / "gpu_tests_6c8aae4.txt",
                 logs / "gpu_tests_dv_b44173b.log")  # fmt: skip


def shard_summaries(path):
    """(process kind, summary line) for each pytest summary line of a test log: the kind from
    the line's own `dv.N.log:` prefix, else from the `== kind.N.log` line above it, else dv."""
    header, found = None, []
    for ln in path.read_text().splitlines():
        if ln.startswith("== "):
            header = ln[3:].split(".")[0]
        elif " passed" in ln or " failed" in ln:
            if ln.startswith(("dv.", "launch.")):
                found.append((ln.split(".")[0], ln))
            else:
                found.append((header or "dv", f"{header}: {ln}" if header else ln))
    return found


for dv_log in gpu_test_logs:
    if not dv_log.exists():
        print(f"--- {dv_log.name}: (not in this checkout)")
        continue
    summaries = shard_summaries(dv_log)
    print(f"--- {dv_log.name}")
    print("\n".join(ln for _, ln in summaries))
    # gpu_tests_6c8aae4.txt names each pytest process's log (dv.N, launch.N); the older log's
    # lines are all the D_v grid's
    by_shard = {}
    for shard, ln in summaries:
        by_shard.setdefault(shard, []).append(ln)
    for shard, lines in by_shard.items():
        n = {
            w: sum(int(m) for ln in lines for m in re.findall(rf"(\d+) {w}", ln))
            for w in ("passed", "failed")
        }
        print(f"{shard}: {len(lines)} summary lines, {n['passed']} passed, {n['failed']} failed")
padded_log = logs / "gpu_tests_dv_paged_launch_34c60c8.txt"
print(f"--- {padded_log.name}")
print(padded_log.read_text().strip() if padded_log.exists() else "(not in this checkout)")

# %% [markdown]
# ### D 192 / D_v 128 at speed, beside FlashAttention-4 (recorded)
#
# `value_head_dim_speed.json`: bf16, H 16, B·S = 16K tokens, S 4K/8K/16K, causal and not;
# forward, backward and forward + backward in TFLOP/s (FLOPs of one head dim $(D + D_v)/2$;
# the backward's are 2.5x the forward's): `flashcore` (what `flashcore.attention` runs: the
# Gluon forward on Hopper, the Triton mode's backward), `triton` (the Triton kernel's
# `HEAD_DIM_V` mode, forward only), FA4, SDPA's cuDNN and flash backends, and the Triton
# kernel with the padded route switched on (`padded`). Issue 28's target: forward and
# backward ≥ 0.95x FA4 at S ≥ 4K.
#
# The Gluon forward's tiles are powers of two on each side (a TMA block's are), so q's and
# k's 192 columns come in as two blocks, 128 and 64 wide, into two shared buffers on the same
# barrier, and $S = QK^\top$ is two `wgmma` groups into one accumulator; V's tile and the
# output are 128 wide. Shared memory: Q 48 KB, two K stages 96 KB, two V stages 64 KB, 208 KB
# of 227; 168 registers a thread, no spills (offline sm_90 compile). Its GPU grid
# (`test_forward_hopper.py::test_mla_head_dims_error_rule`, 120 cases over every geometry of
# that file and its three grids; `logs/gpu_tests_mla_98e26a3.log`) passed, and so did the
# D_v grid above with the Gluon kernel forced (`dvg` lines of the same log).

# %%
dv_speed = results.read_result("value_head_dim_speed", RECORDED_GPU)
print("recorded on", results.describe(dv_speed))
print(status_line_for("value_head_dim_speed", RECORDED_GPU))
dv_key = lambda r: (r["S"], r["causal"])  # noqa: E731
dv_tf = {(ph, r["impl"], *dv_key(r)): r.get("tflops") for ph in ("forward", "backward")
         for r in dv_speed[ph]}  # fmt: skip
dv_tf |= {("fwd_bwd", r["impl"], *dv_key(r)): r.get("fwd_bwd_tflops") for r in dv_speed["backward"]}
dv_tf |= {(r["phase"], "padded", *dv_key(r)): r["tflops"] for r in dv_speed["padded_route"]}
dv_tf |= {("fwd_bwd", "padded", *dv_key(r)): r["fwd_bwd_tflops"]
          for r in dv_speed["padded_route"] if r["phase"] == "backward"}  # fmt: skip
refusals = {r["error"] for ph in ("forward", "backward") for r in dv_speed[ph]
            if r["impl"] == "sdpa_flash" and "error" in r}  # fmt: skip
shapes = sorted({dv_key(r) for r in dv_speed["forward"]})
speed_rows = []
for phase in ("forward", "backward", "fwd_bwd"):
    for s, causal in shapes:
        tf = {impl: dv_tf.get((phase, impl, s, causal)) for impl in
              ("flashcore", "flashcore_triton", "padded", "fa4", "sdpa_cudnn")}  # fmt: skip
        tf["triton"] = tf.pop("flashcore_triton")
        speed_rows.append({"phase": phase, "S": s, "causal": causal} | tf
                       | {"vs FA4": tf["flashcore"] / tf["fa4"]})  # fmt: skip
print(table(speed_rows, ["phase", "S", "causal", "flashcore", "triton", "padded", "fa4", "sdpa_cudnn", "vs FA4"],
            {c: lambda x: "-" if x is None else f"{x:.0f}"  # the Triton mode: forward only
             for c in ("flashcore", "triton", "padded", "fa4", "sdpa_cudnn")} | {"vs FA4": "{:.3f}"}))  # fmt: skip
print("sdpa_flash:", "; ".join(sorted(refusals)))
geo = {ph: dv_speed["summary"][ph]["geomean"] for ph in ("forward", "backward")}
print(
    f"flashcore / FA4, geomean over the shapes: forward {geo['forward']:.3f}, backward {geo['backward']:.3f}"
)
gluon_over_triton = list(dv_speed["summary"]["forward"].get("flashcore_over_triton", {}).values())
if gluon_over_triton:
    print(f"forward, flashcore (Gluon) / the Triton mode: {min(gluon_over_triton):.2f}x to "
          f"{max(gluon_over_triton):.2f}x")  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
target_rows = [r for r in speed_rows if r["phase"] in ("forward", "backward") and r["S"] >= 4096]
print(
    "issue 28: D 192/128 forward and backward >= 0.95x FA4 at S >= 4K:",
    all(r["vs FA4"] >= 0.95 for r in target_rows),
)
own_vs_padded = {
    ph: [r["flashcore"] / r["padded"] for r in speed_rows if r["phase"] == ph]
    for ph in ("forward", "backward")
}
print(
    "the mode is faster than the padded route in every backward row:",
    all(x > 1 for x in own_vs_padded["backward"]),
)

# %% [markdown]
# Missed, both ways, by different margins, in this record of `65d6c6c` (log
# `value_head_dim_speed_65d6c6c.log`), which is stale (its status line: the FP8 schedule fix
# in `forward_hopper.py` and the backward dispatch in `interface.py` and `dispatch.py` came
# after it; not re-recorded, so its numbers are of `65d6c6c`'s kernels). **Forward:** the
# Gluon kernel runs MLA's pair 2.60-3.61x faster than the Triton mode and ahead of cuDNN at
# every shape, but 0.85-0.91x FA4 (geomean 0.881; the record of `d8fa890` had 0.83-0.91x,
# geomean 0.865). Its code for this pair did not change from `0099be1` to `65d6c6c` but for
# the plumbing of the exp2-emulation option, which is off at this head dim
# (`EXP2_EMULATED_FULL` names D64 only); after `65d6c6c` the FP8 schedule fix wrote
# `gl.exp2` inline on the path this pair takes (no exp emulated; `tools/ptx_compare.py`,
# which found the bf16 kernels at D 64/128/256 unchanged by it, does not compile this pair).
# `0099be1`'s record had 0.84-0.96x (geomean 0.89), and the records of the same study at
# `4e9f906`, `833b4cf` and `6c8aae4` had 0.84-0.91x, 0.86-0.96x and 0.86-0.96x (the
# `833b4cf` one was replaced: its `padded` forward rows had timed the Gluon kernel), so the
# per-shape ratio moves by a few percent run to run. The tile is not the difference:
# FlashAttention-3's tile table (`hopper/tile_size.h`) gives 192/128 a 128 x 128 tile with P
# in registers for $PV$ and softmax overlapped with the next $QK^\top$ within a warpgroup, the
# shape this kernel uses. It is the gap the Gluon forward has to FA4 at D128 as well (issue
# 26); Nsight Compute's profile of the pair (`ncu_compare.json`, `6b0fa16`, stale: of the
# kernels before `6960808` and `32159e0`) is rendered at the end of this section. **Backward:**
# the Triton mode, 0.73-0.79x FA4 (geomean 0.764) in this record, where that of `d8fa890` had
# 0.62-0.73x (geomean 0.673), `0099be1`'s 0.58-0.60x (geomean 0.59), `6c8aae4`'s 0.56-0.61x
# (geomean 0.59) and `4e9f906`'s 0.32-0.42x (geomean 0.37). What changed since `d8fa890` is
# the launch configs: since `6960808` (keyed on the split pair since `65d6c6c`) the split
# 192/128 kernels have configs of their own, `_SPLIT_QK_TABLE[(192, 128)]` in
# `kernels/backward.py`, re-swept on the split tiles (`tools/dv_backward_probe.py
# --around-shipped`, `logs/mla_backward_probe_{deterministic,atomic}_0f83d17.*`: S 4K/8K,
# causal and not, the whole backward's TFLOP/s with one kernel's config varied):
# deterministic dK/dV (32, 64, 4 warps, 3 stages), atomic dK/dV (64, 128, 8, 2) and dQ (128,
# 64, 8, 3). An A/B of the whole backward against the configs before
# (`logs/mla_backward_configs_ab_bdbb35b.*`, S 4K-16K, 3 alternating rounds) measured
# 0.825-0.841 of their time without a mask and 0.64-0.74 in the atomic mode, but 1.002-1.029 causal,
# where the sweep ranks the old dK/dV (32, 128, 8, 2) first (292 against 285 TFLOP/s at S
# 4K, 324 against 318 at 8K): causal calls keep it (`_SPLIT_QK_CAUSAL_DKDV`) and take the new
# dQ config (312 and 343 there). In this record the backward runs at 342-376 TFLOP/s without
# a mask and 310-363 causal, against 301-306 and 296-349 in the record of `d8fa890` (two
# sessions, not an A/B). Before that, `0e0358b` had split q/k's 192 columns into a 128-wide
# and a 64-wide tile (`QK_TAIL`) instead of padding them to 256, 1.06-1.23x faster in the
# deterministic mode and 1.05-1.09x in the atomic one in an A/B on the H100
# (`logs/mla_backward_split_ab_b391df4.json`, S 4K-16K, causal and not, 3 rounds), and ran
# the configs `d444f79` had picked by timing on the padded tiles (`_HOPPER_TABLE_OWN_V`,
# dK/dV (32, 128, 8, 2) and dQ (128, 64, 8, 2): 1.39x (dK/dV) and 1.11x (dQ) the D256
# bucket's configs, (64, 64, 8, 1) and (64, 32, 4, 1), in the whole backward's geomean over
# S 4K/8K, causal and not, `logs/dv_backward_probe_3669f4a.log`). Those configs stay for a
# D256 with v at 128, which is not split: the new dQ config needs 240 KB of shared memory on
# its 256-wide tiles, past the H100's 227. The first GPU test run of the change, at
# `97f60fb`, failed 26 such cases with OutOfResources (`logs/gpu_tests_97f60fb.txt`);
# `65d6c6c` keys the new configs on the split pair, and `tests/test_value_head_dim.py`'s GPU
# tests passed there (section 2's test logs). The atomic mode (dQ summed with atomics inside
# the dK/dV kernel: `attention_backward` or `attention_varlen_backward` called with
# `deterministic=False`; the autograd of `flashcore.attention` and of `attention_varlen`
# passes `True` to them; `flashcore.attention(..., deterministic=False)` runs the
# warp-specialized Gluon backward at D64/D128 from S 4K, since `de47f37`, and the Triton
# backward's deterministic mode everywhere else, MLA's pair included, since `ab184b4`) ran
# the D256 bucket's dK/dV (64, 64, 8, 1) for the pair until `e5df583`,
# (64, 64, 8, 2) from then (the middle entry of `_HOPPER_TABLE_OWN_V`) and (64, 128, 8, 2)
# since `6960808` (the end of this section). No record here times the atomic mode at
# 192/128; the A/B above does. Against cuDNN the backward is ahead without a mask
# (1.24-1.32x) and behind with the causal one (0.785-0.795x; the table). Why the rest of the
# gap to FA4, from the code (not measured apart): the mode reads K/V through pointers, not
# TMA (the split tiles take the pointer path), and the deterministic mode's dQ kernel
# computes $S$ and $dP$ again. The Gluon backwards have no 192/128 variant: neither
# `kernels/backward_hopper.py` (D64/128, not dispatched) nor its warp-specialized successor,
# `kernels/backward_hopper_ws.py`, which serves D64/D128 only (`attention(...,
# deterministic=False)` from S 4K; `FLASHCORE_BACKWARD_HOPPER=auto`, the default, `always` or
# `never`). Against its own padded route (the `padded` column, which
# runs the D256 bucket) the Triton mode is faster in both directions (the ratios below).
#
# Since `a075789` the dispatch sends 192/128 to the Gluon kernel from S = 128
# (`FORWARD_GLUON_FROM` in `flashcore/dispatch.py`; it was 1K, the shortest length of the
# first probe). The probes (logs, not records: the Gluon kernel called directly, beside the
# Triton mode and cuDNN, 3 rotated rounds) have it 1.24-3.87x the Triton mode at every length
# from S = 256 and 1.46x and 1.07x at S = 128 (full and causal), and behind cuDNN up to 1K
# (the table below). S = 128 is the shortest length measured: shorter calls stay on the Triton
# kernel.

# %%
mode_over_padded = {
    ph: [r["triton" if ph == "forward" else "flashcore"] / r["padded"]
         for r in speed_rows if r["phase"] == ph]
    for ph in ("forward", "backward")
}  # fmt: skip
print("the Triton mode / its padded route: " + ", ".join(
    f"{ph} {min(v):.2f}-{max(v):.2f}x" for ph, v in mode_over_padded.items()))  # fmt: skip
probe_rows = []
for name in ("mla_forward_probe_short_4e9f906.json", "mla_forward_probe_98e26a3.json"):
    path = logs / name
    if not path.exists():
        print(f"--- {name}: (not in this checkout)")
        continue
    probe = json.loads(path.read_text())
    by = {(r["S"], r["causal"], r["impl"]): r.get("tflops") for r in probe["rows"]}
    for s, causal in sorted({(r["S"], r["causal"]) for r in probe["rows"]}):
        gluon = by.get((s, causal, "pers_bn128_s2"))
        probe_rows.append({"log": name.split("_")[-1][:-5], "S": s, "causal": causal,
                           "gluon": gluon, "triton": by.get((s, causal, "triton")),
                           "cudnn": by.get((s, causal, "cudnn"))})  # fmt: skip
for r in probe_rows:
    r["gluon / triton"] = r["gluon"] / r["triton"]
print(table(probe_rows, ["log", "S", "causal", "gluon", "triton", "cudnn", "gluon / triton"],
            {c: "{:.0f}" for c in ("gluon", "triton", "cudnn")} | {"gluon / triton": "{:.2f}"}))  # fmt: skip

# %% [markdown]
# ### MLA's pair under Nsight Compute, and the atomic backward's config
#
# `ncu_compare.json` (notebook 03 renders the rest of it): one call of each implementation
# profiled with `ncu --clock-control none`, bf16, B 2, S 8K, H 16, not causal, q/k 192 and v
# 128; below, every kernel of the call that takes at least 5% of its kernel time (`ms`),
# tensor-pipe busy cycles as a share of peak over the active cycles, registers a thread, shared
# memory a block, barrier stalls per issued instruction, the whole call's kernel time and FA4's
# over it. Then the atomic-mode dK/dV sweeps (`tools/dv_backward_probe.py --atomic`, logs with
# provenance, not records, of commit `3f5270a`): MLA's pair (H 16) on the padded 256-wide q/k
# tiles, and the D256 bucket, S 4K/8K, causal and not, the geomean TFLOP/s of the whole atomic
# backward with the dK/dV config varied (dQ stays (64, 32, 4, 1); configs that do not fit shared
# memory are left out), beside the config `_pick_config` gives those padded head dims (256 with
# v at 128, and 256). `ncu_compare.json` is of commit `6b0fa16` (2026-11-27), whose kernel
# sources are `d8fa890`'s: stale (its status line below names the kernel files changed since,
# among them `backward.py` and `forward_hopper.py`). Its backward rows time the split tiles of
# `0e0358b` (a 128-wide and a 64-wide tile for q/k's 192 columns) with the configs before
# `6960808` (dK/dV (32, 128, 8, 2), dQ (128, 64, 8, 2)); its call has no mask, where MLA's pair
# now runs dK/dV (32, 64, 4, 3) and dQ (128, 64, 8, 3), so its backward rows are of configs the
# pair no longer runs without a mask. Its forward rows ran a kernel that changed only in the
# exp2-emulation option's plumbing, off at this head dim, and, after `65d6c6c`, in the FP8
# schedule fix's inline `gl.exp2` on the path this pair takes. The record of `f9591a6` before it
# timed the tile padded to 256.

# %%
ncu = results.read_result("ncu_compare", RECORDED_GPU)
print("recorded on", results.describe(ncu))
print(status_line_for("ncu_compare", RECORDED_GPU))


def kernel_name(name):
    if name.startswith("cudnn_generated"):
        return "cudnn " + ("fprop" if "fprop" in name else "bprop")
    fa4 = re.search(r"flash_(fwd_sm90|bwd_sm90)", name)
    return f"fa4 {fa4.group(1)}" if fa4 else name.split("(")[0][:30]


mla_ncu = [r for r in ncu["rows"] if r["D"] == 192]
call_ns = {(r["phase"], r["impl"]): r["kernel_ns_total"] for r in mla_ncu}
ncu_rows = [
    {"phase": r["phase"], "impl": r["impl"], "kernel": kernel_name(kern["kernel"]),
     "ms": kern["duration_ns"] / 1e6, "tensor pipe %": kern["tensor_pipe_pct_of_peak_active"],
     "regs": kern["registers_per_thread"], "smem KB": kern["shared_mem_per_block"] / 1024,
     "barrier": kern["stalls_per_issue"]["barrier"], "call ms": r["kernel_ns_total"] / 1e6,
     "FA4 / call": call_ns[(r["phase"], "fa4")] / r["kernel_ns_total"]}
    for r in mla_ncu
    for kern in r["kernels"]
    if kern["duration_ns"] >= 0.05 * r["kernel_ns_total"]
]  # fmt: skip
print(table(ncu_rows, list(ncu_rows[0]),
            {"ms": "{:.2f}", "tensor pipe %": "{:.1f}", "regs": "{:.0f}", "smem KB": "{:.0f}",
             "barrier": "{:.2f}", "call ms": "{:.2f}", "FA4 / call": "{:.2f}"}))  # fmt: skip

from flashcore.kernels.backward import _pick_config

probe_top = []
# (pair as swept, log, the _pick_config arguments of the calls that sweep's config serves):
# 192/128 on the padded 256-wide tiles (3f5270a) is what a D256 / D_v 128 pair still runs;
# MLA's 192/128 runs the split tiles, re-swept at 0f83d17.
atomic_sweeps = (
    ("192/128 padded", "atomic_backward_probe_3f5270a.mla.json", dict(head_dim_v_padded=128)),
    ("192/128 split", "mla_backward_probe_atomic_0f83d17.json",
     dict(head_dim_v_padded=128, split_qk=192)),
    ("256/256", "atomic_backward_probe_3f5270a.256.json", {}),
)  # fmt: skip
for pair, name, pick in atomic_sweeps:
    path = logs / name
    if not path.exists():
        print(f"--- {path.name}: (not in this checkout)")
        continue
    probe = json.loads(path.read_text())
    print(f"--- {path.name}:", results.describe(probe))
    shipped = _pick_config(256, torch.bfloat16, False, **pick)["dkdv_atomic"]
    for rank, r in enumerate(probe["ranked"]["dkdv"][:3], 1):
        probe_top.append({"pair": pair, "rank": rank, "dK/dV (M, N, warps, stages)": tuple(r["config"]),
                          "geomean TFLOP/s": r["geomean_tflops"],
                          "ships": tuple(r["config"]) == tuple(shipped)})  # fmt: skip
print(table(probe_top, list(probe_top[0]), {"geomean TFLOP/s": "{:.1f}"}))
atomic_log = logs / "gpu_tests_fp8_hopper_mla_atomic_ea07c61.txt"
if atomic_log.exists():
    print(f"--- {atomic_log.name}: pytest summary lines, one per process")
    print("\n".join(ln for ln in atomic_log.read_text().splitlines()
                    if re.search(r"\d+ (passed|failed)", ln)))  # fmt: skip
else:
    print(f"--- {atomic_log.name}: (not in this checkout)")

# %%
# NBVAL_CHECK_OUTPUT
print(
    "the atomic dK/dV config that ships for each pair is its sweep's fastest:",
    all(r["ships"] for r in probe_top if r["rank"] == 1) and len(probe_top) > 0,
)

# %% [markdown]
# **Forward:** flashcore's kernel keeps the tensor pipe busy 82.9% (of peak, over its active
# cycles), FA4's 91.7%, cuDNN's 74.6%, at the same 168 registers a thread and about the same
# shared memory as FA4's (208 and 209 KB); flashcore's call takes 1.92 ms against FA4's 1.79
# (0.93). It stalls at barriers 2.94 times per issued instruction, FA4's kernel 0.43 times
# (cuDNN's 2.34). The profile says where the kernels differ, not why. **Backward:** the
# Triton mode's call takes 11.36 ms, its dK/dV kernel 7.20 ms with the tensor pipe 40.3% busy
# at 255 registers a thread and its dQ kernel 4.11 ms at 56.6% and 240 registers, against
# FA4's one kernel at 6.32 ms and 59.4% (FA4 / call 0.58); cuDNN's backward, 12.27 ms, is
# longer than flashcore's here (the `f9591a6` record, on the padded tile, had the two level),
# as in the speed table without a mask. The profile is of the deterministic mode, at one
# shape, one call each, and of the kernels of `6b0fa16` (stale: the backward's configs above).
#
# **The atomic config:** the sweep over MLA's pair on the padded tiles ranks (64, 64, 8, 2)
# first (165.8), ahead of (64, 128, 8, 1) (148.8) and of the D256 bucket's (64, 64, 8, 1)
# (132.3), which the pair ran before `e5df583`; D256's own sweep keeps (64, 64, 8, 1) (168.4,
# next 119.4). Those padded tiles are no longer MLA's: since `6960808` the split 192/128 pair
# runs configs of its own (`_SPLIT_QK_TABLE`), and its atomic sweep on the split tiles
# (`logs/mla_backward_probe_atomic_0f83d17.log`, S 4K/8K, causal and not, dQ held at (128,
# 64, 8, 2)) ranks (64, 128, 8, 2) first (260.0), ahead of (64, 128, 8, 1) (188.6) and (64,
# 64, 8, 3) (187.2), with the padded tiles' (64, 64, 8, 2) at 177.3: (64, 128, 8, 2) ships for
# the pair. So the table's `192/128 padded` rows are now of a padded D256 with v at 128 (no
# split), which keeps `_HOPPER_TABLE_OWN_V`'s (64, 64, 8, 2), and its `192/128 split` rows are
# MLA's; the check under the table asks `_pick_config` for each sweep's own calls. The sweeps time the configs; they do not check their gradients.
# `2414806` added `gpu`-marked tests of the atomic mode at 192/128 (the 26 dense MLA cases of
# the D_v grid and its 4 varlen ones, `test_gpu_mla_atomic_*`), and they ran on the H100 at
# `ea07c61`, whose `backward.py` is `8739133`'s (the config (64, 64, 8, 2)), in one session
# with the Gluon FP8 mode's tests (`gpu_tests_fp8_hopper_mla_atomic_ea07c61.txt`, the summary
# lines above; by `tools/gpu_fp8_hopper.sh`, the first four processes ran
# `tests/test_fp8.py -k hopper`, the FP8 mode's 50 tests, and the last four
# `tests/test_value_head_dim.py -k mla_atomic`: 8 + 7 + 7 + 8 = 30 passed, 0 failed), and
# again at `65d6c6c` with the config that ships now, among the 215 GPU tests of
# `tests/test_value_head_dim.py` (all passed; section 2's test logs). So the config is
# measured for speed and its gradients pass the rule on the GPU; the logs are test logs, not
# records.

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
# ### Paged decode at speed, beside dense decode and FA4 (recorded)
#
# `paged_decode.json`: one query per sequence, bf16, D 128, GQA 32/8, caches of 8K to 128K
# tokens, pages of 16, 64 and 256 tokens in a shuffled pool; CUDA-graph replay times (GPU time
# without the host). `of_copy` is the K + V bytes read per second over the device-copy ceiling
# measured in the same process; `vs dense` the dense call's time over this one's; `FA4 / ours`
# FA4's paged call (`flash_attn_varlen_func` with `page_table`, same pages in its layout) over
# flashcore's paged call. Issue 28's targets: paged decode ≥ 0.95 of the copy ceiling from
# 32K, and at least as fast as FA4's paged decode. The record is of commit `65d6c6c`
# (2026-11-27, log `paged_decode_65d6c6c.log`) and stale (its status line: the FP8 schedule
# fix in `forward_hopper.py` and the backward dispatch in `interface.py` and `dispatch.py`
# came after it; not re-recorded); it times the paged kernel of `3f5270a` (the block-table
# lookup carried one tile ahead; below) with the small-pages variant merged at `17faf1b`
# (pages that divide the 64-key tile, here 16, read the tile's page ids with one small load;
# the end of this section), as `kernels/decode.py` holds them (unchanged since).

# %%
paged_record = results.read_result("paged_decode", RECORDED_GPU)
print("recorded on", results.describe(paged_record))
print(status_line_for("paged_decode", RECORDED_GPU))
ceiling = paged_record["copy_ceiling"]
print(f"copy ceiling: {ceiling['what']}, {ceiling['tbps']:.2f} TB/s")
by_impl = {(r["B"], r["Sk"], r["impl"]): r for r in paged_record["rows"]}
us = lambda r: 1e3 * r["graph_timing"]["median_ms"] if "graph_timing" in r else float("nan")  # noqa: E731
paged_rows = []
for (b, sk, impl), r in by_impl.items():
    if not impl.startswith("paged_"):
        continue
    dense, peer = by_impl[(b, sk, "dense")], by_impl.get((b, sk, f"fa4_{impl}"), {})
    paged_rows.append({
        "B": b, "Sk": sk, "page": r["page_size"], "dense us": us(dense), "dense of_copy": dense["of_copy"],
        "paged us": us(r), "of_copy": r["of_copy"], "vs dense": r["vs_dense"],
        "FA4 us": us(peer) if peer else float("nan"), "FA4 of_copy": peer.get("of_copy", float("nan")),
        "FA4 / ours": us(peer) / us(r) if peer else float("nan"),
    })  # fmt: skip
fmt = {c: "{:.1f}" for c in ("dense us", "paged us", "FA4 us")}
fmt |= {c: "{:.2f}" for c in ("dense of_copy", "of_copy", "vs dense", "FA4 of_copy", "FA4 / ours")}
print(table(paged_rows, list(paged_rows[0]), fmt))
peer_errors = {
    r["error"] for r in paged_record["rows"] if r["impl"].startswith("fa4") and "error" in r
}
print("FA4 rows with an error instead of a time:", sorted(peer_errors) or "none")
shape = lambda r: f"B{r['B']} {r['Sk'] // 1024}K page {r['page']} {r['of_copy']:.3f}"  # noqa: E731
print("from 32K, >= 0.95 of copy:", "; ".join(shape(r) for r in paged_rows
      if r["Sk"] >= 32768 and r["of_copy"] >= 0.95))  # fmt: skip
print("from 32K, below 0.95:", "; ".join(shape(r) for r in paged_rows
      if r["Sk"] >= 32768 and r["of_copy"] < 0.95))  # fmt: skip
print("from 32K, the dense call below 0.95 of copy:", "; ".join(
    f"B{b} {sk // 1024}K {by_impl[(b, sk, 'dense')]['of_copy']:.3f}"
    for b, sk in sorted({(r["B"], r["Sk"]) for r in paged_rows if r["Sk"] >= 32768})
    if by_impl[(b, sk, "dense")]["of_copy"] < 0.95) or "none")  # fmt: skip
long_ = [r for r in paged_rows if r["Sk"] >= 32768]
short_ = {b: [r for r in paged_rows if r["Sk"] < 32768 and r["B"] == b] for b in (1, 4)}
spans = [
    ("of copy, from 32K", [r["of_copy"] for r in long_], "{:.3f}"),
    ("of copy, from 32K, pages of 16", [r["of_copy"] for r in long_ if r["page"] == 16], "{:.3f}"),
    ("vs dense, from 32K", [r["vs dense"] for r in long_], "{:.3f}"),
    ("vs dense, 8K B1", [r["vs dense"] for r in short_[1]], "{:.3f}"),
    ("vs dense, 8K B4", [r["vs dense"] for r in short_[4]], "{:.3f}"),
    ("FA4 / ours, B1", [r["FA4 / ours"] for r in paged_rows if r["B"] == 1], "{:.2f}"),
    ("FA4 / ours, B4", [r["FA4 / ours"] for r in paged_rows if r["B"] == 4], "{:.2f}"),
    ("FA4 of copy", [r["FA4 of_copy"] for r in paged_rows], "{:.2f}"),
]
for name, x, f in spans:
    print(f"{name}: {f.format(min(x))} to {f.format(max(x))}")

# %%
# NBVAL_CHECK_OUTPUT
from_32k = [r for r in paged_rows if r["Sk"] >= 32768]
print(
    "issue 28: paged decode >= 0.95 of the copy ceiling from 32K:",
    all(r["of_copy"] >= 0.95 for r in from_32k),
)
print("issue 28: paged decode at least as fast as FA4's paged decode at every shape:",
      all(r["FA4 / ours"] >= 1.0 for r in paged_rows))  # fmt: skip

# %% [markdown]
# **The copy ceiling: missed, at 6 of the 12 shapes from 32K.** From 32K tokens flashcore's
# paged call reads 0.811-1.007 of the copy ceiling (the record of `c530054`, before the
# small-pages variant, had 0.791-1.008 and 7 of the 12 shapes missing; those of `0099be1` and
# `f9591a6`, same kernel as `c530054`, 0.790-1.008 and 0.792-1.008; that of `6c8aae4`, before
# `3f5270a`, 0.64-0.78). The lines above name the six shapes that meet 0.95 (pages of 64 or
# 256 at B4, pages of 256 at B1 128K, and pages of 16 at B4 128K, 0.966) and the six that
# miss: B1 32K at every page size (0.811-0.854), where the dense call itself reads 0.887;
# pages of 16 at B4 32K (0.931) and B1 128K (0.925); and B1 128K with pages of 64 (0.945).
# Pages of 16, the rows the variant changes, read 0.811-0.966 from 32K, against 0.791-0.937
# in the record of `c530054` (B1 32K 0.811 against 0.791, B4 32K 0.931 against 0.896, B1 128K
# 0.925 against 0.889, B4 128K 0.966 against 0.937); pages of 64 and 256, and the dense call,
# are within 0.005 of that record at every shape from 32K. `of_copy` passes 1 in two rows (B4
# 128K: dense 1.035, pages of 256 1.007): the ceiling is a device copy, which reads and
# writes, so it does not bound a kernel that only reads. From 32K the paged call runs at
# 0.915-0.988 of the dense call's speed (`vs dense`); at 8K and B1 it is faster than dense
# (1.035-1.081), at 8K and B4 slower (0.932-0.972); why the B1 8K rows beat dense is not
# measured. **FA4: met at every shape.** FA4's paged call, its varlen entry point with one
# query per sequence, reads 0.10-0.47 of the copy ceiling; flashcore's is 1.95-8.70x faster
# (`FA4 / ours`; 5.45-8.70x at B1, 1.95-2.33x at B4).
#
# **What changed.** Until `3f5270a` the paged kernel looked up each tile's page in the block
# table inside that tile. Triton's pipeliner turned that lookup into an async copy that the
# tile's K/V copies waited on, so one K/V tile was in flight (sm_90 TTGIR: `async_wait` num 0),
# where the dense cache keeps two (num 2). The lookup is now carried one tile ahead, and the
# K/V copies pipeline two deep as in the dense cache. The A/B below timed both trees in one
# session on the H100, alternating processes, 2 rounds each (`logs/paged_ab_3f5270a.json`:
# after, its A, is `3f5270a`; before, its B, the tree `.ab/base`, which was commit `0e654ee`,
# the commit before it; CUDA-graph medians; `before / after` above 1 = faster after).

# %%
ab_path = logs / "paged_ab_3f5270a.json"
if ab_path.exists():
    ab = json.loads(ab_path.read_text())
    print(f"--- {ab_path.name}:", results.describe(ab))
    print(f"after (A): the tree of the commit above; before (B): {ab['other_tree']}; rounds "
          + ", ".join(f"{k} {len(v)}" for k, v in ab["rounds"].items()))  # fmt: skip
    ab_rows = []
    for name, r in ab["summary"].items():
        b, sk, impl = name.split()
        ab_rows.append({"batch": int(b[1:]), "Sk": int(sk[2:]), "impl": impl,
                        "before us": 1e3 * r["graph_ms_B"], "after us": 1e3 * r["graph_ms_A"],
                        "before / after": r["graph_ms_B_over_A"],
                        "per round": "{:.3f}-{:.3f}".format(*r["graph_ms_B_over_A_range"])})  # fmt: skip
    print(table(ab_rows, list(ab_rows[0]),
                {"before us": "{:.1f}", "after us": "{:.1f}", "before / after": "{:.3f}"}))  # fmt: skip
    for kind in ("dense", "paged"):
        x = [r["before / after"] for r in ab_rows if r["impl"].startswith(kind)]
        print(f"{kind}: before / after {min(x):.3f} to {max(x):.3f}")
else:
    print(f"--- {ab_path.name}: (not in this checkout)")

# %% [markdown]
# The paged call is 1.230-1.293x faster after the change at every shape and page size of the
# A/B, the dense call within 0.996-1.003 (its code did not change). The record above is of
# the later commit `65d6c6c`, whose `kernels/decode.py` is `3f5270a`'s with the small-pages
# variant below.
#
# **Merged at `17faf1b`: pages of 16.** Branch `paged-small-pages` (commit `aaedaf5`) loads
# each 64-key tile's 4 page ids once and broadcasts them to the tile's rows at pages of 16,
# instead of a block-table gather per key row: 574 -> 425 SASS instructions per key tile
# (offline sm_90a compile; `logs/paged_decode_sass_528bc5d.log`, from that branch). An A/B
# against main (`c530054`) on the H100, 3 alternating rounds of CUDA-graph replay
# (`logs/paged_small_pages_ab_aaedaf5.json`, here: its A is the branch, its B main), put pages
# of 16 at 0.811, 0.950, 0.904 and 0.976 of the copy ceiling against main's 0.791, 0.917,
# 0.886 and 0.945 (B1 32K, B8 32K, B1 128K, B8 128K; B8 is not a batch of the record above;
# the 0.950 is 0.9499, still under 0.95); pages of 256 and the dense cache unchanged (main's
# time over the branch's 0.995-1.000). Its GPU tests (`tests/test_paged_kv.py` and
# `tests/test_decode.py`, `-m gpu`: 164 passed) ran on the H100 at `281816d`, the variant on
# that day's main (`logs/paged_small_pages_gpu_tests_281816d.log`), and `17faf1b` merged it.
# The record above is the first to time it in main: pages of 16 at 0.811 (B1 32K) and 0.925
# (B1 128K) of the copy ceiling, where the A/B had 0.811 and 0.904; it meets 0.95 at B4 128K
# only (0.966).

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
# On the H100 (commit `b44173b`), the same `flash_attn_func` calls on flashcore and on
# FlashAttention-4 (`tests/test_flash_attn_interface.py::test_same_calls_as_fa4_pass_the_rule`:
# causal, sliding window, GQA, softcap 30; fp16 and bf16), each output under the rule against
# float64 and each lse under the rule against a float32 logsumexp. The test asserts, in order,
# flashcore's output, FA4's output, flashcore's lse, FA4's lse; the log below names the
# assertion each failure stopped at and FA4's lse row ratio there. A failure at FA4's lse
# means the three before it passed. (The test now asserts FA4's lse only without softcap: a
# property of the peer, not a check of flashcore.)

# %%
door_log = logs / "gpu_tests_flash_attn_door_b44173b.log"
if door_log.exists():
    text = door_log.read_text()
    failures = []
    print(f"--- {door_log.name}")
    print("\n".join(ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)))
    for head, body in re.findall(
        r"^_+ (test_\S+) _+$(.*?)(?=^_+ test_|^=+ warnings)", text, re.S | re.M
    ):
        stopped = re.search(r"^>\s+assert (.*)$", body, re.M).group(1)
        ratio = re.search(r"row_ratio=([\d.]+)", body).group(1)
        print(f"FAILED {head}: stopped at `assert {stopped}`, row ratio {float(ratio):.1f}")
        failures.append(stopped)
    print(
        "every failure is FA4's lse (flashcore's output and lse pass in every case of the log):",
        all(f.startswith("error_rule(their_lse") for f in failures),
    )
else:
    print(f"--- {door_log.name}: (not in this checkout)")

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
# This record is of commit `65d6c6c` (2026-11-27, log `models_65d6c6c.log`), stale (its status
# line: the FP8 schedule fix in `forward_hopper.py` and the backward dispatch in `interface.py`
# and `dispatch.py` came after it; not re-recorded), with 7 paired rounds a row (since
# `d4f6174`; the record of `c530054` had 7 too, that of `d8fa890` 3). gpt-oss: 1.08x eager at B1
# (rounds 0.84-1.36, three of seven below 1) and 1.13x at B8 (1.04-1.20, every round above 1);
# both medians are above 1, so its verdict prints `True`. DeepSeek-V3: 1.12x SDPA at B1 (rounds
# 0.97-1.22, two of seven below 1) and 0.95x at B8 (rounds 0.79-1.42, four of seven below 1), so
# its verdict prints `False`: at B8 the median (0.953 in the record) misses "at least as fast",
# with rounds on both sides of 1. The record of `c530054` (kernel sources `d8fa890`'s) had
# 1.09x/1.14x (gpt-oss) and 1.02x/1.00x (DeepSeek-V3; 0.998 at B8, rounds 0.96-1.31), every
# gpt-oss round above 1; the 3 rounds of `d8fa890` had 0.97x/1.11x and 0.68x/1.16x, their B1
# rounds at 0.77-1.14 and 0.60-0.95, which the 7 rounds of `c530054` did not reproduce. The
# rounds spread, by 0.16 to 0.63 from lowest to highest in a row of this record. At DeepSeek-V3
# B8 the two sides move in turn: in rounds two to four SDPA's throughput fell (726, 634, 581
# tokens/s) while flashcore's held (824-832), ratios 1.15-1.42; in rounds five to seven
# flashcore's fell (719, 690, 768) while SDPA's held (845-869), ratios 0.79-0.90; round one,
# 0.95, had 797 against 836. What moves each side's throughput was not measured, so at B8 the
# record shows DeepSeek-V3 through flashcore short of SDPA by its median, within a spread of
# rounds on both sides of 1, not an established slowdown. Earlier gpt-oss records: 1.11x/1.12x
# (`0099be1`, met), 0.90x/1.18x (`6c8aae4`), 1.09x/1.02x (`833b4cf`), 1.34x/1.11x (`044ea55`);
# DeepSeek-V3: 1.00x/1.01x (`0099be1`), 0.97x/0.96x (`6c8aae4`), 0.98x/0.96x (`833b4cf`),
# 0.99x/0.99x (`044ea55`), 1.07/0.94 (`b44173b`), 0.80/0.71 (`cb05ce9`, the padded route). From
# the code, none of the kernel changes from `0099be1` to `65d6c6c` is on the calls generation
# makes (the backward is not run, so neither are MLA's new backward configs; D64 takes the Gluon
# kernel only from S 4K, and the prompt is 512, so neither does the exp2 default of D64 calls
# without a mask; `decode.py`'s changes are in its paged branch), and the default attention's
# own throughput moves between records as well: SDPA's DeepSeek-V3 89 and 836 tokens/s at B1 and
# B8 here, 89 and 775 at `c530054`, 91 and 613 at `d8fa890`, 108 and 927 at `0099be1`; eager's
# gpt-oss 64 and 475, 71 and 511, 67 and 508, 56 and 605. The tokens/s columns are each side's
# median over the rounds, not paired: at gpt-oss B8 flashcore's (534) is of the second round and
# eager's (475) of the fifth, and a side's throughput moves from round to round (387-601
# tokens/s for flashcore's gpt-oss at B8, 350-558 for eager), which is why the verdict uses the
# rounds' own ratios. Since `a075789` (this record and those of `c530054`, `d8fa890`, `0099be1`
# and `6c8aae4`) DeepSeek-V3's prefill takes the Gluon kernel, by the dispatch table (the run
# does not log which kernel ran): its 512-token prompt is above the table's 128 for D192 (until
# `a075789` it was below the 1K there, and the prefill took the Triton mode; the probe table in
# section 2 has the Gluon kernel 1.65-2.89x the Triton mode at S = 512); after this record the
# FP8 schedule fix wrote `gl.exp2` inline on that kernel's path for this pair, and whether that
# changed its machine code at 192/128 was not checked. Its 128 decode steps (one query row each)
# still run the dense forward on the Triton kernel, since the KV-cache kernel has one head dim.
# Not measured, so not claimed: where flashcore's path spends DeepSeek-V3's time, which keeps it
# level with SDPA or short of it rather than ahead. Candidates: those Triton calls and
# flashcore's host cost per call (section 5).

# %% [markdown]
# ## 5. What is measured, and what is not yet
#
# Measured on the H100 through tests (logs, not records, under `results/<gpu>/logs/`): the
# D_v grid through the mode (commit `b44173b`, again at `6c8aae4`: 179 tests, and at
# `65d6c6c`: 215, after 26 OutOfResources failures of the padded D256/128 pair at `97f60fb`;
# section 2) and
# with the Gluon kernel forced, beside the Gluon kernel's own MLA grid of 120 cases
# (`98e26a3`, repeated at `814a2e4`; section 2); the GPU tests of the launch cache (12,
# `6c8aae4`); the Gluon kernel's sinks grid (40 cases, `98e26a3`); paged KV (199 tests: page sizes
# 16-256, D 64/128/256, shared pages, the flash_attn door's `page_table`; `34c60c8`; again at
# `f9591a6`, after the paged change, 157 of them selected in 5 processes, and the D_v varlen
# grid, 20: section 2's log cell; the small-pages variant's 164 GPU tests of paged KV and
# decode, `281816d`, end of section 3); sinks
# (26 tests), the op, the flash_attn door (91 tests) and the SDPA door (31 tests) (`46d6769`);
# MLA's atomic-mode backward config (30 tests, `ea07c61`, and again with the shipped config
# among the 215 at `65d6c6c`; end of section 2), all passing; and
# the flash_attn door beside FA4 (`b44173b`, section 4). Issue 28's targets
# with a record, their verdicts printed above: the sinks' cost (section 1), D 192/128 beside
# FA4 (section 2), paged decode against the copy ceiling and FA4's paged decode (section 3),
# the models' generation against their default attention (section 4). All four records are
# of commit `65d6c6c` (2026-11-27) and stale (their status lines: the FP8 schedule fix in
# `forward_hopper.py` and the backward dispatch in `interface.py` and `dispatch.py` came after
# them; not re-recorded, so the verdicts are of `65d6c6c`'s kernels). Their verdicts: the
# sinks' cost missed, at one ratio of 22 (the Triton kernel's forward at D64 S4K causal,
# 1.037, where the kernel did not change and the record of `c530054` had 1.005; section 1); D
# 192/128 missed (forward geomean 0.881, backward 0.764 of FA4); paged decode met beside FA4
# and missed against the copy ceiling (6 of the 12 shapes from 32K, was 7 at `c530054`);
# generation met for gpt-oss and missed for DeepSeek-V3 (B8, 0.95). Stale, and shown as the
# kernels of their commits: the Nsight profile of MLA's pair (`ncu_compare.json`, `6b0fa16`)
# and the host cost below (`launch.json`). This notebook's GPU-profile run is a row of
# `d807aaa` in a record of `253067a`, stale too (`reproduce_timing.json`, the last cell).
#
# One target is measured only in part: host cost through each door ≤ 1.10x SDPA's.
# `launch.json` times eager calls of `flashcore.attention` and of its torch op (the call
# transformers makes) against SDPA's default backend; below, the ratios per shape. The record
# is of `6c8aae4` and stale (its status line; not re-recorded after `3f5270a`, `e5df583`,
# `8739133`, nor after the later changes to `backward.py`, `decode.py` and
# `forward_hopper.py`, `6960808` to `65d6c6c`, nor after those of 2026-11-28: the FP8
# schedule fix and the backward dispatch in `interface.py` and `dispatch.py`).
# The flash_attn and SDPA doors' own host cost has no current record.

# %%
launch_record = results.read_result("launch", RECORDED_GPU)
print("recorded on", results.describe(launch_record))
print(status_line_for("launch", RECORDED_GPU))
eager = {(r["shape"], r["impl"]): r["eager_us_per_call"] for r in launch_record["rows"]}
host_rows = [
    {"shape": shape, "sdpa default us": sdpa_us}
    | {f"{impl} / sdpa": eager[(shape, impl)] / sdpa_us for impl in ("flashcore", "flashcore op")}
    for (shape, impl), sdpa_us in eager.items()
    if impl == "sdpa default"
]
print(table(host_rows, list(host_rows[0]),
            {"sdpa default us": "{:.1f}", "flashcore / sdpa": "{:.2f}", "flashcore op / sdpa": "{:.2f}"}))  # fmt: skip
for impl in ("flashcore", "flashcore op"):
    met = sum(r[f"{impl} / sdpa"] <= 1.10 for r in host_rows)
    print(f"{impl}: host cost <= 1.10x SDPA's at {met} of {len(host_rows)} shapes")

# %%
# NBVAL_CHECK_OUTPUT
print(
    "issue 28: host cost <= 1.10x SDPA's at every shape of the launch record (function and op):",
    all(r[f"{i} / sdpa"] <= 1.10 for r in host_rows for i in ("flashcore", "flashcore op")),
)

# %% [markdown]
# ### Every door's host cost on the H200
#
# No H100 was lent after `6c8aae4`, so the H100 record above stays stale. On the H200 (the same
# sm_90 part with more memory; host costs are the host's, so they do not transfer between the
# machines), `launch.json` is recorded with every door the issue names (at `b697e0c`,
# 2026-11-30, the first with D128 causal S = 1K on the Gluon forward (the dispatch table of
# `395c11b`) and the second with its output stored by the copy engine; the runs at `9ba1831`,
# `6ae1e84`, `bf63fc6`, `081dfd2`, `ed2da23`, `4f965a7`, `183806d`, `8f70855`,
# `a2d716f`, `dc4c7c1`, `e1a4d8c` and `5cd556f` are kept under `logs/`): the
# function (`flashcore.attention`, or `attention_with_kvcache` with `check_lengths=False` for
# decode, or `attend_full_cache` for the growing cache), the torch op, SDPA's flash backend
# with flashcore activated (`flashcore sdpa door`; the record checks that flashcore's kernel
# served the call, not PyTorch's fallback), and the flash_attn functions on `(B, S, H, D)`
# views of the same tensors (`flash_attn_with_kvcache` with its default length check, a
# device-to-host copy that waits for the queue: one wait a call since `6ae1e84`, two before).
# SDPA default is the reference; the second table is the op layer alone, in one process, from
# `tools/op_overhead.py`: the op as registered since `c56053a` (an autograd kernel of its own
# for CUDA and CPU, which runs an inference call on plain tensors straight into the kernel),
# the same op with `register_autograd` alone (as before: its generated kernel redispatches
# every call), and behind `torch.library.custom_op` (as before that).

# %%
H200 = "nvidia-h200"
if H200 in results.recorded_devices("launch"):
    h200_launch = results.read_result("launch", H200)
    print("recorded on", results.describe(h200_launch))
    print(status_line_for("launch", H200))
    by_impl = {(r["shape"], r["impl"]): r for r in h200_launch["rows"]}
    doors = [
        i
        for i in dict.fromkeys(r["impl"] for r in h200_launch["rows"])
        if not i.startswith("sdpa ")
    ]
    door_rows, door_ratios = [], []
    for shape in dict.fromkeys(r["shape"] for r in h200_launch["rows"]):
        ref_us = by_impl[(shape, "sdpa default")]["eager_us_per_call"]
        row = {"shape": shape, "sdpa default us": ref_us}
        for door in doors:
            us = by_impl.get((shape, door), {}).get("eager_us_per_call")
            row[door] = None if us is None else us / ref_us
            if us is not None:
                door_ratios.append((door, shape, us / ref_us))
        door_rows.append(row)
    print(table(door_rows, list(door_rows[0]),
                {"sdpa default us": "{:.1f}", **{d: "{:.2f}" for d in doors}}))  # fmt: skip
    for door in doors:
        mine = [r for d, _, r in door_ratios if d == door]
        print(f"{door}: <= 1.10x SDPA's at {sum(x <= 1.10 for x in mine)} of {len(mine)} shapes")
    overhead = json.loads(
        (results.RESULTS_DIR / H200 / "logs" / "op_overhead_c56053a.json").read_text()
    )
    print(f"\nop layer alone ({overhead['device']}, commit {overhead['provenance']['commit']}, "
          f"{overhead['shape_q_kv'][0]} {overhead['dtype']}, median of {overhead['rounds']} rounds):")  # fmt: skip
    print(table(overhead["rows"], ["variant", "us_per_call", "over_direct_us"],
                {"us_per_call": "{:.2f}", "over_direct_us": "{:+.2f}"}))  # fmt: skip
    # GPU time (graph replay) of the decode rows, this record beside 081dfd2's (before the
    # SDPA door ran decode on the split-KV kernel)
    before = json.loads((results.RESULTS_DIR / H200 / "logs" / "launch_081dfd2.json").read_text())
    before_by = {(r["shape"], r["impl"]): r for r in before["rows"]}
    gpu_rows = [
        {"shape": shape, "impl": impl, "graph us, 081dfd2": before_by[(shape, impl)]["graph_us"],
         f"graph us, {h200_launch['provenance']['commit']}": by_impl[(shape, impl)]["graph_us"]}
        for shape in dict.fromkeys(r["shape"] for r in h200_launch["rows"]) if "decode" in shape
        for impl in ("flashcore", "flashcore sdpa door", "sdpa flash", "sdpa default")
    ]  # fmt: skip
    print("\n" + table(gpu_rows, list(gpu_rows[0]), {k: "{:.1f}" for k in list(gpu_rows[0])[2:]}))
    # The decode launcher's plans (4f965a7) against the tree before them (9ede840), in
    # alternating processes of one session (tools/decode_host_ab.py)
    ab = json.loads(
        (results.RESULTS_DIR / H200 / "logs" / "decode_host_ab_4f965a7.json").read_text()
    )

    def ab_each_round(tree, case):
        call, metric = case.rsplit(" ", 1)
        return " ".join(f"{x[tree][call][metric]:.0f}" for x in ab["rounds"])

    ab_rows = [
        {"call": case, "plans (A) us": v["A"], "before (B) us": v["B"], "B / A": v["B/A"],
         "A, each round": ab_each_round("A", case), "B, each round": ab_each_round("B", case)}
        for case, v in ab["summary"].items()
    ]  # fmt: skip
    rounds = len(ab["rounds"])
    print(f"\ndecode host time, {ab['provenance']['device']}, medians of {rounds} rounds:")
    print(table(ab_rows, list(ab_rows[0]), {"B / A": "{:.3f}"}))

    # Meant as every door at 8f789b9 (A) against 947187a (B); an A/A run in fact: both
    # processes imported 8f789b9's flashcore (the tool's module-level import, since fixed),
    # so every ratio here is the host's noise between fresh processes
    def read_door_ab(name):
        """tools/door_host_profile.py --base's log: the log, and a row per (shape, call)."""
        log = json.loads((results.RESULTS_DIR / H200 / "logs" / name).read_text())
        rows = [
            {"shape": key.split(" | ")[0], "call": key.split(" | ")[1], "A us": v["A_us"],
             "B us": v["B_us"], "A / B": v["A/B"]}
            for key, v in log["summary"].items()
        ]  # fmt: skip
        return log, rows

    def print_door_ab(name, heading):
        """Print one such log under ``heading`` (``{commit}``: its A tree's commit)."""
        log, rows = read_door_ab(name)
        title = heading.format(commit=log["provenance"]["commit"])
        print(f"\n{title}, {log['rounds_done']} rounds:")
        print(table(rows, list(rows[0]),
                    {"A us": "{:.1f}", "B us": "{:.1f}", "A / B": "{:.3f}"}))  # fmt: skip
        return log, rows

    print_door_ab("door_host_ab_8f789b9.json",
                  "every door, {commit}'s code in both columns (an A/A run; see below)")  # fmt: skip
    # Every door at 6ae1e84 (A) against the tree before it (B): the length check's one wait is
    # the only package code between them, and only the flash_attn door's decode rows run the check
    _, check_rows = print_door_ab("door_host_ab_6ae1e84.json",
                                  "every door, {commit} (A) against the tree before it (B)")  # fmt: skip
    runs_check = {
        r["shape"]: r["A / B"]
        for r in check_rows
        if r["call"] == "flashcore flash_attn door" and r["shape"].startswith("decode")
    }
    same_code = [
        r["A / B"]
        for r in check_rows
        if not (r["call"] == "flashcore flash_attn door" and r["shape"] in runs_check)
    ]
    control = {r["shape"]: r["A / B"] for r in check_rows if r["call"] == "sdpa default"}
    print("control, sdpa default (the same code in both trees): A / B "
          + ", ".join(f"{x:.3f}" for x in control.values()))  # fmt: skip
    print(f"the {len(same_code)} calls the change leaves alone: A / B "
          f"{min(same_code):.3f}-{max(same_code):.3f}")  # fmt: skip
    with_control = [f"{x:.3f} (control {control[s]:.3f})" for s, x in runs_check.items()]
    print(
        "the flash_attn door's decode rows (the check's one wait): A / B", ", ".join(with_control)
    )
    # read as resolved only where the rows that run the check leave that span
    inside = all(min(same_code) <= x <= max(same_code) for x in runs_check.values())
    print(f"those rows inside that span: {inside}; the saving resolved by this run: {not inside}")
    # Every door at 395c11b (A: the output stored by the copy engine, the dispatch from S 1K)
    # against c3cadc1 (B: before both), 4 rounds: did the store's descriptor cost the host?
    store_ab, _ = print_door_ab("door_host_ab_395c11b_c3cadc1.json",
                                "every door, {commit} (A) against c3cadc1 (B)")  # fmt: skip
    spread = {
        tree: [x[tree]["B1 H32 S1024 D128"]["flashcore"] for x in store_ab["rounds"]]
        for tree in ("A", "B")
    }
    print("B1 H32 S1024 D128, the function, each round (us): "
          + "; ".join(f"{t} " + " ".join(f"{x:.1f}" for x in v) for t, v in spread.items()))  # fmt: skip

# %% [markdown]
# **Reading it.** The op layer's own cost fell from 24.6 us per call over the kernel function
# (register_autograd alone) to 5.3 us in the same process; `custom_op` is 33.3. In the record
# (`b697e0c`) the op path is 0.76-2.49x SDPA's eager time where the function is 0.73-1.95x.
# The function meets 1.10x at four shapes of six (B1 H8 S128, B8 H16 S512, B1 H32 S1024 and
# the GQA prefill; it misses at both decode rows, 1.95x and 1.15x), the op at two (B1 H32
# S1024 and the GQA prefill), the flash_attn door at one (the GQA prefill) and the SDPA door at
# none (1.18-3.56x). The previous record (`9ba1831`, `logs/launch_9ba1831.json`) had two rows
# that moved against the one before it with no host code changed: B1 H32 S1024 D128, the
# function 39.1 us against 34.2 and the op 62.0 against 34.5, and the decode function 1.40x
# against 1.13x. The lean launch had just begun encoding a fourth TMA descriptor (the
# output's), so the doors were timed against the tree before that change (`c3cadc1`), two
# trees taking turns in fresh processes (the table above, 4 rounds): at B1 H32 S1024 the
# function took 0.953 of `c3cadc1`'s time and the op 0.985, at B1 H8 S128 0.969 and 0.974; the
# flash_attn door read 1.134 at B1 H32 S1024 (A's rounds 50-76 us, B's 62-67) and 0.990 at B1
# H8 S128. A's function time at B1 H32 S1024 ranged 24-38 us between rounds (B's 34-36, the
# Triton kernel there, GPU-bound): this host's drift covers the 39/62 us row, and no door
# shows the 5-28 us that row added, so the output's descriptor is not what moved it; a few
# microseconds either way are below what four rounds resolve. In this record that shape reads
# 23.6 us (function) and 30.9 (op), now on the Gluon kernel (dispatch change at `395c11b`);
# the decode function's 1.95x (44.2 us against SDPA's 22.6) is on unchanged decode code, the
# same drift. In
# `6ae1e84`'s record the function met 1.10x at four shapes (0.90-1.13x) and the op at two. At
# `5cd556f`
# (`logs/launch_5cd556f.json`) the function met it at the same four (0.86-1.39x; the decode
# rows 1.39x and 1.15x) and the op at one; at `e1a4d8c` (`logs/launch_e1a4d8c.json`) the
# function at three, the op at two; in the run at `a2d716f` the function at one, with no host
# path changed: the host's own spread between runs, below, is larger than this session's
# changes. The SDPA door runs inside SDPA's own C++ routing and then flashcore's Python (the
# forward with the lse, five allocations: 1.62-3.41x where the host decides, 2.30-3.66x at
# `5cd556f`); the flash_attn door adds four transposes, an allocation and its option checks
# (1.16-1.92x there, 1.80-2.01x at `5cd556f`), and its decode rows wait for the length check
# each call (2.89-3.84x; 3.17-4.60x at `5cd556f`, another process, so not an A/B of the change
# that follows). Since `6ae1e84` the check waits for the device once a call, where it waited
# twice (the lengths copied to the host and their range taken there; with a block table the
# range and the page verdict read together, where they were three reads). A GPU test counts
# the waits with PyTorch's synchronization debug mode
# (`tests/test_decode.py::test_gpu_length_check_waits_for_the_device_once`): run against the
# tree before, it failed with 2 and 3 waits (without and with a block table), and it passes
# on this tree (`logs/length_check_waits_6ae1e84.log`); the GPU tests of the decode, paged,
# flash_attn door and launch files passed at `6ae1e84` (179 passed, 8 skipped,
# `logs/gpu_tests_host_6ae1e84.log`). `check_lengths=False`, flashcore's keyword on the door,
# skips the check, as the door does by itself inside CUDA graph capture. Two runs on this host
# differ by more than some changes measured: SDPA default's own time at B1 H8 S128 was 18.8 us
# in the run of the tree at `cd532a1` (`logs/launch_cd532a1.json`), 25.4 at `081dfd2`, 25.7 at
# `bf63fc6`, 29.1 at `183806d`, 18.7 at `8f70855`, 26.9 at `a2d716f`, 24.8 at `dc4c7c1`, 19.0
# at `e1a4d8c`, 22.8 at `5cd556f`, 27.5 at `6ae1e84`, 20.0 at `9ba1831` and 16.9 in this record; so ratios are read within one run,
# never across runs.
#
# **The SDPA door's decode, a GPU-time bug the first record showed.** At `081dfd2` the door
# served one query against the 8K cache with flashcore's forward kernel (one program per
# query tile and head: 32 programs): 145.0 us of GPU time in graph replay, where PyTorch's
# flash kernel, which the door replaces, took 22.0 and flashcore's split-KV kernel 13.5. The
# split-KV kernel did not return the log-sum-exp the op must. Since `bf63fc6` it does (the
# single split or the combine writes it, natural log as the forward's; CPU tests under the
# rule, with sinks, and its GPU tests, `logs/gpu_tests_decode_lse_bf63fc6.log`; compute-sanitizer
# memcheck over the lse tests with one and three splits, so over the combine's lse store too,
# 0 errors, `logs/gpu_tests_host_183806d.log`), and the door runs one query against Sk >= 4 keys
# on it: 13.1 us of GPU time in this record (0.60 of PyTorch flash's), 14.1 for the growing
# cache. A few non-causal queries (1 < Sq <= 16,
# Sk >= 4 Sq) go to PyTorch's flash kernel: the split-KV kernel's queries are causal, and the
# forward kernel has the same grid there as at Sq = 1.
#
# Where the microseconds go, door by door: `logs/host_profile_c56053a.json` (cProfile per
# call; cProfile's per-call times are inflated by the profiler itself). The decode function
# path's largest items were `launch_decode`'s own Python (its plan and cache key, 17.3 us under
# the profiler), two allocations (the split partials and the output, 9.1), the two launches
# (7.2) and `attention_with_kvcache`'s guards (6.6); its GPU time (graph replay) is SDPA's
# within 10%. Since `4f965a7` a call with a lengths tensor finds its plan per exact signature
# (`kernels/decode.py`, `_DECODE_PLANS`: the argument lists of a launch of that signature with
# the tensor slots emptied), so a static cache's repeats skip planning and the cache key; calls
# without one (a cache growing by a token per step) plan per call as before. On the CPU, the
# launcher's Python alone (`tools/decode_host_ab.py --cpu`, stand-in launchers, five
# alternating rounds per tree; `results/cpu-interpreter/logs/decode_host_cpu_7e57861_vs_*.json`)
# took a static call from 12.43 to 9.50 us and left a growing one level (15.03 before, 15.25);
# the first version (`ed2da23`, a plan for every call) had slowed that one to 17.37 (15.13). On
# the H200 the decode host-time table above is the A/B in one
# session, five alternating rounds of one process per tree: the static call's host time fell
# from a median of 37.1 to 32.3 us (1.15x; in every round A was faster, by 3-22 us). The growing
# cache runs the same code in both trees: its medians differ by 4.3 us (1.10x), and the
# flash_attn door's eager medians went the other way (53.4 before, 63.9 after) while its host
# medians went this way (54.1, 45.1): the rounds of one tree span up to 2x on this host (the
# columns of each round), so a change under about 10% is not resolved by five rounds here.
#
# **A host profile per door, and what it led to** (2026-11-29, `logs/door_host_profile_7783dda.json`,
# `tools/door_host_profile.py`: cProfile over 1500 calls of every door at the first, decode and
# growing-decode shapes, and the SDPA door's pieces timed alone). The SDPA door's
# `flash_forward` took 35.4 us against 19.1 for the `flashcore.attention` call inside it: its
# three unused outputs (rng_state, unused, debug_mask) cost 8.6 us, mostly `torch.empty`'s
# parsing of shape, dtype and device. Every forward call read two Gluon switches with
# `os.environ.get`, which for an unset name raises and catches a KeyError inside; the lean paths
# allocated their output with `torch.empty(shape, dtype=, device=)`. On CPU tensors
# (`tools/host_micro.py`, `results/cpu-interpreter/logs/host_micro_4ccd1fb.json`) the two
# switches cost 1.87 us a call, the output 2.39 and the door's three outputs 4.50, and 0.49,
# 1.41 and 2.59 after the changes that follow. Since `5cd556f`
# the door makes its three outputs with `empty_like` from per-(device, dtype) templates (fresh
# tensors every call, as PyTorch's kernel returns; a CPU test checks they are), the switches are
# read from `os.environ`'s own dict (`launch.environ_value`; tests follow every change of
# either), and the lean paths allocate with `empty_like` (`launch.new_output`). The GPU tests of
# every file they touch passed (`logs/gpu_tests_host_5cd556f.log`, 1067 tests). Whether the
# H200 sees the saving is not measured. The `8f789b9` door table above was meant as the A/B of
# every door against the tree before (`947187a`), four alternating rounds of one process per tree
# (`logs/door_host_ab_8f789b9.json`), but it is an A/A run: the tool imported flashcore at
# module level, which put this checkout first on the path of the process meant for `947187a`,
# so both columns timed the same code (fixed since; each process now reports the tree it
# imported, and a test checks it). Read as that, it measures this host's noise between fresh
# processes for identical code: every row's ratio lies in 0.83-1.36. What the profile
# leaves: the op's dispatch into Python (about 10 us), the SDPA
# door's C++ routing and boxing into Python (about 20), and the decode launcher's per-call plan
# for a cache without a lengths tensor (`launch_decode`'s own time 16 us under the profiler,
# against 6 through the planned path), which a growing cache cannot key by exact size. A plan
# keyed without what the length moves was tried (branch `decode-lean`) and made the launcher's
# Python slower, 17.28 us a growing call against 15.10
# (`results/cpu-interpreter/logs/decode_host_cpu_growth_plans_e9ced45_vs_0418168.json`): its
# key check and slot filling cost more than the planning it saves.
#
# **The length check's one wait, A/B** (2026-11-30, `logs/door_host_ab_6ae1e84.json`, the
# last table above): every door at `6ae1e84` (A) against the tree before it (B, `794fb3d`),
# four alternating rounds of one process per tree, each process checked to have imported its
# own tree. The length check is the only package code between the two, and of the calls timed
# only the flash_attn door's two decode rows run it. The control, SDPA default, reads A/B
# 0.617, 0.817 and 1.074 at the three shapes, and the 13 calls whose code is the same in both
# trees lie in 0.596-1.074: the offset between processes is larger than the differences the
# change could be read from, so this run does not resolve the saving. Only as an indication:
# the flash_attn door's decode rows read 0.698 and 0.835, against the control's 0.817 and
# 1.074 at the same shapes. What is established is the wait count (one, was two), not its
# microseconds on this host.

# %% [markdown]
# This notebook's GPU profile last ran on the H100 at commit `d807aaa` (2026-11-27; its kernels
# are `d8fa890`'s): its row of `reproduce_timing.json`, printed below. The record itself is
# of commit `253067a` (2026-11-28) and stale (the line below: the FP8 schedule fix in
# `forward_hopper.py` and the backward dispatch in `interface.py` and `dispatch.py` came after
# it). Its last run, at `253067a`, timed notebooks 07 and 03 on the kernels of that commit:
# 07's row is `ok` in 92.5 s; 03's says `timed out after 127 s`: what was left of the 220 s
# the call gave the two notebooks ran out after 03's quick sweep had finished and written
# `perf_quick.json` (stale now, as this record), a stop by the call's budget, not a failure of
# the notebook; so the record says `all_finished` False (total 729.4 s). Its other rows keep
# their older commits: 01, 02, 04 and this notebook at `d807aaa`, 05 and 06 at `34c60c8`, 08
# at `1047865`. Since `d807aaa`, `backward.py`, `decode.py` and `forward_hopper.py` changed,
# then `interface.py` and `dispatch.py`, and this notebook's profile has not run on the H100
# on the kernels of today's tree.

# %%
timing = results.read_result("reproduce_timing", RECORDED_GPU)
print(status_line_for("reproduce_timing", RECORDED_GPU))
mine = [r for r in timing["rows"] if r["notebook"] == "09_models_and_apis"]
for r in mine:
    print(f"{r['notebook']}: profile {r['profile']}, {r['seconds']} s, status {r['status']}, "
          f"commit {r['commit']}, {r['date'][:10]}")  # fmt: skip
