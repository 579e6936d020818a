"""Where a launch-bound call's host time goes, door by door (launch.json's doors at its
shapes; --shapes: indices into its SHAPES, default the smallest, B1 H8 S128 D64 causal):
cProfile over back-to-back calls of each door, then the SDPA door's own pieces timed alone
(the aten override's checks, its three extra outputs, flashcore.attention with ``out=`` and
the lse), each beside the whole call.

    python tools/door_host_profile.py OUT.json [--calls 2000]

cProfile's own cost inflates every Python frame alike; the pieces' timings run without it.

    python tools/door_host_profile.py OUT.json --base DIR [--rounds 6] [--shapes 0 3 5]

A/B instead: host costs a few microseconds apart drown in the noise between two runs of
launch.json, so this checkout (A) and the tree DIR (B) take turns in one session, a fresh
process per tree per round in alternating order; each times every door and SDPA default at
the shapes (eager wall time of back-to-back calls, median of 3 blocks, after a warm-up);
the summary is each row's median over rounds and A / B.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
from pathlib import Path

import torch

# flashcore is imported inside the functions, never at module level: --base's per-tree
# processes import this module first, and each must take flashcore from its own tree.
HERE = Path(__file__).resolve().parents[1]


def _per_call_us(fn, calls, repeats=5):
    """Median over repeats of back-to-back calls' wall time per call (launch.json's own
    timer, synchronized ends)."""
    from flashcore.studies import launch

    return statistics.median(launch._eager_us(fn, calls) for _ in range(repeats))


def _profile(fn, calls, top=25):
    """The ``top`` functions by own time under cProfile: (name, calls per door call, own us
    per door call, cumulative us per door call)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    stats = pstats.Stats(prof).stats
    rows = []
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in stats.items():
        where = f"{Path(file).name}:{line}({name})" if line else name
        rows.append(
            {
                "function": where,
                "calls_per_call": ncalls / calls,
                "own_us_per_call": tottime / calls * 1e6,
                "cum_us_per_call": cumtime / calls * 1e6,
            }
        )
    rows.sort(key=lambda r: -r["own_us_per_call"])
    return rows[:top]


def flashcore_tree() -> str:
    """The directory this process imported flashcore from."""
    import flashcore

    return str(Path(flashcore.__file__).resolve().parents[1])


def eager_worker(shapes, calls):
    """{shape: {impl: eager us per call}} for the doors and SDPA default, and the tree
    flashcore came from (``--base``'s per-tree process; flashcore from the tree on its
    path)."""
    from flashcore.studies import launch as tree_launch

    rows = {"flashcore_tree": flashcore_tree()}
    for index in shapes:
        shape = tree_launch.SHAPES[index]
        fns = tree_launch._calls(shape)
        rows[shape[0]] = {}
        for impl in (*tree_launch.DOORS, "sdpa default"):
            fn, ctx = fns[impl]
            with ctx() if ctx else tree_launch._null():
                for _ in range(50):
                    fn()
                rows[shape[0]][impl] = statistics.median(
                    tree_launch._eager_us(fn, calls) for _ in range(3)
                )
    return rows


def ab(args):
    from decode_host_ab import run_in_tree

    trees = {"A": HERE, "B": Path(args.base).resolve()}
    rounds = []
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        got = {t: run_in_tree(trees[t], "door_host_profile:eager_worker", args.shapes, args.calls)
               for t in order}  # fmt: skip
        for t in order:  # each process must have measured its own tree's code
            imported = Path(got[t].pop("flashcore_tree")).resolve()
            if imported != trees[t]:
                raise RuntimeError(f"tree {t} ({trees[t]}) ran flashcore from {imported}")
        rounds.append({"order": order, **got})
        print(f"round {r} done ({'/'.join(order)})", flush=True)
        _write_ab(args, rounds)  # after every round: a run cut short keeps what it measured


def _write_ab(args, rounds):
    from flashcore import results

    summary = {}
    for shape, impls in rounds[0]["A"].items():
        for impl in impls:
            a = statistics.median(x["A"][shape][impl] for x in rounds)
            b = statistics.median(x["B"][shape][impl] for x in rounds)
            summary[f"{shape} | {impl}"] = {"A_us": a, "B_us": b, "A/B": a / b}
            if len(rounds) == args.rounds:
                print(f"{shape:38s} {impl:26s} A {a:7.2f} B {b:7.2f} A/B {a / b:.3f}")
    results.write_log(
        args.out,
        {
            "topic": "door_host_ab",
            "method": __doc__.split("\n\n")[4],
            "trees": {"A": "this checkout", "B": args.base},
            "rounds_done": f"{len(rounds)} of {args.rounds}",
            "summary": summary,
            "rounds": rounds,
        },
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--shapes", type=int, nargs="+", default=[0], help="indices into launch.SHAPES"
    )
    parser.add_argument("--base", help="A/B against this tree (a directory holding flashcore/)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # this process only: --base's workers have their own path
    if args.base:
        return ab(args)
    from flashcore import results, sdpa_backend
    from flashcore.studies import launch

    profiles = {}
    for index in args.shapes:
        shape = launch.SHAPES[index]
        fns = launch._calls(shape)
        doors = profiles[shape[0]] = {}
        for impl in (*launch.DOORS, "sdpa default"):
            fn, ctx = fns[impl]
            with ctx() if ctx else launch._null():
                whole = _per_call_us(fn, args.calls)
                doors[impl] = {"eager_us_per_call": whole, "profile": _profile(fn, args.calls)}
            print(f"{shape[0]}: {impl:28s} {whole:7.1f} us/call")
            for row in doors[impl]["profile"][:14]:
                print(
                    f"    {row['own_us_per_call']:6.2f} own {row['cum_us_per_call']:7.2f} cum "
                    f"x{row['calls_per_call']:.0f}  {row['function']}"
                )

    # The SDPA door's pieces, each alone, on the tensors the door sees.
    _, b, h, _, s, _, d, causal = launch.SHAPES[0]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    pieces = {
        "unsupported_reason": lambda: sdpa_backend.unsupported_reason(q, k, v, 0.0, causal),
        "three extra outputs (torch.empty)": lambda: (
            torch.empty((2,), dtype=torch.uint64, device="cuda"),
            torch.empty((), dtype=torch.uint64, device="cuda"),
            torch.empty((0,), dtype=q.dtype, device="cuda"),
        ),
        "empty_like(q)": lambda: torch.empty_like(q),
        "flashcore.attention(out=, return_lse=True)": lambda: sdpa_backend.flashcore.attention(
            q, k, v, causal=causal, return_lse=True, out=out
        ),
        "flashcore.attention()": lambda: sdpa_backend.flashcore.attention(q, k, v, causal=causal),
        "flash_forward": lambda: sdpa_backend.flash_forward(q, k, v, is_causal=causal),
    }
    timed = {name: _per_call_us(fn, args.calls) for name, fn in pieces.items()}
    for name, us in timed.items():
        print(f"  piece {name:45s} {us:7.2f} us/call")
    payload = {
        "sdpa_door_pieces_shape": launch.SHAPES[0][0],
        "method": (
            f"eager wall time of {args.calls} back-to-back calls, median of 5; cProfile over "
            f"{args.calls} more calls per door (own and cumulative time per door call, "
            "cProfile's overhead included); the SDPA door's pieces timed alone the same way"
        ),
        "doors": profiles,
        "sdpa_door_pieces_us": timed,
    }
    results.write_log(args.out, {"topic": "door_host_profile", **payload})


if __name__ == "__main__":
    main()
