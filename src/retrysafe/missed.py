"""Scheduled occurrences of a job that never reached ``done``: what ``retrysafe
missed`` lists and what the dashboard's landing page shows under "missed".

An occurrence is a slot of the job's schedule (:mod:`retrysafe.schedule`, which
matches the scheduler's own handling of daylight-saving days); its outcome key
is the job's key with the slot as its ``occurrence`` parameter. The ledger says
what became of it; no outcome at all means it never ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from .errors import ConfigError, InvalidParameter

if TYPE_CHECKING:
    from .config import Job
    from .engine import Engine
    from .schedule import Schedule

__all__ = ["EARLY", "GRACE", "MissedSlot", "Occurrence", "check_due", "check_given_due",
           "missed_occurrences", "occurrence_param", "recent_missing"]

#: how long after its time an occurrence that never ran is only ``due``, not missed: a
#: scheduler fires a little late, and its run may be starting
GRACE = timedelta(minutes=15)

EARLY = timedelta(seconds=60)
"""How long before its time an occurrence is already due: a scheduler whose clock is a
little ahead of this host's, or whose timer fires a little early, starts the run a few
seconds before the occurrence it serves. Such a run serves the coming occurrence, not the
one before it (:meth:`retrysafe.schedule.Schedule.current_at`), and an occurrence named
for a run that early is not refused; one further ahead is not due yet (:func:`check_due`)."""


@dataclass(frozen=True)
class Occurrence:
    occurrence: str
    key: str
    state: str
    """the outcome's state, or ``missing``: it never ran (``due``: not yet, it is recent)"""
    reason: str


@dataclass(frozen=True)
class MissedSlot:
    """A slot that never ran, and the command that runs it (CMD: the job's own)."""

    job: str
    occurrence: Occurrence
    command: str


def occurrence_param(engine: Engine, job_name: str) -> tuple[str, Schedule]:
    """The job's occurrence parameter and schedule; a job without both is refused."""
    from .schedule import Schedule

    job = engine.config.job(job_name)
    names = [n for n, t in job.params.items() if t == "occurrence"]
    if not job.schedule or not names:
        raise ConfigError(f"job {job_name!r} has no schedule and occurrence parameter to backfill")
    return names[0], Schedule.parse(job.schedule, job.tz)


def check_due(job_name: str, schedule: Schedule, occurrence: str,
              now: datetime | None = None) -> None:
    """Refuse (:class:`InvalidParameter`, exit 2) to run ``occurrence`` (canonical text)
    before its time: an occurrence not due yet is never missed (``missed --until`` in the
    future looks until now), nor run ahead of the schedule, where the scheduler's own run
    of it would then find it done. One due at this very minute may run, and so may one
    due within :data:`EARLY` (a scheduler's clock a little ahead of ours)."""
    now = now or datetime.now(UTC)
    when = schedule.parse_value(occurrence)
    if when.astimezone(UTC) > now + EARLY:
        latest = schedule.format(schedule.latest_at_or_before(now))
        raise InvalidParameter(
            f"occurrence {occurrence} ({schedule.zone.key}) of job {job_name!r} is not due yet: "
            f"an occurrence runs at or after its time (the latest due one is {latest})")


def check_given_due(job: Job, given: Mapping[str, str], canonical: Mapping[str, str],
                    now: datetime | None = None) -> None:
    """:func:`check_due` for each occurrence parameter of ``job`` named in ``given`` (one
    left out is the latest due one, so always due), ``canonical`` being the values the key
    was rendered from. A due one costs no schedule parsing: its canonical text is read in
    the job's zone (as :meth:`~retrysafe.schedule.Schedule.parse_value` reads it); only
    one that is not due is checked, and refused, by :func:`check_due`."""
    if not job.schedule:
        return
    from .keys import SCHEDULE_TYPES
    from .schedule import DEFAULT_TZ, Schedule

    for name, kind in job.params.items():
        if kind not in SCHEDULE_TYPES or given.get(name) is None:
            continue
        now = now or datetime.now(UTC)
        text = canonical[name]
        try:
            local = datetime.fromisoformat(text).replace(
                tzinfo=ZoneInfo(job.tz or DEFAULT_TZ), fold=0)
            due = local.astimezone(UTC) <= now + EARLY
        except (ValueError, OverflowError):  # (a form only the schedule reads: it decides)
            due = False
        if not due:
            check_due(job.name, Schedule.parse(job.schedule, job.tz), text, now)


def missed_occurrences(engine: Engine, job_name: str, start: datetime, end: datetime,
                       given: Mapping[str, str], *, show_all: bool = False,
                       due_after: datetime | None = None) -> list[Occurrence]:
    """The job's occurrences between ``start`` and ``end`` that are not done (with
    ``show_all``, every one), oldest first. One after ``due_after`` that never ran is
    ``due``, not ``missing`` (its run may be starting), and listed with ``show_all`` only."""
    name, schedule = occurrence_param(engine, job_name)
    _check_given(engine, job_name, name, given)
    ledger = engine.ledger
    rows = []
    for occ in schedule.between(start, end):
        text = schedule.format(occ)
        _, key, _ = engine.outcome_key(job_name, {**given, name: text})
        out = ledger.outcome(key)
        status = out.state if out else "missing"
        if out is None and due_after is not None and occ > due_after:
            status = "due"
        if show_all or status not in ("done", "due"):
            rows.append(Occurrence(text, key, str(status), out.reason if out else ""))
    return rows


def _check_given(engine: Engine, job_name: str, name: str, given: Mapping[str, str]) -> None:
    """Refuse, before any occurrence is looked at, parameters no occurrence could run with
    (a range without an occurrence would let them pass): the occurrence itself (each
    occurrence fills it in), a value that is not UTF-8 text, one the job does not take."""
    from shlex import quote

    if name in given:
        others = "".join(f" -p {quote(f'{k}={v}')}" for k, v in given.items() if k != name)
        raise InvalidParameter(
            f"-p {name}: {name!r} is the job's occurrence, filled in for each one in the range; "
            f"leave it out (that occurrence alone: retrysafe run {quote(job_name)}{others} "
            f"-p {quote(f'{name}={given[name]}')} -- CMD)")
    engine.config.job(job_name).resolve_params(given)  # the occurrence left out: the latest


def recent_missing(engine: Engine, *, days: float = 7, grace: timedelta = GRACE,
                   now: datetime | None = None) -> list[MissedSlot]:
    """Every slot of the last ``days`` that never ran, of the scheduled jobs whose
    only parameter is their occurrence (the last ``grace`` left out: a run may be
    starting), oldest first. Jobs with other parameters are left out: which values
    they run with is not known here."""
    from shlex import quote

    now = now or datetime.now(UTC)
    found: list[MissedSlot] = []
    for job_name, job in sorted(engine.config.jobs.items()):
        if not job.schedule or list(job.params.values()) != ["occurrence"]:
            continue
        param = next(iter(job.params))
        try:
            rows = missed_occurrences(engine, job_name, now - timedelta(days=days), now - grace, {})
        except (ConfigError, ValueError):
            continue
        found += [MissedSlot(job_name, r, f"retrysafe run {quote(job_name)} -p "
                             f"{quote(f'{param}={r.occurrence}')} -- CMD")
                  for r in rows if r.state == "missing"]
    return sorted(found, key=lambda slot: slot.occurrence.occurrence)
