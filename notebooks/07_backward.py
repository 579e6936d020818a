# %% [markdown] tags=[]
# # 07 · Backward: flashcore trains
#
# **What this notebook claims, and how it could fail.** `flashcore.attention` is
# differentiable: its gradients dQ, dK, dV are within twice the error of PyTorch's own
# computation in the same precision (against float64 autograd), on every case of a grid of
# awkward sizes, causal alignments, GQA ratios, windows and head dims; the deterministic mode
# is bitwise reproducible; memory grows linearly in S; a transformers training step agrees
# with float64. Any case over the bound, any unwritten gradient element (buffers are
# NaN-poisoned), any run-to-run difference prints `False` below. Speed is measured beside
# SDPA's flash and cuDNN backends (and FlexAttention) in one process.
#
# Sections: (1) the derivation, checked numerically; (2) the gradient rule and planted bugs;
# (3) the grid, live and recorded; (4) determinism; (5) memory against S; (6) speed;
# (7) a transformers training step.

# %% tags=["parameters"]
PROFILE = "auto"  # "auto" | "gpu" | "cpu"
# GPU profile: SWEEP "quick" runs a slice of the full gradient grid and times
# SPEED_HEAD_DIMS; "full" runs the whole grid and times D 64/128/256.
SWEEP = "quick"
SEED = 0
# GPU profile: sequence lengths and head dims timed live (B*S = 16K, H*D = 2048)
SPEED_SEQLENS = [4096]
SPEED_HEAD_DIMS = [128]
# GPU profile: also time FlexAttention (compiled once per shape, about 30 s each)
FLEX = False
RECORD = True  # GPU profile: write results/<gpu>/backward_notebook_check.json
RECORDED_GPU = "nvidia-h100-80gb-hbm3"  # which recorded GPU run the tables render
SAVE_FIGURES = True

# %% tags=[]
from flashcore.notebook import live_error, live_ratio, setup, table

PROFILE, DEVICE = setup(PROFILE)  # prints the device; the CPU profile sets TRITON_INTERPRET=1 first
# %% tags=[]
import math

import matplotlib.pyplot as plt
import torch

from flashcore import validate_backward as VB
from flashcore.plots import DTYPE_COLORS, save_figure
from flashcore.results import describe, read_result, recorded_devices, write_result
from flashcore.studies.records import status_line_for
from flashcore.validate import AttentionCase

# %% [markdown] tags=[]
# ## 1. From dO to dS
#
# With $S = \text{scale}\cdot QK^\top$ (masked entries $-\infty$), $P = \text{softmax}(S)$ row by
# row and $O = PV$, the upstream gradient $dO$ gives, by the chain rule:
#
# * $dV = P^\top dO$ and $dP = dO\,V^\top$ (a matrix product, nothing special);
# * through the softmax of row $i$, $\partial P_{ij}/\partial S_{ik} = P_{ij}(\delta_{jk} - P_{ik})$, so
#   $dS_{ik} = \sum_j dP_{ij} P_{ij}(\delta_{jk} - P_{ik}) = P_{ik}\,(dP_{ik} - D_i)$ with
#   $D_i = \sum_j P_{ij}\, dP_{ij}$;
# * $D_i = \sum_j P_{ij} \sum_d dO_{id} V_{jd} = \sum_d dO_{id} O_{id}$: the row sum of $dO \circ O$,
#   one pass over two $(S, D)$ tensors instead of the $(S, S)$ matrices $P$ and $dP$ (the
#   kernel's preprocess step);
# * $dQ = \text{scale}\cdot dS\,K$ and $dK = \text{scale}\cdot dS^\top Q$ (for GQA, $dK$ and $dV$ sum
#   over the query heads that share a KV head).
#
# $P$ itself is recomputed tile by tile from the forward's log-sum-exp:
# $P_{ij} = \exp(S_{ij} - \text{lse}_i)$. Below, each identity in float64 against autograd.

