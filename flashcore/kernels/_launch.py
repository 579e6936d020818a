"""Lean kernel launches: the launch configuration and the compiled kernel, cached per
argument signature, so a repeated call skips the Triton JIT's per-call work.

``kernel[grid](*args)`` binds and specializes every argument, builds a cache key from the
result and looks the compiled kernel up on every call: tens of microseconds of Python for a
kernel with thirty arguments, more than the GPU work of a small attention call. A launcher
that knows the key of its call (shapes, strides, dtypes, device, 16-byte alignment of every
pointer, flags: everything Triton specializes on, and nothing else that changes the launch)
keeps the compiled kernel from the first call and calls its launcher directly afterwards.

What is never cached: tensors, data pointers, TMA descriptors (built per call from the
call's tensors), streams. A cache entry is a compiled binary plus integers derived from its
key, so a tensor freed and reallocated at the same address with another shape or strides
has another key, and one with the same shape and strides gets the same (correct) launch.

The direct call applies only to compiled CUDA kernels of the Triton versions whose launcher
interface this was written against (3.6 to 3.9: ``CompiledKernel.run(grid..., stream,
function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``), with no launch
hooks installed (profilers such as proton use them) and on the current device. Everywhere
else (the interpreter, other versions, hooks) ``launch`` goes through ``kernel[grid]``.
"""

from __future__ import annotations

import functools
import os
import threading

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

_VERSION = tuple(int(x) for x in triton.__version__.split(".")[:2] if x.isdigit())
SUPPORTED_TRITON = ((3, 6), (3, 7), (3, 8), (3, 9))
ENABLED = _VERSION in SUPPORTED_TRITON and os.environ.get("FLASHCORE_JIT_LAUNCH", "0") in ("", "0")

_MAX_ENTRIES = 4096  # per kernel family; a model uses a few dozen signatures


try:
    from triton import knobs as _knobs
except ImportError:  # older versions: no direct call
    _knobs = None
    ENABLED = False


def environ_value(name: str):
    """A zero-argument function returning ``name``'s raw value in ``os.environ`` now (the
    encoded bytes on POSIX), or None when unset: for cache keys, where two calls' results
    compare equal exactly when ``os.environ.get(name)``'s do. It reads the dict that
    ``os.environ`` itself keeps (CPython's ``_Environ._data``, under the encoded name), which
    every ``os.environ`` change updates; ``os.environ.get`` of an unset name raises and
    catches a KeyError inside (the forward's two switches: 1.87 us a call against 0.49 on a
    CPU, results/cpu-interpreter/logs/host_micro_4ccd1fb.json). Where ``os.environ`` is not laid
    out so, it is ``os.environ.get``."""
    encode = getattr(os.environ, "encodekey", None)
    encoded = encode(name) if encode is not None else None

    def value():
        data = getattr(os.environ, "_data", None)  # looked up per call: os.environ may be replaced
        if encoded is None or type(data) is not dict:
            return os.environ.get(name)
        return data.get(encoded)

    return value


def _hooks_installed() -> bool:
    try:
        hooks = (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook)
    except AttributeError:
        return True
    for hook in hooks:
        if hook is None:
            continue
        if getattr(hook, "calls", None) == []:  # an empty HookChain (3.6+)
            continue
        return True
    return False


class LaunchCache:
    """key -> (compiled kernel, whatever the caller derived from the key). Thread-safe:
    entries are immutable once stored and a dict store is atomic; two threads missing on
    the same key both compile through the JIT (which has its own cache) and store equal
    entries."""

    def __init__(self, name: str):
        self.name = name
        self._entries: dict = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, key, entry) -> None:
        with self._lock:
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()  # rare: start over rather than track recency per call
            self._entries[key] = entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


class _Descriptor(TensorDescriptor):
    """A TensorDescriptor without the per-call validation: the checked call that created a
    cache entry validated the same shapes, strides, dtype and alignment (all in the key)."""

    def __post_init__(self):
        pass


