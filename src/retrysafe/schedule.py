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

The calendar ends at the years 1 and 9999: occurrences beyond them do not
exist, so the first and last ones there are simply the first and last; an
occurrence that cannot be written in UTC is refused with one line.

Datetimes come back in the job's zone. Compare them in UTC
(``a.astimezone(UTC) == b.astimezone(UTC)``): Python never finds the second
reading of a repeated hour equal to a datetime in another zone (PEP 495).
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import accumulate
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigError, InvalidInput, InvalidParameter
from .missed import EARLY

__all__ = [
    "CYCLE_DAYS",
    "MAX_OCCURRENCES",
    "CalendarEnds",
    "Schedule",
    "check_schedule",
    "check_zone",
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

EARLY_SHARE = 10
"""A run serves the coming occurrence only when it is also within a tenth of the time
between that occurrence and the one before it: 6 seconds for a job run every minute, so
a run that starts late (as runs under load do) is never taken for the next one's."""

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
_MAX_EXPRESSION = 1000
"""Longest schedule text read (a list of every minute is about 170 characters)."""
_MACHINE_ZONE = "localtime"
"""The machine's own zone under an IANA-looking name: refused, never read."""
_LEAP_SECOND_ZONES = "right/"
"""The prefix of the zones that count leap seconds (``right/UTC``): refused, their clock is
about 27 seconds off UTC's, which schedulers and every other host read."""
_COPY_ZONES = "posix/"
"""The prefix of a copy of the plain zones (``posix/Europe/Warsaw``) that only some hosts'
time zone databases hold (not Python's own ``tzdata``): refused, for the plain name."""
_PREFIXED_ZONES = (
    (_LEAP_SECOND_ZONES, "counts leap seconds, so its clock is about 27 seconds off the one "
                         "schedulers read"),
    (_COPY_ZONES, "is a copy of a zone that only some hosts' time zone databases hold, so "
                  "another host may not read it"),
)
"""The prefixed zones refused, each with why; the plain zone it names is offered instead."""
_RULES_FILE = "posixrules"
"""A file of the time zone database that zoneinfo reads as a zone (the default rules for
POSIX ``TZ`` strings, often New York's): refused, it is not a zone."""
CYCLE_DAYS = 146_097
"""Days in 400 Gregorian years, after which dates and weekdays repeat exactly."""
_DAY = 86_400


class CalendarEnds(InvalidInput):
    """No occurrence before the year 1 or after 9999: the calendar ends there."""


def _show(text: str) -> str:
    """``text`` quoted for an error line, cut short when long."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _zone(tz: str | None) -> ZoneInfo:
    """The zone named ``tz`` (None: UTC). An empty name, ``localtime`` (the machine's own
    zone, different on each host), a ``right/`` zone (it counts leap seconds), a
    ``posix/`` zone (a copy not every host holds) and ``posixrules`` (a file of the
    database, not a zone) are refused as unknown names are."""
    name = DEFAULT_TZ if tz is None else tz
    if not name.strip():
        raise ConfigError(f"time zone {name!r} is empty (use an IANA name such as "
                          "'Europe/Warsaw', or leave it out for UTC)")
    if name == _MACHINE_ZONE:
        raise ConfigError(f"time zone {name!r} is this machine's own zone, which another host "
                          "reads differently (use an IANA name such as 'Europe/Warsaw' or 'UTC')")
    folded = name.lower()
    for prefix, why in _PREFIXED_ZONES:
        if folded.startswith(prefix):
            plain = name[len(prefix):]
            use = f" {plain!r}" if _usable(plain) else ", such as 'Europe/Warsaw' or 'UTC'"
            raise ConfigError(f"time zone {_show(name)} {why} (use the plain zone name{use})")
    if folded == _RULES_FILE:
        raise ConfigError(f"time zone {name!r} is a file of the time zone database, not a zone "
                          "(use the plain zone name, such as 'Europe/Warsaw' or 'UTC')")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"unknown time zone {_show(name)} (use an IANA name such as 'Europe/Warsaw' or 'UTC')"
        ) from None


def _usable(name: str) -> bool:
    """Whether ``name`` is a zone :func:`_zone` takes."""
    try:
        _zone(name)
    except ConfigError:
        return False
    return True


def _expression(schedule: str) -> str:
    if len(schedule) > _MAX_EXPRESSION:
        raise ConfigError(f"invalid schedule {_show(schedule)}: longer than {_MAX_EXPRESSION} "
                          "characters")
    odd = next((c for c in schedule if not (" " <= c <= "~" or c == "\t")), None)
    if odd is not None:
        # a no-break space or a full-width digit pasted from a web page: cron (OpenClaw's
        # included) reads ASCII fields separated by spaces, so it would not read the same line
        raise ConfigError(f"invalid schedule {_show(schedule)}: character U+{ord(odd):04X} is "
                          "not allowed (cron fields are ASCII, separated by spaces)")
    text = " ".join(schedule.split())
    text = _NICKNAMES.get(text.lower(), text)
    if len(text.split()) != 5:
        raise ConfigError(
            f"invalid schedule {_show(schedule)}: expected 5 fields "
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
        except (CronSimError, ValueError, OverflowError) as exc:
            # ValueError: a number too long to read (thousands of digits)
            reason = str(exc) if isinstance(exc, CronSimError) else "a number is out of range"
            raise ConfigError(f"invalid schedule {_show(schedule)}: {reason}") from None
        except StopIteration:
            raise ConfigError(f"schedule {_show(schedule)} never fires") from None
        return cls(expression, zone)

    # --- primitives -------------------------------------------------------------
    #
    # Occurrences are wall-clock times (naive datetimes in the job's zone) that
    # match the expression and exist, each at its first reading. That map from
    # wall clock to instant is increasing, so walking wall-clock times in order
    # walks occurrences in order. The walks end where the calendar does (the
    # years 1 and 9999): there are no occurrences beyond.

    def _walls(self, start: datetime, *, reverse: bool) -> CronSim:
        """Matching wall-clock times strictly after (before) the naive ``start``."""
        return CronSim(self.expression, start, reverse=reverse)

    def _wall_step(self, sim: CronSim) -> datetime | None:
        """The next matching wall-clock time, or None where the calendar ends."""
        try:
            wall: datetime = next(sim)
        except StopIteration:
            # cronsim gives up after 50 years without a match.
            raise InvalidInput(
                f"schedule {self.expression!r} has no occurrence within 50 years"
            ) from None
        except OverflowError:
            return None
        return wall

    def _walls_up(self, wall: datetime) -> Iterator[datetime]:
        """Matching wall-clock times at or after the naive whole minute ``wall``, in order."""
        if wall == datetime.min:  # nothing before it to start the walk from
            if self._first_minute_matches():
                yield wall
            sim = self._walls(wall, reverse=False)
        else:
            sim = self._walls(wall - timedelta(minutes=1), reverse=False)
        while (found := self._wall_step(sim)) is not None:
            yield found

    def _walls_down(self, wall: datetime) -> Iterator[datetime]:
        """Matching wall-clock times at or before the naive ``wall``, latest first."""
        start = wall.replace(microsecond=0)
        # cronsim reads a start with microseconds in reverse as "at or before it"
        start = datetime.max if start >= datetime.max - _ONE_SECOND else start + _ONE_SECOND
        sim = self._walls(start, reverse=True)
        while (found := self._wall_step(sim)) is not None:
            yield found

    def _first_minute_matches(self) -> bool:
        try:
            first: datetime = next(self._walls(datetime.min + _ONE_SECOND, reverse=True))
        except (StopIteration, OverflowError):
            return False
        return first == datetime.min

    def _instant(self, wall: datetime) -> datetime | None:
        """The UTC instant of a wall-clock time (first reading), None if it never happens
        (skipped, or outside the years 1 to 9999 in UTC)."""
        local = wall.replace(tzinfo=self.zone, fold=0)
        try:
            if _is_skipped(local):
                return None
            return local.astimezone(UTC)
        except OverflowError:
            return None

    def _wall_of(self, instant: datetime) -> datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None, fold=0)

    def _forward(self, instant: datetime, *, inclusive: bool = False) -> Iterator[datetime]:
        """Occurrences after (``inclusive``: at or after) the UTC ``instant``, in order (UTC)."""
        try:
            wall = self._wall_of(instant)
        except OverflowError:  # the instant's wall clock is beyond the calendar here
            if instant.year > 1:
                return
            wall = datetime.min
        # Every wall time before the instant's own wall clock is earlier than it
        # (a second reading's wall clock is behind the instant, never ahead).
        for found_wall in self._walls_up(wall.replace(second=0, microsecond=0)):
            found = self._instant(found_wall)
            if found is not None and (found > instant or (inclusive and found == instant)):
                yield found

    def next_after(self, instant: datetime) -> datetime:
        """The first occurrence strictly after ``instant`` (returned in the job's zone)."""
        return self._next_after(_utc(instant, "instant")).astimezone(self.zone)

    def _next_after(self, instant: datetime) -> datetime:
        found = next(self._forward(instant), None)
        if found is None:
            raise CalendarEnds(f"schedule {self.expression!r} has no occurrence after "
                               f"{instant.isoformat()}: the calendar ends in the year 9999")
        return found

    def latest_at_or_before(self, instant: datetime) -> datetime:
        """The latest occurrence at or before ``instant`` (returned in the job's zone)."""
        utc = _utc(instant, "instant")
        return self._latest_at_or_before(utc).astimezone(self.zone)

    def _latest_at_or_before(self, instant: datetime) -> datetime:
        # Every matching wall time up to the instant's wall clock is at or
        # before it; in a repeated hour's second reading, later wall times of
        # that hour (first readings) are too, so walk forward from there.
        try:
            wall = self._wall_of(instant)
        except OverflowError:  # the instant's wall clock is beyond the calendar here
            if instant.year == 1:
                raise self._none_before(instant) from None
            wall = datetime.max
        candidate = None
        for steps, found_wall in enumerate(self._walls_down(wall)):
            candidate = self._instant(found_wall)
            if candidate is not None:
                break
            if steps >= _MAX_STEPS:
                raise InvalidInput(f"schedule {self.expression!r}: no occurrence before {instant}")
        if candidate is None:
            raise self._none_before(instant)
        for following in self._forward(candidate):
            if following > instant:
                return candidate
            candidate = following
        return candidate  # the last occurrence the calendar holds

    def current_at(self, instant: datetime) -> datetime:
        """The occurrence a run started at ``instant`` serves (returned in the job's zone):
        the latest at or before it, or the coming one when that is due within
        :data:`EARLY`, and within a tenth of the time since the one before it. A run
        fired a second early is the coming occurrence's run, not a second run of the
        previous one (which, done, would be skipped, and the coming one never run)::

            >>> s = Schedule.parse("0 7 * * 1", "Europe/Warsaw")
            >>> s.format(s.current_at(datetime(2026, 12, 7, 5, 59, 58, tzinfo=UTC)))
            '2026-12-07T0700'
            >>> s.format(s.current_at(datetime(2026, 12, 7, 5, 58, tzinfo=UTC)))
            '2026-11-30T0700'
        """
        utc = _utc(instant, "instant")
        try:
            coming = self._next_after(utc)
        except CalendarEnds:
            return self.latest_at_or_before(utc)
        if coming - utc > EARLY:
            return self.latest_at_or_before(utc)
        try:
            latest = self._latest_at_or_before(utc)
        except CalendarEnds:  # none before: the coming one is the first
            return coming.astimezone(self.zone)
        if (coming - utc) * EARLY_SHARE > coming - latest:
            return latest.astimezone(self.zone)
        return coming.astimezone(self.zone)

    def _none_before(self, instant: datetime) -> CalendarEnds:
        return CalendarEnds(f"schedule {self.expression!r} has no occurrence at or before "
                            f"{instant.isoformat()}: the calendar starts in the year 1")

    def between(
        self, start: datetime, end: datetime, *, limit: int = MAX_OCCURRENCES
    ) -> list[datetime]:
        """Occurrences ``o`` with ``start <= o <= end``, oldest first."""
        start = _clamped_utc(start, "start")
        end = _clamped_utc(end, "end")
        found: list[datetime] = []
        for current in self._forward(start, inclusive=True):
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
        utc = _utc(instant, "instant")
        try:
            return self._latest_at_or_before(utc) == utc
        except InvalidInput:  # none at or before it: the calendar starts after it
            return False

    def most_within(self, seconds: float) -> int:
        """At most how many occurrences any stretch of ``seconds`` on the job's wall clock
        holds (half-open, as a catch-up window is): exact for most schedules, never less.

        Each day that matches the day fields fires at the same times of day, so a
        stretch of ``D`` days and ``r`` seconds holds at most the day's count times
        the matching days among ``D + 1`` in a row (and never more than ``D`` days'
        worth), plus the most any ``r`` seconds of a day hold.
        """
        days, rest = divmod(max(0, int(seconds)), _DAY)
        sim = self._walls(datetime(2000, 1, 1), reverse=False)
        times = sorted(h * 3600 + m * 60 for h in sim.hours for m in sim.minutes)
        per_day = len(times)
        most = per_day * days + _most_in_part(times, rest)
        if most <= MAX_OCCURRENCES or days == 0:
            return most
        matching = _most_matching_days(self.expression, days + 1)
        return per_day * min(days, matching) + _most_in_part(times, rest)

    def occurrences_per_cycle(self) -> int:
        """Occurrences in any 400 years (the Gregorian cycle), daylight saving aside."""
        sim = self._walls(datetime(2000, 1, 1), reverse=False)
        return len(sim.hours) * len(sim.minutes) * sum(_cycle_mask(self.expression))

    # --- text -------------------------------------------------------------------

    def format(self, occurrence: datetime) -> str:
        """The canonical text of ``occurrence`` (``2026-12-07T0700``; the year has four
        digits, ``0999-...`` too, so the texts sort as the occurrences do)."""
        try:
            local = _aware(occurrence, "occurrence").astimezone(self.zone)
        except OverflowError:
            raise InvalidInput(f"{occurrence.isoformat()} is outside the years 1 to 9999 in "
                               f"{self.zone.key}") from None
        return (f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
                f"T{local.hour:02d}{local.minute:02d}")

    def parse_value(self, text: str) -> datetime:
        """Read a user-given occurrence; it must be one of the schedule's occurrences.

        Accepted: the canonical form (``2026-12-07T0700``), a local time
        without offset such as ``2026-12-07T07:00`` (read in the job's zone; in
        a repeated hour, its first reading), any ISO 8601 time with an offset
        or ``Z``, or a bare date when the schedule fires exactly once that day.
        A wall-clock time that does not exist, or the second reading of a
        repeated hour, is refused: the scheduler never fires there; so is one
        that cannot be written in UTC (the first hours of the year 1, the last
        of 9999).
        """
        raw = text.strip()
        if _DATE_ONLY.match(raw):
            return self._parse_date(raw, text)
        if raw.endswith(_SECOND_READING):
            first = raw[: -len(_SECOND_READING)]
            raise InvalidParameter(
                f"occurrence {_show(text)}: a repeated hour runs once, at its first reading; "
                f"use {first}"
            )
        try:
            value = datetime.fromisoformat(raw)
        except ValueError:
            raise InvalidParameter(
                f"occurrence {_show(text)} is not a date-time; use the form "
                f"{self.format(self.latest_at_or_before(datetime.now(UTC)))}"
            ) from None
        if value.second or value.microsecond:
            raise InvalidParameter(f"occurrence {_show(text)}: occurrences are whole minutes")
        if value.tzinfo is not None:
            return self._require(self._in_range(value, text), text)
        local = self._in_range(value.replace(tzinfo=self.zone, fold=0), text)
        if _is_skipped(local):
            raise InvalidParameter(
                f"occurrence {_show(text)}: {raw} does not exist in {self.zone.key} (clocks "
                f"move forward), so it never runs; nearest: "
                f"{self._nearest(local.replace(fold=1))}"
            )
        return self._require(local, text)

    def _in_range(self, value: datetime, text: str) -> datetime:
        """``value`` if it is an instant the calendar holds, in UTC and in the job's zone."""
        try:
            value.astimezone(UTC).astimezone(self.zone)
            value.replace(fold=1).astimezone(UTC)  # what a skipped or repeated time reads as
        except OverflowError:
            raise InvalidParameter(
                f"occurrence {_show(text)} is outside the years 1 to 9999 in UTC, so no "
                "scheduler fires there") from None
        return value

    def _parse_date(self, raw: str, text: str) -> datetime:
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            raise InvalidParameter(f"occurrence {_show(text)} is not a valid date") from None
        start = datetime(day.year, day.month, day.day, tzinfo=self.zone)
        end = (start + timedelta(days=1) if day < date.max
               else datetime.max.replace(tzinfo=self.zone))
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
            f"occurrence {_show(text)} is not a scheduled time of {self.expression!r} in "
            f"{self.zone.key}; nearest: {self._nearest(value)}"
        )

    def _nearest(self, value: datetime) -> str:
        """The occurrences either side of ``value``; at the calendar's ends, the one there is."""
        utc = _clamped_utc(value, "value")
        sides = []
        with contextlib.suppress(InvalidInput):
            sides.append(f"{self.format(self._latest_at_or_before(utc))} (before)")
        with contextlib.suppress(InvalidInput):
            sides.append(f"{self.format(self._next_after(utc))} (after)")
        return ", ".join(sides) or "none"


def _utc(instant: datetime, what: str) -> datetime:
    """``instant`` in UTC; one outside the years 1 to 9999 there is refused."""
    try:
        return _aware(instant, what).astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"{what} {instant.isoformat()} is outside the years 1 to 9999 in UTC"
                           ) from None


