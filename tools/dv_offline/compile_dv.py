"""Offline (no GPU) sm_90 compilation of forward._attn_fwd_kernel exactly as launch_forward
would launch it, for the D != D_v mode and its passing neighbours. Dumps every IR stage.

    python tools/dv_offline/compile_dv.py [OUTDIR [CASE ...]]
    DV_VARIANT=hoist_v python tools/dv_offline/compile_dv.py OUTDIR CASE   # the V-hoist variant

launch_forward is called on CPU tensors with on_interpreter patched to False, and the
kernel's [grid] call is intercepted and its kwargs compiled for sm_90 as Triton's launcher
would specialize them (tools/sm90_compile.py: 16-byte alignment, ints == 1, divisibility by
16).
"""

import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tools"))

import torch  # noqa: E402
from sm90_compile import capture_launches, compile_launch  # noqa: E402

if os.environ.get("DV_VARIANT") == "hoist_v":
    # forward.py with V's load moved above q @ k^T (hoist_v.py builds it from the patch)
    sys.path.insert(0, str(Path(__file__).parent))
    import hoist_v  # noqa: E402

    fwd = hoist_v.load()
else:
    from flashcore.kernels import forward as fwd  # noqa: E402

REAL = fwd._attn_fwd_kernel


def compile_case(
    d,
    dv,
    sq=113,
    sk=33,
    softcap=5.0,
    causal=True,
    dtype=torch.float16,
    b=1,
    hq=4,
    hkv=1,
    overrides=None,
):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, hq, sq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, sk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, sk, dv, generator=g).to(dtype)
    out = torch.empty(b, hq, sq, dv, dtype=dtype)
    lse = torch.empty(b, hq, sq, dtype=torch.float32)
    grids = {}
    kw = capture_launches(
        fwd,
        ["_attn_fwd_kernel"],
        lambda: fwd.launch_forward(
            q,
            k,
            v,
            out,
            lse,
            seqs=None,
            max_seqlen_q=None,
            causal=causal,
            bottom_right=False,
            window=None,
            softcap=softcap,
            scale=None,
            return_lse=True,
            config=None,
            key=None,
        ),
        grids=grids,
        on_interpreter=lambda t: False,
    )["_attn_fwd_kernel"]
    grid = grids["_attn_fwd_kernel"]
    kw.update(overrides or {})
    compiled = compile_launch(REAL, kw)
    meta = {n: v for n, v in kw.items() if not isinstance(v, torch.Tensor)}
    return compiled, grid, meta


CASES = {
    "fail_d40_dv24": dict(d=40, dv=24),
    "fail_d40_dv24_nosoftcap": dict(d=40, dv=24, softcap=None),
    "pass_d64_dv24": dict(d=64, dv=24),
    "pass_d40_dv40": dict(d=40, dv=40),
    "pass_d40_dv32": dict(d=40, dv=32),
    "fail_d24_dv8": dict(d=24, dv=8, sq=20, sk=20, softcap=None, causal=False, hq=2),
    "fail_d192_dv128": dict(d=192, dv=128, sq=17, sk=17, softcap=None, hq=2),
    "fail_d192_dv128_s128": dict(
        d=192, dv=128, sq=128, sk=128, softcap=None, causal=False, b=2, hq=4, hkv=4
    ),
    "pass_d192_dv192": dict(d=192, dv=192, sq=17, sk=17, softcap=None, hq=2),
    "pass_d64_dv32": dict(
        d=64, dv=32, sq=128, sk=128, softcap=None, causal=False, b=2, hq=4, hkv=4
    ),
}

if __name__ == "__main__":
    outdir = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "ir")
    only = sys.argv[2:] or list(CASES)
    for name in only:
        c, grid, meta = compile_case(**CASES[name])
        d = outdir / name
        d.mkdir(parents=True, exist_ok=True)
        for ext in ("ttir", "ttgir", "llir", "ptx"):
            (d / f"kernel.{ext}").write_text(c.asm[ext])
        from flashcore.studies.sass import disassemble

        (d / "kernel.sass").write_text(disassemble(c.asm["cubin"]))
        info = dict(
            grid=grid,
            shared=c.metadata.shared,
            num_warps=c.metadata.num_warps,
            num_stages=c.metadata.num_stages,
            signature=c.src.signature,
            attrs={str(k): v for k, v in c.src.attrs.items()},
            meta={k: v for k, v in meta.items() if k not in ("k_desc", "v_desc")},
        )
        (d / "info.txt").write_text(repr(info))
        print(name, "shared", c.metadata.shared, "grid", grid)
