"""The context-parallel study behind notebooks/08_context_parallel.ipynb and
``torchrun --nproc-per-node N -m flashcore cp {check,bench}``.

* ``check_case`` / ``run_check``: one ring-attention case on every rank of the process
  group, each rank checking its own rows against the float64 single-device reference; the
  per-rank error terms are combined into the global error rule (max error, max baseline
  error, max floor), so the verdict is the rule applied to the whole output.
* ``spawn_check``: the same on N local gloo processes (CPU, Triton interpreter): the tests
  and the notebook's CPU profile.
* ``bench``: flashcore's ring beside the same compute with the transfers skipped, the
  transfers alone, one GPU on the whole sequence, and PyTorch's
  ``torch.distributed.tensor.experimental.context_parallel`` around SDPA (cuDNN and flash).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class CPCase:
    """One context-parallel correctness case (global shapes)."""

    seqlen: int
    num_q_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 16
    dtype: str = "float16"
    causal: bool = True
    sharding: str = "zigzag"
    window: int | None = None
    batch: int = 1
    sample_rows: int | None = None  # None: check every row; else this many rows per rank
    planted_bug: str | None = None
    grad: bool = False  # also the ring backward: dq, dk, dv under the gradient rule

    @property
    def name(self) -> str:
        mask = "causal" if self.causal else "full"
        if self.window is not None:
            mask += f" window{self.window}"
        bug = f" PLANTED:{self.planted_bug}" if self.planted_bug else ""
        rows = f" sampled{self.sample_rows}" if self.sample_rows else ""
        grad = " +grad" if self.grad else ""
        return (
            f"B{self.batch} Hq{self.num_q_heads} Hkv{self.num_kv_heads} S{self.seqlen} "
            f"D{self.head_dim} {self.dtype} {mask} {self.sharding}{rows}{grad}{bug}"
        )


def cpu_grid() -> list[CPCase]:
    """Small cases for 2 gloo processes under the interpreter (fp16/fp32; bf16 cannot run)."""
    return [
        CPCase(96, causal=True, sharding="zigzag"),
        CPCase(96, causal=True, sharding="contiguous"),
        CPCase(80, causal=False, sharding="contiguous", dtype="float32"),
        CPCase(64, causal=False, sharding="zigzag"),
        CPCase(96, 4, 1, causal=True, sharding="zigzag", head_dim=32),  # GQA 4
        CPCase(100, causal=True, sharding="zigzag", window=20),
        CPCase(77, 2, 2, causal=True, sharding="contiguous", window=30),
        CPCase(67, causal=True, sharding="zigzag"),  # uneven: 67 = 17+17+17+16
        CPCase(67, causal=False, sharding="contiguous", batch=2),  # uneven: 34 + 33
        CPCase(3, causal=True, sharding="zigzag"),  # empty chunks
        CPCase(1, causal=True, sharding="zigzag"),  # rank 1 holds nothing
        CPCase(96, causal=True, sharding="zigzag", grad=True),
        CPCase(96, 4, 2, causal=True, sharding="contiguous", grad=True),
        CPCase(67, causal=False, sharding="contiguous", dtype="float32", grad=True),
        CPCase(100, 4, 1, causal=True, sharding="zigzag", window=20, grad=True),
        CPCase(96, causal=True, sharding="zigzag", planted_bug="merge_without_rescale"),
        CPCase(96, causal=True, sharding="zigzag", planted_bug="zigzag_off_by_one"),
        CPCase(96, causal=True, sharding="zigzag", grad=True, planted_bug="dkv_not_accumulated"),
    ]


def gpu_grid() -> list[CPCase]:
    """The GPU grid: whole outputs at small S, sampled rows at long S; bf16 and fp16."""
    cases = []
    for dtype, seqlens in (("bfloat16", (1024, 4099)), ("float16", (4099,))):
        for seqlen in seqlens:
            cases += [
                CPCase(seqlen, 8, 2, 128, dtype, True, "zigzag"),
                CPCase(seqlen, 8, 2, 128, dtype, True, "contiguous"),
                CPCase(seqlen, 8, 2, 128, dtype, False, "contiguous"),
                CPCase(seqlen, 4, 4, 64, dtype, True, "zigzag", batch=2),
                CPCase(seqlen, 8, 1, 128, dtype, True, "zigzag", window=300),
                CPCase(seqlen, 8, 8, 64, dtype, False, "zigzag", window=None),
            ]
    cases += [
        CPCase(4099, 8, 2, 128, "bfloat16", True, "zigzag", grad=True),
        CPCase(4099, 8, 2, 128, "bfloat16", False, "contiguous", grad=True),
        CPCase(4099, 8, 2, 128, "bfloat16", True, "zigzag", window=300, grad=True),
        CPCase(131072 + 3, 8, 2, 128, "bfloat16", True, "zigzag", sample_rows=256),
        CPCase(131072 + 3, 8, 2, 128, "bfloat16", False, "contiguous", sample_rows=256),
        CPCase(65536 + 5, 8, 2, 128, "bfloat16", True, "zigzag", window=4096, sample_rows=256),
        CPCase(4096, 8, 2, 128, "bfloat16", True, "zigzag", planted_bug="merge_without_rescale"),
        CPCase(4096, 8, 2, 128, "bfloat16", True, "zigzag", planted_bug="zigzag_off_by_one"),
        CPCase(
            4096,
            8,
            2,
            128,
            "bfloat16",
            True,
            "zigzag",
            grad=True,
            planted_bug="dkv_not_accumulated",
        ),
    ]
    return cases


def _sample_local_rows(num_rows: int, spans, count: int, seed: int) -> torch.Tensor:
    """Local row indices to check: every chunk's first and last rows plus random ones."""
    gen = torch.Generator().manual_seed(seed)
    picks = set()
    offset = 0
    for a, b in spans:
        for r in (0, 1, b - a - 2, b - a - 1):
            if 0 <= r < b - a:
                picks.add(offset + r)
        offset += b - a
    if num_rows:
        picks.update(torch.randint(0, num_rows, (count,), generator=gen).tolist())
    return torch.tensor(sorted(picks), dtype=torch.int64)