# %% tags=[]
gen = torch.Generator().manual_seed(SEED)
q, k, v, do = (torch.randn(1, 2, 9, 8, generator=gen, dtype=torch.float64) for _ in range(4))
scale = 1 / math.sqrt(8)
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
s = leaves[0] @ leaves[1].transpose(-1, -2) * scale
s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))  # causal
out = torch.softmax(s, -1) @ leaves[2]
out.backward(do)

with torch.no_grad():
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(
        torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf")
    )
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse)  # P recomputed from the log-sum-exp
    o = p @ v
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    delta = (do * o).sum(-1, keepdim=True)  # rowsum(dO o O)
    ds = p * (dp - delta)
    dq, dk = scale * ds @ k, scale * ds.transpose(-1, -2) @ q
checks = {
    "D = rowsum(dO o O) = rowsum(P o dP)": float(
        (delta - (p * dp).sum(-1, keepdim=True)).abs().max()
    ),
    "dV = P^T dO": float((dv - leaves[2].grad).abs().max()),
    "dQ = scale dS K": float((dq - leaves[0].grad).abs().max()),
    "dK = scale dS^T Q": float((dk - leaves[1].grad).abs().max()),
}
for name, err in checks.items():
    print(f"{name:<38} max |difference| vs autograd {live_error(err, PROFILE)}")

# %% tags=[]
# NBVAL_CHECK_OUTPUT
print("every identity holds in float64 to 1e-12:", all(err < 1e-12 for err in checks.values()))

# %% [markdown] tags=[]
# **Why recompute P instead of storing it.** Storing $P$ costs $B\,H\,S^2$ elements written by
# the forward and read by the backward; recomputing it costs one more $QK^\top$ matmul in the
# backward. At the scale of a training step the stored matrix does not fit, and even where it
# fits, moving it costs about as much time as recomputing it:


# %% tags=[]
def recompute_vs_store(batch, heads, seqlen, head_dim, tflops=500.0, tbps=3.0):
    p_bytes = batch * heads * seqlen * seqlen * 2  # P in bf16
    recompute_flops = 2 * batch * heads * seqlen * seqlen * head_dim  # one S = Q K^T
    return {
        "S": seqlen,
        "P bf16 GiB": p_bytes / 2**30,
        "write+read P ms": 2 * p_bytes / (tbps * 1e12) * 1e3,
        "recompute S ms": recompute_flops / (tflops * 1e12) * 1e3,
    }