# Encoded TMA descriptors (what the launcher passes for a tensordesc argument), keyed on
# everything the encoding reads: address, shape, strides, dtype, block and the kernel's
# descriptor layout. A tensor freed and reallocated at the same address with the same
# shape and strides gets the same bytes, so an entry is never stale.
_ENCODED: dict = {}
_MAX_ENCODED = 1024


class DirectKernel:
    """A compiled kernel and its launcher, called without the JIT's binding step.

    Where the launcher's structure is the one this was written against (Triton 3.6: a C
    ``launch`` wrapped by a Python function that encodes tensor descriptors on every call),
    the C launch is called directly with descriptors encoded once per (address, shape,
    strides); elsewhere the launcher is called as the JIT calls it."""

    __slots__ = (
        "run",
        "function",
        "packed_metadata",
        "raw",
        "coop",
        "pdl",
        "desc_slots",
        "metas",
        "encode",
    )

    def __init__(self, compiled, desc_slots=()):
        self.run = compiled.run  # initialises the module and function handles
        self.function = compiled.function
        self.packed_metadata = compiled.packed_metadata
        self.raw = None
        self.desc_slots = tuple(desc_slots)
        launcher = self.run
        launch = getattr(launcher, "launch", None)
        plain = all(
            getattr(launcher, a, 1) == 0 for a in ("global_scratch_size", "profile_scratch_size")
        )
        if launch is None or not plain or not hasattr(launcher, "launch_pdl"):
            return
        self.coop, self.pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
        closure = getattr(launch, "__closure__", None)
        if not self.desc_slots:
            if closure is None:  # the C launch itself: no descriptor handling in between
                self.raw = launch
            return
        if closure is None:
            return
        cells = dict(zip(launch.__code__.co_freevars, (c.cell_contents for c in closure)))
        try:
            from triton.backends.nvidia.driver import make_tensordesc_arg
        except ImportError:
            return
        metas = cells.get("tensordesc_meta")
        if (
            set(cells) >= {"launcher", "tensordesc_meta", "tensordesc_indices"}
            and metas
            and None not in metas
            and sorted(cells["tensordesc_indices"]) == list(self.desc_slots)
            and make_tensordesc_arg.__code__.co_argcount == 2
        ):
            self.raw, self.metas, self.encode = cells["launcher"], tuple(metas), make_tensordesc_arg

    def __call__(self, grid, stream, args, descs=None):
        """args: every kernel parameter in order, constexprs included (the launcher skips
        them), exactly as the JIT passes bound_args.values(). descs: for each descriptor
        slot (in order), (tensor, shape list, stride list, block list)."""
        if descs is None:
            if self.raw is not None:
                self.raw(
                    grid[0],
                    grid[1],
                    grid[2],
                    stream,
                    self.function,
                    self.coop,
                    self.pdl,
                    None,
                    None,
                    self.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                )
            else:
                self.run(
                    grid[0],
                    grid[1],
                    grid[2],
                    stream,
                    self.function,
                    self.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                )
            return
        if self.raw is None:
            for slot, (t, shape, strides, block) in zip(self.desc_slots, descs):
                args[slot] = _Descriptor(t, shape, strides, block)
            self.run(
                grid[0],
                grid[1],
                grid[2],
                stream,
                self.function,
                self.packed_metadata,
                None,
                None,
                None,
                *args,
            )
            return
        final = [
            grid[0],
            grid[1],
            grid[2],
            stream,
            self.function,
            self.coop,
            self.pdl,
            None,
            None,
            self.packed_metadata,
            None,
            None,
            None,
        ]
        start = 0
        for slot, meta, (t, shape, strides, block) in zip(self.desc_slots, self.metas, descs):
            final.extend(args[start:slot])
            key = (t.data_ptr(), shape, strides, t.dtype, block, id(meta))
            encoded = _ENCODED.get(key)
            if encoded is None:
                encoded = self.encode(_Descriptor(t, list(shape), list(strides), list(block)), meta)
                if len(_ENCODED) >= _MAX_ENCODED:
                    _ENCODED.clear()
                _ENCODED[key] = encoded
            final.extend(encoded)
            start = slot + 1
        final.extend(args[start:])
        self.raw(*final)


