"""flashcore: Triton attention kernels checked against float64, and the tools the notebooks use.

Set ``TRITON_INTERPRET=1`` before importing flashcore to run the kernels on CPU tensors.
"""

from .kernels.forward import attention
from .reference import attention_reference
from .validate import error_rule

__all__ = ["attention", "attention_reference", "error_rule"]
__version__ = "0.1.0"
