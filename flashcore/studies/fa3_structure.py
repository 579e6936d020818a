"""Notebook 03's section on the Gluon Hopper kernel (kernels/forward_hopper.py): the timeline
of its schedule, drawn from the kernel's issue order (not from measurements), and tables of
the recorded Nsight Compute profile and variant sweep."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

# Relative durations for the schematic only: one warpgroup's two GEMMs of a key tile
# (S = Q K^T and P V, 64 x 128 x 128 each at D=128) take 1 unit on the tensor cores; its
# softmax of the tile (64 x 128 exponentials on 16 MUFU lanes per SM, plus max/sum) about
# half of that, the ratio notebook 03's earlier text derives from the H100's rates.
GEMM_UNITS = 1.0
SOFTMAX_UNITS = 0.5


def schedule(n_tiles: int = 4, num_wg: int = 2, pingpong: bool = True):
    """(lane, start, length, label, kind) bars of the kernel's issue order.

    Per warpgroup and key tile j: the tensor cores run S_j = Q K_j^T and O += P_{j-1} V_{j-1}
    (issued together, asynchronously), then the warpgroup's softmax of S_j runs while its
    P V finishes and while the other warpgroup's GEMMs hold the tensor cores. With ping-pong,
    the warpgroups take turns issuing (one mbarrier per warpgroup passes the turn); without,
    each issues as soon as its softmax is done and the two compete for the tensor cores."""
    bars = []
    tensor_free = 0.0
    ready = [0.0] * num_wg  # when each warpgroup's softmax of the last tile is done
    for j in range(n_tiles + 1):  # the last step is the final P V alone
        for wg in range(num_wg):
            start = max(tensor_free, ready[wg])
            length = GEMM_UNITS if 0 < j < n_tiles else GEMM_UNITS / 2
            label = "S0" if j == 0 else (f"P{j - 1}V" if j == n_tiles else f"S{j} + P{j - 1}V")
            bars.append((f"tensor cores (wg {wg})", start, length, label, f"gemm{wg}"))
            tensor_free = start + length if pingpong else start + length / num_wg
            if j < n_tiles:
                s_done = start + (GEMM_UNITS / 2 if j > 0 else length)  # S_j retires first
                bars.append(
                    (f"softmax (wg {wg})", s_done, SOFTMAX_UNITS, f"softmax S{j}", f"softmax{wg}")
                )
                ready[wg] = s_done + SOFTMAX_UNITS
    for j in range(n_tiles):
        bars.append(
            ("producer warp (TMA)", j * (GEMM_UNITS * num_wg) - 0.9, 0.6, f"K{j} V{j}", "tma")
        )
    return bars


def timeline_figure(n_tiles: int = 4):
    """Two-panel schematic: FA2's serial order (today's Triton kernel) against the Gluon
    kernel's producer / two-consumer ping-pong schedule."""
    colors = {
        "gemm0": "#1f77b4",
        "gemm1": "#9467bd",
        "softmax0": "#aec7e8",
        "softmax1": "#c5b0d5",
        "tma": "#2ca02c",
        "fa2gemm": "#1f77b4",
        "fa2soft": "#aec7e8",
    }
    fig, axes = plt.subplots(
        2, 1, figsize=(10, 5.2), sharex=True, gridspec_kw={"height_ratios": [1, 2.2]}
    )
    # FA2 order: one warpgroup's 128-row tile per program, GEMMs and softmax one after another.
    t = 0.0
    ax = axes[0]
    for j in range(n_tiles):
        ax.barh(0, 2 * GEMM_UNITS, left=t, color=colors["fa2gemm"], edgecolor="white")
        ax.text(
            t + GEMM_UNITS, 0, f"S{j}, P{j}V", ha="center", va="center", fontsize=7, color="white"
        )
        t += 2 * GEMM_UNITS
        ax.barh(0, 2 * SOFTMAX_UNITS, left=t, color=colors["fa2soft"], edgecolor="white")
        t += 2 * SOFTMAX_UNITS
    ax.set_yticks([0], ["one program\n(FA2 order)"])
    ax.set_title("FA2 order: the tensor cores wait during every softmax", fontsize=10, loc="left")
    ax = axes[1]
    bars = schedule(n_tiles)
    lanes = [
        "producer warp (TMA)",
        "tensor cores (wg 0)",
        "softmax (wg 0)",
        "tensor cores (wg 1)",
        "softmax (wg 1)",
    ]
    for lane, start, length, label, kind in bars:
        y = lanes.index(lane)
        ax.barh(y, length, left=start, color=colors[kind], edgecolor="white")
        ax.text(start + length / 2, y, label, ha="center", va="center", fontsize=6.5)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_title(
        "Gluon kernel: TMA producer + two consumer warpgroups, ping-pong", fontsize=10, loc="left"
    )
    ax.set_xlabel("time (schematic units: one warpgroup's GEMM pair = 1; not measured)")
    ax.legend(
        handles=[
            Patch(color=colors["gemm0"], label="wgmma, warpgroup 0"),
            Patch(color=colors["gemm1"], label="wgmma, warpgroup 1"),
            Patch(color=colors["softmax0"], label="softmax (exp2, max, sum)"),
            Patch(color=colors["tma"], label="TMA loads"),
        ],
        fontsize=7,
        loc="upper right",
        ncol=2,
    )
    fig.tight_layout()
    return fig


def ncu_rows(record: dict) -> list[dict]:
    """One row per profiled kernel: time, tensor-pipe utilization, issue rate, top stalls."""
    rows = []
    for impl, k in record["kernels"].items():
        stalls = sorted(
            ((v or 0.0, s) for s, v in k["stalls_per_issue"].items() if s != "selected"),
            reverse=True,
        )
        rows.append(
            {
                "impl": impl,
                "kernel": k["kernel"][:40],
                "us": k["duration_ns"] / 1e3,
                "tensor_pipe_pct": k["tensor_pipe_pct_of_peak_active"],
                "issue_per_cycle": k["issue_active_per_cycle"],
                "regs": k["registers_per_thread"],
                "grid": k["grid_size"],
                "threads": k["block_size"],
                "top_stalls": ", ".join(f"{s} {v:.2f}" for v, s in stalls[:3]),
            }
        )
    return rows


def attempt_rows(record: dict) -> list[dict]:
    """Per head dim and implementation of the latest sweep: / cuDNN and / Triton ratios."""
    rows = []
    for run in record["runs"]:
        for key, v in run["summary"].items():
            dtype, d, impl, _, base = key.split(" ")
            if base != "cudnn" or impl == "cudnn":
                continue
            vs_triton = run["summary"].get(f"{dtype} {d} {impl} / triton", {})
            rows.append(
                {
                    "commit": run["commit"],
                    "D": d,
                    "impl": impl,
                    "x_cudnn_geomean": v["geomean_2k_16k"],
                    "x_cudnn_worst": v["worst_2k_16k"],
                    "x_cudnn_1k": v["worst_1k"],
                    "x_triton_geomean": vs_triton.get("geomean_2k_16k"),
                }
            )
    return rows
