"""A/B timing of flashcore's kernels: this checkout against another commit's, on one GPU.

A refactor of the kernels must not change their speed. This runs the same calls of
``flashcore.attention`` (forward, and forward + backward) from two source trees, each in its
own Python process (two packages named ``flashcore`` cannot share one), alternating the
trees over rounds so that clock and thermal drift falls on both; each process times every
shape with ``triton.testing.do_bench`` (median) after a warm-up. The JSON written holds every
round's times and, per shape, the median over rounds of B's time / A's time.

    git archive <commit> flashcore | tar -x -C .ab/other     # the B tree (ignored folder)
    python tools/ab_timing.py TOPIC --other .ab/other --other-commit <commit> [--rounds 5]
                              [--suite paged]

writes results/<gpu>/TOPIC.json (``write_result``: provenance and the kernel fingerprint
of this checkout's kernel files).

A is the checkout this script lives in. Suites:

* ``attention`` (default): bf16, B*S = 16K tokens, H*D = 2048 (the perf.json harness's
  shapes); shapes chosen to reach both forward kernels (Triton at D64, Gluon at D128/D256
  from S 1-2K) and the backward.
* ``paged``: the decode kernel on paged and dense caches, paged_decode.json's harness
  (``bench_paged_shape``: CUDA-graph replay, bf16 D128 GQA 32/8, pages of 16/64/256 in a
  random order), at B 1 and 4, caches of 32K and 128K tokens.
* ``paged_ceiling``: the same harness at pages of 16 and 256 and the dense cache, B 1 and 8,
  caches of 32K and 128K tokens, each row also as ``of_copy``: K + V bytes read per second
  over the device-copy ceiling (``bench.copy_ceiling``) its process measured first, the
  target of the small-page work (>= 0.95 from 32K tokens).
* ``gluon_forward``: the Gluon forward alone at its shipped config (``attention_hopper``'s
  defaults: D64 causal too), bf16 D 64/128/256, S 1K-8K, causal and not.
* ``triton_forward``: the Triton forward alone (an explicit config) where the dispatch runs it
  on a Hopper GPU: D64 causal S 1K-16K, D64 non-causal 1K/2K, D128/D256 causal 1K.
* ``fp8``: the FP8 forward as shipped (``fp8_attention`` on per-block + Hadamard inputs,
  quantized outside the timed call), D128 and D256, S 4K/8K/16K, causal and not: two trees
  whose FP8 kernels differ in their machine code alone (tools/ptx_compare.py --fp8 --sass).
* ``mla_backward``: the backward alone (``attention_backward`` on a saved forward's output
  and lse, fixed dO) at MLA's head dims, q/k 192 and v 128: bf16, H 16, B*S = 16K tokens,
  S 4K/8K/16K, causal and not, deterministic and atomic dQ.
* ``ws_backward``: the warp-specialized Gluon backward alone (``attention_backward_hopper_ws``,
  deterministic and atomic modes) on a saved forward's output and lse: bf16, B*S = 16K
  tokens, H*D = 2048, D 64/128, S 4K/16K, causal and not.
* ``ws_backward_d256``: the same at D256, S 2K/4K/16K.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

SHAPES = [  # (D, S, causal)
    (64, 4096, False),
    (64, 4096, True),
    (128, 1024, True),
    (128, 4096, False),
    (128, 8192, True),
    (256, 4096, False),
    (256, 4096, True),
]

WORKER = r"""
import json, sys, torch, triton
import flashcore
try:
    from flashcore.interface import forward_kernel
except ImportError:  # a tree from before the interface layer
    from flashcore.kernels import forward_hopper
    def forward_kernel(q, k, v, *, causal):
        return "gluon" if forward_hopper.chosen(q, k, v, causal=causal) else "triton"
