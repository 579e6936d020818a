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
