"""Edges of schedules and their settings: a catch-up window no run can use, an occurrence
not due yet, the first and last years of the calendar, and settings that keep nothing or
name no zone. Each is one line and exit 2 (a config error when the config is read), or a
correct value; never an internal error, never a run that should not happen."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import Home
from support import one_line_refusal as _one_line

from retrysafe.errors import InvalidInput
from retrysafe.schedule import Schedule, format_occurrence, next_occurrence, occurrence_at

WARSAW = "Europe/Warsaw"


def _job(setting: str, schedule: str = "* * * * *") -> str:
    return (f'[jobs.j]\nkey = "j:{{at}}"\nparams = {{ at = "occurrence" }}\n'
            f'schedule = "{schedule}"\n{setting}\n')




@pytest.fixture
def made(home: Home) -> Home:
    home.path.mkdir(parents=True)
    return home


# --- 1. a catch-up window wider than a run looks at --------------------------------------


@pytest.mark.parametrize(
    ("schedule", "window", "message"),
    [
        ("* * * * *", '"52w"', "'catch_up' '52w' can hold up to 524160 occurrences"),
        ("* * * * *", "true", "'catch_up' '7d' can hold up to 10080 occurrences"),
        ("* * 1-7 * *", '"5w"', "'catch_up' '5w' can hold up to 20160 occurrences"),
        ("@yearly", "10000", "'catch_up' '10000' can reach back before the year 1"),
        ("0 7 * * 1", '"999999999w"', "'catch_up' '999999999w' can reach back before the year 1"),
    ],
)
def test_a_catch_up_window_no_run_can_use_is_a_config_error(made: Home, tmp_path: Path,
                                                             schedule: str, window: str,
                                                             message: str) -> None:
    """catch_up = "52w" on a minutely job was accepted, and every scheduled run then exited 2
    ("more than 10000 occurrences ... narrow the range") without running the current
    occurrence. Now the config is refused when read, by any command: one line naming the job
    and the field, exit 2, and nothing runs."""
    made.config(_job(f"catch_up = {window}", schedule))
    err = _one_line(made.run("jobs"))
    assert f"job 'j': {message}" in err, err
    ran = tmp_path / "ran"
    err = _one_line(made.run("run", "j", "--", "touch", str(ran)))
    assert message in err and not ran.exists()


@pytest.mark.parametrize(
    ("schedule", "window"),
    [("* * * * *", '"6d"'), ("* 7 * * 1", '"52w"'), ("*/5 * 1-7 * *", '"10w"'),
     ("0 0 29 2 *", '"5200w"'), ("@yearly", "1500"), ("* * * * *", "10000")],
)
def test_a_wide_window_the_schedule_fills_sparsely_is_accepted(made: Home, schedule: str,
                                                               window: str) -> None:
    """The limit is the schedule's occurrences, not the age: a year of a job that fires
    60 times on Mondays holds 3120 of them, and is kept."""
    made.config(_job(f"catch_up = {window}", schedule))
    proc = made.run("jobs", "--json")
    assert proc.returncode == 0, proc.stderr


@settings(max_examples=60, deadline=None)
@given(
    schedule=st.sampled_from(["* 7 * * 1", "*/10 * 1-3 * *", "30 2 * * *", "0 */6 * * 1-5",
                              "*/20 22-23,0-1 L * *", "0,30 * 29 2 *", "15 8 * * MON#5"]),
    zone=st.sampled_from([WARSAW, "UTC", "America/Santiago", "Australia/Lord_Howe"]),
    end=st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1),
                     timezones=st.just(UTC)),
    seconds=st.integers(min_value=0, max_value=120 * 86400),
)
def test_the_bound_is_never_below_what_a_window_holds(schedule: str, zone: str, end: datetime,
                                                       seconds: int) -> None:
    """The config check counts no fewer occurrences than a run finds in the window
    (wall-clock age back from its occurrence, half-open), daylight saving days included."""
    parsed = Schedule.parse(schedule, zone)
    local = end.astimezone(parsed.zone)
    start = local - timedelta(seconds=seconds)
    found = parsed.between(start, local - timedelta(microseconds=1), limit=100_000)
    assert len(found) <= parsed.most_within(seconds)


# --- 2. an occurrence not due yet --------------------------------------------------------


def test_run_refuses_an_occurrence_not_due_yet(made: Home, tmp_path: Path) -> None:
    """run -p at=NEXT ran the occurrence ahead of its time and recorded it done, so the
    scheduler's own run of it found it done and did nothing. Now it is refused as missed
    --run refuses one (not due yet): one line, exit 2, nothing ran or was recorded, the
    dry run says the same; the latest due one still runs."""
    made.config(_job(f'tz = "{WARSAW}"', "0 7 * * *"))
    now = datetime.now(UTC)
    upcoming = format_occurrence("0 7 * * *", WARSAW, next_occurrence("0 7 * * *", WARSAW,
                                                                  now + timedelta(minutes=2)))
    ran = tmp_path / "ran"
    assert made.run("run", "j", "--", "true").returncode == 0  # the ledger exists
    before = made.snapshot()
    for value in (upcoming, "2099-06-01T07:00", "9999-12-31"):
        for extra in ((), ("--dry-run",), ("--catch-up",)):
            err = _one_line(made.run("run", "j", "-p", f"at={value}", *extra, "--", "touch",
                                     str(ran)))
            assert "is not due yet" in err, err
    assert not ran.exists()
    assert made.snapshot() == before
    latest = format_occurrence("0 7 * * *", WARSAW,
                               occurrence_at("0 7 * * *", WARSAW, now - timedelta(days=1)))
    assert made.run("run", "j", "-p", f"at={latest}", "--", "true").returncode == 0


# --- 3. the first and last years of the calendar ------------------------------------------


def test_occurrences_before_the_year_1000_keep_four_digits(made: Home) -> None:
    """0999-05-05 07:00 was keyed j:999-05-05T0700 (strftime's %Y), which sorted after
    j:2026-... and did not read back; the first day of the year 1 in Warsaw was an internal
    error (its midnight is before the year 1 in UTC). Both are now keyed as written."""
    made.config(_job(f'tz = "{WARSAW}"', "0 7 * * *"))
    for value, key in (("0999-05-05T0700", "j:0999-05-05T0700"),
                       ("0001-01-01", "j:0001-01-01T0700"),
                       ("0042-03-04T07:00", "j:0042-03-04T0700")):
        proc = made.run("run", "j", "-p", f"at={value}", "--", "true")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1] == f"done: {key} (attempt 1)"
        again = made.run("run", "j", "-p", f"at={key.split(':')[1]}", "--", "true")
        assert again.stdout.splitlines()[-1] == f"done: {key} is already done; nothing to do"


@pytest.mark.parametrize(
    ("value", "message"),
    [("0001-01-01T00:00+14:00", "outside the years 1 to 9999 in UTC"),
     ("0001-01-01T00:30", "outside the years 1 to 9999 in UTC"),
     ("0001-01-01T06:00", "nearest: 0001-01-01T0700 (after)")],
)
def test_an_instant_before_the_calendar_is_one_line(made: Home, value: str, message: str) -> None:
    made.config(_job(f'tz = "{WARSAW}"', "0 7 * * *"))
    assert message in _one_line(made.run("run", "j", "-p", f"at={value}", "--", "true"))


EDGES = [datetime.min.replace(tzinfo=UTC), datetime(1, 1, 1, 7, tzinfo=UTC),
         datetime(1, 1, 2, tzinfo=UTC), datetime(9999, 12, 30, 23, tzinfo=UTC),
         datetime(9999, 12, 31, 7, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]


@pytest.mark.parametrize("zone", [WARSAW, "UTC", "Pacific/Kiritimati", "Etc/GMT+12"])
@pytest.mark.parametrize("schedule", ["0 7 * * *", "* * * * *", "59 23 31 12 *", "0 0 1 1 *"])
def test_the_ends_of_the_calendar_are_answers_or_refusals(zone: str, schedule: str) -> None:
    """Near the years 1 and 9999 every question has an answer or raises InvalidInput (exit
    2 at the command line); it was OverflowError, an internal error."""
    parsed = Schedule.parse(schedule, zone)

    def around(at: datetime) -> object:
        if datetime(1, 1, 3, tzinfo=UTC) < at < datetime(9999, 12, 29, tzinfo=UTC):
            return parsed.between(at - timedelta(days=1), at + timedelta(days=1))
        return parsed.between(at, at)

    asks: list[Callable[[datetime], object]] = [
        parsed.latest_at_or_before, parsed.next_after, parsed.is_occurrence, around]
    for at in EDGES:
        for ask in asks:
            with contextlib.suppress(InvalidInput):
                ask(at)
        wall = at.replace(tzinfo=None).isoformat(timespec="minutes")  # 0001-..., as typed
        for text in (wall[:10], wall, f"{wall}+14:00", f"{wall}-12:00"):
            try:
                occurrence = parsed.parse_value(text)
            except InvalidInput:
                continue
            assert parsed.parse_value(parsed.format(occurrence)) == occurrence
            assert len(parsed.format(occurrence)) == len("2026-12-07T0700")


def test_the_first_and_last_occurrences_of_the_calendar() -> None:
    parsed = Schedule.parse("0 7 * * *", "UTC")
    assert parsed.format(parsed.next_after(datetime.min.replace(tzinfo=UTC))) == "0001-01-01T0700"
    last = datetime.max.replace(tzinfo=UTC)
    assert parsed.format(parsed.latest_at_or_before(last)) == "9999-12-31T0700"
    with pytest.raises(InvalidInput, match="the calendar ends in the year 9999"):
        parsed.next_after(datetime(9999, 12, 31, 8, tzinfo=UTC))
    with pytest.raises(InvalidInput, match="the calendar starts in the year 1"):
        parsed.latest_at_or_before(datetime(1, 1, 1, 6, tzinfo=UTC))


# --- 4. settings that keep nothing or name no zone, and other hostile settings -------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('keep = "0d"', "job 'j': 'keep' '0d' must be longer than zero"),
        ('keep = "0s"', "job 'j': 'keep' '0s' must be longer than zero"),
        ('tz = ""', "job 'j': 'tz': time zone '' is empty"),
        ('tz = "  "', "job 'j': 'tz': time zone '  ' is empty"),
        ('tz = "localtime"', "job 'j': 'tz': time zone 'localtime' is this machine's own zone"),
        ('tz = "Europe/Warsaw\\u0000"', "job 'j': 'tz': unknown time zone"),
        ('schedule = "0\\u00a07 * * 1"', "job 'j': 'schedule': invalid schedule '0\\xa07 * * 1': "
                                        "character U+00A0 is not allowed"),
        ('schedule = "\\uff10 7 * * 1"', "character U+FF10 is not allowed"),
        (f'schedule = "{"9" * 5000} 7 * * 1"', "longer than 1000 characters"),
        (f'schedule = "{"9" * 900} 7 * * 1"', "job 'j': 'schedule': invalid schedule"),
        ("catch_up = nan", "'catch_up' nan is not an age"),
        ("catch_up = 99999999999", "'catch_up' '99999999999' is more than 10000 occurrences"),
    ],
)
def test_a_setting_that_cannot_work_is_one_line_at_load(made: Home, setting: str,
                                                        message: str) -> None:
    """keep = "0d" let 'retrysafe prune' forget each outcome as soon as it was done (a retry
    then did its work again); tz = "" was read as UTC; a schedule of thousands of digits
    was an internal error. Each is refused when the config is read."""
    fields = "" if setting.startswith("schedule") else 'schedule = "0 7 * * 1"\n'
    made.config('[jobs.j]\nkey = "j:{at}"\nparams = { at = "occurrence" }\n'
                f"{fields}{setting}\n")
    err = _one_line(made.run("jobs"))
    assert message in err, err


def test_a_zone_is_checked_without_a_schedule_too(made: Home) -> None:
    made.config('[jobs.j]\nkey = "j:{n}"\nparams = { n = "int" }\ntz = "Europe/Warsw"\n')
    assert "job 'j': 'tz': unknown time zone 'Europe/Warsw'" in _one_line(made.run("jobs"))
