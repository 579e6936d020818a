"""Which kernel serves a call: the forward's Triton/Gluon table and the backward's override.

``flashcore/interface.py`` asks ``forward_kernel`` before each forward launch (and
``parallel.py`` before each ring block) and ``fp8_kernel`` before each fp8 launch;
``python -m flashcore info`` prints the tables (``describe_dispatch``,
``describe_fp8_dispatch``, ``describe_backward_dispatch``). The tables are data measured on
the H100, with the measurement beside each, except where a comment says an entry was measured
on an H200 (D=64 causal's forward threshold; the backward tables, from an H200 record); the
environment overrides exist for tests and sanitizer runs.
"""

from __future__ import annotations

import os

from .kernels import backward_hopper_ws as _backward_hopper_ws
from .kernels import forward_hopper as _hopper

# ------------------------------------------------------------------- dispatch table
# Which forward kernel serves a call of flashcore.attention (and a context-parallel block).
# (head dim, causal) -> the shortest sequence (min of Sq, Sk) from which the Gluon kernel
# was measured faster than forward.py's Triton kernel; None: never. H100, bf16, B*S = 16K
# tokens, H*D = 2048, interleaved timing (tools/gpu_forward_hopper.py, commit 2c03bb9, the
# kernel as shipped: pairs of query tiles, persistent grid), TFLOP/s Gluon vs Triton:
#   D=64  full   S=2K 409 vs 430, S=4K 429 vs 427, S=16K 438 vs 430 (within noise: Triton)
#   D=64  causal S=4K 385 vs 387, S=8K 418 vs 413, S=16K 435 vs 426 (within noise: Triton)
#   D=128 full   S=1K 502 vs 463 ... S=16K 623 vs 508
#   D=128 causal S=1K 334 vs 266 (357 in an earlier run), S=2K 469 vs 433 ... S=16K 611 vs 499
#   D=256 full   S=1K 504 vs 425 ... ;  causal S=1K 354 vs 317 ... S=16K 710 vs 490
# Single-tile non-causal work units do not change this (branch forward-single-tiles, 05d8363,
# its Gluon GPU tests passing; logs/forward_single_tiles_ab_05d8363.json, A/B against 0099be1,
# both forced onto Gluon, 3 rounds: 0.98-1.02 at D 64/128/256 x S 2K/8K/16K), and D=64 on Gluon
# stays level with Triton with two consumer warpgroups (logs/d64_gluon_sweep_05d8363.json: S=8K
# full 435 vs 435, 16K 446 vs 442; S=1K 368 vs 398). A 530 TFLOP/s at D=64 S=8K that an older
# note credited to single tiles (f38c623) is not reproduced by them.
# D=64 with three consumer warpgroups (forward_hopper.VARIANTS[64], 192-row tiles), commit
# b391df4, 3 rotated rounds (logs/d64_gluon_sweep_b391df4.json), Gluon vs Triton:
#   D=64  full   S=2K 400 vs 428, S=4K 458 vs 420, S=8K 454 vs 411, S=16K 451 vs 427
#   D=64  causal S=4K 368 vs 389, S=8K 411 vs 412, S=16K 455 vs 423
# D=64 causal moved from 16K to 4K on an H200 (no H100 lent since 2026-11-28): after the
# softmax step's one compare per masked score (d2a5f9d) and P converted in pairs (1e7d429),
# commit dd61c18, 3 rotated rounds (logs/d64_gluon_sweep_dd61c18.json, H200), Gluon vs Triton:
#   D=64  full   S=1K 342 vs 393, S=2K 408 vs 427, S=4K 481 vs 425 (unchanged: from 4K)
#   D=64  causal S=1K 152 vs 316, S=2K 246 vs 380, S=4K 400 vs 386, S=8K 445 vs 407,
#                S=16K 490 vs 422
# D=192 is MLA's pair (v 128; the only D_v != D the Gluon kernel computes), measured at
# commit 98e26a3 (tools/gpu_forward_hopper.py --head-dims 192/128, H = 16, bf16, 3 rounds;
# logs/mla_forward_probe_98e26a3.json), TFLOP/s Gluon vs Triton:
#   D=192 full   S=1K 563 vs 167, S=4K 700 vs 179, S=16K 740 vs 197
#   D=192 causal S=1K 394 vs 182, S=4K 626 vs 236, S=16K 712 vs 246
# and below 1K at commit 4e9f906 (--seqlens 128,256,512; logs/mla_forward_probe_short_4e9f906.json):
#   D=192 full   S=128 150 vs 95 (pers 139), S=256 251 vs 121, S=512 417 vs 144
#   D=192 causal S=128 70 vs 65, S=256 134 vs 103, S=512 237 vs 144
# S=128 is the shortest measured: shorter calls stay on the Triton kernel.
# D=64 full and D=128 causal moved to 1K on an H200 after the output tile's store by the copy
# engine (forward_hopper.O_TMA_FOR, commit 9ba1831, 3 rotated rounds,
# logs/dispatch_probe_9ba1831.json), TFLOP/s Gluon vs Triton:
#   D=64  full   S=1K 419 vs 397, S=2K 452 vs 430
#   D=64  causal S=1K 159 vs 317, S=2K 244 vs 374 (unchanged: from 4K)
#   D=128 causal S=1K 441 vs 350 (cuDNN 442)
# Calls the Gluon kernel cannot compute (``forward_hopper.supports``: windows, softcap,
# float32, other head dims or pairs, non-TMA strides, not Hopper) and calls with an explicit
# ``config`` always run the Triton kernel.
FORWARD_GLUON_FROM = {
    (64, False): 1024,
    (64, True): 4096,
    (128, False): 1024,
    (128, True): 1024,
    (256, False): 1024,
    (256, True): 1024,
    (192, False): 128,
    (192, True): 128,
}


