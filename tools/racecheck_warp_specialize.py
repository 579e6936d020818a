"""Is the racecheck report on the Gluon forward kernel ours, or the warp_specialize lowering's?

compute-sanitizer's racecheck reports shared-memory hazards in kernels/forward_hopper.py's
_fa3_fwd_kernel, attributed to the kernel's `def` line and its `gl.warp_specialize` call,
never to a line of our partitions (sanitizer.json). This tool runs racecheck on two probes
that share nothing with the forward but the warp_specialize call: "trivial", a default and
one worker partition that each store one number to global memory; "handoff", the forward's
shape of partitions (two four-warp consumers at 240 registers, a one-warp producer at 24)
handing a shared buffer over through an mbarrier. Hazards there come from the code Triton
generates around `warp_specialize` (the worker warps' start/exit protocol), not from the
K/V ring or our barriers.

--sass OFFSET... prints, for every compiled _fa3_fwd_kernel in Triton's cache, the SASS
instructions at the offsets racecheck names (e.g. 0x120 0xb240), so the two sides of each
reported hazard can be read as instructions.

Usage (CUDA machine, repo root):
    python tools/racecheck_warp_specialize.py            # racecheck on both probes
    python tools/racecheck_warp_specialize.py --kernel trivial|handoff   # one launch, no tool
    python tools/racecheck_warp_specialize.py --sass 0x120 0xb240 ...
"""

from __future__ import annotations

import re
import subprocess
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def _default_part(out):
    gl.store(out + 2 * gl.program_id(0), 1.0)


@gluon.jit
def _worker_part(out):
    gl.store(out + 2 * gl.program_id(0) + 1, 2.0)


@gluon.jit
def _two_partitions(out):
    gl.warp_specialize([(_default_part, (out,)), (_worker_part, (out,))], [1], [24])


# The second probe has the forward kernel's shape of partitions and nothing else: a
# one-warp producer with 24 registers that fills a shared buffer and arrives on an mbarrier,
# and two four-warp consumers with 240 (the default partition and one worker) that wait on
# it, read the buffer and store it.
@gluon.jit
def _handoff_producer(buf, ready):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])
    buf.store(gl.arange(0, 128, layout=layout).to(gl.float32))
    mbarrier.arrive(ready.index(0), count=1)


@gluon.jit
def _handoff_consumer(slot: gl.constexpr, buf, ready, out):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    mbarrier.wait(ready.index(0), 0)
    offs = gl.arange(0, 128, layout=layout)
    gl.store(out + (2 * gl.program_id(0) + slot) * 128 + offs, buf.load(layout))


@gluon.jit
def _mbarrier_handoff(out):
    buf = gl.allocate_shared_memory(gl.float32, [128], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(ready.index(0), count=1)
    gl.warp_specialize(
        [
            (_handoff_consumer, (0, buf, ready, out)),
            (_handoff_consumer, (1, buf, ready, out)),
            (_handoff_producer, (buf, ready)),
        ],
        [4, 1],
        [240, 24],
    )


def launch(probe: str) -> None:
    programs = 264
    if probe == "trivial":
        out = torch.zeros(2 * programs, device="cuda", dtype=torch.float32)
        _two_partitions[(programs,)](out, num_warps=4)
        expected = torch.tensor([1.0, 2.0], device="cuda").repeat(programs)
    else:
        out = torch.zeros(2 * programs * 128, device="cuda", dtype=torch.float32)
        _mbarrier_handoff[(programs,)](out, num_warps=4)
        expected = torch.arange(128, device="cuda", dtype=torch.float32).repeat(2 * programs)
    torch.cuda.synchronize()
    print(f"probe {probe}: output correct:", bool(torch.equal(out, expected)))


def print_sass(offsets: list[int]) -> None:
    """The SASS lines at `offsets` (with one instruction either side) in every cached cubin
    of the Gluon forward kernel."""
    import glob
    import os

    cache = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    for cubin in sorted(glob.glob(f"{cache}/*/_fa3_fwd_kernel.cubin")):
        sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True)
        lines = sass.stdout.splitlines()
        at = {}
        for i, line in enumerate(lines):
            m = re.search(r"/\*([0-9a-f]{4,})\*/", line)
            if m:
                at[int(m.group(1), 16)] = i
        print(f"== {os.path.basename(os.path.dirname(cubin))[:12]}: {len(at)} instructions")
        for off in offsets:
            if off in at:
                i = at[off]
                print(f"  {off:#x}:")
                for line in lines[max(i - 2, 0) : i + 3]:
                    if "/*" in line and re.search(r"/\*[0-9a-f]{4,}\*/", line):
                        print("    " + " ".join(line.split()))


def main() -> int:
    if "--sass" in sys.argv:
        print_sass([int(x, 16) for x in sys.argv[sys.argv.index("--sass") + 1 :]])
        return 0
    if "--kernel" in sys.argv:
        launch(sys.argv[sys.argv.index("--kernel") + 1])
        return 0
    probes = {
        "trivial": "two partitions, no shared memory of their own",
        "handoff": "the forward's partitions (4+4 warps at 240 regs, 1 at 24), mbarrier handoff",
    }
    for probe, what in probes.items():
        cmd = ["compute-sanitizer", "--tool", "racecheck", sys.executable, __file__, "--kernel"]
        proc = subprocess.run([*cmd, probe], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        print(text.strip())
        hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", text)
        print(
            f"racecheck on the {probe} probe ({what}): exit {proc.returncode}, "
            f"hazards {hazards.group(1) if hazards else 'unknown'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