rows = [recompute_vs_store(max(1, 16384 // s), 16, s, 128) for s in (2048, 8192, 32768, 131072)]
print(
    table(
        rows,
        ["S", "P bf16 GiB", "write+read P ms", "recompute S ms"],
        {"P bf16 GiB": "{:.1f}", "write+read P ms": "{:.2f}", "recompute S ms": "{:.2f}"},
    )
)
print(
    "(B*S = 16K tokens up to S = 16K, B = 1 beyond; H = 16, D = 128; 3 TB/s and 500 TFLOP/s,"
    " round H100 numbers)"
)

# %% [markdown] tags=[]
# Per layer, $P$ is $2\,B H S^2$ bytes: 4 GiB at S = 8K with 16K tokens per batch, growing
# linearly in S at fixed tokens (quadratically for one sequence), per layer and per step, and
# its round trip through memory takes longer than recomputing it; the recomputation is one of
# the backward's five matmuls. The backward keeps only $O(S)$ extra state: the
# log-sum-exp from the forward and $D$.
#
# **Where 2.5× the forward's FLOPs come from.** The forward does two matmuls per tile pair
# ($QK^\top$, $PV$): $4\,B H S_q S_k D$ FLOPs. The backward does five: $QK^\top$ (recompute),
# $dO\,V^\top$, $P^\top dO$, $dS\,K$, $dS^\top Q$: $10\,B H S_q S_k D$, 2.5×. The deterministic
# mode computes dQ in a second pass per query tile, which repeats $QK^\top$ and $dO\,V^\top$:
# seven matmuls, 1.4× the work of the atomic mode (five, with dQ summed by fp32 atomics).


# %% tags=[]
def matmuls(mode):
    forward = ["Q K^T", "P V"]
    backward = ["Q K^T", "dO V^T", "P^T dO", "dS^T Q"] + (
        ["dS K"] if mode == "atomic" else ["Q K^T (dQ pass)", "dO V^T (dQ pass)", "dS K"]
    )
    return len(forward), len(backward)


f, b_atomic = matmuls("atomic")
_, b_det = matmuls("deterministic")
print(
    f"forward {f} matmuls; backward {b_atomic} with atomic dQ ({b_atomic / f}x the forward), "
    f"{b_det} deterministic ({b_det / f}x the forward, {b_det / b_atomic}x the atomic mode)"
)

# %% [markdown] tags=[]
# ## 2. The gradient rule, and bugs it must reject
#
# For each of dQ, dK, dV:
#
# $$\max|g - g_{64}| \le 2\,\max|g_\text{same} - g_{64}| + \text{floor},$$
#
# $g_{64}$ from float64 autograd through the reference, $g_\text{same}$ from autograd through
# the same PyTorch computation in the inputs' dtype. The floor is one unit roundoff of the
# dtype at the largest $|g_{64}|$, or fp32's unit roundoff times the sum of the absolute values
# of the terms that cancel in $dS = P\circ(dP - D)$, whichever is larger: when every row sees
# one key, $dQ$ and $dK$ are exactly zero, PyTorch gets exactly zero (it forms $D$ from $P \circ
# dP$), and the kernel (which forms $D$ from $dO \circ O$, as FlashAttention does) gets the
# fp32 rounding of a difference of two equal sums. Three planted bugs follow; each must fail.

# %% tags=[]
case = AttentionCase(1, 4, 2, 33, 33, 32, "float16", True)
qh, kh, vh, doh = VB.make_grad_inputs(case, "cpu", SEED)
bug_rows = []
for name, fn in VB.planted_backward_bugs().items():
    verdict = VB.rule_rejects(fn(qh, kh, vh, doh, True, "top_left"), qh, kh, vh, doh, causal=True)
    bug_rows.append(
        {"planted bug": name, **{g: "pass" if ok else "FAIL" for g, ok in verdict.items()}}
    )
same = VB.reference_gradients(qh, kh, vh, doh, compute_dtype=torch.float16, causal=True)
control = VB.rule_rejects(same, qh, kh, vh, doh, causal=True)
bug_rows.append(
    {
        "planted bug": "(control: fp16 PyTorch itself)",
        **{g: "pass" if ok else "FAIL" for g, ok in control.items()},
    }
)
print(table(bug_rows, ["planted bug", "dq", "dk", "dv"]))

# %% tags=[]
# NBVAL_CHECK_OUTPUT
print(
    "the rule rejects every planted backward bug:", all("FAIL" in r.values() for r in bug_rows[:-1])
)
print("the rule passes fp16 PyTorch's own gradients:", all(control.values()))

# %% [markdown] tags=[]
# ## 3. The grid
#
# Live: the CPU profile runs the interpreter grid (fp16/fp32, every mask kind, GQA, windows,
# padded head dims, a transposed layout); the GPU profile runs every 16th case of the full
# grid (`SWEEP="full"`: all of it, bf16 included), in the default deterministic mode.

# %% tags=[]
if PROFILE == "cpu":
    live_cases = VB.backward_grid("cpu")
else:
    full = VB.backward_grid("full")
    live_cases = full if SWEEP == "full" else full[::16]
if PROFILE == "gpu":  # compilation dominates: several processes compile and check at once
    from flashcore.studies.backward_bench import run_grid_parallel

    live = run_grid_parallel(live_cases, jobs=8)
else:
    live = VB.run_backward_grid(live_cases, DEVICE, base_seed=SEED, progress=False)
summary = VB.summarize_backward(live)
# On a CPU the ratios (and so which case is worst) move with the CPU's SIMD code paths
# (flashcore.notebook.live_ratio): the CPU profile prints which side of the rule they fall on.
worst_case = f" ({summary['worst_case']})" if PROFILE == "gpu" else ""
print(
    f"{summary['cases']} cases, {summary['failed']} failed; worst ratio "
    f"{live_ratio(summary['worst_ratio'], PROFILE)}{worst_case}; per gradient: "
    + ", ".join(
        f"{g} {live_ratio(r, PROFILE)}" for g, r in summary["worst_ratio_per_gradient"].items()
    )
)
if PROFILE == "gpu":
    print(
        table(sorted(live, key=lambda r: -r["ratio"])[:8], ["name", "ratio"], {"ratio": "{:.3f}"})
    )

# %% tags=[]
# NBVAL_CHECK_OUTPUT
print("every case of the live grid passes the gradient rule:", summary["failed"] == 0)

# %% [markdown] tags=[]
# The recorded H100 grid (`python -m flashcore backward --record`), bf16 included:

# %% tags=[]
record = (
    read_result("backward", RECORDED_GPU) if RECORDED_GPU in recorded_devices("backward") else None
)
if record is None or "summary" not in record:
    print(
        "no recorded H100 gradient grid yet: run `python -m flashcore backward --record` on the GPU"
    )
else:
    print("recorded on", describe(record))
    print(status_line_for("backward", RECORDED_GPU))
    rs = record["summary"]
    print(
        f"{rs['cases']} cases, {rs['failed']} failed; worst ratio {rs['worst_ratio']:.3f} ({rs['worst_case']})"
    )
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for dtype, color in DTYPE_COLORS.items():
        pts = [(i, r["ratio"]) for i, r in enumerate(record["cases"]) if r["dtype"] == dtype]
        if pts:
            ax.scatter(*zip(*pts), s=8, color=color, label=dtype)
    ax.axhline(1.0, color="k", lw=1, ls="--")
    ax.set(
        xlabel="case",
        ylabel="worst of dQ/dK/dV: error / bound",
        title="gradient rule, recorded grid",
    )
    ax.legend()
    if SAVE_FIGURES:
        save_figure(fig, "07_gradient_grid")
    plt.show()

# %% [markdown] tags=[]
# ## 4. Determinism
#
# The default mode computes dQ in its own pass, so every sum has a fixed order: repeated
# calls must be bitwise identical. The atomic mode's fp32 sums depend on which key tile
# finishes first (on a GPU; the interpreter runs programs in order, so it is reproducible
# there too, and that proves nothing).

# %% tags=[]
det_cases = [AttentionCase(1, 4, 2, 65, 130, 32, "float16", True, "bottom_right")]
if PROFILE == "gpu":
    det_cases = [AttentionCase(2, 16, 4, 2048, 2048, 128, "bfloat16", True)]
det = VB.check_backward_determinism(det_cases, DEVICE, repeats=3)
print(
    table(det, ["name", "repeats", "deterministic_bitwise_identical", "atomic_bitwise_identical"])
)
if record is not None and "determinism" in record:
    print("recorded:")
    print(
        table(
            record["determinism"],
            ["name", "repeats", "deterministic_bitwise_identical", "atomic_bitwise_identical"],
        )
    )

# %% tags=[]
# NBVAL_CHECK_OUTPUT
print(
    "deterministic mode is bitwise reproducible:",
    all(r["deterministic_bitwise_identical"] for r in det),
)

# %% [markdown] tags=[]
# ## 5. Memory against S
#
# Peak device memory of one backward beyond its inputs and outputs (B = 1, H = 8, D = 128,
# bf16, causal): FlashAttention's backward keeps $D$ and the log-sum-exp, $(B, H, S)$ fp32,
# so the extra memory grows linearly; an $S \times S$ buffer would grow it quadratically.

# %% tags=[]
from flashcore.studies import backward_bench as BB

mem = (
    BB.backward_memory(seqlens=(2048, 8192, 32768))
    if PROFILE == "gpu"
    else (record or {}).get("memory")
)
if mem:
    print(table(mem, ["S", "extra_bytes", "tensor_bytes", "s_by_s_bytes_would_be"]))
    growth = mem[-1]["extra_bytes"] / max(1, mem[0]["extra_bytes"])
    print(f"S x{mem[-1]['S'] // mem[0]['S']}: extra memory x{growth:.1f}")
else:
    print("no recorded memory measurement")

# %% [markdown] tags=[]
# ## 6. Speed
#
# The backward alone (`torch.autograd.grad` of one forward's output), B·S = 16K tokens,
# H·D = 2048, TFLOP/s with FLOPs = 2.5 × the forward's (causal counts visible pairs);
# `flashcore_atomic` is the atomic-dQ mode; peers in the same process (FlexAttention in bf16
# at D=128 only). The GPU profile measures `SPEED_SEQLENS` × `SPEED_HEAD_DIMS` live; the CPU
# profile renders the record, which has bf16 and fp16 (D 128, 64, 256; `flex` at bf16 D=128
# only). The figure shows bf16.

# %% tags=[]
if PROFILE == "gpu":
    impls = ["flashcore", "flashcore_atomic", "sdpa_flash", "sdpa_cudnn"] + (
        ["flex"] if FLEX else []
    )
    head_dims = SPEED_HEAD_DIMS if SWEEP == "quick" else [64, 128, 256]
    speed = []
    for shape in BB.backward_shapes(head_dims=head_dims, seqlens=SPEED_SEQLENS):
        speed += BB.bench_backward_shape(shape, impls, reps=20)
    if RECORD:
        print(
            "recorded:",
            write_result(
                "backward_notebook_check",
                {"speed": speed, "grid": summary, "memory": mem, "determinism": det},
                command="notebooks/07_backward.ipynb (PROFILE=gpu)",
            ),
        )
else:
    speed = (record or {}).get("speed", [])
    if record is not None:
        print("recorded on", describe(record))
        print(status_line_for("backward", RECORDED_GPU))
rows = [
    {k: r.get(k) for k in ("dtype", "D", "S", "causal", "impl")}
    | {"TFLOP/s": r.get("tflops", float("nan"))}
    for r in speed
]
print(table(rows, ["dtype", "D", "S", "causal", "impl", "TFLOP/s"], {"TFLOP/s": "{:.0f}"}))
if record is not None and record.get("speed_summary"):
    for key, peers in record["speed_summary"].items():
        print(
            key
            + ": "
            + ", ".join(
                f"x{v['geomean']:.2f} vs {p} ({v['shapes']} shapes)"
                for p, v in sorted(peers.items())
            )
        )

# %% tags=[]
bf16_speed = [r for r in speed if r.get("dtype", "bfloat16") == "bfloat16"]
if bf16_speed:
    speed_fig = bf16_speed
    impls_seen = sorted({r["impl"] for r in speed_fig if "tflops" in r})
    shapes = sorted({(r["D"], r["S"], r["causal"]) for r in speed_fig})
    fig, ax = plt.subplots(figsize=(max(7, 0.55 * len(shapes)), 3.2))
    width = 0.8 / max(1, len(impls_seen))
    for j, impl in enumerate(impls_seen):
        vals = [
            next(
                (
                    r["tflops"]
                    for r in speed_fig
                    if (r["D"], r["S"], r["causal"]) == sh and r["impl"] == impl and "tflops" in r
                ),
                0.0,
            )
            for sh in shapes
        ]
        ax.bar([i + j * width for i in range(len(shapes))], vals, width, label=impl)
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(shapes))],
        [f"D{d} S{s}\n{'causal' if c else 'full'}" for d, s, c in shapes],
        fontsize=8,
    )
    ax.set(ylabel="backward TFLOP/s", title="backward alone, bf16")
    ax.legend(fontsize=8)
    if SAVE_FIGURES and PROFILE == "cpu":  # the figure renders the record, never a live run
        save_figure(fig, "07_backward_speed")
    plt.show()

