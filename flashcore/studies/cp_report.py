"""Tables and figures for notebook 08 (context parallelism): the zigzag load balance and the
ring's schedule (computed from ``flashcore.parallel``'s own classification), and the
recorded two-GPU run (results/<gpu>-x<N>/context_parallel.json): speed, scaling, what the
transfers add, peak memory and the per-shape targets. Figures are pure functions of their
inputs; the notebook saves them."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .. import parallel as P

# What the speed table and figures show, in this order (colors C0, C1, ...).
SPEED_IMPLS = ("flashcore_cp", "flashcore_1gpu", "torch_cp_cudnn", "torch_cp_flash")
MEMORY_IMPLS = SPEED_IMPLS + ("flashcore_cp_fwd_bwd",)
TABLE_IMPLS = MEMORY_IMPLS + (
    "flashcore_ulysses",
    "torch_cp_cudnn_fwd_bwd",
    "torch_cp_flash_fwd_bwd",
    "flashcore_cp_nocomm",
    "comm_only",
)
OVERLAP_COLUMNS = (
    "S",
    "ring_ms",
    "no_transfers_ms",
    "transfers_alone_ms",
    "comm_to_compute",
    "comm_hidden_fraction",
)


# ---------------------------------------------------------------------------------------
# Sharding and the ring's schedule.


def work_balance(seqlen: int, world_sizes=(2, 4, 8)) -> dict:
    """{(N, sharding): visible (query, key) pairs per rank} for causal attention
    (``parallel.work_per_rank``)."""
    return {
        (n, sharding): P.work_per_rank(seqlen, n, sharding, causal=True)
        for n in world_sizes
        for sharding in ("contiguous", "zigzag")
    }


def plot_work_balance(balance: dict, seqlen: int):
    """One panel per N: each rank's causal work over the mean, contiguous beside zigzag."""
    world_sizes = sorted({n for n, _ in balance})
    fig, axes = plt.subplots(1, len(world_sizes), figsize=(13, 3.4))
    for ax, n in zip(axes, world_sizes):
        for i, sharding in enumerate(("contiguous", "zigzag")):
            work = balance[(n, sharding)]
            mean = sum(work) / n
            ax.bar(
                [r + (i - 0.5) * 0.38 for r in range(n)],
                [w / mean for w in work],
                width=0.38,
                label=f"{sharding} (max/min {max(work) / min(work):.2f})",
            )
        ax.axhline(1, color="k", lw=0.8)
        ax.set(
            title=f"N = {n} ranks, causal, S = {seqlen}", xlabel="rank", ylabel="work / mean work"
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ring_schedule(world_size: int = 4, chunk_rows: int = 8) -> list[dict]:
    """Per rank (causal, zigzag): its chunks, and at each step whose K/V it holds and the
    kinds of block it computes ("masked", "full"; "skip" for none), as the ring classifies
    them (``parallel._block_pairs``)."""
    seqlen = chunk_rows * world_size
    rows = []
    for rank in range(world_size):
        row = {"rank": rank, "chunks": str(P.zigzag_chunks(rank, world_size))}
        for step in range(world_size):
            src = (rank - step) % world_size
            pairs = P._block_pairs(seqlen, world_size, rank, src, "zigzag", True, None)
            kinds = [kind for *_, kind, _ in pairs]
            row[f"step {step}"] = f"K/V of {src}: " + ("+".join(kinds) or "skip")
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------
# The recorded run.


def rows_of(record: dict, impl: str, causal: bool) -> list[dict]:
    """The record's rows of one implementation and mask, by S."""
    return sorted(
        (r for r in record["rows"] if r["impl"] == impl and r["causal"] == causal),
        key=lambda r: r["S"],
    )


def speed_table(record: dict) -> list[dict]:
    """Every timed row, formatted: TFLOP/s (none for comm_only: it moves bytes and does no
    attention), scaling efficiency, and what the ring's transfers add over the same compute
    without them (``ring_overhead``)."""
    out = []
    for r in record["rows"]:
        if r["impl"] not in TABLE_IMPLS:
            continue
        eff, overhead = r.get("scaling_efficiency"), r.get("comm_overhead_fraction")
        out.append(
            {
                **r,
                "tflops": "" if r["tflops"] is None else f"{r['tflops']:.0f}",
                "eff": "" if eff is None else f"{eff:.3f}",
                "ring_overhead": "" if overhead is None else f"{overhead:.3f}",
            }
        )
    return sorted(out, key=lambda r: (r["causal"], r["S"], r["impl"]))


def plot_scaling(record: dict, title: str):
    """Throughput of each implementation, the ring's scaling efficiency against one GPU
    (the 0.90 target dotted), and what the transfers add to the ring, against global S."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for causal, ls in ((False, "-"), (True, "--")):
        mask = "causal" if causal else "full"
        for impl, color in zip(SPEED_IMPLS, ("C0", "C1", "C2", "C3")):
            pts = rows_of(record, impl, causal)
            if pts:
                axes[0].plot(
                    [r["S"] for r in pts],
                    [r["tflops"] for r in pts],
                    ls,
                    color=color,
                    marker="o",
                    ms=3,
                    label=f"{impl} {mask}",
                )
        ring = rows_of(record, "flashcore_cp", causal)
        pts = [r for r in ring if r.get("scaling_efficiency")]
        axes[1].plot(
            [r["S"] for r in pts],
            [r["scaling_efficiency"] for r in pts],
            ls,
            marker="o",
            label="causal (zigzag)" if causal else "full",
        )
        pts = [r for r in ring if r.get("comm_overhead_fraction") is not None]
        axes[2].plot(
            [r["S"] for r in pts],
            [r["comm_overhead_fraction"] for r in pts],
            ls,
            marker="o",
            label=mask,
        )
    axes[0].set(xscale="log", xlabel="global S", ylabel="TFLOP/s (whole group)", title="throughput")
    axes[0].legend(fontsize=7)
    axes[1].axhline(0.9, color="k", lw=0.8, ls=":")
    axes[1].set(
        xscale="log",
        xlabel="global S",
        ylabel="T(1 GPU) / (2 T(2 GPUs))",
        title="scaling efficiency",
        ylim=(0, 1.1),
    )
    axes[1].legend()
    axes[2].set(
        xscale="log",
        xlabel="global S",
        ylabel="(ring - no transfers) / ring",
        title="what the transfers add",
    )
    axes[2].legend()
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig


def plot_peak_memory(record: dict):
    """Peak GiB per GPU against global S (causal), each implementation."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for impl, color in zip(MEMORY_IMPLS, ("C0", "C1", "C2", "C3", "C4")):
        pts = rows_of(record, impl, True)
        if pts:
            ax.plot(
                [r["S"] for r in pts],
                [r["peak_mem_gib"] for r in pts],
                "o-",
                color=color,
                ms=3,
                label=impl,
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="global S (causal)",
        ylabel="peak GiB per GPU",
        title="peak memory per GPU (PyTorch CP: includes the global buffers it shards in place)",
    )
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
    return fig


def target_rows(record: dict) -> list[dict]:
    """Per (S >= 256K, causal): the ring's scaling efficiency (from S = 512K, the target's
    range) and PyTorch CP + cuDNN's time over the ring's (>= 1.0: the ring is as fast), for
    the forward and, where the record timed both, the forward + backward."""
    by = {(r["impl"], r["S"], r["causal"]): r for r in record["rows"]}
    out = []
    for (impl, seqlen, causal), r in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][1])):
        if impl != "flashcore_cp" or seqlen < 1 << 18:
            continue
        tc = by.get(("torch_cp_cudnn", seqlen, causal))
        train = by.get(("flashcore_cp_fwd_bwd", seqlen, causal))
        tc_train = by.get(("torch_cp_cudnn_fwd_bwd", seqlen, causal))
        out.append(
            {
                "S": seqlen,
                "causal": causal,
                "eff": r.get("scaling_efficiency") if seqlen >= 1 << 19 else None,
                "x_torch_cudnn": tc["time_ms"] / r["time_ms"] if tc else None,
                "x_torch_cudnn_fwd_bwd": (
                    tc_train["time_ms"] / train["time_ms"] if train and tc_train else None
                ),
            }
        )
    return out


