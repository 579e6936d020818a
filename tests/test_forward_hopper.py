"""The Gluon Hopper forward kernel (flashcore/kernels/forward_hopper.py) against the float64
reference under the error rule: fresh random inputs, NaN-poisoned outputs, ragged tails,
Sq != Sk, both causal alignments, GQA, (B, S, H, D) strides, lse, every schedule
(ping-pong off, and on with its turn passed by an mbarrier or a named barrier). Needs a
Hopper GPU; the CPU suite only checks the import guard."""

import math

import pytest
import torch
from conftest import HAS_HOPPER

from flashcore.kernels import forward_hopper as fh
from flashcore.kernels._softmax import LOG2E
from flashcore.reference import attention_reference, causal_offset
from flashcore.validate import error_rule

needs_hopper = pytest.mark.skipif(
    not (HAS_HOPPER and fh.GLUON_AVAILABLE), reason="needs a Hopper GPU and triton with Gluon"
)


def test_import_guard_never_breaks_flashcore():
    import flashcore  # noqa: F401  (must import whatever triton is installed)

    assert isinstance(fh.GLUON_AVAILABLE, bool)
    q = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
    assert not fh.supports(q, q, q)  # CPU tensors never take the Gluon path


def _inputs(b, hq, hkv, sq, sk, d, dtype, layout, seed, dv=None):
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def rand(h, s, width=d):
        if layout == "bshd":
            return torch.randn(b, s, h, width, generator=gen).to("cuda", dtype).transpose(1, 2)
        return torch.randn(b, h, s, width, generator=gen).to("cuda", dtype)

    return rand(hq, sq), rand(hkv, sk), rand(hkv, sk, dv or d)


def _run(q, k, v, *, causal, alignment, pingpong, lse=True, num_wg=None, sinks=None, **grid):
    sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
    out = torch.full((*q.shape[:3], v.shape[3]), float("nan"), dtype=q.dtype, device="cuda")
    lse_t = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device="cuda")
    off = causal_offset(sq, sk, alignment) if causal else 0
    fh.attention_hopper(
        q,
        k,
        v,
        out,
        lse_t,
        causal_offset=off,
        is_causal=causal,
        qk_scale=LOG2E / math.sqrt(d),
        store_lse=lse,
        pingpong=pingpong,
        num_wg=num_wg,
        sinks=sinks,
        **grid,
    )
    return out, lse_t


CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, causal, alignment, layout)
    (1, 2, 2, 1, 1, 64, False, "top_left", "bhsd"),
    (2, 3, 3, 17, 17, 128, True, "top_left", "bhsd"),
    (1, 4, 2, 113, 239, 64, True, "bottom_right", "bhsd"),
    (1, 4, 2, 239, 113, 128, True, "bottom_right", "bhsd"),  # first rows see no key
    (1, 2, 1, 1023, 1023, 256, True, "top_left", "bhsd"),
    (1, 8, 1, 2049, 2049, 128, False, "top_left", "bshd"),
    (2, 2, 2, 2049, 1023, 256, False, "top_left", "bshd"),
    (1, 7, 1, 65, 2049, 64, True, "bottom_right", "bshd"),
    (1, 2, 2, 1024, 4096, 128, True, "top_left", "bhsd"),
    (1, 2, 2, 3000, 3000, 64, True, "top_left", "bhsd"),
]


# Schedules: ping-pong off; on, its turn an mbarrier (1) or a hardware named barrier (2).
TURNS = [False, 1, 2]

# Grids: one program per work tile; persistent (one per SM); persistent with 3 programs, so
# each walks many work tiles of different lengths (ring positions and barrier phases carried
# across tiles, the next Q loaded while the last tile finishes).
GRIDS = {
    "per-tile": dict(persistent=False),
    "persistent": dict(persistent=True),
    "3-programs": dict(persistent=True, max_programs=3),
}


def _every_case_dtype_schedule_and_grid(test):
    """Parametrize a GPU test over CASES x bf16/fp16 x schedules x GRIDS (Hopper only)."""
    marks = (
        pytest.mark.parametrize(
            "case", CASES, ids=lambda c: "B{}H{}/{}Sq{}Sk{}D{}{}-{}-{}".format(*c)
        ),
        pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16]),
        pytest.mark.parametrize("pingpong", TURNS),
        pytest.mark.parametrize("grid", list(GRIDS)),
        pytest.mark.gpu,
        needs_hopper,
    )
    for mark in marks:  # innermost first, as stacked decorators apply
        test = mark(test)
    return test