# %% [markdown] tags=[]
# ## 7. A transformers training step
#
# A random Llama-style model (GQA 8/2, 2 layers) in fp32: one forward, next-token loss and
# backward with `attn_implementation="fc_triton"` (through `torch.ops.flashcore.attention` and
# its registered autograd) and with "sdpa"; each parameter's gradient under the rule against
# the same model in float64, with sdpa's as the same-precision baseline. The loss is a mean of
# B·(S−1) per-token terms, rounded at every addition: it is held to the rule with a floor for
# that summation (`validate.reduction_rule`: ⌈log2 N⌉ + 1 roundings of the mean |term|, a few
# ulps), and its float64 reference is computed in float64 (transformers' own loss casts the
# logits to float32 first).

# %% tags=[]
from flashcore.studies.e2e import compare_training_step

train = compare_training_step(DEVICE, torch.float32)
digits = 6 if PROFILE == "gpu" else 4  # fp32 losses' last digits move with the CPU
print(
    f"loss: flashcore {train['loss']['flashcore']:.{digits}f}, sdpa "
    f"{train['loss']['sdpa']:.{digits}f}, float64 {train['loss']['float64']:.{digits}f}"
)
worst_parameter = f" ({train['worst_parameter']})" if PROFILE == "gpu" else ""
print(
    f"{train['parameters']} parameter gradients, {train['failed']} over the bound; worst ratio "
    f"{live_ratio(train['worst_ratio'], PROFILE)}{worst_parameter}"
)
if record is not None and "training_speed" in record:
    for r in record["training_speed"]:
        print(
            f"recorded bf16 training steps, B{r['batch']} S{r['seqlen']}: flashcore "
            f"{r['tokens_per_s_flashcore']:.0f} tokens/s, sdpa {r['tokens_per_s_sdpa']:.0f}"
        )

