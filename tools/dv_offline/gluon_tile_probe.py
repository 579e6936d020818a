"""Offline (no GPU): does Gluon take a shared-memory tile of 192 columns, the q/k head dim of
DeepSeek-V3's MLA? Compiles, for sm_90, a kernel that allocates a (64, D) bf16 tile in shared
memory and stores zeros through it, for D in 64, 128, 192, and the split 192 = 128 + 64.

    python tools/dv_offline/gluon_tile_probe.py

With triton 3.6 (2026-11-26): 64 and 128 compile; 192 fails at the allocation ("shape must
have power-of-2 and non-zero dimensions; got 64, 192"); the split 128 + 64 compiles. So a
Gluon path for D_qk = 192 keeps q and k as two tiles each (two TMA boxes, two wgmma into one
S accumulator).
"""

import os

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


@gluon.jit
def _tiles(Out, D0: gl.constexpr, D1: gl.constexpr):
    # The allocation first: the question is whether shared memory takes the tile.
    shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, D0], gl.bfloat16)
    first = gl.allocate_shared_memory(gl.bfloat16, [64, D0], shared)
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, D0, layout=gl.SliceLayout(0, layout))
    first.store(gl.zeros([64, D0], gl.bfloat16, layout))
    if D1 > 0:  # the second part of a split head dim
        shared1: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, D1], gl.bfloat16)
        second = gl.allocate_shared_memory(gl.bfloat16, [64, D1], shared1)
        second.store(gl.zeros([64, D1], gl.bfloat16, layout))
    tile = first.load(layout)
    gl.store(Out + gl.expand_dims(rows, 1) * D0 + gl.expand_dims(cols, 0), tile)


def main() -> None:
    options = make_backend(TARGET).parse_options({"num_warps": 4}).__dict__
    for name, d0, d1 in [("64", 64, 0), ("128", 128, 0), ("192", 192, 0), ("128 + 64", 128, 64)]:
        src = GluonASTSource(
            fn=_tiles,
            signature={"Out": "*bf16", "D0": "constexpr", "D1": "constexpr"},
            constexprs={"D0": d0, "D1": d1},
        )
        try:
            compiled = triton.compile(src, target=TARGET, options=options)
            print(f"D {name:>8}: compiles, {compiled.metadata.shared} B shared")
        except Exception as exc:  # the compiler's own message is the result
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            print(f"D {name:>8}: fails ({lines[0][:20]}) {lines[-1][:120]}")


if __name__ == "__main__":
    main()
