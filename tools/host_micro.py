"""The lean launch paths' small host costs, each form before and after 5cd556f, timed on CPU
tensors (any machine; the argument parsing and Python work are the same as on CUDA tensors,
the CUDA caching allocator's own cost is the same in both forms):

* reading the forward's two Gluon switches, unset: ``os.environ.get`` against
  ``_launch.environ_value``;
* the output: ``torch.empty(shape, dtype=, device=)`` against ``_launch.new_output``;
* the SDPA door's three unused outputs: three ``torch.empty`` against
  ``sdpa_backend._unused_outputs``.

    python tools/host_micro.py OUT.json

Each figure is the best of 5 repeats of 20000 calls (the floor: what the code costs when the
machine does nothing else), microseconds per call.
"""

import argparse
import os
import sys
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashcore import results, sdpa_backend  # noqa: E402
from flashcore.kernels import _launch  # noqa: E402

SWITCHES = ("FLASHCORE_FORWARD_HOPPER", "FLASHCORE_HOPPER_MAX_PROGRAMS")


def _us(fn, number=20000, repeat=5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    args = parser.parse_args()
    for name in SWITCHES:
        os.environ.pop(name, None)
    readers = [_launch.environ_value(name) for name in SWITCHES]
    q = torch.empty(1, 8, 128, 64, dtype=torch.float16)

    def three_empty():
        device = q.device
        return (
            torch.empty((2,), dtype=torch.uint64, device=device),
            torch.empty((), dtype=torch.uint64, device=device),
            torch.empty((0,), dtype=q.dtype, device=device),
        )

    pairs = {
        "two unset switches": (
            lambda: tuple(os.environ.get(name) for name in SWITCHES),
            lambda: tuple(read() for read in readers),
        ),
        "output (1, 8, 128, 64) fp16": (
            lambda: torch.empty((*q.shape[:3], q.shape[3]), dtype=q.dtype, device=q.device),
            lambda: _launch.new_output(q, q),
        ),
        "SDPA door's three unused outputs": (three_empty, lambda: sdpa_backend._unused_outputs(q)),
    }
    rows = []
    for name, (before, after) in pairs.items():
        b, a = _us(before), _us(after)
        rows.append({"cost": name, "before_us": b, "after_us": a})
        print(f"{name:36s} before {b:6.2f} us  after {a:6.2f} us")
    results.write_log(
        args.out,
        {"topic": "host_micro", "method": __doc__.split("\n\n")[2], "rows": rows},
    )


if __name__ == "__main__":
    main()
