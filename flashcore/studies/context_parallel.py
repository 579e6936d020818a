"""The context-parallel study behind notebooks/08_context_parallel.ipynb and
``torchrun --nproc-per-node N -m flashcore cp {check,bench}``: its public face, and the
entry point ``torchrun --nproc-per-node 2 -m flashcore.studies.context_parallel`` (the
re-check of PyTorch's context-parallel output alone, ``torch_check_main``).

The study lives in modules of its own, which this one gathers:

    cp_check    cases, the check of one case on every rank against the float64 reference
                (the per-rank error terms combined into the global rule), the local gloo
                spawner (``spawn_check``: CPU, Triton interpreter)
    cp_planted  the planted bugs, each planted in ``flashcore.parallel`` for one block
    cp_timing   wall clock per call on every rank, peak memory
    cp_torch    PyTorch's ``context_parallel`` around SDPA, and the check of its output
                (``torch_cp_cpu_check``: the same on CPU)
    cp_bench    the bench (ring, no transfers, transfers alone, one GPU, PyTorch CP, the
                training step, the overlap probe) and ``run_study``, the one runner of
                results/<gpu>-x<N>/context_parallel.json
    cp_report   notebook 08's tables and figures
"""

from __future__ import annotations

import sys

import torch.distributed as dist

from .cp_bench import (
    IMPLS,
    NO_MULTICAST,
    bench,
    bench_command,
    causal_flops,
    overlap_probe,
    run_bench_command,
    run_study,
    study_passed,
)
from .cp_check import (
    CPCase,
    check_case,
    cpu_grid,
    current_device,
    gpu_grid,
    init_from_env,
    run_check,
    spawn_check,
    summarize_cases,
    ulysses_cpu_grid,
)
from .cp_planted import PLANTED_BUGS, planted
from .cp_torch import (
    inputs_identical_across_ranks,
    torch_cp_cpu_check,
    torch_cp_output_check,
    torch_cp_sdpa,
)

__all__ = [
    "IMPLS",
    "NO_MULTICAST",
    "PLANTED_BUGS",
    "CPCase",
    "bench",
    "bench_command",
    "causal_flops",
    "check_case",
    "cpu_grid",
    "current_device",
    "gpu_grid",
    "init_from_env",
    "inputs_identical_across_ranks",
    "overlap_probe",
    "planted",
    "run_bench_command",
    "run_check",
    "run_study",
    "spawn_check",
    "study_passed",
    "summarize_cases",
    "torch_check_main",
    "torch_cp_cpu_check",
    "ulysses_cpu_grid",
    "torch_cp_output_check",
    "torch_cp_sdpa",
]


def torch_check_main(argv=None) -> int:
    """``torchrun --nproc-per-node 2 -m flashcore.studies.context_parallel [--seqlen S]
    [--record]``: PyTorch's context_parallel + SDPA (cuDNN, flash) timed at one S, causal and
    not, with its output checked (``torch_cp_output_check``); records
    results/<gpu>-x<N>/context_parallel_torch_check.json. About a minute on two H200s."""
    import argparse

    from ..results import PARALLEL_FILES, device_slug, write_result

    ap = argparse.ArgumentParser(description=torch_check_main.__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=1 << 17)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    rank, world_size, _ = init_from_env()
    log = print if rank == 0 else (lambda *a, **k: None)
    result = bench(
        [args.seqlen],
        impls=("torch_cp_cudnn", "torch_cp_flash"),
        probe_seqlens=(),
        budget_s=600.0,
        log=log,
    )
    if args.record and rank == 0:
        path = write_result(
            "context_parallel_torch_check",
            {"world_size": world_size, **result},
            command="torchrun --nproc-per-node "
            f"{world_size} -m flashcore.studies.context_parallel --seqlen {args.seqlen} --record",
            slug=f"{device_slug()}-x{world_size}",
            fingerprint_extra=PARALLEL_FILES,
        )
        log("recorded:", path)
    checks = result["torch_cp_checks"]
    dist.barrier()
    dist.destroy_process_group()
    return 0 if checks and all(c.get("passed") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(torch_check_main())
