"""On a CUDA GPU: find which part of the kernels' own D_v != D mode (HEAD_DIM_V) fails. Its
H100 grid of 2026-11-25 found wrong outputs and illegal memory accesses; compiled launches
now route such calls around it (zero-padded operands, kernels/_launch.py), and this tool
switches that route off to run the mode itself.

    python3 tools/dv_gpu_diagnose.py OUT.json [--sanitize]

Each case runs in a process of its own (an illegal memory access poisons the CUDA context
of the process it happens in, and every later case there would fail with it), with
CUDA_LAUNCH_BLOCKING=1 so an error is reported at the launch that caused it. A case calls
the kernel layer directly (``forward.launch_forward``, ``backward.attention_backward``),
below the public API's refusal, into NaN-poisoned buffers, and checks the output under the
error rule and the gradients under the gradient rule, against the float64 reference.

The cases: the failing one (D 40 / D_v 24, fp16, causal top-left, Sq 113 > Sk 33, softcap 5)
and variants that change one thing each (D_v = D; no softcap; unpadded D or D_v; Sq = Sk;
one query tile), then tests/test_value_head_dim.py's dense grid. A variant that fails with
D_v = D, too, points at a path the GPU grids never ran (softcap with a padded head dim or
Sq != Sk) rather than at D_v. ``--sanitize`` also runs every failing case under
compute-sanitizer's memcheck. Prints a line per case and writes OUT.json with provenance.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's flashcore

# (name, B, Hq, Hkv, Sq, Sk, D, D_v, dtype, causal, alignment, window, softcap)
FAILING = ("failing", 1, 4, 1, 113, 33, 40, 24, "float16", True, "top_left", None, 5.0)
VARIANTS = [
    FAILING,
    ("D_v = D (40)", 1, 4, 1, 113, 33, 40, 40, "float16", True, "top_left", None, 5.0),
    ("no softcap", 1, 4, 1, 113, 33, 40, 24, "float16", True, "top_left", None, None),
    ("D_v = D, no softcap", 1, 4, 1, 113, 33, 40, 40, "float16", True, "top_left", None, None),
    ("D 64 (unpadded)", 1, 4, 1, 113, 33, 64, 24, "float16", True, "top_left", None, 5.0),
    ("D_v 32 (unpadded)", 1, 4, 1, 113, 33, 40, 32, "float16", True, "top_left", None, 5.0),
    ("Sq = Sk = 33", 1, 4, 1, 33, 33, 40, 24, "float16", True, "top_left", None, 5.0),
    ("Sq 64 (one query tile)", 1, 4, 1, 64, 33, 40, 24, "float16", True, "top_left", None, 5.0),
    ("not causal", 1, 4, 1, 113, 33, 40, 24, "float16", False, "top_left", None, 5.0),
    ("bfloat16", 1, 4, 1, 113, 33, 40, 24, "bfloat16", True, "top_left", None, 5.0),
]


# The runs tools/dv_offline/REPORT.md asks for (its hypothesis: V placed in K's shared-memory
# slot when neither is pipelined). A 14th element holds options: "variant" ("hoist_v": V loaded
# before q k^T, tools/dv_offline/forward_hoist_v.patch), "config" (the launch config),
# "forward_only", "repeat" (the forward run twice into fresh buffers and compared bitwise: a
# race shows as a difference), "strides16" (q/k/v as slices of tensors whose rows are padded to
# a multiple of 16 elements, so pipelining can turn on).
_STAGES = lambda n: dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=n)  # noqa: E731
_NO_CAP = FAILING[:12] + (None,)
_TWICE = {"forward_only": True, "repeat": True}
ROOT_CAUSE = [
    ("forward alone, twice (no softcap)",) + _NO_CAP[1:] + (_TWICE,),
    ("forward alone, twice",) + FAILING[1:] + (_TWICE,),
    ("V hoisted",) + FAILING[1:] + ({"variant": "hoist_v"},),
    ("V hoisted, no softcap",) + _NO_CAP[1:] + ({"variant": "hoist_v"},),
    ("row strides multiples of 16",) + FAILING[1:] + ({"strides16": True},),
    ("D_v 32 (V pipelined)", 1, 4, 1, 113, 33, 40, 32, "float16", True, "top_left", None, 5.0),
    ("control: D 64 / D_v 24, 1 stage", 1, 4, 1, 113, 33, 64, 24, "float16", True, "top_left",
     None, 5.0, {"config": _STAGES(1)}),
    ("control's pair: D 64 / D_v 24, 3 stages", 1, 4, 1, 113, 33, 64, 24, "float16", True,
     "top_left", None, 5.0, {"config": _STAGES(3)}),
]  # fmt: skip


def _grid_cases():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_value_head_dim import DENSE_CPU

    return [(f"grid {i}", *case) for i, case in enumerate(DENSE_CPU)]


def run_one(case) -> dict:
    """One case, in this process: forward, then backward, each under its rule."""
    import torch

    from flashcore.kernels import _launch
    from flashcore.kernels import forward as fwd

    _launch.PAD_VALUE_HEAD_DIM_ON.clear()  # the HEAD_DIM_V mode itself, not the padded route
    from flashcore.kernels._softmax import lse_dtype
    from flashcore.kernels.backward import attention_backward
    from flashcore.reference import attention_reference
    from flashcore.validate import error_rule
    from flashcore.validate_backward_softcap_varlen import softcap_rule

    _, b, hq, hkv, sq, sk, d, dv, dtype, causal, align, window, softcap = case[:13]
    extra = case[13] if len(case) > 13 else {}
    if extra.get("variant") == "hoist_v":
        sys.path.insert(0, str(ROOT / "tools" / "dv_offline"))
        import hoist_v

        fwd = hoist_v.load()
    dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1234)

    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: under TRITON_INTERPRET=1

    def randn(*shape):
        if extra.get("strides16"):  # a slice of rows padded to a multiple of 16 elements
            wide = torch.randn((*shape[:-1], -(-shape[-1] // 16) * 16), generator=gen)
            return wide.to(device, dtype)[..., : shape[-1]]
        return torch.randn(shape, generator=gen).to(device, dtype)

    q, k, v, do = (
        randn(b, hq, sq, d),
        randn(b, hkv, sk, d),
        randn(b, hkv, sk, dv),
        randn(b, hq, sq, dv),
    )
    opts = dict(causal=causal, causal_alignment=align, window=window, softcap=softcap)
    row = {"case": case}

    def forward():
        out = torch.full((b, hq, sq, dv), float("nan"), dtype=dtype, device=device)
        lse = torch.full((b, hq, sq), float("nan"), dtype=lse_dtype(dtype), device=device)
        fwd.launch_forward(
            q, k, v, out, lse, seqs=None, max_seqlen_q=None, causal=causal,
            bottom_right=align == "bottom_right", window=window, softcap=softcap, scale=None,
            return_lse=True, config=extra.get("config"), key=None,
        )  # fmt: skip
        if device == "cuda":
            torch.cuda.synchronize()
        return out, lse

    out, lse = forward()
    if extra.get("repeat"):
        again, _ = forward()
        row["forward_repeat_bitwise_identical"] = bool(torch.equal(out, again))
    ref = attention_reference(q, k, v, **opts)
    same = attention_reference(q, k, v, compute_dtype=dtype, **opts)
    report = error_rule(out, ref, same)
    bad_rows = ((out.double() - ref).abs().amax(-1) > report.bound).nonzero().tolist()
    row["forward"] = {
        "passed": report.passed,
        "ratio": report.ratio,
        "nan_mismatch": report.nan_mismatch,
        "bad_rows (b, h, row)": bad_rows[:16],
        "bad_row_count": len(bad_rows),
    }
    if extra.get("forward_only"):
        row["passed"] = report.passed and row.get("forward_repeat_bitwise_identical", True)
        return row
    grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
    attention_backward(do, q, k, v, out, lse, dq=grads[0], dk=grads[1], dv=grads[2], **opts)
    if device == "cuda":
        torch.cuda.synchronize()
    reports = softcap_rule(grads, q, k, v, do, **opts)
    row["backward"] = {name: {"passed": r.passed, "ratio": r.ratio} for name, r in reports.items()}
    row["passed"] = report.passed and all(r.passed for r in reports.values())
    return row


def _run_isolated(case, sanitize: bool) -> dict:
    command = [sys.executable, __file__, "--one", json.dumps(case)]
    if sanitize:
        command = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "8"] + command
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stdout + done.stderr)[-3000:]
    return {"case": case, "passed": False, "error": tail, "returncode": done.returncode}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="OUT.json")
    parser.add_argument("--one", help="run one case (JSON) in this process and print its row")
    parser.add_argument("--sanitize", action="store_true", help="memcheck every failing case")
    parser.add_argument("--variants-only", action="store_true", help="skip the dense grid")
    parser.add_argument(
        "--root-cause",
        action="store_true",
        help="only the runs tools/dv_offline/REPORT.md asks for (ROOT_CAUSE)",
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    from flashcore.results import provenance

    rows = []
    cases = VARIANTS + ([] if args.variants_only else _grid_cases())
    for case in ROOT_CAUSE if args.root_cause else cases:
        row = _run_isolated(list(case), sanitize=False)
        if args.sanitize and not row["passed"]:
            row["memcheck"] = _run_isolated(list(case), sanitize=True).get("error", "clean")
        rows.append(row)
        what = row.get("error", "").strip().splitlines()[-1:] or [
            f"forward ratio {row['forward']['ratio']:.3g} ({row['forward']['bad_row_count']} "
            "rows over the bound)"
            + (
                f"; repeat bitwise identical: {row['forward_repeat_bitwise_identical']}"
                if "forward_repeat_bitwise_identical" in row
                else ""
            )
            + "; backward "
            + (
                ", ".join(f"{g} {r['ratio']:.3g}" for g, r in row.get("backward", {}).items())
                or "not run"
            )
        ]
        print(f"{'PASS' if row['passed'] else 'FAIL'} {case[0]} {case[1:]}: {what[0]}", flush=True)
    if args.out:
        payload = {"provenance": provenance(), "tool": "tools/dv_gpu_diagnose.py", "cases": rows}
        Path(args.out).write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
