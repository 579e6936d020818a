"""Backward-pass study: speed beside SDPA flash, SDPA cuDNN and FlexAttention, the cost of
deterministic mode, forward + backward of a training step, memory against S, and the
launch-config sweep behind kernels/backward.py's table.

Method (every number in results/<gpu>/backward.json comes from here):

* Backward alone: one forward builds the autograd graph, then ``torch.autograd.grad`` of
  the output with a fixed random dO (``retain_graph=True``) is timed with CUDA events
  (bench.py's ``time_launches``: warm-up, then per-launch samples; median, P95, P99,
  bootstrap CI). Every implementation goes through autograd the same way.
  ``flashcore_deterministic`` / ``flashcore_atomic`` time ``attention_backward`` directly
  in each mode, with the forward's saved (out, lse). ``flashcore`` is the default through
  autograd: the warp-specialized Gluon backward's deterministic mode where the dispatch sends
  it (``dispatch.BACKWARD_GLUON_DETERMINISTIC_FROM``), else the Triton backward's
  deterministic mode. ``flashcore_nondeterministic`` is ``attention(..., deterministic=False)``:
  the Gluon kernel's atomic mode where the dispatch sends it (``dispatch.BACKWARD_GLUON_FROM``).
* FLOPs = 2.5 x the forward's (4 B H Sq Sk D, halved for causal: only visible pairs):
  FlashAttention's convention (5 matmuls against the forward's 2).
* Operands are B S H D = 16K x 2048 x 2 bytes = 64 MiB per tensor, beyond the 50 MiB L2,
  so one input set is not served from L2 between launches.
* Peers measured in the same process on the same tensors; FlexAttention compiled once per
  shape (bench.make_flex), its backward compiled with it.
"""

from __future__ import annotations

import torch

from .bench import (
    TOKENS_PER_BATCH,
    attention_flops,
    geomean,
    make_fa4,
    make_flex,
    make_sdpa,
    time_launches,
)