def check_case(case: CPCase, device, seed: int, group=None) -> dict:
    """Run one case on every rank; returns the global verdict (same dict on every rank)."""
    from .. import parallel as P
    from ..reference import attention_reference
    from ..validate import UNIT_ROUNDOFF

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    dtype = getattr(torch, case.dtype)
    # The same global inputs on every rank (seeded), each rank keeps its shard.
    gen = torch.Generator(device=device).manual_seed(seed)
    shape_q = (case.batch, case.num_q_heads, case.seqlen, case.head_dim)
    shape_kv = (case.batch, case.num_kv_heads, case.seqlen, case.head_dim)
    q = torch.randn(shape_q, generator=gen, device=device).to(dtype)
    k = torch.randn(shape_kv, generator=gen, device=device).to(dtype)
    v = torch.randn(shape_kv, generator=gen, device=device).to(dtype)
    args = (world_size, rank, case.sharding)
    q_l, k_l, v_l = P.shard(q, *args), P.shard(k, *args), P.shard(v, *args)
    ring_kw = dict(
        seqlen=case.seqlen,
        causal=case.causal,
        window=case.window,
        sharding=case.sharding,
        group=group,
    )
    grad_row = {}
    if case.grad:
        do = torch.randn(shape_q, generator=gen, device=device).to(dtype)
        leaves = [t.clone().requires_grad_() for t in (q_l, k_l, v_l)]
        out = P.ring_attention(*leaves, _planted_bug=case.planted_bug, **ring_kw)
        out.backward(P.shard(do, *args))
        out = out.detach()
        grad_row = _check_ring_grads([t.grad for t in leaves], q, k, v, do, case, group)
    else:
        with torch.no_grad():
            out = P.ring_attention(q_l, k_l, v_l, _planted_bug=case.planted_bug, **ring_kw)
    spans = P.shard_spans(case.seqlen, world_size, rank, case.sharding)
    positions = P.shard_positions(case.seqlen, world_size, rank, case.sharding).to(device)
    if case.sample_rows:
        local = _sample_local_rows(positions.numel(), spans, case.sample_rows, seed + rank).to(
            device
        )
    else:
        local = torch.arange(positions.numel(), device=device)
    kwargs = dict(causal=case.causal, window=case.window, query_rows=positions[local])
    ref64 = attention_reference(q, k, v, compute_dtype=torch.float64, **kwargs)
    same = attention_reference(q, k, v, compute_dtype=dtype, **kwargs)
    mine = out[:, :, local].double()
    finite = ~torch.isnan(ref64)
    terms = {
        "max_abs_err": float((mine - ref64)[finite].abs().nan_to_num(nan=math.inf).max())
        if local.numel()
        else 0.0,
        "baseline_err": float((same.double() - ref64)[finite].abs().nan_to_num(nan=math.inf).max())
        if local.numel()
        else 0.0,
        "ref_max": float(ref64[finite].abs().max()) if local.numel() else 0.0,
        "nan_mismatch": int((torch.isnan(mine) != torch.isnan(ref64)).sum()),
        "err_sq": float(((mine - ref64)[finite] ** 2).sum()),
        "ref_sq": float((ref64[finite] ** 2).sum()),
        "rows": int(local.numel()),
    }
    gathered = [None] * world_size
    dist.all_gather_object(gathered, terms, group=group)
    max_err = max(t["max_abs_err"] for t in gathered)
    baseline = max(t["baseline_err"] for t in gathered)
    floor = UNIT_ROUNDOFF[dtype] * max(max(t["ref_max"] for t in gathered), 1e-30)
    bound = 2 * baseline + floor
    nan_mismatch = sum(t["nan_mismatch"] for t in gathered)
    ref_norm = math.sqrt(sum(t["ref_sq"] for t in gathered))
    return {
        **dataclasses.asdict(case),
        "name": case.name,
        "seed": seed,
        "world_size": world_size,
        "rows_checked": sum(t["rows"] for t in gathered),
        "max_abs_err": max_err,
        "baseline_err": baseline,
        "floor": floor,
        "bound": bound,
        "ratio": max_err / bound if bound > 0 else (0.0 if max_err == 0 else math.inf),
        "rel_l2_err": math.sqrt(sum(t["err_sq"] for t in gathered)) / ref_norm if ref_norm else 0.0,
        "nan_mismatch": nan_mismatch,
        "output_passed": bool(nan_mismatch == 0 and max_err <= bound),
        "passed": bool(nan_mismatch == 0 and max_err <= bound)
        and grad_row.get("grad_passed", True),
        **grad_row,
    }