# %% tags=[]
# NBVAL_CHECK_OUTPUT
print("a training step's loss and every parameter gradient pass the rule:", train["passed"])

# %% [markdown] tags=[]
# ## 8. Where this stands against the targets
#
# Computed from the recorded H100 run (the CPU profile renders it; nothing below is typed in).
# The targets at D=128, geomean over S ∈ {2K, 4K, 8K, 16K} × {causal, full}: ≥ 1.3×
# SDPA flash and ≥ 1.0× FlexAttention, cuDNN beyond that (the cell below holds it to ≥ 0.9×);
# and a grid with 0 failures. D=64 and D=256 are reported, not held to a target.

# %% tags=[]
if record is not None and "speed" in record:
    import math

    def _ratio(dtype, peer, head_dim=128, impl="flashcore"):
        pairs = {}
        for r in record["speed"]:
            if r.get("dtype") == dtype and r["D"] == head_dim and "tflops" in r:
                pairs.setdefault((r["S"], r["causal"]), {})[r["impl"]] = r["tflops"]
        ratios = [p[impl] / p[peer] for p in pairs.values() if impl in p and peer in p]
        if not ratios:
            return None
        return math.exp(sum(map(math.log, ratios)) / len(ratios)), min(ratios), len(ratios)

    targets = (("sdpa_flash", 1.3), ("flex", 1.0), ("sdpa_cudnn", 0.9))
    for dtype, head_dim in (
        ("bfloat16", 128),
        ("float16", 128),
        ("bfloat16", 64),
        ("bfloat16", 256),
    ):
        for peer, target in targets:
            got = _ratio(dtype, peer, head_dim)
            if got is None:
                print(f"{dtype} D{head_dim} vs {peer}: not measured in this record")
                continue
            verdict = "met" if got[0] >= target else "MISSED"
            what = f"target x{target}: {verdict}" if head_dim == 128 else "reported"
            print(
                f"{dtype} D{head_dim} vs {peer}: geomean x{got[0]:.2f} (worst x{got[1]:.2f}, "
                f"{got[2]} shapes), {what}"
            )
        got = _ratio(dtype, "flashcore", head_dim, impl="flashcore_atomic")
        if got is not None:
            print(
                f"{dtype} D{head_dim} atomic-dQ mode / deterministic default: x{got[0]:.2f} "
                f"(the default is {'faster' if got[0] < 1 else 'slower'})"
            )
    failed = [c for c in record.get("cases", []) if not c["passed"]]
    print(f"gradient grid: {len(failed)} failed of {len(record.get('cases', []))}")
    for c in failed:
        print("  ", c["name"], {g: round(c[g]["ratio"], 3) for g in ("dq", "dk", "dv")})

