"""Tables and figures for notebooks 03 (performance) and 06 (constant time), drawn only from
recorded results (results/<gpu>/*.json): the same figure on a laptop as on the GPU."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .bench import geomean, kv_bytes

IMPL_STYLE = {
    "flashcore": ("flashcore", "#d62728", "-"),
    "flashcore_decode": ("flashcore split-KV decode", "#d62728", "-"),
    "sdpa_flash": ("SDPA flash (FA2)", "#1f77b4", "--"),
    "sdpa_cudnn": ("SDPA cuDNN", "#2ca02c", "--"),
    "sdpa_efficient": ("SDPA efficient", "#9467bd", ":"),
    "sdpa_math": ("SDPA math", "#7f7f7f", ":"),
    "flex": ("FlexAttention (compiled)", "#ff7f0e", "-."),
}


def _label(impl):
    return IMPL_STYLE.get(impl, (impl, "k", "-"))[0]


def by_shape(rows):
    """{(dtype, D, S, causal, B, Hq, Hkv, Sk): {impl: row}}"""
    out = defaultdict(dict)
    for r in rows:
        key = (
            r["dtype"],
            r["D"],
            r["S"],
            r["causal"],
            r["B"],
            r["Hq"],
            r.get("Hkv", r["Hq"]),
            r.get("Sk", r["S"]),
        )
        out[key][r["impl"]] = r
    return out


def tflops(row):
    return row.get("tflops") if "timing" in row else None


# ----------------------------------------------------------------------------- forward


def forward_targets(record, dtype, head_dim, min_seqlen=2048):
    """Geometric-mean speedup of flashcore over each peer, S >= min_seqlen, causal and not."""
    shapes = by_shape(record["forward"])
    ratios = defaultdict(list)
    for (dt, d, s, _causal, _b, _h, *_), impls in shapes.items():
        if dt != dtype or d != head_dim or s < min_seqlen or "flashcore" not in impls:
            continue
        ours = tflops(impls["flashcore"])
        for peer, row in impls.items():
            if peer != "flashcore" and tflops(row) and ours:
                ratios[peer].append(ours / tflops(row))
    return {peer: geomean(v) for peer, v in ratios.items()}


def cudnn_targets(record, dtype="bfloat16"):
    """Issue 12's targets from a forward record: per head dim, per shape flashcore's TFLOP/s
    over SDPA cuDNN's (and over the Triton kernel's alone, where it was timed beside), then
    the geomean over S 2K-16K x {causal, full}, the worst of those shapes and the worst at
    S=1K (None where the record has no such shape)."""
    out = {}
    for (dt, d, s, causal, *_), impls in sorted(by_shape(record["forward"]).items()):
        ours, cudnn, triton = (
            tflops(impls[i]) if i in impls else None
            for i in ("flashcore", "sdpa_cudnn", "flashcore_triton")
        )
        if dt != dtype or not ours or not cudnn:
            continue
        shape = {"S": s, "causal": causal, "tflops": ours, "x_cudnn": ours / cudnn,
                 "x_triton": ours / triton if triton else None}  # fmt: skip
        out.setdefault(d, {"shapes": []})["shapes"].append(shape)
    for res in out.values():
        long = [x["x_cudnn"] for x in res["shapes"] if 2048 <= x["S"] <= 16384]
        short = [x["x_cudnn"] for x in res["shapes"] if x["S"] == 1024]
        res["geomean_2k_16k"] = geomean(long) if long else None
        res["worst_2k_16k"] = min(long) if long else None
        res["worst_1k"] = min(short) if short else None
    return out


def forward_table(record, dtype):
    rows = []
    ceiling = record["ceilings"]["matmul"]["tflops"]
    for (dt, d, s, causal, b, h, *_), impls in sorted(by_shape(record["forward"]).items()):
        if dt != dtype or "flashcore" not in impls or not tflops(impls["flashcore"]):
            continue
        ours = tflops(impls["flashcore"])
        row = {
            "D": d,
            "S": s,
            "B": b,
            "H": h,
            "causal": "yes" if causal else "no",
            "flashcore": ours,
            "of_ceiling": ours / ceiling,
        }
        for peer in ("sdpa_flash", "sdpa_cudnn", "flex"):
            t = tflops(impls.get(peer, {}))
            row[f"x_{peer}"] = ours / t if t else float("nan")
        rows.append(row)
    return rows


def plot_tflops_vs_seqlen(record, dtype):
    import matplotlib.pyplot as plt

    shapes = by_shape(record["forward"])
    dims = sorted({k[1] for k in shapes if k[0] == dtype})
    fig, axes = plt.subplots(
        len(dims), 2, figsize=(10, 3.0 * len(dims)), sharex=True, squeeze=False
    )
    ceiling = record["ceilings"]["matmul"]["tflops"]
    for i, d in enumerate(dims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            series = defaultdict(list)
            for (dt, dd, s, c, _b, _h, *_), impls in sorted(shapes.items()):
                if dt == dtype and dd == d and c == causal:
                    for impl, row in impls.items():
                        if tflops(row):
                            series[impl].append((s, tflops(row)))
            for impl, pts in series.items():
                label, color, ls = IMPL_STYLE.get(impl, (impl, "k", "-"))
                xs, ys = zip(*sorted(pts))
                ax.plot(
                    xs,
                    ys,
                    ls,
                    color=color,
                    marker="o",
                    ms=3,
                    label=label,
                    lw=2.2 if impl == "flashcore" else 1.2,
                )
            ax.axhline(ceiling, color="k", lw=0.8, alpha=0.5)
            ax.text(
                xs[0], ceiling * 0.97, f"bf16 matmul ceiling {ceiling:.0f}", va="top", fontsize=7
            )
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, ceiling * 1.05)
            ax.set_title(f"D={d}, {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_ylabel("TFLOP/s")
            if i == len(dims) - 1:
                ax.set_xlabel("sequence length S (B·S = 16K tokens)")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"Forward attention, {dtype}: TFLOP/s vs S (median of rotated-input launches)", fontsize=10
    )
    fig.tight_layout()
    return fig


def plot_speedups(record, dtype):
    import matplotlib.pyplot as plt

    rows = forward_table(record, dtype)
    fig, ax = plt.subplots(figsize=(10, 3.4))
    labels = [f"D{r['D']} S{r['S']}{' c' if r['causal'] == 'yes' else ''}" for r in rows]
    x = np.arange(len(rows))
    for k, peer in enumerate(("sdpa_flash", "sdpa_cudnn", "flex")):
        label, color, _ = IMPL_STYLE[peer]
        ax.bar(
            x + (k - 1) * 0.27,
            [r[f"x_{peer}"] for r in rows],
            0.27,
            color=color,
            label=f"vs {label}",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels, rotation=90, fontsize=6)
    ax.set_ylabel("flashcore speedup (×)")
    ax.legend(fontsize=7, ncol=3)
    ax.set_title(f"flashcore / peer, {dtype}, same run (>1: flashcore faster)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_ceiling_fraction(record):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.0))
    for dtype, marker in (("bfloat16", "o"), ("float16", "s")):
        rows = forward_table(record, dtype)
        if not rows:
            continue
        for causal, color in (("no", "#d62728"), ("yes", "#ff9896")):
            sel = [r for r in rows if r["causal"] == causal]
            ax.scatter(
                [f"D{r['D']} S{r['S']}" for r in sel],
                [r["of_ceiling"] for r in sel],
                marker=marker,
                color=color,
                label=f"{dtype} {'causal' if causal == 'yes' else 'non-causal'}",
                s=18,
            )
    ax.set_ylim(0, 1)
    ax.set_ylabel("flashcore / matmul ceiling")
    ax.tick_params(axis="x", rotation=90, labelsize=6)
    ax.legend(fontsize=7, ncol=4)
    ax.set_title("Fraction of the measured bf16 matmul ceiling (same run)", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- prior regime


def prior_table(record):
    """Per shape: eager µs per launch, CUDA-graph µs per launch, host µs per call, per
    sequence and per head (graph time / B, / (B·H)), for flashcore and each SDPA backend."""
    rows = []
    for (_dt, _d, s, _causal, b, h, *_), impls in sorted(
        by_shape(record["prior_regime"]).items(), key=lambda kv: (kv[0][5], kv[0][2], kv[0][4])
    ):
        for impl, r in impls.items():
            if "timing" not in r:
                continue
            graph_us = r["graph_timing"]["median_ms"] * 1e3
            rows.append(
                {
                    "B": b,
                    "H": h,
                    "S": s,
                    "impl": impl,
                    "eager_us": r["timing"]["median_ms"] * 1e3,
                    "eager_p99_us": r["timing"]["p99_ms"] * 1e3,
                    "graph_us": graph_us,
                    "host_us": r.get("host_us_per_call", float("nan")),
                    "per_seq_us": graph_us / b,
                    "per_head_us": graph_us / (b * h),
                }
            )
    return rows


def prior_verdicts(record):
    """Per shape: is flashcore (graph) at least as fast as the fastest SDPA backend (graph)?"""
    out = []
    for (_dt, _d, s, _causal, b, h, *_), impls in sorted(by_shape(record["prior_regime"]).items()):
        sdpa = [
            r["graph_timing"]["median_ms"]
            for k, r in impls.items()
            if k.startswith("sdpa") and "graph_timing" in r
        ]
        ours = impls.get("flashcore", {}).get("graph_timing", {}).get("median_ms")
        eager_sdpa = [
            r["timing"]["median_ms"]
            for k, r in impls.items()
            if k.startswith("sdpa") and "timing" in r
        ]
        ours_eager = impls.get("flashcore", {}).get("timing", {}).get("median_ms")
        if sdpa and ours:
            out.append(
                {
                    "B": b,
                    "H": h,
                    "S": s,
                    "graph_ratio": min(sdpa) / ours,
                    "eager_ratio": min(eager_sdpa) / ours_eager,
                }
            )
    return out


def plot_latency_distributions(record):
    import matplotlib.pyplot as plt

    shapes = sorted(
        by_shape(record["prior_regime"]).items(), key=lambda kv: (kv[0][5], kv[0][2], kv[0][4])
    )
    impls = ["flashcore", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    pos = 0
    ticks, labels = [], []
    for (_dt, _d, s, _c, b, h, *_), rows in shapes:
        for k, impl in enumerate(impls):
            r = rows.get(impl)
            if not r or "timing" not in r or not r["timing"].get("samples_ms"):
                continue
            samples = np.asarray(r["timing"]["samples_ms"]) * 1e3
            color = IMPL_STYLE[impl][1]
            bp = ax.boxplot(
                [samples],
                positions=[pos + k * 0.8],
                widths=0.6,
                showfliers=False,
                patch_artist=True,
            )
            for patch in bp["boxes"]:
                patch.set_facecolor(color)
                patch.set_alpha(0.5)
            ax.plot(pos + k * 0.8, r["graph_timing"]["median_ms"] * 1e3, "k_", ms=10)
        ticks.append(pos + 1.2)
        labels.append(f"B{b} H{h}\nS{s}")
        pos += 4
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("µs per launch")
    handles = [plt.Rectangle((0, 0), 1, 1, color=IMPL_STYLE[i][1], alpha=0.5) for i in impls]
    ax.legend(
        handles + [plt.Line2D([], [], color="k", marker="_", ls="", ms=10)],
        [_label(i) for i in impls] + ["CUDA-graph replay (GPU time)"],
        fontsize=7,
        ncol=5,
    )
    ax.set_title(
        "Prior reports' regime (fp16, D=64): eager per-launch distribution (box: quartiles, "
        "whiskers 1.5 IQR) and graph replay",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- decode


def decode_table(record):
    copy = record["ceilings"]["copy"]["tbps"]
    rows = []
    for (_dt, _d, _s, _causal, b, h, *_), impls in sorted(
        by_shape(record["decode"]).items(), key=lambda kv: (kv[0][6], kv[0][7], kv[0][4])
    ):
        ours = impls.get("flashcore_decode")
        if not ours or "graph_timing" not in ours:
            continue
        r0 = ours
        row = {
            "B": b,
            "Hq": h,
            "Hkv": r0["Hkv"],
            "cache": r0["Sk"],
            "graph_us": r0["graph_timing"]["median_ms"] * 1e3,
            "eager_us": r0["timing"]["median_ms"] * 1e3,
            "tbps": kv_bytes(r0) / r0["graph_timing"]["median_ms"] / 1e9,
        }
        row["of_copy"] = row["tbps"] / copy
        for peer in ("sdpa_flash", "sdpa_cudnn"):
            p = impls.get(peer)
            row[f"x_{peer}"] = (
                p["graph_timing"]["median_ms"] / r0["graph_timing"]["median_ms"]
                if p and "graph_timing" in p
                else float("nan")
            )
        rows.append(row)
    return rows


def plot_decode(record):
    import matplotlib.pyplot as plt

    copy = record["ceilings"]["copy"]["tbps"]
    shapes = sorted(
        by_shape(record["decode"]).items(), key=lambda kv: (kv[0][6], kv[0][7], kv[0][4])
    )
    fig, ax = plt.subplots(figsize=(10, 3.4))
    x = np.arange(len(shapes))
    impls = ["flashcore_decode", "flashcore", "sdpa_flash", "sdpa_cudnn", "sdpa_math"]
    width = 0.16
    for k, impl in enumerate(impls):
        vals = []
        for _, rows in shapes:
            r = rows.get(impl)
            vals.append(
                kv_bytes(r) / r["graph_timing"]["median_ms"] / 1e9
                if r and "graph_timing" in r
                else 0
            )
        label = "flashcore forward kernel (no split)" if impl == "flashcore" else _label(impl)
        color = "#f7b6d2" if impl == "flashcore" else IMPL_STYLE[impl][1]
        ax.bar(x + (k - 2) * width, vals, width, color=color, label=label)
    ax.axhline(copy, color="k", lw=0.8)
    ax.axhline(0.9 * copy, color="k", lw=0.8, ls=":")
    ax.text(
        -0.5, copy * 1.01, f"copy ceiling {copy:.2f} TB/s (dotted: 90%)", fontsize=7, va="bottom"
    )
    ax.set_xticks(
        x,
        [
            f"B{k[4]} {k[5]}/{r['Hkv']}\n{r['Sk'] // 1024}K"
            for k, rows in shapes
            for r in [rows["flashcore_decode"]]
        ],
        fontsize=7,
    )
    ax.set_ylabel("K+V TB/s (graph replay)")
    ax.legend(fontsize=7, ncol=5, loc="lower right")
    ax.set_title("Decode (q_len 1, bf16, D=128): bytes of K and V over time", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- constant time


def launch_table(record):
    """One line per shape of a launch record: eager and graph microseconds per call of each
    implementation, and flashcore's eager time over SDPA's default (``eager x sdpa``)."""
    by_impl = {(r["shape"], r["impl"]): r for r in record["rows"]}
    rows = []
    for shape in dict.fromkeys(r["shape"] for r in record["rows"]):
        ref = by_impl[(shape, "sdpa default")]
        row = {"shape": shape}
        for impl in dict.fromkeys(r["impl"] for r in record["rows"]):
            r = by_impl.get((shape, impl))
            row[f"{impl} eager"] = r["eager_us_per_call"] if r else None
            row[f"{impl} graph"] = r["graph_us"] if r else None
        row["eager x sdpa"] = row["flashcore eager"] / ref["eager_us_per_call"]
        rows.append(row)
    return rows


def leak_table(record):
    return [
        {
            "kernel": r["kernel"],
            "role": r["role"],
            "class": r["fixed_class"],
            "max_abs_t": r["max_abs_t"],
            "random_us": r["median_us"][0],
            "fixed_us": r["median_us"][1],
            "diff_pct": 100 * (r["median_us"][1] - r["median_us"][0]) / r["median_us"][0],
        }
        for r in record["rows"]
    ]


def plot_leak(record):
    import matplotlib.pyplot as plt

    rows = leak_table(record)
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    classes = list(dict.fromkeys(r["class"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    x = np.arange(len(kernels))
    w = 0.8 / len(classes)
    for k, cls in enumerate(classes):
        t = [
            next((r["max_abs_t"] for r in rows if r["kernel"] == kn and r["class"] == cls), 0)
            for kn in kernels
        ]
        d = [
            next((r["diff_pct"] for r in rows if r["kernel"] == kn and r["class"] == cls), 0)
            for kn in kernels
        ]
        axes[0].bar(x + (k - len(classes) / 2) * w, t, w, label=cls)
        axes[1].bar(x + (k - len(classes) / 2) * w, d, w, label=cls)
    axes[0].axhline(record["threshold"], color="k", lw=0.8)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("max |t| (dudect)")
    axes[1].set_ylabel("median(fixed) - median(random), %")
    axes[1].axhline(0, color="k", lw=0.8)
    for ax in axes:
        ax.set_xticks(
            x,
            [
                k.replace("control: ", "control:\n").replace("hardware reference: ", "reference:\n")
                for k in kernels
            ],
            rotation=90,
            fontsize=6,
        )
    axes[0].legend(fontsize=6, ncol=3)
    fig.suptitle(
        f"Timing test, {record['n_per_class']} launches per class, random vs fixed inputs "
        f"(line: |t| = {record['threshold']})",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def sass_table(report):
    rows = []
    for name, r in report["kernels"].items():
        b, g = r["branches"], r["guarded_memory"]
        rows.append(
            {
                "kernel": name,
                "role": r["role"],
                "instr": r["instructions"],
                "blocks": r["blocks"],
                "br_public": b["public"],
                "br_metadata": b["metadata"],
                "br_sync": b["sync"],
                "br_data": b["data"],
                "mem_public": g["public"],
                "mem_metadata": g["metadata"],
                "mem_data": g["data"],
                "data_addr": r["data_dependent_addresses"],
            }
        )
    return rows


def plot_cfg(ranges, edges, kinds, title):
    """Basic blocks top to bottom (height ~ instructions); edges as arcs, coloured by the
    class of the branch that ends the source block."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    colors = {
        "data": "#d62728",
        "sync": "#1f77b4",
        "metadata": "#9467bd",
        "public": "#2ca02c",
        "none": "#7f7f7f",
    }
    total = ranges[-1][1]
    fig, ax = plt.subplots(figsize=(5, 7))
    for b, (s, e) in enumerate(ranges):
        ax.add_patch(Rectangle((0, s), 1, e - s, facecolor="#eeeeee", edgecolor="k", lw=0.5))
        ax.text(1.05, (s + e) / 2, f"B{b}: {e - s} instr", va="center", fontsize=5)
    for a, b in edges:
        y0, y1 = ranges[a][1], ranges[b][0]
        if b == a + 1:
            continue  # fall-through: adjacent
        side = 0 if y1 < y0 else 1  # back edges on the left, forward on the right
        rad = 0.4 if side == 0 else -0.4
        ax.add_patch(
            FancyArrowPatch(
                (side, y0),
                (side, y1),
                connectionstyle=f"arc3,rad={rad}",
                arrowstyle="->",
                color=colors[kinds[a]],
                lw=1.0,
                mutation_scale=6,
            )
        )
    ax.set_xlim(-0.8, 2.0)
    ax.set_ylim(total, 0)
    ax.axis("off")
    handles = [plt.Line2D([], [], color=c, label=k) for k, c in colors.items() if k != "none"]
    ax.legend(
        handles=handles, fontsize=6, loc="lower right", title="branch predicate", title_fontsize=6
    )
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return fig


