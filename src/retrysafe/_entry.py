"""The ``retrysafe`` executable.

Re-running a job re-runs every ``retrysafe step`` in it, and most of those
steps are already done. That answer comes from :mod:`retrysafe.donestep`, so
it is given here without loading the command-line framework; everything else
(and any doubt) goes to the full CLI in :mod:`retrysafe.cli`, whose ``step``
command asks :mod:`retrysafe.donestep` first: one answer either way.
"""

from __future__ import annotations

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


def main() -> None:
    evidence = _done_step_evidence(sys.argv[1:])
    if evidence is not None:
        sys.stdout.write(evidence + "\n")
        sys.exit(0)
    from .cli import main as cli_main

    cli_main()
