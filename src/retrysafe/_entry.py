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

from . import envvars

__all__ = ["main"]

#: the group's options that may come before ``step`` (each takes a value)
_GLOBAL_OPTIONS = ("--home", "--config", "--ledger")
#: the options of a plain command step; connector steps take the full CLI
_STEP_OPTIONS = ("--class", "--item", "--check", "--attempt")
#: set by the shell completion click installs: click then completes, whatever the arguments
_COMPLETE = "_RETRYSAFE_COMPLETE"


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


def _command(argv: list[str]) -> tuple[dict[str, str | None], str, list[str]] | None:
    """``[GLOBAL OPTIONS] status|history|run ...``: the global options (as ``home``,
    ``config``, ``ledger``), the command and its arguments; else ``None``."""
    at = next((i for i, a in enumerate(argv) if a in ("status", "history", "run")), None)
    flags = None if at is None else _options(argv[:at], _GLOBAL_OPTIONS)
    if at is None or flags is None:
        return None
    where = {"home": flags.get("--home"), "config": flags.get("--config"),
             "ledger": flags.get("--ledger")}
    return where, argv[at], argv[at + 1:]


def _plain_run(rest: list[str]) -> tuple[str, list[str], list[str]] | None:
    """``run``'s arguments in the plain form ``JOB [-p NAME=VALUE]... -- CMD...``: JOB,
    the parameters, CMD; else ``None`` (any other option, ``--json`` included)."""
    if "--" not in rest or rest[-1] == "--":
        return None  # no CMD after "--"
    sep = rest.index("--")
    params = [] if sep == 1 else _repeated(rest[1:sep], ("-p", "--param"))
    if sep == 0 or rest[0].startswith("-") or params is None:
        return None
    return rest[0], params, rest[sep + 1:]


def _outcome_text(where: dict[str, str | None], command: str, rest: list[str]) -> str | None:
    """What ``status KEY``, ``history KEY`` or a plain ``run`` prints when the answer is
    read from the ledger alone (the outcome is done), or ``None`` (any other form,
    ``--json`` included, takes the CLI)."""
    from . import donestep

    if command != "run":
        if len(rest) != 1 or rest[0].startswith("-"):
            return None
        read = donestep.status_text if command == "status" else donestep.history_text
        return read(rest[0], **where)
    plain = _plain_run(rest)
    if plain is None or any(name in os.environ for name in envvars.OPENCLAW_MARKS):
        return None  # a scheduler's re-run: its "already done" is recorded (cli/run.py)
    job, params, cmd = plain
    return donestep.done_outcome_line(job, params, cmd[0], **where)


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
        if not os.environ.get(_COMPLETE):
            try:
                _without_click(sys.argv[1:])
            except SystemExit as done:
                _leave(done)
                raise
        from .cli import main as cli_main

        _started()
        cli_main()
    finally:
        gc.freeze()


def _leave(done: SystemExit) -> None:
    """Exit with ``done``'s code now, when nothing but the interpreter's own teardown
    would run: no exit handler registered (OpenTelemetry's exporter, logging and the
    engine cache register one), no thread still to join, both streams flushed. The
    paths here close the ledger and their files themselves; the teardown, which
    only frees memory the process is about to give back, took milliseconds."""
    import atexit

    threading = sys.modules.get("threading")
    if (not isinstance(done.code, int) or getattr(atexit, "_ncallbacks", lambda: 1)()
            or (threading is not None and any(
                not t.daemon for t in threading.enumerate() if t is not threading.main_thread()))):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (AttributeError, OSError, ValueError):
        return  # the interpreter's exit reports it, as it always did
    os._exit(done.code)


def _without_click(argv: list[str]) -> None:
    """Answer a done step or outcome from the ledger, or run a plain ``run`` through
    :func:`retrysafe.cli.run.run_plain`, and exit; return when the full CLI must."""
    text = _done_step_evidence(argv)
    found = _command(argv) if text is None else None
    if text is not None:
        text += "\n"
    elif found is not None:
        text = _outcome_text(*found)
    if text is not None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            sys.exit(1)  # as the CLI exits when its reader went away (EXIT_FAILED)
        sys.exit(0)
    plain = _plain_run(found[2]) if found is not None and found[1] == "run" else None
    if found is not None and plain is not None:
        from .cli.run import run_plain  # the engine, without click

        _started()
        where = found[0]
        if where["home"] or where["config"] or where["ledger"]:
            from .location import name_given

            name_given(where["home"], where["config"], where["ledger"])
        # exits, unless the job catches up earlier occurrences: the CLI does that
        run_plain(*plain, home=where["home"], config=where["config"], ledger=where["ledger"])


def _started() -> None:
    """Start-up is over: keep what it built out of the collector's way, and collect
    again from here (a command may run long: a server, a loop, a supervised command)."""
    gc.freeze()
    gc.enable()