@_every_case_dtype_schedule_and_grid
def test_error_rule(case, dtype, pingpong, grid):
    b, hq, hkv, sq, sk, d, causal, alignment, layout = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, dtype, layout, seed=CASES.index(case))
    out, lse = _run(q, k, v, causal=causal, alignment=alignment, pingpong=pingpong, **GRIDS[grid])
    _check_out_and_lse(out, lse, q, k, v, causal=causal, causal_alignment=alignment)


def _check_out_and_lse(out, lse, q, k, v, **kw):
    """out under the error rule against float64 (baseline: the same math in q's dtype); lse
    within 1e-4 of float64's, -inf exactly where a row sees no key."""
    ref64, lse64 = attention_reference(q, k, v, compute_dtype=torch.float64, return_lse=True, **kw)
    same = attention_reference(q, k, v, compute_dtype=q.dtype, **kw)
    report = error_rule(out, ref64, same)
    assert report.passed, report
    seen = torch.isfinite(lse64)
    assert torch.equal(torch.isneginf(lse), ~seen)  # rows with no key: -inf, not NaN
    assert torch.allclose(lse[seen].double(), lse64[seen], rtol=0, atol=1e-4)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("turns", [1, 2])
@pytest.mark.parametrize("grid", ["per-tile", "3-programs"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_many_work_tiles_per_program(d, causal, grid, turns):
    """More work tiles than SMs (B=3, H=50, 3 query tiles each: 450), causal lengths that
    differ per tile, GQA 5:1, lse: every program's later tiles must be as exact as its first
    (and the ping-pong turn passed right through all of them)."""
    q, k, v = _inputs(3, 50, 10, 300, 300, d, torch.bfloat16, "bhsd", seed=d + causal)
    out, lse = _run(q, k, v, causal=causal, alignment="top_left", pingpong=turns, **GRIDS[grid])
    kw = dict(causal=causal, causal_alignment="top_left")
    ref64, lse64 = attention_reference(q, k, v, compute_dtype=torch.float64, return_lse=True, **kw)
    same = attention_reference(q, k, v, compute_dtype=torch.bfloat16, **kw)
    report = error_rule(out, ref64, same)
    assert report.passed, report
    assert torch.allclose(lse.double(), lse64, rtol=0, atol=1e-4)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("turns", [1, 2])
@pytest.mark.parametrize("num_wg", [2, 3])
@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c[5] in (64, 128)][:6],
    ids=lambda c: "B{}H{}/{}Sq{}Sk{}D{}{}-{}-{}".format(*c),
)
def test_error_rule_consumer_count(case, num_wg, turns):
    """Two or three consumer warpgroups (128- or 192-row query tiles), bf16, ping-pong with
    either turn (three warpgroups pass it around a ring of three)."""
    b, hq, hkv, sq, sk, d, causal, alignment, layout = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, torch.bfloat16, layout, seed=100 + CASES.index(case))
    out, _ = _run(q, k, v, causal=causal, alignment=alignment, pingpong=turns, num_wg=num_wg)
    kw = dict(causal=causal, causal_alignment=alignment)
    ref64 = attention_reference(q, k, v, compute_dtype=torch.float64, **kw)
    same = attention_reference(q, k, v, compute_dtype=torch.bfloat16, **kw)
    report = error_rule(out, ref64, same)
    assert report.passed, report


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("grid", list(GRIDS))
def test_bitwise_deterministic(grid):
    q, k, v = _inputs(2, 4, 2, 2049, 2049, 128, torch.bfloat16, "bhsd", seed=7)
    first, _ = _run(q, k, v, causal=True, alignment="top_left", pingpong=True, **GRIDS[grid])
    for _ in range(4):
        again, _ = _run(q, k, v, causal=True, alignment="top_left", pingpong=True, **GRIDS[grid])
        assert torch.equal(first, again)
    # The grid only decides which program computes a tile, never how: bitwise the same.
    other, _ = _run(q, k, v, causal=True, alignment="top_left", pingpong=True, persistent=False)
    assert torch.equal(first, other)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("grid", ["persistent", "3-programs"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}H{}/{}Sq{}Sk{}D{}{}-{}-{}".format(*c))
def test_sinks_error_rule(case, dtype, grid):
    """Learnable sinks (gpt-oss) on the Gluon kernel: out and lse against the float64
    reference, rows that see no key included (zeros, lse = the sink). The sinks carry most
    of each row's mass, so the same call without them fails this reference."""
    b, hq, hkv, sq, sk, d, causal, alignment, layout = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, dtype, layout, seed=200 + CASES.index(case))
    gen = torch.Generator().manual_seed(300 + CASES.index(case))
    # log(Sk) + 2..4: the sink outweighs the keys' sum (about 1.6 Sk at these scores)
    sinks = (torch.rand(hq, generator=gen) * 2 + 2 + math.log(sk)).to("cuda")
    kw = dict(causal=causal, causal_alignment=alignment)
    out, lse = _run(q, k, v, alignment=alignment, causal=causal, pingpong=True, sinks=sinks,
                    **GRIDS[grid])  # fmt: skip
    ref64, lse64 = attention_reference(
        q, k, v, compute_dtype=torch.float64, return_lse=True, sinks=sinks, **kw
    )
    same = attention_reference(q, k, v, compute_dtype=dtype, sinks=sinks, **kw)
    report = error_rule(out, ref64, same)
    assert report.passed, report
    assert torch.allclose(lse.double(), lse64, rtol=0, atol=1e-4)
    plain, _ = _run(q, k, v, alignment=alignment, causal=causal, pingpong=True, **GRIDS[grid])
    assert not error_rule(plain, ref64, same).passed


