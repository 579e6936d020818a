"""Timing on every rank of a process group, for the context-parallel bench (``cp_bench``)
and PyTorch's context parallelism beside it (``cp_torch``): wall clock per call from a
barrier, the slowest rank counts; peak device memory, the largest rank's."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak():
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def timed(fn, *, reps: int, warmup: int, group=None) -> float:
    """Median wall time (ms) of ``fn`` over ``reps`` calls, each started together on every
    rank (barrier) and ended when this rank's device is idle; the slowest rank counts."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        dist.barrier(group=group)
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    t = torch.tensor([statistics.median(samples)], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t)


def _comm_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def peak_gib(group=None) -> float:
    """Peak device memory allocated since the last reset, max over ranks (0 on CPU)."""
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    t = torch.tensor([peak], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return round(float(t), 3)
