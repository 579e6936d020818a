"""Does compute-sanitizer's racecheck see a shared-memory hand-off ordered by an mbarrier?

The warp-specialized backward's loader warp stores each step's lse/delta rows into a shared
ring and publishes them with one lane's arrive on the ring stage's mbarrier; the consumers wait
on that barrier and read the rows (kernels/backward_hopper_ws.py). Per the PTX memory model the
arrive releases and the wait acquires, so the reads see the stores. racecheck reported hazards
between exactly those stores and reads (notebook 07 section 9c). This probe has that hand-off
alone, so that racecheck's verdict on it can be read without the rest of the kernel:

    plain        a producer warp stores a row into a 2-stage ring, warp barrier, one lane
                 arrives on ``full``; 4 consumer warps wait, read it, store it to global,
                 barrier, arrive on ``empty`` (the ring's other direction)
    no_warp_bar  the same without the producer's warp barrier (the backward at afd7c3a)
    expect_tx    as plain, the arrive being an expect-tx completed by a TMA copy into a
                 second buffer, as the backward's loader does (b6cbf4d)
    unsync       no barrier waits or arrives on either side: a real race, the control that
                 racecheck must flag (with only the consumers' wait removed, the producer
                 missed the phases of ``empty`` and hung: the first GPU run, 2026-11-28)

    python tools/mbarrier_race_probe.py --offline            # no GPU: each variant compiles
    python tools/mbarrier_race_probe.py --variant plain      # Hopper GPU: run, check the copy
    compute-sanitizer --tool racecheck python tools/mbarrier_race_probe.py --variant plain

The synchronized variants must copy every row exactly (the script exits 1 otherwise); the
unsynchronized one may not. tools/gpu_peers.sh part ``race_probe`` runs all four under
racecheck. If racecheck flags the synchronized variants, its backward hazards on the ring are
the tool's; if it flags only ``unsync``, they are to be explained in the kernel."""

from __future__ import annotations

import argparse
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
    tma,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROW = 128  # floats a round
ROUNDS = 64
VARIANTS = ("plain", "no_warp_bar", "expect_tx", "unsync")


@gluon.jit
def _producer(src, tile_desc, ring, tiles, full, empty, ROWS: gl.constexpr,
              N: gl.constexpr, WARP_BARRIER: gl.constexpr, EXPECT_TX: gl.constexpr,
              SYNC: gl.constexpr):  # fmt: skip
    layout: gl.constexpr = gl.BlockedLayout([N // 32], [32], [1], [0])
    offs = gl.arange(0, N, layout=layout)
    for t in range(ROWS):
        stage = t % 2
        row = gl.load(src + t * N + offs)
        if SYNC:
            mbarrier.wait(empty.index(stage), ((t // 2) & 1) ^ 1)
        ring.index(stage).store(row)
        if WARP_BARRIER:
            gl.thread_barrier()
        if EXPECT_TX:
            mbarrier.expect(full.index(stage), tile_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(tile_desc, [0, 0], full.index(stage),
                                            tiles.index(stage))  # fmt: skip
        elif SYNC:
            mbarrier.arrive(full.index(stage), count=1)


@gluon.jit
def _consumer(dst, ring, full, empty, ROWS: gl.constexpr, N: gl.constexpr,
              SYNC: gl.constexpr):  # fmt: skip
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=layout)
    for t in range(ROWS):
        stage = t % 2
        if SYNC:
            mbarrier.wait(full.index(stage), (t // 2) & 1)
        gl.store(dst + t * N + offs, ring.index(stage).load(layout))
        gl.thread_barrier()
        if SYNC:
            mbarrier.arrive(empty.index(stage), count=1)


@gluon.jit
def _handoff_kernel(src, dst, tile_desc, ROWS: gl.constexpr, N: gl.constexpr,
                    WARP_BARRIER: gl.constexpr, EXPECT_TX: gl.constexpr,
                    SYNC: gl.constexpr):  # fmt: skip
    ring = gl.allocate_shared_memory(gl.float32, [2, N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    tiles = gl.allocate_shared_memory(gl.float32, [2, 8, 32], tile_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize(
        [
            (_consumer, (dst, ring, full, empty, ROWS, N, SYNC)),
            (_producer, (src, tile_desc, ring, tiles, full, empty, ROWS, N, WARP_BARRIER,
                         EXPECT_TX, SYNC)),
        ],
        [1],
        [48],
    )  # fmt: skip


def flags(variant: str) -> dict:
    return dict(
        WARP_BARRIER=variant in ("plain", "expect_tx", "unsync"),
        EXPECT_TX=variant == "expect_tx",
        SYNC=variant != "unsync",
    )


def tile_layout():
    return gl.NVMMASharedLayout.get_default_for([8, 32], gl.float32)


def offline_counts() -> dict:
    """Each variant compiled for sm_90 (no GPU): its mbarrier arrives and waits and TMA loads
    in the SASS."""
    from flashcore.studies.sass import compile_kernel, disassemble

    counts = {}
    for variant in VARIANTS:
        spec = dict(
            fn=_handoff_kernel, gluon=True, pointers={"src": "*fp32", "dst": "*fp32"},
            floats=set(), consts=dict(ROWS=ROUNDS, N=ROW, **flags(variant)), num_warps=4,
            num_stages=1, descs={"tile_desc": f"tensordesc<fp32[8,32],{tile_layout()!r}>"},
        )  # fmt: skip
        sass = disassemble(compile_kernel(spec).asm["cubin"])
        counts[variant] = {
            op: sass.count(op) for op in ("SYNCS.ARRIVE", "SYNCS.PHASECHK", "UTMALDG")
        }
    return counts


def offline() -> int:
    for variant, counts in offline_counts().items():
        print(f"{variant:12s} {counts}")
    return 0


def run(variant: str) -> int:
    src = torch.randn(ROUNDS * ROW, device="cuda")
    dst = torch.full_like(src, float("nan"))
    tile = torch.zeros(8, 32, device="cuda")
    desc = TensorDescriptor(tile, [8, 32], [32, 1], [8, 32], tile_layout())
    _handoff_kernel[(1,)](src, dst, desc, ROUNDS, ROW, num_warps=4, **flags(variant))
    torch.cuda.synchronize()
    exact = torch.equal(src, dst)
    print(f"{variant}: every row copied exactly: {exact}")
    return 0 if exact or variant == "unsync" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--variant", choices=VARIANTS, default="plain")
    args = parser.parse_args()
    return offline() if args.offline else run(args.variant)


if __name__ == "__main__":
    raise SystemExit(main())