def _forward_mode() -> str:
    """``FLASHCORE_FORWARD_HOPPER``: ``auto`` (the table), ``always`` (every call the Gluon
    kernel supports: tests and sanitizer runs) or ``never`` (the Triton kernel only)."""
    mode = os.environ.get("FLASHCORE_FORWARD_HOPPER", "auto")
    if mode not in ("auto", "always", "never"):
        raise ValueError(
            f"FLASHCORE_FORWARD_HOPPER must be 'auto', 'always' or 'never', got {mode!r}"
        )
    return mode


def forward_kernel(q, k, v, *, causal: bool, window=None, softcap=None, sinks=None) -> str:
    """``"gluon"`` or ``"triton"``: the forward kernel ``flashcore.attention`` runs these
    (validated) inputs on. Softcap runs on the Triton kernel only; sinks run on both."""
    mode = _forward_mode()
    if mode == "never" or softcap is not None or not _hopper.supports(q, k, v, window=window):
        return "triton"
    if mode == "always":
        return "gluon"
    threshold = FORWARD_GLUON_FROM.get((q.shape[3], bool(causal)))
    if threshold is not None and min(q.shape[2], k.shape[2]) >= threshold:
        return "gluon"
    return "triton"


# ------------------------------------------------------------------- fp8 dispatch
# Which kernel serves flashcore.fp8_attention: (head dim, causal) -> the shortest sequence
# (min of Sq, Sk) from which the Gluon forward's FP8 mode (forward_hopper.attention_hopper_fp8,
# at its FP8_VARIANTS config) was measured faster than kernels/fp8.py's Triton kernel; None:
# never. H100, per block + Hadamard inputs, B*S = 16K tokens, H*D = 2048, commit b45f4b3
# (tools/fp8_hopper_probe.py; logs/fp8_hopper_probe_b45f4b3.json, D128 twice), TFLOP/s Gluon
# vs Triton fp8:
#   D=64  full   S=4K 466 vs 544, S=16K 496 vs 566 (3 warpgroups 474 / 520: still slower)
#   D=64  causal S=4K 406 vs 469, S=16K 478 vs 487
#   D=128 full   S=4K 792-806 vs 757-764, S=8K 820-825 vs 752-793, S=16K 861-862 vs 750-751
#   D=128 causal S=4K 669-676 vs 653-669, S=8K 756-761 vs 645-658, S=16K 803-838 vs 672-686
#   D=256 full   S=4K 1062 vs 815, S=8K 1177 vs 861, S=16K 1176 vs 865
#   D=256 causal S=4K 886 vs 684, S=8K 1022 vs 690, S=16K 1182 vs 773
# S=4K is the shortest measured: shorter calls stay on the Triton kernel until measured.
FP8_GLUON_FROM = {
    (64, False): None,
    (64, True): None,
    (128, False): 4096,
    (128, True): 4096,
    (256, False): 4096,
    (256, True): 4096,
}


def _fp8_mode() -> str:
    """``FLASHCORE_FP8_HOPPER``: ``auto`` (``FP8_GLUON_FROM``), ``always`` (every call the
    FP8 mode supports: tests and sanitizer runs) or ``never`` (the Triton fp8 kernel only)."""
    mode = os.environ.get("FLASHCORE_FP8_HOPPER", "auto")
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"FLASHCORE_FP8_HOPPER must be 'auto', 'always' or 'never', got {mode!r}")
    return mode


