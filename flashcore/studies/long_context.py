"""The long-context study behind notebooks/05_long_context.ipynb.

* ``bench_long_context``: time, TFLOP/s and peak extra memory from S = 1K upwards, B = 1,
  flashcore beside SDPA's flash / cuDNN / math backends in one process (math until it runs
  out of memory), causal and non-causal, and the sliding-window variant.
* ``loglog_slope``: the exponent of time ~ S^k fitted over the long end of a sweep.
* ``whole_sequence_tile_compile``: the prior report's S = 32K "compile failure", reproduced
  with a kernel that holds every key of a row in one tile (Triton caps a tile at 2^20
  elements: S * D = 16K * 64 fits, 32K * 64 does not).
* ``int32_offset_demo``: the failure a long-context kernel meets next, row offsets computed
  in int32 past 2^31 elements, and the int64 fix.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import torch
import triton
import triton.language as tl

# ----------------------------------------------------------------------------- timing


def _peak_extra_bytes(fn, args, out_bytes: int) -> int:
    """Device memory the call allocates beyond its inputs and its output, at its peak."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del out
    return int(peak - before - out_bytes)


def _time_adaptive(fn, args, *, budget_s: float, max_reps: int = 50) -> dict:
    """Median over as many launches as fit in ``budget_s`` (at least 3, after one warm-up),
    each bracketed by CUDA events. Long kernels need no L2 rotation (their inputs are far
    larger than L2); short ones get many repeats instead."""
    from .bench import summarize_samples

    fn(*args)  # compile / warm-up
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(*args)
    end.record()
    end.synchronize()
    first_ms = start.elapsed_time(end)
    reps = int(min(max_reps, max(3, budget_s * 1e3 / max(first_ms, 1e-3))))
    samples = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*args)
        e.record()
        samples.append((s, e))
    torch.cuda.synchronize()
    return summarize_samples([s.elapsed_time(e) for s, e in samples]).as_dict()


def window_flops(heads: int, seqlen: int, head_dim: int, window: int, batch: int = 1) -> float:
    """4 * D per visible (query, key) pair of a causal sliding window (top-left)."""
    w = min(window, seqlen)
    pairs = w * (w + 1) // 2 + (seqlen - w) * w
    return 4.0 * batch * heads * pairs * head_dim


def bench_long_context(
    seqlens,
    *,
    heads: int = 8,
    head_dim: int = 128,
    impls=("flashcore", "sdpa_flash", "sdpa_cudnn", "sdpa_math"),
    causal_modes=(False, True),
    windows=(),
    budget_s: float = 1.5,
    max_seconds_per_call: float = 12.0,
    progress=None,
) -> list[dict]:
    """One row per (S, causal, impl) on B = 1, bf16, (1, H, S, D) inputs. ``windows`` adds
    flashcore with ``window=W`` (causal). An implementation that fails (out of memory,
    unsupported) is recorded with its error; one whose previous point took longer than
    ``max_seconds_per_call`` / 4 is not run at the next, 4x costlier, S."""
    from ..interface import attention
    from .bench import attention_flops, make_flashcore, make_sdpa

    rows = []
    last_ms: dict = {}
    for seqlen in seqlens:
        gen = torch.Generator(device="cuda").manual_seed(seqlen)
        q, k, v = (
            torch.randn(
                1, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen
            )
            for _ in range(3)
        )
        out_bytes = q.numel() * q.element_size()
        input_bytes = 3 * out_bytes
        runs = [(impl, causal, None) for causal in causal_modes for impl in impls]
        runs += [("flashcore", True, w) for w in windows]
        for impl, causal, window in runs:
            name = impl if window is None else f"flashcore_window{window}"
            key = (name, causal)
            row = dict(
                S=seqlen,
                B=1,
                H=heads,
                D=head_dim,
                causal=causal,
                impl=name,
                window=window,
                input_bytes=input_bytes,
                output_bytes=out_bytes,
            )
            row["flops"] = (
                window_flops(heads, seqlen, head_dim, window)
                if window
                else attention_flops(1, heads, seqlen, seqlen, head_dim, causal)
            )
            growth = 2.0 if window else 4.0
            if key in last_ms and last_ms[key] * growth > max_seconds_per_call * 1e3:
                row["skipped"] = (
                    f"previous point took {last_ms[key] / 1e3:.1f} s"
                    if math.isfinite(last_ms[key])
                    else "failed at a smaller S"
                )
                rows.append(row)
                continue
            if impl == "flashcore":
                fn = (
                    make_flashcore(causal)
                    if window is None
                    else (lambda q_, k_, v_, w=window: attention(q_, k_, v_, causal=True, window=w))
                )
            else:
                fn = make_sdpa(impl[len("sdpa_") :], causal, False)
            try:
                with torch.inference_mode():
                    row["timing"] = _time_adaptive(fn, (q, k, v), budget_s=budget_s)
                    row["extra_bytes"] = _peak_extra_bytes(fn, (q, k, v), out_bytes)
                row["tflops"] = row["flops"] / row["timing"]["median_ms"] / 1e9
                last_ms[key] = row["timing"]["median_ms"]
            except torch.OutOfMemoryError:
                row["error"] = "out of memory"
                last_ms[key] = math.inf
            except Exception as exc:  # an unsupported size is a result too
                row["error"] = (
                    f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                )
                last_ms[key] = math.inf
            torch.cuda.empty_cache()
            rows.append(row)
            if progress is not None:
                progress(row)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def loglog_slope(
    rows: list[dict], impl: str, causal: bool, *, min_seqlen: int = 8192
) -> float | None:
    """Least-squares slope of log(time) against log(S) for S >= min_seqlen."""
    pts = [
        (r["S"], r["timing"]["median_ms"])
        for r in rows
        if r["impl"] == impl and r["causal"] == causal and "timing" in r and r["S"] >= min_seqlen
    ]
    if len(pts) < 2:
        return None
    s, t = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(s, t, 1)[0])


