"""A context-parallel training step: one Llama-style transformer block with the sequence
split over the ranks, checked against one device and timed beside PyTorch's context
parallelism.

The block: x -> RMSNorm -> q, k, v projections (Hq and Hkv heads of D) -> RoPE at each
token's global position -> causal attention -> output projection -> residual -> RMSNorm ->
SwiGLU MLP -> residual. The loss is the mean squared difference from a seeded target over
all B * S * d_model values. Every rank holds its shard of x and of the target (zigzag, the
balanced causal split) and the whole parameter set; after the backward the parameter
gradients and the loss are summed over the ranks in float32, as data parallelism sums
replicas' gradients.

* ``check_training_step``: the step through flashcore's ring and Ulysses; loss, output, dx
  and every parameter gradient under the error rule against the same step in float64 on one
  device (eager attention), the same step on one device in the run's dtype (eager
  attention) being the same-precision baseline. Planted: the ring's dK/dV accumulation
  dropped (``cp_planted``), which the check must catch.
* ``time_training_steps``: the step's time and tokens per second for flashcore's ring and
  Ulysses, PyTorch's ``context_parallel`` + SDPA (cuDNN, flash; K/V expanded to Hq heads,
  its ring SDPA having no GQA), and each GPU alone on the whole sequence
  (``flashcore.attention``).
* ``run_training_study``: both, the payload of
  results/<gpu>-x<N>/context_parallel_training.json (``cp train --record``).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import parallel as P
from .cp_timing import peak_gib, reset_peak, timed

TRAIN_IMPLS = (
    "flashcore_ring",
    "flashcore_ulysses",
    "flashcore_1gpu",
    "torch_cp_cudnn",
    "torch_cp_flash",
)
PARAM_NAMES = ("norm1", "wq", "wk", "wv", "wo", "norm2", "w_gate", "w_up", "w_down")


@dataclasses.dataclass(frozen=True)
class BlockShape:
    """The block's sizes; d_model = Hq * D, the MLP's hidden width ``mlp_hidden``."""

    num_q_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 128
    mlp_hidden: int = 2816
    batch: int = 1

    @property
    def d_model(self) -> int:
        return self.num_q_heads * self.head_dim


def init_params(shape: BlockShape, dtype, device, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded parameters, the same on every rank (drawn on the CPU in float32, then cast)."""
    gen = torch.Generator().manual_seed(seed)
    d, hidden = shape.d_model, shape.mlp_hidden
    kv = shape.num_kv_heads * shape.head_dim
    sizes = {
        "wq": (d, d),
        "wk": (d, kv),
        "wv": (d, kv),
        "wo": (d, d),
        "w_gate": (d, hidden),
        "w_up": (d, hidden),
        "w_down": (hidden, d),
    }
    params = {}
    for name in PARAM_NAMES:
        if name.startswith("norm"):
            w = 1.0 + 0.1 * torch.randn(d, generator=gen)
        else:
            fan_in = sizes[name][0]
            w = torch.randn(sizes[name], generator=gen) / math.sqrt(fan_in)
        params[name] = w.to(device=device, dtype=dtype)
    return params


def rope_tables(positions: torch.Tensor, head_dim: int, dtype) -> tuple[torch.Tensor, ...]:
    """cos and sin (L, D) of RoPE (rotate-half layout, base 10000) at the given global
    positions, computed in float64 and stored in float32 (float64 for a float64 step)."""
    inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq.to(positions.device)[None]
    angles = torch.cat([angles, angles], dim=-1)
    table_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    return angles.cos().to(table_dtype), angles.sin().to(table_dtype)


