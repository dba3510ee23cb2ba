"""Occurrence keys come from the schedule, never from the clock."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrysafe.errors import ConfigError, InvalidInput, InvalidParameter
from retrysafe.missed import EARLY
from retrysafe.schedule import (
    Schedule,
    check_schedule,
    format_occurrence,
    next_occurrence,
    occurrence_at,
    occurrences_between,
    parse_occurrence,
    resolve_occurrence,
)

WARSAW = "Europe/Warsaw"
WEEKLY = "0 7 * * 1"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def texts(schedule: str, tz: str, start: datetime, end: datetime) -> list[str]:
    return [
        format_occurrence(schedule, tz, o) for o in occurrences_between(schedule, tz, start, end)
    ]


# --- the run a retry belongs to -------------------------------------------------------


def test_retry_on_tuesday_belongs_to_mondays_run() -> None:
    """A retry of Monday 07:00's run that starts on Tuesday gets Monday's key."""
    tuesday = utc(2026, 12, 8, 9, 30)
    assert resolve_occurrence(WEEKLY, WARSAW, None, tuesday) == "2026-12-07T0700"


def test_run_at_the_exact_minute_is_that_occurrence() -> None:
    """The scheduler firing at 07:00:00 sharp derives 07:00, not the week before."""
    monday_7 = utc(2026, 12, 7, 6, 0)  # 07:00 in Warsaw (UTC+1 in winter)
    assert resolve_occurrence(WEEKLY, WARSAW, None, monday_7) == "2026-12-07T0700"
    a_minute_before = monday_7 - timedelta(seconds=61)  # (a second early is 07:00's run)
    assert resolve_occurrence(WEEKLY, WARSAW, None, a_minute_before) == "2026-11-30T0700"


def test_time_zone_defaults_to_utc_not_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two hosts in different zones derive the same key when the job names no zone."""
    now = utc(2026, 12, 7, 23, 30)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        tokyo = resolve_occurrence("0 0 * * *", None, None, now)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert tokyo == resolve_occurrence("0 0 * * *", None, None, now) == "2026-12-07T0000"


def test_canonical_form_is_key_friendly() -> None:
    """Canonical occurrences use only digits, '-' and 'T' (no ':' or '+')."""
    text = resolve_occurrence(WEEKLY, WARSAW, None, utc(2026, 12, 8))
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{4}", text)


# --- daylight saving time: OpenClaw's scheduler (croner) ---------------------------------
#
# A wall-clock time that does not exist is skipped; a repeated one fires once, at its
# first reading. Each row: schedule, zone, local window (inclusive), the occurrences.

NEW_YORK = "America/New_York"
ADELAIDE = "Australia/Adelaide"
LORD_HOWE = "Australia/Lord_Howe"