@_every_case_dtype_schedule_and_grid
def test_mla_head_dims_error_rule(case, dtype, pingpong, grid):
    """DeepSeek-V3's MLA pair on the Gluon kernel: q/k 192 wide (loaded as 128 + 64 columns,
    Q K^T as two wgmma groups), v and the output 128, every geometry of CASES; out and lse
    against the float64 reference. The tail's columns carry a third of every score, so a
    kernel that dropped or misplaced them fails this reference."""
    b, hq, hkv, sq, sk, _, causal, alignment, layout = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, 192, dtype, layout, seed=400 + CASES.index(case), dv=128)
    out, lse = _run(q, k, v, causal=causal, alignment=alignment, pingpong=pingpong, **GRIDS[grid])
    assert out.shape == (*q.shape[:3], 128)
    _check_out_and_lse(out, lse, q, k, v, causal=causal, causal_alignment=alignment)


@pytest.mark.skipif(not fh.GLUON_AVAILABLE, reason="needs triton with Gluon")
def test_mla_head_dims_load_through_two_descriptors():
    """(CPU: descriptors only.) q/k 192 wide: a 128-column descriptor and a 64-column tail
    descriptor of the same tensor, V's 128 wide; a head dim of one power of two has no tail
    and passes no tail descriptor (its kernel compiles as before)."""
    q = torch.empty(1, 2, 256, 192, dtype=torch.bfloat16)
    v = torch.empty(1, 2, 256, 128, dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 256)
    opts = dict(causal_offset=0, is_causal=True, qk_scale=0.1, store_lse=True, max_programs=4)
    _, args, kw = fh._launch_args(q, q, v, v.clone(), lse, **opts)
    assert [list(d.block_shape) for d in args[:3]] == [[1, 1, 64, 128], [1, 1, 128, 128],
                                                       [1, 1, 128, 128]]  # fmt: skip
    assert kw["QK_TAIL"] == 64 and kw["HEAD_DIM"] == 192 and kw["HEAD_DIM_V"] == 128
    assert list(kw["q_tail_desc"].block_shape) == [1, 1, 64, 64]
    assert list(kw["k_tail_desc"].block_shape) == [1, 1, 128, 64]
    assert kw["q_tail_desc"].base is q and kw["k_tail_desc"].base is q
    _, _, kw128 = fh._launch_args(v, v, v, v.clone(), lse, **opts)
    assert "QK_TAIL" not in kw128 and "q_tail_desc" not in kw128 and kw128["HEAD_DIM_V"] == 0


