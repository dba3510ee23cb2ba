"""The ``retrysafe run`` command: its options (click).

What it does (claim, run, close out, print, exit) is in :mod:`retrysafe.cli.run`,
which needs no click and which the executable calls directly for a plain
``retrysafe run JOB [-p ...] -- CMD``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

import click

from ..engine import Engine
from ..errors import EXIT_DONE
from ..keys import parse_assignments
from ._common import emit_json, json_option, params_option, reading_engine, state, table
from .run import catch_up_window, check_occurrence_due, run_context, run_job

if TYPE_CHECKING:
    from ..catchup import Window

__all__ = ["run"]


def _dry_run(engine: Engine, job_name: str, given: Mapping[str, str],
             window: Window | None, as_json: bool) -> NoReturn:
    """What the run would do, oldest first; nothing is run or recorded, and a home
    without a ledger yet is left without one."""
    from ..catchup import plan
    from .each import out_of_attempts

    spent = "stop (out of attempts)"  # the run blocks it, exit 3, for 'retrysafe retry KEY'
    with reading_engine(engine) as reader:
        caught = plan(reader, job_name, given, window) if window is not None else None
        params = caught.params if caught is not None else given
        job, key, _ = reader.outcome_key(job_name, params)
        out = reader.ledger.outcome(key)
        earlier = []
        for e in caught.earlier if caught is not None else ():
            would = "catch up" if e.runnable else "skip (blocked)"
            if e.runnable and out_of_attempts(reader.ledger.outcome(e.key), job.max_attempts):
                would = spent
            earlier.append({"occurrence": e.occurrence, "key": e.key, "state": e.state,
                            "action": would})
    now = out.state if out is not None else "missing"
    action = {"done": "nothing (done)", "blocked": "stop (blocked)"}.get(str(now), "run")
    if out_of_attempts(out, job.max_attempts):
        action = spent
    if as_json:
        emit_json({"dry_run": True, "job": job_name,
                   "window": window.text if window is not None else None,
                   "current": {"key": key, "state": now, "action": action},
                   "catch_up": earlier, "exit_code": EXIT_DONE})
    else:
        table(["key", "state", "action"],
              [*((e["key"], e["state"], e["action"]) for e in earlier), (key, now, action)])
    sys.exit(EXIT_DONE)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option("--openclaw-run-id", metavar="ID", help="Record OpenClaw's run id with the attempt.")
@click.option("--catch-up/--no-catch-up", "catch_up", default=None,
              help="First finish earlier occurrences that are not done (failed, unknown, never "
                   "ran), oldest first (default: the job's catch_up setting).")
@click.option("--catch-up-window", "window", metavar="WINDOW",
              help="How far back --catch-up looks from the current occurrence: an age (7d, "
                   "36h) or a number of occurrences (3). Implies --catch-up. Default: the "
                   "job's catch_up, else 7d.")
@click.option("--dry-run", is_flag=True,
              help="List what would run (earlier occurrences and the current one); run nothing.")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(job_name: str, params: tuple[str, ...], openclaw_run_id: str | None,
        catch_up: bool | None, window: str | None, dry_run: bool, as_json: bool,
        cmd: tuple[str, ...]) -> None:
    """Run CMD as the next attempt at JOB's outcome, unless it is already done.

    \b
    Done: says so, exits 0, does not run CMD.   Busy: exits 75.
    Blocked: exits 3 with the reason and the command that unblocks it.
    Otherwise CMD runs with RETRYSAFE_OUTCOME_KEY, RETRYSAFE_ATTEMPT_ID,
    RETRYSAFE_ATTEMPT_DIR... set; exit 0 leads to close-out. The attempt
    records CMD and the current folder, for 'retrysafe resume KEY'. With
    --json the result is one JSON object on stdout and CMD's output goes to
    stderr.

    With --catch-up (or the job's catch_up setting, for the run of the
    current occurrence), earlier occurrences inside the window that are not
    done run first, oldest first, each under its own key; blocked ones are
    reported, not run. The exit code is the current occurrence's; when that
    is 0, 3 if an earlier one ended blocked, 1 if one ended otherwise not done.

    \b
    Example:
      retrysafe run weekly-ops-report -p week=2026-W32 -- ./send-report.sh
      retrysafe run weekly-ops-report --catch-up -- ./send-report.sh
    """
    engine = state().engine
    given = parse_assignments(params)
    catch = catch_up_window(engine, job_name, given, catch_up, window)
    if dry_run:
        check_occurrence_due(engine, job_name, given)  # says what the run would: refused
        _dry_run(engine, job_name, given, catch, as_json)
    run_job(engine, job_name, given, cmd, context=run_context(openclaw_run_id), as_json=as_json,
            catch_up=catch)