DST_TABLE = [
    # spring forward, Warsaw 2026-03-29 02:00 -> 03:00
    ("30 2 * * *", WARSAW, "2026-03-28T00:00", "2026-03-30T23:59",
     ["2026-03-28T0230", "2026-03-30T0230"]),
    ("0,30 2 * * *", WARSAW, "2026-03-29T00:00", "2026-03-29T23:59", []),
    ("0 * * * *", WARSAW, "2026-03-29T00:00", "2026-03-29T04:00",
     ["2026-03-29T0000", "2026-03-29T0100", "2026-03-29T0300", "2026-03-29T0400"]),
    ("*/20 * * * *", WARSAW, "2026-03-29T01:30", "2026-03-29T03:30",
     ["2026-03-29T0140", "2026-03-29T0300", "2026-03-29T0320"]),
    ("30 2 * * 0", WARSAW, "2026-03-22T00:00", "2026-04-05T23:59",
     ["2026-03-22T0230", "2026-04-05T0230"]),
    # fall back, Warsaw 2026-10-25 03:00 -> 02:00
    ("30 2 * * *", WARSAW, "2026-10-24T00:00", "2026-10-26T23:59",
     ["2026-10-24T0230", "2026-10-25T0230", "2026-10-26T0230"]),
    ("0 * * * *", WARSAW, "2026-10-25T01:00", "2026-10-25T03:00",
     ["2026-10-25T0100", "2026-10-25T0200", "2026-10-25T0300"]),
    ("*/20 * * * *", WARSAW, "2026-10-25T01:40", "2026-10-25T03:00",
     ["2026-10-25T0140", "2026-10-25T0200", "2026-10-25T0220", "2026-10-25T0240",
      "2026-10-25T0300"]),
    ("30 2 * * 0", WARSAW, "2026-10-18T00:00", "2026-11-01T23:59",
     ["2026-10-18T0230", "2026-10-25T0230", "2026-11-01T0230"]),
    # spring forward, New York 2026-03-08 02:00 -> 03:00
    ("30 2 * * *", NEW_YORK, "2026-03-07T00:00", "2026-03-09T23:59",
     ["2026-03-07T0230", "2026-03-09T0230"]),
    ("0 * * * *", NEW_YORK, "2026-03-08T01:00", "2026-03-08T03:00",
     ["2026-03-08T0100", "2026-03-08T0300"]),
    ("*/30 * * * *", NEW_YORK, "2026-03-08T01:00", "2026-03-08T03:30",
     ["2026-03-08T0100", "2026-03-08T0130", "2026-03-08T0300", "2026-03-08T0330"]),
    ("0 2 * * 0", NEW_YORK, "2026-03-01T00:00", "2026-03-15T23:59",
     ["2026-03-01T0200", "2026-03-15T0200"]),
    # fall back, New York 2026-11-01 02:00 -> 01:00
    ("30 1 * * *", NEW_YORK, "2026-10-31T00:00", "2026-11-02T23:59",
     ["2026-10-31T0130", "2026-11-01T0130", "2026-11-02T0130"]),
    ("0 * * * *", NEW_YORK, "2026-11-01T00:00", "2026-11-01T02:00",
     ["2026-11-01T0000", "2026-11-01T0100", "2026-11-01T0200"]),
    ("*/30 * * * *", NEW_YORK, "2026-11-01T00:30", "2026-11-01T02:00",
     ["2026-11-01T0030", "2026-11-01T0100", "2026-11-01T0130", "2026-11-01T0200"]),
    ("30 1 * * 0", NEW_YORK, "2026-10-25T00:00", "2026-11-08T23:59",
     ["2026-10-25T0130", "2026-11-01T0130", "2026-11-08T0130"]),
    # half-hour offsets (the rows below are what OpenClaw 2026.9.6's own next-run
    # computation gives; tests/openclaw/test_schedule_compare.py checks the rest live).
    # Adelaide +10:30 -> +09:30 on 2026-04-05 03:00 -> 02:00, back on 2026-10-04 02:00 -> 03:00
    ("45 2 * * *", ADELAIDE, "2026-04-04T00:00", "2026-04-06T23:59",
     ["2026-04-04T0245", "2026-04-05T0245", "2026-04-06T0245"]),
    ("45 2 * * *", ADELAIDE, "2026-10-03T00:00", "2026-10-05T23:59",
     ["2026-10-03T0245", "2026-10-05T0245"]),
    ("*/30 * * * *", ADELAIDE, "2026-04-05T01:30", "2026-04-05T03:00",
     ["2026-04-05T0130", "2026-04-05T0200", "2026-04-05T0230", "2026-04-05T0300"]),
    ("*/30 * * * *", ADELAIDE, "2026-10-04T01:00", "2026-10-04T03:30",
     ["2026-10-04T0100", "2026-10-04T0130", "2026-10-04T0300", "2026-10-04T0330"]),
    # Lord Howe moves its clocks by half an hour: 02:00 -> 01:30 on 2026-04-05,
    # 02:00 -> 02:30 on 2026-10-04
    ("*/15 * * * *", LORD_HOWE, "2026-04-05T01:15", "2026-04-05T02:15",
     ["2026-04-05T0115", "2026-04-05T0130", "2026-04-05T0145", "2026-04-05T0200",
      "2026-04-05T0215"]),
    ("*/15 * * * *", LORD_HOWE, "2026-10-04T01:30", "2026-10-04T03:00",
     ["2026-10-04T0130", "2026-10-04T0145", "2026-10-04T0230", "2026-10-04T0245",
      "2026-10-04T0300"]),
    ("45 1 * * *", LORD_HOWE, "2026-04-04T00:00", "2026-04-06T23:59",
     ["2026-04-04T0145", "2026-04-05T0145", "2026-04-06T0145"]),
    ("15 2 * * *", LORD_HOWE, "2026-10-03T00:00", "2026-10-05T23:59",
     ["2026-10-03T0215", "2026-10-05T0215"]),
]


@pytest.mark.parametrize(("schedule", "tz", "start", "end", "expected"), DST_TABLE)
def test_dst_days_follow_openclaws_scheduler(
    schedule: str, tz: str, start: str, end: str, expected: list[str]
) -> None:
    """Skipped wall times have no occurrence; a repeated one has one, at its first reading."""
    parsed = Schedule.parse(schedule, tz)
    first = datetime.fromisoformat(start).replace(tzinfo=parsed.zone)
    last = datetime.fromisoformat(end).replace(tzinfo=parsed.zone)
    got = parsed.between(first, last)
    assert [parsed.format(o) for o in got] == expected
    # each is its wall clock's first reading, and listing agrees with stepping
    for occ in got:
        assert occ.astimezone(UTC) == occ.replace(fold=0).astimezone(UTC)
        assert parsed.is_occurrence(occ)
    stepped = [parsed.next_after(first - timedelta(seconds=1))] if got else []
    while stepped and len(stepped) < len(got):
        stepped.append(parsed.next_after(stepped[-1]))
    assert [o.astimezone(UTC) for o in stepped] == [o.astimezone(UTC) for o in got]