# %% [markdown] tags=[]
# **Reading it.** In the record of `382853b`: all 438 grid cases pass (fp32 included), the
# default mode is bitwise reproducible, extra memory grows linearly. At D=128 the target
# against SDPA flash (FA2) is met in bf16 (x1.44, worst x1.37) and fp16 (x1.40, worst x1.31),
# so at every one of the 8 shapes in each; the one against FlexAttention is met in bf16 (Flex
# is timed in bf16 only, and barely: x1.05, worst x1.02). The cuDNN bar is **missed**: x0.81
# in bf16 (worst x0.78) and x0.80 in fp16 (worst x0.72), and per shape too: at each of the
# 8 D=128 shapes in both dtypes, flashcore's TFLOP/s in the table above is below 0.9×
# cuDNN's. What made the speed: the launch table comes from timing (`tools/backward_probe.py`, the sweep recorded in
# `backward_tuning.json` at `29013ed`, which `python -m flashcore records` lists as stale:
# the kernel sources changed since, and it was not re-recorded), not offline register
# reports: in that sweep the dK/dV pass at D=128 running one warpgroup (4 warps) per 64×64
# tile, which "spills" by ptxas' report, took about half the time of the 8-warp version that
# split a 64-row tile over two warpgroups.
# The atomic-dQ mode is slower than the deterministic default at every recorded shape (x0.67
# to x0.89 in the geomeans printed above), so determinism costs nothing here. D=256 stays
# below FA2 (x0.78 in bf16 and fp16; x0.52 and x0.53 of cuDNN): its tiles are small (64×64, 8 warps, 1 stage,
# the launch table in `kernels/backward.py`) to fit the registers; no warp specialization or
# pingpong yet.
# The fp32 case that failed before (D=16, GQA 2:1, dK 1.1× the bound) was the order of a sum:
# `tl.dot(a, b, acc)` on fp32 is one FMA chain through acc, so dK was a sequential sum of 478
# products; fed an exact P and O on the GPU the error did not move, and a float64 emulation
# of that order (`tools/backward_fp32_order.py`, since removed: `git show
# f99f966:tools/backward_fp32_order.py`) reproduces it exactly. Summing each tile's
# product first (with a fresh accumulator the compiler cannot fold back into the chain)
# fixes it.
#
# A second fp32 error showed only with many seeds per case (the grid draws one): the
# forward's lse was fp32, whose rounding ($u\,|\mathrm{lse}|$, several ulps at
# $|\mathrm{lse}| \approx 10$) $\exp_2(s - \mathrm{lse})$ hands to every $P$ of a row, where
# PyTorch's softmax normalises and does not pay it. For float32 inputs the lse is now float64
# (`_softmax.lse_dtype`). Under the interpreter, 150 seeds per fp32 case
# (`tools/backward_fp32_seeds.py`, `results/cpu-interpreter/logs/backward_fp32_seeds.log`),
# failing seeds before → after: D16 causal 9 → 2, D32 window 8 → 0, D16 full $S_k$ 70 20 → 2,
# D40 and GQA 4:1 0 → 0. After it the max error is a median 1.02–1.13× PyTorch fp32's own
# (before 1.3–1.5×); the 4 seeds left (dV up to 1.41× the bound) are that parity's tail.
# Which seeds fail depends on the CPU's code path (numpy's fp32 `exp2` under the interpreter
# rounds differently with AVX-512: there the D16 causal case fails at 0 of 400 seeds), so the
# test bounds the rate instead of naming seeds, under the same rule: at most 8 of 300 seeds,
# where the fp32 lse fails 14 (AVX-512) to 16 (AVX2). On the H100 the grid ran after this change
# at commit `3a1d646` and again at `382853b` (the record above): 438 cases, 0 failed both
# times.

