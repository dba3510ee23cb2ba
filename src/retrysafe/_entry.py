"""The ``retrysafe`` executable.

Re-running a job re-runs every ``retrysafe step`` in it, and most of those
steps are already done; a cron line re-runs ``retrysafe run JOB -p ... -- CMD``
on an outcome that is already done; ``status`` and ``history`` only read.
Those answers come from :mod:`retrysafe.donestep` (the text of ``status`` and
``history`` from :mod:`retrysafe.readout`, which the full commands print too),
so they are given here without loading the command-line framework or the
engine; everything else (and any doubt) goes to the full CLI in
:mod:`retrysafe.cli`, whose ``step`` command asks :mod:`retrysafe.donestep`
first: one answer either way.
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["main"]

#: the group's options that may come before ``step`` (each takes a value)
_GLOBAL_OPTIONS = ("--home", "--config", "--ledger")
#: the options of a plain command step; connector steps take the full CLI
_STEP_OPTIONS = ("--class", "--item", "--check", "--attempt")


def _options(tokens: list[str], known: tuple[str, ...]) -> dict[str, str] | None:
    """``--opt VALUE`` / ``--opt=VALUE`` pairs, each known and given once; else ``None``."""
    values: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        opt, eq, value = tokens[i].partition("=")
        if not eq:
            if i + 1 == len(tokens):
                return None
            i, value = i + 1, tokens[i + 1]
        if opt not in known or opt in values:
            return None
        values[opt] = value
        i += 1
    return values


def _done_step_evidence(argv: list[str]) -> str | None:
    """The evidence of a done command step named by ``argv``, or ``None`` to use the CLI.

    Only the plain form qualifies: ``[--home H] [--config F] [--ledger URL] step
    NAME [--class C] [--item I] [--check S] [--attempt ID] -- CMD...``.
    """
    if "step" not in argv or "--" not in argv:
        return None
    at, sep = argv.index("step"), argv.index("--")
    if not at < sep - 1 < len(argv) - 2:
        return None  # no NAME before "--" or no CMD after it
    flags = _options(argv[:at], _GLOBAL_OPTIONS)
    name, values = argv[at + 1], _options(argv[at + 2:sep], _STEP_OPTIONS)
    if flags is None or values is None or name.startswith("-") or "--class" not in values:
        return None
    from .donestep import done_step_evidence

    return done_step_evidence(
        name, values["--class"], item=values.get("--item"), attempt_id=values.get("--attempt"),
        home=flags.get("--home"), config=flags.get("--config"), ledger=flags.get("--ledger"),
    )


def _outcome_text(argv: list[str]) -> str | None:
    """What ``[GLOBAL OPTIONS] status KEY``, ``history KEY`` or ``run JOB [-p N=V]... --
    CMD...`` prints when the answer is read from the ledger alone, or ``None``
    (any other form, ``--json`` included, takes the CLI)."""
    at = next((i for i, a in enumerate(argv) if a in ("status", "history", "run")), None)
    flags = None if at is None else _options(argv[:at], _GLOBAL_OPTIONS)
    if at is None or flags is None:
        return None
    where = {"home": flags.get("--home"), "config": flags.get("--config"),
             "ledger": flags.get("--ledger")}
    command, rest = argv[at], argv[at + 1:]
    from . import donestep

    if command != "run":
        if len(rest) != 1 or rest[0].startswith("-"):
            return None
        read = donestep.status_text if command == "status" else donestep.history_text
        return read(rest[0], **where)
    if "--" not in rest or rest[-1] == "--":
        return None  # no CMD after "--"
    if any(name in os.environ for name in _OPENCLAW_MARKS):
        return None  # a scheduler's re-run: its "already done" is recorded (cli/run.py)
    sep = rest.index("--")
    params = [] if sep == 1 else _repeated(rest[1:sep], ("-p", "--param"))
    if sep == 0 or rest[0].startswith("-") or params is None:
        return None
    return donestep.done_outcome_line(rest[0], params, rest[sep + 1], **where)


_OPENCLAW_MARKS = ("OPENCLAW_SHELL", "OPENCLAW_CLI", "OPENCLAW_GATEWAY_PORT", "OPENCLAW_STATE_DIR")
"""What OpenClaw sets in what it starts (openclaw/context.py reads the same names)."""


def _repeated(tokens: list[str], names: tuple[str, ...]) -> list[str] | None:
    """The values of ``NAME VALUE`` / ``--long=VALUE`` pairs, each NAME one of
    ``names`` (repeatable); else ``None``."""
    values, i = [], 0
    while i < len(tokens):
        opt, eq, value = tokens[i].partition("=") if tokens[i].startswith("--") else (
            tokens[i], "", "")
        if opt not in names or (not eq and i + 1 == len(tokens)):
            return None
        if not eq:
            i, value = i + 1, tokens[i + 1]
        values.append(value)
        i += 1
    return values


def main() -> None:
    # The collector is off while the process starts (imports, one ledger read: nothing
    # worth collecting); what start-up built is then frozen, so neither a later
    # collection nor the interpreter's last one at exit walks it again.
    gc.disable()
    try:
        _main(sys.argv[1:])
    finally:
        gc.freeze()


def _main(argv: list[str]) -> None:
    text = _done_step_evidence(argv)
    text = text + "\n" if text is not None else _outcome_text(argv)
    if text is not None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            sys.exit(1)  # as the CLI exits when its reader went away (EXIT_FAILED)
        sys.exit(0)
    from .cli import main as cli_main

    _started()
    cli_main()


def _started() -> None:
    """Start-up is over: keep what it built out of the collector's way, and collect
    again from here (a command may run long: a server, a loop, a supervised command)."""
    gc.freeze()
    gc.enable()
