"""Test setup: on a machine without CUDA the kernels run under the Triton interpreter.

TRITON_INTERPRET is read when @triton.jit decorates, so it is set here, before any test
module imports flashcore's kernels. GPU-marked tests are skipped without CUDA.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def poisoned():
    """Allocate an output filled with NaN, so an element the kernel never writes fails."""

    def make(shape, dtype, device=DEVICE):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    return make