# %% [markdown] tags=[]
# ## 9. A Gluon backward for Hopper (opt-in, not yet faster)
#
# `flashcore/kernels/backward_hopper.py` is a second backward written in Gluon for sm_90: one
# program per 128-key block (FA3's orientation), Q and dO streamed through a two-stage TMA
# ring, P and dS staged in shared memory for the wgmma's, dQ accumulated with fp32 atomics;
# D 64/128, fp16/bf16, causal (both alignments), GQA. Windows, softcap, sinks, varlen,
# D 256 and the deterministic mode stay on the Triton backward. It runs only under
# `FLASHCORE_BACKWARD_HOPPER=always`; autograd keeps the Triton backward by default, because
# the record below has it slower. Both profiles render that record (a GPU profile does not
# re-measure it: `python3 tools/backward_hopper_check.py OUT.json` does; the recorded run,
# every 2nd grid case and 2 timing rounds, took 34 s by its `seconds`), with its status line.

# %% tags=[]
hopper_bwd = (
    read_result("backward_hopper_check", RECORDED_GPU)
    if RECORDED_GPU in recorded_devices("backward_hopper_check")
    else None
)
if hopper_bwd is None:
    print("no recorded Gluon backward check: run tools/backward_hopper_check.py on an H100")
else:
    print("recorded on", describe(hopper_bwd))
    print(status_line_for("backward_hopper_check", RECORDED_GPU))
    g = hopper_bwd["grid"]
    print(
        f"gradient grid (every 2nd case of backward_grid('hopper')): {g['cases']} cases, "
        f"{g['failed']} failed; worst ratio {g['worst_ratio']:.3f} ({g['worst_case']})"
    )
    by_shape = {}
    for r in hopper_bwd["speed"]:
        by_shape.setdefault((r["D"], r["S"], r["causal"]), {})[r["impl"]] = r["tflops"]
    print(
        table(
            [
                {
                    "D": d,
                    "S": s,
                    "causal": c,
                    "gluon TFLOP/s": t["gluon"],
                    "triton TFLOP/s": t["triton"],
                    "gluon / triton": t["gluon"] / t["triton"],
                }
                for (d, s, c), t in sorted(by_shape.items())
            ],
            ["D", "S", "causal", "gluon TFLOP/s", "triton TFLOP/s", "gluon / triton"],
            {"gluon TFLOP/s": "{:.0f}", "triton TFLOP/s": "{:.0f}", "gluon / triton": "{:.2f}"},
        )
    )
    ratios = [t["gluon"] / t["triton"] for t in by_shape.values()]
    print(
        f"Gluon / Triton {min(ratios):.2f}-{max(ratios):.2f}; at least as fast at "
        f"{sum(r >= 0.995 for r in ratios)} of {len(ratios)} shapes (to 2 digits)"
    )

# %% [markdown] tags=[]
# **Reading it.** The Gluon backward is correct on the grid it was run on (120 cases, 0
# failed, worst ratio 0.870) and slower than the Triton backward it would replace at every
# one of the 12 recorded shapes: Gluon / Triton 0.83–0.95.
# Where the time goes is not yet measured (no Nsight profile of it has run). What is known
# offline: ptxas gives the D=128 kernel 255 registers with no spills and the D=64 one 196
# (`tests/test_backward_hopper.py` compiles both for sm_90 on any machine and prints the
# counts). Untested hypotheses for the gap: barriers the compiler inserts around each TMA issue
# (there is no producer warp), and 16 predicated fp32 atomic adds per key step for dQ where
# FA3 and FA4 reduce dQ through shared memory and TMA. Against FlashAttention-4's Hopper
# backward, the peer the goal names, it has not been measured.
