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
    readable as a folder name and on a command line. The one time a wall clock
    names two instants (the repeated hour when clocks fall back) the second
    reading carries the suffix ``_2``: ``2026-10-25T0200`` then
    ``2026-10-25T0200_2``. Only schedules with a wildcard hour or minute fire
    twice in that hour; inside it their keys sort by wall clock, not by time.

Daylight saving time (the rules of Debian's cron, which ``cronsim`` follows)
    * Schedules with a fixed minute and hour (``30 2 * * *``):
      - spring forward: a time that does not exist that day runs once at the
        first minute after the gap (02:30 on 2026-03-29 in Europe/Warsaw is
        ``2026-03-29T0300``); several such times collapse into that one
        occurrence;
      - fall back: a time that exists twice runs once, at its first (summer
        time) reading (``2026-10-25T02:30+02:00``).
    * Schedules with a wildcard minute or hour (``0 * * * *``) follow real
      time: the skipped hour has no occurrences, the repeated hour has two
      (``2026-10-25T0200`` and ``2026-10-25T0200_2``).

The time zone defaults to UTC, never to the machine's own zone, so two hosts
derive the same key for the same run.

Datetimes come back in the job's zone. Compare them in UTC
(``a.astimezone(UTC) == b.astimezone(UTC)``): Python never finds the second
reading of a repeated hour equal to a datetime in another zone (PEP 495).
"""

from __future__ import annotations

import re
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

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SECOND_READING = "_2"
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

    def _iterate(self, start: datetime, *, reverse: bool) -> CronSim:
        return CronSim(self.expression, start.astimezone(self.zone), reverse=reverse)

    def _step(self, sim: CronSim) -> datetime:
        # Everything internal is UTC: Python compares two datetimes that share
        # a tzinfo by wall clock alone, which ignores ``fold`` and would treat
        # 02:00+02:00 and 02:00+01:00 of a repeated hour as equal.
        try:
            return next(sim).astimezone(UTC)
        except StopIteration:
            # cronsim gives up after 50 years without a match.
            raise InvalidInput(
                f"schedule {self.expression!r} has no occurrence within 50 years"
            ) from None

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant`` (returned in the job's zone)."""
        return self._next_after(_aware(instant, "instant").astimezone(UTC)).astimezone(self.zone)

    def _next_after(self, instant: datetime) -> datetime:
        sim = self._iterate(instant.replace(microsecond=0), reverse=False)
        # For fixed-time schedules cronsim walks wall-clock time; inside a
        # repeated autumn hour the wall clock is behind the real instant, so it
        # may propose occurrences that are already past. Skip them.
        for _ in range(_MAX_STEPS):
            candidate = self._step(sim)
            if candidate > instant:
                return candidate
        raise InvalidInput(f"schedule {self.expression!r}: no occurrence after {instant}")

    def latest_at_or_before(self, instant: datetime) -> datetime:
        """The latest occurrence at or before ``instant`` (returned in the job's zone)."""
        utc = _aware(instant, "instant").astimezone(UTC)
        return self._latest_at_or_before(utc).astimezone(self.zone)

    def _latest_at_or_before(self, instant: datetime) -> datetime:
        # Start one second after the floor so that cronsim's first backward
        # tick lands on the floor itself: an occurrence equal to it counts.
        candidate = self._step(
            self._iterate(instant.replace(microsecond=0) + _ONE_SECOND, reverse=True)
        )
        for _ in range(_MAX_STEPS):
            if candidate <= instant:
                break
            candidate = self._step(self._iterate(candidate, reverse=True))
        else:
            raise InvalidInput(f"schedule {self.expression!r}: no occurrence before {instant}")
        # Walking wall-clock time backwards can miss occurrences in a repeated
        # hour; walking forward from a known earlier occurrence cannot.
        for _ in range(_MAX_STEPS):
            following = self._next_after(candidate)
            if following > instant:
                return candidate
            candidate = following
        raise InvalidInput(f"schedule {self.expression!r}: too many occurrences to walk")

    def between(
        self, start: datetime, end: datetime, *, limit: int = MAX_OCCURRENCES
    ) -> list[datetime]:
        """Occurrences ``o`` with ``start <= o <= end``, oldest first."""
        start = _aware(start, "start").astimezone(UTC)
        end = _aware(end, "end").astimezone(UTC)
        found: list[datetime] = []
        current = self._next_after(start - timedelta(microseconds=1))
        while current <= end:
            if len(found) >= limit:
                raise InvalidInput(
                    f"more than {limit} occurrences of {self.expression!r} between "
                    f"{self.format(start)} and {self.format(end)}; narrow the range"
                )
            found.append(current.astimezone(self.zone))
            current = self._next_after(current)
        return found

    def is_occurrence(self, instant: datetime) -> bool:
        """Whether ``instant`` is exactly one of the schedule's occurrences."""
        utc = _aware(instant, "instant").astimezone(UTC)
        return self._latest_at_or_before(utc) == utc

    # --- text -------------------------------------------------------------------

    def format(self, occurrence: datetime) -> str:
        """The canonical text of ``occurrence`` (``2026-12-07T0700``)."""
        local = _aware(occurrence, "occurrence").astimezone(self.zone)
        text = local.strftime("%Y-%m-%dT%H%M")
        if local.fold and _is_repeated(local):
            text += _SECOND_READING
        return text

    def parse_value(self, text: str) -> datetime:
        """Read a user-given occurrence; it must be one of the schedule's occurrences.

        Accepted: the canonical form (``2026-12-07T0700``, ``..._2`` for the
        second reading of a repeated hour), a local time without offset such as
        ``2026-12-07T07:00`` (read in the job's zone; in a repeated hour, its
        first reading), any ISO 8601 time with an offset or ``Z``, or a bare
        date when the schedule fires exactly once that day.
        """
        raw = text.strip()
        if _DATE_ONLY.match(raw):
            return self._parse_date(raw, text)
        second = raw.endswith(_SECOND_READING)
        if second:
            raw = raw[: -len(_SECOND_READING)]
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
            if second:
                raise InvalidParameter(
                    f"occurrence {text!r}: '{_SECOND_READING}' goes with a local time, "
                    "not with an offset"
                )
            return self._require(value, text)
        local = value.replace(tzinfo=self.zone, fold=1 if second else 0)
        if _is_skipped(local):
            raise InvalidParameter(
                f"occurrence {text!r}: {raw} does not exist in {self.zone.key} (clocks move "
                f"forward); nearest: {self._nearest(local.replace(fold=1))}"
            )
        if second and not _is_repeated(local):
            raise InvalidParameter(
                f"occurrence {text!r}: {raw} happens only once in {self.zone.key}; "
                f"drop '{_SECOND_READING}'"
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


def _is_repeated(local: datetime) -> bool:
    """Whether ``local``'s wall-clock time happens twice (clocks fell back)."""
    return local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset() and (
        local.replace(fold=0).astimezone(UTC) < local.replace(fold=1).astimezone(UTC)
    )


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