@pytest.mark.skipif(not fh.GLUON_AVAILABLE, reason="needs triton with Gluon")
def test_output_tile_store_by_copy_engine_where_the_table_and_strides_allow():
    """(CPU: descriptors only.) O_TMA (the output tile stored from shared memory by the copy
    engine) at the head dims of O_TMA_FOR, with a descriptor over out itself in the
    warpgroup's 64 x D_v blocks; pointer stores for D256 (no shared memory left for the tile)
    and for an out whose strides a TMA descriptor cannot take."""
    lse = torch.empty(1, 2, 256)
    opts = dict(causal_offset=0, is_causal=False, qk_scale=0.1, store_lse=True, max_programs=4)
    for d in (64, 128, 256):
        q = torch.empty(1, 2, 256, d, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        _, _, kw = fh._launch_args(q, q, q, out, lse, **opts)
        assert kw.get("O_TMA", False) == bool(fh.O_TMA_FOR.get(d)) == (d != 256)
        if d != 256:
            assert kw["o_desc"].base is out and list(kw["o_desc"].block_shape) == [1, 1, 64, d]
        # rows 2 * (d + 4) bytes apart: no multiple of 16, so no descriptor
        odd = torch.empty(1, 2, 256, d + 4, dtype=torch.bfloat16)[..., :d]
        _, _, kw = fh._launch_args(q, q, q, odd, lse, **opts)
        assert "O_TMA" not in kw and "o_desc" not in kw


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("out_layout", ["bhsd", "bshd", "padded_rows", "odd_rows"])
def test_output_store_paths_error_rule(d, causal, out_layout):
    """Both output stores against the float64 reference, on ragged lengths: the copy engine's
    (contiguous out, a (B, S, H, D) view, and rows [0, Sq) of a longer buffer, whose rows past
    Sq the last tile's copy must drop) and the pointer stores (rows a non-multiple of 16 bytes
    apart). Nothing outside out's elements is written: the padding keeps its NaN."""
    q, k, v = _inputs(1, 4, 2, 333, 270, d, torch.bfloat16, "bhsd", seed=700 + d + causal)
    nan = dict(dtype=q.dtype, device="cuda")
    if out_layout == "bhsd":
        base = out = torch.full((*q.shape[:3], d), float("nan"), **nan)
        padding = base[..., :0]
    elif out_layout == "bshd":
        base = torch.full((1, 333, 4, d), float("nan"), **nan)
        out, padding = base.permute(0, 2, 1, 3), base[..., :0]
    elif out_layout == "padded_rows":  # 333 rows of 384: the last 64-row tile crosses Sq
        base = torch.full((1, 4, 384, d), float("nan"), **nan)
        out, padding = base[:, :, :333], base[:, :, 333:]
    else:
        base = torch.full((*q.shape[:3], d + 4), float("nan"), **nan)
        out, padding = base[..., :d], base[..., d:]
    lse = torch.full(q.shape[:3], float("nan"), dtype=torch.float32, device="cuda")
    off = causal_offset(333, 270, "bottom_right") if causal else 0
    opts = dict(causal_offset=off, is_causal=causal, qk_scale=LOG2E / math.sqrt(d), store_lse=True)
    _, _, kw = fh._launch_args(q, k, v, out, lse, **opts)
    assert kw.get("O_TMA", False) == (out_layout != "odd_rows")
    fh.attention_hopper(q, k, v, out, lse, **opts)
    _check_out_and_lse(out, lse, q, k, v, causal=causal, causal_alignment="bottom_right")
    assert torch.isnan(padding).all()


@needs_hopper
@pytest.mark.gpu
def test_supports_routes_the_rest():
    q = torch.randn(1, 2, 64, 128, device="cuda", dtype=torch.bfloat16)
    assert fh.supports(q, q, q)
    assert not fh.supports(q.float(), q.float(), q.float())
    assert not fh.supports(q, q, q, window=16)
    q96 = torch.randn(1, 2, 64, 96, device="cuda", dtype=torch.bfloat16)
    assert not fh.supports(q96, q96, q96)
    q192 = torch.randn(1, 2, 64, 192, device="cuda", dtype=torch.bfloat16)
    assert fh.supports(q192, q192, q)  # MLA: 192 for q.k, 128 for v
    assert not fh.supports(q192, q192, q192)  # 192 for v: no tile config fits
    assert not fh.supports(q, q, q96[..., :64])  # other pairs: Triton
    strided = torch.randn(1, 2, 64, 256, device="cuda", dtype=torch.bfloat16)[..., ::2]
    assert not fh.supports(strided, strided, strided)
    broadcast = torch.randn(1, 1, 64, 128, device="cuda", dtype=torch.bfloat16).expand(
        1, 4, 64, 128
    )
    assert not fh.supports(q, broadcast, broadcast)