def _check_ring_grads(local_grads, q, k, v, do, case: CPCase, group) -> dict:
    """Gather every rank's dq, dk, dv shards, unshard, and apply the gradient rule against
    float64 autograd through the single-device reference (small S only: whole tensors)."""
    from .. import parallel as P
    from ..validate_backward import cancellation_magnitudes, gradient_rule, reference_gradients

    world_size = dist.get_world_size(group)
    gathered = [None] * world_size
    dist.all_gather_object(gathered, [g.detach().cpu() for g in local_grads], group=group)
    grads = [P.unshard([g[i] for g in gathered], case.sharding).to(q.device) for i in range(3)]
    kwargs = dict(causal=case.causal, window=case.window)
    ref64 = reference_gradients(q, k, v, do, compute_dtype=torch.float64, **kwargs)
    same = reference_gradients(q, k, v, do, compute_dtype=q.dtype, **kwargs)
    reports = gradient_rule(grads, ref64, same, cancellation_magnitudes(q, k, v, do, **kwargs))
    return {
        "grad_ratio": max(r.ratio for r in reports.values()),
        "grad_ratios": {name: r.ratio for name, r in reports.items()},
        "grad_passed": all(r.passed for r in reports.values()),
    }


def run_check(
    cases, device, *, base_seed: int = 0, group=None, progress: bool = False
) -> list[dict]:
    """Every case on every rank. A case that raises is recorded as failed with its error
    (every rank runs the same code on the same shapes, so all of them raise together)."""
    rows = []
    rank = dist.get_rank(group)
    for i, case in enumerate(cases):
        try:
            row = check_case(case, device, base_seed + i, group)
        except Exception as exc:
            row = {
                **dataclasses.asdict(case),
                "name": case.name,
                "seed": base_seed + i,
                "ratio": math.inf,
                "passed": False,
                "error": f"{type(exc).__name__}: {str(exc)[:400]}",
            }
            if case.grad:
                row["grad_ratio"] = math.inf
        rows.append(row)
        if progress and rank == 0:
            expect = "FAIL expected" if case.planted_bug else ""
            grad = f", gradients ratio {row['grad_ratio']:.3f}" if case.grad else ""
            error = f" ERROR {row['error']}" if "error" in row else ""
            print(
                f"[{i + 1}/{len(cases)}] {row['name']}: ratio {row['ratio']:.3f}{grad} "
                f"passed {row['passed']} {expect}{error}",
                flush=True,
            )
    return rows


def summarize_cases(rows: list[dict]) -> dict:
    """Real cases must pass; planted bugs must fail (the checker can fail)."""
    real = [r for r in rows if not r["planted_bug"]]
    planted = [r for r in rows if r["planted_bug"]]
    return {
        "cases": len(real),
        "failed": sum(not r["passed"] for r in real),
        "worst_ratio": max((r["ratio"] for r in real), default=0.0),
        "planted_bugs": len(planted),
        "planted_bugs_caught": sum(not r["passed"] for r in planted),
    }


# ---------------------------------------------------------------------------------------
# Process groups.


def init_from_env():
    """Join the process group torchrun describes (NCCL on GPUs, gloo on CPU).
    Returns (rank, world_size, device)."""
    if not dist.is_initialized():
        if torch.cuda.is_available():
            local = int(os.environ.get("LOCAL_RANK", 0))
            torch.cuda.set_device(local)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        else:
            dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    return rank, dist.get_world_size(), device


def _spawned_check(
    rank: int, world_size: int, store_path: str, out_path: str, cases, base_seed: int
):
    os.environ["TRITON_INTERPRET"] = "1"  # before flashcore's kernels are imported
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size
    )
    # No destroy_process_group on an error: the other rank may be waiting in a collective, and
    # tearing down gloo would wait for it (a deadlock). The parent sees this rank fail and
    # stops the other one.
    rows = run_check(cases, torch.device("cpu"), base_seed=base_seed)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    dist.barrier()
    dist.destroy_process_group()