def _fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def target_table(now: list[dict], before: dict) -> list[dict]:
    """``target_rows`` of the record beside those of an earlier run (``before``: keyed by
    (S, causal)), formatted, with each target's verdict."""
    out = []
    for r in now:
        b = before.get((r["S"], r["causal"]), {})
        out.append(
            {
                "S": r["S"],
                "causal": r["causal"],
                "eff": _fmt(r["eff"]),
                "eff >= 0.90": "-" if r["eff"] is None else r["eff"] >= 0.90,
                "eff (first run)": _fmt(b.get("eff")),
                "x torch_cp_cudnn": _fmt(r["x_torch_cudnn"]),
                ">= 1.0": "-" if r["x_torch_cudnn"] is None else r["x_torch_cudnn"] >= 1.0,
                "x torch (first run)": _fmt(b.get("x_torch_cudnn")),
                "x torch_cp_cudnn fwd+bwd": _fmt(r.get("x_torch_cudnn_fwd_bwd")),
                "fwd+bwd >= 1.0": (
                    "-"
                    if r.get("x_torch_cudnn_fwd_bwd") is None
                    else r["x_torch_cudnn_fwd_bwd"] >= 1.0
                ),
            }
        )
    return out


def fwd_bwd_rows(record: dict) -> list[dict]:
    """Attention forward + backward per (S, mask): flashcore's ring and PyTorch CP + SDPA
    (cuDNN, flash), and PyTorch's time over the ring's (>= 1.0: the ring is as fast)."""
    by = {(r["impl"], r["S"], r["causal"]): r["time_ms"] for r in record["rows"]}
    out = []
    for (impl, seqlen, causal), ring in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][1])):
        if impl != "flashcore_cp_fwd_bwd":
            continue
        row = {"S": seqlen, "causal": causal, "ring_ms": f"{ring:.1f}"}
        for backend in ("cudnn", "flash"):
            theirs = by.get((f"torch_cp_{backend}_fwd_bwd", seqlen, causal))
            row[f"torch_{backend}_ms"] = "-" if theirs is None else f"{theirs:.1f}"
            row[f"x torch_{backend}"] = "-" if theirs is None else f"{theirs / ring:.3f}"
        out.append(row)
    return out


