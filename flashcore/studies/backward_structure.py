"""Notebook 07's structure figure: who loads, who computes and where dQ is summed, per step of
the backward's inner loop, for the four structures the notebook compares. Drawn from the
kernels' issue order (kernels/backward.py, kernels/backward_hopper.py,
kernels/backward_hopper_ws.py) and from FA3's published
design; the durations are illustrative units, not measurements (notebook 07 section 10 has the
measured profile)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from .fa3_structure import GEMM_UNITS, SOFTMAX_UNITS

# One matmul over a (64 query, 128 key) tile pair at D=128 takes half of fa3_structure's unit
# (its unit is the forward's two GEMMs of one warpgroup's tile); the exponentials of P take
# the forward softmax's SOFTMAX_UNITS, dS = P o (dP - delta) half of that; the dQ partial's
# fp32 add to global memory, a TMA load of the next step's Q and dO, and a shared-memory
# hand-off (P, dS written, one barrier) are short, and drawn so.
MATMUL = GEMM_UNITS / 2
EXP = SOFTMAX_UNITS
DS = SOFTMAX_UNITS / 2
DQ_ADD = 0.35
LOAD = 0.3
HANDOFF = 0.15

COLORS = {
    "mma": "#1f77b4",
    "recompute": "#ff7f0e",
    "elementwise": "#aec7e8",
    "load": "#2ca02c",
    "dq": "#d62728",
    "sync": "#7f7f7f",
    "turn": "#bcbd22",
}
LEGEND = {
    "mma": "matmul (wgmma / tl.dot)",
    "recompute": "matmul a second kernel repeats",
    "elementwise": "P = exp2(...), dS = P (dP - delta)",
    "load": "loads of Q, dO, lse, delta",
    "dq": "dQ summed into fp32 global memory",
    "sync": "shared-memory hand-off + barrier",
    "turn": "deterministic mode: wait for the dQ tile's turn",
}


def _serial(lane, ops, t0=0.0):
    """Bars of ops run one after another on one lane: [(label, length, kind)] -> bars, end."""
    bars, t = [], t0
    for label, length, kind in ops:
        bars.append((lane, t, length, label, kind))
        t += length
    return bars, t


def triton_deterministic(steps: int = 3):
    """Today's default (kernels/backward.py): one warpgroup per program, FA2's order, in two
    kernels. The dK/dV kernel walks the query tiles of its key block (S, P, dP, dS, dV, dK);
    then the dQ kernel walks the key tiles of its query block and recomputes S, P, dP and dS
    for dQ: seven matmuls per tile pair, two of them repeated, dQ written once, in order
    (deterministic)."""
    step = [
        ("S", MATMUL, "mma"),
        ("P", EXP, "elementwise"),
        ("dP", MATMUL, "mma"),
        ("dS", DS, "elementwise"),
        ("dV", MATMUL, "mma"),
        ("dK", MATMUL, "mma"),
    ]
    bars, t = _serial("dK/dV kernel (1 warpgroup)", step * steps)
    redo = [
        ("S", MATMUL, "recompute"),
        ("P", EXP, "elementwise"),
        ("dP", MATMUL, "recompute"),
        ("dS", DS, "elementwise"),
        ("dQ", MATMUL, "mma"),
    ]
    more, _ = _serial("dQ kernel (1 warpgroup)", redo * steps, t)
    return bars + more


def _five_matmul_step(j, t, cuda_lane):
    """One step of a five-matmul backward from time ``t``: S and dP on the tensor cores, P's
    exponentials (overlapping dP) and dS on ``cuda_lane``, the shared-memory hand-off, then
    dV, dK and dQ. Returns the bars and when the last matmul ends."""
    s_end = t + MATMUL
    bars = [("tensor cores", t, MATMUL, f"S{j}", "mma"),
            ("tensor cores", s_end, MATMUL, f"dP{j}", "mma"),
            (cuda_lane, s_end, EXP, f"P{j}", "elementwise")]  # fmt: skip
    ds_start = s_end + max(EXP, MATMUL)  # dS needs P and dP
    bars.append((cuda_lane, ds_start, DS, f"dS{j}", "elementwise"))
    bars.append((cuda_lane, ds_start + DS, HANDOFF, "", "sync"))
    m_start = ds_start + DS + HANDOFF
    for k, name in enumerate(("dV", "dK", "dQ")):
        bars.append(("tensor cores", m_start + k * MATMUL, MATMUL, f"{name}{j}", "mma"))
    return bars, m_start + 3 * MATMUL


def gluon_first_version(steps: int = 3):
    """kernels/backward_hopper.py: FA3's orientation with no warp specialization. Both
    warpgroups run the same phases at once (they split the key block), so the tensor cores
    wait while they compute P and dS, hand them over through shared memory, and add dQ with
    atomics; the next step's Q/dO copy is issued by the same warps at the top of the step
    (it overlaps the step). Five matmuls a pair, none repeated."""
    bars, t = [], 0.0
    for j in range(steps):
        bars.append(("TMA (issued by the consumers)", t, LOAD, f"Q,dO {j + 1}", "load"))
        step, a_start = _five_matmul_step(j, t, "warpgroups 0+1 (CUDA cores)")
        bars += step
        bars.append(("warpgroups 0+1 (CUDA cores)", a_start, DQ_ADD, "atomics", "dq"))
        t = a_start + DQ_ADD
    return bars


def fa3_structure(steps: int = 3):
    """FA3's Hopper backward (hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp, FA4's flash_bwd_sm90):
    a producer warp keeps Q, dO, lse and delta a few steps ahead in a shared-memory ring; the
    consumer warpgroups issue S and dP back to back and the next step's S while this step's
    dV, dK and dQ matmuls retire; the dQ partial goes to shared memory and a dQ-writer warp
    adds it to the fp32 dQ buffer (TMA reduce-add) while the consumers go on. The tensor
    cores still wait for P and dS within a step; the loads and the dQ add leave their path."""
    bars, t, starts = [], 0.0, []
    for j in range(steps):
        starts.append(t)
        step, dq_done = _five_matmul_step(j, t, "consumer warpgroups (CUDA cores)")
        bars += step
        bars.append(("dQ-writer warp (TMA reduce-add)", dq_done, DQ_ADD, f"dQ{j} add", "dq"))
        t = dq_done  # the next S issues behind this step's matmuls; the add runs aside
    # The ring runs a step ahead: step j's Q and dO land before step j starts.
    loads = [
        ("producer warp (TMA)", start - LOAD - 0.2, LOAD, f"Q,dO {j}", "load")
        for j, start in enumerate(starts)
    ]
    return loads + bars


TURN = 0.2  # the deterministic mode's wait for a tile's turn (drawn short: it varies)


def _swapped_step(j, t, cuda_lane):
    """One step of the warp-specialized kernel's swapped order (S^T, dP^T): P^T stays in
    registers and is the A operand of dV at once, so dV runs on the tensor cores while dS^T
    is computed; only dS^T is handed over through shared memory, for dQ; then dQ and dK.
    Returns the bars and when the last matmul ends."""
    s_end = t + MATMUL
    bars = [("tensor cores", t, MATMUL, f"S{j}", "mma"),
            ("tensor cores", s_end, MATMUL, f"dP{j}", "mma"),
            (cuda_lane, s_end, EXP, f"P{j}", "elementwise")]  # fmt: skip
    p_end, dp_end = s_end + EXP, s_end + MATMUL
    dv_start = max(p_end, dp_end)  # dV issued once P^T is in registers
    bars.append(("tensor cores", dv_start, MATMUL, f"dV{j}", "mma"))
    bars.append((cuda_lane, dv_start, DS, f"dS{j}", "elementwise"))  # needs P and dP
    bars.append((cuda_lane, dv_start + DS, HANDOFF, "", "sync"))
    m_start = max(dv_start + DS + HANDOFF, dv_start + MATMUL)
    for k, name in enumerate(("dQ", "dK")):
        bars.append(("tensor cores", m_start + k * MATMUL, MATMUL, f"{name}{j}", "mma"))
    return bars, m_start + 2 * MATMUL


def warp_specialized(steps: int = 3, deterministic: bool = True):
    """kernels/backward_hopper_ws.py: FA3's division of labour. A loader warp keeps Q and dO
    (with lse and delta) a step ahead in a 2-stage TMA ring; the consumer warpgroups run the
    swapped five-matmul step (``_swapped_step``), after a CTA barrier the compiler puts at the
    top of each step; a dQ-writer warp adds each step's dQ tile with one TMA reduce-add, from
    one of two shared buffers. In the deterministic mode (the default where dispatched) the
    writer first waits for the tile's turn (the key blocks above this one have added theirs),
    and passes the turn on once its add has landed; the consumers go on meanwhile, until they
    need that buffer again, two steps later."""
    bars, t, starts, writer_free = [], 0.0, [], 0.0
    for j in range(steps):
        bars.append(("consumer warpgroups (CUDA cores)", t, HANDOFF, "", "sync"))
        t += HANDOFF
        starts.append(t)
        step, dq_done = _swapped_step(j, t, "consumer warpgroups (CUDA cores)")
        bars += step
        w = max(dq_done, writer_free)
        if deterministic:
            bars.append(("dQ-writer warp (TMA reduce-add)", w, TURN, "", "turn"))
            w += TURN
        bars.append(("dQ-writer warp (TMA reduce-add)", w, DQ_ADD, f"dQ{j} add", "dq"))
        writer_free = w + DQ_ADD
        t = dq_done
    loads = [
        ("loader warp (TMA)", start - LOAD - 0.2, LOAD, f"Q,dO {j}", "load")
        for j, start in enumerate(starts)
    ]
    return loads + bars


STRUCTURES = (
    ("the Triton backward: two kernels, deterministic (the default at D256 and short S)",
     triton_deterministic),
    ("flashcore's Gluon backward, first version (a study): no warp specialization",
     gluon_first_version),
    ("flashcore's warp-specialized Gluon backward, deterministic mode (the default from S 2K "
     "at D128): S^T, P^T in registers for dV", warp_specialized),
    ("FA3's structure (FA4's sm90 port): producer warp, consumers, dQ-writer warp",
     fa3_structure),
)  # fmt: skip


def timeline_figure(steps: int = 3):
    """Four panels, one per structure, on one time axis (schematic units)."""
    fig, axes = plt.subplots(
        len(STRUCTURES), 1, figsize=(11, 9.8), sharex=True,
        gridspec_kw={"height_ratios": [2, 3, 4, 4]},
    )  # fmt: skip
    for ax, (title, build) in zip(axes, STRUCTURES):
        bars = build(steps)
        lanes = list(dict.fromkeys(lane for lane, *_ in bars))
        for lane, start, length, label, kind in bars:
            y = lanes.index(lane)
            ax.barh(y, length, left=start, color=COLORS[kind], edgecolor="white")
            if label:
                ax.text(start + length / 2, y, label, ha="center", va="center", fontsize=6.5)
        ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10, loc="left")
    axes[-1].set_xlabel(
        "time (schematic units: one 64x128 matmul at D=128 = 0.5; issue order from the "
        "kernels, durations not measured)"
    )
    fig.legend(
        handles=[Patch(color=COLORS[k], label=v) for k, v in LEGEND.items()],
        fontsize=7.5, loc="lower center", ncol=3,
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
