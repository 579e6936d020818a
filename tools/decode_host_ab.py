"""Host time of a decode call, this checkout (A) against another tree (B), on a CUDA machine.

    python3 tools/decode_host_ab.py OUT.json --base DIR [--rounds 5] [--calls 2000] [--cpu]

Host cost differences of a few microseconds drown in the noise between two runs of
launch.json (its SDPA rows alone moved 25.5 -> 32.6 us between two machines of one kind). Here
the two trees take turns in the same session: each round runs one fresh process per tree, in
alternating order, and each process times, after a warm-up, the decode calls below on
launch.json's decode shape (B1, Hq 32 / Hkv 8, an 8K cache, D128, bf16):

* ``static``: ``attention_with_kvcache(q, k, v, lengths, check_lengths=False)``: the same
  tensors every call, the lengths in device memory (a serving step);
* ``growing``: ``kernels.decode.attend_full_cache(q, k, v)`` on views one key longer every
  call, over 256 lengths (transformers' dynamic cache, as launch.json's growing row);
* ``flash_attn door``: ``flash_attn_with_kvcache`` on (B, S, H, D) views of ``static``'s
  tensors with ``check_lengths=False``.

``host_us``: the Python-side time of a call alone (perf_counter around the call, the GPU
queue drained every 32 calls outside the timed part, as tools/host_profile.py), the median
of 5 blocks of N calls. ``eager_us``: wall time per call with the queue drained only at
the end (what a host-bound loop sees). The record holds every round of both trees and the
per-call median of B / A over rounds.

``--cpu`` (any machine): the launcher's Python alone, ``kernels.decode.launch_decode`` with
stand-in launchers that do nothing (the device checks patched to pass, a no-op entry in its
compiled-kernel cache), on CPU tensors of the same shape: ``static`` with a lengths tensor,
``growing`` without one on views one key longer every call (100000 lengths, so no signature
repeats). ``host_us`` is then the median over 15 blocks of N calls of the mean time per
call, ``torch.empty`` of the output included.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CASES = ("static", "growing", "flash_attn door")
CPU_CASES = ("static", "growing")


def _worker(calls: int) -> dict:
    import torch
    from host_timing import host_us  # tools/, on the path the parent gave this process

    import flashcore
    from flashcore.flash_attn_interface import flash_attn_with_kvcache
    from flashcore.kernels.decode import attend_full_cache

    g = torch.Generator(device="cuda").manual_seed(0)
    b, hq, hkv, sk, d, growth = 1, 32, 8, 8192, 128, 256

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    q, k, v = randn(b, hq, 1, d), randn(b, hkv, sk, d), randn(b, hkv, sk, d)
    kk, vv = randn(b, hkv, sk + growth, d), randn(b, hkv, sk + growth, d)
    lengths = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    q_bshd, k_bshd, v_bshd = (t.transpose(1, 2) for t in (q, k, v))
    step = [0]

    def growing():
        step[0] = (step[0] + 1) % growth
        n = sk + step[0]
        return attend_full_cache(q, kk[:, :, :n], vv[:, :, :n])

    fns = {
        "static": lambda: flashcore.attention_with_kvcache(q, k, v, lengths, check_lengths=False),
        "growing": growing,
        "flash_attn door": lambda: flash_attn_with_kvcache(
            q_bshd, k_bshd, v_bshd, cache_seqlens=lengths, check_lengths=False
        ),
    }
    rows = {}
    for name in CASES:
        fn = fns[name]
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        host = host_us(fn, calls)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / calls * 1e6
        rows[name] = {"host_us": host, "eager_us": eager}
    return rows


def _cpu_worker(calls: int) -> dict:
    import statistics as stats

    import torch

    from flashcore.kernels import _launch, decode

    def no_op(grid, stream, args, descs=None):
        return None

    decode.on_interpreter = lambda t: False
    decode._num_sms = lambda index: 132
    _launch.usable = lambda device: True
    _launch.current_stream = lambda index: 0
    decode._DECODE_LAUNCHES.get = lambda key: (no_op, no_op)

    b, hq, hkv, sk, d, growth = 1, 32, 8, 8192, 128, 100000
    q = torch.randn(b, hq, 1, d).to(torch.bfloat16)
    k = torch.randn(b, hkv, sk, d).to(torch.bfloat16)
    big = torch.randn(b, hkv, sk + growth, d).to(torch.bfloat16)
    lengths = torch.full((b,), sk, dtype=torch.int32)
    step = [0]

    def static():
        out = torch.empty(q.shape, dtype=q.dtype)
        decode.launch_decode(q, k, k, lengths, 0, out, None, None, None, None, None, 1, sk, False)

    def growing():
        step[0] = (step[0] + 1) % growth
        kk = big[:, :, : sk + step[0]]
        n = kk.shape[2]
        out = torch.empty(q.shape, dtype=q.dtype)
        decode.launch_decode(q, kk, kk, None, n, out, None, None, None, None, None, 1, n, False)

    rows = {}
    for name, fn in (("static", static), ("growing", growing)):
        for _ in range(2000):
            fn()
        blocks = []
        for _ in range(15):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            blocks.append((time.perf_counter() - t0) / calls * 1e6)
        rows[name] = {"host_us": stats.median(blocks)}
    return rows


def run_in_tree(tree: Path, worker: str, *args) -> dict:
    """``worker(*args)`` (``"module:function"``, a module of tools/) in a fresh process that
    imports flashcore from ``tree``; its return value, through JSON."""
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    code = (
        "import importlib, json, sys; sys.path.insert(0, sys.argv[1]); "
        "sys.path.insert(1, sys.argv[2]); module, name = sys.argv[3].split(':'); "
        "worker = getattr(importlib.import_module(module), name); "
        "print(json.dumps(worker(*json.loads(sys.argv[4]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(HERE / "tools"), worker, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_tree(tree: Path, calls: int, cpu: bool) -> dict:
    worker = "decode_host_ab:_cpu_worker" if cpu else "decode_host_ab:_worker"
    return run_in_tree(tree, worker, calls)


def _method(cpu: bool) -> str:
    """The docstring's paragraphs that describe what a run of this mode measured."""
    paragraphs = [p.strip() for p in __doc__.split("\n\n")]
    return paragraphs[5] if cpu else "\n\n".join(paragraphs[2:5])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--base", required=True, help="tree B (a directory holding flashcore/)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--cpu", action="store_true", help="the launcher's Python alone (see above)"
    )
    args = parser.parse_args()
    cases = CPU_CASES if args.cpu else CASES
    trees = {"A": HERE, "B": Path(args.base).resolve()}
    rounds = []
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        got = {tree: _run_tree(trees[tree], args.calls, args.cpu) for tree in order}
        rounds.append({"order": order, **got})
        print(
            f"round {r}: "
            + "; ".join(
                f"{case} host A {got['A'][case]['host_us']:.2f} B {got['B'][case]['host_us']:.2f}"
                for case in cases
            ),
            flush=True,
        )
    summary = {}
    for case in cases:
        for metric in rounds[0]["A"][case]:
            a = statistics.median(x["A"][case][metric] for x in rounds)
            b = statistics.median(x["B"][case][metric] for x in rounds)
            summary[f"{case} {metric}"] = {
                "A": round(a, 2),
                "B": round(b, 2),
                "B/A": round(b / a, 3),
            }
            print(f"{case:16s} {metric:9s} A {a:7.2f}  B {b:7.2f}  B/A {b / a:.3f}", flush=True)
    sys.path.insert(0, str(HERE))
    from flashcore.results import provenance

    payload = {
        "provenance": provenance(),
        "tool": "tools/decode_host_ab.py",
        "method": _method(args.cpu),
        "trees": {"A": "this checkout", "B": args.base},
        "summary": summary,
        "rounds": rounds,
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
