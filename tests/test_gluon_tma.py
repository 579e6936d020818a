"""The copy engine's reduce-add from Gluon (flashcore/kernels/_gluon_tma.py), through the probe
kernel of tools/gluon_tma_reduce_probe.py: offline, that it lowers to the bulk tensor reduce
(UTMAREDG) and not to per-element atomics; on a Hopper GPU, that its sums of fp32 tiles, many
programs into the same rows, match float64's within an order-free bound."""

import json
import os
import subprocess
import sys
from unittest import mock

import pytest
from conftest import HAS_HOPPER

from flashcore.kernels import _gluon_tma

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tools", "gluon_tma_reduce_probe.py")


def _probe(*args):
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run(
        [sys.executable, PROBE, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_offline_compile_lowers_to_the_bulk_reduce():
    pytest.importorskip("triton.experimental.gluon")
    if not _gluon_tma.AVAILABLE:
        pytest.skip("this triton has no Gluon")
    report = json.loads(_probe("--offline", "--d", "64", "128"))
    for d in (64, 128):
        tma, atomic = report[f"D{d} tma"], report[f"D{d} atomic"]
        # the probe's offline build adds its tile 4 times
        assert tma["ptx_reduce"] == 4 and tma["sass_utmaredg"] == 4, tma
        assert tma["ptx_atomics"] == 0 and tma["sass_red"] == 0, tma
        assert atomic["sass_utmaredg"] == 0 and atomic["sass_red"] > 0, atomic
        assert tma["shared"] == 2 * 64 * d * 4  # two fp32 staging buffers


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_HOPPER, reason="needs a Hopper GPU")
def test_sums_match_float64(tmp_path):
    out = tmp_path / "probe.json"
    _probe(str(out), "--d", "64", "128", "--programs", "264", "--blocks", "33", "--repeat", "4")
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 4
    for row in rows:
        assert row["passed"], row


def test_summation_bound_holds_for_fp32_sums_in_any_order():
    """The probe's bound on CPU, with the arithmetic the GPU does (one fp32 add at a time, round to
    nearest) in random orders: every element's error stays under it, and the worst comes within a
    factor of 50 of it (random rounding errors grow as sqrt(n), the worst case as n: here about
    0.06 of it), so a bound loose enough that nothing could break it fails the test; and an
    adversarial order reaches half of it, so a bound a few times too tight fails too."""
    import importlib.util

    import torch

    pytest.importorskip("triton.experimental.gluon")
    spec = importlib.util.spec_from_file_location("probe", PROBE)
    probe = importlib.util.module_from_spec(spec)
    # The probe drops TRITON_INTERPRET at import (it compiles for the GPU): keep this
    # process's environment as it was, or every later CPU test loses the interpreter.
    with mock.patch.dict(os.environ):
        spec.loader.exec_module(probe)
    gen = torch.Generator().manual_seed(1)
    n, shape = 64, (1 << 16,)
    terms = torch.randn(n, *shape, generator=gen)
    exact = terms.double().sum(0)
    bound = probe.summation_bound(terms.double().abs().sum(0), n)
    worst = 0.0
    for _ in range(3):
        acc = torch.zeros(shape)
        for i in torch.randperm(n, generator=gen):
            acc = acc + terms[i]  # fp32, one term at a time
        ratio = float(((acc.double() - exact).abs() / bound).max())
        assert ratio <= 1.0, ratio
        worst = max(worst, ratio)
    assert worst > 0.02, worst
    # An adversarial sum: 1, then 63 terms of 0.75 ulp(1), each rounded up by a quarter ulp.
    # Its error is half the bound, so a bound 4x too tight (the first GPU run's) fails here.
    adversarial = torch.tensor([1.0] + [0.75 * 2.0**-23] * (n - 1))
    acc = torch.zeros(())
    for term in adversarial:
        acc = acc + term
    err = abs(float(acc) - float(adversarial.double().sum()))
    ratio = err / float(probe.summation_bound(adversarial.double().abs().sum(), n))
    assert 0.45 < ratio <= 1.0, ratio
