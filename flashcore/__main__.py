"""Command line: ``python -m flashcore <command> ...`` (``--help`` lists the commands).

This module ships with the library and stays thin: a table of commands, each with a one-line
description and the lab module that holds its options and its body
(``flashcore/studies/commands/``). Only the module of the command being run is imported, so
``--help`` and ``info`` work where the lab is absent; the wheel ships the library alone, and
every other command needs a checkout of the repository.

On a machine without a GPU, the commands that run kernels switch Triton to its interpreter
(TRITON_INTERPRET=1) before the kernels are imported; use ``--grid cpu`` where there is a grid.
Context parallelism runs one process per device: ``torchrun --nproc-per-node 2 -m flashcore
cp check``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NamedTuple


class Command(NamedTuple):
    help: str
    module: str | None  # under flashcore.studies.commands; None: ``info``, defined here
    interpreter: bool  # without CUDA, set TRITON_INTERPRET=1 before the kernels are imported


# Every command, in the order --help lists them. ``sass`` compiles for sm_90 and must not run
# in the interpreter; bench, tune, leak and sanitize need a GPU (sanitize starts its own
# processes).
COMMANDS = {
    "info": Command("print the device, the library versions and the forward dispatch", None, True),
    "validate": Command("run a correctness grid against float64", "correctness", True),
    "sanitize": Command(
        "compute-sanitizer memcheck/racecheck over a sample grid (GPU)", "correctness", False
    ),
    "bench": Command("time flashcore beside SDPA backends and FlexAttention (GPU)", "perf", False),
    "tune": Command("sweep launch configs of the forward kernel (GPU)", "perf", False),
    "sass": Command(
        "compile for sm_90 offline and classify branches (no GPU needed)", "constant_time", False
    ),
    "leak": Command(
        "dudect timing-leak test of the kernels and the leaky controls (GPU)",
        "constant_time",
        False,
    ),
    "e2e": Command(
        "transformers Llama check: logits under the rule, greedy tokens, tokens/s", "e2e", True
    ),
    "models": Command(
        "gpt-oss and DeepSeek-V3 through flashcore: fp32 checks under the rule; generation "
        "tokens/s beside their default attention (GPU)",
        "e2e",
        True,
    ),
    "launch": Command("host cost per call and graph replay vs SDPA backends (GPU)", "perf", True),
    "varlen": Command(
        "varlen correctness grid vs float64 (any machine), speed (GPU)", "correctness", True
    ),
    "fp8": Command(
        "FP8 study: errors vs float64 over seeds; tuning and speed on a GPU", "fp8", True
    ),
    "long": Command(
        "long-context study: S sweep to 1M, window, 2^31 offsets, long decode (GPU)", "long", True
    ),
    "cp": Command(
        "context parallelism (run under torchrun --nproc-per-node N): "
        "check against float64, bench on GPUs",
        "cp",
        True,
    ),
    "backward": Command(
        "backward pass: gradient grid vs float64, determinism, memory, "
        "speed beside SDPA/Flex, training step (GPU; --grid cpu on CPU)",
        "backward",
        True,
    ),
    "records": Command(
        "list every record with its commit, date, kernel fingerprint and whether today's "
        "kernels still match it; --summary writes results/SUMMARY.md",
        "records",
        False,
    ),
}

LAB_MISSING = (
    "python -m flashcore {name}: this command runs the lab (flashcore/studies/), which is not "
    "installed with the flashcore package. Run it from a checkout of the repository "
    "(git clone, then pip install -e . in it). `python -m flashcore info` works without it."
)


def _ensure_backend() -> None:
    # The interpreter flag is read when @triton.jit decorates, i.e. at import of the kernels.
    if "flashcore.kernels.forward" in sys.modules:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def run_info(_args) -> int:
    from .results import provenance

    for key, value in provenance().items():
        print(f"{key:>18}: {value}")
    from .interface import describe_backward_dispatch, describe_dispatch, describe_fp8_dispatch

    print(f"{'forward dispatch':>18}: {describe_dispatch()}")
    print(f"{'fp8 dispatch':>18}: {describe_fp8_dispatch()}")
    print(f"{'backward dispatch':>18}: {describe_backward_dispatch()}")
    # The record the backward line cites, and whether it measured today's kernels (the lab
    # and the results/ folder are absent from an installed package: nothing to say then).
    try:
        from .dispatch import BACKWARD_TABLES_RECORD
        from .studies.records import status_line_for

        print(f"{'':>18}  {status_line_for(*BACKWARD_TABLES_RECORD)}")
    except (ModuleNotFoundError, FileNotFoundError):
        pass
    return 0


def lab_commands(group: str):
    """The lab's module for a command group, or None where the lab is not installed."""
    try:
        return importlib.import_module(f"flashcore.studies.commands.{group}")
    except ModuleNotFoundError as exc:
        if exc.name in ("flashcore.studies", "flashcore.studies.commands"):
            return None
        raise


def parser() -> tuple[argparse.ArgumentParser, dict]:
    """The top-level parser and one subparser per command (options not yet added)."""
    top = argparse.ArgumentParser(
        prog="flashcore", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="command")
    subs = {
        name: sub.add_parser(name, help=c.help, description=c.help) for name, c in COMMANDS.items()
    }
    return top, subs


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    top, subs = parser()
    name = argv[0] if argv else None
    command = COMMANDS.get(name)
    run = run_info
    if command is not None and command.module is not None:
        module = lab_commands(command.module)
        if module is None:
            print(LAB_MISSING.format(name=name), file=sys.stderr)
            return 2
        getattr(module, f"add_{name}_arguments")(subs[name])
        run = getattr(module, f"run_{name}")
    args = top.parse_args(argv)  # --help, an unknown command or a bad option exit here
    if command.interpreter:
        _ensure_backend()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
