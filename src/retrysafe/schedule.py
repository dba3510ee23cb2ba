"""Occurrences of a job's schedule: keys from the schedule, never the clock.

A scheduled job (``schedule = "0 7 * * 1"``, ``tz = "Europe/Warsaw"``) names
each run after the *scheduled occurrence* it serves, not after the moment it
happens to start. A retry of Monday 07:00's run that starts on Tuesday still
belongs to Monday 07:00, so it finds Monday's outcome and does not repeat it.

Canonical form
    ``2026-12-07T0700``: the occurrence's wall-clock date and time in the
    job's time zone, to the minute. The zone is part of the job's declaration,
    so the text names one instant; it is short, sorts chronologically, parses
    with :meth:`datetime.fromisoformat`, and uses only letters, digits and
    ``-``, so an outcome key like ``weekly-ops-report:2026-12-07T0700`` stays
    readable as a folder name and on a command line.

Daylight saving time (the rules of OpenClaw's scheduler, croner)
    The schedule is matched against the wall clock, then:

    * a wall-clock time that does not exist (clocks spring forward) is skipped:
      ``30 2 * * *`` in Europe/Warsaw has no occurrence on 2026-03-29, and an
      hourly job has none in the missing hour;
    * a wall-clock time that exists twice (clocks fall back) is an occurrence
      once, at its first (summer time) reading: ``30 2 * * *`` runs at
      ``2026-10-25T02:30+02:00`` and an hourly or every-N-minutes job runs
      through the repeated hour once, not twice.

    So one wall-clock text names exactly one occurrence, and ``retrysafe
    missed`` never lists an occurrence OpenClaw would not have fired.

The time zone defaults to UTC, never to the machine's own zone, so two hosts
derive the same key for the same run.

Datetimes come back in the job's zone. Compare them in UTC
(``a.astimezone(UTC) == b.astimezone(UTC)``): Python never finds the second
reading of a repeated hour equal to a datetime in another zone (PEP 495).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigError, InvalidInput, InvalidParameter

__all__ = [
    "MAX_OCCURRENCES",
    "Schedule",
    "check_schedule",
    "format_occurrence",
    "next_occurrence",
    "occurrence_at",
    "occurrences_between",
    "parse_occurrence",
    "resolve_occurrence",
]

MAX_OCCURRENCES = 10_000
"""Most occurrences :func:`occurrences_between` lists before refusing."""

DEFAULT_TZ = "UTC"

# Nicknames understood by most cron implementations, OpenClaw's included.
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_DATE_ONLY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_SECOND_READING = "_2"
"""Suffix older versions gave a repeated hour's second reading; refused with a reason."""
_ONE_SECOND = timedelta(seconds=1)
# Guards the correction loops below; no real schedule needs more than a few.
_MAX_STEPS = 10_000


def _zone(tz: str | None) -> ZoneInfo:
    name = tz or DEFAULT_TZ
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Warsaw' or 'UTC')"
        ) from None


def _expression(schedule: str) -> str:
    text = " ".join(schedule.split())
    text = _NICKNAMES.get(text.lower(), text)
    if len(text.split()) != 5:
        raise ConfigError(
            f"invalid schedule {schedule!r}: expected 5 fields "
            "(minute hour day-of-month month day-of-week) or a nickname like @daily"
        )
    return text