def _clamped_utc(instant: datetime, what: str) -> datetime:
    """``instant`` in UTC, or the calendar's first or last instant when it lies beyond:
    as the end of a range, that leaves out no occurrence."""
    try:
        return _aware(instant, what).astimezone(UTC)
    except OverflowError:
        edge = datetime.min if instant.year == 1 else datetime.max
        return edge.replace(tzinfo=UTC)


def _most_in_part(times: list[int], seconds: int) -> int:
    """The most of the day's ``times`` (seconds after midnight, sorted) that any
    ``seconds`` (less than a day, half-open) hold, midnight crossed or not."""
    if seconds <= 0 or not times:
        return 0
    around = times + [t + _DAY for t in times]
    most, end = 0, 0
    for begin in range(len(times)):
        end = max(end, begin)
        while end < len(around) and around[end] < around[begin] + seconds:
            end += 1
        most = max(most, end - begin)
    return min(most, len(times))


@functools.lru_cache(maxsize=16)
def _cycle_mask(expression: str) -> tuple[int, ...]:
    """1 for each day of 400 Gregorian years from 2000-01-01 that the day-of-month,
    month and day-of-week fields match, else 0. Which days match depends only on
    whether the year is a leap year and its first weekday, so 14 years are looked at."""
    sim = CronSim(expression, datetime(2000, 1, 1))
    kinds: dict[tuple[bool, int], list[int]] = {}
    days: list[int] = []
    for year in range(2000, 2400):
        kind = (calendar.isleap(year), date(year, 1, 1).weekday())
        if kind not in kinds:
            first = date(year, 1, 1).toordinal()
            kinds[kind] = [int(d.month in sim.months and sim.match_day(d))
                           for d in map(date.fromordinal, range(first, first + 365 + kind[0]))]
        days += kinds[kind]
    return tuple(days)


