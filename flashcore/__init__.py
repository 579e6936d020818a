"""flashcore: Triton attention kernels checked against float64, and the tools the notebooks use.

Kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter: set
``TRITON_INTERPRET=1`` before the first use of a kernel (Triton reads it when the kernel
module is imported). Nothing heavy happens at ``import flashcore``: the public names below
are loaded on first access, so ``python -m flashcore`` can still pick the backend.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "attention": "flashcore.interface",
    "attention_with_kvcache": "flashcore.interface",
    "attention_varlen": "flashcore.interface",
    "fp8_attention": "flashcore.interface",
    "quantize_fp8": "flashcore.interface",
    "kvcache_reference": "flashcore.reference",
    "attention_reference": "flashcore.reference",
    "error_rule": "flashcore.validate",
    "flash_attn_func": "flashcore.flash_attn_interface",
    "flash_attn_varlen_func": "flashcore.flash_attn_interface",
    "flash_attn_with_kvcache": "flashcore.flash_attn_interface",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flashcore' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
