"""Finishing earlier occurrences of a job before the current one (``retrysafe run --catch-up``).

OpenClaw (like cron) never re-runs an occurrence that ended badly: a weekly job
whose Monday run ended ``unknown`` waits a week. With catch-up, the run of an
occurrence first finishes the earlier occurrences of the same job inside a
window that never reached ``done`` (never ran, ``failed``, ``unknown``,
``settled``, or left in progress by a run that died), oldest first, each under
its own outcome key and with its own attempt; a ``blocked`` one waits for a
person and is only reported. Each attempt goes through the normal effect
algorithm, so a step that may have happened is looked up, never blindly run
again.

This module decides which occurrences and what the whole run exits with;
``cli/run.py`` runs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .ages import parse_age
from .errors import EXIT_BLOCKED, EXIT_BUSY, EXIT_DONE, EXIT_FAILED, InvalidInput

if TYPE_CHECKING:
    from .engine import Engine
    from .schedule import Schedule

__all__ = [
    "DEFAULT_WINDOW",
    "Earlier",
    "Plan",
    "Window",
    "check_window",
    "exit_code",
    "parse_window",
    "plan",
]

DEFAULT_WINDOW = "7d"
"""The window when catch-up is on and none is given: a week before the current
occurrence, which holds a weekly job's previous run and a daily job's last seven."""

_COUNT = re.compile(r"^[0-9]{1,6}$")
_FEW = 36
"""A count of occurrences that cannot reach back before the year 1: a schedule fires
within every 50 years (else it is refused), and 36 times 50 years end after it."""
#: states of an earlier occurrence that a person must settle: reported, never run
_WAITING = frozenset({"blocked"})


@dataclass(frozen=True)
class Window:
    """How far back catch-up looks from the current occurrence: an age on the job's
    wall clock (``7d``: the previous Monday 07:00 from Monday 07:00, daylight saving
    or not) or a number of occurrences (``3``: the three before it)."""

    text: str
    age: float | None = None
    count: int | None = None


def parse_window(value: object, what: str = "catch-up window") -> Window:
    """A window from an option or the config: an age (``7d``, ``36h``) or a whole
    number of occurrences (``4``, or the integer 4 in the config); anything else,
    zero and negative numbers included, is refused with one line (exit 2)."""
    if isinstance(value, bool):
        raise InvalidInput(f"{what} {value!r} is not an age like 7d or a number of occurrences")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise InvalidInput(f"{what} {value!r} is not an age like 7d or a number of occurrences")
    if text.startswith("-"):
        raise InvalidInput(f"{what} {text!r} cannot be negative: give an age like 7d or a "
                           "number of occurrences (1 or more)")
    if text.isascii() and text.isdigit() and len(text.lstrip("0")) > 6:
        from .schedule import MAX_OCCURRENCES

        raise InvalidInput(f"{what} {text[:20]!r} is more than {MAX_OCCURRENCES} occurrences")
    if _COUNT.match(text):
        from .schedule import MAX_OCCURRENCES

        if int(text) < 1:
            raise InvalidInput(f"{what} {text!r} must be 1 or more occurrences")
        if int(text) > MAX_OCCURRENCES:
            # more than one run ever looks at (schedule.between): refused now, not after
            # counting back that many occurrences one by one
            raise InvalidInput(f"{what} {text!r} is more than {MAX_OCCURRENCES} occurrences")
        return Window(text, count=int(text))
    try:
        seconds = parse_age(text, what)
    except InvalidInput:
        raise InvalidInput(
            f"{what} {text!r} is not an age like 7d, 36h or 2w, nor a number of occurrences "
            "(1 or more)") from None
    if seconds <= 0:
        raise InvalidInput(f"{what} {text!r} must be longer than zero")
    return Window(text, age=seconds)


def check_window(schedule: Schedule, window: Window, now: datetime | None = None) -> None:
    """Refuse (:class:`InvalidInput`) a job's window that every run would refuse: an age
    in which the schedule can fire more than the occurrences one run looks at (``52w`` of
    a minutely job), or a window reaching back before the year 1 (a count of a yearly
    job's occurrences included). Checked when the config is read, so such a setting is
    one config error at once, not a failure of every scheduled run."""
    from .schedule import CYCLE_DAYS, MAX_OCCURRENCES

    days = window.age / 86_400 if window.age is not None else 0.0
    if window.count is not None and window.count > _FEW:
        # any 400 years (the calendar's cycle) hold the same number of occurrences
        days = CYCLE_DAYS * -(-window.count // schedule.occurrences_per_cycle())
    try:
        (now or datetime.now(UTC)) - timedelta(days=days)
    except OverflowError:
        raise InvalidInput(f"{window.text!r} can reach back before the year 1; give a "
                           "shorter window") from None
    if window.age is not None:
        most = schedule.most_within(window.age)
        if most > MAX_OCCURRENCES:
            raise InvalidInput(
                f"{window.text!r} can hold up to {most} occurrences of {schedule.expression!r}, "
                f"more than the {MAX_OCCURRENCES} a run looks at; give a shorter age or a "
                "number of occurrences")


@dataclass(frozen=True)
class Earlier:
    """An earlier occurrence that is not done: run it, or (``blocked``) report it."""

    occurrence: str
    key: str
    state: str
    """its outcome's state when the run started, or ``missing``: it never ran"""
    reason: str

    @property
    def runnable(self) -> bool:
        return self.state not in _WAITING


@dataclass(frozen=True)
class Plan:
    """The current occurrence (the parameters that name it) and the earlier ones to finish."""

    job: str
    param: str
    """the job's occurrence parameter"""
    current: str
    """the current occurrence's canonical text"""
    params: Mapping[str, str]
    """the parameters naming the current occurrence (its occurrence given explicitly, so
    the clock is read once)"""
    window: Window
    earlier: tuple[Earlier, ...]


def plan(engine: Engine, job_name: str, given: Mapping[str, str], window: Window,
         now: datetime | None = None) -> Plan:
    """The current occurrence of ``job_name`` (``given`` may name it; else the latest at
    ``now``) and the earlier ones inside ``window`` that are not done, oldest first.

    A job without a schedule and an occurrence parameter has no earlier occurrences:
    :class:`InvalidInput` (exit 2)."""
    from .errors import ConfigError
    from .missed import missed_occurrences, occurrence_param
    from .schedule import CalendarEnds

    try:
        name, schedule = occurrence_param(engine, job_name)
    except ConfigError:
        raise InvalidInput(
            f"--catch-up needs a job with a schedule and an occurrence parameter; "
            f"{job_name!r} has none, so it has no earlier occurrences to finish") from None
    spec = engine.config.job(job_name)
    canonical = spec.resolve_params(given, now or datetime.now(UTC))
    current_text = canonical[name]
    current = schedule.parse_value(current_text)
    try:
        if window.count is not None:
            start = current
            for _ in range(window.count):
                start = schedule.latest_at_or_before(start - timedelta(microseconds=1))
        else:
            assert window.age is not None
            # aware arithmetic in one zone is wall-clock arithmetic: 7d before Monday 07:00
            # is the previous Monday 07:00 across a daylight-saving change too
            start = current.astimezone(schedule.zone) - timedelta(seconds=window.age)
        start.astimezone(UTC)  # the range is looked at in UTC: that may overflow too
    except (OverflowError, CalendarEnds):  # CalendarEnds: none before the calendar's first
        raise InvalidInput(f"catch-up window {window.text!r} reaches back before the year 1 "
                           f"from {current_text}; give a shorter one") from None
    others = {k: v for k, v in given.items() if k != name}
    end = current.astimezone(UTC) - timedelta(microseconds=1)
    rows = missed_occurrences(engine, job_name, start.astimezone(UTC), end, others)
    earlier = tuple(Earlier(r.occurrence, r.key, r.state, r.reason) for r in rows)
    return Plan(job_name, name, current_text, {**given, name: current_text}, window, earlier)


def exit_code(current: int, earlier: Iterable[int]) -> int:
    """What a run with catch-up exits with: the current occurrence's code when it is not
    0; else 3 when an earlier occurrence this run tried ended blocked (or was found out
    of attempts), else 1 when one ended without ``done`` (unknown, failed, an error),
    else 0. An earlier one busy elsewhere (75) is not an error: another run finishes
    it. Earlier occurrences that were blocked before the run are reported only (their
    block was an error when it happened); the caller leaves them out of ``earlier``."""
    if current != EXIT_DONE:
        return current
    codes = set(earlier)
    if EXIT_BLOCKED in codes:
        return EXIT_BLOCKED
    if codes - {EXIT_DONE, EXIT_BUSY, EXIT_BLOCKED}:
        return EXIT_FAILED
    return EXIT_DONE
