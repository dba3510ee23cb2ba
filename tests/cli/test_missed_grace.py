"""``retrysafe missed`` leaves out an occurrence due moments ago (its run may be starting),
and says so when a range holds no occurrence at all rather than calling it all done."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import Home

CONFIG = """
    [jobs.minutely]
    key = "minutely:{occurrence}"
    schedule = "* * * * *"
    params = { occurrence = "occurrence" }

    [jobs.weekly]
    key = "weekly:{occurrence}"
    schedule = "0 7 * * 1"
    tz = "Europe/Warsaw"
    params = { occurrence = "occurrence" }
    """


@pytest.fixture
def jobs(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    return home


def _at(row: dict[str, str]) -> datetime:
    return datetime.strptime(row["occurrence"], "%Y-%m-%dT%H%M").replace(tzinfo=UTC)


def test_the_grace_is_the_dashboards() -> None:
    """One grace for the command and the dashboard's missed-runs list."""
    import inspect

    from retrysafe.missed import GRACE, recent_missing

    assert GRACE.total_seconds() == 15 * 60
    assert inspect.signature(recent_missing).parameters["grace"].default is GRACE


def test_an_occurrence_due_moments_ago_is_not_missing(jobs: Home, tmp_path: Path) -> None:
    """Every minute of the last 10 is within the 15 minutes a run may take to start: none is
    listed, --fail-if-missing exits 0 and --run runs none beside the scheduler's own run."""
    listed = jobs.run("missed", "minutely", "--since", "10m", "--json", "--fail-if-missing")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert json.loads(listed.stdout) == []
    text = jobs.run("missed", "minutely", "--since", "10m", "--fail-if-missing")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "missing" not in text.stdout and "backfill" not in text.stdout
    assert text.stdout.startswith("nothing missed: ")
    assert "due less than 15m ago" in text.stdout
    log = tmp_path / "ran.log"
    ran = jobs.run("missed", "minutely", "--since", "10m", "--run", "--",
                   "sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {shlex.quote(str(log))}')
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert not log.exists()
    assert "0 run" in ran.stdout


def test_all_shows_them_as_due_and_grace_sets_how_long(jobs: Home) -> None:
    """--grace 10m: the minutes of the last 10 are due, the 20 before them missing."""
    before = datetime.now(UTC)
    done = jobs.run("missed", "minutely", "--since", "30m", "--grace", "10m", "--all", "--json")
    after = datetime.now(UTC)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    states = [r["state"] for r in rows]
    assert set(states) == {"missing", "due"}
    assert states == sorted(states, key=lambda s: s == "due")  # missing ones first, then due
    for row in rows:
        if row["state"] == "due":
            assert _at(row) > before - timedelta(minutes=10)
        else:
            assert _at(row) <= after - timedelta(minutes=10)
    assert 19 <= states.count("missing") <= 21 and 9 <= states.count("due") <= 11


@pytest.mark.parametrize("off", ["0", "0s", "0m"])
def test_grace_0_lists_every_one_not_done(jobs: Home, off: str) -> None:
    """--grace 0: an occurrence is missing the moment it is due, as before."""
    done = jobs.run("missed", "minutely", "--since", "10m", "--grace", off, "--json",
                    "--fail-if-missing")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) >= 10 and {r["state"] for r in rows} == {"missing"}


@pytest.mark.parametrize("bad", ["soon", "-5m", "15", "15 minutes"])
def test_a_bad_grace_is_one_line_and_exit_2(jobs: Home, bad: str) -> None:
    done = jobs.run("missed", "minutely", "--since", "10m", "--grace", bad, "--run", "--", "true")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"retrysafe: --grace {bad!r} is not an age like 90d, 12h, 30m or 2w"]


def test_older_occurrences_are_missing_whatever_the_grace(jobs: Home) -> None:
    """The grace counts back from now: a past range is listed as it always was."""
    done = jobs.run("missed", "weekly", "--since", "2025-11-01", "--until", "2025-11-10",
                    "--grace", "1w", "--json")
    assert done.returncode == 0, done.stderr
    assert [(r["occurrence"], r["state"]) for r in json.loads(done.stdout)] == [
        ("2025-11-03T0700", "missing"), ("2025-11-10T0700", "missing")]


def test_a_range_without_an_occurrence_says_so(jobs: Home) -> None:
    """Tuesday to Wednesday holds no Monday: not 'every occurrence is done'."""
    for extra in ([], ["--fail-if-missing"], ["--all"]):
        done = jobs.run("missed", "weekly", "--since", "2026-11-03", "--until", "2026-11-04",
                        *extra)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ("no occurrence of weekly between 2026-11-03T0000 and "
                               "2026-11-04T2359 (Europe/Warsaw)\n")
    timed = jobs.run("missed", "weekly", "--since", "2026-11-02T07:01", "--until",
                     "2026-11-09T06:59")
    assert timed.returncode == 0, timed.stderr
    assert timed.stdout == ("no occurrence of weekly between 2026-11-02T0701 and "
                            "2026-11-09T0659 (Europe/Warsaw)\n")


def test_a_range_whose_occurrences_are_done_still_says_done(jobs: Home) -> None:
    ran = jobs.run("run", "weekly", "-p", "occurrence=2026-11-09", "--", "true")
    assert ran.returncode == 0, ran.stderr
    done = jobs.run("missed", "weekly", "--since", "2026-11-03", "--until", "2026-11-10")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "nothing missed: every occurrence of weekly since 2026-11-03 until 2026-11-10 is done\n")