def _spawn_gloo_ranks(target, args: tuple, world_size: int, child_env: dict) -> list[dict]:
    """Spawn ``world_size`` local processes ``target(rank, world_size, store, out, *args)``
    with ``child_env`` set while they start; returns the rows rank 0 wrote to ``out``."""
    import torch.multiprocessing as mp

    child_env = dict(child_env)
    if sys.platform.startswith("linux") and "GLOO_SOCKET_IFNAME" not in os.environ:
        # gloo otherwise picks its interface from the hostname, which need not resolve on a
        # machine with no network; the ranks are local, so loopback is always right.
        child_env["GLOO_SOCKET_IFNAME"] = "lo"
    saved = {key: os.environ.get(key) for key in child_env}
    os.environ.update(child_env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store, out = os.path.join(tmp, "store"), os.path.join(tmp, "rows.json")
            mp.start_processes(
                target,
                args=(world_size, store, out, *args),
                nprocs=world_size,
                start_method="spawn",
            )
            with open(out) as f:
                return json.load(f)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def spawn_check(cases=None, world_size: int = 2, base_seed: int = 0) -> list[dict]:
    """Run ``cases`` (default ``cpu_grid()``) on ``world_size`` local gloo processes, the
    kernels under the Triton interpreter. Returns the rows of rank 0."""
    from .._checks import interpreter_blocker

    blocker = interpreter_blocker()
    if blocker:
        raise RuntimeError(f"the CPU check runs kernels under Triton's interpreter: {blocker}")
    cases = cpu_grid() if cases is None else cases
    # A spawned child imports flashcore (unpickling _spawned_check) before its body runs, so
    # the interpreter switch must already be in the environment it inherits; on a GPU machine
    # the children would otherwise compile for the GPU, fail on CPU tensors, and leave the
    # other rank waiting in a collective. The children also see no GPU.
    child_env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return _spawn_gloo_ranks(_spawned_check, (cases, base_seed), world_size, child_env)


# ---------------------------------------------------------------------------------------
# Timing (GPU).


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _reset_peak():
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _timed(fn, *, reps: int, warmup: int, group=None) -> float:
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


def _peak_gib(group=None) -> float:
    """Peak device memory allocated since the last reset, max over ranks (0 on CPU)."""
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    t = torch.tensor([peak], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return round(float(t), 3)


def causal_flops(batch, heads, seqlen, head_dim, causal) -> float:
    """4 B H D x (visible pairs): S^2 non-causal, S(S+1)/2 causal."""
    pairs = seqlen * (seqlen + 1) / 2 if causal else seqlen * seqlen
    return 4.0 * batch * heads * head_dim * pairs


def _torch_cp_options():
    """PyTorch's private CP options object (its module moved between releases)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel._attention import (
            _cp_options,
        )
    except ImportError:  # torch releases with the flat module
        from torch.distributed.tensor.experimental._attention import _cp_options
    return _cp_options


def _torch_cp_sdpa(mesh, q, k, v, causal, backend_name, reps, warmup, group):
    """PyTorch's context_parallel around SDPA on global buffers q, k, v (sharded in place by
    the context). Returns (time_ms, peak_gib, the global output in sequence order for the rows
    check, or the error that prevented gathering it, and whether PyTorch's own
    ``context_parallel_unshard`` gives the same order).

    Its head-tail load balancing reorders the sequence before sharding and only applies to
    causal attention (non-causal calls raise with it on), so it is switched off for
    non-causal runs. The output's order is not taken on trust: a position buffer rides through
    the same sharding, and the gathered positions put the gathered output back in order."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[
        backend_name
    ]
    seqlen = q.shape[2]
    positions = torch.arange(seqlen, device=q.device, dtype=torch.int64).view(1, 1, seqlen, 1)
    buffers = [q, k, v, positions]
    options = _torch_cp_options()
    saved_balance = options.enable_load_balance
    options.enable_load_balance = bool(causal)
    try:
        with (
            sdpa_kernel(backend),
            context_parallel(
                mesh,
                buffers=buffers,
                buffer_seq_dims=[2, 2, 2, 2],
                no_restore_buffers=set(buffers),
            ),
        ):

            def call():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

            _reset_peak()
            ms = _timed(call, reps=reps, warmup=warmup, group=group)
            peak = _peak_gib(group)
            out = call()
            try:  # the global output, for the rows check; its failure must not lose the timing
                world = dist.get_world_size(group)
                outs = [torch.empty_like(out) for _ in range(world)]
                dist.all_gather(outs, out.contiguous(), group=group)
                where = [torch.empty_like(positions) for _ in range(world)]
                dist.all_gather(where, positions.contiguous(), group=group)
                order = torch.cat(where, dim=2).flatten()
                out_global = torch.empty_like(torch.cat(outs, dim=2))
                out_global[:, :, order] = torch.cat(outs, dim=2)
                (unsharded,) = context_parallel_unshard(mesh, [out], [2])
                unshard_agrees = bool(torch.equal(unsharded, out_global))
            except Exception as exc:
                out_global = f"{type(exc).__name__}: {str(exc)[:300]}"
                unshard_agrees = None
    finally:
        options.enable_load_balance = saved_balance
    return ms, peak, out_global, unshard_agrees


def inputs_identical_across_ranks(tensors, group=None) -> bool:
    """Whether every rank holds bitwise the same ``tensors`` (a checksum per tensor: the
    float64 sum and a position-weighted sum, gathered and compared). Anything that shards
    global inputs per rank assumes this; a tensor drawn from an unseeded CUDA generator
    breaks it silently."""
    sums = []
    for t in tensors:
        x = t.detach().double().flatten()
        w = torch.arange(1, x.numel() + 1, device=x.device, dtype=torch.float64) % 997
        sums += [x.sum(), (x * w).sum()]
    mine = torch.stack(sums)  # on the inputs' device: the one the group's backend serves
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    return all(torch.equal(every[0], other) for other in every[1:])


