"""``retrysafe missed``: scheduled occurrences of a job that never reached ``done``."""

from __future__ import annotations

import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any

import click

from ..errors import EXIT_FAILED, ConfigError, InvalidInput
from ..keys import parse_assignments
from ..schedule import Schedule
from ._common import emit_json, json_option, params_option, state, table

__all__ = ["missed"]

#: states of an occurrence that is not missed: done, or still in progress
_NOT_MISSED = frozenset({"done", "running", "generated", "delivered"})


def _instant(text: str, schedule: Schedule, what: str) -> datetime:
    """A date (midnight in the job's zone) or a date-time; naive ones in the job's zone."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=schedule.zone)
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{what} {text!r} is not a date (YYYY-MM-DD) or date-time") from None
    return value if value.tzinfo else value.replace(tzinfo=schedule.zone)


@click.command()
@click.argument("job_name", metavar="JOB")
@click.option("--since", required=True, metavar="DATE", help="First day to look at (job's zone).")
@click.option("--until", metavar="DATE", help="Last instant to look at (default: now).")
@params_option("The job's other parameters, if it has any besides the occurrence.")
@click.option("--all", "show_all", is_flag=True, help="List done occurrences too.")
@click.option("--fail-if-missing", is_flag=True,
              help="Exit 1 when an occurrence is missed (for monitoring); default: exit 0.")
@json_option
def missed(
    job_name: str, since: str, until: str | None, params: tuple[str, ...], show_all: bool,
    fail_if_missing: bool, as_json: bool
) -> None:
    """List the scheduled occurrences of JOB since DATE that are not done.

    Each line gives the occurrence, its outcome key and what the ledger knows
    (missing: never ran). Backfill one with the line printed at the end.
    With --fail-if-missing, exit 1 when an occurrence never ran or did not
    get done (one still in progress does not count).

    \b
    Example:
      retrysafe missed weekly-ops-report --since 2026-11-01
      retrysafe run weekly-ops-report -p occurrence=2026-11-09T0700 -- ./send-report.sh
    """
    engine = state().engine
    job = engine.config.job(job_name)
    occurrence_params = [n for n, t in job.params.items() if t == "occurrence"]
    if not job.schedule or not occurrence_params:
        raise ConfigError(f"job {job_name!r} has no schedule and occurrence parameter to backfill")
    name = occurrence_params[0]
    schedule = Schedule.parse(job.schedule, job.tz)
    start = _instant(since, schedule, "--since")
    end = _instant(until, schedule, "--until") if until else datetime.now(UTC)
    if until and len(until) == 10:
        end += timedelta(days=1) - timedelta(microseconds=1)  # the whole last day
    given = parse_assignments(params)
    rows: list[dict[str, Any]] = []
    for occ in schedule.between(start, end):
        text = schedule.format(occ)
        _, key, _ = engine.outcome_key(job_name, {**given, name: text})
        out = engine.ledger.outcome(key)
        status = out.state if out else "missing"
        if show_all or status != "done":
            rows.append(
                {"occurrence": text, "key": key, "state": status, "reason": out.reason if out else ""}
            )
    if job.notify is not None:  # each missed occurrence is notified once; never raises
        from ..notify import notify_missed

        notify_missed(engine.ledger, job, rows, given, name)
    code = EXIT_FAILED if fail_if_missing and any(r["state"] not in _NOT_MISSED for r in rows) else 0
    if as_json:
        emit_json(rows)
        sys.exit(code)
    if not rows:
        click.echo(f"nothing missed: every occurrence of {job_name} since {since} is done")
        return
    table(["occurrence", "key", "state"], [(r["occurrence"], r["key"], r["state"]) for r in rows])
    first = next((r for r in rows if r["state"] != "done"), None)
    if first:
        from shlex import quote

        extra = "".join(f" -p {quote(f'{k}={v}')}" for k, v in given.items())
        occurrence = quote(f"{name}={first['occurrence']}")
        click.echo(f"backfill: retrysafe run {quote(job_name)}{extra} -p {occurrence} -- CMD")
    sys.exit(code)
