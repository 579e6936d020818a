"""The command line: a thin dispatcher over the lab's command modules.

Every command's --help works (its options come from its lab module), the top-level help
lists every command, and without the lab a command says it needs a checkout of the
repository while ``info`` still runs."""

import importlib
import re
import sys

import pytest

from flashcore import __main__ as cli


def run(argv, capsys):
    """(exit status, stdout, stderr) of ``python -m flashcore argv``, in this process."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def hide_lab(monkeypatch):
    """Make ``import flashcore.studies...`` fail as it does where the wheel is installed."""
    for name in list(sys.modules):
        if name == "flashcore.studies" or name.startswith("flashcore.studies."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "flashcore.studies", None)


def test_top_level_help_lists_every_command(capsys):
    status, out, _ = run(["--help"], capsys)
    assert status == 0
    listed = re.findall(r"^    (\S+)", out, flags=re.M)  # continuation lines are deeper
    assert listed == list(cli.COMMANDS)
    for name, command in cli.COMMANDS.items():
        assert " ".join(command.help.split()[:4]) in " ".join(out.split()), name


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_has_help(name, capsys):
    status, out, err = run([name, "--help"], capsys)
    assert status == 0, err
    assert out.startswith(f"usage: flashcore {name}")
    assert "--help" in out


@pytest.mark.parametrize("name", [n for n, c in cli.COMMANDS.items() if c.module])
def test_every_lab_command_has_a_body(name):
    module = importlib.import_module(f"flashcore.studies.commands.{cli.COMMANDS[name].module}")
    assert callable(getattr(module, f"run_{name}"))


def test_options_reach_the_command(monkeypatch, capsys):
    # The options a command's module declares are parsed into the namespace its body gets.
    from flashcore.studies.commands import perf

    seen = {}
    monkeypatch.setattr(perf, "run_bench", lambda args: seen.update(vars(args)) or 7)
    status, _, _ = run(["bench", "--suite", "decode", "--d", "64", "128", "--reps", "5"], capsys)
    assert status == 7
    assert seen["suite"] == "decode" and seen["d"] == [64, 128] and seen["reps"] == 5
    assert seen["topic"] == "perf" and not seen["record"]


def test_unknown_command_and_bad_option_fail(capsys):
    status, _, err = run(["no-such-command"], capsys)
    assert status == 2 and "invalid choice" in err
    status, _, err = run(["bench", "--suite", "nope"], capsys)
    assert status == 2 and "invalid choice" in err


@pytest.mark.parametrize("argv", [["bench"], ["fp8", "--help"], ["cp", "check"]])
def test_without_the_lab_a_command_asks_for_a_checkout(argv, monkeypatch, capsys):
    hide_lab(monkeypatch)
    status, out, err = run(argv, capsys)
    assert status == 2 and out == ""
    assert f"python -m flashcore {argv[0]}" in err and "checkout of the repository" in err


def test_without_the_lab_help_and_info_work(monkeypatch, capsys):
    hide_lab(monkeypatch)
    status, out, _ = run(["--help"], capsys)
    assert status == 0 and "backward" in out
    status, out, err = run(["info"], capsys)
    assert status == 0, err
    assert "forward dispatch" in out and "torch" in out
    assert "flashcore.studies" not in [m for m in sys.modules if sys.modules[m] is not None]


def test_info_says_whether_the_record_its_backward_line_cites_is_current(capsys):
    from flashcore.studies.records import status_line_for

    status, out, err = run(["info"], capsys)
    assert status == 0, err
    from flashcore.dispatch import BACKWARD_TABLES_RECORD

    topic, slug = BACKWARD_TABLES_RECORD
    assert f"({slug}/{topic}.json)" in out
    assert status_line_for(topic, slug) in out  # "current" or "stale (...)"


def test_a_broken_lab_import_is_not_reported_as_a_missing_lab(monkeypatch):
    # Only the lab's own absence gets the checkout message; any other missing module (a
    # dependency of a study) is raised as it is.
    real = importlib.import_module

    def fake(name, *a, **k):
        if name.startswith("flashcore.studies.commands."):
            raise ModuleNotFoundError("No module named 'transformers'", name="transformers")
        return real(name, *a, **k)

    monkeypatch.setattr(cli.importlib, "import_module", fake)
    with pytest.raises(ModuleNotFoundError, match="transformers"):
        cli.main(["e2e"])


# ------------------------------------------------- the record builders the CLI shares
# The GPU measurements are replaced by stand-ins that return rows of the same layout, so what
# is tested is each builder's own logic: which shapes and peers go where, derived fields, keys.


def fake_rows(shape, impls, *, reps, graph=False, keep_samples=False, median_ms=0.5):
    row = {**shape, "Hkv": shape.get("Hkv", shape["Hq"]), "Sk": shape.get("Sk", shape["S"])}
    extra = {"graph_timing": {"median_ms": median_ms / 2}} if graph else {}
    if keep_samples:
        extra["samples_kept"] = True
    return [
        {**row, "impl": i, "timing": {"median_ms": median_ms}, "tflops": 1.0, **extra}
        for i in impls
    ]


def test_perf_record(monkeypatch):
    from flashcore.studies import bench

    monkeypatch.setattr(
        bench, "ceilings", lambda: {"matmul": {"tflops": 900.0}, "copy": {"tbps": 3.0}}
    )
    monkeypatch.setattr(bench, "bench_attention_shape", fake_rows)
    lines = []
    forward = bench.forward_shapes((64,), (512,), ("bfloat16",), (True,))
    record = bench.run_perf_record(
        forward,
        bench.prior_report_shapes()[:1],
        bench.decode_shapes()[:1],
        reps=3,
        log=lines.append,
    )
    assert lines[0] == "ceilings: matmul 900.0 TFLOP/s, copy 3.00 TB/s"
    assert [r["impl"] for r in record["forward"]] == bench.PEERS
    prior = record["prior_regime"]
    assert [r["impl"] for r in prior] == [i for i in bench.PEERS if i != "sdpa_math"]
    assert all(r["samples_kept"] and "graph_timing" in r for r in prior)
    decode = record["decode"]
    assert [r["impl"] for r in decode] == bench.DECODE_PEERS
    for r in decode:  # K + V bytes over the eager and the replayed time
        assert r["tbps"] == pytest.approx(bench.kv_bytes(r) / 0.5e-3 / 1e12)
        assert r["graph_tbps"] == pytest.approx(2 * r["tbps"])
    assert len(lines) == 1 + len(record["forward"]) + len(prior) + len(decode)
    assert "decode" not in bench.run_perf_record(forward, decode=None)


def test_fp8_record_times_with_the_tuned_config(monkeypatch):
    from flashcore.studies import fp8_study as F

    def error_rows(dist, **kw):
        return [
            {"dist": dist, "causal": kw["causal"], "S": kw["seqlen"], "impl": "fp8_naive",
             "rmse": 0.1, "max_err": 0.2, "baselines": kw["baselines"]}
        ]  # fmt: skip

    def tune_fp8(shape, configs):  # the fastest config differs between causal modes
        fastest = 3 if shape["causal"] else 5
        return [
            {**shape, "config": c, "median_ms": 1.0 + abs(i - fastest)}
            for i, c in enumerate(configs)
        ]

    timed = []
    monkeypatch.setattr(F, "error_rows", error_rows)
    monkeypatch.setattr(F, "tune_fp8", tune_fp8)
    monkeypatch.setattr(
        F,
        "bench_fp8",
        lambda shapes, config, reps: (
            timed.append((shapes[0]["causal"], config))
            or [{**shapes[0], "impl": "fp8_per_block", "tflops": 1.0}]
        ),
    )
    record = F.run_fp8_record(dists=("normal",), seqlens=(64,), heads=1, seeds=1, device="cuda")
    best = {False: F.FP8_TUNING_CONFIGS[5], True: F.FP8_TUNING_CONFIGS[3]}
    assert record["tuned_config"] == {"False": best[False], "True": best[True]}
    assert timed and all(config == best[causal] for causal, config in timed[: len(F.fp8_shapes())])
    assert all(config is None for _, config in timed[len(F.fp8_shapes()) :])  # D256: own table
    assert len(record["speed"]) == len(F.default_speed_shapes())
    assert record["error_shape"] == dict(B=1, H=1, D=128, S=[64], seeds=1)
    assert record["errors"][0]["baselines"] == ("bfloat16", "float16")

    timed.clear()
    quick = F.run_fp8_record(
        dists=("normal",), seqlens=(64,), device="cuda", tune=False,
        speed_shapes=F.fp8_shapes((4096,)),
    )  # fmt: skip
    assert "tuned_config" not in quick and timed == [(False, None), (True, None)]
    cpu = F.run_fp8_record(dists=("normal",), seqlens=(64,), device="cpu")
    assert "speed" not in cpu and cpu["errors"][0]["baselines"] == ("float16",)


def test_long_record_parts(monkeypatch):
    from flashcore.studies import long_context as L

    def sweep(seqlens, **kw):
        rows = [
            {"S": s, "impl": "flashcore", "causal": c, "timing": {"median_ms": (s / 1024) ** 2}}
            for s in seqlens
            for c in (False, True)
        ]
        for r in rows:
            kw["progress"](r | {"tflops": 1.0, "extra_bytes": 0})
        return rows

    monkeypatch.setattr(L, "bench_long_context", sweep)
    lines = []
    record = L.run_long_record([8192, 16384, 32768], heads=2, parts=["sweep"], log=lines.append)
    assert set(record) == {"sweep", "sweep_shape", "slopes"}
    assert record["slopes"]["flashcore causal=True"] == pytest.approx(2.0)
    assert record["sweep_shape"]["H"] == 2 and len(lines) == 6 + 1
    with pytest.raises(ValueError, match="unknown parts"):
        L.run_long_record([1024], parts=["sweep", "offset"])


def test_launch_record_names_its_method(monkeypatch):
    from flashcore.studies import launch

    seen = {}
    monkeypatch.setattr(launch, "measure", lambda **kw: seen.update(kw) or [])
    record = launch.run_launch_record(calls=100, repeats=3)
    assert seen == {"calls": 100, "repeats": 3, "replays": 200}
    assert record["calls"] == 100 and "100 back-to-back calls" in record["method"]


def test_backward_options_reach_the_record_builder(monkeypatch, capsys):
    from flashcore.studies import backward_bench

    seen = {}
    monkeypatch.setattr(
        backward_bench, "run_backward_record", lambda **kw: seen.update(kw) or {"summary": {}}
    )
    status, _, _ = run(
        ["backward", "--grid", "none", "--flex-d", "128", "--tune-s", "8192"], capsys
    )
    assert status == 0
    assert seen["grid"] == "none" and seen["flex_head_dims"] == [128]
    assert seen["tune_seqlens"] == [8192] and seen["head_dims"] == [64, 128, 256]
    assert seen["seqlens"] == [2048, 4096, 8192, 16384] and seen["dtypes"] == ["bfloat16"]


def test_paged_decode_record(monkeypatch):
    """bench --suite paged: each row's K+V bandwidth over the copy ceiling and over the dense
    row's; the pools the study builds read back as the dense caches through their table."""
    import torch

    from flashcore.studies import bench
    from flashcore.studies import paged_decode as P

    def fake_rows(shape, reps):
        times = {"dense": 1.0, "paged_16": 2.0, "paged_64": 1.0}
        kv = 2 * shape["B"] * shape["Hkv"] * shape["Sk"] * shape["D"] * 2
        rows = [
            dict(shape, impl=i, graph_timing={"median_ms": t}, tbps=kv / t / 1e9)
            for i, t in times.items()
        ]
        return rows + [dict(shape, impl="fa4_paged_16", error="ImportError: none")]

    monkeypatch.setattr(bench, "copy_ceiling", lambda: {"tbps": 2 * 8192 * 8 * 128 * 2 / 1e9})
    monkeypatch.setattr(P, "bench_paged_shape", fake_rows)
    lines = []
    record = P.run_paged_decode_record(P.paged_decode_shapes(quick=True)[:1], log=lines.append)
    rows = {r["impl"]: r for r in record["rows"]}
    assert rows["dense"]["of_copy"] == pytest.approx(1.0)
    assert rows["paged_16"]["vs_dense"] == pytest.approx(0.5)
    assert rows["paged_64"]["vs_dense"] == pytest.approx(1.0)
    assert "of_copy" not in rows["fa4_paged_16"] and lines[-1].endswith("ImportError: none")
    assert len(lines) == 1 + len(rows)

    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 3, 64, 4, generator=gen), torch.randn(2, 3, 64, 4, generator=gen)
    kp, vp, table = P._pools(k, v, 16, gen)
    for pool, dense in ((kp, k), (vp, v)):
        back = pool[table.long()].permute(0, 2, 1, 3, 4).reshape(k.shape)
        assert torch.equal(back, dense)
    assert sorted(table.flatten().tolist()) == list(range(8)) and table.tolist() != [
        list(range(4)),
        list(range(4, 8)),
    ]