def torch_cp_output_check(
    q, k, v, out_global, causal, *, group=None, impl="torch_cp", seqlen=None, rows=128, seed=3
) -> dict:
    """PyTorch's context-parallel output (gathered into sequence order) under the error rule
    against the float64 single-device reference on ``rows`` random query rows plus the first
    and last ones; q (B, Hq, S, D) and k, v (B, Hkv, S, D) are the global inputs every rank
    sharded. Also records whether those inputs were identical on every rank (the check is
    meaningless otherwise) and the same-precision baseline's error, so a failure can be read."""
    from ..reference import attention_reference
    from ..validate import error_rule

    seqlen = q.shape[2] if seqlen is None else seqlen
    picks = torch.randint(0, seqlen, (rows,), generator=torch.Generator().manual_seed(seed))
    rows_idx = torch.cat([torch.tensor([0, seqlen - 1]), picks]).unique().to(q.device)
    ref64 = attention_reference(
        q, k, v, causal=causal, compute_dtype=torch.float64, query_rows=rows_idx
    )
    same = attention_reference(q, k, v, causal=causal, compute_dtype=q.dtype, query_rows=rows_idx)
    rep = error_rule(out_global[:, :, rows_idx], ref64, same)
    err = (out_global[:, :, rows_idx].double() - ref64).abs().amax(dim=(0, 1, 3))
    worst = int(rows_idx[int(err.argmax())])
    return {
        "S": seqlen,
        "causal": causal,
        "impl": impl,
        "rows_checked": int(rows_idx.numel()),
        "max_abs_err": rep.max_abs_err,
        "baseline_err": rep.baseline_err,
        "bound": rep.bound,
        "ratio": rep.ratio,
        "passed": rep.passed,
        "worst_row": worst,
        "inputs_identical_across_ranks": inputs_identical_across_ranks([q, k, v], group),
    }


def _register_cpu_ring_sdpa():
    """Let PyTorch's context_parallel run on CPU: its DTensor dispatch table has ring
    handlers for the CUDA SDPA ops only; this adds one for the CPU flash op that calls the
    same ``_templated_ring_attention`` (sharding, load balancer, ring, fp32 merge, unshard are
    all PyTorch's own; only the per-block kernel is the CPU one). Private API: for the check
    below, not for use."""
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention as A
    except ImportError:  # torch releases with the flat module
        from torch.distributed.tensor.experimental import _attention as A
    from torch.distributed.tensor import DTensor, Shard

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def handler(op_call, args, kwargs):
        info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        q, k, v, *extra = info.local_args
        opts = dict(info.local_kwargs)
        dropout_p = extra[0] if extra else opts.pop("dropout_p", 0.0)
        is_causal = extra[1] if len(extra) > 1 else opts.pop("is_causal", False)
        mesh = info.compute_mesh
        out, lse = A._templated_ring_attention(
            mesh.get_group(),
            2,
            op,
            query=q,
            key=k,
            value=v,
            is_causal=is_causal,
            dropout_p=dropout_p,
            scale=opts.get("scale"),
        )
        return tuple(DTensor.from_local(t, mesh, [Shard(2)], run_check=False) for t in (out, lse))

    A.custom_ops[op] = handler


def _spawned_torch_cp_check(rank, world_size, store_path, out_path, seqlen, dtype_name):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size
    )
    from torch.distributed.device_mesh import init_device_mesh

    _register_cpu_ring_sdpa()
    mesh = init_device_mesh("cpu", (world_size,))
    dtype = getattr(torch, dtype_name)
    rows = []
    for inputs, causal in (
        ("seeded", False),
        ("seeded", True),
        ("v unseeded", False),
        ("v unseeded", True),
    ):
        gen = torch.Generator().manual_seed(11)
        q = torch.randn((1, 4, seqlen, 64), generator=gen).to(dtype)
        k = torch.randn((1, 1, seqlen, 64), generator=gen).to(dtype)
        if inputs == "seeded":
            v = torch.randn((1, 1, seqlen, 64), generator=gen).to(dtype)
        else:  # what randn_like does on a GPU: a different stream on every rank
            v = torch.randn((1, 1, seqlen, 64), generator=torch.Generator().manual_seed(rank))
            v = v.to(dtype)
        k_x, v_x = (t.repeat_interleave(4, dim=1) for t in (k, v))
        _, _, out_global, agrees = _torch_cp_sdpa(
            mesh, q.clone(), k_x, v_x, causal, "flash", 1, 0, None
        )
        check = torch_cp_output_check(q, k, v, out_global, causal, impl="torch_cp (CPU)")
        rows.append({"inputs": inputs, **check, "unshard_agrees_with_positions": agrees})
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    dist.barrier()
    dist.destroy_process_group()


def torch_cp_cpu_check(seqlen: int = 1024, world_size: int = 2, dtype="bfloat16") -> list[dict]:
    """The bench's PyTorch-CP output check, run on ``world_size`` local gloo processes around
    PyTorch's own ``context_parallel`` (CPU flash kernel per block), B=1 Hq=4 Hkv=1 D=64:
    with every input seeded (as the bench draws them now) and with V drawn per rank (as it
    drew them when ``torch_cp_checks`` were recorded). Returns rank 0's rows."""

    child_env = {"CUDA_VISIBLE_DEVICES": ""}
    return _spawn_gloo_ranks(_spawned_torch_cp_check, (seqlen, dtype), world_size, child_env)