def _rope(x, cos, sin):
    """x (B, H, L, D) rotated in the tables' precision, returned in x's dtype."""
    xf = x.to(cos.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def _rms_norm(x, weight, eps=1e-6):
    xf = x.float() if x.dtype != torch.float64 else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def block_forward(params, x, cos, sin, attend, shape: BlockShape):
    """The block on x (B, L, d_model): ``attend(q, k, v)`` takes q (B, Hq, L, D), k and v
    (B, Hkv, L, D) and returns (B, Hq, L, D), causal over global positions."""
    b, length, _ = x.shape
    h = _rms_norm(x, params["norm1"])

    def heads(t, n):
        return t.view(b, length, n, shape.head_dim).transpose(1, 2)

    q = _rope(heads(h @ params["wq"], shape.num_q_heads), cos, sin)
    k = _rope(heads(h @ params["wk"], shape.num_kv_heads), cos, sin)
    v = heads(h @ params["wv"], shape.num_kv_heads)
    o = attend(q, k, v).transpose(1, 2).reshape(b, length, shape.d_model)
    x = x + o @ params["wo"]
    h = _rms_norm(x, params["norm2"])
    return x + (F.silu(h @ params["w_gate"]) * (h @ params["w_up"])) @ params["w_down"]


def _local_loss(y, target, total_values: int):
    """This rank's part of the mean squared error over all B * S * d_model values."""
    return ((y.float() - target.float()) ** 2).sum() / total_values


def _eager_attend(q, k, v):
    """Causal attention by its definition, every operation in q's dtype (the float64
    reference, or the same-precision baseline): K/V repeated to Hq heads."""
    from ..reference import attention_reference

    return attention_reference(q, k, v, causal=True, compute_dtype=q.dtype)


def _global_inputs(seqlen: int, shape: BlockShape, dtype, device, seed: int):
    """x and the target (B, S, d_model), the same on every rank (a seeded generator on the
    ranks' own device)."""
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    size = (shape.batch, seqlen, shape.d_model)
    x = torch.randn(size, generator=gen, device=device, dtype=dtype)
    target = torch.randn(size, generator=gen, device=device, dtype=dtype)
    return x, target


def _cp_attend(strategy: str, seqlen: int, group):
    """attend() for one context-parallel strategy on zigzag shards."""
    from ..parallel_ulysses import ulysses_attention

    fn = {"ring": P.ring_attention, "ulysses": ulysses_attention}[strategy]
    return lambda q, k, v: fn(q, k, v, seqlen=seqlen, causal=True, sharding="zigzag", group=group)


def _sum_over_ranks(tensors, group) -> list[torch.Tensor]:
    """float32 sums over the ranks (float64 stays float64)."""
    out = []
    for t in tensors:
        acc = t.detach().to(torch.float64 if t.dtype == torch.float64 else torch.float32)
        dist.all_reduce(acc, group=group)
        out.append(acc)
    return out


def cp_step(params, x, target, *, strategy: str, seqlen: int, shape: BlockShape, group):
    """One training step of the block on every rank's zigzag shard. Returns (the global
    loss, this rank's output shard, this rank's dx shard, the parameter gradients summed
    over the ranks), all detached."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    x_l = P.shard(x, world, rank, "zigzag", seq_dim=1).requires_grad_()
    t_l = P.shard(target, world, rank, "zigzag", seq_dim=1)
    positions = P.shard_positions(seqlen, world, rank, "zigzag").to(x.device)
    cos, sin = rope_tables(positions, shape.head_dim, x.dtype)
    leaves = {n: p.detach().clone().requires_grad_() for n, p in params.items()}
    y = block_forward(leaves, x_l, cos, sin, _cp_attend(strategy, seqlen, group), shape)
    loss = _local_loss(y, t_l, target.numel())
    loss.backward()
    grads = _sum_over_ranks([leaves[n].grad for n in PARAM_NAMES], group)
    (total,) = _sum_over_ranks([loss], group)
    return total, y.detach(), x_l.grad.detach(), dict(zip(PARAM_NAMES, grads))


def one_device_step(params, x, target, *, compute_dtype, shape: BlockShape, attend=None):
    """The same step on one device over the whole sequence, every tensor in
    ``compute_dtype`` (attention eager unless ``attend`` is given). Returns (loss, y, dx,
    parameter gradients)."""
    xc = x.detach().to(compute_dtype).requires_grad_()
    leaves = {n: p.detach().to(compute_dtype).requires_grad_() for n, p in params.items()}
    positions = torch.arange(x.shape[1], device=x.device)
    cos, sin = rope_tables(positions, shape.head_dim, compute_dtype)
    y = block_forward(leaves, xc, cos, sin, attend or _eager_attend, shape)
    loss = _local_loss(y, target.to(compute_dtype), target.numel())
    loss.backward()
    return loss.detach(), y.detach(), xc.grad.detach(), {n: leaves[n].grad for n in PARAM_NAMES}


def _gather_unshard(local: torch.Tensor, group) -> torch.Tensor:
    """Every rank's zigzag shard (B, L_r, ...) joined into the global tensor, on this device
    (shards of an uneven S differ in length, hence the object gather)."""
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, local.cpu(), group=group)
    return P.unshard(gathered, "zigzag", seq_dim=1).to(local.device)


def check_training_step(
    seqlen: int,
    shape: BlockShape,
    dtype,
    device,
    group=None,
    *,
    strategies=("ring", "ulysses"),
    seed: int = 0,
    planted_bug: str | None = None,
) -> list[dict]:
    """The CP step of each strategy under the error rule (``validate.error_rule``) against
    the float64 step on one device, per quantity: the loss, the output y, dx and each
    parameter's gradient. Every rank returns the same rows. ``planted_bug``: a
    ``cp_planted`` bug held in ``flashcore.parallel`` while the ring's step runs (the row is
    then one the check must fail)."""
    from ..validate import error_rule
    from .cp_planted import planted

    params = init_params(shape, dtype, device, seed)
    x, target = _global_inputs(seqlen, shape, dtype, device, seed)
    ref = one_device_step(params, x, target, compute_dtype=torch.float64, shape=shape)
    base = one_device_step(params, x, target, compute_dtype=dtype, shape=shape)
    rows = []
    for strategy in strategies:
        with planted(planted_bug):
            loss, y, dx, grads = cp_step(
                params, x, target, strategy=strategy, seqlen=seqlen, shape=shape, group=group
            )
        got = {"loss": loss.view(1), "y": _gather_unshard(y, group)}
        got["dx"] = _gather_unshard(dx, group)
        got.update({f"d{n}": g for n, g in grads.items()})
        want = {"loss": ref[0].view(1), "y": ref[1], "dx": ref[2]}
        want.update({f"d{n}": g for n, g in ref[3].items()})
        same = {"loss": base[0].view(1), "y": base[1], "dx": base[2]}
        same.update({f"d{n}": g for n, g in base[3].items()})
        # Summed gradients stay in float32, as an optimizer would take them.
        reports = {name: error_rule(got[name], want[name], same[name]) for name in got}
        worst = max(reports, key=lambda n: reports[n].ratio)
        rows.append(
            {
                "strategy": strategy,
                "S": seqlen,
                "world_size": dist.get_world_size(group),
                "dtype": str(dtype).replace("torch.", ""),
                **dataclasses.asdict(shape),
                "planted_bug": planted_bug,
                "ratios": {n: r.ratio for n, r in reports.items()},
                "worst": worst,
                "ratio": reports[worst].ratio,
                "passed": all(r.passed for r in reports.values()),
                "loss": float(loss),
                "loss_float64": float(ref[0]),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------
# Speed: the step per implementation.


def _step_fn(impl: str, params, x, target, *, seqlen: int, shape: BlockShape, group, mesh):
    """(step, cleanup) for one implementation: step() runs forward, backward and the
    gradient sum over the ranks; cleanup() leaves the context it entered, if any."""
    import contextlib

    from ..interface import attention

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    leaves = {n: p.detach().clone().requires_grad_() for n, p in params.items()}
    stack = contextlib.ExitStack()
    reduce_grads = True
    if impl in ("flashcore_ring", "flashcore_ulysses"):
        x_l = P.shard(x, world, rank, "zigzag", seq_dim=1)
        t_l = P.shard(target, world, rank, "zigzag", seq_dim=1)
        positions = P.shard_positions(seqlen, world, rank, "zigzag").to(x.device)
        attend = _cp_attend(impl.removeprefix("flashcore_"), seqlen, group)
    elif impl == "flashcore_1gpu":  # each GPU alone on the whole sequence
        x_l, t_l = x, target
        positions = torch.arange(seqlen, device=x.device)
        reduce_grads = False

        def attend(q, k, v):
            return attention(q, k, v, causal=True)
    else:  # torch_cp_<backend>
        x_l, t_l = x.clone(), target.clone()
        positions = torch.arange(seqlen, device=x.device)
    cos, sin = rope_tables(positions, shape.head_dim, x.dtype)
    if impl.startswith("torch_cp"):
        attend = _enter_torch_cp(stack, impl, mesh, [x_l, t_l, cos, sin], [1, 1, 0, 0], shape)

    def step():
        with torch.enable_grad():
            y = block_forward(leaves, x_l, cos, sin, attend, shape)
            _local_loss(y, t_l, target.numel()).backward()
        grads = [leaves[n].grad for n in PARAM_NAMES]
        if reduce_grads:
            _sum_over_ranks(grads, group)
        for leaf in leaves.values():
            leaf.grad = None

    return step, stack.close


def _enter_torch_cp(stack, impl: str, mesh, buffers, seq_dims, shape: BlockShape):
    """Enter PyTorch's context_parallel (on ``stack``) with its causal load balancing on:
    it shards ``buffers`` in place along ``seq_dims`` (head-tail order, the RoPE tables
    with the tokens), and each SDPA call in the context becomes its ring. Returns attend()
    for the block: SDPA with K/V expanded to Hq heads under the impl's backend."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .cp_torch import _torch_cp_options

    backend = {
        "torch_cp_cudnn": SDPBackend.CUDNN_ATTENTION,
        "torch_cp_flash": SDPBackend.FLASH_ATTENTION,
    }[impl]
    options = _torch_cp_options()
    saved = options.enable_load_balance
    options.enable_load_balance = True
    stack.callback(setattr, options, "enable_load_balance", saved)
    stack.enter_context(sdpa_kernel(backend))
    stack.enter_context(
        context_parallel(
            mesh, buffers=buffers, buffer_seq_dims=seq_dims, no_restore_buffers=set(buffers)
        )
    )
    group_size = shape.num_q_heads // shape.num_kv_heads

    def attend(q, k, v):
        k, v = (t.repeat_interleave(group_size, dim=1) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return attend


def time_training_steps(
    seqlens,
    shape: BlockShape,
    dtype,
    device,
    group=None,
    *,
    impls=TRAIN_IMPLS,
    seed: int = 0,
    budget_s: float = 300.0,
    on_row=None,
    log=print,
) -> dict:
    """Each impl's training step at each global S (causal): wall clock per step (a barrier
    before, the slowest rank; median of 3 steps, 1 from S = 512K, after one warm-up step),
    tokens per second over the whole sequence, peak memory, and for the CP strategies the
    scaling efficiency against one GPU. Returns {"rows": [...], "skipped": [...]}."""
    import time

    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size(group)
    mesh = init_device_mesh(device.type, (world,)) if any("torch_cp" in i for i in impls) else None
    result = {"rows": [], "skipped": []}
    start, last = time.perf_counter(), None
    for seqlen in seqlens:
        if last is not None:
            predicted = last[1] * (seqlen / last[0]) ** 2
            if time.perf_counter() - start + predicted > budget_s:
                result["skipped"].append(
                    {"S": seqlen, "reason": f"predicted {predicted:.0f} s past the budget"}
                )
                continue
        s_start = time.perf_counter()
        params = init_params(shape, dtype, device, seed)
        x, target = _global_inputs(seqlen, shape, dtype, device, seed)
        rows = {}
        for impl in impls:
            reset_peak()
            try:
                step, cleanup = _step_fn(
                    impl, params, x, target, seqlen=seqlen, shape=shape, group=group, mesh=mesh
                )
                try:
                    reps = 3 if seqlen < (1 << 19) else 1
                    ms = timed(step, reps=reps, warmup=1, group=group)
                finally:
                    cleanup()
            except Exception as exc:  # record why an implementation could not run
                reason = f"{type(exc).__name__}: {str(exc)[:400]}"
                result["skipped"].append({"S": seqlen, "impl": impl, "reason": reason})
                log(f"S={seqlen} {impl}: FAILED {reason}")
                continue
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            tokens = shape.batch * seqlen
            rows[impl] = {
                "S": seqlen,
                "impl": impl,
                "world_size": world if impl != "flashcore_1gpu" else 1,
                "dtype": str(dtype).replace("torch.", ""),
                "time_ms": ms,
                "tokens_per_s": tokens / (ms * 1e-3),
                "peak_gib": peak_gib(group),
            }
            log(f"S={seqlen} {impl}: {ms:.1f} ms, {tokens / (ms * 1e-3):,.0f} tokens/s")
        one = rows.get("flashcore_1gpu")
        for impl, row in rows.items():
            if one and impl in ("flashcore_ring", "flashcore_ulysses"):
                row["scaling_efficiency"] = one["time_ms"] / (world * row["time_ms"])
        result["rows"] += list(rows.values())
        last = (seqlen, time.perf_counter() - s_start)
        if on_row is not None:
            on_row(result)
    return result


# ---------------------------------------------------------------------------------------
# The record's runner.

# The checks' sizes: an awkward S (uneven zigzag chunks) at the bench's head layout on GPUs;
# a small block under the Triton interpreter on CPU.
GPU_CHECK = dict(seqlen=4099, dtypes=("bfloat16", "float16"))
CPU_CHECK = dict(seqlen=67, dtypes=("float32",))
CPU_SHAPE = BlockShape(num_q_heads=4, num_kv_heads=2, head_dim=32, mlp_hidden=192)


def run_training_study(args, *, device, world_size: int, log=print, on_stage=None) -> dict:
    """``cp train``: the checks (each strategy, each dtype, and the planted bug), then the
    timings (GPUs only). ``args``: the cp command's options (``seqlens``, ``heads``,
    ``head_dim``, ``seed``, ``budget_s``, ``no_check``). Returns the payload of
    results/<gpu>-x<N>/context_parallel_training.json; ``summary`` is what ``study_passed``
    reads."""
    on_gpu = device.type == "cuda"
    if on_gpu:
        shape = BlockShape(
            num_q_heads=args.heads[0], num_kv_heads=args.heads[1], head_dim=args.head_dim
        )
        sizes = GPU_CHECK
    else:
        shape, sizes = CPU_SHAPE, CPU_CHECK
    payload = {"world_size": world_size, "shape": dataclasses.asdict(shape), "checks": []}
    if not args.no_check:
        for dtype_name in sizes["dtypes"]:
            dtype = getattr(torch, dtype_name)
            rows = check_training_step(sizes["seqlen"], shape, dtype, device, seed=args.seed)
            rows += check_training_step(
                sizes["seqlen"],
                shape,
                dtype,
                device,
                strategies=("ring",),
                seed=args.seed,
                planted_bug="dkv_not_accumulated",
            )
            for row in rows:
                bug = f" PLANTED:{row['planted_bug']}" if row["planted_bug"] else ""
                log(
                    f"train check {row['strategy']} S={row['S']} {dtype_name}{bug}: worst "
                    f"{row['worst']} ratio {row['ratio']:.3f} passed {row['passed']}"
                )
            payload["checks"] += rows
    payload["summary"] = summarize_checks(payload["checks"])
    if on_stage is not None:
        on_stage(payload)
    if on_gpu and args.seqlens != [0]:
        seqlens = args.seqlens or [1 << 16, 1 << 17, 1 << 18, 1 << 19]
        payload["config"] = {
            "seqlens": seqlens,
            "causal": True,
            "budget_s": args.budget_s,
            "loss": "mean squared error over all B*S*d_model values",
            "timing": "wall clock per step (forward, backward, gradient sum "
            "over ranks), barrier before, slowest rank, median of 3 steps "
            "(1 from S = 512K) after one warm-up step",
        }

        def stage(result):
            payload.update(result)
            if on_stage is not None:
                on_stage(payload)

        stage(
            time_training_steps(
                seqlens,
                shape,
                getattr(torch, args.dtype),
                device,
                impls=tuple(getattr(args, "impls", None) or TRAIN_IMPLS),
                seed=args.seed,
                budget_s=args.budget_s,
                on_row=stage,
                log=log,
            )
        )
    return payload


def summarize_checks(rows) -> dict:
    """cases / failed count the real checks; a planted row counts as caught when it fails."""
    real = [r for r in rows if not r["planted_bug"]]
    plants = [r for r in rows if r["planted_bug"]]
    return {
        "cases": len(real),
        "failed": sum(not r["passed"] for r in real),
        "worst_ratio": max((r["ratio"] for r in real), default=0.0),
        "planted_bugs": len(plants),
        "planted_bugs_caught": sum(not r["passed"] for r in plants),
    }


# ---------------------------------------------------------------------------------------
# The check on local CPU processes (tests, notebook 08's live section).


def _spawned_training_check(rank, world_size, store_path, out_path, seqlen, planted_bug):
    import json

    from .cp_check import end_spawned_rank

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size
    )
    strategies = ("ring",) if planted_bug else ("ring", "ulysses")
    rows = check_training_step(
        seqlen,
        CPU_SHAPE,
        torch.float32,
        torch.device("cpu"),
        strategies=strategies,
        planted_bug=planted_bug,
    )
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    end_spawned_rank()


def spawn_training_check(
    seqlen: int = CPU_CHECK["seqlen"], world_size: int = 2, planted_bug: str | None = None
) -> list[dict]:
    """``check_training_step`` on ``world_size`` local gloo processes (float32, the
    kernels under the Triton interpreter, ``CPU_SHAPE``). Returns rank 0's rows."""
    from .cp_check import _spawn_gloo_ranks

    child_env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return _spawn_gloo_ranks(_spawned_training_check, (seqlen, planted_bug), world_size, child_env)
