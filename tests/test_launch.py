"""The cached launch path: its key (CPU unit tests) and that it never serves stale state
(GPU: tensors freed and reallocated at the same address with another shape or strides,
several threads, two streams)."""

import os
import threading

import pytest
import torch
from conftest import HAS_CUDA

from flashcore import interface
from flashcore.kernels import _launch, decode, forward
from flashcore.reference import attention_reference
from flashcore.validate import error_rule


def _key(q, k=None, v=None, out=None, **kw):
    opts = dict(
        causal=True, causal_alignment="top_left", window=None, softcap=None, return_lse=False
    )
    opts.update(kw)
    k = q if k is None else k
    v = q if v is None else v
    return forward._forward_key(
        q,
        k,
        v,
        out,
        None,
        opts["causal"],
        opts["causal_alignment"],
        opts["window"],
        opts["softcap"],
        opts["return_lse"],
        None,
    )


def test_key_separates_shape_stride_dtype_alignment_and_flags():
    base = torch.randn(2, 4, 64, 32)
    key = _key(base)
    assert key == _key(torch.randn(2, 4, 64, 32))  # same signature, other data: same launch
    assert key != _key(torch.randn(2, 4, 63, 32))  # shape
    assert key != _key(base.transpose(1, 2).contiguous().transpose(1, 2))  # strides
    assert key != _key(base.half())  # dtype
    flat = torch.randn(2 * 4 * 64 * 32 + 1)
    misaligned = flat[1:].view(2, 4, 64, 32)  # 4-byte offset: not 16-byte aligned
    assert key != _key(misaligned)
    assert key != _key(base, causal=False)
    assert key != _key(base, causal_alignment="bottom_right")
    assert key != _key(base, window=8) and _key(base, window=8) != _key(base, window=16)
    assert key != _key(base, softcap=30.0)
    assert _key(base, softcap=30.0) == _key(base, softcap=50.0)  # softcap is a runtime scalar
    assert key != _key(base, return_lse=True)
    assert key != _key(base, out=torch.empty(2, 4, 64, 32))
    needs_grad = base.clone().requires_grad_()
    assert key != _key(needs_grad)


@pytest.mark.parametrize("name", ["FLASHCORE_FORWARD_HOPPER", "FLASHCORE_HOPPER_MAX_PROGRAMS"])
def test_key_follows_the_gluon_switches_as_they_change(monkeypatch, name):
    """The key holds both switches' values as os.environ has them at the call: set, changed,
    deleted, set back, each key compares as the switch does."""
    base = torch.randn(2, 4, 64, 32)
    monkeypatch.delenv(name, raising=False)
    unset = _key(base)
    monkeypatch.setenv(name, "always")
    first = _key(base)
    monkeypatch.setenv(name, "never")
    second = _key(base)
    monkeypatch.setenv(name, "always")
    assert len({unset, first, second}) == 3 and _key(base) == first
    monkeypatch.delenv(name)
    assert _key(base) == unset


def test_environ_value_is_os_environ_get(monkeypatch):
    name = "FLASHCORE_TEST_SWITCH"
    value = _launch.environ_value(name)
    monkeypatch.delenv(name, raising=False)
    assert value() is None
    for text in ("1", "always", "", "é"):
        monkeypatch.setenv(name, text)
        assert value() is not None and value() == _launch.environ_value(name)()
        assert os.environ.decodevalue(value()) == os.environ.get(name) == text
    os.environ.update({name: "other"})  # any way os.environ changes
    assert os.environ.decodevalue(value()) == "other"
    # An os.environ of another kind (no _data dict): os.environ.get itself.
    monkeypatch.setattr(os, "environ", {name: "plain"})
    assert value() == "plain"


def test_key_refuses_unusual_argument_types():
    q = torch.randn(1, 1, 4, 16)
    assert (
        _key(q, window=8.0) is None and _key(q, causal=1) is None and _key(q, softcap=-1.0) is None
    )
    assert _key(q, softcap=float("inf")) is None and _key(q, window=[3]) is None


def test_same_address_other_shape_gets_another_key():
    # The caching allocator hands a freed block back for the next request of its size.
    a = torch.empty(2 * 4 * 64 * 32)
    key_a = _key(a.view(2, 4, 64, 32))
    del a
    b = torch.empty(2 * 4 * 64 * 32)
    reshaped = b.view(4, 2, 64, 32)
    assert _key(reshaped) != key_a
    assert _key(b.view(2, 4, 32, 64)) != key_a


