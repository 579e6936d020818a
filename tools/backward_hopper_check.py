"""On an H100: the Gluon backward's correctness grid, then its speed beside flashcore's Triton
backward, in one process (about two minutes with compilation).

    python3 tools/backward_hopper_check.py OUT.json [--grid-stride N] [--rounds R]
        [--kernel {gluon,gluon_pipelined,gluon_ws,both,ws_vs_pipelined,ws_modes}]
        [--s S ...] [--d D ...]

1. ``backward_grid("hopper")`` (240 cases: D64/D128, fp16/bf16, S 1..1000, Sq != Sk, GQA,
   both causal alignments, a (B, S, H, D) layout) through ``check_grad_case(kernel="gluon")``
   under the gradient rule, NaN-poisoned gradient buffers (every N-th case with
   ``--grid-stride N``).
2. bf16, B*S = 16K tokens, H*D = 2048, D 64/128, S 2K/4K/8K, causal and not: the whole
   backward (preprocess, kernel, dQ conversion) of the Gluon path
   (``backward_hopper.attention_backward_hopper``) and of the Triton backward
   (``backward.attention_backward``, its default deterministic mode), each timed with
   ``triton.testing.do_bench`` (median), the two alternating in order over R rounds;
   TFLOP/s with FLOPs = 2.5 x the forward's 4 B H S^2 D (halved for causal). Each shape
   also prints how far the Gluon gradients are from the Triton ones (max |difference| over
   max |Triton|, per gradient: a sanity check at sizes the grid does not reach, not the
   rule).

``--kernel`` (default ``gluon``, the above): ``gluon_pipelined`` does both parts with the
pipelined variant (``backward_hopper_pipelined.attention_backward_hopper_pipelined``) in
place of the Gluon path; ``both`` runs the grid for the pipelined variant and times the
original Gluon path, the pipelined one and the Triton backward alternating in one process,
printing each one's TFLOP/s and the pipelined/original ratio per shape. ``gluon_ws`` does both
parts with the warp-specialized kernel (``backward_hopper_ws``); ``ws_vs_pipelined`` runs its
grid and times it beside the pipelined variant and the Triton backward; ``ws_modes`` runs the
grid with its deterministic mode (``deterministic=True``) and times both of its modes beside the
Triton backward, each deterministic backward repeated 3 more times per shape and compared bit
for bit with the first (``bitwise_equal_repeats``). ``--s``/``--d``: the
timed sequence lengths and head dims (default 2K/4K/8K, D64/128).

Prints one line per case failure and per shape, writes OUT.json (provenance, grid summary,
speed rows with ``impl`` "gluon", "gluon_pipelined" or "triton"; ``kernel``: the option,
``grid.kernel``: the kernel the grid ran), and exits 1 if any grid case fails.
"""

import argparse
import importlib
import json
import math
import statistics
import sys
import time
import zlib
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flashcore

from flashcore.interface import attention  # noqa: E402
from flashcore.kernels import backward_hopper as bh  # noqa: E402
from flashcore.kernels.backward import attention_backward  # noqa: E402
from flashcore.results import kernel_fingerprint, provenance  # noqa: E402
from flashcore.validate_backward import (  # noqa: E402
    GLUON_KERNELS,
    GRADIENTS,
    backward_grid,
    check_grad_case,
)

TOKENS, HIDDEN = 16 * 1024, 2048
SEQLENS = (2048, 4096, 8192)
# --kernel: (the kernel the grid runs, the Gluon impls timed beside the Triton backward)
KERNEL_OPTIONS = {
    "gluon": ("gluon", ("gluon",)),
    "gluon_pipelined": ("gluon_pipelined", ("gluon_pipelined",)),
    "gluon_ws": ("gluon_ws", ("gluon_ws",)),
    "both": ("gluon_pipelined", ("gluon", "gluon_pipelined")),
    "ws_vs_pipelined": ("gluon_ws", ("gluon_pipelined", "gluon_ws")),
    "ws_modes": ("gluon_ws_det", ("gluon_ws", "gluon_ws_det")),
}
REPEATS = 3  # extra backwards of each deterministic impl per shape, compared bit for bit


