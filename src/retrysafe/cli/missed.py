"""``retrysafe missed``: scheduled occurrences of a job that never reached ``done``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from ..ages import parse_age
from ..errors import EXIT_BLOCKED, EXIT_BUSY, EXIT_DONE, EXIT_FAILED, InvalidInput, command_line
from ..keys import parse_assignments
from ..missed import GRACE
from ..schedule import Schedule
from ._common import emit_json, json_option, params_option, state, table

__all__ = ["missed"]

#: states of an occurrence that is not missed: done, still in progress, or due moments ago
_NOT_MISSED = frozenset({"done", "running", "generated", "delivered", "due"})
#: states --run finishes: never ran, or ended without the work done and no human needed
_RUNNABLE = frozenset({"missing", "planned", "failed", "unknown", "settled"})
_RELATIVE = re.compile(r"^[0-9]+[smhdw]$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GRACE_TEXT = f"{int(GRACE.total_seconds()) // 60}m"


def _instant(text: str, schedule: Schedule, what: str) -> datetime:
    """A date (midnight in the job's zone), a date-time (naive: in the job's zone), or an
    age back from now (``30d``, ``12h``)."""
    try:
        if _RELATIVE.match(text.strip()):
            value = datetime.now(UTC) - timedelta(seconds=parse_age(text.strip(), what))
        elif len(text) == 10:
            day = date.fromisoformat(text)
            value = datetime(day.year, day.month, day.day, tzinfo=schedule.zone)
        else:
            value = datetime.fromisoformat(text)
            value = value if value.tzinfo else value.replace(tzinfo=schedule.zone)
        value = value.astimezone(UTC)
    except ValueError:
        raise InvalidInput(
            f"{what} {text!r} is not a date (YYYY-MM-DD), a date-time or an age (30d)"
        ) from None
    except OverflowError:
        raise InvalidInput(f"{what} {text!r} is out of range") from None
    if value < _EPOCH:
        raise InvalidInput(f"{what} {text!r} is before 1970: no occurrence to look at there")
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@click.option("--since", required=True, metavar="DATE",
              help="First day to look at (job's zone), or an age back from now (30d).")
@click.option("--until", metavar="DATE", help="Last instant to look at (default: now).")
@params_option("The job's other parameters, if it has any besides the occurrence.")
@click.option("--grace", metavar="AGE",
              help="An occurrence due less than AGE ago that never ran is due, not missed: its "
                   f"run may be starting (default {_GRACE_TEXT}; 0: none).")
@click.option("--all", "show_all", is_flag=True, help="List done and due occurrences too.")
@click.option("--fail-if-missing", is_flag=True,
              help="Exit 1 when an occurrence is missed (for monitoring); default: exit 0.")
@click.option("--run", "run_them", is_flag=True,
              help="Run CMD for each occurrence that never ran or ended failed/unknown, oldest first.")
@json_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def missed(
    job_name: str, since: str, until: str | None, grace: str | None, params: tuple[str, ...],
    show_all: bool, fail_if_missing: bool, run_them: bool, as_json: bool, cmd: tuple[str, ...]
) -> None:
    """List the scheduled occurrences of JOB since DATE that are not done.

    Each line gives the occurrence, its outcome key and what the ledger knows
    (missing: never ran). One that never ran but is due within the --grace
    is left out (--all lists it as due): the scheduler's run may be starting.
    Backfill one with the line printed at the end.
    With --fail-if-missing, exit 1 when an occurrence never ran or did not
    get done (one still in progress does not count).

    With --run, 'retrysafe run' finishes each occurrence that never ran or
    ended failed or unknown, oldest first, each under its own key (blocked
    ones wait for a person; a live run elsewhere is left alone). Exit 0 when
    every one is done, 3 when one is blocked, 1 otherwise.

    \b
    Example:
      retrysafe missed weekly-ops-report --since 2026-11-01
      retrysafe run weekly-ops-report -p occurrence=2026-11-09T0700 -- ./send-report.sh
      retrysafe missed weekly-ops-report --since 30d --run -- ./send-report.sh
    """
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if run_them and not cmd:
        raise click.UsageError("--run needs the command to run after '--'")
    if cmd and not run_them:
        raise click.UsageError(f"unexpected argument {cmd[0]!r} (to run the missed ones: --run -- CMD)")
    if run_them and as_json:
        raise click.UsageError("--run and --json cannot be combined")
    from ..missed import missed_occurrences, occurrence_param

    grace_age = GRACE
    if grace is not None:
        grace_age = timedelta(seconds=0 if grace.strip() == "0" else parse_age(grace, "--grace"))
    engine = state().engine
    job = engine.config.job(job_name)
    name, schedule = occurrence_param(engine, job_name)
    now = datetime.now(UTC)
    start = _instant(since, schedule, "--since")
    if start > now:
        raise InvalidInput(f"--since {since!r} is in the future: an occurrence not due yet "
                           "is not missed")
    end = now
    if until:
        end = _instant(until, schedule, "--until")
        if start > end:
            raise InvalidInput(f"--since {since!r} is after --until {until!r}")
        if end > now:  # not due yet is not missed (and --run must not do it ahead of time)
            click.echo(f"retrysafe: --until {until!r} is in the future: looking until now",
                       err=True)
            end = now
        elif len(until) == 10:  # the whole last day, up to now
            end = min(end + timedelta(days=1) - timedelta(microseconds=1), now)
    given = parse_assignments(params)
    found = missed_occurrences(engine, job_name, start, end, given, show_all=True,
                               due_after=now - grace_age)
    rows: list[dict[str, Any]] = [
        {"occurrence": r.occurrence, "key": r.key, "state": r.state, "reason": r.reason}
        for r in found if show_all or r.state not in ("done", "due")]
    if job.notify is not None:  # each missed occurrence is notified once; never raises
        from ..notify import notify_missed

        notify_missed(engine.ledger, job, rows, given, name)
    code = EXIT_FAILED if fail_if_missing and any(r["state"] not in _NOT_MISSED for r in rows) else 0
    if as_json:
        emit_json(rows)
        sys.exit(code)
    if run_them:
        sys.exit(_run_missed(engine.home, job_name, given, name, rows, cmd))
    if not found:
        click.echo(f"no occurrence of {job_name} between {schedule.format(start)} and "
                   f"{schedule.format(end)} ({schedule.zone.key})")
        return
    if not rows:
        upto = f" until {until}" if until else ""
        due = (f" or due less than {(grace or _GRACE_TEXT).strip()} ago (--all lists those)"
               if any(r.state == "due" for r in found) else "")
        click.echo(f"nothing missed: every occurrence of {job_name} since {since}{upto} is done{due}")
        return
    table(["occurrence", "key", "state"], [(r["occurrence"], r["key"], r["state"]) for r in rows])
    first = next((r for r in rows if r["state"] not in ("done", "due")), None)
    if first:
        from shlex import quote

        extra = "".join(f" -p {quote(f'{k}={v}')}" for k, v in given.items())
        occurrence = quote(f"{name}={first['occurrence']}")
        click.echo(f"backfill: retrysafe run {quote(job_name)}{extra} -p {occurrence} -- CMD")
    sys.exit(code)


def _run_missed(
    home: Path, job_name: str, given: dict[str, str], name: str,
    rows: list[dict[str, Any]], cmd: tuple[str, ...],
) -> int:
    """Run CMD for each runnable row, oldest first, through this retrysafe; the exit code."""
    from .openclaw import _bin_dir, _retrysafe_argv

    todo = [r for r in rows if r["state"] in _RUNNABLE]
    waiting = [r for r in rows if r["state"] == "blocked"]
    env = dict(os.environ)
    bin_dir = _bin_dir()
    if bin_dir is not None:  # nested 'retrysafe step' calls find this installation
        env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    extra = [a for k, v in given.items() for a in ("-p", f"{k}={v}")]
    # the runs use this one's home, config and ledger, however they were given
    options = state()
    where = ["--home", str(home.resolve())]
    if options.config:
        where += ["--config", str(Path(options.config).resolve())]
    if options.ledger:
        where += ["--ledger", options.ledger]
    counts = {"done": 0, "blocked": 0, "busy": 0, "not done": 0}
    for row in todo:
        click.echo(f"run: {row['key']} ({row['state']})", err=True)
        sys.stdout.flush()
        # each occurrence alone: the job's catch_up would run the earlier ones again
        argv = [*_retrysafe_argv(), *where, "run", job_name, *extra,
                "-p", f"{name}={row['occurrence']}", "--no-catch-up", "--", *cmd]
        code = subprocess.run(argv, env=env, check=False).returncode
        if code == EXIT_DONE:
            counts["done"] += 1
        elif code == EXIT_BLOCKED:
            counts["blocked"] += 1
        elif code == EXIT_BUSY:
            counts["busy"] += 1  # another live run is doing it; not ours to repeat
        else:
            counts["not done"] += 1
    for row in waiting:
        click.echo(f"blocked: {row['key']} waits for a person: {command_line('status', row['key'])}",
                   err=True)
    click.echo(
        f"missed --run: {len(todo)} run, {counts['done']} done, {counts['blocked'] + len(waiting)} "
        f"blocked, {counts['not done']} not done, {counts['busy']} busy elsewhere"
    )
    if counts["blocked"] or waiting:
        return EXIT_BLOCKED
    return EXIT_FAILED if counts["not done"] else EXIT_DONE
