"""TMA reduce-add for Gluon kernels on Hopper (``cp.reduce.async.bulk.tensor ... .add``).

Gluon in triton 3.6 exposes the copy engine's loads and stores (``tma.async_copy_*``) but not
its reduce, which the Triton frontend lowers a descriptor's ``atomic_add`` to (the Triton
backward's atomic mode sums dQ with it). The op is in the dialect (``ttng.async_tma_reduce``)
and its builder is on Gluon's: ``async_reduce_add`` below calls it. FlashAttention-3 sums dQ
this way: one bulk reduce of an fp32 tile from shared memory per step, issued by one thread
and waited on with ``tma.store_wait`` only before that shared buffer is written again, where
per-element ``atomic_add`` issues a global atomic per element from every thread.

The warp-specialized backward's dQ writer (kernels/backward_hopper_ws.py) sums dQ with it.
``tools/gluon_tma_reduce_probe.py`` compiles it for sm_90 (offline: the PTX and SASS it lowers
to) and, on a Hopper GPU, checks its sums against torch's and times it beside
``gl.atomic_add``.
"""

from __future__ import annotations

try:
    from triton._C.libtriton import ir
    from triton.experimental.gluon.language._core import builtin

    AVAILABLE = True
except ImportError:  # a triton without Gluon: nothing here is defined
    AVAILABLE = False

if AVAILABLE:

    @builtin
    def async_reduce_add(tensor_desc, coord, src, _semantic=None):
        """Add the shared-memory tile ``src`` (fp32, the descriptor's block shape and layout)
        into global memory at ``coord`` through ``tensor_desc``: elements past the tensor's
        bounds are dropped by the copy engine. Asynchronous, as ``async_copy_shared_to_global``:
        ``fence_async_shared()`` after writing ``src``, ``tma.store_wait(n)`` before writing it
        again."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(
            ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle
        )