def fp8_kernel(x, *, causal: bool) -> str:
    """``"gluon"`` or ``"triton"``: the kernel ``flashcore.fp8_attention`` runs quantized
    inputs ``x`` on (calls with an explicit ``config`` always run the Triton kernel)."""
    mode = _fp8_mode()
    if mode == "never" or not _hopper.supports_fp8(x):
        return "triton"
    if mode == "always":
        return "gluon"
    threshold = FP8_GLUON_FROM.get((x.q8.shape[3], bool(causal)))
    if threshold is not None and min(x.q8.shape[2], x.seqlen_k) >= threshold:
        return "gluon"
    return "triton"


def describe_dispatch() -> str:
    """The dispatch table in one line, for ``python -m flashcore info``."""
    if not _hopper.GLUON_AVAILABLE:
        return (
            "unavailable (this triton has no Gluon Hopper API): every call runs the Triton kernel"
        )
    rules = ", ".join(
        f"D{d} {'causal' if c else 'full'}: " + (f"S>={t}" if t else "never")
        for (d, c), t in FORWARD_GLUON_FROM.items()
    )
    return (
        f"Gluon FA3-structured kernel on sm_90, fp16/bf16 ({_forward_mode()}): {rules} "
        "(D192: v 128, MLA); other v head dims != q/k's: Triton"
    )


def describe_fp8_dispatch() -> str:
    """The fp8 table in one line, for ``python -m flashcore info``."""
    if not _hopper.GLUON_AVAILABLE:
        return "kernels/fp8.py's Triton kernel (this triton has no Gluon Hopper API)"
    rules = ", ".join(
        f"D{d} {'causal' if c else 'full'}: " + (f"S>={t}" if t else "never")
        for (d, c), t in FP8_GLUON_FROM.items()
    )
    return f"Gluon FP8 mode on sm_90 ({_fp8_mode()}): {rules}; else kernels/fp8.py's Triton kernel"


# ------------------------------------------------------------------- backward
# Which backward serves flashcore.attention's autograd: the warp-specialized Gluon backward
# (kernels/backward_hopper_ws.py: sm_90, fp16/bf16, D64/128/256, fp32 dQ by TMA reduce-add)
# where it supports the call and the tables below say it was measured faster than the Triton
# backward (kernels/backward.py, deterministic: dQ in a pass of its own), else the Triton one.
# Both modes of the Gluon kernel are measured against the Triton default: bf16, B*S = 16K
# tokens, H*D = 2048, 3 alternating rounds in one process, the whole backward (preprocess,
# kernel, dQ conversion), TFLOP/s (tools/backward_hopper_check.py --kernel ws_modes, its rows
# in the record BACKWARD_TABLES_RECORD names; notebook 07 prints them beside these tables).
# A mode runs from the shortest sequence (min of Sq, Sk) at which it beat the Triton backward
# at every longer length, by 3% or more: (head dim, causal) -> S (``tables_from_record``
# derives all three tables from the record's rows; a test holds them to it).
# The default (deterministic=True) stays bitwise reproducible whichever kernel runs.
BACKWARD_GLUON_DETERMINISTIC_FROM = {
    (64, False): 8192,
    (64, True): 2048,
    (128, False): 2048,
    (128, True): 2048,
    (256, False): 2048,
    (256, True): 2048,
}
# deterministic=False: the atomic mode, by the same rule, where the ordered mode (below) does
# not run instead (D64 full: the atomic mode at 2K and 4K, the ordered one from 8K; D64
# causal, D128: the ordered mode from 2K). Elsewhere deterministic=False runs the Triton
# deterministic mode, faster than its own atomic mode at every shape of backward.json.
# (The record of ba42563, the D64 dQ split by rows (backward_hopper_ws.DQ_SPLIT_ROWS_FOR),
# moved D64 causal onto the ordered mode, now 1.010-1.021x the atomic one, and D64 full's
# atomic start from 4K to 2K; D128, whose kernel did not change, moved full from 4K to 2K on
# the ordered mode: 2K ordered / atomic 1.010 against 0.994 at e0ca4cc, inside the noise
# between records; logs/backward_ws_modes_*.log.)
BACKWARD_GLUON_FROM = {
    (64, False): 2048,
    (256, False): 2048,
    (256, True): 2048,
}
# deterministic=False asks for no order and forbids none: where the ordered mode beat the
# atomic one at every longer length, it runs instead. It pays for its order where many key
# blocks start on the same query tile at once (D64 full at short S; D256, whose 64-key
# programs are twice as many per query tile), and gains where atomic adds contend (D128).
BACKWARD_ORDERED_FOR_ATOMIC_FROM = {
    (64, False): 8192,
    (64, True): 2048,
    (128, False): 2048,
    (128, True): 2048,
}
BACKWARD_TABLES_MARGIN = 1.03  # "by 3% or more" against the Triton backward