def overlap_probe(
    seqlens=(16384, 65536),
    *,
    num_heads=8,
    head_dim=128,
    dtype=torch.bfloat16,
    reps=10,
    group=None,
    log=print,
) -> list[dict]:
    """Where the transfers are not negligible. In the main sweep a step's K/V message is a
    fraction of a percent of its compute (ring attention is compute-bound once a shard holds
    more than about a thousand rows), so "hidden" is hidden trivially. Here: short shards,
    MHA (Hkv = Hq, four times the bytes of GQA 4), full attention; the same three times
    (ring, no transfers, transfers alone), median of ``reps`` calls."""
    from .. import parallel as P

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    rows = []
    for seqlen in seqlens:
        local = sum(b - a for a, b in P.shard_spans(seqlen, world_size, rank, "contiguous"))
        gen = torch.Generator(device=device).manual_seed(seqlen)
        q, k, v = (
            torch.randn((1, num_heads, local, head_dim), generator=gen, device=device, dtype=dtype)
            for _ in range(3)
        )
        kw = dict(seqlen=seqlen, causal=False, sharding="contiguous", group=group)
        buf = [torch.empty(2 * k.numel(), dtype=dtype, device=device) for _ in range(2)]

        def ring_only():
            for step in range(world_size - 1):
                for w in P.ring_exchange(buf[step % 2], buf[(step + 1) % 2], group):
                    w.wait()

        with torch.no_grad():
            t_ring = _timed(
                lambda: P.ring_attention(q, k, v, **kw), reps=reps, warmup=2, group=group
            )
            t_alone = _timed(
                lambda: P.ring_attention(q, k, v, skip_comm=True, **kw),
                reps=reps,
                warmup=1,
                group=group,
            )
            t_comm = _timed(ring_only, reps=reps, warmup=1, group=group)
        exposed = max(t_ring - t_alone, 0.0)
        row = {
            "S": seqlen,
            "num_heads": num_heads,
            "head_dim": head_dim,
            "world_size": world_size,
            "ring_ms": t_ring,
            "no_transfers_ms": t_alone,
            "transfers_alone_ms": t_comm,
            "comm_to_compute": t_comm / t_alone if t_alone else None,
            "comm_hidden_fraction": max(0.0, 1.0 - exposed / t_comm) if t_comm > 0 else None,
        }
        rows.append(row)
        log(
            f"overlap probe S={seqlen} MHA H{num_heads}: ring {t_ring:.2f} ms, no transfers "
            f"{t_alone:.2f} ms, transfers alone {t_comm:.2f} ms, hidden fraction "
            f"{row['comm_hidden_fraction']}"
        )
    return rows