def long_decode_shapes(
    lengths=(32768, 131072, 524288, 1048576, 2097152, 4194304, 8388608, 16777216),
) -> list[dict]:
    """Single-request decode (B = 1, q_len 1, GQA 32/8, D = 128) over ever longer caches, up
    to 16M tokens (69 GB of K and V in bf16: the largest power of two that fits in 80 GB)."""
    return [
        dict(B=1, Hq=32, Hkv=8, S=1, Sk=n, D=128, causal=False, dtype="bfloat16") for n in lengths
    ]


# ----------------------------------------------------------------------------- record

PARTS = ("sweep", "offsets", "window", "decode", "compile32k")
DECODE_PEERS = ["flashcore_decode", "sdpa_flash", "sdpa_cudnn"]


def sweep_line(r: dict) -> str:
    """One sweep point, as ``python -m flashcore long`` prints it while the sweep runs."""
    t = r.get("timing", {}).get("median_ms")
    return f"S={r['S']:<8} causal={r['causal']!s:5} {r['impl']:<24} " + (
        f"{t:10.3f} ms {r['tflops']:6.1f} TFLOP/s extra {r['extra_bytes'] / 2**20:8.1f} MiB"
        if t
        else r.get("error", r.get("skipped", ""))
    )


def run_long_record(
    seqlens=tuple(2**i for i in range(10, 21)),
    *,
    heads: int = 8,
    windows=(4096,),
    max_seconds_per_call: float = 6.0,
    decode_lengths=None,
    parts=PARTS,
    log=None,
) -> dict:
    """The payload of results/<gpu>/long_context.json (GPU): ``python -m flashcore long`` and
    notebook 05 both build it here, one key per part of ``parts``:

    * sweep: ``bench_long_context`` over ``seqlens`` (B=1, ``heads`` heads, D=128, bf16) with
      the sliding ``windows``; ``sweep_shape``; ``slopes``, each implementation's log-log
      slope of time against S;
    * offsets: ``large_offsets`` (the forward on views past 2^31 elements, under the error
      rule) and ``int32_demo``;
    * window: ``window_correctness``, the sliding-window grid under the error rule;
    * decode: ``DECODE_PEERS`` over ``long_decode_shapes(decode_lengths)`` (all lengths when
      None), CUDA-graph replay;
    * compile32k: ``whole_sequence_tile``, the 32K whole-row tile compiled offline.

    ``log(line)`` gets the lines the CLI prints (a sweep point as soon as it is measured)."""
    from ..validate import check_large_offsets, correctness_grid, run_grid, summarize
    from .bench import bench_attention_shape

    log = log or (lambda *lines: None)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; expected some of {', '.join(PARTS)}")
    payload: dict = {}
    if "sweep" in parts:
        rows = bench_long_context(
            seqlens,
            heads=heads,
            windows=tuple(windows),
            max_seconds_per_call=max_seconds_per_call,
            progress=lambda r: log(sweep_line(r)),
        )
        payload["sweep"] = rows
        payload["sweep_shape"] = dict(B=1, H=heads, D=128, dtype="bfloat16")
        payload["slopes"] = {
            f"{impl} causal={c}": loglog_slope(rows, impl, c)
            for impl in {r["impl"] for r in rows}
            for c in (False, True)
        }
        log(payload["slopes"])
    if "offsets" in parts:
        payload["large_offsets"] = check_large_offsets("cuda", seqlen=2**20)
        payload["int32_demo"] = int32_offset_demo()
        log(payload["large_offsets"], payload["int32_demo"])
    if "window" in parts:
        rows = run_grid(correctness_grid("window"), "cuda", progress=False)
        payload["window_correctness"] = {"summary": summarize(rows), "cases": rows}
        log(payload["window_correctness"]["summary"])
    if "decode" in parts:
        shapes = (
            long_decode_shapes() if decode_lengths is None else long_decode_shapes(decode_lengths)
        )
        rows = []
        for shape in shapes:
            rows += bench_attention_shape(shape, DECODE_PEERS, reps=50, graph=True)
            log(
                [
                    (r["impl"], r.get("graph_timing", {}).get("median_ms"), r.get("error"))
                    for r in rows[-len(DECODE_PEERS) :]
                ]
            )
        payload["decode"] = rows
    if "compile32k" in parts:
        payload["whole_sequence_tile"] = {str(s): whole_sequence_tile_compile(s) for s in (32768,)}
        log(payload["whole_sequence_tile"])
    return payload


