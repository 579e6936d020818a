"""What the torch op layer adds to a call of flashcore's forward, in one process.

    python3 tools/op_overhead.py [OUT.json] [--rounds R] [--calls N]

Three ways to run the same kernel function on the same inputs, interleaved over R rounds
of N calls each (median microseconds per call):

* ``direct``: the op's kernel function itself (``ops._attention_cuda``, or on a machine
  without CUDA ``ops._attention_cpu``, PyTorch's float32 path with TRITON_INTERPRET unset);
* ``torch.ops.flashcore.attention``: the op as flashcore registers it (a ``torch.library``
  definition with a fake and an autograd formula);
* ``register_autograd only``: the same kernel, fake and autograd formula on a
  ``torch.library.Library`` under a scratch name, without the backends' own autograd kernel
  (``ops._attention_autograd``): flashcore's op as registered before that kernel;
* ``custom_op``: the same kernel, fake and autograd formula registered through
  ``torch.library.custom_op`` under a scratch name, as flashcore's op was registered before
  that.

The difference to ``direct`` is the op layer's host cost. On a GPU the shape is launch.json's
smallest (B1 H8 S128 D64, fp16, causal), where the host cost decides the wall time; on a CPU
a tiny one (B1 H1 S1 D8 against 2 keys) keeps the kernel short.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "0")  # a CPU run times PyTorch's path, not numpy
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flashcore

import torch  # noqa: E402

from flashcore import ops  # noqa: E402
from flashcore.results import provenance  # noqa: E402


def _custom_op_twin(kernel):
    """The same kernel, fake and autograd formula behind torch.library.custom_op."""

    @torch.library.custom_op("flashcore_overhead::attention", mutates_args=())
    def twin(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        is_causal: bool,
        bottom_right: bool,
        scale: float | None,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        return kernel(q, k, v, is_causal, bottom_right, scale, window, softcap)

    twin.register_fake(ops._attention_fake)
    twin.register_autograd(
        ops._attention_backward_formula, setup_context=ops._attention_setup_context
    )
    return torch.ops.flashcore_overhead.attention


def _library_twin(kernel):
    """The same kernel, fake and autograd formula on a Library, autograd by register_autograd
    alone (every call through its generated kernel and a redispatch)."""
    lib = torch.library.Library("flashcore_overhead_lib", "DEF")
    lib.define(ops._LIBRARY_SCHEMA)
    lib.impl("attention", kernel, "CUDA" if torch.cuda.is_available() else "CPU")
    torch.library.register_fake("flashcore_overhead_lib::attention", ops._attention_fake, lib=lib)
    torch.library.register_autograd(
        "flashcore_overhead_lib::attention",
        ops._attention_backward_formula,
        setup_context=ops._attention_setup_context,
        lib=lib,
    )
    return lib, torch.ops.flashcore_overhead_lib.attention


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="write the rows and provenance here (JSON)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        shape, dtype, kernel = (
            ((1, 8, 128, 64), (1, 8, 128, 64)),
            torch.float16,
            ops._attention_cuda,
        )
    else:
        shape, dtype, kernel = ((1, 1, 1, 8), (1, 1, 2, 8)), torch.float32, ops._attention_cpu
    device = "cuda" if cuda else "cpu"
    q = torch.randn(shape[0], device=device, dtype=dtype)
    k, v = (torch.randn(shape[1], device=device, dtype=dtype) for _ in range(2))
    call_args = (q, k, v, True, True, None)
    library, library_twin = _library_twin(kernel)
    variants = {
        "direct": kernel,
        "torch.ops.flashcore.attention": torch.ops.flashcore.attention,
        "register_autograd only": library_twin,
        "custom_op": _custom_op_twin(kernel),
    }
    for fn in variants.values():  # compile, fill the launch caches
        for _ in range(20):
            fn(*call_args)
    if cuda:
        torch.cuda.synchronize()

    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                fn(*call_args)
            if cuda:
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    direct = statistics.median(times["direct"])
    rows = []
    for name, samples in times.items():
        median = statistics.median(samples)
        rows.append({"variant": name, "us_per_call": median, "over_direct_us": median - direct})
        print(f"{name:32s} {median:8.2f} us/call  (+{median - direct:.2f} over direct)")
    if args.out:
        payload = {
            "provenance": provenance(),
            "tool": "tools/op_overhead.py",
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "kernel": kernel.__name__
            + ("" if cuda else " (PyTorch's float32 path: TRITON_INTERPRET unset)"),
            "shape_q_kv": shape,
            "dtype": str(dtype),
            "rounds": args.rounds,
            "calls": args.calls,
            "rows": rows,
            "samples_us": times,
        }
        Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