def test_direct_launch_off_on_the_interpreter():
    # CPU tensors never use the cached path; the JIT/interpreter call runs each time.
    assert not _launch.usable(torch.device("cpu"))
    assert _launch.direct_kernel(None) is None


def test_versions_stated():
    assert (3, 6) in _launch.SUPPORTED_TRITON


# ------------------------------------------------------------------------------- GPU


def _check(out, q, k, v, **kw):
    ref = attention_reference(q, k, v, **kw)
    same = attention_reference(q, k, v, compute_dtype=q.dtype, **kw)
    report = error_rule(out, ref, same)
    assert report.passed, report


@pytest.mark.gpu
def test_cached_path_is_used_and_correct():
    forward._FORWARD_LAUNCHES.clear()
    q = torch.randn(2, 8, 300, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 300, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 2, 300, 64, device="cuda", dtype=torch.bfloat16)
    first = interface.attention(q, k, v, causal=True)
    assert _launch.ENABLED and len(forward._FORWARD_LAUNCHES) == 1
    hits = forward._FORWARD_LAUNCHES.hits
    again = interface.attention(q, k, v, causal=True)
    assert forward._FORWARD_LAUNCHES.hits == hits + 1
    assert torch.equal(first, again)
    _check(again, q, k, v, causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_freed_and_reallocated_at_the_same_address(d):
    """A block freed and handed back by the caching allocator with another shape, other
    strides or another dtype must launch for the new tensor, not the old one."""
    torch.cuda.synchronize()
    numel = 2 * 8 * 256 * d
    results = []
    for view in [(2, 8, 256, d), (4, 8, 128, d), (2, 16, 128, d), (1, 8, 512, d)]:
        buf = torch.randn(numel, device="cuda", dtype=torch.float16)
        ptr = buf.data_ptr()
        q = buf.view(*view)
        kv = torch.randn(view[0], view[1], view[2], d, device="cuda", dtype=torch.float16)
        for layout in ("contiguous", "transposed"):
            qq = (
                q
                if layout == "contiguous"
                else q.view(view[0], view[2], view[1], d).transpose(1, 2)
            )
            for _ in range(2):  # first call fills the cache, second uses it
                out = interface.attention(qq, kv, kv, causal=True)
                _check(out, qq, kv, kv, causal=True)
        results.append(ptr)
        del buf, q, kv, qq, out
    # The allocator did reuse the address (otherwise this test tests nothing).
    assert len(set(results)) < len(results)


@pytest.mark.gpu
def test_threads_share_the_cache_safely():
    shapes = [(1, 4, 100, 64), (2, 4, 257, 64), (1, 8, 64, 128), (3, 2, 33, 32)]
    data = [
        tuple(torch.randn(*s, device="cuda", dtype=torch.float16) for _ in range(3)) for s in shapes
    ]
    refs = [interface.attention(*t, causal=True) for t in data]
    torch.cuda.synchronize()
    errors = []

    def worker(seed):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for i in range(200):
                    j = (i + seed) % len(data)
                    out = interface.attention(*data[j], causal=True)
                    stream.synchronize()
                    if not torch.equal(out, refs[j]):
                        errors.append((seed, i, j))
        except Exception as err:  # noqa: BLE001
            errors.append(repr(err))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


@pytest.mark.gpu
def test_two_streams_launch_on_their_own_stream():
    """Each call launches on the caller's current stream: work queued on stream A behind a
    long kernel must not be overtaken by a cached launch on the same data on stream B."""
    q = torch.randn(1, 8, 2048, 128, device="cuda", dtype=torch.bfloat16)
    interface.attention(q, q, q, causal=True)  # fill the cache
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    outs = []
    for stream in (s1, s2):
        with torch.cuda.stream(stream):
            src = torch.randn(1, 8, 2048, 128, device="cuda", dtype=torch.bfloat16)
            torch.cuda._sleep(5_000_000)  # the next launch must wait on this stream
            x = src * 1.0
            outs.append((x, interface.attention(x, x, x, causal=True)))
    torch.cuda.synchronize()
    for x, out in outs:
        _check(out, x, x, x, causal=True)


@pytest.mark.gpu
def test_decode_cached_path_matches_reference():
    decode._DECODE_LAUNCHES.clear()
    decode._DECODE_PLANS.clear()
    q = torch.randn(2, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(2, 4, 4096, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(2, 4, 4096, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([4096, 1000], device="cuda", dtype=torch.int32)
    from flashcore.reference import kvcache_reference

    for _ in range(3):
        out = interface.attention_with_kvcache(q, kc, vc, lens, check_lengths=False)
        ref = kvcache_reference(q, kc, vc, lens)
        same = kvcache_reference(q, kc, vc, lens, compute_dtype=torch.bfloat16)
        assert error_rule(out, ref, same).passed
    assert len(decode._DECODE_LAUNCHES) == 1 and decode._DECODE_PLANS.hits >= 2
    # Other lengths (data), same signature: the cached launch reads them from memory.
    lens2 = torch.tensor([7, 4000], device="cuda", dtype=torch.int32)
    out = interface.attention_with_kvcache(q, kc, vc, lens2, check_lengths=False)
    assert error_rule(
        out,
        kvcache_reference(q, kc, vc, lens2),
        kvcache_reference(q, kc, vc, lens2, compute_dtype=torch.bfloat16),
    ).passed


@pytest.mark.skipif(HAS_CUDA, reason="CPU-only check")
def test_cpu_calls_never_fill_the_cache():
    forward._FORWARD_LAUNCHES.clear()
    q = torch.randn(1, 2, 16, 16)
    interface.attention(q, q, q)
    assert len(forward._FORWARD_LAUNCHES) == 0


def test_direct_launch_passes_what_triton_s_own_wrapper_passes(monkeypatch):
    """The direct launch assembles the C launcher's arguments itself (descriptors encoded
    once and reused); it must pass exactly what Triton's own tensor-descriptor wrapper
    (triton.backends.nvidia.driver.wrap_handle_tensordesc, the installed version's) passes.
    A recording launcher and a deterministic encoder stand in for the GPU."""
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    calls = []

    def encode(desc, meta):
        return [
            ("map", desc.base.data_ptr(), tuple(desc.shape), tuple(desc.strides), meta["swizzle"])
        ]

    monkeypatch.setattr(driver, "make_tensordesc_arg", encode)
    signature = {
        "A": "*fp16",
        "kd": "tensordesc<fp16[1, 1, 64, 64]>",
        "n": "i32",
        "vd": "tensordesc<fp16[1, 1, 64, 64]>",
        "B": "constexpr",
    }
    metas = [{"swizzle": 128}, {"swizzle": 64}]
    inner = driver.wrap_handle_tensordesc(lambda *a: calls.append(a), signature, metas)

    class Launcher:  # what CompiledKernel.run is on 3.6: __call__ inserts coop, pdl, scratch
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid, launch_pdl = False, False

        def __init__(self):
            self.launch = inner

        def __call__(self, gx, gy, gz, stream, function, *args):
            self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)

    class Compiled:
        run, function, packed_metadata = Launcher(), 1234, ("meta",)

    monkeypatch.setattr(_launch, "ENABLED", True)
    kernel = _launch.DirectKernel(Compiled(), desc_slots=(1, 3))
    if kernel.raw is None:
        pytest.skip("this triton's launcher is not the one the direct path was written against")
    k, v, a = torch.empty(1, 2, 64, 64), torch.empty(1, 2, 96, 64), torch.empty(8)
    from triton.tools.tensor_descriptor import TensorDescriptor

    real = [
        a,
        TensorDescriptor(k, list(k.shape), list(k.stride()), [1, 1, 64, 64]),
        7,
        TensorDescriptor(v, list(v.shape), list(v.stride()), [1, 1, 64, 64]),
        16,
    ]
    Compiled.run(3, 1, 1, 99, 1234, ("meta",), None, None, None, *real)
    for _ in range(2):  # the second call reuses the encoded descriptors
        kernel(
            (3, 1, 1),
            99,
            [a, None, 7, None, 16],
            ((k, k.shape, k.stride(), (1, 1, 64, 64)), (v, v.shape, v.stride(), (1, 1, 64, 64))),
        )
    assert calls[1] == calls[0] and calls[2] == calls[0]


# ------------------------------------------------- specialization classes (decode keys)


def test_int_class_is_triton_s_specialization():
    """The decode key holds int_class(x) for each int argument instead of x: it must
    separate exactly what Triton's own specialization separates (installed version)."""
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    values = [0, 1, 2, 3, 15, 16, 17, 31, 32, 48, 4096, 8191, 8192, 8193, -1, -16, -17]
    values += [2**31 - 17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 1, 2**31 + 16]
    values += [-(2**31), -(2**31) - 1, -(2**31) - 16, 2**63 - 1, 2**63 - 16, 2**63, 2**64 - 16]
    classes, types = {}, {}
    for x in values:
        spec = native(BaseBackend, x, False, True, True)
        classes.setdefault(_launch.int_class(x), set()).add(spec)
        types.setdefault(_launch.int_type(x), set()).add(native(BaseBackend, x, False, False, True))
    # One Triton specialization per class (no two specializations share a class) ...
    assert all(len(s) == 1 for s in classes.values()), classes
    assert all(len(s) == 1 for s in types.values()), types
    # ... and one class per specialization (no needless misses).
    specs = [next(iter(s)) for s in classes.values()]
    assert len(specs) == len(set(specs))


def test_growing_cache_sizes_share_a_class():
    # Cache lengths 4097..4160 with D 128: every stride is a multiple of 16, so the
    # strides' classes never change while the length does.
    cls = {
        tuple(map(_launch.int_class, torch.empty(2, 8, s, 128, device="meta").stride()))
        for s in range(4097, 4161)
    }
    assert len(cls) == 1


def test_full_cache_decode_matches_the_reference_and_the_lengths_path():
    """attend_full_cache (no lengths tensor: the kernel's UNIFORM mode) against float64 and
    against attention_with_kvcache with every length = Sk, with a window, softcap and a key
    mask; Sq > 1 too (bottom-right)."""
    from flashcore.reference import kvcache_reference

    gen = torch.Generator().manual_seed(11)
    dev = "cuda" if HAS_CUDA else "cpu"
    dtype = torch.bfloat16 if HAS_CUDA else torch.float16
    for b, hq, hkv, sq, sk, d, opts in [
        (2, 8, 2, 1, 200, 64, {}),
        (1, 4, 4, 3, 97, 32, {"window": 40}),
        (3, 6, 2, 2, 130, 64, {"softcap": 20.0}),
        (2, 4, 1, 1, 150, 16, {"mask": True}),
    ]:
        q, kc, vc = (
            torch.randn(*s, generator=gen).to(dtype).to(dev)
            for s in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))
        )
        mask = None
        if opts.pop("mask", False):
            mask = torch.rand(b, sk, generator=gen) > 0.3
            mask[:, -sq:] = True
            mask = mask.to(dev)
        out = decode.attend_full_cache(q, kc, vc, key_padding_mask=mask, num_splits=3, **opts)
        lens = torch.full((b,), sk, dtype=torch.int32, device=dev)
        same = interface.attention_with_kvcache(
            q, kc, vc, lens, key_padding_mask=mask, num_splits=3, **opts
        )
        assert torch.equal(out, same)
        if mask is None:  # the reference has no key mask; the lengths path covers it
            ref = kvcache_reference(q, kc, vc, lens, **opts)
            low = kvcache_reference(q, kc, vc, lens, compute_dtype=dtype, **opts)
            assert error_rule(out, ref, low).passed


def test_full_cache_decode_errors():
    dev = "cuda" if HAS_CUDA else "cpu"
    q = torch.randn(1, 4, 1, 16, device=dev, dtype=torch.float16)
    kc = torch.randn(1, 2, 32, 16, device=dev, dtype=torch.float16)
    decode.attend_full_cache(q, kc, kc)  # a valid call first: errors must not hit its entry
    with pytest.raises(ValueError):
        decode.attend_full_cache(q, kc, kc[:, :, :31])
    with pytest.raises(ValueError):
        mask = torch.ones(1, 31, dtype=torch.bool, device=dev)
        decode.attend_full_cache(q, kc, kc, key_padding_mask=mask)
    with pytest.raises(ValueError):
        decode.attend_full_cache(q[:, :3], kc, kc)
    with pytest.raises(TypeError):
        decode.attend_full_cache(q, kc.float(), kc.float())


def _fake_gpu_launch(monkeypatch, direct_cls, stream):
    """CachedKernel's environment without a GPU: launches enabled, no hooks, device 0, a
    fixed stream, and ``direct_cls()`` as every compiled kernel's direct launcher."""
    monkeypatch.setattr(_launch, "ENABLED", True)
    monkeypatch.setattr(_launch, "_hooks_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_launch, "current_stream", lambda device: stream)
    monkeypatch.setattr(_launch, "direct_kernel", lambda compiled, slots: direct_cls())


def test_cached_kernel_passes_bound_arguments_and_descriptors(monkeypatch):
    """CachedKernel (the generic cached launch, e.g. for the Gluon kernel): the first call
    goes through kernel[grid]; a second call with the same specialization calls the
    compiled kernel directly with the JIT's bound arguments, descriptors encoded once; a
    call with another specialization misses. Fakes stand in for the JIT and the GPU."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    launched, jit_calls = [], []

    class Direct:
        desc_slots = (1,)

        def __call__(self, grid, stream, values, descs):
            launched.append((grid, stream, values, descs))

    def binder(a, desc, n, BLOCK, **options):
        spec = [("*fp32", "D"), ("tensordesc<fp32[16, 16]>", None), ("i32", _launch.int_class(n))]
        spec.append(("constexpr", BLOCK))
        return {"a": a, "desc": desc, "n": n, "BLOCK": BLOCK}, spec, options

    class Kernel:
        debug = False
        device_caches = {0: (None, None, None, None, binder)}

        def __getitem__(self, grid):
            return lambda *a, **kw: jit_calls.append((grid, a, kw)) or "compiled"

    _fake_gpu_launch(monkeypatch, Direct, stream=77)
    cached = _launch.CachedKernel(Kernel())
    a, t = torch.empty(4), torch.empty(32, 16)
    desc = TensorDescriptor(t, [32, 16], [16, 1], [16, 16])
    cached[(2,)](a, desc, 32, BLOCK=16, num_warps=4)
    assert len(jit_calls) == 1 and not launched
    cached[(3, 2)](a, desc, 48, BLOCK=16, num_warps=4)  # 48: same class as 32
    assert len(jit_calls) == 1
    grid, stream, values, descs = launched[0]
    assert grid == (3, 2, 1) and stream == 77 and values == [a, desc, 48, 16]
    assert descs == [(t, (32, 16), (16, 1), (16, 16))]
    cached[(2,)](a, desc, 33, BLOCK=16, num_warps=4)  # another class: the JIT again
    cached[(2,)](a, desc, 32, BLOCK=16, num_warps=8)  # another option: the JIT again
    assert len(jit_calls) == 3 and len(launched) == 1


def test_cached_kernel_caches_the_kernels_first_call_in_the_process(monkeypatch):
    """The JIT creates a kernel's binder on its first call in the process: that call's
    launcher is cached too, so the second call is direct and ``freeze`` finds it (the lean
    Gluon forward relies on this: its first call must leave a launch to remember)."""
    launched, jit_calls = [], []

    class Direct:
        desc_slots = ()

        def __call__(self, grid, stream, values, descs):
            launched.append(values)

    def binder(a, n, **options):
        return {"a": a, "n": n}, [("*fp32", "D"), ("i32", _launch.int_class(n))], options

    class Kernel:
        debug = False
        device_caches = {}

        def __getitem__(self, grid):
            def call(*a, **kw):
                jit_calls.append(a)
                self.device_caches[0] = (None, None, None, None, binder)
                return "compiled"

            return call

    _fake_gpu_launch(monkeypatch, Direct, stream=0)
    cached = _launch.CachedKernel(Kernel())
    a = torch.empty(4)
    assert cached.freeze((1,), (a, 32), {}) is None  # nothing has run
    cached[(1,)](a, 32)
    assert len(jit_calls) == 1 and len(cached.cache) == 1
    assert cached.freeze((1,), (a, 32), {}) is not None
    cached[(1,)](a, 48)
    assert len(jit_calls) == 1 and launched == [[a, 48]]


# ------------------------------------------------------------------- decode on the GPU


def _decode_ok(out, q, kc, vc, lens, **kw):
    from flashcore.reference import kvcache_reference

    ref = kvcache_reference(q, kc, vc, lens, **kw)
    same = kvcache_reference(q, kc, vc, lens, compute_dtype=q.dtype, **kw)
    report = error_rule(out, ref, same)
    assert report.passed, report


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_decode_steps_of_a_growing_cache_reuse_one_entry(d):
    """A transformers-style cache (a new, one token longer tensor every step) hits the
    cache on every step after the first of its class, and every step is correct."""
    decode._DECODE_LAUNCHES.clear()
    decode._DECODE_PLANS.clear()
    gen = torch.Generator(device="cuda").manual_seed(1)
    kc = torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    vc = torch.randn(2, 4, 1000, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    for step in range(40):
        q = torch.randn(2, 16, 1, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.cat([kc, kc[:, :, :1]], 2)[:, :, : 1000 + step].contiguous()
        v = torch.cat([vc, vc[:, :, :1]], 2)[:, :, : 1000 + step].contiguous()
        out = decode.attend_full_cache(q, k, v)
        lens = torch.full((2,), k.shape[2], dtype=torch.int32, device="cuda")
        _decode_ok(out, q, k, v, lens)
    # An entry per split plan class (the split count's padded size changes a constexpr of
    # the combine); every other step is a hit. Exact sizes would give 40 entries.
    entries = len(decode._DECODE_LAUNCHES)
    assert entries <= 3 and decode._DECODE_LAUNCHES.hits == 40 - entries, entries
    assert len(decode._DECODE_PLANS) == 0  # no lengths tensor: planned per call


@pytest.mark.gpu
def test_decode_freed_and_reallocated_at_the_same_address():
    """Same address, other shape or strides: the launch follows the new tensor."""
    torch.cuda.synchronize()
    numel = 2 * 8 * 512 * 64
    ptrs = []
    for view in [(2, 8, 512, 64), (4, 8, 256, 64), (2, 4, 1024, 64), (1, 8, 1024, 64)]:
        buf = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
        ptrs.append(buf.data_ptr())
        b, h, s, d = view
        for layout in ("contiguous", "seq-major"):
            k = buf.view(*view) if layout == "contiguous" else buf.view(b, s, h, d).transpose(1, 2)
            v = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
            q = torch.randn(b, 2 * h, 1, d, device="cuda", dtype=torch.bfloat16)
            lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
            for _ in range(2):
                _decode_ok(decode.attend_full_cache(q, k, v), q, k, v, lens)
                out = interface.attention_with_kvcache(q, k, v, lens, check_lengths=False)
                _decode_ok(out, q, k, v, lens)
        del buf, k, v, q
    assert len(set(ptrs)) < len(ptrs)


@pytest.mark.gpu
def test_decode_threads_and_streams():
    shapes = [(1, 32, 8, 700, 128), (2, 8, 2, 1500, 64), (4, 16, 16, 64, 64), (1, 4, 1, 33, 32)]
    data = []
    for b, hq, hkv, s, d in shapes:
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.float16)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.float16)
        data.append((q, k, v))
    refs = [decode.attend_full_cache(*t) for t in data]
    torch.cuda.synchronize()
    errors = []

    def worker(seed):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for i in range(150):
                    j = (i + seed) % len(data)
                    out = decode.attend_full_cache(*data[j])
                    stream.synchronize()
                    if not torch.equal(out, refs[j]):
                        errors.append((seed, i, j))
        except Exception as err:  # noqa: BLE001
            errors.append(repr(err))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    # Two streams: a cached launch waits for the work queued before it on its own stream.
    q, k, v = data[0]
    outs = []
    for stream in (torch.cuda.Stream(), torch.cuda.Stream()):
        with torch.cuda.stream(stream):
            src = torch.randn_like(k)
            torch.cuda._sleep(5_000_000)
            kk = src * 1.0
            outs.append((kk, decode.attend_full_cache(q, kk, v)))
    torch.cuda.synchronize()
    lens = torch.full((1,), k.shape[2], dtype=torch.int32, device="cuda")
    for kk, out in outs:
        _decode_ok(out, q, kk, v, lens)


@pytest.mark.gpu
def test_cached_kernel_on_the_gluon_forward(monkeypatch):
    """CachedKernel around the Gluon forward kernel (TensorDescriptor arguments): bitwise
    the JIT launch's output on a miss and on hits, for another length of the same class
    and for a block reallocated at the same address with another shape."""
    fh = pytest.importorskip("flashcore.kernels.forward_hopper")
    if not getattr(fh, "GLUON_AVAILABLE", False):
        pytest.skip("no Gluon")
    gen = torch.Generator(device="cuda").manual_seed(3)

    def inputs(s, hq=32, hkv=8):
        q = torch.randn(1, hq, s, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(1, hkv, s, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(1, hkv, s, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        return q, k, v

    cases = [inputs(2048), inputs(2064), inputs(1040, 16, 16)]
    forward._FORWARD_LAUNCHES.clear()
    # References through the JIT launch (kernel[grid]), then the module's launch cache.
    monkeypatch.setattr(fh, "_FA3_LAUNCH", fh._fa3_fwd_kernel)
    refs = [interface.attention(*t, causal=True) for t in cases]
    cached = _launch.CachedKernel(fh._fa3_fwd_kernel, "gluon test")
    monkeypatch.setattr(fh, "_FA3_LAUNCH", cached)
    for t, ref in zip(cases, refs):
        for _ in range(2):
            assert torch.equal(interface.attention(*t, causal=True), ref)
    if len(cached.cache) == 0:
        pytest.skip("these shapes did not take the Gluon path")
    # Each second call ran from the forward's cache; the Gluon-dispatched ones from the Gluon
    # kernel's lean launch (S 1040 runs on Triton under the default dispatch).
    lean = [
        e
        for e in forward._FORWARD_LAUNCHES._entries.values()
        if type(e).__name__ == "LeanHopperLaunch"
    ]
    assert lean and forward._FORWARD_LAUNCHES.hits >= len(cases)
    # Same address, another shape: the descriptors follow the new tensor.
    q, k, v = cases[0]
    addr = q.data_ptr()
    del cases, refs, q
    torch.cuda.synchronize()
    buf = torch.randn(32 * 2048 * 128, device="cuda", dtype=torch.bfloat16)
    q2 = buf[: 16 * 1040 * 128].view(1, 16, 1040, 128)
    k2, v2 = k[:, :2, :1040].contiguous(), v[:, :2, :1040].contiguous()
    out = interface.attention(q2, k2, v2, causal=True)
    monkeypatch.setattr(fh, "_FA3_LAUNCH", cached.kernel)
    same_address = buf.data_ptr() == addr
    assert torch.equal(out, interface.attention(q2, k2, v2, causal=True)), same_address


@pytest.mark.gpu
def test_gluon_lean_launch_matches_the_checked_launch(monkeypatch):
    """The Gluon kernel's lean launch (forward_hopper.LeanHopperLaunch, from the forward's
    cache) gives bitwise the checked launch's output and lse, with and without the lse, a
    given scale, a given strided out, and misses when the dispatch's switch changes."""
    fh = pytest.importorskip("flashcore.kernels.forward_hopper")
    if not getattr(fh, "GLUON_AVAILABLE", False) or not fh._is_hopper(0):
        pytest.skip("no Gluon Hopper kernel here")
    monkeypatch.setenv("FLASHCORE_FORWARD_HOPPER", "always")
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(2, 8, 700, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 2, 900, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(2, 2, 900, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    strided = torch.empty(2, 700, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    calls = [
        dict(causal=True, causal_alignment="bottom_right"),
        dict(causal=False, return_lse=True),
        dict(causal=True, scale=0.05, return_lse=True),
        dict(causal=False, out=strided),
    ]
    for kw in calls:
        forward._FORWARD_LAUNCHES.clear()
        first = interface.attention(q, k, v, **kw)
        first = tuple(t.clone() for t in first) if isinstance(first, tuple) else first.clone()
        entries = list(forward._FORWARD_LAUNCHES._entries.values())
        assert len(entries) == 1 and type(entries[0]).__name__ == "LeanHopperLaunch", kw
        again = interface.attention(q, k, v, **kw)
        assert forward._FORWARD_LAUNCHES.hits == 1, kw
        for a, b in zip(first if isinstance(first, tuple) else (first,),
                        again if isinstance(again, tuple) else (again,)):  # fmt: skip
            assert torch.equal(a, b), kw
    _check(again, q, k, v, causal=False)
    monkeypatch.setenv("FLASHCORE_FORWARD_HOPPER", "never")  # another key: a miss, Triton
    hits = forward._FORWARD_LAUNCHES.hits
    interface.attention(q, k, v, causal=False, out=strided)
    assert forward._FORWARD_LAUNCHES.hits == hits


def test_cached_nvmma_layout_is_the_default_layout():
    gl = pytest.importorskip("triton.experimental.gluon.language")
    cases = [((128, 128), gl.bfloat16), ((64, 64), gl.float16), ((128, 64), gl.bfloat16)]
    for block, dtype in cases:
        first = _launch.nvmma_layout(block, dtype)
        assert first == gl.NVMMASharedLayout.get_default_for(list(block), dtype)
        assert _launch.nvmma_layout(block, dtype) is first  # cached


def test_decode_plans_launch_exactly_what_planning_each_call_launches(monkeypatch):
    """The decode plan cache (exact signatures) against planning every call: over calls of
    many sizes, strides, options and dtypes, visited twice in a shuffled order, every launch
    through a cached plan passes the same grids and arguments as a launch planned afresh,
    and the call's own tensors, never another call's. The compiled kernels are stand-ins
    that record their launches (the CPU has no CUDA launch); planning is the code under
    test."""
    launches = []

    def recorder(name):
        def launch(grid, stream, args, descs=None):
            launches.append((name, grid, args))

        return launch

    monkeypatch.setattr(decode, "on_interpreter", lambda t: False)
    monkeypatch.setattr(decode, "_num_sms", lambda index: 132)
    monkeypatch.setattr(_launch, "usable", lambda device: True)
    monkeypatch.setattr(_launch, "current_stream", lambda index: 0)
    decode._DECODE_LAUNCHES.clear()
    decode._DECODE_PLANS.clear()
    entry = (recorder("split"), recorder("combine"))
    monkeypatch.setattr(decode._DECODE_LAUNCHES, "get", lambda key: entry)

    gen = torch.Generator().manual_seed(0)
    calls = []
    for b, hq, hkv, sn, d, cap, dtype in [
        (1, 32, 8, 1, 128, 8192, torch.bfloat16),
        (1, 32, 8, 1, 128, 4096, torch.bfloat16),
        (2, 32, 8, 1, 128, 8192, torch.bfloat16),
        (1, 32, 8, 4, 128, 8192, torch.bfloat16),
        (1, 16, 16, 1, 64, 640, torch.float16),
        (3, 8, 2, 2, 256, 2000, torch.float16),
    ]:
        q = torch.randn(b, hq, sn, d, generator=gen).to(dtype)
        k = torch.randn(b, hkv, cap, d, generator=gen).to(dtype)
        v = torch.randn(b, hkv, cap, d, generator=gen).to(dtype)
        lens = torch.full((b,), cap // 2, dtype=torch.int32)
        for opts in ({}, {"window": 100}, {"softcap": 30.0, "scale": 0.1}, {"num_splits": 3}):
            calls.append((q, k, v, lens, opts, False))
            calls.append((q, k, v, lens, opts, True))  # with an lse
        kt = k.transpose(1, 2).contiguous().transpose(1, 2)  # other strides, same sizes
        calls.append((q, kt, v, lens, {}, False))
    order = [*range(len(calls)), *range(len(calls))]
    torch.manual_seed(1)
    order = [order[i] for i in torch.randperm(len(order)).tolist()]

    def run(index, out, lse):
        q, k, v, lens, opts, _ = calls[index]
        launches.clear()
        done = decode.launch_decode(
            q,
            k,
            v,
            lens,
            0,
            out,
            None,
            opts.get("scale"),
            opts.get("window"),
            opts.get("softcap"),
            opts.get("num_splits"),
            1,
            k.shape[2],
            False,
            lse=lse,
        )
        assert done is out
        return [(name, grid, list(args)) for name, grid, args in launches]

    def same(a, b):  # argument lists: tensors by identity, everything else by value
        return len(a) == len(b) and all(
            (x is y) if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) else x == y
            for x, y in zip(a, b)
        )

    plan_hits = 0
    for index in order:
        q, k, v, lens, _, want_lse = calls[index]
        out = torch.empty(q.shape, dtype=q.dtype)
        lse = torch.empty(q.shape[:3], dtype=torch.float32) if want_lse else None
        before = decode._DECODE_PLANS.hits
        got = run(index, out, lse)
        plan_hits += decode._DECODE_PLANS.hits - before
        saved = dict(decode._DECODE_PLANS._entries)
        decode._DECODE_PLANS.clear()
        fresh = run(index, out, lse)  # planned afresh
        decode._DECODE_PLANS._entries.update(saved)
        assert [(n, g) for n, g, _ in got] == [(n, g) for n, g, _ in fresh]
        for (_, _, a), (_, _, b) in zip(got, fresh):
            partial_slots = {4, 5} if len(a) > 20 else {0, 1}  # a new allocation each call
            assert same(
                [x for i, x in enumerate(a) if i not in partial_slots],
                [x for i, x in enumerate(b) if i not in partial_slots],
            )
        split_args = got[0][2]
        assert split_args[0] is q and split_args[1] is k and split_args[2] is v
        assert split_args[3] is lens and split_args[6] is out and split_args[-2] is lse
    assert plan_hits >= len(calls)  # every second visit at least was served by a plan
    # A plan keeps no tensor alive (its argument lists hold None in every tensor slot).
    for plan in decode._DECODE_PLANS._entries.values():
        assert not any(
            isinstance(x, torch.Tensor) for part in plan if isinstance(part, tuple) for x in part
        )
