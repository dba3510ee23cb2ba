"""The ``retrysafe`` executable.

Re-running a job re-runs every ``retrysafe step`` in it, and most of those
steps are already done. That answer is a single ledger read, so it is given
here without loading the command-line framework; everything else (and any
doubt) goes to the full CLI in :mod:`retrysafe.cli`, which gives the same
answer the same way, only slower.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]

_VALUE_OPTIONS = {"--class", "--item", "--check", "--attempt"}


def _done_step_evidence(argv: list[str]) -> str | None:
    """The evidence of a done command step named by ``argv``, or ``None`` to use the CLI.

    Only the plain form qualifies: ``step NAME [--class C] [--item I] [--check S]
    [--attempt ID] -- CMD...`` run inside a current attempt whose ledger URL is in
    the environment. Connector steps (payload fingerprints) always take the CLI.
    """
    if len(argv) < 4 or argv[0] != "step" or "--" not in argv:
        return None
    sep = argv.index("--")
    name, options = argv[1], argv[2:sep]
    if name.startswith("-") or len(options) % 2:
        return None
    values = dict(zip(options[::2], options[1::2], strict=True))
    if not set(values) <= _VALUE_OPTIONS or sep == len(argv) - 1:
        return None
    url = os.environ.get("RETRYSAFE_LEDGER")
    attempt_id = values.get("--attempt") or os.environ.get("RETRYSAFE_ATTEMPT_ID")
    if not url or not attempt_id or os.environ.get("RETRYSAFE_CRASH_AT"):
        return None
    from .keys import step_key
    from .ledger import open_ledger

    try:
        with open_ledger(url, auto_migrate=False) as ledger:
            attempt = ledger.attempt(attempt_id)
            if attempt is None or attempt.state != "active":
                return None
            skey = step_key(attempt.outcome_key, name, values.get("--item"))
            step = ledger.step(skey)
            if step is None or step.state != "done" or step.kind != "effect":
                return None
            out = ledger.outcome(attempt.outcome_key)
            if out is None or out.current_attempt != attempt.id:
                return None
    except Exception:  # noqa: BLE001 - any doubt: the full CLI decides and reports
        return None
    folder = os.environ.get("RETRYSAFE_ATTEMPT_DIR")
    if folder and os.path.isdir(folder):
        import time
        from pathlib import Path

        from .fsio import append_jsonl

        append_jsonl(Path(folder) / "log.jsonl", {
            "time": time.time(), "attempt_id": attempt.id, "step_key": skey,
            "action": "check", "result": "skip", "evidence": step.evidence,
        })
    return step.evidence or ""


def main() -> None:
    evidence = _done_step_evidence(sys.argv[1:])
    if evidence is not None:
        sys.stdout.write(evidence + "\n")
        sys.exit(0)
    from .cli import main as cli_main

    cli_main()
