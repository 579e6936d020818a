"""``cp``: context parallelism, run under ``torchrun --nproc-per-node N -m flashcore cp ...``
(one process per device; gloo on CPU): the ring against float64, and speed on GPUs."""

from __future__ import annotations

import os
import sys


def add_cp_arguments(p) -> None:
    p.add_argument(
        "action",
        choices=["check", "bench", "train"],
        help="check: the correctness grid; bench: the grid and the timings; train: a "
        "transformer block's training step, checked and timed (cp_train)",
    )
    p.add_argument("--grid", choices=["cpu", "gpu"], help="correctness grid (default: by device)")
    p.add_argument(
        "--strategy",
        default="both",
        choices=["ring", "ulysses", "both"],
        help="which strategies' correctness grids to run: the ring, the head all-to-all, or both",
    )
    p.add_argument("--filter", help="only check cases whose name contains this text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="bench without the correctness grid")
    p.add_argument(
        "--seqlens", type=int, nargs="+", help="global sequence lengths (default 128K ... 2M)"
    )
    p.add_argument("--wide", action="store_true", help="S to 4M, every impl to 2M (about 20 min)")
    p.add_argument("--cp-only-from", type=int, help="from this S only flashcore's ring is timed")
    p.add_argument(
        "--impls",
        nargs="+",
        help="which implementations the bench times (default: all; cp_bench.IMPLS)",
    )
    p.add_argument(
        "--train-max-s",
        type=int,
        default=1 << 18,
        help="forward + backward (flashcore's ring, PyTorch CP) timed up to this S",
    )
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    p.add_argument("--heads", type=int, nargs=2, default=[8, 2], metavar=("HQ", "HKV"))
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument(
        "--budget-s", type=float, default=240.0, help="skip an S predicted to end past this"
    )
    p.add_argument("--record", action="store_true", help="write results/<gpu>-x<N>/<topic>.json")
    p.add_argument("--topic", default="context_parallel", help="record name")


def run_cp(args) -> int:
    """Context parallelism; run under torchrun, one process per device (gloo on CPU). The
    record's payload is built by ``context_parallel.run_study`` (notebook 08 runs this
    command); this body joins the process group and writes the record after each stage."""
    import torch
    import torch.distributed as dist

    from ...results import PARALLEL_FILES, device_slug, write_result
    from .. import context_parallel as CP

    if args.action == "train":
        from ..cp_train import TRAIN_IMPLS as known
    else:
        known = CP.IMPLS
    unknown = sorted(set(getattr(args, "impls", None) or ()) - set(known))
    if unknown:
        print(f"unknown --impls {unknown}; known: {list(known)}", file=sys.stderr)
        return 2
    for key, value in CP.NO_MULTICAST.items():  # NVLink multicast stays off
        os.environ.setdefault(key, value)
    if args.action == "bench" and not torch.cuda.is_available():
        if args.dtype == "bfloat16":
            print(
                "cp bench on CPU (a smoke run: interpreter timings mean nothing) needs "
                "--dtype float16: the interpreter's bfloat16 dot is wrong",
                file=sys.stderr,
            )
            return 2
        print("cp bench on CPU: a smoke run of the code, the timings mean nothing", file=sys.stderr)
    rank, world_size, device = CP.init_from_env()
    log = print if rank == 0 else (lambda *a, **k: None)
    slug = f"{device_slug()}-x{world_size}"

    topic = args.topic
    if args.action == "train" and topic == "context_parallel":
        topic = "context_parallel_training"

    def record(payload):  # after every stage: a run cut short keeps what it measured
        if args.record and rank == 0:
            path = write_result(topic, payload, slug=slug, fingerprint_extra=PARALLEL_FILES)
            print("recorded:", path, flush=True)

    try:
        payload = CP.run_study(args, device=device, world_size=world_size, log=log, on_stage=record)
        if args.action == "check":  # one stage: the grid (bench and train record as they go)
            record(payload)
        return 0 if CP.study_passed(payload["summary"]) else 1
    finally:
        dist.destroy_process_group()
