"""The host-time measure tools/host_profile.py and tools/decode_host_ab.py share: it needs
torch alone, so a process timing another tree's flashcore can import it from here."""

import statistics
import time

import torch


def host_us(fn, calls: int) -> float:
    """Median over 5 rounds of the mean host time of one call: a timer around the call
    alone, the GPU queue drained every 32 calls outside the timed part, so it never fills
    and blocks a launch."""
    rounds = []
    for _ in range(5):
        spent = 0.0
        for i in range(calls):
            if i % 32 == 0:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            spent += time.perf_counter() - t0
        torch.cuda.synchronize()
        rounds.append(spent / calls * 1e6)
    return statistics.median(rounds)
