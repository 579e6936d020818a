"""``long``: the long-context study (GPU): the S sweep to 1M tokens, sliding windows,
offsets past 2^31 elements, decode over long caches, the 32K whole-row tile."""

from __future__ import annotations

from . import device


def add_long_arguments(p) -> None:
    p.add_argument(
        "--parts", nargs="+", default=["sweep", "offsets", "window", "decode", "compile32k"]
    )
    p.add_argument("--s", type=int, nargs="+", default=[2**i for i in range(10, 21)])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--windows", type=int, nargs="*", default=[4096])
    p.add_argument(
        "--max-seconds", type=float, default=6.0, help="skip an impl once a call would exceed this"
    )
    p.add_argument("--topic", default="long_context")
    p.add_argument("--record", action="store_true", help="write results/<gpu>/long_context.json")


def run_long(args) -> int:
    """Long-context study: the S sweep, sliding window, >2^31 offsets, decode on long caches."""
    import functools

    from ...results import write_result
    from .. import long_context as L

    if device() != "cuda":
        print("the long-context measurements need a CUDA device")
        return 2
    payload = L.run_long_record(
        args.s,
        heads=args.heads,
        windows=args.windows,
        max_seconds_per_call=args.max_seconds,
        parts=args.parts,
        log=functools.partial(print, flush=True),
    )
    if args.record:
        print("recorded:", write_result(args.topic, payload))
    return 0