def run_grid(stride: int, kernel: str = "gluon", grids: tuple = ("hopper",)) -> dict:
    cases = [case for grid in grids for case in backward_grid(grid)][::stride]
    failures, worst = [], (0.0, None)
    for case in cases:
        seed = zlib.crc32(case.name.encode()) % 10_000  # as tests/test_backward_hopper.py
        row = check_grad_case(case, "cuda", seed=seed, kernel=kernel)
        if row["ratio"] > worst[0]:
            worst = (row["ratio"], case.name)
        if not row["passed"]:
            failures.append(case.name)
            detail = {g: (row[g]["max_abs_err"], row[g]["bound"]) for g in GRADIENTS}
            print(f"FAIL {case.name}: {detail}", flush=True)
    print(
        f"grid{'' if kernel == 'gluon' else f' ({kernel})'}: {len(cases)} cases, "
        f"{len(failures)} failed, "
        f"worst ratio {worst[0]:.3f} ({worst[1]})"
    )
    return {
        "kernel": kernel,
        "grid": "+".join(grids),
        "cases": len(cases),
        "failed": len(failures),
        "failures": failures,
        "worst_ratio": worst[0],
        "worst_case": worst[1],
    }


def time_shape(
    d: int, s: int, causal: bool, rounds: int, gluon_impls: tuple = ("gluon",)
) -> list[dict]:
    """Rows of the Gluon impls ``gluon_impls`` (keys of validate_backward.GLUON_KERNELS) and
    "triton", timed alternating (the order reversed every other round)."""
    b, h = TOKENS // s, HIDDEN // d
    gen = torch.Generator(device="cuda").manual_seed(s + d + causal)

    def rand():
        return torch.randn(b, h, s, d, generator=gen, device="cuda", dtype=torch.bfloat16)

    q, k, v, do = rand(), rand(), rand(), rand()
    with torch.no_grad():
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
    for name in gluon_impls:
        module = importlib.import_module(f"flashcore.kernels.{GLUON_KERNELS[name][0]}")
        assert module.supports(q, k, v), f"{name} does not support the timing shape (D{d})"
    names = (*gluon_impls, "triton")
    bufs = {name: [torch.empty_like(t) for t in (q, k, v)] for name in names}
    scale = 1.0 / math.sqrt(d)

    # impl -> launcher, all with attention_backward_hopper's signature (check_grad_case's table)
    launchers = {
        name: (getattr(importlib.import_module(f"flashcore.kernels.{module}"), fn), options)
        for name, (module, fn, options) in GLUON_KERNELS.items()
    }

    def gluon_launch(name, into=None):
        launch, options = launchers[name]
        return lambda: launch(
            do, q, k, v, out, lse, *(into or bufs[name]), causal_offset=0, is_causal=causal,
            scale=scale, **options,
        )  # fmt: skip

    def triton_bwd():
        dq, dk, dv = bufs["triton"]
        attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)

    fns = {name: gluon_launch(name) for name in gluon_impls}
    fns["triton"] = triton_bwd
    impls = {name: fns[name] for name in names}
    for fn in impls.values():  # compile outside the timed region
        fn()
    torch.cuda.synchronize()
    # Deterministic impls: REPEATS more backwards into fresh buffers, each compared bitwise
    # with the first (at sizes where the order of dQ's adds has many ways to vary).
    bitwise = {}
    for name in gluon_impls:
        if GLUON_KERNELS[name][2].get("deterministic"):
            same = 0
            for _ in range(REPEATS):
                again = [torch.empty_like(t) for t in (q, k, v)]
                gluon_launch(name, again)()
                same += all(torch.equal(a, b) for a, b in zip(again, bufs[name]))
            bitwise[name] = f"{same}/{REPEATS}"
    agreements = {
        name: {
            g: float((a.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30))
            for g, a, r in zip(GRADIENTS, bufs[name], bufs["triton"])
        }
        for name in gluon_impls
    }
    times = {name: [] for name in impls}
    for r in range(rounds):
        order = list(impls) if r % 2 == 0 else list(reversed(impls))
        for name in order:
            times[name].append(triton.testing.do_bench(impls[name], return_mode="median"))
    flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    rows = []
    for name, ms in times.items():
        med = statistics.median(ms)
        rows.append(
            dict(
                impl=name, S=s, D=d, B=b, H=h, causal=causal, dtype="bfloat16",
                ms=med, ms_rounds=ms, tflops=flops / med / 1e9,
            )
        )  # fmt: skip
    by = {row["impl"]: row for row in rows}
    t = by["triton"]
    head = f"D{d} S{s} {'causal' if causal else 'full  '}:"
    if len(gluon_impls) == 1:  # the original line, with the impl's name
        (name,) = gluon_impls
        g = by[name]
        print(
            f"{head} {name} {g['tflops']:6.1f} TFLOP/s "
            f"({g['ms']:.3f} ms), triton {t['tflops']:6.1f} ({t['ms']:.3f} ms), "
            f"{name}/triton {t['ms'] / g['ms']:.3f}; |{name} - triton| / max|triton|: "
            + ", ".join(f"{k} {v:.1e}" for k, v in agreements[name].items()),
            flush=True,
        )
    else:  # each impl's TFLOP/s and x/triton, then the last over the first
        first, last = by[gluon_impls[0]], by[gluon_impls[-1]]
        print(
            f"{head} "
            + ", ".join(f"{n} {by[n]['tflops']:6.1f}" for n in gluon_impls)
            + f", triton {t['tflops']:6.1f} TFLOP/s; "
            + ", ".join(f"{n}/triton {t['ms'] / by[n]['ms']:.3f}" for n in gluon_impls)
            + f"; {gluon_impls[-1]}/{gluon_impls[0]} {first['ms'] / last['ms']:.3f}; "
            f"|{gluon_impls[-1]} - triton| / max|triton|: "
            + ", ".join(f"{k} {v:.1e}" for k, v in agreements[gluon_impls[-1]].items()),
            flush=True,
        )
    if bitwise:
        print(f"{head} bitwise equal repeats: {bitwise}", flush=True)
    for row in rows:
        row["agreement_vs_triton"] = agreements.get(row["impl"])
        if row["impl"] in bitwise:
            row["bitwise_equal_repeats"] = bitwise[row["impl"]]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--grid-stride", type=int, default=1, help="run every N-th grid case")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument(
        "--kernel",
        choices=tuple(KERNEL_OPTIONS),
        default="gluon",
        help="the Gluon backward to check: the original, the pipelined variant, the "
        "warp-specialized one, or two of them timed (KERNEL_OPTIONS: the grid runs the second)",
    )
    parser.add_argument("--s", type=int, nargs="+", default=SEQLENS, help="sequence lengths")
    parser.add_argument(
        "--grid",
        choices=("hopper", "hopper_d256"),
        nargs="+",
        default=("hopper",),
        help="the case lists the grid runs (hopper: D64/D128; hopper_d256: D256)",
    )
    parser.add_argument("--d", type=int, nargs="+", default=(64, 128), help="head dims")
    args = parser.parse_args()
    # The record's folder before the minutes of measuring (one run lost its record to it).
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if not (torch.cuda.is_available() and bh.GLUON_AVAILABLE):
        print("needs a Hopper GPU and triton with Gluon", file=sys.stderr)
        return 2
    record = {"provenance": provenance(), "tool": "tools/backward_hopper_check.py"}
    record["kernel"] = args.kernel
    grid_kernel, gluon_impls = KERNEL_OPTIONS[args.kernel]
    start = time.perf_counter()
    record["grid"] = run_grid(args.grid_stride, grid_kernel, args.grid)
    record["grid_seconds"] = time.perf_counter() - start
    speed = []
    for d, s, causal in [(d, s, c) for d in args.d for s in args.s for c in (False, True)]:
        speed += time_shape(d, s, causal, args.rounds, gluon_impls)
        torch.cuda.empty_cache()
    record["speed"] = speed
    record["seconds"] = time.perf_counter() - start
    record["kernel_fingerprint"] = kernel_fingerprint()  # the sources of the kernels it ran
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {args.out} ({record['seconds']:.0f} s)")
    return 1 if record["grid"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
