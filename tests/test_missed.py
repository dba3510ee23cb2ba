"""``retrysafe missed``: which scheduled occurrences still need a (back)fill."""

from __future__ import annotations

import json
import sys

import pytest
from support import Home


@pytest.fixture
def weekly(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.weekly]
        key = "weekly:{occurrence}"
        schedule = "0 7 * * 1"
        tz = "Europe/Warsaw"
        params = { occurrence = "occurrence" }

        [jobs.adhoc]
        key = "adhoc:{week}"
        params = { week = "isoweek" }
        """
    )
    return home


def test_lists_occurrences_not_done_and_how_to_backfill(weekly: Home) -> None:
    """A backfilled Monday is done; the other Mondays are missing, oldest first."""
    ran = weekly.run("run", "weekly", "-p", "occurrence=2026-11-09", "--", "true")
    assert ran.returncode == 0, ran.stderr
    done = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-23")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[1:-1]] == ["2026-11-02T0700", "2026-11-16T0700", "2026-11-23T0700"]
    assert all(ln.split()[2] == "missing" for ln in lines[1:-1])
    assert lines[-1] == "backfill: retrysafe run weekly -p occurrence=2026-11-02T0700 -- CMD"


def test_json_with_all_shows_done_ones(weekly: Home) -> None:
    """--all --json lists every occurrence in range with its ledger state."""
    weekly.run("run", "weekly", "-p", "occurrence=2026-11-09T07:00", "--", "true")
    done = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-10", "--all", "--json")
    rows = json.loads(done.stdout)
    assert [(r["key"], r["state"]) for r in rows] == [
        ("weekly:2026-11-02T0700", "missing"),
        ("weekly:2026-11-09T0700", "done"),
    ]


def test_backfill_of_a_non_occurrence_is_refused(weekly: Home) -> None:
    """A backfill value that is not a scheduled time changes nothing and exits 2."""
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-10T07:00", "--", "true")
    assert done.returncode == 2
    assert "not a scheduled time" in done.stderr and "2026-11-09T0700 (before)" in done.stderr


def test_job_without_schedule_is_a_config_error(weekly: Home) -> None:
    """missed needs a schedule: one line, exit 2."""
    done = weekly.run("missed", "adhoc", "--since", "2026-11-01")
    assert done.returncode == 2
    assert "no schedule" in done.stderr


@pytest.mark.parametrize(
    ("schedule", "tz", "since", "until", "expected"),
    [
        ("30 2 * * *", "Europe/Warsaw", "2026-03-28", "2026-03-30",
         ["2026-03-28T0230", "2026-03-30T0230"]),
        ("0 * * * *", "Europe/Warsaw", "2026-10-25T01:00", "2026-10-25T03:00",
         ["2026-10-25T0100", "2026-10-25T0200", "2026-10-25T0300"]),
        ("0 2 * * *", "America/New_York", "2026-03-07", "2026-03-09",
         ["2026-03-07T0200", "2026-03-09T0200"]),
        ("*/30 * * * *", "America/New_York", "2026-11-01T00:30", "2026-11-01T02:00",
         ["2026-11-01T0030", "2026-11-01T0100", "2026-11-01T0130", "2026-11-01T0200"]),
    ],
)
def test_missed_lists_only_what_openclaw_fires_on_dst_days(
    home: Home, schedule: str, tz: str, since: str, until: str, expected: list[str]
) -> None:
    """No phantom run in a skipped hour, no second reading of a repeated one."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.dst]
        key = "dst:{{occurrence}}"
        schedule = "{schedule}"
        tz = "{tz}"
        params = {{ occurrence = "occurrence" }}
        """
    )
    done = home.run("missed", "dst", "--since", since, "--until", until, "--json")
    assert done.returncode == 0, done.stderr
    assert [r["occurrence"] for r in json.loads(done.stdout)] == expected


def test_run_finishes_what_never_ran_or_failed_oldest_first_once(weekly: Home, tmp_path) -> None:
    """--run runs each missing or failed occurrence under its own key, oldest first, skips the
    done one, and a second --run finds nothing left to do."""
    log = tmp_path / "ran.log"
    record = ["sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {log}']
    assert weekly.run("run", "weekly", "-p", "occurrence=2026-11-09", "--", "true").returncode == 0
    failed = weekly.run("run", "weekly", "-p", "occurrence=2026-11-16", "--", "false")
    assert failed.returncode == 1
    done = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-23",
                      "--run", "--", *record)
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == [
        "weekly:2026-11-02T0700", "weekly:2026-11-16T0700", "weekly:2026-11-23T0700",
    ]
    assert done.stdout.splitlines()[-1] == (
        "missed --run: 3 run, 3 done, 0 blocked, 0 not done, 0 busy elsewhere"
    )
    again = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-23",
                       "--run", "--", *record)
    assert again.returncode == 0, again.stderr
    assert len(log.read_text().splitlines()) == 3
    listed = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-23", "--json")
    assert json.loads(listed.stdout) == []


def test_run_leaves_blocked_ones_to_a_person_and_says_so(weekly: Home) -> None:
    """A blocked occurrence is not run; the exit is 3 and the line names it."""
    blocked = weekly.run("run", "weekly", "-p", "occurrence=2026-11-02", "--", "sh", "-c",
                         f'{sys.executable} -m retrysafe step pay --class payment -- true')
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    done = weekly.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-03",
                      "--run", "--", "true")
    assert done.returncode == 3
    assert "blocked: weekly:2026-11-02T0700 waits for a person" in done.stderr
    assert "0 run" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run"], "--run needs the command"),
        (["--", "true"], "unexpected argument 'true'"),
        (["--run", "--json", "--", "true"], "cannot be combined"),
        (["--since", "yesterday"], "not a date"),
    ],
)
def test_run_usage_errors(weekly: Home, args: list[str], message: str) -> None:
    """Misused --run (or a bad --since) is one line and exit 2, and runs nothing."""
    since = [] if "--since" in args else ["--since", "2026-11-01"]
    done = weekly.run("missed", "weekly", *since, *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_since_accepts_an_age_back_from_now(weekly: Home) -> None:
    """--since 15d covers the last two Mondays (a cron recipe needs no date)."""
    done = weekly.run("missed", "weekly", "--since", "15d", "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) in (2, 3)
