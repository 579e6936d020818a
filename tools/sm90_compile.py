"""Offline (no GPU) sm_90 compilation of one kernel launch, specialized as Triton's launcher
would specialize it (16-byte alignment, ints equal to 1, divisibility by 16): the keyword
arguments of a captured ``kernel[grid](...)`` call in, the compiled kernel out (``.asm`` holds
ttgir, llir, ptx and cubin). Used by tools/ptx_compare.py and
tools/dv_offline/compile_dv.py.
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
