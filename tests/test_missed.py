"""``retrysafe missed``: which scheduled occurrences still need a (back)fill."""

from __future__ import annotations

import json

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