def bench(
    seqlens,
    *,
    causal_modes=(False, True),
    num_q_heads=8,
    num_kv_heads=2,
    head_dim=128,
    dtype=torch.bfloat16,
    impls=(
        "flashcore_cp",
        "flashcore_cp_nocomm",
        "comm_only",
        "flashcore_1gpu",
        "torch_cp_cudnn",
        "torch_cp_flash",
        "flashcore_cp_fwd_bwd",
    ),
    cp_only_from: int | None = None,
    budget_s: float = 300.0,
    train_max_s: int = 1 << 18,
    probe_seqlens=(16384, 65536),
    on_row=None,
    group=None,
    log=print,
) -> dict:
    """Time every impl at each global S. Every rank runs this (torchrun). Returns
    {"rows": [...], "torch_cp_checks": [...], "skipped": [...]}; ``on_row`` is called after
    each S (to record incrementally).

    ``cp_only_from``: from this S on only flashcore's ring (with and without transfers) and
    the transfers alone are timed (the 1-GPU run and PyTorch's CP take too long there).
    ``train_max_s``: the ring forward + backward is timed up to this S.
    ``probe_seqlens``: ``overlap_probe`` first (short MHA shards, where transfers matter).
    ``budget_s``: stop before an S whose predicted time (quadratic from the last S) would
    pass it.
    """
    from torch.distributed.device_mesh import init_device_mesh

    from .. import parallel as P
    from ..interface import attention

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )  # CPU: a smoke run of this code, timings meaningless
    mesh = (
        init_device_mesh(device.type, (world_size,))
        if any(i.startswith("torch_cp") for i in impls)
        else None
    )
    batch = 1
    result = {"rows": [], "torch_cp_checks": [], "skipped": []}
    if probe_seqlens and world_size > 1:
        try:
            result["overlap_probe"] = overlap_probe(
                probe_seqlens,
                num_heads=num_q_heads,
                head_dim=head_dim,
                dtype=dtype,
                group=group,
                log=log,
            )
        except Exception as exc:
            result["skipped"].append(
                {"impl": "overlap_probe", "reason": f"{type(exc).__name__}: {exc}"}
            )
    start = time.perf_counter()
    last_s, last_elapsed = None, None
    compiled = set()
    for seqlen in seqlens:
        elapsed = time.perf_counter() - start
        if last_s is not None:
            predicted = last_elapsed * (seqlen / last_s) ** 2
            if cp_only_from is not None and seqlen >= cp_only_from and last_s < cp_only_from:
                predicted *= 0.4  # the ring alone is about 2/5 of the full set of impls
            if elapsed + predicted > budget_s:
                result["skipped"].append(
                    {
                        "S": seqlen,
                        "reason": f"predicted {predicted:.0f} s past the "
                        f"{budget_s:.0f} s budget (elapsed {elapsed:.0f} s)",
                    }
                )
                log(f"S={seqlen}: skipped, predicted {predicted:.0f} s past the budget")
                continue
        s_start = time.perf_counter()
        for causal in causal_modes:
            sharding = "zigzag" if causal else "contiguous"
            flops = causal_flops(batch, num_q_heads, seqlen, head_dim, causal)
            reps = 3 if seqlen < (1 << 20) else 1
            rows = {}

            def add(impl, ms, peak, **extra):
                rows[impl] = {
                    "world_size": world_size,
                    "S": seqlen,
                    "causal": causal,
                    "impl": impl,
                    "sharding": sharding if impl.startswith("flashcore_cp") else None,
                    "batch": batch,
                    "num_q_heads": num_q_heads,
                    "num_kv_heads": num_kv_heads,
                    "head_dim": head_dim,
                    "dtype": str(dtype).replace("torch.", ""),
                    "time_ms": ms,
                    # comm_only moves bytes and does no attention: no TFLOP/s.
                    "tflops": flops / (ms * 1e-3) / 1e12 if ms and impl != "comm_only" else None,
                    "peak_mem_gib": peak,
                    **extra,
                }
                log(
                    f"S={seqlen} causal={causal} {impl}: {ms:.1f} ms, peak {peak} GiB"
                    + (f", {rows[impl]['tflops']:.0f} TFLOP/s" if rows[impl]["tflops"] else "")
                )

            cp_only = cp_only_from is not None and seqlen >= cp_only_from
            # The same global inputs on every rank (seeded): the 1-GPU run and PyTorch's CP
            # need the whole sequence; flashcore's ring gets the shards.
            gen = torch.Generator(device=device).manual_seed(seqlen + causal)
            shards = []
            for heads in (num_q_heads, num_kv_heads, num_kv_heads):
                local_len = sum(b - a for a, b in P.shard_spans(seqlen, world_size, rank, sharding))
                shards.append(
                    torch.randn(
                        (batch, heads, local_len, head_dim),
                        generator=gen,
                        device=device,
                        dtype=dtype,
                    )
                )
            q_l, k_l, v_l = shards
            key = ("cp", causal)
            warm = 0 if key in compiled else 1
            compiled.add(key)
            kw = dict(seqlen=seqlen, causal=causal, sharding=sharding, group=group)
            with torch.no_grad():
                if "flashcore_cp" in impls:
                    _reset_peak()
                    ms = _timed(
                        lambda: P.ring_attention(q_l, k_l, v_l, **kw),
                        reps=reps,
                        warmup=warm,
                        group=group,
                    )
                    add("flashcore_cp", ms, _peak_gib(group))
                if "flashcore_cp_fwd_bwd" in impls and seqlen <= train_max_s:
                    # A training step's attention: the ring forward and the ring backward.
                    leaves = [t.detach().clone().requires_grad_() for t in (q_l, k_l, v_l)]
                    grad_out = torch.randn_like(q_l)

                    def train_step():
                        with torch.enable_grad():
                            P.ring_attention(*leaves, **kw).backward(grad_out)

                    try:
                        _reset_peak()
                        ms = _timed(
                            train_step,
                            reps=reps,
                            warmup=1 if ("bwd", causal) not in compiled else 0,
                            group=group,
                        )
                        compiled.add(("bwd", causal))
                        add(
                            "flashcore_cp_fwd_bwd",
                            ms,
                            _peak_gib(group),
                            note="forward + backward; tflops counts 3.5x the forward's FLOPs",
                        )
                        rows["flashcore_cp_fwd_bwd"]["tflops"] = 3.5 * flops / (ms * 1e-3) / 1e12
                    except Exception as exc:
                        msg = f"{type(exc).__name__}: {str(exc)[:400]}"
                        result["skipped"].append(
                            {
                                "S": seqlen,
                                "causal": causal,
                                "impl": "flashcore_cp_fwd_bwd",
                                "reason": msg,
                            }
                        )
                        log(f"S={seqlen} causal={causal} flashcore_cp_fwd_bwd: FAILED {msg}")
                    del leaves, grad_out
                if "flashcore_cp_nocomm" in impls:
                    _reset_peak()
                    ms = _timed(
                        lambda: P.ring_attention(q_l, k_l, v_l, skip_comm=True, **kw),
                        reps=reps,
                        warmup=0,
                        group=group,
                    )
                    add("flashcore_cp_nocomm", ms, _peak_gib(group))
                if "comm_only" in impls and world_size > 1:
                    buf = [
                        torch.empty(2 * k_l.numel(), dtype=dtype, device=device) for _ in range(2)
                    ]

                    def ring_only():
                        for step in range(world_size - 1):
                            for w in P.ring_exchange(buf[step % 2], buf[(step + 1) % 2], group):
                                w.wait()

                    _reset_peak()
                    add(
                        "comm_only",
                        _timed(ring_only, reps=reps, warmup=1, group=group),
                        _peak_gib(group),
                        bytes_per_step=2 * k_l.numel() * k_l.element_size(),
                    )
                    del buf
            if not cp_only and "flashcore_1gpu" in impls:
                gen = torch.Generator(device=device).manual_seed(7)
                q = torch.randn(
                    (batch, num_q_heads, seqlen, head_dim),
                    generator=gen,
                    device=device,
                    dtype=dtype,
                )
                k, v = (
                    torch.randn(
                        (batch, num_kv_heads, seqlen, head_dim),
                        generator=gen,
                        device=device,
                        dtype=dtype,
                    )
                    for _ in range(2)
                )
                key1 = ("1gpu", causal)
                warm1 = 0 if key1 in compiled else 1
                compiled.add(key1)
                _reset_peak()
                with torch.no_grad():
                    ms = _timed(
                        lambda: attention(q, k, v, causal=causal),
                        reps=reps,
                        warmup=warm1,
                        group=group,
                    )
                add(
                    "flashcore_1gpu",
                    ms,
                    _peak_gib(group),
                    note="each GPU runs the whole sequence alone",
                )
                q = k = v = None  # free the whole-sequence inputs
            for backend in ("cudnn", "flash"):
                impl = f"torch_cp_{backend}"
                if cp_only or impl not in impls:
                    continue
                gen = torch.Generator(device=device).manual_seed(11)
                q = torch.randn(
                    (batch, num_q_heads, seqlen, head_dim),
                    generator=gen,
                    device=device,
                    dtype=dtype,
                )
                # PyTorch's ring SDPA takes no enable_gqa: K/V expanded to Hq heads (they travel
                # Hq/Hkv times the bytes flashcore's ring sends). Every input from the seeded
                # generator: PyTorch seeds each process's default CUDA generator from
                # /dev/urandom, so a tensor drawn from it (randn_like) differs between ranks.
                k, v = (
                    torch.randn(
                        (batch, num_kv_heads, seqlen, head_dim),
                        generator=gen,
                        device=device,
                        dtype=dtype,
                    )
                    for _ in range(2)
                )
                k_x = k.repeat_interleave(num_q_heads // num_kv_heads, dim=1)
                v_x = v.repeat_interleave(num_q_heads // num_kv_heads, dim=1)
                q_in = q.clone()
                try:
                    with torch.no_grad():
                        ms, peak, out_global, unshard_agrees = _torch_cp_sdpa(
                            mesh, q_in, k_x, v_x, causal, backend, reps, 1, group
                        )
                    add(
                        impl,
                        ms,
                        peak,
                        note="K/V expanded to Hq heads (no GQA in PyTorch's ring SDPA); "
                        "peak includes the global buffers the context shards in place",
                    )
                    first_s = (
                        not result["torch_cp_checks"] or seqlen == result["torch_cp_checks"][0]["S"]
                    )
                    if first_s and isinstance(out_global, str):
                        result["torch_cp_checks"].append(
                            {
                                "S": seqlen,
                                "causal": causal,
                                "impl": impl,
                                "passed": None,
                                "error": out_global,
                            }
                        )
                    elif first_s:
                        check = torch_cp_output_check(
                            q, k, v, out_global, causal, group=group, impl=impl, seqlen=seqlen
                        )
                        check["unshard_agrees_with_positions"] = unshard_agrees
                        result["torch_cp_checks"].append(check)
                        log(
                            f"  {impl} output vs float64 ({check['rows_checked']} sampled rows): "
                            f"ratio {check['ratio']:.3f}, passed {check['passed']}; inputs "
                            f"identical on every rank: {check['inputs_identical_across_ranks']}"
                        )
                    del out_global
                except Exception as exc:  # record why PyTorch's CP could not run
                    msg = f"{type(exc).__name__}: {str(exc)[:400]}"
                    result["skipped"].append(
                        {"S": seqlen, "causal": causal, "impl": impl, "reason": msg}
                    )
                    log(f"S={seqlen} causal={causal} {impl}: FAILED {msg}")
                q = k = v = k_x = v_x = q_in = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            # Derived columns.
            cp = rows.get("flashcore_cp")
            if cp:
                one = rows.get("flashcore_1gpu")
                if one:
                    cp["scaling_efficiency"] = one["time_ms"] / (world_size * cp["time_ms"])
                nocomm, comm = rows.get("flashcore_cp_nocomm"), rows.get("comm_only")
                if nocomm and comm:
                    exposed = max(cp["time_ms"] - nocomm["time_ms"], 0.0)
                    cp["comm_exposed_ms"] = exposed
                    # What the ring costs over the same compute without transfers; the hidden
                    # fraction below is only meaningful where the transfers take longer than
                    # the run-to-run noise of the compute (the overlap probe's short S).
                    cp["comm_overhead_fraction"] = exposed / cp["time_ms"]
                    cp["comm_hidden_fraction"] = (
                        max(0.0, 1.0 - exposed / comm["time_ms"]) if comm["time_ms"] > 0 else None
                    )
            result["rows"] += list(rows.values())
            q_l = k_l = v_l = shards = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        last_s, last_elapsed = seqlen, time.perf_counter() - s_start
        if on_row is not None:
            on_row(result)
    return result


def _torch_check_main(argv=None) -> int:
    """``torchrun --nproc-per-node 2 -m flashcore.studies.context_parallel [--seqlen S]
    [--record]``: PyTorch's context_parallel + SDPA (cuDNN, flash) timed at one S, causal and
    not, with its output checked (``torch_cp_output_check``); records
    results/<gpu>-x<N>/context_parallel_torch_check.json. About a minute on two H200s."""
    import argparse

    from ..results import device_slug, write_result

    ap = argparse.ArgumentParser(description=_torch_check_main.__doc__.splitlines()[0])
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
        )
        log("recorded:", path)
    checks = result["torch_cp_checks"]
    dist.barrier()
    dist.destroy_process_group()
    return 0 if checks and all(c.get("passed") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(_torch_check_main())
