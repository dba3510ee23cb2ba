"""An occurrence is run at or after its time, by every entry point, give or take a
scheduler's clock a little ahead of ours; a job's zone is one every host reads alike."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import Home
from support import one_line_refusal as _one_line

import retrysafe
from retrysafe.engine import Engine, close_all
from retrysafe.errors import InvalidParameter
from retrysafe.missed import EARLY, check_due, check_given_due
from retrysafe.schedule import Schedule, format_occurrence, next_occurrence
from retrysafe.states import ClaimStatus

WARSAW = "Europe/Warsaw"
DAILY = "0 7 * * *"
CONFIG = f"""
[jobs.j]
key = "j:{{at}}"
params = {{ at = "occurrence" }}
schedule = "{DAILY}"
tz = "{WARSAW}"

[jobs.w]
key = "w:{{week}}"
params = {{ week = "isoweek" }}
"""




@pytest.fixture
def made(home: Home) -> Home:
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    assert home.run("run", "w", "-p", "week=2026-W01", "--", "true").returncode == 0  # a ledger
    return home


def _upcoming() -> str:
    """An occurrence well ahead of now (a day, give or take), never within the tolerance."""
    after = datetime.now(UTC) + timedelta(minutes=10)
    return format_occurrence(DAILY, WARSAW, next_occurrence(DAILY, WARSAW, after))


def _latest() -> str:
    """The occurrence a run started now serves (the latest due one, or one due within
    seconds)."""
    schedule = Schedule.parse(DAILY, WARSAW)
    return schedule.format(schedule.current_at(datetime.now(UTC)))


# --- 1. begin and the Python API refuse an occurrence not due yet -------------------------


def test_begin_refuses_an_occurrence_not_due_yet(made: Home) -> None:
    """'retrysafe begin j -p at=TOMORROW' claimed an attempt at tomorrow's run, which an
    agent then did ahead of its time (and the scheduler's run found it done). Now it is one
    line, exit 2, nothing recorded, with or without --json; the latest due one begins."""
    before = made.snapshot()
    for value in (_upcoming(), "2099-06-01T07:00", "9999-12-31"):
        for extra in ((), ("--json",)):
            err = _one_line(made.run("begin", "j", "-p", f"at={value}", *extra))
            assert "is not due yet" in err and "of job 'j'" in err, err
    assert made.snapshot() == before
    started = made.run("begin", "j", "-p", f"at={_latest()}")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(f"started: j:{_latest()} attempt 1"), started.stdout


def test_the_python_api_refuses_an_occurrence_not_due_yet(made: Home) -> None:
    """retrysafe.start, Engine.start and Engine.begin all took tomorrow's occurrence and ran
    its block; now each raises InvalidParameter before anything is recorded or run."""
    upcoming = _upcoming()
    ran: list[str] = []
    try:
        with pytest.raises(InvalidParameter, match="is not due yet"), \
                retrysafe.start("j", {"at": upcoming}, home=made.path, heartbeat=False):
            ran.append("start")
        with Engine.open(made.path) as engine:
            with pytest.raises(InvalidParameter, match="is not due yet"), \
                    engine.start("j", {"at": upcoming}, heartbeat=False):
                ran.append("engine.start")
            with pytest.raises(InvalidParameter, match="is not due yet"):
                engine.begin("j", {"at": upcoming})
            assert engine.ledger.outcome(f"j:{upcoming}") is None
            with engine.start("j", {"at": _latest()}, heartbeat=False) as run:
                assert run.key == f"j:{_latest()}"
            with engine.start("j", heartbeat=False) as run:  # left out: the latest due one
                assert run.key == f"j:{_latest()}"
    finally:
        close_all()
    assert ran == []


def test_a_job_without_a_schedule_takes_any_value(made: Home) -> None:
    """Only a job with a schedule has occurrences that can be early: a future ISO week of
    a job without one still begins."""
    started = made.run("begin", "w", "-p", "week=2099-W01")
    assert started.returncode == 0, started.stderr


def test_begin_checks_at_the_time_it_is_given(made: Home) -> None:
    """Engine.begin(now=...) reads the occurrence at that time, and checks it at that
    time too: the same occurrence is refused a day before and begins once it is due."""
    at = datetime(2026, 11, 9, 7, tzinfo=Schedule.parse(DAILY, WARSAW).zone)
    with Engine.open(made.path) as engine:
        with pytest.raises(InvalidParameter, match="latest due one is 2026-11-08T0700"):
            engine.begin("j", {"at": "2026-11-09T0700"}, now=at - timedelta(days=1))
        begun = engine.begin("j", {"at": "2026-11-09T0700"}, now=at - timedelta(seconds=30),
                             folder=False)
        assert begun.status is ClaimStatus.STARTED
        assert begun.key == "j:2026-11-09T0700"


# --- 2. a scheduler firing a little early ------------------------------------------------


def test_an_occurrence_a_few_seconds_early_is_due() -> None:
    """A scheduler whose clock is ahead of ours fires 07:00 at 06:59:5x by our clock: that
    was refused as not due yet. Up to EARLY (a minute) before its time it is due; further
    ahead it is still refused."""
    schedule = Schedule.parse(DAILY, WARSAW)
    at = datetime(2026, 11, 9, 6, tzinfo=UTC)  # 07:00 in Warsaw
    assert timedelta(seconds=60) == EARLY
    for early in (timedelta(0), timedelta(seconds=5), timedelta(seconds=59), EARLY):
        check_due("j", schedule, "2026-11-09T0700", now=at - early)
    for early in (EARLY + timedelta(seconds=1), timedelta(minutes=5), timedelta(days=1)):
        with pytest.raises(InvalidParameter, match="not due yet") as caught:
            check_due("j", schedule, "2026-11-09T0700", now=at - early)
        assert "\n" not in caught.value.message


def test_the_engine_allows_the_same_tolerance(made: Home) -> None:
    """The engine's check (no schedule parsed for a due occurrence) draws the line where
    check_due does, on both sides, and in a zone other than UTC."""
    config = Engine.open(made.path).config
    job = config.job("j")
    at = datetime(2026, 11, 9, 6, tzinfo=UTC)
    given = {"at": "2026-11-09T07:00"}
    canonical = {"at": "2026-11-09T0700"}
    for early in (timedelta(0), timedelta(seconds=30), EARLY):
        check_given_due(job, given, canonical, now=at - early)
    for early in (EARLY + timedelta(seconds=1), timedelta(hours=1)):
        with pytest.raises(InvalidParameter, match="not due yet"):
            check_given_due(job, given, canonical, now=at - early)
    check_given_due(job, {}, canonical, now=at - timedelta(days=1))  # left out: resolved


def test_a_run_fired_early_serves_the_coming_occurrence() -> None:
    """A scheduler firing Monday 07:00's run at 06:59:59 by our clock got the occurrence
    before it: that one was done, so the run answered "already done" and Monday's never
    ran. Up to EARLY before an occurrence a run serves it; a run further ahead still
    serves the one before it (a retry of that one)."""
    daily = Schedule.parse(DAILY, WARSAW)
    at = datetime(2026, 11, 9, 6, tzinfo=UTC)  # 07:00 in Warsaw
    for early in (timedelta(0), timedelta(microseconds=1), timedelta(seconds=1),
                  timedelta(seconds=59), EARLY):
        assert daily.format(daily.current_at(at - early)) == "2026-11-09T0700", early
    for early in (EARLY + timedelta(seconds=1), timedelta(minutes=5), timedelta(hours=20)):
        assert daily.format(daily.current_at(at - early)) == "2026-11-08T0700", early
    assert daily.format(daily.current_at(at + timedelta(hours=23))) == "2026-11-09T0700"


@pytest.mark.parametrize(("schedule", "lead"), [("* * * * *", 6), ("*/5 * * * *", 30),
                                                ("0 * * * *", 60)])
def test_the_lead_is_a_tenth_of_the_time_between_occurrences(schedule: str,
                                                             lead: int) -> None:
    """A job run every minute: a run that starts 50 seconds late (under load) is still
    the late run of its own minute, not the next minute's; only one within 6 seconds of
    the next minute is that one's. The lead is EARLY at most."""
    parsed = Schedule.parse(schedule, None)
    at = datetime(2026, 11, 9, 6, tzinfo=UTC)
    coming = parsed.format(at)
    before = parsed.format(parsed.latest_at_or_before(at - timedelta(seconds=1)))
    assert parsed.format(parsed.current_at(at - timedelta(seconds=lead))) == coming
    assert parsed.format(parsed.current_at(at - timedelta(seconds=lead + 1))) == before


@pytest.mark.skipif(shutil.which("faketime") is None and os.environ.get("CI") != "true",
                    reason="libfaketime (Debian package faketime) is not installed")
def test_the_schedulers_run_a_second_early_runs_the_coming_occurrence(made: Home,
                                                                      tmp_path: Path) -> None:
    """End to end, the line a scheduler runs (no -p): Sunday's run is done; Monday's run,
    fired at 06:59:59 Warsaw time by our clock, does Monday's occurrence (its command runs),
    and a retry of it an hour later finds Monday's done."""
    marks = tmp_path / "ran"
    cmd = ["run", "j", "--", "sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {marks}']

    def at(when: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["faketime", "-f", f"@{when}", *made.cmd(*cmd)],
                              env={**made.env, "TZ": "UTC"}, capture_output=True,
                              text=True, timeout=60, check=False)

    sunday = at("2026-11-08 06:00:05")  # 07:00:05 in Warsaw
    assert sunday.returncode == 0, sunday.stderr
    early = at("2026-11-09 05:59:59")
    assert early.returncode == 0, early.stderr
    assert early.stdout.startswith("done: j:2026-11-09T0700"), early.stdout
    retry = at("2026-11-09 07:00:00")
    assert retry.returncode == 0 and "already done" in retry.stdout, retry.stdout
    assert retry.stdout.startswith("done: j:2026-11-09T0700"), retry.stdout
    assert marks.read_text().split() == ["j:2026-11-08T0700", "j:2026-11-09T0700"]


# --- 3. zones that are not zones, or not the scheduler's ---------------------------------


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("right/UTC", "time zone 'right/UTC' counts leap seconds, so its clock is about 27 "
                      "seconds off the one schedulers read (use the plain zone name 'UTC')"),
        ("right/Europe/Warsaw", "use the plain zone name 'Europe/Warsaw'"),
        ("RIGHT/UTC", "use the plain zone name 'UTC'"),
        ("right/localtime", "use the plain zone name, such as 'Europe/Warsaw' or 'UTC'"),
        ("posix/Europe/Warsaw", "time zone 'posix/Europe/Warsaw' is a copy of a zone that "
                                "only some hosts' time zone databases hold, so another host "
                                "may not read it (use the plain zone name 'Europe/Warsaw')"),
        ("Posix/UTC", "use the plain zone name 'UTC'"),
        ("posix/Nowhere/City", "use the plain zone name, such as 'Europe/Warsaw' or 'UTC'"),
        ("posixrules", "time zone 'posixrules' is a file of the time zone database, not a "
                       "zone (use the plain zone name, such as 'Europe/Warsaw' or 'UTC')"),
    ],
)
def test_a_leap_second_zone_or_the_rules_file_is_a_config_error(home: Home, tmp_path: Path,
                                                                 zone: str,
                                                                 message: str) -> None:
    """tz = "right/UTC" was taken: its clock counts leap seconds, so its occurrences are
    about 27 seconds away from the scheduler's; tz = "posixrules" is a file of tzdata (New
    York's rules on most systems), read as a zone; tz = "posix/Europe/Warsaw" is a copy
    some hosts' databases hold and Python's own tzdata does not. Each is refused when the
    config is read, as tz = "localtime" is, with the plain name to use; so is 'job add
    --tz'."""
    home.path.mkdir(parents=True)
    home.config(f'[jobs.j]\nkey = "j:{{at}}"\nparams = {{ at = "occurrence" }}\n'
                f'schedule = "{DAILY}"\ntz = "{zone}"\n')
    err = _one_line(home.run("jobs"))
    assert f"job 'j': 'tz': time zone {zone!r} " in err and message in err, err
    ran = tmp_path / "ran"
    err = _one_line(home.run("run", "j", "--", "touch", str(ran)))
    assert message in err and not ran.exists()
    home.config("")
    err = _one_line(home.run("job", "add", "k", "--key", "k:{at}", "--param", "at=occurrence",
                             "--schedule", DAILY, "--tz", zone))
    assert message in err, err
    assert "[jobs.k]" not in (home.path / "retrysafe.toml").read_text()


def test_the_plain_zones_are_still_taken(home: Home) -> None:
    home.path.mkdir(parents=True)
    home.config(CONFIG.replace(WARSAW, "UTC"))
    assert home.run("jobs").returncode == 0