def tables_from_record(speed_rows: list[dict]) -> tuple[dict, dict, dict]:
    """The three tables above, from a ws_modes record's speed rows (impl ``gluon_ws_det``,
    ``gluon_ws``, ``triton``; D, S, causal, tflops): for each (D, causal), the shortest S from
    which a mode beat the other at every longer S of the record (absent: never). An atomic
    entry from an S at which the ordered mode runs instead is never reached, and is left out:
    its S moved with the noise between records (D64 full: 4K, 16K, then never) and nothing
    ran differently."""
    tflops = {(r["impl"], r["D"], r["causal"], r["S"]): r["tflops"] for r in speed_rows}
    keys = sorted({(d, c) for _, d, c, _ in tflops})

    def first_s(impl, other, margin):
        table = {}
        for d, c in keys:
            lengths = sorted(s for i, dd, cc, s in tflops if (i, dd, cc) == (impl, d, c))
            beats = [tflops[(impl, d, c, s)] >= margin * tflops[(other, d, c, s)] for s in lengths]
            start = next((i for i in range(len(beats)) if all(beats[i:])), None)
            if start is not None:
                table[(d, c)] = lengths[start]
        return table

    ordered = first_s("gluon_ws_det", "gluon_ws", 1.0)
    atomic = {
        key: s
        for key, s in first_s("gluon_ws", "triton", BACKWARD_TABLES_MARGIN).items()
        if s < ordered.get(key, float("inf"))
    }
    return first_s("gluon_ws_det", "triton", BACKWARD_TABLES_MARGIN), atomic, ordered


# The record these tables were set from: (topic, device slug) under results/.
BACKWARD_TABLES_RECORD = ("backward_ws_modes", "nvidia-h200")
BACKWARD_MODES = ("auto", "always", "never")


def backward_gluon_mode() -> str:
    """``FLASHCORE_BACKWARD_HOPPER``: ``auto`` (default: the tables above), ``always`` (the
    warp-specialized Gluon backward wherever it supports the call, in the mode the caller asks
    for: for tests and sanitizer runs) or ``never``."""
    mode = os.environ.get("FLASHCORE_BACKWARD_HOPPER", "auto")
    if mode not in BACKWARD_MODES:
        raise ValueError(
            f"FLASHCORE_BACKWARD_HOPPER must be one of {', '.join(BACKWARD_MODES)}, got {mode!r}"
        )
    return mode


def backward_kernel(
    q, k, v, *, causal: bool, deterministic: bool, window=None, softcap=None, sinks=None
) -> str:
    """The backward autograd runs for these inputs: ``"gluon_ws_det"`` (the warp-specialized
    Gluon backward, deterministic), ``"gluon_ws"`` (the same, atomic) or ``"triton"``."""
    mode = backward_gluon_mode()
    if mode == "never" or not _backward_hopper_ws.supports(
        q, k, v, window=window, softcap=softcap, sinks=sinks
    ):
        return "triton"
    gluon = "gluon_ws_det" if deterministic else "gluon_ws"
    if mode == "always":
        return gluon
    key, length = (q.shape[3], bool(causal)), min(q.shape[2], k.shape[2])
    if not deterministic and length >= BACKWARD_ORDERED_FOR_ATOMIC_FROM.get(key, float("inf")):
        return "gluon_ws_det"
    table = BACKWARD_GLUON_DETERMINISTIC_FROM if deterministic else BACKWARD_GLUON_FROM
    from_s = table.get(key)
    if from_s is None or length < from_s:
        return "triton"
    return gluon


def describe_backward_dispatch() -> str:
    """The backward autograd runs, for ``python -m flashcore info``."""

    def rules(table):
        return ", ".join(
            f"D{d} {'causal' if c else 'full'}: " + (f"S>={t}" if t else "never")
            for (d, c), t in table.items()
        )

    gluon = "warp-specialized Gluon (kernels/backward_hopper_ws.py: sm_90, fp16/bf16, D64/128/256)"
    mode = backward_gluon_mode()
    if mode == "always":
        return (
            f"{gluon} wherever it supports the call, in the mode asked for "
            "(FLASHCORE_BACKWARD_HOPPER=always), else Triton"
        )
    if mode == "never":
        return "Triton, deterministic (FLASHCORE_BACKWARD_HOPPER=never)"
    return (
        f"bitwise reproducible by default: {gluon} in its deterministic mode (dQ's adds in a "
        f"fixed order) where measured faster ({'/'.join(BACKWARD_TABLES_RECORD[::-1])}.json): "
        f"{rules(BACKWARD_GLUON_DETERMINISTIC_FROM)}; else Triton, deterministic. With "
        f"deterministic=False, its deterministic mode where that was faster than its atomic "
        f"one ({rules(BACKWARD_ORDERED_FOR_ATOMIC_FROM)}), else its atomic mode: "
        f"{rules(BACKWARD_GLUON_FROM)}; else Triton"
    )