def backward_shapes(
    head_dims=(64, 128, 256),
    seqlens=(2048, 4096, 8192, 16384),
    dtypes=("bfloat16",),
    causal=(False, True),
) -> list[dict]:
    """B * S = 16K tokens, H * D = 2048 (as the forward sweep)."""
    return [
        dict(B=max(1, TOKENS_PER_BATCH // s), Hq=2048 // d, S=s, D=d, causal=c, dtype=dt)
        for dt in dtypes
        for d in head_dims
        for s in seqlens
        for c in causal
    ]


def _forward_fn(impl, causal, q, k):
    from ..interface import attention

    if impl in ("flashcore", "flashcore_deterministic", "flashcore_atomic"):
        return lambda q, k, v: attention(q, k, v, causal=causal)
    if impl == "flashcore_nondeterministic":  # the dispatch's choice for deterministic=False
        return lambda q, k, v: attention(q, k, v, causal=causal, deterministic=False)
    if impl == "flex":
        return make_flex(causal, q.shape, k.shape, "cuda")
    if impl == "fa4":
        return make_fa4(causal)
    if impl.startswith("sdpa_"):
        return make_sdpa(impl[len("sdpa_") :], causal, q.shape[1] != k.shape[1])
    raise ValueError(f"unknown implementation {impl!r}")


def bench_backward_shape(
    shape: dict, impls: list[str], *, reps: int = 50, warmup: int = 5, with_forward: bool = False
) -> list[dict]:
    """Time the backward (and, with_forward, forward + backward) of every implementation on
    one shape. One row per implementation; errors are recorded, not raised."""
    from ..interface import attention
    from ..kernels.backward import attention_backward

    B, H, S, D = shape["B"], shape["Hq"], shape["S"], shape["D"]
    Hkv = shape.get("Hkv", H)
    causal, dtype = shape["causal"], getattr(torch, shape["dtype"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype, generator=gen)
    Dv = shape.get("Dv", D)  # v's head dim (DeepSeek's MLA: D 192, Dv 128)
    v = torch.randn(B, Hkv, S, Dv, device="cuda", dtype=dtype, generator=gen)
    do = torch.randn(B, H, S, Dv, device="cuda", dtype=dtype, generator=gen)
    # q.k^T over D and P.V over Dv: the FLOPs of one head dim of (D + Dv) / 2.
    flops = 2.5 * attention_flops(B, H, S, S, (D + Dv) / 2, causal)
    rows, ref_dq = [], None
    for impl in impls:
        row = {**shape, "Hkv": Hkv, "impl": impl, "flops": flops}
        try:
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            fwd = None
            if impl in ("flashcore_deterministic", "flashcore_atomic"):
                det = impl == "flashcore_deterministic"
                with torch.no_grad():
                    out, lse = attention(q, k, v, causal=causal, return_lse=True)

                def run_backward(i, out=out, lse=lse, det=det):
                    return attention_backward(
                        do, q, k, v, out, lse, causal=causal, deterministic=det
                    )

                grads = run_backward(0)
            else:
                fwd = _forward_fn(impl, causal, q, k)
                out = fwd(*leaves)

                def run_backward(i, out=out, leaves=leaves):
                    return torch.autograd.grad(out, leaves, do, retain_graph=True)

                grads = run_backward(0)
            dq = grads[0].float()
            if ref_dq is None:
                ref_dq = dq
            else:  # sanity: every implementation computes the same gradient
                row["dq_max_abs_diff_vs_first"] = float((dq - ref_dq).abs().max())
            del grads, dq
            t = time_launches(run_backward, 1, warmup=warmup, reps=reps)
            row["timing"] = t.as_dict()
            row["tflops"] = flops / t.median_ms / 1e9
            if with_forward and fwd is not None:  # the same (compiled) forward as above

                def step(i):
                    return torch.autograd.grad(fwd(*leaves), leaves, do)

                ts = time_launches(step, 1, warmup=warmup, reps=reps)
                row["fwd_bwd_timing"] = ts.as_dict()
                row["fwd_bwd_tflops"] = (flops / 2.5 * 3.5) / ts.median_ms / 1e9
            del out
        except Exception as exc:  # a peer that does not support the shape is a result too
            row["error"] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def speed_summary(
    rows: list[dict], head_dim: int = 128, dtype: str = "bfloat16", key: str = "tflops"
) -> dict:
    """Geomean over S x causal of flashcore's TFLOP/s divided by each peer's, at one D/dtype."""
    table = {}
    for r in rows:
        if r["D"] == head_dim and r["dtype"] == dtype and key in r:
            table[(r["S"], r["causal"], r["impl"])] = r[key]
    out = {}
    shapes = sorted({(s, c) for s, c, _ in table})
    for peer in sorted({i for _, _, i in table} - {"flashcore"}):
        ratios = [
            table[(s, c, "flashcore")] / table[(s, c, peer)]
            for s, c in shapes
            if (s, c, "flashcore") in table and (s, c, peer) in table
        ]
        if ratios:
            out[peer] = {"geomean": geomean(ratios), "worst": min(ratios), "shapes": len(ratios)}
    return out


def backward_memory(
    seqlens=(2048, 4096, 8192, 16384, 32768),
    head_dim: int = 128,
    heads: int = 8,
    dtype=torch.bfloat16,
) -> list[dict]:
    """Peak device memory of one backward beyond its inputs and outputs, against S (B = 1).
    An S x S buffer would grow it quadratically; FlashAttention's backward grows linearly
    (delta, lse: (B, H, S) fp32)."""
    from ..interface import attention
    from ..kernels.backward import attention_backward

    rows = []
    for s in seqlens:
        gen = torch.Generator(device="cuda").manual_seed(s)
        q, k, v, do = (
            torch.randn(1, heads, s, head_dim, device="cuda", dtype=dtype, generator=gen)
            for _ in range(4)
        )
        with torch.no_grad():
            out, lse = attention(q, k, v, causal=True, return_lse=True)
            grads = [torch.empty_like(t) for t in (q, k, v)]
            attention_backward(
                do, q, k, v, out, lse, causal=True, dq=grads[0], dk=grads[1], dv=grads[2]
            )
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            attention_backward(
                do, q, k, v, out, lse, causal=True, dq=grads[0], dk=grads[1], dv=grads[2]
            )
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        tensor_bytes = q.numel() * q.element_size()
        rows.append(
            {
                "S": s,
                "H": heads,
                "D": head_dim,
                "dtype": str(dtype).replace("torch.", ""),
                "extra_bytes": int(peak - base),
                "tensor_bytes": int(tensor_bytes),
                "s_by_s_bytes_would_be": int(heads * s * s * 4),
            }
        )
        del q, k, v, do, out, lse, grads
        torch.cuda.empty_cache()
    return rows


def tuning_configs(head_dim: int) -> list[dict]:
    """Candidate (dkdv, dq) launch configs: (BLOCK_M, BLOCK_N, warps, stages)."""
    # First of each list: the shipped config (kernels/backward.py's _HOPPER_TABLE, chosen by
    # timing a wider sweep: tools/backward_probe.py); the rest its measured neighbours.
    if head_dim >= 256:
        dkdv = [(64, 64, 8, 2), (64, 64, 8, 1), (64, 32, 8, 1)]
        dq = [(64, 32, 4, 3), (64, 32, 4, 1), (64, 64, 8, 1)]
    elif head_dim >= 128:
        dkdv = [(64, 64, 4, 2), (64, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 32, 4, 2)]
        dq = [(128, 64, 8, 3), (64, 64, 4, 2), (128, 128, 8, 2), (128, 64, 8, 4)]
    else:
        dkdv = [(64, 64, 4, 3), (64, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 2)]
        dq = [(128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3)]
    return [dict(dkdv=a, dq=dq[0]) for a in dkdv] + [dict(dkdv=dkdv[0], dq=b) for b in dq[1:]]


def tune_backward(
    shapes: list[dict], *, reps: int = 20, deterministic_modes=(True, False)
) -> list[dict]:
    """Time every candidate config of attention_backward on every shape."""
    from ..interface import attention
    from ..kernels.backward import attention_backward

    rows = []
    for shape in shapes:
        B, H, S, D = shape["B"], shape["Hq"], shape["S"], shape["D"]
        dtype = getattr(torch, shape["dtype"])
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(4))
        with torch.no_grad():
            out, lse = attention(q, k, v, causal=shape["causal"], return_lse=True)
        flops = 2.5 * attention_flops(B, H, S, S, D, shape["causal"])
        for det in deterministic_modes:
            for cfg in tuning_configs(D):
                if not det and cfg["dq"] != tuning_configs(D)[0]["dq"]:
                    continue  # the dq kernel does not run in atomic mode
                row = {
                    **shape,
                    "deterministic": det,
                    "dkdv": list(cfg["dkdv"]),
                    "dq": list(cfg["dq"]),
                }
                try:
                    t = time_launches(
                        lambda i: attention_backward(
                            do,
                            q,
                            k,
                            v,
                            out,
                            lse,
                            causal=shape["causal"],
                            deterministic=det,
                            config=cfg,
                        ),
                        1,
                        warmup=3,
                        reps=reps,
                    )
                    row["median_ms"] = t.median_ms
                    row["tflops"] = flops / t.median_ms / 1e9
                except Exception as exc:
                    first_line = str(exc).splitlines()[0][:160] if str(exc) else ""
                    row["error"] = f"{type(exc).__name__}: {first_line}"
                rows.append(row)
        torch.cuda.empty_cache()
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        what = f"{r['tflops']:6.1f} TFLOP/s" if "tflops" in r else r.get("error", "?")
        extra = f"  fwd+bwd {r['fwd_bwd_tflops']:6.1f}" if "fwd_bwd_tflops" in r else ""
        print(
            f"bwd {r['dtype']:<8} D{r['D']:<3} S{r['S']:<6} "
            f"{'causal' if r['causal'] else 'full  '} {r['impl']:<24} {what}{extra}",
            flush=True,
        )


def _grid_worker(cases, base_seed, deterministic, device):
    from ..validate_backward import run_backward_grid

    return run_backward_grid(
        cases, device, base_seed=base_seed, deterministic=deterministic, progress=False
    )


def _shard_seeded(cases, jobs):
    """Split (index, case) pairs round-robin so each case keeps the seed base + index."""
    return [[(i, c) for i, c in enumerate(cases) if i % jobs == j] for j in range(jobs)]


def run_grid_parallel(
    cases, *, jobs: int = 8, deterministic: bool = True, device: str = "cuda"
) -> list[dict]:
    """The gradient grid on the GPU from ``jobs`` processes at once: the time is Triton's
    compilation (one kernel set per head dim / dtype / mask kind), which is single-threaded
    per process. Each case keeps seed = its index, as in the serial run."""
    import concurrent.futures as cf
    import multiprocessing as mp

    rows = [None] * len(cases)
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {}
        for shard in _shard_seeded(cases, jobs):
            for i, c in shard:
                futures[pool.submit(_grid_worker, [c], i, deterministic, device)] = i
        for f in cf.as_completed(futures):
            rows[futures[f]] = f.result()[0]
    return rows


def _compile_worker(spec):
    """Launch one backward config once on small inputs with the same constexprs and stride
    divisibility as the timed shapes, so the kernels land in Triton's on-disk cache."""
    from ..interface import attention
    from ..kernels.backward import attention_backward

    d, dtype, causal, cfg, det = spec
    try:
        q, k, v, do = (
            torch.randn(1, 2, 256, d, device="cuda", dtype=getattr(torch, dtype)) for _ in range(4)
        )
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
        attention_backward(do, q, k, v, out, lse, causal=causal, deterministic=det, config=cfg)
        torch.cuda.synchronize()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def precompile(specs, jobs: int = 8) -> list:
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_compile_worker, specs))