def _aware(instant: datetime, what: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise InvalidInput(f"{what} must carry a time zone, got naive {instant.isoformat()}")
    return instant


@dataclass(frozen=True)
class Schedule:
    """A validated cron expression in a time zone.

    >>> s = Schedule.parse("0 7 * * 1", "Europe/Warsaw")
    >>> s.format(s.latest_at_or_before(datetime(2026, 12, 8, 12, 0, tzinfo=UTC)))
    '2026-12-07T0700'
    """

    expression: str
    zone: ZoneInfo

    @classmethod
    def parse(cls, schedule: str, tz: str | None) -> Schedule:
        """Validate ``schedule`` and ``tz``; raise :class:`ConfigError` if either is bad."""
        expression = _expression(schedule)
        zone = _zone(tz)
        probe = datetime(2000, 1, 1, tzinfo=zone)
        try:
            next(CronSim(expression, probe))
        except CronSimError as exc:
            raise ConfigError(f"invalid schedule {schedule!r}: {exc}") from None
        except StopIteration:
            raise ConfigError(f"schedule {schedule!r} never fires") from None
        return cls(expression, zone)

    # --- primitives -------------------------------------------------------------
    #
    # Occurrences are wall-clock times (naive datetimes in the job's zone) that
    # match the expression and exist, each at its first reading. That map from
    # wall clock to instant is increasing, so walking wall-clock times in order
    # walks occurrences in order.

    def _walls(self, start: datetime, *, reverse: bool) -> CronSim:
        """Matching wall-clock times strictly after (before) the naive ``start``."""
        return CronSim(self.expression, start, reverse=reverse)

    def _wall_step(self, sim: CronSim) -> datetime:
        try:
            wall: datetime = next(sim)
        except StopIteration:
            # cronsim gives up after 50 years without a match.
            raise InvalidInput(
                f"schedule {self.expression!r} has no occurrence within 50 years"
            ) from None
        return wall

    def _instant(self, wall: datetime) -> datetime | None:
        """The UTC instant of a wall-clock time (first reading), None if it never happens."""
        local = wall.replace(tzinfo=self.zone, fold=0)
        if _is_skipped(local):
            return None
        return local.astimezone(UTC)

    def _wall_of(self, instant: datetime) -> datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None, fold=0)

    def _forward(self, instant: datetime) -> Iterator[datetime]:
        """Occurrences strictly after the UTC ``instant``, in order (UTC)."""
        # Every wall time before the instant's own wall clock is earlier than it
        # (a second reading's wall clock is behind the instant, never ahead).
        sim = self._walls(self._wall_of(instant).replace(second=0, microsecond=0)
                          - timedelta(minutes=1), reverse=False)
        while True:
            found = self._instant(self._wall_step(sim))
            if found is not None and found > instant:
                yield found

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant`` (returned in the job's zone)."""
        return self._next_after(_aware(instant, "instant").astimezone(UTC)).astimezone(self.zone)

    def _next_after(self, instant: datetime) -> datetime:
        return next(self._forward(instant))

    def latest_at_or_before(self, instant: datetime) -> datetime:
        """The latest occurrence at or before ``instant`` (returned in the job's zone)."""
        utc = _aware(instant, "instant").astimezone(UTC)
        return self._latest_at_or_before(utc).astimezone(self.zone)

    def _latest_at_or_before(self, instant: datetime) -> datetime:
        # Every matching wall time up to the instant's wall clock is at or
        # before it; in a repeated hour's second reading, later wall times of
        # that hour (first readings) are too, so walk forward from there.
        sim = self._walls(self._wall_of(instant).replace(microsecond=0) + _ONE_SECOND, reverse=True)
        for _ in range(_MAX_STEPS):
            candidate = self._instant(self._wall_step(sim))
            if candidate is not None:
                break
        else:
            raise InvalidInput(f"schedule {self.expression!r}: no occurrence before {instant}")
        for following in self._forward(candidate):
            if following > instant:
                return candidate
            candidate = following
        raise AssertionError("unreachable")  # pragma: no cover

    def between(
        self, start: datetime, end: datetime, *, limit: int = MAX_OCCURRENCES
    ) -> list[datetime]:
        """Occurrences ``o`` with ``start <= o <= end``, oldest first."""
        start = _aware(start, "start").astimezone(UTC)
        end = _aware(end, "end").astimezone(UTC)
        found: list[datetime] = []
        for current in self._forward(start - timedelta(microseconds=1)):
            if current > end:
                break
            if len(found) >= limit:
                raise InvalidInput(
                    f"more than {limit} occurrences of {self.expression!r} between "
                    f"{self.format(start)} and {self.format(end)}; narrow the range"
                )
            found.append(current.astimezone(self.zone))
        return found

    def is_occurrence(self, instant: datetime) -> bool:
        """Whether ``instant`` is exactly one of the schedule's occurrences."""
        utc = _aware(instant, "instant").astimezone(UTC)
        return self._latest_at_or_before(utc) == utc

    # --- text -------------------------------------------------------------------

    def format(self, occurrence: datetime) -> str:
        """The canonical text of ``occurrence`` (``2026-12-07T0700``)."""
        local = _aware(occurrence, "occurrence").astimezone(self.zone)
        return local.strftime("%Y-%m-%dT%H%M")

    def parse_value(self, text: str) -> datetime:
        """Read a user-given occurrence; it must be one of the schedule's occurrences.

        Accepted: the canonical form (``2026-12-07T0700``), a local time
        without offset such as ``2026-12-07T07:00`` (read in the job's zone; in
        a repeated hour, its first reading), any ISO 8601 time with an offset
        or ``Z``, or a bare date when the schedule fires exactly once that day.
        A wall-clock time that does not exist, or the second reading of a
        repeated hour, is refused: the scheduler never fires there.
        """
        raw = text.strip()
        if _DATE_ONLY.match(raw):
            return self._parse_date(raw, text)
        if raw.endswith(_SECOND_READING):
            first = raw[: -len(_SECOND_READING)]
            raise InvalidParameter(
                f"occurrence {text!r}: a repeated hour runs once, at its first reading; "
                f"use {first}"
            )
        try:
            value = datetime.fromisoformat(raw)
        except ValueError:
            raise InvalidParameter(
                f"occurrence {text!r} is not a date-time; use the form "
                f"{self.format(self.latest_at_or_before(datetime.now(UTC)))}"
            ) from None
        if value.second or value.microsecond:
            raise InvalidParameter(f"occurrence {text!r}: occurrences are whole minutes")
        if value.tzinfo is not None:
            return self._require(value, text)
        local = value.replace(tzinfo=self.zone, fold=0)
        if _is_skipped(local):
            raise InvalidParameter(
                f"occurrence {text!r}: {raw} does not exist in {self.zone.key} (clocks move "
                f"forward), so it never runs; nearest: {self._nearest(local.replace(fold=1))}"
            )
        return self._require(local, text)

    def _parse_date(self, raw: str, text: str) -> datetime:
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            raise InvalidParameter(f"occurrence {text!r} is not a valid date") from None
        start = datetime(day.year, day.month, day.day, tzinfo=self.zone)
        end = start + timedelta(days=1)
        hits = [o for o in self.between(start, end, limit=1500) if o.date() == day]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise InvalidParameter(
                f"schedule {self.expression!r} has no occurrence on {raw}; "
                f"nearest: {self._nearest(start)}"
            )
        shown = ", ".join(self.format(h) for h in hits[:4])
        more = ", ..." if len(hits) > 4 else ""
        raise InvalidParameter(
            f"schedule {self.expression!r} fires {len(hits)} times on {raw}; "
            f"give the time: {shown}{more}"
        )

    def _require(self, value: datetime, text: str) -> datetime:
        if self.is_occurrence(value):
            return value.astimezone(UTC).astimezone(self.zone)
        raise InvalidParameter(
            f"occurrence {text!r} is not a scheduled time of {self.expression!r} in "
            f"{self.zone.key}; nearest: {self._nearest(value)}"
        )

    def _nearest(self, value: datetime) -> str:
        before = self.latest_at_or_before(value)
        after = self.next_after(value)
        return f"{self.format(before)} (before), {self.format(after)} (after)"


def _is_skipped(local: datetime) -> bool:
    """Whether ``local``'s wall-clock time never happens (clocks moved forward)."""
    return local.replace(fold=0).astimezone(UTC) > local.replace(fold=1).astimezone(UTC)


# --- module-level API -------------------------------------------------------------


def check_schedule(schedule: str, tz: str | None) -> None:
    """Raise :class:`ConfigError` if ``schedule`` or ``tz`` is not usable."""
    Schedule.parse(schedule, tz)


def occurrence_at(schedule: str, tz: str | None, now: datetime) -> datetime:
    """The latest occurrence of ``schedule`` in ``tz`` at or before ``now``.

    A retry of Monday 07:00's run on Tuesday still gets Monday 07:00::

        >>> occurrence_at("0 7 * * 1", "Europe/Warsaw",
        ...               datetime(2026, 12, 8, 9, 30, tzinfo=UTC)).isoformat()
        '2026-12-07T07:00:00+01:00'
    """
    return Schedule.parse(schedule, tz).latest_at_or_before(now)


def next_occurrence(schedule: str, tz: str | None, after: datetime) -> datetime:
    """The first occurrence of ``schedule`` strictly after ``after``."""
    return Schedule.parse(schedule, tz).next_after(after)


def occurrences_between(
    schedule: str, tz: str | None, start: datetime, end: datetime
) -> list[datetime]:
    """Occurrences with ``start <= o <= end`` (both inclusive), oldest first.

    Raises :class:`InvalidInput` past :data:`MAX_OCCURRENCES`.
    """
    return Schedule.parse(schedule, tz).between(start, end)


def format_occurrence(schedule: str, tz: str | None, occurrence: datetime) -> str:
    """The canonical text of ``occurrence``, e.g. ``2026-12-07T0700``."""
    return Schedule.parse(schedule, tz).format(occurrence)


def parse_occurrence(schedule: str, tz: str | None, text: str) -> datetime:
    """Parse ``text`` and check it is a real occurrence; :class:`InvalidParameter` if not."""
    return Schedule.parse(schedule, tz).parse_value(text)


def resolve_occurrence(
    schedule: str | None,
    tz: str | None,
    value: str | None,
    now: datetime | None = None,
) -> str:
    """The canonical occurrence text for an ``occurrence`` job parameter.

    ``value`` None means "the run this is": the latest occurrence at or before
    ``now`` (default: the current time). A given ``value`` (a backfill) must
    name a real occurrence and comes back in canonical form.

    Raises :class:`ConfigError` when the job has no schedule or a bad one, and
    :class:`InvalidParameter` when ``value`` is not an occurrence.
    """
    if not schedule:
        raise ConfigError("job has an occurrence parameter but no schedule")
    parsed = Schedule.parse(schedule, tz)
    if value is None:
        return parsed.format(parsed.latest_at_or_before(now or datetime.now(UTC)))
    return parsed.format(parsed.parse_value(value))