out = {}
for d, s, causal in json.loads(sys.argv[1]):
    h, b = 2048 // d, max(1, 16384 // s)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    fwd = lambda: flashcore.attention(q, k, v, causal=causal)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    do = torch.randn_like(q)
    def fwd_bwd():
        o = flashcore.attention(qg, kg, vg, causal=causal)
        o.backward(do)
    fwd(); fwd_bwd(); torch.cuda.synchronize()
    key = f"D{d} S{s} {'causal' if causal else 'full'}"
    out[key] = dict(
        forward_ms=triton.testing.do_bench(fwd, warmup=50, rep=300),
        forward_backward_ms=triton.testing.do_bench(fwd_bwd, warmup=25, rep=300),
        kernel=forward_kernel(q, k, v, causal=causal),
    )
print("RESULT " + json.dumps(out))
"""

PAGED_SHAPES = [(1, 32768), (4, 32768), (1, 131072), (4, 131072)]  # (B, Sk)

PAGED_WORKER = r"""
import json, sys
from flashcore.studies.paged_decode import bench_paged_shape
out = {}
for b, sk in json.loads(sys.argv[1]):
    shape = dict(B=b, Hq=32, Hkv=8, Sk=sk, D=128, dtype="bfloat16")
    for r in bench_paged_shape(shape, reps=50):
        if not r["impl"].startswith("fa4"):
            out[f"B{b} Sk{sk} {r['impl']}"] = dict(graph_ms=r["graph_timing"]["median_ms"])
print("RESULT " + json.dumps(out))
"""

PAGED_CEILING_SHAPES = [(b, sk) for sk in (32768, 131072) for b in (1, 8)]  # (B, Sk)

PAGED_CEILING_WORKER = r"""
import json, sys
from flashcore.studies import bench
from flashcore.studies.paged_decode import bench_paged_shape
ceiling = bench.copy_ceiling()["tbps"]
out = {}
for b, sk in json.loads(sys.argv[1]):
    shape = dict(B=b, Hq=32, Hkv=8, Sk=sk, D=128, dtype="bfloat16")
    for r in bench_paged_shape(shape, reps=50, page_sizes=(16, 256)):
        if not r["impl"].startswith("fa4"):
            out[f"B{b} Sk{sk} {r['impl']}"] = dict(
                graph_ms=r["graph_timing"]["median_ms"], of_copy=r["tbps"] / ceiling
            )