def direct_kernel(compiled, desc_slots=()):
    """A DirectKernel for what ``kernel[grid](...)`` returned, or None where the direct
    call does not apply (interpreter, unsupported version, hooks installed). desc_slots:
    the parameter positions of the TMA descriptor arguments (in order)."""
    if not ENABLED or compiled is None or _hooks_installed():
        return None
    if hasattr(compiled, "result"):  # an async-compile future (3.6)
        compiled = compiled.result()
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return None
    try:
        return DirectKernel(compiled, desc_slots)
    except Exception:  # noqa: BLE001  a launcher we do not understand: keep the JIT path
        return None


def usable(device: torch.device) -> bool:
    """The direct call launches on the current device's current stream, as the JIT does."""
    return (
        ENABLED
        and device.type == "cuda"
        # torch.cuda.current_device() without its lazy-init check: a CUDA tensor exists,
        # so CUDA is initialized (the check cost about half a microsecond per call).
        and device.index == torch._C._cuda_getDevice()
        and not _hooks_installed()
    )


def new_output(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A new contiguous ``(B, Hq, Sq, D_v)`` tensor of q's dtype on q's device (D_v: v's
    head dim). ``torch.empty_like`` parses one tensor where ``torch.empty(shape, dtype=,
    device=)`` parses three arguments: 1.41 against 2.39 us a call on a CPU tensor
    (results/cpu-interpreter/logs/host_micro_4ccd1fb.json)."""
    if v.shape[3] == q.shape[3]:
        return torch.empty_like(q, memory_format=torch.contiguous_format)
    return torch.empty((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)


def current_stream(device_index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device_index)


@functools.cache
def compute_capability(index) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def tma_strides_ok(t: torch.Tensor) -> bool:
    """Hopper's bulk tensor copy (TMA) reads a (B, H, S, D) tensor through a descriptor
    that needs a unit inner stride, a 16-byte aligned base and 16-byte multiples for every
    other stride; broadcast (stride-0) dims, e.g. K/V expanded across heads, cannot be
    described."""
    if t.stride(3) != 1 or t.data_ptr() % 16:
        return False
    return all(st > 0 and (st * t.element_size()) % 16 == 0 for st in t.stride()[:3])


def tma_compatible(tensors, head_dim: int) -> bool:
    """The Triton kernels' TMA path: CUDA sm_90+, half precision, a power-of-two head dim
    >= 16, and every tensor's strides as ``tma_strides_ok`` says. Anything else takes the
    pointer path (same numerics, same results)."""
    first = tensors[0]
    if first.device.type != "cuda" or compute_capability(first.device.index)[0] < 9:
        return False
    if (
        first.dtype == torch.float32
        or head_dim != triton.next_power_of_2(head_dim)
        or head_dim < 16
    ):
        return False
    return all(tma_strides_ok(t) for t in tensors)


def aligned(t: torch.Tensor) -> bool:
    """Triton specializes pointers on 16-byte alignment: part of every key."""
    return t.data_ptr() % 16 == 0


# ---------------------------------------------------------------- specialization classes
# What Triton 3.6-3.9 specializes an int argument on (native_specialize_impl): the value 1
# becomes a constexpr; otherwise its type by range (i32, i64, u64) and whether it is
# divisible by 16. A key built from these classes instead of exact values lets a launch
# whose sizes change (a KV cache growing by one token per step) reuse one compiled kernel,
# exactly as the JIT itself would.
_I32_MIN, _I32_MAX, _I64_MIN, _I64_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1


def int_class(x: int) -> int:
    """Triton's specialization class of an int argument: 1 (the constexpr 1), else the
    type (0: i32, 64: i64, 128: u64) plus 16 where ``x % 16 == 0``."""
    if x == 1:
        return 1
    div = 0 if x & 15 else 16
    if _I32_MIN <= x <= _I32_MAX:
        return div
    return div + (64 if _I64_MIN <= x <= _I64_MAX else 128)


def int_classes(values) -> tuple:
    """``tuple(map(int_class, values))``, faster where every value fits in i32 (the
    common case): 16 for divisible by 16, 1 for the value 1, 0 otherwise."""
    if _I32_MIN <= min(values) and max(values) <= _I32_MAX:
        return tuple([16 if not x & 15 else (1 if x == 1 else 0) for x in values])
    return tuple(map(int_class, values))


def int_type(x: int) -> int:
    """The class of an int parameter marked ``do_not_specialize``: its type only."""
    if _I32_MIN <= x <= _I32_MAX:
        return 0
    return 64 if _I64_MIN <= x <= _I64_MAX else 128


# --------------------------------------------------------------- a generic cached launch


class CachedKernel:
    """``CachedKernel(kernel)[grid](*args, **kwargs)`` launches like ``kernel[grid](...)``
    (a Triton or Gluon ``@jit`` function), with the compiled kernel cached per Triton's own
    specialization of the call: the JIT's binder computes it (dtypes, 16-byte alignment,
    int classes, constexpr values, tensor-descriptor types with their block shape and
    layout, launch options), so a hit is exactly the kernel the JIT would pick. On a hit it
    skips the JIT's cache-key string, launch metadata and hooks, and the per-call encoding
    of TMA descriptors (encoded once per address, shape, strides, dtype and block, see
    ``DirectKernel``). Nothing per call is cached: grid, stream, tensors and descriptors
    come from the call.

    Falls back to ``kernel[grid](...)`` on the interpreter, unsupported triton versions,
    launch hooks, a callable grid, or descriptors with NaN padding."""

    def __init__(self, kernel, name: str | None = None):
        self.kernel = kernel
        self.cache = LaunchCache(name or getattr(kernel, "__name__", "kernel"))

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def _binder(self, device):
        caches = getattr(self.kernel, "device_caches", None)
        if caches is None or device not in caches:
            return None  # the first call goes through the JIT, which creates the binder
        return caches[device][4]

    def _bind(self, binder, device, args, kwargs):
        """(bound values, cache key) of a call: the options exactly as JITFunction.run
        completes them before binding."""
        kwargs = dict(kwargs)
        kwargs["debug"] = kwargs.get("debug", self.kernel.debug) or _knobs.runtime.debug
        kwargs["instrumentation_mode"] = _knobs.compilation.instrumentation_mode
        bound, spec, options = binder(*args, **kwargs)
        return bound, (device, tuple(spec), tuple(options.items()))

    def run(self, grid, args, kwargs):
        kernel = self.kernel
        if not ENABLED or callable(grid) or _hooks_installed() or not torch.cuda.is_available():
            return kernel[grid](*args, **kwargs)
        device = torch.cuda.current_device()
        binder = self._binder(device)
        if binder is None:
            # The kernel's first call in this process: the JIT runs it and creates the
            # binder, so this call's launcher is cached too (a later freeze finds it).
            compiled = kernel[grid](*args, **kwargs)
            binder = self._binder(device)
            if binder is not None:
                self._store(self._bind(binder, device, args, kwargs)[1], compiled)
            return compiled
        bound, key = self._bind(binder, device, args, kwargs)
        entry = self.cache.get(key)
        if entry is None:
            return self._miss(key, grid, args, kwargs)
        values = list(bound.values())
        descs = None
        if entry.desc_slots:
            descs = []
            for slot in entry.desc_slots:
                d = values[slot]
                if getattr(d, "padding", "zero") != "zero":
                    return kernel[grid](*args, **kwargs)
                descs.append((d.base, tuple(d.shape), tuple(d.strides), tuple(d.block_shape)))
        grid = tuple(grid) + (1,) * (3 - len(grid))
        entry(grid, current_stream(device), values, descs)
        return entry

    def freeze(self, grid, args, kwargs):
        """For a call that has run before: ``(direct kernel, 3-D grid, bound values, slots of
        its TMA descriptors)``, the values a list in parameter order with every descriptor
        slot None, so a caller that knows which values change per call can launch again
        without binding (``forward_hopper.LeanHopperLaunch``). None where the direct call
        does not apply or nothing is cached for this specialization."""
        if not ENABLED or callable(grid) or _hooks_installed() or not torch.cuda.is_available():
            return None
        device = torch.cuda.current_device()
        binder = self._binder(device)
        if binder is None:
            return None
        bound, key = self._bind(binder, device, args, kwargs)
        entry = self.cache.get(key)
        if entry is None:
            return None
        values = list(bound.values())
        for slot in entry.desc_slots:
            if getattr(values[slot], "padding", "zero") != "zero":
                return None
            values[slot] = None
        return entry, tuple(grid) + (1,) * (3 - len(grid)), values, entry.desc_slots

    def _miss(self, key, grid, args, kwargs):
        compiled = self.kernel[grid](*args, **kwargs)
        self._store(key, compiled)
        return compiled

    def _store(self, key, compiled) -> None:
        slots = tuple(i for i, (kind, _) in enumerate(key[1]) if str(kind).startswith("tensordesc"))
        direct = direct_kernel(compiled, slots)
        if direct is not None:
            self.cache.put(key, direct)


@functools.lru_cache(maxsize=256)
def nvmma_layout(block_shape: tuple, dtype):
    """``gl.NVMMASharedLayout.get_default_for(list(block_shape), dtype)``, cached: the
    layout is a pure function of the block shape and dtype, and computing it costs tens of
    microseconds of Python per call (three per Gluon forward launch)."""
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(list(block_shape), dtype)


# ------------------------------------------------- v's own head dim on compiled kernels
# D_v != D (DeepSeek's MLA) runs the kernels' own HEAD_DIM_V mode: V's tile and the
# accumulator are D_v wide, so P.V costs D_v's FLOPs, not the wider head dim's. Its H100 grid
# of 2026-11-25 had failed (D 40 / D_v 24: forward error 229x the bound and illegal memory
# accesses; 24/8 too) because V's tile, loaded after q.k^T when it is not pipelined, was
# placed in K's shared-memory slot with another shape and swizzle (the 64/24 one-stage
# control faulted the same way; tools/dv_offline/REPORT.md). The forward now loads V before
# q.k^T in that mode, so V has a buffer of its own. The zero-padded route below (exact: zero
# columns of q and k add nothing to q.k, zero columns of v give zero output columns; it
# costs the copies and the padded columns' FLOPs) stays as a switch: device types listed
# here take it (tests and notebook 09 set it to compare the two routes).
PAD_VALUE_HEAD_DIM_ON: set[str] = set()


def pads_value_head_dim(t: torch.Tensor) -> bool:
    return t.device.type in PAD_VALUE_HEAD_DIM_ON


def pad_head_dim(t: torch.Tensor | None, width: int) -> torch.Tensor | None:
    """t (B, H, S, D) zero-padded to head dim ``width`` (t itself where already that wide).
    A batch-stride-0 view (varlen's packed tensors seen as B batches) is padded once and
    expanded again, not materialised B times."""
    if t is None or t.shape[-1] == width:
        return t
    if t.dim() == 4 and t.shape[0] > 1 and t.stride(0) == 0:
        return pad_head_dim(t[:1], width).expand(t.shape[0], -1, -1, -1)
    return torch.nn.functional.pad(t, (0, width - t.shape[-1]))


def copy_head_dim(dst: torch.Tensor | None, src: torch.Tensor | None) -> None:
    """dst = src's first dst.shape[-1] head-dim columns (the inverse of pad_head_dim)."""
    if dst is None or dst is src:
        return
    if dst.dim() == 4 and dst.shape[0] > 1 and dst.stride(0) == 0:
        dst, src = dst[:1], src[:1]  # one copy of a batch-stride-0 view
    dst.copy_(src[..., : dst.shape[-1]])
