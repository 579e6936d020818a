"""Offline (no GPU): the shared-memory bank conflicts of the warp-specialized Gluon backward's
register <-> shared-memory traffic, by Gluon's own count (``gl.bank_conflicts``: excess
wavefronts per wavefront of each st.shared / ld.shared the store or load lowers to), for each
head dim's shipped step (kernels/backward_hopper_ws.py's tables): the dQ tile the consumers
store for the writer's reduce-add, the dS^T tile (and, at D256, P^T) they store for the next
wgmmas, and the lse / delta rows they load. The dQ tile is also counted under every swizzle
width an NVMMA shared layout (and so a TMA descriptor) can take, since its layout is the
descriptor's (``_dq_descriptor``), free to choose.

Why: Nsight Compute on the kernel (logs/ncu_raw_ws_det_d64_eaeece4.csv and
logs/ncu_raw_ws_det_d128_eaeece4.csv, one H200, S 8K, deterministic) counts
``derived__memory_l1_wavefronts_shared_excessive`` = 67,108,864 at both head dims: 256 per
step of the 262,144 steps each run makes, which is one excess wavefront for each of the
256 ideal ones of a 32 KB tile, and the dQ tile (BLOCK_M x D fp32) is 32 KB at both.

    python tools/ws_smem_conflicts.py OUT.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import subprocess
import sys

os.environ.pop("TRITON_INTERPRET", None)  # compiled, not interpreted
# every probe compiled afresh: its counts are printed while compiling, a cache hit prints none
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
sys.path.insert(0, os.getcwd())

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402

from flashcore.kernels import backward_hopper_ws as bhw  # noqa: E402
from flashcore.kernels.backward_hopper_pipelined import (  # noqa: E402
    _split_columns_layout,
    _split_rows_layout,
)
from flashcore.studies.sass import compile_kernel  # noqa: E402

SWIZZLES = (0, 32, 64, 128)
MARK = gl.constexpr("ws_smem_conflicts:")  # the prefix of the probe's compile-time prints


@gluon.jit
def _probe(
    X, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
    DQ_ROWS: gl.constexpr, SPLIT_COLUMNS: gl.constexpr, SWIZZLE: gl.constexpr,
):  # fmt: skip
    """The consumers' register layouts (as _consumers / _consumers_split_columns build them)
    against the kernel's shared layouts; counts recorded while compiling."""
    NW: gl.constexpr = gl.num_warps()
    if SPLIT_COLUMNS:
        st_layout: gl.constexpr = _split_columns_layout(NW, BLOCK_M)
        dq_layout: gl.constexpr = _split_columns_layout(NW, HEAD_DIM)
    else:
        st_layout: gl.constexpr = _split_rows_layout(NW, BLOCK_M)
        if DQ_ROWS:
            dq_layout: gl.constexpr = _split_rows_layout(NW, HEAD_DIM)
        else:
            dq_layout: gl.constexpr = _split_columns_layout(NW, HEAD_DIM)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
    dq_sl: gl.constexpr = gl.NVMMASharedLayout(
        swizzle_byte_width=SWIZZLE, element_bitwidth=32, rank=2
    )
    dq_s = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM], dq_sl)
    gl.static_print(MARK, "dQ tile store", SWIZZLE, gl.bank_conflicts(dq.type, dq_s.type))
    st = gl.zeros([BLOCK_N, BLOCK_M], gl.bfloat16, st_layout)
    ds_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], gl.bfloat16)
    ds_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, BLOCK_M], ds_sl)
    gl.static_print(MARK, "dS^T (and P^T) tile store", -1, gl.bank_conflicts(st.type, ds_s.type))
    rows = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(0, st_layout))
    rows_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    rows_s = gl.allocate_shared_memory(gl.float32, [BLOCK_M], rows_sl)
    gl.static_print(MARK, "lse / delta row load", -1, gl.bank_conflicts(rows.type, rows_s.type))
    dq_s.store(dq)
    ds_s.store(st)
    rows_s.store(rows)
    gl.store(X, gl.sum(rows_s.load(gl.SliceLayout(0, st_layout)), axis=0))


def _counts(printed: str) -> list[tuple]:
    """(what, dQ swizzle or None, conflicts) from the probe's compile-time prints."""
    out = []
    for line in printed.splitlines():
        if line.startswith(MARK.value):
            what, _, rest = line[len(MARK.value) :].strip().rpartition(" ")
            what, _, swizzle = what.rpartition(" ")
            out.append((what, None if int(swizzle) < 0 else int(swizzle), int(rest)))
    if len(out) != 3:
        raise RuntimeError(f"expected the probe's three counts, got {printed!r}")
    return out


def report() -> list[dict]:
    out = []
    for d in bhw.HEAD_DIMS_WS:
        bm, bn, split = bhw.BLOCK_M_FOR[d], bhw.BLOCK_N_FOR[d], bhw.SPLIT_COLUMNS_FOR[d]
        # the layout the launcher gives the dQ tile (its descriptor's; the kernel allocates
        # the tile with it), read from the launcher itself on a CPU tensor
        shipped = bhw._dq_descriptor(torch.empty(1, 1, bm, d), bm).layout
        # the dQ split each (deterministic, causal) build uses (DQ_SPLIT_ROWS_FOR)
        splits = sorted({bhw.DQ_SPLIT_ROWS_FOR.get((d, det, c), False)
                         for det in (False, True) for c in (False, True)})  # fmt: skip
        for rows in splits:
            for swizzle in SWIZZLES:
                printed = io.StringIO()
                with contextlib.redirect_stdout(printed):
                    compile_kernel(dict(
                        fn=_probe, gluon=True, pointers={"X": "*fp32"}, floats=set(), descs={},
                        consts=dict(BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=d, DQ_ROWS=rows,
                                    SPLIT_COLUMNS=split, SWIZZLE=swizzle),
                        num_warps=bhw.NUM_WARPS, num_stages=1,
                    ))  # fmt: skip
                for what, sw, conflicts in _counts(printed.getvalue()):
                    if sw is None and swizzle != SWIZZLES[0]:
                        continue  # the same count at every dQ swizzle
                    out.append({
                        "D": d, "BLOCK_M": bm, "BLOCK_N": bn,
                        "dq_split": "columns" if split or not rows else "rows",
                        "what": what, "dq_swizzle": sw,
                        "shipped": sw is None or sw == shipped.swizzle_byte_width,
                        "tile_bytes": bm * d * 4 if sw is not None else None,
                        "conflicts_per_wavefront": conflicts,
                    })  # fmt: skip
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    rows = report()
    for r in rows:
        print(f"D{r['D']} ({r['dq_split']} dQ) {r['what']:28s} swizzle {r['dq_swizzle']!s:>4}"
              f"{' (shipped)' if r['shipped'] and r['dq_swizzle'] is not None else '':11s}"
              f" conflicts per wavefront {r['conflicts_per_wavefront']}")  # fmt: skip
    record = {
        "topic": "ws_smem_conflicts",
        "provenance": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit,
            "command": "python tools/ws_smem_conflicts.py <out>",
            "device": "none (compiled for sm_90 offline)",
        },
        "method": __doc__,
        "rows": rows,
    }
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