print("RESULT " + json.dumps(out))
"""

MLA_BACKWARD_SHAPES = [  # (S, causal, deterministic)
    (s, causal, det)
    for s in (4096, 8192, 16384)
    for causal in (False, True)
    for det in (True, False)
]

MLA_BACKWARD_WORKER = r"""
import json, sys, torch, triton
import flashcore
from flashcore.kernels.backward import attention_backward
out = {}
for s, causal, det in json.loads(sys.argv[1]):
    h, b = 16, max(1, 16384 // s)
    q, k = (torch.randn(b, h, s, 192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16)
    o, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True)
    do = torch.randn_like(o)
    bwd = lambda: attention_backward(do, q, k, v, o, lse, causal=causal, deterministic=det)
    bwd(); torch.cuda.synchronize()
    mode = "deterministic" if det else "atomic"
    key = f"D192/128 S{s} {'causal' if causal else 'full'} {mode}"
    out[key] = dict(backward_ms=triton.testing.do_bench(bwd, warmup=25, rep=100))
print("RESULT " + json.dumps(out))
"""

FP8_SHAPES = [(d, s, causal) for d in (128, 256) for s in (4096, 8192, 16384) for causal in (0, 1)]


def forward_worker(imports: str, body: str) -> str:
    """A forward worker's source: IMPORTS (json, sys, torch and triton among them), then per
    (D, S, causal) bf16 q, k, v of B*S = 16K tokens and H*D = 2048 from a generator seeded by
    the shape (the same inputs in both trees), and BODY, which times the call into out[key];
    ``digest`` in BODY: the bytes of its output ``o`` (so the trees' outputs can be compared)."""
    digest = "digest = hashlib.sha256(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest()"
    head = """out = {}
for d, s, causal in json.loads(sys.argv[1]):
    h, b = 2048 // d, max(1, 16384 // s)
    gen = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
"""
    body = textwrap.indent(textwrap.dedent(body).replace("DIGEST", digest), "    ")
    return textwrap.dedent(imports) + head + body + 'print("RESULT " + json.dumps(out))\n'


# The FP8 forward as shipped (fp8_attention on per-block + Hadamard inputs, the dispatch's
# kernel), quantization outside the timed call: the two trees' machine code for the same calls.
FP8_WORKER = forward_worker(
    """
    import json, sys, torch, triton
    from flashcore.interface import fp8_attention
    from flashcore.kernels.fp8 import quantize
    """,
    """
    x = quantize(q, k, v, "per_block_hadamard")
    fwd = lambda: fp8_attention(x, causal=bool(causal))
    fwd(); torch.cuda.synchronize()
    key = f"fp8 D{d} S{s} {'causal' if causal else 'full'}"
    out[key] = dict(forward_ms=triton.testing.do_bench(fwd, warmup=50, rep=300))
    """,
)

WS_BACKWARD_SHAPES = [
    (d, s, c, det) for d in (64, 128) for s in (4096, 16384) for c in (0, 1) for det in (1, 0)
]
# D256 (64-key programs, one dQ buffer): S 2K too, where its deterministic mode pays most
WS_BACKWARD_D256_SHAPES = [
    (256, s, c, det) for s in (2048, 4096, 16384) for c in (0, 1) for det in (1, 0)
]

# The warp-specialized Gluon backward alone in both modes (deterministic: the default where
# it is dispatched), on a saved forward's output and lse: two trees whose kernel differs.
WS_BACKWARD_WORKER = r"""
import json, math, sys, torch, triton
import flashcore
from flashcore.kernels.backward_hopper_ws import attention_backward_hopper_ws
out = {}
for d, s, causal, det in json.loads(sys.argv[1]):
    h, b = 2048 // d, max(1, 16384 // s)
    gen = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(4))
    o, lse = flashcore.attention(q, k, v, causal=bool(causal), return_lse=True)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    bwd = lambda: attention_backward_hopper_ws(
        do, q, k, v, o, lse, *grads, causal_offset=0, is_causal=bool(causal),
        scale=1 / math.sqrt(d), deterministic=bool(det))
    bwd(); torch.cuda.synchronize()
    key = f"ws {'det' if det else 'atomic'} D{d} S{s} {'causal' if causal else 'full'}"
    out[key] = dict(backward_ms=triton.testing.do_bench(bwd, warmup=25, rep=200))
print("RESULT " + json.dumps(out))
"""

GLUON_FORWARD_SHAPES = [
    (d, s, c) for d in (64, 128, 256) for s in (1024, 2048, 4096, 8192) for c in (0, 1)
]

# The Gluon forward alone at its shipped config (attention_hopper's defaults), causal D64
# included (which the dispatch sends to the Triton kernel below S 16K): two trees whose Gluon
# kernels differ.
GLUON_FORWARD_WORKER = forward_worker(
    """
    import hashlib, json, math, sys, torch, triton
    from flashcore.kernels import forward_hopper as fh
    """,
    """
    o = torch.empty_like(q)
    fwd = lambda: fh.attention_hopper(q, k, v, o, o, causal_offset=0, is_causal=bool(causal),
                                      qk_scale=1.4426950408889634 / math.sqrt(d), store_lse=False)
    fwd(); torch.cuda.synchronize()
    key = f"gluon D{d} S{s} {'causal' if causal else 'full'}"
    DIGEST
    out[key] = dict(forward_ms=triton.testing.do_bench(fwd, warmup=50, rep=200), out_sha=digest)
    """,
)

# Where the dispatch runs the Triton forward on a Hopper GPU (dispatch.FORWARD_GLUON_FROM): D64
# below S 4K, D128/D256 causal at 1K; D64 causal 4K-16K beside (below 16K until e1a4d8c).
TRITON_FORWARD_SHAPES = [(64, s, 1) for s in (1024, 2048, 4096, 8192, 16384)] + [
    (64, 1024, 0), (64, 2048, 0), (128, 1024, 1), (256, 1024, 1),
]  # fmt: skip

# The Triton forward alone (an explicit config bypasses the dispatch): two trees whose Triton
# forward kernels differ; the output's bytes compared as in GLUON_FORWARD_WORKER.
TRITON_FORWARD_WORKER = forward_worker(
    """
    import hashlib, json, sys, torch, triton
    from flashcore.interface import attention
    from flashcore.kernels.forward import default_config
    """,
    """
    cfg = default_config(q, k, bool(causal))
    fwd = lambda: attention(q, k, v, causal=bool(causal), config=cfg)
    o = fwd(); torch.cuda.synchronize()
    DIGEST
    key = f"triton D{d} S{s} {'causal' if causal else 'full'}"
    out[key] = dict(forward_ms=triton.testing.do_bench(fwd, warmup=50, rep=200), out_sha=digest)
    """,
)

SUITES = {  # worker, its shapes, the metrics it reports
    "attention": (WORKER, SHAPES, ("forward_ms", "forward_backward_ms")),
    "paged": (PAGED_WORKER, PAGED_SHAPES, ("graph_ms",)),
    "paged_ceiling": (PAGED_CEILING_WORKER, PAGED_CEILING_SHAPES, ("graph_ms", "of_copy")),
    "mla_backward": (MLA_BACKWARD_WORKER, MLA_BACKWARD_SHAPES, ("backward_ms",)),
    "fp8": (FP8_WORKER, FP8_SHAPES, ("forward_ms",)),
    "gluon_forward": (GLUON_FORWARD_WORKER, GLUON_FORWARD_SHAPES, ("forward_ms",)),
    "triton_forward": (TRITON_FORWARD_WORKER, TRITON_FORWARD_SHAPES, ("forward_ms",)),
    "ws_backward": (WS_BACKWARD_WORKER, WS_BACKWARD_SHAPES, ("backward_ms",)),
    "ws_backward_d256": (WS_BACKWARD_WORKER, WS_BACKWARD_D256_SHAPES, ("backward_ms",)),
}


def run_tree(tree: Path, shapes, worker: str = WORKER) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-c", worker, json.dumps(shapes)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("topic", help="record name, e.g. refactor_ab_timing")
    parser.add_argument("--other", type=Path, required=True, help="the B source tree")
    parser.add_argument(
        "--other-commit", default=None, help="the commit the B tree was archived from (recorded)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--suite", choices=sorted(SUITES), default="attention")
    args = parser.parse_args()
    worker, shapes, metrics = SUITES[args.suite]
    here = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(here))
    from flashcore.results import write_result

    rounds = {"A": [], "B": []}
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for name in order:
            tree = here if name == "A" else args.other.resolve()
            rounds[name].append(run_tree(tree, shapes, worker))
            print(f"round {r} {name} done", flush=True)
    summary = {}
    for key in rounds["A"][0]:
        row = {f"kernel_{n}": rounds[n][0][key].get("kernel") for n in ("A", "B")}
        if "out_sha" in rounds["A"][0][key]:  # every round of both trees, the same bytes?
            digests = {x[key]["out_sha"] for n in ("A", "B") for x in rounds[n]}
            row["bitwise_equal"] = len(digests) == 1
        for metric in metrics:
            ratios = [b[key][metric] / a[key][metric] for a, b in zip(rounds["A"], rounds["B"])]
            row[f"{metric}_A"] = statistics.median(x[key][metric] for x in rounds["A"])
            row[f"{metric}_B"] = statistics.median(x[key][metric] for x in rounds["B"])
            row[f"{metric}_B_over_A"] = statistics.median(ratios)
            row[f"{metric}_B_over_A_range"] = [min(ratios), max(ratios)]
        summary[key] = row
        ratios = ", ".join(f"{m} B/A {row[f'{m}_B_over_A']:.3f}" for m in metrics)
        kernels = f" (A {row['kernel_A']}, B {row['kernel_B']})" if row["kernel_A"] else ""
        same = "" if "bitwise_equal" not in row else f" bitwise_equal={row['bitwise_equal']}"
        print(f"{key:>22}: {ratios}{kernels}{same}")
    other = str(args.other)
    payload = dict(
        other_tree=other,
        other_commit=args.other_commit,
        suite=args.suite,
        rounds=rounds,
        summary=summary,
        shapes=shapes,
    )
    print("recorded", write_result(args.topic, payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
