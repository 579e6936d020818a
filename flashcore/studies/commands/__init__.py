"""The bodies of the ``python -m flashcore`` commands, one module per command group.

``flashcore/__main__.py`` ships with the library and holds only the table of commands; it
imports the module of the command it runs, and no other. Each module here defines, for
each of its commands ``X``, ``add_X_arguments(parser)`` (the command's options) and
``run_X(args) -> int`` (its body; the return value is the exit status). A record is built by
one function of a study module, the one the notebooks call too; a command parses its
arguments, calls that function, prints, and writes the record when asked (``--record``).

Groups: ``correctness`` (validate, sanitize, varlen), ``perf`` (bench, tune, launch),
``constant_time`` (sass, leak), ``fp8``, ``long``, ``e2e``, ``backward``, ``cp``.
"""

from __future__ import annotations


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def progress(total, desc):
    """A progress bar over ``total`` steps (``bar.update(n)``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, mininterval=2.0)


def progress_iter(items, desc, mininterval=2.0):
    """``items``, with a progress bar."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, mininterval=mininterval)


def causal_choice(text):
    return {"both": (False, True), "yes": (True,), "no": (False,)}[text]