def training_rows(record: dict) -> list[dict]:
    """The block's training step per S: each implementation's time, tokens/s and scaling
    efficiency against one GPU, and flashcore's ring over PyTorch CP + cuDNN in tokens/s
    (>= 1.0: the ring trains as fast)."""
    out = []
    by_s = {}
    for r in record["rows"]:
        by_s.setdefault(r["S"], {})[r["impl"]] = r
    for seqlen, rows in sorted(by_s.items()):
        ring, cudnn = rows.get("flashcore_ring"), rows.get("torch_cp_cudnn")
        for impl, r in rows.items():
            # Efficiency is against flashcore's one-GPU step: flashcore's strategies only.
            eff = r.get("scaling_efficiency") if impl.startswith("flashcore") else None
            out.append(
                {
                    "S": seqlen,
                    "impl": impl,
                    "time_ms": f"{r['time_ms']:.1f}",
                    "tokens/s": f"{r['tokens_per_s']:,.0f}",
                    "eff": "" if eff is None else f"{eff:.3f}",
                    "peak_gib": r["peak_gib"],
                    "ring / torch_cp_cudnn": (
                        f"{ring['tokens_per_s'] / cudnn['tokens_per_s']:.3f}"
                        if impl == "flashcore_ring" and cudnn
                        else ""
                    ),
                }
            )
    return out
