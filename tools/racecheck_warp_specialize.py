"""Is the racecheck report on the Gluon forward kernel ours, or the warp_specialize lowering's?

compute-sanitizer's racecheck reports shared-memory hazards in kernels/forward_hopper.py's
_fa3_fwd_kernel, attributed to the kernel's `def` line and its `gl.warp_specialize` call,
never to a line of our partitions (sanitizer.json). This probe runs racecheck on a kernel
with no shared memory of its own: a default partition and one worker partition that each
store one number to global memory. If racecheck reports hazards here too, they come from
the code Triton generates around `warp_specialize` (the worker warps' start/exit protocol),
not from the K/V ring or our mbarriers.

--sass OFFSET... prints, for every compiled _fa3_fwd_kernel in Triton's cache, the SASS
instructions at the offsets racecheck names (e.g. 0x120 0xb240), so the two sides of each
reported hazard can be read as instructions.

Usage (CUDA machine, repo root):
    python tools/racecheck_warp_specialize.py            # runs racecheck on the probe, prints
    python tools/racecheck_warp_specialize.py --kernel   # just launches the probe kernel once
    python tools/racecheck_warp_specialize.py --sass 0x120 0xb240 ...
"""

from __future__ import annotations

import re
import subprocess
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _default_part(out):
    gl.store(out + 2 * gl.program_id(0), 1.0)


@gluon.jit
def _worker_part(out):
    gl.store(out + 2 * gl.program_id(0) + 1, 2.0)


@gluon.jit
def _two_partitions(out):
    gl.warp_specialize([(_default_part, (out,)), (_worker_part, (out,))], [1], [24])


def launch() -> None:
    programs = 264
    out = torch.zeros(2 * programs, device="cuda", dtype=torch.float32)
    _two_partitions[(programs,)](out, num_warps=4)
    torch.cuda.synchronize()
    expected = torch.tensor([1.0, 2.0], device="cuda").repeat(programs)
    print("probe output correct:", bool(torch.equal(out, expected)))


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
        launch()
        return 0
    cmd = ["compute-sanitizer", "--tool", "racecheck", sys.executable, __file__, "--kernel"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    print(text.strip())
    hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", text)
    print(
        f"racecheck on a warp_specialize kernel with no shared memory of its own: exit "
        f"{proc.returncode}, hazards {hazards.group(1) if hazards else 'unknown'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