def _most_matching_days(expression: str, span: int) -> int:
    """The most days that match, among any ``span`` days in a row."""
    mask = _cycle_mask(expression)
    cycles, span = divmod(span, CYCLE_DAYS)
    most = 0
    if span:
        sums = list(accumulate(mask + mask[:span], initial=0))
        most = max(map(int.__sub__, sums[span:span + CYCLE_DAYS], sums[:CYCLE_DAYS]))
    return cycles * sum(mask) + most


def _is_skipped(local: datetime) -> bool:
    """Whether ``local``'s wall-clock time never happens (clocks moved forward)."""
    return local.replace(fold=0).astimezone(UTC) > local.replace(fold=1).astimezone(UTC)


# --- module-level API -------------------------------------------------------------


def check_schedule(schedule: str, tz: str | None) -> None:
    """Raise :class:`ConfigError` if ``schedule`` or ``tz`` is not usable."""
    Schedule.parse(schedule, tz)


def check_zone(tz: str | None) -> None:
    """Raise :class:`ConfigError` if ``tz`` (None: UTC) names no usable time zone."""
    _zone(tz)


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
    ``now`` (default: the current time), or the coming one when the run was started a
    little early for it (:meth:`Schedule.current_at`). A given ``value`` (a backfill) must
    name a real occurrence and comes back in canonical form.

    Raises :class:`ConfigError` when the job has no schedule or a bad one, and
    :class:`InvalidParameter` when ``value`` is not an occurrence.
    """
    if not schedule:
        raise ConfigError("job has an occurrence parameter but no schedule")
    parsed = Schedule.parse(schedule, tz)
    if value is None:
        return parsed.format(parsed.current_at(now or datetime.now(UTC)))
    return parsed.format(parsed.parse_value(value))
