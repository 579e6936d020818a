"""PyTorch's own context parallelism beside flashcore's ring, and the check of its output.

* ``torch_cp_sdpa``: ``torch.distributed.tensor.experimental.context_parallel`` around SDPA
  (cuDNN or flash backend), timed, with its output gathered back into sequence order.
* ``torch_cp_output_check``: that output under the error rule against the float64
  single-device reference, recording whether every rank held the same inputs.
* ``torch_cp_cpu_check``: the same check on local gloo processes around PyTorch's own ring
  on CPU (notebook 08 and the tests).
"""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

from .cp_check import _spawn_gloo_ranks, end_spawned_rank
from .cp_timing import peak_gib, reset_peak, timed


def _torch_cp_options():
    """PyTorch's private CP options object (its module moved between releases)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel._attention import (
            _cp_options,
        )
    except ImportError:  # torch releases with the flat module
        from torch.distributed.tensor.experimental._attention import _cp_options
    return _cp_options


def torch_cp_sdpa(mesh, q, k, v, causal, backend_name, reps, warmup, group, *, backward=False):
    """PyTorch's context_parallel around SDPA on global buffers q, k, v (sharded in place by
    the context). Returns (time_ms, peak_gib, the global output in sequence order for the rows
    check, or the error that prevented gathering it, and whether PyTorch's own
    ``context_parallel_unshard`` gives the same order).

    ``backward``: time a training step's attention instead, SDPA's forward and backward on
    the shards (leaves made from them inside the context, a seeded upstream gradient); the
    output is then not gathered (None, None in its place).

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

            if backward:
                return (*_time_sdpa_backward(q, k, v, causal, reps, warmup, group), None, None)
            reset_peak()
            ms = timed(call, reps=reps, warmup=warmup, group=group)
            peak = peak_gib(group)
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


def _time_sdpa_backward(q, k, v, causal, reps, warmup, group):
    """Inside ``context_parallel``: SDPA forward + backward on the local shards q, k, v,
    timed as ``timed`` does. Returns (time_ms, peak_gib)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    gen = torch.Generator(device=q.device).manual_seed(q.shape[2] + 1)
    grad_out = torch.randn(q.shape, generator=gen, device=q.device, dtype=q.dtype)

    def step():
        with torch.enable_grad():
            out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
            out.backward(grad_out)
        for leaf in leaves:
            leaf.grad = None

    reset_peak()
    ms = timed(step, reps=reps, warmup=warmup, group=group)
    return ms, peak_gib(group)


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
        _, _, out_global, agrees = torch_cp_sdpa(
            mesh, q.clone(), k_x, v_x, causal, "flash", 1, 0, None
        )
        check = torch_cp_output_check(q, k, v, out_global, causal, impl="torch_cp (CPU)")
        rows.append({"inputs": inputs, **check, "unshard_agrees_with_positions": agrees})
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    end_spawned_rank()


def torch_cp_cpu_check(seqlen: int = 1024, world_size: int = 2, dtype="float32") -> list[dict]:
    """The bench's PyTorch-CP output check, run on ``world_size`` local gloo processes around
    PyTorch's own ``context_parallel`` (CPU flash kernel per block), B=1 Hq=4 Hkv=1 D=64:
    with every input seeded (as the bench draws them now) and with V drawn per rank (as it
    drew them when ``torch_cp_checks`` were recorded). Returns rank 0's rows.

    float32 by default: PyTorch's bfloat16 CPU kernels (the flash kernel of each block and the
    bf16 matmuls of the same-precision reference) run through oneDNN, which picks a different
    code path on each CPU (``brg_matmul:avx512_core_bf16`` on an AVX512-BF16 CPU, AMX tiles
    on a recent Xeon, which ``ATEN_CPU_CAPABILITY`` does not control), so a bf16 verdict here
    describes the CPU's oneDNN kernels as much as the check. float32 is IEEE arithmetic on
    every CPU; the error rule then holds or fails by the inputs, which is what this checks."""

    child_env = {"CUDA_VISIBLE_DEVICES": ""}
    rows = _spawn_gloo_ranks(_spawned_torch_cp_check, (seqlen, dtype), world_size, child_env)
    return [{**row, "dtype": dtype} for row in rows]
