"""Wall time of the everyday commands against a bare interpreter start.

Timed, interleaved with ``python -c pass`` on the same interpreter (cached
bytecode, as an installed package has):

* ``retrysafe run bench -p run=done -- true`` on an outcome that is already
  done (a re-run of a cron line);
* ``retrysafe status bench:done`` and ``retrysafe history bench:done``;
* the same two on ``bench:agent``, an outcome an agent drove: claimed by
  ``retrysafe begin``, finished by ``retrysafe close`` (the ledger named by
  ``RETRYSAFE_HOME`` alone, as everywhere here);
* ``retrysafe run bench -p run=N -- true`` on a new outcome each time (claim,
  the command, close-out).

Targets (issue "performance"): run on a done outcome, status and history (both
outcomes) under 4x ``python -c pass``, a new outcome under 6x. With ``--full``
run (done), status and history are also timed through the full command line
(``retrysafe.cli.main``, no fast path), in the same rounds.

    python bench/cli_latency.py [--runs 20] [--full]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import log, machine, median, paired_ratio, verdict, write_json  # noqa: E402
from skip_latency import CONFIG, agent_attempt, child_env, retrysafe_cmd, timed  # noqa: E402

TARGETS = {"run_done": 4.0, "status": 4.0, "history": 4.0, "status_begin": 4.0,
           "history_begin": 4.0, "run_new": 6.0}
LABELS = {"run_done": "`retrysafe run JOB -- true`, outcome done",
          "status": "`retrysafe status KEY`", "history": "`retrysafe history KEY`",
          "status_begin": "`retrysafe status KEY`, outcome begun by `retrysafe begin`",
          "history_begin": "`retrysafe history KEY`, outcome begun by `retrysafe begin`",
          "run_new": "`retrysafe run JOB -- true`, new outcome"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per command (default 20)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--full", action="store_true",
                    help="also time run (done), status and history through the full CLI")
    ap.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="retrysafe-cli-"))
    try:
        home = work / "home"
        home.mkdir()
        (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
        env = child_env(home, "", work / "pycache")
        del env["RETRYSAFE_ATTEMPT_ID"]
        rs = retrysafe_cmd()
        timed([*rs, "run", "bench", "-p", "run=done", "--", "true"], env)
        agent = agent_attempt(home, work / "pycache")  # bench:agent, begun as an agent does
        timed([*rs, "close", "bench:agent", "--attempt", agent], env)
        counter = iter(range(1_000_000))

        def new_outcome() -> list[str]:
            return [*rs, "run", "bench", "-p", f"run=n{next(counter)}", "--", "true"]

        commands: dict[str, Any] = {
            "run_done": lambda: [*rs, "run", "bench", "-p", "run=done", "--", "true"],
            "status": lambda: [*rs, "status", "bench:done"],
            "history": lambda: [*rs, "history", "bench:done"],
            "status_begin": lambda: [*rs, "status", "bench:agent"],
            "history_begin": lambda: [*rs, "history", "bench:agent"],
            "run_new": new_outcome,
            "bare": lambda: [sys.executable, "-c", "pass"],
        }
        full = [sys.executable, "-c", "import sys; from retrysafe.cli import main; main(sys.argv[1:])"]
        if args.full:
            commands.update({
                "run_done_full": lambda: [*full, "run", "bench", "-p", "run=done", "--", "true"],
                "status_full": lambda: [*full, "status", "bench:done"],
                "history_full": lambda: [*full, "history", "bench:done"],
            })
        for _ in range(args.warmup):
            for make in commands.values():
                timed(make(), env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.runs):
            names = list(commands)
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                times[name].append(timed(commands[name](), env))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bare = median(times["bare"]) * 1000
    result: dict[str, Any] = {"runs": args.runs, "bare_ms": bare, "commands": {},
                              "machine": machine()}
    print(f"CLI wall time, medians of {args.runs} interleaved runs (cached bytecode):")
    print(f"  python -c pass {bare:7.1f} ms")
    for name, target in TARGETS.items():
        ratio = paired_ratio(times[name], times["bare"])
        ms = median(times[name]) * 1000
        result["commands"][name] = {"label": LABELS[name], "ms": ms, "ratio": ratio,
                                    "target": target, "meets_target": ratio < target,
                                    "all_ms": [t * 1000 for t in times[name]]}
        print(f"  {name:<13} {ms:7.1f} ms  {ratio:5.1f}x  ({verdict(ratio, target, False)} "
              f"< {target:g}x)")
    for name in [n for n in times if n.endswith("_full")]:
        ratio = paired_ratio(times[name], times["bare"])
        ms = median(times[name]) * 1000
        result["commands"][name] = {"label": LABELS[name[:-5]] + ", full CLI", "ms": ms,
                                    "ratio": ratio, "all_ms": [t * 1000 for t in times[name]]}
        print(f"  {name:<14} {ms:7.1f} ms  {ratio:5.1f}x  (no fast path)")
    write_json(args.json, result)
    log("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
