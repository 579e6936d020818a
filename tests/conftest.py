"""Test setup: on a machine without CUDA the kernels run under the Triton interpreter.

TRITON_INTERPRET is read when @triton.jit decorates, so it is set here, before any test
module imports flashcore's kernels. GPU-marked tests are skipped without CUDA.
"""

import json
import os
import subprocess
import sys
import zlib

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"


def _inductor_cache_per_cpu_path() -> str:
    """torch.compile's on-disk cache, one directory per CPU code path.

    Inductor's FX graph cache (torch 2.13) does not key its entries on the vector ISA that
    ATEN_CPU_CAPABILITY selects, while the C++ it generates is compiled for that ISA. A graph
    generated under AVX-512 (loops that step 16 floats) and served from the cache to a run
    under ATEN_CPU_CAPABILITY=avx2 is compiled with AVX2's 8-float vectors: each step stores
    half of what it should, and the rest of the output buffer (from empty_strided) is left
    as it was, which test_torch_op_gradients_opcheck_and_compile saw as NaN and 1e33
    gradients. `make test` runs the suite under two code paths, so each gets its own cache.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    return os.path.join(base, f"cpu-{torch.backends.cpu.get_cpu_capability().lower()}")


os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_cache_per_cpu_path()

DEVICE = "cuda" if HAS_CUDA else "cpu"
# The Gluon kernels' tests (forward_hopper, backward_hopper*) need compute capability 9.x.
HAS_HOPPER = HAS_CUDA and torch.cuda.get_device_capability()[0] == 9


def offline_report(script: str):
    """Runs ``script`` (Python that prints JSON) in a subprocess with the Triton interpreter
    off, from the repository root, and returns what it printed: offline sm_90 compiles from a
    test process that itself runs the interpreter."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def case_seed(name: str) -> int:
    """A case's input seed, from its name: the same inputs in every process (str hash() is
    salted per process, which once made a grid draw other inputs on every run)."""
    return zlib.crc32(name.encode()) % 10_000


def pytest_collection_modifyitems(config, items):
    # FLASHCORE_TEST_SHARD=i/n keeps every n-th collected test from the i-th (0-based): a
    # GPU run splits a long grid over parallel processes, whose compiles are CPU-bound.
    shard = os.environ.get("FLASHCORE_TEST_SHARD")
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        if not 0 <= index < count:
            raise ValueError(f"FLASHCORE_TEST_SHARD must be i/n with 0 <= i < n, got {shard!r}")
        keep = [item for i, item in enumerate(items) if i % count == index]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _interpreter_flag_kept():
    """A test that drops or flips TRITON_INTERPRET (say, by importing a GPU tool in process)
    would take the interpreter from every later test of this process: put it back, and fail
    the test that changed it rather than the hundred after it."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    after = os.environ.get("TRITON_INTERPRET")
    if after != before:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before
        pytest.fail(f"this test changed TRITON_INTERPRET from {before!r} to {after!r}")


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def poisoned():
    """Allocate an output filled with NaN, so an element the kernel never writes fails."""

    def make(shape, dtype, device=DEVICE):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    return make


def pytest_terminal_summary(terminalreporter):
    """Print what tests measured (``record_property("measured", line)``), passed or not: a
    rate under a bound is worth seeing before it reaches the bound."""
    lines = [
        value
        for key in ("passed", "failed")
        for report in terminalreporter.stats.get(key, [])
        if report.when == "call"
        for name, value in report.user_properties
        if name == "measured"
    ]
    if lines:
        terminalreporter.section("measured")
        for line in lines:
            terminalreporter.write_line(line)
