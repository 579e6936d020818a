"""Where the host microseconds of one eager attention call go, on a CUDA machine.

    python3 tools/host_profile.py OUT.json [--calls N]

For each shape of ``flashcore.studies.launch.SHAPES`` and each of flashcore's doors
(``flashcore.studies.launch.DOORS``: the function, the torch op, SDPA's flash backend with
flashcore activated, the flash_attn functions) and SDPA (default backend), after a warm-up:

* ``host_us``: the Python-side time of a call alone (perf_counter around the call, no
  synchronisation inside the loop; the GPU queue is drained every 32 calls so it never
  fills and blocks a launch), median of 5 rounds;
* ``profile``: cProfile over N calls, the 20 functions with the most own time (per call),
  so the time can be assigned to checks, dispatch, descriptor builds or the launcher.

Writes OUT.json with provenance; prints one line per (shape, door).
"""

import argparse
import contextlib
import cProfile
import json
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flashcore

import torch  # noqa: E402
from host_timing import host_us  # noqa: E402  (this script's folder)

from flashcore.results import provenance  # noqa: E402
from flashcore.studies import launch  # noqa: E402

DOORS = (*launch.DOORS, "sdpa default")


def top_functions(fn, calls: int, limit: int = 20) -> list[dict]:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats
    rows = []
    for (path, line, name), (_cc, ncalls, own, cum, _callers) in stats.items():
        where = "/".join(Path(path).parts[-2:]) if path != "~" else "builtin"
        rows.append(
            {
                "function": f"{where}:{line}({name})",
                "calls_per_call": round(ncalls / calls, 2),
                "own_us_per_call": round(own / calls * 1e6, 2),
                "cumulative_us_per_call": round(cum / calls * 1e6, 2),
            }
        )
    rows.sort(key=lambda r: -r["own_us_per_call"])
    return rows[:limit]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    rows = []
    for shape in launch.SHAPES:
        calls = launch._calls(shape)
        for door in DOORS:
            fn, context = calls[door]
            try:
                with context() if context else contextlib.nullcontext():
                    for _ in range(20):
                        fn()  # compile, fill the launch caches
                    torch.cuda.synchronize()
                    us = host_us(fn, args.calls)
                    profile = top_functions(fn, args.calls)
            except RuntimeError as err:  # a door this torch does not have
                rows.append({"shape": shape[0], "door": door, "error": str(err)[:200]})
                print(f"{shape[0]:38s} {door:14s} {str(err)[:100]}", flush=True)
                continue
            rows.append(
                {"shape": shape[0], "door": door, "host_us": round(us, 1), "profile": profile}
            )
            head = ", ".join(f"{r['function']} {r['own_us_per_call']}" for r in profile[:4])
            print(f"{shape[0]:38s} {door:14s} host {us:7.1f} us | {head}", flush=True)
    payload = {
        "provenance": provenance(),
        "tool": "tools/host_profile.py",
        "method": __doc__.split("\n\n")[2].strip(),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