def test_spring_forward_retry_in_summer_time_belongs_to_the_last_real_run() -> None:
    """On the spring-forward day a 02:30 job has no run; a run at 03:10 keys to the day before."""
    assert resolve_occurrence("30 2 * * *", WARSAW, None, utc(2026, 3, 29, 1, 10)) == (
        "2026-03-28T0230"
    )


def test_fall_back_retry_during_second_reading_keys_to_the_first() -> None:
    """A retry during the second 02:30 belongs to the one 02:30 run (its first reading)."""
    during_second = utc(2026, 10, 25, 1, 40)  # 02:40+01:00
    assert resolve_occurrence("30 2 * * *", WARSAW, None, during_second) == "2026-10-25T0230"
    # an every-20-minutes job: the second reading's 02:20 is not a run; the last
    # first-reading run of the repeated hour (02:40+02:00) is.
    assert resolve_occurrence("*/20 * * * *", WARSAW, None, utc(2026, 10, 25, 1, 25)) == (
        "2026-10-25T0240"
    )
    assert next_occurrence("*/20 * * * *", WARSAW, utc(2026, 10, 25, 1, 25)).astimezone(UTC) == (
        utc(2026, 10, 25, 2)  # 03:00+01:00
    )


def test_second_reading_is_refused_as_a_backfill() -> None:
    """'_2' and an offset naming the second reading are refused with the first reading."""
    with pytest.raises(InvalidParameter, match=r"runs once.*use 2026-10-25T0200"):
        parse_occurrence("0 * * * *", WARSAW, "2026-10-25T0200_2")
    with pytest.raises(InvalidParameter, match="not a scheduled time"):
        parse_occurrence("0 * * * *", WARSAW, "2026-10-25T02:00+01:00")
    first = parse_occurrence("0 * * * *", WARSAW, "2026-10-25T02:00")
    assert first.astimezone(UTC) == utc(2026, 10, 25, 0)


def test_nonexistent_local_time_is_refused_with_nearest() -> None:
    """A backfill naming 02:30 on the spring-forward day says the time never runs."""
    with pytest.raises(
        InvalidParameter, match=r"does not exist.*never runs.*2026-03-30T0230 \(after\)"
    ):
        parse_occurrence("30 2 * * *", WARSAW, "2026-03-29T02:30")


# --- backfill values ---------------------------------------------------------------------


def test_backfill_value_must_be_a_real_occurrence() -> None:
    """-p occurrence=... naming a Tuesday for a Monday job fails and names the nearest runs."""
    with pytest.raises(InvalidParameter) as info:
        resolve_occurrence(WEEKLY, WARSAW, "2026-12-08T07:00")
    assert "2026-12-07T0700 (before)" in str(info.value)
    assert "2026-12-14T0700 (after)" in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-07T0700",
        "2026-12-07T07:00",
        "2026-12-07 07:00",
        "2026-12-07T07:00+01:00",
        "2026-12-07T06:00Z",
        "2026-12-07",
    ],
)
def test_backfill_value_forms_resolve_to_canonical(value: str) -> None:
    """Canonical, local, offset, UTC and bare-date spellings of one run give one key."""
    assert resolve_occurrence(WEEKLY, WARSAW, value) == "2026-12-07T0700"


def test_bare_date_with_several_runs_asks_for_the_time() -> None:
    """A bare date is refused when the schedule fires more than once that day."""
    with pytest.raises(InvalidParameter, match=r"fires 2 times.*2026-12-07T0700, 2026-12-07T1900"):
        resolve_occurrence("0 7,19 * * *", WARSAW, "2026-12-07")


@pytest.mark.parametrize("value", ["next monday", "2026-12-07T07:00:30", "2026-13-01"])
def test_malformed_values_are_invalid_parameters(value: str) -> None:
    """Garbage, seconds and impossible dates are one clear InvalidParameter."""
    with pytest.raises(InvalidParameter):
        resolve_occurrence(WEEKLY, WARSAW, value)


# --- configuration errors -----------------------------------------------------------------


def test_occurrence_without_schedule_is_a_config_error() -> None:
    """A job with an occurrence parameter but no schedule cannot derive a key."""
    with pytest.raises(ConfigError, match="job has an occurrence parameter but no schedule"):
        resolve_occurrence(None, WARSAW, None)


