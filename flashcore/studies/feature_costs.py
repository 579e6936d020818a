"""What the training features cost on the GPU: sinks, softcap and packed (varlen) batches,
each timed beside the same call without it, in one process, alternating the two.

    python -m flashcore.studies.feature_costs [--record] [--quick]

writes results/<gpu>/feature_costs.json (rows: feature, shape, the kernel each side ran,
forward and forward + backward milliseconds, the ratio with/without). bf16, H*D = 2048.

* sinks: ``flashcore.attention(..., sinks=)`` against the same call without sinks. Sinks run
  on whichever forward kernel the call without them takes (both kernels start each row at
  the sink); the rows name the kernel of each side. Where that is the Gluon kernel, a
  ``sinks_vs_triton`` row also gives the sinks' own cost on the Triton kernel.
* softcap: the same, with ``softcap=50`` (Gemma 2), Triton-only: where the call without it
  takes the Gluon kernel, the ratio is softcap's cost plus the kernels' difference.
* varlen: ``attention_varlen`` over B sequences of S tokens packed into one (total, H, D)
  tensor against ``attention`` over the same tokens as (B, H, S, D): the cost of the VARLEN
  mode alone (equal lengths), forward and forward + backward.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics


@contextlib.contextmanager
def _triton_forward_only():
    """Run the dispatch table's Triton side (FLASHCORE_FORWARD_HOPPER=never, read per call)."""
    old = os.environ.get("FLASHCORE_FORWARD_HOPPER")
    os.environ["FLASHCORE_FORWARD_HOPPER"] = "never"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FLASHCORE_FORWARD_HOPPER")
        else:
            os.environ["FLASHCORE_FORWARD_HOPPER"] = old


def _time(fn, rounds: int) -> float:
    import triton

    return statistics.median(triton.testing.do_bench(fn, warmup=10, rep=60) for _ in range(rounds))


def _pair_rows(feature, shape, with_fn, without_fn, kernels, rounds):
    """Time with/without alternately (forward, then forward + backward)."""
    row = dict(feature=feature, **shape, kernel_with=kernels[0], kernel_without=kernels[1])
    for phase in ("forward", "forward_backward"):
        times = {"with": [], "without": []}
        for r in range(rounds):
            order = ("with", "without") if r % 2 == 0 else ("without", "with")
            for side in order:
                fn = (with_fn if side == "with" else without_fn)[phase]
                times[side].append(_time(fn, 1))
        row[f"{phase}_ms_with"] = statistics.median(times["with"])
        row[f"{phase}_ms_without"] = statistics.median(times["without"])
        row[f"{phase}_ratio"] = row[f"{phase}_ms_with"] / row[f"{phase}_ms_without"]
        # Each round's pair, so a reader can see the spread a 3% target sits in (records
        # written after 65d6c6c's have it; the ratio above stays the medians')
        row[f"{phase}_ratio_rounds"] = [w / o for w, o in zip(times["with"], times["without"])]
    return row


def _calls(fwd):
    """{"forward": fwd without grad, "forward_backward": fwd + backward} for fwd(grad)."""
    import torch

    def forward():
        with torch.no_grad():
            fwd(False)

    def forward_backward():
        out, leaves = fwd(True)
        out.backward(torch.ones_like(out))

    return {"forward": forward, "forward_backward": forward_backward}


def run_feature_costs_record(quick: bool = False, rounds: int = 5) -> dict:
    import torch

    import flashcore
    from flashcore.interface import forward_kernel

    dev, dt = "cuda", torch.bfloat16
    rows = []
    shapes = [(64, 4096), (128, 4096), (128, 16384)] if not quick else [(128, 4096)]
    for d, s in shapes:
        h, b = 2048 // d, max(1, 16384 // s)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dt) for _ in range(3))
        sinks = torch.randn(h, device=dev)

        def dense(grad, causal, triton_only=False, **extra):
            def call(g):
                leaves = [t.detach().requires_grad_(g) for t in (q, k, v)]
                with _triton_forward_only() if triton_only else contextlib.nullcontext():
                    return flashcore.attention(*leaves, causal=causal, **extra), leaves

            return call

        for causal in (False, True):
            shape = dict(D=d, S=s, B=b, H=h, causal=causal)
            plain = _calls(dense(False, causal))
            kern_plain = forward_kernel(q, k, v, causal=causal)
            for feature, extra in (("sinks", dict(sinks=sinks)), ("softcap", dict(softcap=50.0))):
                with_calls = _calls(dense(False, causal, **extra))
                kernels = (forward_kernel(q, k, v, causal=causal, **extra), kern_plain)
                rows.append(_pair_rows(feature, shape, with_calls, plain, kernels, rounds))
                print(rows[-1], flush=True)

            # varlen: the same tokens packed, B sequences of S
            cu = torch.arange(0, (b + 1) * s, s, device=dev, dtype=torch.int32)
            packed = [
                t.transpose(1, 2).reshape(b * s, t.shape[1], d).contiguous() for t in (q, k, v)
            ]

            def varlen_call(g, causal=causal):
                leaves = [t.detach().requires_grad_(g) for t in packed]
                out = flashcore.attention_varlen(*leaves, cu, cu, s, s, causal=causal)
                return out, leaves

            rows.append(
                _pair_rows(
                    "varlen", shape, _calls(varlen_call), plain, ("triton", kern_plain), rounds
                )
            )
            print(rows[-1], flush=True)
            if kern_plain == "gluon":  # the VARLEN mode's own cost: against the Triton dense
                plain_triton = _calls(dense(False, causal, triton_only=True))
                sinks_triton = dense(False, causal, triton_only=True, sinks=sinks)
                for feature, calls in (
                    ("sinks_vs_triton", _calls(sinks_triton)),
                    ("varlen_vs_triton", _calls(varlen_call)),
                ):
                    kernels = ("triton", "triton")
                    rows.append(_pair_rows(feature, shape, calls, plain_triton, kernels, rounds))
                    print(rows[-1], flush=True)
    return {"rows": rows, "dtype": "bfloat16", "rounds": rounds, "quick": quick}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    payload = run_feature_costs_record(quick=args.quick, rounds=args.rounds)
    if args.record:
        from flashcore.results import write_result

        topic = "feature_costs_quick" if args.quick else "feature_costs"
        print("recorded", write_result(topic, payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