# --- Nsight Compute tables (ncu_compare.json): notebooks 03 (forward) and 07 (backward) ---
NCU_FORMATS = {
    "tensor %": "{:.1f}",
    "regs": "{:.0f}",
    "smem KiB": "{:.1f}",
    "threads": "{:.0f}",
    "issue/cyc": "{:.2f}",
}


def top_stalls(kernel, n=3):
    """The n largest stall reasons of an ncu_compare kernel row, warps stalled per issued
    instruction ("selected" is the issuing warp, not a stall); a metric the profile lacks
    counts as 0, so a missing one never breaks the sort."""
    stalls = sorted(
        ((v or 0.0, s) for s, v in kernel["stalls_per_issue"].items() if s != "selected"),
        reverse=True,
    )
    return ", ".join(f"{s} {v:.2f}" for v, s in stalls[:n])


def ncu_kernel_columns(kernel):
    """The columns every ncu table shows for one kernel row (formats: ``NCU_FORMATS``)."""
    return {
        "tensor %": kernel["tensor_pipe_pct_of_peak_active"],
        "regs": kernel["registers_per_thread"],
        "smem KiB": kernel["shared_mem_per_block"] / 1024,
        "threads": kernel["block_size"],
        "issue/cyc": kernel["issue_active_per_cycle"],
        "top stalls per issue": top_stalls(kernel),
    }