@pytest.mark.parametrize(
    ("schedule", "tz", "message"),
    [
        ("0 7 * *", WARSAW, "expected 5 fields"),
        ("0 0 7 * * 1", WARSAW, "expected 5 fields"),
        ("61 7 * * 1", WARSAW, "invalid schedule"),
        ("0 0 30 2 *", WARSAW, "invalid schedule"),
        (WEEKLY, "Europe/Atlantis", "unknown time zone 'Europe/Atlantis'"),
        (WEEKLY, "../etc/passwd", "unknown time zone"),
    ],
)
def test_bad_schedule_or_zone_is_a_config_error(schedule: str, tz: str, message: str) -> None:
    """Malformed schedules and unknown zones are ConfigError (exit 2) with the cause."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_schedule(schedule, tz)


def test_nicknames_are_accepted() -> None:
    """@daily and friends mean what cron means by them."""
    assert resolve_occurrence("@weekly", WARSAW, None, utc(2026, 12, 8)) == "2026-12-06T0000"
    assert Schedule.parse("@daily", None).expression == "0 0 * * *"


def test_naive_now_is_refused() -> None:
    """An instant without a zone could be any of 24 hours; it is refused, not guessed."""
    with pytest.raises(InvalidInput, match="must carry a time zone"):
        occurrence_at(WEEKLY, WARSAW, datetime(2026, 12, 8, 9, 30))


def test_listing_is_bounded() -> None:
    """A minutely schedule over a year is refused rather than listed."""
    with pytest.raises(InvalidInput, match="narrow the range"):
        occurrences_between("* * * * *", "UTC", utc(2026, 1, 1), utc(2027, 1, 1))


# --- properties ------------------------------------------------------------------------------

SCHEDULES = [
    "0 7 * * 1",
    "30 2 * * *",
    "0,30 2 * * *",
    "0 * * * *",
    "*/15 * * * *",
    "15 3 1 * *",
    "0 0 29 2 *",
    "45 23 * * 1-5",
    "0 2 L * *",
]
ZONES = ["UTC", "Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
instants = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2060, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), tz=st.sampled_from(ZONES), now=instants)
def test_occurrence_brackets_the_instant(schedule: str, tz: str, now: datetime) -> None:
    """occurrence_at(now) <= now < the next occurrence after it, across DST changes."""
    occ = occurrence_at(schedule, tz, now)
    assert occ.astimezone(UTC) <= now
    assert next_occurrence(schedule, tz, occ).astimezone(UTC) > now


@settings(max_examples=300, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), tz=st.sampled_from(ZONES), now=instants)
def test_canonical_form_round_trips(schedule: str, tz: str, now: datetime) -> None:
    """format then parse gives back the same instant, and resolving it is stable."""
    occ = occurrence_at(schedule, tz, now)
    text = format_occurrence(schedule, tz, occ)
    assert parse_occurrence(schedule, tz, text).astimezone(UTC) == occ.astimezone(UTC)
    assert resolve_occurrence(schedule, tz, text) == text
    served = resolve_occurrence(schedule, tz, None, now)
    if served != text:  # a run started a little early for the coming occurrence serves it
        coming = next_occurrence(schedule, tz, now)
        assert served == format_occurrence(schedule, tz, coming)
        assert timedelta(0) < coming.astimezone(UTC) - now <= EARLY


@settings(max_examples=200, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), tz=st.sampled_from(ZONES), now=instants,
       lead=st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=5)))
def test_a_run_seconds_before_an_occurrence_serves_it(schedule: str, tz: str, now: datetime,
                                                      lead: timedelta) -> None:
    """Up to 5 seconds before any occurrence of these schedules (each at least a minute
    from the one before it), across DST changes, a run serves that occurrence."""
    coming = next_occurrence(schedule, tz, now)
    started = coming.astimezone(UTC) - lead
    assert resolve_occurrence(schedule, tz, None, started) == format_occurrence(schedule, tz,
                                                                                coming)


@settings(max_examples=100, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    tz=st.sampled_from(ZONES),
    start=instants,
    hours=st.integers(min_value=0, max_value=24 * 40),
)
def test_listing_agrees_with_stepping(schedule: str, tz: str, start: datetime, hours: int) -> None:
    """occurrences_between is exactly the chain of next occurrences inside the range."""
    end = start + timedelta(hours=hours)
    listed = [o.astimezone(UTC) for o in occurrences_between(schedule, tz, start, end)]
    assert listed == sorted(set(listed))
    assert all(start <= o <= end for o in listed)
    expected: list[datetime] = []
    cursor = next_occurrence(schedule, tz, start - timedelta(microseconds=1))
    while cursor.astimezone(UTC) <= end:
        expected.append(cursor.astimezone(UTC))
        cursor = next_occurrence(schedule, tz, cursor)
    assert listed == expected
