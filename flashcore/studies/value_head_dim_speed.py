"""v's own head dim (DeepSeek-V3's MLA prefill and training: q.k over D = 192, P.V over
D_v = 128) at speed: forward and backward beside FlashAttention-4 and SDPA, and beside
flashcore's own zero-padded route, in one process (GPU).

    python -m flashcore.studies.value_head_dim_speed [--record] [--quick]

writes results/<gpu>/value_head_dim_speed.json. bf16, B * S = 16K tokens, H = 16 (MLA's
128 heads scaled to the sweep's token budget), S 4K, 8K, 16K, causal and not.

* ``forward``: ``bench.bench_attention_shape`` (same rotated inputs, interleaved rounds,
  medians) over ``flashcore`` (what ``flashcore.attention`` runs: the Gluon kernel on Hopper,
  q/k loaded as 128 + 64 columns), ``flashcore_triton`` (the Triton kernel's HEAD_DIM_V mode,
  an explicit config skipping the dispatch), ``fa4`` (FlashAttention-4's ``flash_attn.cute``,
  where installed), ``sdpa_cudnn`` and ``sdpa_flash`` (a backend that refuses D_v != D
  records the error);
* ``backward``: ``backward_bench.bench_backward_shape`` (autograd of each implementation,
  fixed dO; forward + backward too) over the same implementations but ``flashcore_triton``
  (the backward is the Triton kernel's either way);
* ``padded_route``: the Triton kernel with ``_launch.PAD_VALUE_HEAD_DIM_ON`` switched on
  (q/k/v zero-padded to 192 columns, output sliced; the route exists on the Triton kernel
  only), forward (``flashcore_triton``) and backward (autograd: the dispatch's forward, the
  padded backward), timed in a pass of its own right after: what loading V into a buffer of
  its own (the HEAD_DIM_V mode's fix) bought.

FLOPs count q.k^T over D and P.V over D_v (one head dim of (D + D_v) / 2); the backward's
are 2.5x the forward's, as everywhere in this project.
"""

from __future__ import annotations

import argparse

IMPLS = ("flashcore", "fa4", "sdpa_cudnn", "sdpa_flash")
FORWARD_IMPLS = ("flashcore", "flashcore_triton", "fa4", "sdpa_cudnn", "sdpa_flash")
HEADS = 16


def shapes(quick: bool = False, head_dim: int = 192, head_dim_v: int = 128) -> list[dict]:
    seqlens = (4096,) if quick else (4096, 8192, 16384)
    return [
        dict(B=max(1, 16384 // s), Hq=HEADS, S=s, D=head_dim, Dv=head_dim_v, causal=c,
             dtype="bfloat16")
        for s in seqlens
        for c in (False, True)
    ]  # fmt: skip


def _padded_route(on: bool):
    from ..kernels import _launch

    _launch.PAD_VALUE_HEAD_DIM_ON.clear()
    if on:
        _launch.PAD_VALUE_HEAD_DIM_ON.add("cuda")


def run_record(quick: bool = False, reps: int = 40, log=print) -> dict:
    from .backward_bench import bench_backward_shape
    from .bench import bench_attention_shape

    forward, backward, padded = [], [], []
    for shape in shapes(quick):
        forward += bench_attention_shape(shape, list(FORWARD_IMPLS), reps=reps)
        backward += bench_backward_shape(shape, list(IMPLS), reps=reps, with_forward=True)
        _padded_route(True)
        try:
            for r in bench_attention_shape(shape, ["flashcore_triton"], reps=reps):
                padded.append(dict(r, impl="flashcore_padded_route", phase="forward"))
            for r in bench_backward_shape(shape, ["flashcore"], reps=reps, with_forward=True):
                padded.append(dict(r, impl="flashcore_padded_route", phase="backward"))
        finally:
            _padded_route(False)
        for r in forward[-len(FORWARD_IMPLS) :] + backward[-len(IMPLS) :] + padded[-2:]:
            log(row_line(r))
    return {
        "method": __doc__.strip(),
        "impls": list(FORWARD_IMPLS),
        "forward": forward,
        "backward": backward,
        "padded_route": padded,
        "summary": summary(forward, backward),
    }


def row_line(r: dict) -> str:
    what = (
        f"D{r['D']}/{r['Dv']} S{r['S']:<6} {'causal' if r['causal'] else 'full  '} {r['impl']:<24}"
    )
    if "tflops" not in r:
        return f"{what} {r.get('error', r.get('skipped', ''))}"
    extra = f"  fwd+bwd {r['fwd_bwd_tflops']:.0f}" if "fwd_bwd_tflops" in r else ""
    return f"{what} {r['tflops']:.0f} TFLOP/s{extra}"


def summary(forward: list[dict], backward: list[dict]) -> dict:
    """flashcore / FA4 per shape and their geomean, forward and backward (the issue's target:
    >= 0.95 at S >= 4K); None where FA4 did not run. Forward also flashcore / its Triton
    kernel (what the Gluon path bought)."""
    from .bench import geomean

    out = {}
    for phase, rows in (("forward", forward), ("backward", backward)):
        by = {(r["S"], r["causal"], r["impl"]): r.get("tflops") for r in rows}
        ratios = {
            f"S{s} {'causal' if c else 'full'}": by[(s, c, "flashcore")] / by[(s, c, "fa4")]
            for (s, c, impl) in by
            if impl == "fa4" and by[(s, c, "fa4")] and by.get((s, c, "flashcore"))
        }
        out[phase] = {
            "flashcore_over_fa4": ratios,
            "geomean": geomean(list(ratios.values())) if ratios else None,
        }
        own = {
            f"S{s} {'causal' if c else 'full'}": by[(s, c, "flashcore")] / by[(s, c, impl)]
            for (s, c, impl) in by
            if impl == "flashcore_triton" and by[(s, c, impl)] and by.get((s, c, "flashcore"))
        }
        if own:
            out[phase]["flashcore_over_triton"] = own
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args(argv)
    payload = run_record(quick=args.quick, reps=args.reps)
    print("summary:", payload["summary"])
    if args.record:
        from ..results import write_result

        topic = "value_head_dim_speed_quick" if args.quick else "value_head_dim_speed"
        print("recorded", write_result(topic, payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
