"""A worker that will be frozen (SIGSTOP) while holding an attempt.

Run as ``python zombie_child.py HOME LEDGER_URL EFFECTS_URL FOLDER WHEN`` where
WHEN is ``before-effect`` (frozen right after claiming) or ``after-effect``
(frozen after the effect happened, before it is recorded). It writes
``FOLDER/ready`` when it reaches that point, then waits for ``FOLDER/go``.
The last stdout line is JSON: how many effects this process executed and the
error that ended it. Exit 75 when its writes were refused as stale.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pg_worker import Effects

import retrysafe
from retrysafe.errors import RetrysafeError


def pause_here(folder: Path) -> None:
    (folder / "ready").write_text("ready")
    while not (folder / "go").exists():
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    home, ledger, effects_url, folder_name, when = argv
    folder = Path(folder_name)
    effects = Effects(effects_url)
    executed = 0

    def execute(step_key: str) -> str:
        nonlocal executed
        evidence = effects.execute(step_key)
        executed += 1
        if when == "after-effect":
            pause_here(folder)
        return evidence

    try:
        # the heartbeat runs: only a frozen process lets its lease expire
        with retrysafe.start("race", {"n": "1"}, home=home, ledger=ledger) as run:
            if when == "before-effect":
                pause_here(folder)
            run.effect("send", "message", execute=execute, lookup=effects.lookup)
    except RetrysafeError as exc:
        print(json.dumps({"executed": executed, "error": type(exc).__name__,
                          "message": str(exc)}))
        return exc.exit_code
    print(json.dumps({"executed": executed, "error": None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