# ------------------------------------------------------------ what broke at S = 32K


@triton.jit
def _whole_row_attention(
    Q, K, V, Out, seqlen, scale, SEQ_BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr
):
    """The shape of a kernel that fails at 32K: one program per query row, every key of the
    row in one tile. Correct, but the tile grows with S, and Triton caps a tile at 2^20
    elements (and the registers run out long before)."""
    row = tl.program_id(0)
    keys = tl.arange(0, SEQ_BLOCK)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + row * HEAD_DIM + dims)
    k = tl.load(
        K + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seqlen, other=0.0
    )
    s = tl.where(keys < seqlen, tl.sum(q[None, :] * k, 1) * scale, float("-inf"))
    p = tl.exp(s - tl.max(s, 0))
    v = tl.load(
        V + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seqlen, other=0.0
    )
    tl.store(Out + row * HEAD_DIM + dims, tl.sum(p[:, None] * v, 0) / tl.sum(p, 0))


def whole_sequence_tile_compile(seqlen: int, head_dim: int = 64, arch: int = 90) -> str:
    """Compile ``_whole_row_attention`` for one S (offline, sm_90, no GPU needed) in a fresh
    process with the interpreter off; returns "compiles" or the compiler's error line."""
    code = (
        "import triton\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "from flashcore.studies.long_context import _whole_row_attention as fn\n"
        "sig = {'Q': '*fp32', 'K': '*fp32', 'V': '*fp32', 'Out': '*fp32',\n"
        "       'seqlen': 'i32', 'scale': 'fp32',\n"
        "       'SEQ_BLOCK': 'constexpr', 'HEAD_DIM': 'constexpr'}\n"
        f"src = ASTSource(fn, sig, {{'SEQ_BLOCK': {seqlen}, 'HEAD_DIM': {head_dim}}})\n"
        f"triton.compile(src, target=GPUTarget('cuda', {arch}, 32), options={{'num_warps': 8}})\n"
        "print('compiles')\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    if proc.returncode == 0:
        return "compiles"
    lines = [ln.strip() for ln in proc.stderr.splitlines() if "numel" in ln or "Error" in ln]
    return lines[-1] if lines else proc.stderr.strip().splitlines()[-1]


def tile_fits(shape) -> tuple[bool, str]:
    """Triton's front-end limit on one tile (2^20 elements), as the compiler applies it."""
    try:
        from triton._utils import validate_block_shape
    except ImportError:  # older layout: apply the documented limit directly
        numel = math.prod(shape)
        ok = numel <= 2**20
        return ok, "" if ok else f"numel ({numel}) exceeds triton maximum tensor numel (1048576)"
    try:
        validate_block_shape(list(shape))
        return True, ""
    except ValueError as exc:
        return False, str(exc)


@triton.jit
def _gather_rows(X, Out, rows, row_stride, WIDTH: tl.constexpr, INT64_OFFSETS: tl.constexpr):
    """Out[i, :] = X[rows[i], :]. With INT64_OFFSETS=False the row offset rows[i] * row_stride
    is computed in int32, as a kernel written without the cast would."""
    i = tl.program_id(0)
    row = tl.load(rows + i)
    if INT64_OFFSETS:
        row = row.to(tl.int64)
    cols = tl.arange(0, WIDTH)
    tl.store(Out + i * WIDTH + cols, tl.load(X + row * row_stride + cols))


def int32_offset_demo(device="cuda", width: int = 4096) -> dict:
    """Read rows of a (2^20 + 8, 4096) bf16 matrix (2^32 + 32K elements, 8.6 GB) with int32
    and with int64 row offsets. Row 2^20 + 5 starts at element 2^32 + 5 * 4096: in int32 the
    offset wraps to 5 * 4096, so the int32 kernel silently returns row 5. Rows 2^19 + 3 (offset
    in [2^31, 2^32): negative in int32) are not read: that would fault, not return."""
    nrows = 2**20 + 8
    x = torch.empty(nrows, width, dtype=torch.bfloat16, device=device)
    # Row r holds the value r mod 251 in every column (exact in bf16): rows are identifiable.
    x.copy_(
        (torch.arange(nrows, device=device) % 251).to(torch.bfloat16)[:, None].expand(nrows, width)
    )
    rows = torch.tensor([0, 5, 2**19 - 1, 2**20 + 5, nrows - 1], dtype=torch.int32, device=device)
    result = {
        "elements": x.numel(),
        "rows": rows.tolist(),
        "row_offsets": [r * width for r in rows.tolist()],
    }
    for int64 in (False, True):
        out = torch.empty(rows.numel(), width, dtype=x.dtype, device=device)
        _gather_rows[(rows.numel(),)](x, out, rows, width, WIDTH=width, INT64_OFFSETS=int64)
        got = out[:, 0].float().tolist()
        result["int64" if int64 else "int32"] = {
            "values_read": got,
            "expected": [float(r % 251) for r in rows.tolist()],
            "correct": [g == float(r % 251) for g, r in zip(got, rows.tolist())],
        }
    del x
    torch.cuda.empty_cache()
    return result


# ------------------------------------------------------------------ notebook tables

PRIOR_REPORT_US = {
    1024: 10.9,
    2048: 61.7,
    4096: 337.1,
    16384: 11746.0,
    32768: None,
}  # None: failed to compile


def status(row: dict) -> str:
    """How a sweep point ended, in words, for tables."""
    if "timing" in row:
        return "ok"
    if row.get("error") == "out of memory" or row.get("skipped") == "failed at a smaller S":
        return "out of memory"
    return "skipped (too slow)" if "skipped" in row else row.get("error", "?")


def sweep_table(rows: list[dict], causal: bool, impls) -> list[dict]:
    """One line per S: each implementation's time (ms) and TFLOP/s, or its status."""
    out = []
    for seqlen in sorted({r["S"] for r in rows}):
        line = {"S": seqlen}
        for impl in impls:
            r = next(
                (
                    r
                    for r in rows
                    if r["S"] == seqlen and r["impl"] == impl and r["causal"] == causal
                ),
                None,
            )
            if r is None:
                line[impl] = "-"
            elif "timing" in r:
                line[impl] = f"{r['timing']['median_ms']:.3f} ms / {r['tflops']:.0f}"
            else:
                line[impl] = status(r)
        out.append(line)
    return out


def tflops_at(rows: list[dict], impl: str, causal: bool, seqlen: int) -> float | None:
    r = next(
        (
            r
            for r in rows
            if r["S"] == seqlen and r["impl"] == impl and r["causal"] == causal and "tflops" in r
        ),
        None,
    )
    return r["tflops"] if r else None


# ------------------------------------------------------------------ notebook figures
# Notebook 05's figures and tables, drawn from the record alone.

IMPLS = ["flashcore", "sdpa_flash", "sdpa_cudnn", "sdpa_math"]


def plot_time_vs_seqlen(rows: list[dict], impls=IMPLS):
    """Time per call against S, log-log, causal and not, each implementation's fitted slope
    in its label, and an S^2 guide."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for causal, ax in zip((False, True), axes):
        for impl in impls:
            pts = [
                (r["S"], r["timing"]["median_ms"])
                for r in rows
                if r["impl"] == impl and r["causal"] == causal and "timing" in r
            ]
            slope = loglog_slope(rows, impl, causal)
            ax.plot(*zip(*pts), "o-", ms=3, label=f"{impl} (slope {slope:.2f})" if slope else impl)
        s_ref = np.array([8192, 2**20])
        ax.plot(s_ref, 0.3 * (s_ref / 8192) ** 2, "k:", lw=0.8, label="S^2")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="S (tokens)",
            title=f"{'causal' if causal else 'non-causal'}, B=1 H=8 D=128 bf16",
        )
    axes[0].set_ylabel("time per call (ms, median)")
    axes[0].legend(fontsize=8)
    return fig


def plot_tflops_vs_seqlen(rows: list[dict], impls=IMPLS[:3]):
    """TFLOP/s against S, causal and not: flat is the goal."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    for impl in impls:
        for causal, style in ((False, "o-"), (True, "s--")):
            pts = [
                (r["S"], r["tflops"])
                for r in rows
                if r["impl"] == impl and r["causal"] == causal and "tflops" in r
            ]
            ax.plot(*zip(*pts), style, ms=3, label=f"{impl}{' causal' if causal else ''}")
    ax.set(
        xscale="log",
        xlabel="S (tokens)",
        ylabel="TFLOP/s",
        title="efficiency vs S (flat is the goal)",
    )
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_memory(rows: list[dict], impls=IMPLS):
    """Peak memory a call allocates beyond its inputs and output, against S (non-causal)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    for impl, style in zip(impls, ("o-", "s:", "^--", "v-")):
        pts = [
            (r["S"], r["extra_bytes"] / 2**20)
            for r in rows
            if r["impl"] == impl and not r["causal"] and "extra_bytes" in r
        ]
        ax.plot(*zip(*pts), style, ms=4, lw=2 if impl == "flashcore" else 1, label=impl)
    ax.set(
        xscale="log",
        yscale="symlog",
        xlabel="S (tokens)",
        ylabel="extra MiB (symlog)",
        title="memory beyond inputs + output, non-causal",
    )
    ax.set_ylim(bottom=-0.1)
    ax.legend(fontsize=8)
    return fig


def window_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the sliding-window points, flashcore's full causal points) of a sweep, timed ones."""
    win = [r for r in rows if r["impl"].startswith("flashcore_window") and "timing" in r]
    full = [r for r in rows if r["impl"] == "flashcore" and r["causal"] and "timing" in r]
    return win, full


def plot_window(rows: list[dict]):
    """Time against S of the sliding window beside full causal attention."""
    import matplotlib.pyplot as plt

    win, full = window_rows(rows)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot(
        [r["S"] for r in full], [r["timing"]["median_ms"] for r in full], "o-", label="causal, full"
    )
    ax.plot(
        [r["S"] for r in win],
        [r["timing"]["median_ms"] for r in win],
        "s-",
        label=win[0]["impl"].replace("flashcore_", "causal, "),
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="S (tokens)",
        ylabel="ms",
        title="sliding window: linear in S",
    )
    ax.legend()
    return fig


def prior_report_table(rows: list[dict]) -> list[dict]:
    """The prior report's times per S beside flashcore's (µs per call, causal and not)."""
    out = []
    for seqlen, prior_us in PRIOR_REPORT_US.items():
        line = {
            "S": seqlen,
            "prior_us": "compile failure" if prior_us is None else f"{prior_us:.1f}",
        }
        for causal in (False, True):
            r = next(
                (
                    r
                    for r in rows
                    if r["S"] == seqlen
                    and r["impl"] == "flashcore"
                    and r["causal"] == causal
                    and "timing" in r
                ),
                None,
            )
            line["flashcore_causal" if causal else "flashcore"] = (
                f"{1e3 * r['timing']['median_ms']:.1f}" if r else "not measured"
            )
        out.append(line)
    return out


def decode_table(rows: list[dict]) -> list[dict]:
    """One line per cache length of a record's decode rows: GB of K and V, each
    implementation's graph-replay time and bandwidth (or its error), and ``diff``, the
    largest difference of a peer's output from flashcore's."""
    from .bench import kv_bytes

    lines = []
    for n in sorted({r["Sk"] for r in rows}):
        line = {"cache_tokens": n, "GB": kv_bytes(next(r for r in rows if r["Sk"] == n)) / 1e9}
        for r in (r for r in rows if r["Sk"] == n):
            if "graph_timing" in r:
                ms = r["graph_timing"]["median_ms"]
                line[r["impl"]] = f"{1e3 * ms:.0f} us / {kv_bytes(r) / ms / 1e9:.2f} TB/s"
            else:
                line[r["impl"]] = r.get("error", "-")
            if "max_abs_diff_vs_first" in r:
                line["diff"] = max(line.get("diff", 0.0), r["max_abs_diff_vs_first"])
        lines.append(line)
    return lines