def run_backward_record(
    *,
    grid: str = "full",
    limit: int | None = None,
    both_modes: bool = False,
    jobs: int = 8,
    repeats: int = 5,
    head_dims=(64, 128, 256),
    seqlens=(2048, 4096, 8192, 16384),
    dtypes=("bfloat16",),
    impls=("flashcore", "flashcore_atomic", "sdpa_flash", "sdpa_cudnn", "flex"),
    flex_head_dims=(),
    reps: int = 30,
    fwd_bwd: bool = False,
    memory: bool = False,
    tune: bool = False,
    tune_seqlens=(4096,),
    train: bool = False,
    on_stage=None,
) -> dict:
    """The payload of results/<gpu>/backward.json (``python -m flashcore backward``, whose
    options these are): determinism, the gradient grid (``grid`` "full", "cpu" or "none"; in
    deterministic and, with ``both_modes``, atomic mode), and on a GPU the peak memory,
    speed beside ``impls`` (Flex only at ``flex_head_dims``, bf16), the launch-config sweep
    and a transformers training step, each where asked. ``on_stage(payload)`` is called after
    each stage (the CLI records there, so a run cut short keeps what it measured;
    ``stages_done`` says which)."""
    from ..validate import AttentionCase
    from ..validate_backward import (
        backward_grid,
        check_backward_determinism,
        run_backward_grid,
        summarize_backward,
    )

    device = "cuda" if torch.cuda.is_available() else "cpu"
    payload = {"method": __doc__.strip(), "stages_done": []}

    def done(stage):
        payload["stages_done"].append(stage)
        if on_stage is not None:
            on_stage(payload)

    det_cases = [
        AttentionCase(
            2, 16, 4, 2048, 2048, 128, "bfloat16" if device == "cuda" else "float16", True
        ),
        AttentionCase(1, 8, 1, 1000, 3000, 64, "float16", False),
    ]
    if device == "cpu":
        det_cases = [AttentionCase(1, 4, 2, 65, 130, 32, "float16", True, "bottom_right")]
    payload["determinism"] = check_backward_determinism(det_cases, device, repeats=repeats)
    print("determinism:", payload["determinism"], flush=True)
    done("determinism")
    # Correctness before speed: a run cut short keeps the grid.
    if grid != "none":
        cases = backward_grid(grid)
        if limit:
            cases = cases[:limit]
        rows = []
        for det in (True, False) if both_modes else (True,):
            if device == "cuda" and jobs > 1:
                rows += run_grid_parallel(cases, jobs=jobs, deterministic=det)
            else:
                rows += run_backward_grid(cases, device, deterministic=det)
        summary = summarize_backward(rows)
        print(
            f"gradient grid: {summary['cases']} cases, {summary['failed']} failed, worst ratio "
            f"{summary['worst_ratio']:.3f} ({summary['worst_case']})",
            flush=True,
        )
        for r in rows:
            if not r["passed"]:
                print("FAILED:", r["name"], {g: r[g]["ratio"] for g in ("dq", "dk", "dv")})
        payload.update({"grid": grid, "summary": summary, "cases": rows})
        done("grid")
    if device == "cuda" and memory:
        payload["memory"] = backward_memory()
        for r in payload["memory"]:
            print(
                f"memory S={r['S']}: {r['extra_bytes'] / 2**20:.1f} MiB beyond inputs/outputs "
                f"(an S x S fp32 buffer: {r['s_by_s_bytes_would_be'] / 2**20:.0f} MiB)",
                flush=True,
            )
        done("memory")
    if device == "cuda" and seqlens:
        rows = []
        if jobs > 1:  # the shipped configs, compiled in parallel before timing
            precompile(
                [
                    (d, dt, c, None, det)
                    for d in head_dims
                    for dt in dtypes
                    for c in (False, True)
                    for det in (True, False)
                ],
                jobs,
            )
        for shape in backward_shapes(head_dims=head_dims, seqlens=seqlens, dtypes=dtypes):
            shape_impls = list(impls)
            if "flex" in shape_impls and (
                shape["D"] not in flex_head_dims or shape["dtype"] != "bfloat16"
            ):
                # Flex compiles per shape (~30 s): only where the target needs it (bf16)
                shape_impls.remove("flex")
            rows += bench_backward_shape(shape, shape_impls, reps=reps, with_forward=fwd_bwd)
            print_rows(rows[-len(shape_impls) :])
            # Recorded after every shape (the stage is not marked done until the end), so a
            # run stopped by a time limit keeps the rows it measured.
            payload["speed"] = rows
            if on_stage is not None:
                on_stage(payload)
        payload["speed"] = rows
        payload["speed_summary"] = {
            f"{dt} D{d}": speed_summary(rows, d, dt) for dt in dtypes for d in head_dims
        }
        if fwd_bwd:
            payload["fwd_bwd_summary"] = {
                f"{dt} D{d}": speed_summary(rows, d, dt, key="fwd_bwd_tflops")
                for dt in dtypes
                for d in head_dims
            }
        print("speed summary:", payload["speed_summary"], flush=True)
        done("speed")
    if device == "cuda" and tune:
        shapes = backward_shapes(head_dims=head_dims, seqlens=tune_seqlens, causal=(False, True))
        if jobs > 1:
            precompile(
                [
                    (sh["D"], sh["dtype"], sh["causal"], cfg, det)
                    for sh in shapes
                    for cfg in tuning_configs(sh["D"])
                    for det in (True, False)
                ],
                jobs,
            )
        payload["tuning"] = tune_backward(shapes)
        for r in payload["tuning"]:
            print(
                f"tune D{r['D']} S{r['S']} {'causal' if r['causal'] else 'full'} "
                f"det={r['deterministic']} dkdv={r['dkdv']} dq={r['dq']}: "
                f"{r.get('tflops', r.get('error'))}",
                flush=True,
            )
        done("tuning")
    if device == "cuda" and train:
        from .e2e import compare_training_step, training_speed

        train = compare_training_step(device, torch.float32)
        payload["training_step_fp32"] = {k: v for k, v in train.items() if k != "gradients"}
        payload["training_speed"] = training_speed(device, torch.bfloat16)
        print(
            "training step:", payload["training_step_fp32"], payload["training_speed"], flush=True
        )
        done("training")
    return payload
