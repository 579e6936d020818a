"""Offline (no GPU) sm_90 compilation of one kernel launch, specialized as Triton's launcher
would specialize it (16-byte alignment, ints equal to 1, divisibility by 16): the keyword
arguments of a captured ``kernel[grid](...)`` call in, the compiled kernel out (``.asm`` holds
ttgir, llir, ptx and cubin). ``capture_launches`` gets those keyword arguments from a real
launcher without running its kernels. Used by tools/ptx_compare.py, tools/backward_budget.py
and tools/dv_offline/compile_dv.py.
"""

from __future__ import annotations

import os

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def compile_launch(fn, kwargs: dict, source_cls=ASTSource):
    """``fn`` (a @triton.jit or @gluon.jit function) compiled for sm_90 with ``kwargs``: every
    parameter by name plus launch options (num_warps, num_stages). ``source_cls``: ASTSource,
    or GluonASTSource for a Gluon kernel."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, _ = binder(**kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, {})
    source = source_cls(fn, signature, constexprs, attrs)
    return triton.compile(source, target=TARGET, options=options.__dict__)


class _Capture:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` records the call."""

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.grid, self.last = grid, (args, kwargs)

        return call


def capture_launches(module, names, launch, *, grids=None, **patches) -> dict:
    """Calls ``launch()`` with ``module``'s kernels ``names`` replaced by stand-ins that record
    their ``kernel[grid](...)`` call instead of running it, and ``module``'s attributes
    ``patches`` set (e.g. ``on_interpreter``, so that CPU tensors take the GPU path); restores
    all of them after. Returns, for each kernel launched, the keyword arguments of its last
    launch, every parameter by name, as ``compile_launch`` takes them; ``grids``, a dict if
    given, receives each one's launch grid."""
    caps = {n: _Capture() for n in names}
    saved = {n: getattr(module, n) for n in (*names, *patches)}
    try:
        for n, value in (caps | patches).items():
            setattr(module, n, value)
        launch()
    finally:
        for n, value in saved.items():
            setattr(module, n, value)
    if grids is not None:
        grids.update({n: c.grid for n, c in caps.items() if hasattr(c, "last")})
    return {
        n: dict(zip(saved[n].arg_names, c.last[0])) | c.last[1]
        for n, c in caps.items()
        if hasattr(c, "last")  # not launched in this mode (the atomic backward's dQ kernel)
    }
