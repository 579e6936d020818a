"""Context parallelism on GPUs: the bench, and the one runner behind
``results/<gpu>-x<N>/context_parallel.json``.

``run_study`` builds that record's payload: the correctness grid (``cp_check``), then
``bench``, then the gradient cases. ``torchrun --nproc-per-node N -m flashcore cp
{check,bench}`` calls it on every rank, and notebook 08's GPU profile starts that command
(``bench_command``), since its ranks are processes of their own.

``bench`` times, per global S and mask, in one process group: flashcore's ring, the same
compute with every transfer skipped, the transfers alone, one GPU on the whole sequence,
PyTorch's ``context_parallel`` around SDPA (cuDNN and flash; ``cp_torch``), and the
forward + backward of the ring and of PyTorch's CP. Each implementation is a step of its
own below (``_time_ring``, ``_time_ring_training``, ``_time_one_gpu``, ``_time_torch_cp``,
``_time_torch_cp_training``); ``_derive_columns`` adds
the scaling efficiency and what the transfers cost; ``overlap_probe`` measures the overlap
where the transfers are not negligible.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import torch
import torch.distributed as dist

from .. import parallel as P
from .cp_check import (
    cpu_grid,
    current_device,
    gpu_grid,
    run_check,
    summarize_cases,
    ulysses_cpu_grid,
    ulysses_gpu_grid,
)
from .cp_timing import peak_gib, reset_peak, timed

IMPLS = (
    "flashcore_cp",
    "flashcore_cp_nocomm",
    "comm_only",
    "flashcore_1gpu",
    "torch_cp_cudnn",
    "torch_cp_flash",
    "flashcore_cp_fwd_bwd",
    "torch_cp_cudnn_fwd_bwd",
    "torch_cp_flash_fwd_bwd",
    "flashcore_ulysses",
)
TIMING = "wall clock per call, barrier before, slowest rank, median of 3 calls (1 call from S = 1M)"
# NVLink multicast stays off: the ring uses point-to-point sends only.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def causal_flops(batch, heads, seqlen, head_dim, causal) -> float:
    """4 B H D x (visible pairs): S^2 non-causal, S(S+1)/2 causal."""
    pairs = seqlen * (seqlen + 1) / 2 if causal else seqlen * seqlen
    return 4.0 * batch * heads * head_dim * pairs


# ---------------------------------------------------------------------------------------
# The record's runner.


def study_passed(summary: dict) -> bool:
    """Every real case passes and every planted bug is caught."""
    return summary["failed"] == 0 and summary["planted_bugs_caught"] == summary["planted_bugs"]


def run_study(args, *, device, world_size: int, log=print, on_stage=None) -> dict:
    """``cp check`` / ``cp bench`` on every rank; returns the payload of
    results/<gpu>-x<N>/<topic>.json (``check``: the grid's rows and summary only).

    ``args`` has the command's options (``flashcore/studies/commands/cp.py``): ``action``
    ("check" or "bench"), ``grid``, ``strategy`` (whose grids: "ring", "ulysses", "both"),
    ``filter``, ``seed``, ``no_check``, ``seqlens``, ``wide``,
    ``cp_only_from``, ``causal`` ("both", "yes", "no"), ``heads`` (Hq, Hkv), ``head_dim``,
    ``dtype`` (a name). ``bench`` checks the forward cases first and the gradient cases after
    the timings; ``on_stage(payload)`` is called after each stage and each S, so a run cut
    short keeps what it measured. ``study_passed(payload["summary"])`` is the verdict."""
    if args.action == "train":
        from .cp_train import run_training_study

        return run_training_study(
            args, device=device, world_size=world_size, log=log, on_stage=on_stage
        )
    grid = args.grid or ("gpu" if device.type == "cuda" else "cpu")
    cases = []
    if args.action == "check" or not args.no_check:
        strategy = getattr(args, "strategy", "ring")
        if strategy in ("ring", "both"):
            cases += gpu_grid() if grid == "gpu" else cpu_grid()
        if strategy in ("ulysses", "both"):
            cases += ulysses_gpu_grid() if grid == "gpu" else ulysses_cpu_grid()
        if args.filter:
            cases = [c for c in cases if args.filter in c.name]
    later = [c for c in cases if c.grad] if args.action == "bench" else []
    cases = [c for c in cases if c not in later]
    rows = run_check(cases, device, base_seed=args.seed, progress=True) if cases else []
    payload = {
        "world_size": world_size,
        "grid": grid,
        "summary": _summary(rows, world_size, log),
        "cases": rows,
    }
    if args.action == "check":
        return payload

    def stage(result):
        payload.update(result)
        if on_stage is not None:
            on_stage(payload)

    seqlens = args.seqlens or [2**k for k in range(17, 23 if args.wide else 22)]
    cp_only_from = args.cp_only_from or (2**22 if args.wide else 2**21)
    payload["config"] = {
        "batch": 1,
        "num_q_heads": args.heads[0],
        "num_kv_heads": args.heads[1],
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "seqlens": seqlens,
        "cp_only_from": cp_only_from,
        "budget_s": args.budget_s,
        "impls": list(getattr(args, "impls", None) or IMPLS),
        "train_max_s": getattr(args, "train_max_s", 1 << 18),
        "timing": TIMING,
    }
    stage({})
    result = bench(
        seqlens,
        causal_modes={"both": (False, True), "yes": (True,), "no": (False,)}[args.causal],
        num_q_heads=args.heads[0],
        num_kv_heads=args.heads[1],
        head_dim=args.head_dim,
        dtype=getattr(torch, args.dtype),
        cp_only_from=cp_only_from,
        budget_s=args.budget_s,
        impls=tuple(getattr(args, "impls", None) or IMPLS),
        train_max_s=getattr(args, "train_max_s", 1 << 18),
        on_row=stage,
        log=log,
    )
    stage(result)
    if later:
        rows += run_check(later, device, base_seed=args.seed + len(rows), progress=True)
        stage({"summary": _summary(rows, world_size, log), "cases": rows})
    return payload


def _summary(rows, world_size, log) -> dict:
    summary = summarize_cases(rows)
    if rows:
        log(
            f"{summary['cases']} cases on {world_size} ranks, {summary['failed']} failed; "
            f"worst error ratio {summary['worst_ratio']:.3f}; planted bugs caught "
            f"{summary['planted_bugs_caught']}/{summary['planted_bugs']}"
        )
    return summary


def bench_command(topic: str, seqlens=(), *, nproc: int = 2, check: bool = False) -> list[str]:
    """The torchrun command line of ``cp bench --record`` (``--no-check`` unless ``check``):
    what notebook 08's GPU profile runs, from the repository root."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc-per-node", str(nproc), "-m", "flashcore", "cp", "bench", "--record"]
    cmd += [] if check else ["--no-check"]
    cmd += ["--topic", topic]
    return cmd + (["--seqlens", *map(str, seqlens)] if seqlens else [])


def run_bench_command(cmd, cwd) -> tuple[int, str]:
    """Run ``bench_command``'s command line with NVLink multicast off; returns its exit
    status and the last 40 lines of its output (with the tail of stderr on a failure)."""
    import subprocess

    env = dict(os.environ, **NO_MULTICAST)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    out = "\n".join(proc.stdout.splitlines()[-40:])
    return proc.returncode, out + ("\n" + proc.stderr[-2000:] if proc.returncode else "")


# ---------------------------------------------------------------------------------------
# The bench.


@dataclasses.dataclass
class _Point:
    """One (S, mask) of the sweep, in one process group: its rows, by implementation."""

    seqlen: int
    causal: bool
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    world_size: int
    device: torch.device
    group: object
    log: object
    batch: int = 1
    rows: dict = dataclasses.field(default_factory=dict)

    @property
    def sharding(self) -> str:  # the causal load balance; contiguous for full attention
        return "zigzag" if self.causal else "contiguous"

    @property
    def reps(self) -> int:
        return 3 if self.seqlen < (1 << 20) else 1

    @property
    def flops(self) -> float:
        return causal_flops(self.batch, self.num_q_heads, self.seqlen, self.head_dim, self.causal)

    def randn(self, gen, heads: int, length: int) -> torch.Tensor:
        """Inputs from the seeded generator ``gen`` (never the default one: PyTorch seeds
        each process's default CUDA generator from /dev/urandom, so the ranks would differ)."""
        shape = (self.batch, heads, length, self.head_dim)
        return torch.randn(shape, generator=gen, device=self.device, dtype=self.dtype)

    def add(self, impl: str, ms: float, peak: float, *, flops_factor: float = 1.0, **extra) -> dict:
        """One timed row; ``flops_factor`` scales the forward's FLOPs (3.5 for forward +
        backward: the backward counted as 2.5 forwards)."""
        row = {
            "world_size": self.world_size,
            "S": self.seqlen,
            "causal": self.causal,
            "impl": impl,
            "sharding": self.sharding if impl.startswith("flashcore_cp") else None,
            "batch": self.batch,
            "num_q_heads": self.num_q_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "dtype": str(self.dtype).replace("torch.", ""),
            "time_ms": ms,
            # comm_only moves bytes and does no attention: no TFLOP/s.
            "tflops": (
                flops_factor * self.flops / (ms * 1e-3) / 1e12
                if ms and impl != "comm_only"
                else None
            ),
            "peak_mem_gib": peak,
            **extra,
        }
        self.rows[impl] = row
        self.log(
            f"S={self.seqlen} causal={self.causal} {impl}: {ms:.1f} ms, peak {peak} GiB"
            + (f", {row['tflops']:.0f} TFLOP/s" if row["tflops"] else "")
        )
        return row

    def failed(self, impl: str, exc: Exception, skipped: list) -> None:
        msg = f"{type(exc).__name__}: {str(exc)[:400]}"
        skipped.append({"S": self.seqlen, "causal": self.causal, "impl": impl, "reason": msg})
        self.log(f"S={self.seqlen} causal={self.causal} {impl}: FAILED {msg}")


def _ring_shards(point: _Point, rank: int):
    """This rank's q, k, v shards of the point's global inputs (seeded: every rank draws the
    same global sequence and keeps its shard)."""
    spans = P.shard_spans(point.seqlen, point.world_size, rank, point.sharding)
    local_len = sum(b - a for a, b in spans)
    gen = torch.Generator(device=point.device).manual_seed(point.seqlen + point.causal)
    heads = (point.num_q_heads, point.num_kv_heads, point.num_kv_heads)
    return [point.randn(gen, h, local_len) for h in heads]


def _ring_kwargs(point: _Point) -> dict:
    return dict(
        seqlen=point.seqlen, causal=point.causal, sharding=point.sharding, group=point.group
    )


def _time_ring(point: _Point, shards, *, skip_comm: bool, warmup: int) -> None:
    """flashcore_cp (the ring), or with ``skip_comm`` flashcore_cp_nocomm (the same blocks
    and merges, every transfer skipped: each step attends to the local buffer)."""
    q_l, k_l, v_l = shards
    kw = _ring_kwargs(point)
    reset_peak()
    ms = timed(
        lambda: P.ring_attention(q_l, k_l, v_l, skip_comm=skip_comm, **kw),
        reps=point.reps,
        warmup=warmup,
        group=point.group,
    )
    point.add("flashcore_cp_nocomm" if skip_comm else "flashcore_cp", ms, peak_gib(point.group))


def _time_ulysses(point: _Point, shards, *, warmup: int) -> None:
    """flashcore_ulysses: the head all-to-all strategy on the same shards (heads must divide
    across the ranks; ``flashcore.parallel_ulysses``)."""
    from ..parallel_ulysses import ulysses_attention

    q_l, k_l, v_l = shards
    kw = _ring_kwargs(point)
    reset_peak()
    ms = timed(
        lambda: ulysses_attention(q_l, k_l, v_l, **kw),
        reps=point.reps,
        warmup=warmup,
        group=point.group,
    )
    point.add("flashcore_ulysses", ms, peak_gib(point.group), sharding=point.sharding)


def _time_transfers(point: _Point, shards) -> None:
    """comm_only: the N - 1 ring transfers of a K/V shard alone."""
    k_l, group = shards[1], point.group
    buf = [torch.empty(2 * k_l.numel(), dtype=k_l.dtype, device=k_l.device) for _ in range(2)]

    def ring_only():
        for step in range(point.world_size - 1):
            for w in P.ring_exchange(buf[step % 2], buf[(step + 1) % 2], group):
                w.wait()

    reset_peak()
    ms = timed(ring_only, reps=point.reps, warmup=1, group=group)
    point.add("comm_only", ms, peak_gib(group), bytes_per_step=2 * k_l.numel() * k_l.element_size())


def _time_ring_training(point: _Point, shards, *, warmup: int) -> None:
    """flashcore_cp_fwd_bwd: a training step's attention, the ring forward and backward."""
    leaves = [t.detach().clone().requires_grad_() for t in shards]
    gen = torch.Generator(device=point.device).manual_seed(point.seqlen + point.causal + 1)
    grad_out = point.randn(gen, point.num_q_heads, shards[0].shape[2])
    kw = _ring_kwargs(point)

    def train_step():
        with torch.enable_grad():
            P.ring_attention(*leaves, **kw).backward(grad_out)

    reset_peak()
    ms = timed(train_step, reps=point.reps, warmup=warmup, group=point.group)
    point.add(
        "flashcore_cp_fwd_bwd",
        ms,
        peak_gib(point.group),
        note="forward + backward; tflops counts 3.5x the forward's FLOPs",
        flops_factor=3.5,
    )


def _time_one_gpu(point: _Point, warmup: int) -> None:
    """flashcore_1gpu: ``flashcore.attention`` on the whole sequence, each GPU alone."""
    from ..interface import attention

    gen = torch.Generator(device=point.device).manual_seed(7)
    q = point.randn(gen, point.num_q_heads, point.seqlen)
    k, v = (point.randn(gen, point.num_kv_heads, point.seqlen) for _ in range(2))
    reset_peak()
    with torch.no_grad():
        ms = timed(
            lambda: attention(q, k, v, causal=point.causal),
            reps=point.reps,
            warmup=warmup,
            group=point.group,
        )
    point.add(
        "flashcore_1gpu", ms, peak_gib(point.group), note="each GPU runs the whole sequence alone"
    )


def _time_torch_cp(point: _Point, mesh, backend: str, checks: list) -> None:
    """torch_cp_<backend>: PyTorch's context_parallel around SDPA, timed; at the first S its
    output is checked under the error rule (``cp_torch.torch_cp_output_check``) and the
    check appended to ``checks``. Raises what PyTorch raises."""
    from .cp_torch import torch_cp_output_check, torch_cp_sdpa

    impl = f"torch_cp_{backend}"
    gen = torch.Generator(device=point.device).manual_seed(11)
    q = point.randn(gen, point.num_q_heads, point.seqlen)
    # PyTorch's ring SDPA takes no enable_gqa: K/V expanded to Hq heads (they travel Hq/Hkv
    # times the bytes flashcore's ring sends). Every input from the seeded generator.
    k, v = (point.randn(gen, point.num_kv_heads, point.seqlen) for _ in range(2))
    group_size = point.num_q_heads // point.num_kv_heads
    k_x, v_x = (t.repeat_interleave(group_size, dim=1) for t in (k, v))
    with torch.no_grad():
        ms, peak, out_global, unshard_agrees = torch_cp_sdpa(
            mesh, q.clone(), k_x, v_x, point.causal, backend, point.reps, 1, point.group
        )
    point.add(
        impl,
        ms,
        peak,
        note="K/V expanded to Hq heads (no GQA in PyTorch's ring SDPA); "
        "peak includes the global buffers the context shards in place",
    )
    if checks and point.seqlen != checks[0]["S"]:
        return  # the output is checked at the first S only
    if isinstance(out_global, str):  # the gather failed: the timing stands, the check cannot
        checks.append(
            {
                "S": point.seqlen,
                "causal": point.causal,
                "impl": impl,
                "passed": None,
                "error": out_global,
            }
        )
        return
    check = torch_cp_output_check(
        q, k, v, out_global, point.causal, group=point.group, impl=impl, seqlen=point.seqlen
    )
    check["unshard_agrees_with_positions"] = unshard_agrees
    checks.append(check)
    point.log(
        f"  {impl} output vs float64 ({check['rows_checked']} sampled rows): "
        f"ratio {check['ratio']:.3f}, passed {check['passed']}; inputs "
        f"identical on every rank: {check['inputs_identical_across_ranks']}"
    )


def _time_torch_cp_training(point: _Point, mesh, backend: str) -> None:
    """torch_cp_<backend>_fwd_bwd: a training step's attention through PyTorch's
    context_parallel + SDPA, forward and backward, on the same global inputs as
    ``_time_torch_cp`` (K/V expanded to Hq heads)."""
    from .cp_torch import torch_cp_sdpa

    gen = torch.Generator(device=point.device).manual_seed(11)
    q = point.randn(gen, point.num_q_heads, point.seqlen)
    k, v = (point.randn(gen, point.num_kv_heads, point.seqlen) for _ in range(2))
    group_size = point.num_q_heads // point.num_kv_heads
    k_x, v_x = (t.repeat_interleave(group_size, dim=1) for t in (k, v))
    del k, v
    ms, peak, _, _ = torch_cp_sdpa(
        mesh, q, k_x, v_x, point.causal, backend, point.reps, 1, point.group, backward=True
    )
    point.add(
        f"torch_cp_{backend}_fwd_bwd",
        ms,
        peak,
        note="forward + backward, K/V expanded to Hq heads; tflops counts 3.5x the forward's FLOPs",
        flops_factor=3.5,
    )


def _derive_columns(rows: dict, world_size: int) -> None:
    """flashcore_cp's scaling efficiency against one GPU, and what the transfers add."""
    one = rows.get("flashcore_1gpu")
    if one and rows.get("flashcore_ulysses"):
        ulysses = rows["flashcore_ulysses"]
        ulysses["scaling_efficiency"] = one["time_ms"] / (world_size * ulysses["time_ms"])
    cp = rows.get("flashcore_cp")
    if not cp:
        return
    if one:
        cp["scaling_efficiency"] = one["time_ms"] / (world_size * cp["time_ms"])
    nocomm, comm = rows.get("flashcore_cp_nocomm"), rows.get("comm_only")
    if nocomm and comm:
        exposed = max(cp["time_ms"] - nocomm["time_ms"], 0.0)
        cp["comm_exposed_ms"] = exposed
        # What the ring costs over the same compute without transfers; the hidden fraction
        # below is only meaningful where the transfers take longer than the run-to-run noise
        # of the compute (the overlap probe's short S).
        cp["comm_overhead_fraction"] = exposed / cp["time_ms"]
        cp["comm_hidden_fraction"] = (
            max(0.0, 1.0 - exposed / comm["time_ms"]) if comm["time_ms"] > 0 else None
        )


def _free_device_memory(device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _warmup_calls(compiled: set, impl: str, causal: bool) -> int:
    """One warm-up call the first time an impl runs a mask (it compiles then), none after."""
    first = (impl, causal) not in compiled
    compiled.add((impl, causal))
    return 1 if first else 0


def _predicted_seconds(seqlen, last_s, last_elapsed, cp_only_from) -> float:
    """This S's time, quadratic from the last S's; the ring alone (from ``cp_only_from``) is
    about 2/5 of the full set of implementations."""
    predicted = last_elapsed * (seqlen / last_s) ** 2
    if cp_only_from is not None and seqlen >= cp_only_from and last_s < cp_only_from:
        predicted *= 0.4
    return predicted


def bench(
    seqlens,
    *,
    causal_modes=(False, True),
    num_q_heads=8,
    num_kv_heads=2,
    head_dim=128,
    dtype=torch.bfloat16,
    impls=IMPLS,
    cp_only_from: int | None = None,
    budget_s: float = 300.0,
    train_max_s: int = 1 << 18,
    probe_seqlens=(16384, 65536),
    on_row=None,
    group=None,
    log=print,
) -> dict:
    """Time every impl at each global S. Every rank runs this (torchrun). Returns
    {"rows": [...], "torch_cp_checks": [...], "skipped": [...]} (and "overlap_probe");
    ``on_row`` is called after each S (to record incrementally).

    ``cp_only_from``: from this S on only flashcore's ring (with and without transfers) and
    the transfers alone are timed (the 1-GPU run and PyTorch's CP take too long there).
    ``train_max_s``: the ring forward + backward is timed up to this S.
    ``probe_seqlens``: ``overlap_probe`` first (short MHA shards, where transfers matter).
    ``budget_s``: stop before an S whose predicted time (quadratic from the last S) would
    pass it.
    """
    from torch.distributed.device_mesh import init_device_mesh

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    device = current_device()  # CPU: a smoke run of this code, timings meaningless
    mesh = None
    if any(i.startswith("torch_cp") for i in impls):
        mesh = init_device_mesh(device.type, (world_size,))
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
    compiled = set()  # (impl, causal) already run once: no warm-up call needed
    for seqlen in seqlens:
        elapsed = time.perf_counter() - start
        if last_s is not None:
            predicted = _predicted_seconds(seqlen, last_s, last_elapsed, cp_only_from)
            if elapsed + predicted > budget_s:
                reason = (
                    f"predicted {predicted:.0f} s past the {budget_s:.0f} s budget "
                    f"(elapsed {elapsed:.0f} s)"
                )
                result["skipped"].append({"S": seqlen, "reason": reason})
                log(f"S={seqlen}: skipped, predicted {predicted:.0f} s past the budget")
                continue
        s_start = time.perf_counter()
        cp_only = cp_only_from is not None and seqlen >= cp_only_from
        for causal in causal_modes:
            point = _Point(
                seqlen=seqlen,
                causal=causal,
                num_q_heads=num_q_heads,
                num_kv_heads=num_kv_heads,
                head_dim=head_dim,
                dtype=dtype,
                world_size=world_size,
                device=device,
                group=group,
                log=log,
            )

            shards = _ring_shards(point, rank)
            with torch.no_grad():
                if "flashcore_cp" in impls:
                    _time_ring(
                        point, shards, skip_comm=False, warmup=_warmup_calls(compiled, "cp", causal)
                    )
                if "flashcore_cp_fwd_bwd" in impls and seqlen <= train_max_s:
                    try:  # compiled only once it ran through
                        first = ("bwd", causal) not in compiled
                        _time_ring_training(point, shards, warmup=1 if first else 0)
                        compiled.add(("bwd", causal))
                    except Exception as exc:
                        point.failed("flashcore_cp_fwd_bwd", exc, result["skipped"])
                if "flashcore_cp_nocomm" in impls:
                    _time_ring(point, shards, skip_comm=True, warmup=0)
                if "comm_only" in impls and world_size > 1:
                    _time_transfers(point, shards)
                heads_divide = (num_q_heads % world_size, num_kv_heads % world_size) == (0, 0)
                if "flashcore_ulysses" in impls and heads_divide:
                    try:
                        warm = _warmup_calls(compiled, "ulysses", causal)
                        _time_ulysses(point, shards, warmup=warm)
                    except Exception as exc:
                        point.failed("flashcore_ulysses", exc, result["skipped"])
            if not cp_only and "flashcore_1gpu" in impls:
                _time_one_gpu(point, _warmup_calls(compiled, "1gpu", causal))
            for backend in ("cudnn", "flash"):
                if cp_only or f"torch_cp_{backend}" not in impls:
                    continue
                try:
                    _time_torch_cp(point, mesh, backend, result["torch_cp_checks"])
                except Exception as exc:  # record why PyTorch's CP could not run
                    point.failed(f"torch_cp_{backend}", exc, result["skipped"])
                _free_device_memory(device)
            for backend in ("cudnn", "flash"):
                impl = f"torch_cp_{backend}_fwd_bwd"
                if cp_only or impl not in impls or seqlen > train_max_s:
                    continue
                try:
                    _time_torch_cp_training(point, mesh, backend)
                except Exception as exc:
                    point.failed(impl, exc, result["skipped"])
                _free_device_memory(device)
            _derive_columns(point.rows, world_size)
            result["rows"] += list(point.rows.values())
            shards = None
            _free_device_memory(device)
        last_s, last_elapsed = seqlen, time.perf_counter() - s_start
        if on_row is not None:
            on_row(result)
    return result


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
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    device = current_device()
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
            t_ring = timed(
                lambda: P.ring_attention(q, k, v, **kw), reps=reps, warmup=2, group=group
            )
            t_alone = timed(
                lambda: P.ring_attention(q, k, v, skip_comm=True, **kw),
                reps=reps,
                warmup=1,
                group=group,
            )
            t_comm = timed(ring_only, reps=reps, warmup=1, group=group)
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
