"""The context-parallel correctness check: cases, the check of one case on every rank of a
process group, and the local gloo spawner that runs it on CPU.

* ``check_case`` / ``run_check``: one ring-attention case on every rank of the process
  group, each rank checking its own rows against the float64 single-device reference; the
  per-rank error terms are combined into the global error rule (max error, max baseline
  error, max floor), so the verdict is the rule applied to the whole output. A case with a
  planted bug (``cp_planted``) runs its ring with the bug planted in every rank's process.
* ``spawn_check``: the same on N local gloo processes (CPU, Triton interpreter): the tests
  and notebook 08's CPU profile.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist

from .cp_planted import planted


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
    strategy: str = "ring"  # "ring" (flashcore.parallel) or "ulysses" (flashcore.parallel_ulysses)

    @property
    def name(self) -> str:
        mask = "causal" if self.causal else "full"
        if self.window is not None:
            mask += f" window{self.window}"
        bug = f" PLANTED:{self.planted_bug}" if self.planted_bug else ""
        rows = f" sampled{self.sample_rows}" if self.sample_rows else ""
        grad = " +grad" if self.grad else ""
        strategy = "" if self.strategy == "ring" else f" {self.strategy}"
        return (
            f"B{self.batch} Hq{self.num_q_heads} Hkv{self.num_kv_heads} S{self.seqlen} "
            f"D{self.head_dim} {self.dtype} {mask} {self.sharding}{rows}{grad}{strategy}{bug}"
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


def ulysses_cpu_grid() -> list[CPCase]:
    """The all-to-all strategy on 2 gloo processes: heads divisible by the ranks."""
    u = dict(strategy="ulysses")
    return [
        CPCase(96, 2, 2, causal=True, sharding="zigzag", **u),
        CPCase(80, 2, 2, causal=False, sharding="contiguous", dtype="float32", **u),
        CPCase(96, 4, 2, causal=True, sharding="contiguous", head_dim=32, **u),  # GQA 2
        CPCase(100, 4, 2, causal=True, sharding="zigzag", window=20, **u),
        CPCase(67, 2, 2, causal=True, sharding="zigzag", batch=2, **u),  # uneven
        CPCase(3, 2, 2, causal=True, sharding="zigzag", **u),  # empty chunks
        CPCase(96, 4, 2, causal=True, sharding="zigzag", grad=True, **u),
        CPCase(67, 2, 2, causal=False, sharding="contiguous", dtype="float32", grad=True, **u),
        CPCase(100, 4, 2, causal=True, sharding="zigzag", window=20, grad=True, **u),
        CPCase(96, 2, 2, causal=True, sharding="zigzag", planted_bug="ulysses_rank_order", **u),
    ]


def ulysses_gpu_grid() -> list[CPCase]:
    """The all-to-all strategy on GPUs: 8 KV heads, so any N in 1, 2, 4, 8 divides them."""
    u = dict(strategy="ulysses")
    cases = []
    for dtype in ("bfloat16", "float16"):
        cases += [
            CPCase(4099, 16, 8, 128, dtype, True, "zigzag", **u),
            CPCase(4099, 8, 8, 128, dtype, False, "contiguous", **u),
            CPCase(4099, 8, 8, 64, dtype, True, "zigzag", window=300, batch=2, **u),
        ]
    return cases + [
        CPCase(4099, 16, 8, 128, "bfloat16", True, "zigzag", grad=True, **u),
        CPCase(4099, 8, 8, 128, "bfloat16", False, "contiguous", grad=True, **u),
        CPCase(131072 + 3, 16, 8, 128, "bfloat16", True, "zigzag", sample_rows=256, **u),
        CPCase(4096, 8, 8, 128, "bfloat16", True, "zigzag", planted_bug="ulysses_rank_order", **u),
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
    from ..parallel_ulysses import ulysses_attention
    from ..reference import attention_reference
    from ..validate import UNIT_ROUNDOFF

    if case.strategy not in ("ring", "ulysses"):
        raise ValueError(f"unknown strategy {case.strategy!r}")
    attend = P.ring_attention if case.strategy == "ring" else ulysses_attention

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
        with planted(case.planted_bug):  # in this rank's process, forward and backward
            out = attend(*leaves, **ring_kw)
            out.backward(P.shard(do, *args))
        out = out.detach()
        grad_row = _check_ring_grads([t.grad for t in leaves], q, k, v, do, case, group)
    else:
        with torch.no_grad(), planted(case.planted_bug):
            out = attend(q_l, k_l, v_l, **ring_kw)
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
    """Real cases must pass; planted bugs must fail (the checker can fail). A planted bug
    counts as caught when the rule rejects its output, not when its case raised."""
    real = [r for r in rows if not r["planted_bug"]]
    bugs = [r for r in rows if r["planted_bug"]]
    return {
        "cases": len(real),
        "failed": sum(not r["passed"] for r in real),
        "worst_ratio": max((r["ratio"] for r in real), default=0.0),
        "planted_bugs": len(bugs),
        "planted_bugs_caught": sum(not r["passed"] and "error" not in r for r in bugs),
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
    return dist.get_rank(), dist.get_world_size(), current_device()


def current_device() -> torch.device:
    """This rank's device: its CUDA device where there is one (NCCL), else the CPU (gloo)."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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
    end_spawned_rank()


def end_spawned_rank() -> None:
    """The end of a spawned gloo rank once rank 0 has written its rows: a barrier, then a hard
    exit. The teardown of the gloo process group (destroy_process_group, or the interpreter's
    at exit) now and then aborts a rank ("terminate called without an active exception",
    SIGABRT: 1 of 150 runs of cp_torch.torch_cp_cpu_check on a 2-core CPU), which failed a
    check whose rows were already written. os._exit skips that teardown; the file store lies
    in the parent's temporary directory, which the parent removes."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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
