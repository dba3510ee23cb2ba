"""``retrysafe run --catch-up``: earlier unfinished occurrences of a scheduled job are finished
first, oldest first, each under its own key, and the current one still runs.

Every run names its occurrence with ``-p occurrence=...`` (the window counts back from it), so
no test depends on today's date, except the two about the job's ``catch_up`` setting, which
applies to the run of the current occurrence and only compares the keys it printed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import Home

WEEKLY = """
[jobs.weekly]
key = "weekly:{occurrence}"
schedule = "0 7 * * 1"
tz = "Europe/Warsaw"
params = { occurrence = "occurrence" }
max_attempts = 3

[jobs.adhoc]
key = "adhoc:{week}"
params = { week = "isoweek" }
"""


@pytest.fixture
def weekly(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(WEEKLY)
    return home


def _recorder(log: Path) -> list[str]:
    """A command that writes the outcome key it runs for into ``log``."""
    return ["sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {log}']


def _ran(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _week(home: Home, day: str, *cmd: str) -> int:
    return home.run("run", "weekly", "-p", f"occurrence={day}", "--", *cmd).returncode


def _state(home: Home, key: str) -> Any:
    done = home.run("status", key, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_failed_monday_is_finished_before_todays(weekly: Home, tmp_path: Path) -> None:
    """Last Monday ended failed: today's run with --catch-up runs it first (its attempt 2, its
    own key), then today's; the summary line stays last; a second run finds nothing left."""
    log = tmp_path / "ran.log"
    assert _week(weekly, "2026-11-16", "false") == 1
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                      *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ran(log) == ["weekly:2026-11-16T0700", "weekly:2026-11-23T0700"]
    lines = [ln for ln in done.stdout.splitlines() if ln]
    assert "catch-up: done: weekly:2026-11-16T0700 (attempt 2)" in lines
    assert lines[-1] == "done: weekly:2026-11-23T0700 (attempt 1)"
    assert _state(weekly, "weekly:2026-11-16T0700")["outcome"]["state"] == "done"
    again = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                       *_recorder(log))
    assert again.returncode == 0, again.stderr
    assert len(_ran(log)) == 2
    assert "catch-up:" not in again.stdout


def test_json_lists_each_earlier_occurrence(weekly: Home, tmp_path: Path) -> None:
    """--json: the current occurrence's object with a catch_up list, one entry per earlier
    occurrence (its state before, what was done, its own attempt and exit code)."""
    assert _week(weekly, "2026-11-16", "false") == 1
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--json",
                      "--", *_recorder(tmp_path / "ran.log"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["key"], result["state"], result["exit_code"]) == ("weekly:2026-11-23T0700", "done", 0)
    [earlier] = result["catch_up"]
    assert {k: earlier[k] for k in ("occurrence", "key", "before", "action", "state", "attempt",
                                    "exit_code")} == {
        "occurrence": "2026-11-16T0700", "key": "weekly:2026-11-16T0700", "before": "failed",
        "action": "run", "state": "done", "attempt": 2, "exit_code": 0}


def test_an_unknown_one_is_looked_up_not_executed_again(weekly: Home, tmp_path: Path) -> None:
    """Monday's send happened but its answer was lost (unknown). The catch-up attempt runs the
    step's lookup, finds the message and records it: one message per week, not two."""
    sent = tmp_path / "sent.log"
    lose = tmp_path / "lose-the-answer"
    script = tmp_path / "send.sh"
    script.write_text(
        "#!/bin/sh\nset -eu\n"
        f"exec {sys.executable} -m retrysafe step send --class message "
        f"--check 'test -f {sent} && grep -F \"$RETRYSAFE_STEP_KEY\" {sent}' "
        f"-- sh -c 'echo \"$RETRYSAFE_STEP_KEY\" >> {sent}; test ! -e {lose}'\n")
    script.chmod(0o755)
    lose.touch()
    assert _week(weekly, "2026-11-16", str(script)) == 1
    assert _state(weekly, "weekly:2026-11-16T0700")["outcome"]["state"] == "unknown"
    lose.unlink()
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                      str(script))
    assert done.returncode == 0, done.stdout + done.stderr
    effects = sent.read_text().splitlines()
    assert len(effects) == 2, effects
    assert sum("2026-11-16" in e for e in effects) == 1
    assert sum("2026-11-23" in e for e in effects) == 1
    monday = _state(weekly, "weekly:2026-11-16T0700")
    assert monday["outcome"]["state"] == "done"
    assert "2026-11-16" in monday["steps"][0]["evidence"]  # what the lookup found


def test_blocked_ones_are_reported_and_not_run(weekly: Home, tmp_path: Path) -> None:
    """A blocked Monday waits for a person: one line with the unblocking command, no attempt,
    and today's run still happens (exit 0: the block was reported when it happened)."""
    log = tmp_path / "ran.log"
    pay = f"{sys.executable} -m retrysafe step pay --class payment -- true"
    assert _week(weekly, "2026-11-16", "sh", "-c", pay) == 3
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                      *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ran(log) == ["weekly:2026-11-23T0700"]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("catch-up:")]
    assert line.startswith("catch-up: blocked: weekly:2026-11-16T0700 waits for a person: ")
    assert "to unblock: retrysafe approve weekly:2026-11-16T0700 pay" in line
    assert len(_state(weekly, "weekly:2026-11-16T0700")["attempts"]) == 1


def test_window_and_oldest_first(weekly: Home, tmp_path: Path) -> None:
    """Only occurrences inside the window run, oldest first: 3 occurrences, or an age (15d
    back from Monday 2026-11-23 07:00 reaches 2026-11-09 but not 2026-11-02)."""
    log = tmp_path / "ran.log"
    assert _week(weekly, "2026-11-02", "false") == 1
    assert _week(weekly, "2026-11-09", "false") == 1
    listed = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up-window",
                        "15d", "--dry-run", "--json", "--", *_recorder(log))
    assert listed.returncode == 0, listed.stderr
    plan = json.loads(listed.stdout)
    assert [(e["key"], e["state"], e["action"]) for e in plan["catch_up"]] == [
        ("weekly:2026-11-09T0700", "failed", "catch up"),
        ("weekly:2026-11-16T0700", "missing", "catch up")]
    assert plan["current"] == {"key": "weekly:2026-11-23T0700", "state": "missing", "action": "run"}
    assert not log.exists()  # a dry run runs nothing
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up-window", "3",
                      "--", *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ran(log) == ["weekly:2026-11-02T0700", "weekly:2026-11-09T0700",
                         "weekly:2026-11-16T0700", "weekly:2026-11-23T0700"]
    never = weekly.run("status", "weekly:2026-10-26T0700")
    assert never.returncode != 0  # 2026-10-26 was outside the window: never run


def test_the_default_week_is_counted_on_the_wall_clock(weekly: Home, tmp_path: Path) -> None:
    """Monday 2026-10-19 07:00 (summer time) is 7 days and 1 hour before Monday 2026-10-26
    07:00 (winter time); the default window of 7d is the job's wall clock, so it is caught up."""
    log = tmp_path / "ran.log"
    assert _week(weekly, "2026-10-19", "false") == 1
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-10-26", "--catch-up", "--",
                      *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ran(log) == ["weekly:2026-10-19T0700", "weekly:2026-10-26T0700"]


def test_a_live_attempt_on_an_earlier_one_answers_busy(weekly: Home, tmp_path: Path) -> None:
    """Another run is doing Monday right now: the catch-up says busy in one line, does not
    wait for it, and today's run goes on (exit 0: the other run finishes Monday)."""
    log = tmp_path / "ran.log"
    started = tmp_path / "started"
    holder = weekly.popen("run", "weekly", "-p", "occurrence=2026-11-16", "--", "sh", "-c",
                          f"touch {started}; exec sleep 60")
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline and holder.poll() is None, "holder never started"
            time.sleep(0.05)
        began = time.monotonic()
        done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                          *_recorder(log))
        took = time.monotonic() - began
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert took < 20
    assert _ran(log) == ["weekly:2026-11-23T0700"]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("catch-up:")]
    assert line.startswith("catch-up: busy: weekly:2026-11-16T0700 is held by attempt 1")


def test_an_outcome_out_of_attempts_is_reported_not_forced(weekly: Home, tmp_path: Path) -> None:
    """Monday used its 3 attempts: the catch-up does not start a fourth; it reports it with
    'retrysafe retry' (exit 3 the run that found it so); a later run only lists it."""
    log = tmp_path / "ran.log"
    for _ in range(3):
        assert _week(weekly, "2026-11-16", "false") == 1
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                      *_recorder(log))
    assert done.returncode == 3, done.stdout + done.stderr
    assert _ran(log) == ["weekly:2026-11-23T0700"]
    assert "to unblock: retrysafe retry weekly:2026-11-16T0700" in done.stdout
    assert len(_state(weekly, "weekly:2026-11-16T0700")["attempts"]) == 3
    later = weekly.run("run", "weekly", "-p", "occurrence=2026-11-30", "--catch-up-window", "2",
                       "--", *_recorder(log))
    assert later.returncode == 0, later.stdout + later.stderr
    assert "catch-up: blocked: weekly:2026-11-16T0700 waits for a person" in later.stdout
    assert _ran(log)[-1] == "weekly:2026-11-30T0700"


def test_an_earlier_one_that_fails_again_makes_the_exit_1(weekly: Home, tmp_path: Path) -> None:
    """Monday fails again: one line says so, today's run is done, the exit is 1; when today's
    own run fails, its code is the exit."""
    fails_monday = ["sh", "-c", 'test "$RETRYSAFE_OUTCOME_KEY" != weekly:2026-11-16T0700']
    assert _week(weekly, "2026-11-16", "false") == 1
    done = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--",
                      *fails_monday)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "catch-up: failed: weekly:2026-11-16T0700 (attempt 2): command exited 1" in done.stdout
    assert done.stdout.splitlines()[-1] == "done: weekly:2026-11-23T0700 (attempt 1)"
    pay = f"{sys.executable} -m retrysafe step pay --class payment -- true"
    blocked = weekly.run("run", "weekly", "-p", "occurrence=2026-11-30", "--catch-up", "--",
                         "sh", "-c", pay)
    assert blocked.returncode == 3  # today's own code wins


def test_a_stop_signal_ends_the_catch_up_before_the_current_one(weekly: Home,
                                                               tmp_path: Path) -> None:
    """SIGTERM while Monday runs: Monday's command gets it, nothing later starts, exit 130."""
    log = tmp_path / "ran.log"
    started = tmp_path / "started"
    slow = ["sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {log}; touch {started}; exec sleep 30']
    assert _week(weekly, "2026-11-16", "false") == 1
    proc = weekly.popen("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--", *slow)
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "catch-up never started"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert _ran(log) == ["weekly:2026-11-16T0700"]
    assert out.splitlines()[-1].startswith("interrupted: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["weekly", "--catch-up-window", "-1"], "cannot be negative"),
        (["weekly", "--catch-up-window=-7d"], "cannot be negative"),
        (["weekly", "--catch-up-window", "0"], "must be 1 or more"),
        (["weekly", "--catch-up-window", "yesterday"], "is not an age like 7d"),
        (["weekly", "--catch-up-window", "2d", "--no-catch-up"], "cannot be combined"),
        (["adhoc", "-p", "week=2026-W32", "--catch-up"], "needs a job with a schedule"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(weekly: Home, tmp_path: Path, args: list[str],
                                          message: str) -> None:
    """A bad window, or catch-up for a job without a schedule: one line, exit 2, nothing ran."""
    log = tmp_path / "ran.log"
    done = weekly.run("run", *args, "--", *_recorder(log))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not log.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("schedule = \"0 7 * * 1\"\nparams = { occurrence = \"occurrence\" }\ncatch_up = -1",
         "cannot be negative"),
        ("schedule = \"0 7 * * 1\"\nparams = { occurrence = \"occurrence\" }\ncatch_up = \"soon\"",
         "is not an age like 7d"),
        ("params = { week = \"isoweek\" }\ncatch_up = true", "'catch_up' needs a schedule"),
    ],
)
def test_a_bad_catch_up_setting_is_a_config_error(home: Home, setting: str, message: str) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    template = "{occurrence}" if "occurrence" in setting else "{week}"
    home.config(f'[jobs.j]\nkey = "j:{template}"\n{setting}\n')
    done = home.run("run", "j", "--", "true")
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


DAILY = """
[jobs.daily]
key = "daily:{occurrence}"
schedule = "0 0 * * *"
params = { occurrence = "occurrence" }
catch_up = 1
"""


def test_the_job_setting_turns_it_on_for_the_scheduled_run(home: Home, tmp_path: Path) -> None:
    """catch_up = 1: the run OpenClaw's line makes ('openclaw run', no occurrence given)
    finishes the occurrence before the current one first; a backfill naming its occurrence
    does not catch up, unless --catch-up says so."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(DAILY)
    log = tmp_path / "ran.log"
    done = home.run("openclaw", "run", "daily", "--", *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    earlier, current = _ran(log)
    assert earlier < current
    assert f"catch-up: done: {earlier} (attempt 1)" in done.stdout
    assert done.stdout.splitlines()[-1] == f"done: {current} (attempt 1)"
    backfill = home.run("run", "daily", "-p", "occurrence=2026-11-20", "--", *_recorder(log))
    assert backfill.returncode == 0, backfill.stderr
    assert _ran(log)[2:] == ["daily:2026-11-20T0000"]
    asked = home.run("run", "daily", "-p", "occurrence=2026-11-22", "--catch-up", "--",
                     *_recorder(log))
    assert asked.returncode == 0, asked.stderr
    assert _ran(log)[3:] == ["daily:2026-11-21T0000", "daily:2026-11-22T0000"]


def test_missed_run_runs_each_occurrence_alone(home: Home, tmp_path: Path) -> None:
    """missed --run runs exactly what it lists, even for a job with catch_up on (each run it
    starts is --no-catch-up, so the day before the range is not run)."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(DAILY)
    log = tmp_path / "ran.log"
    done = home.run("missed", "daily", "--since", "2026-11-10", "--until", "2026-11-11", "--run",
                    "--", *_recorder(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ran(log) == ["daily:2026-11-10T0000", "daily:2026-11-11T0000"]


def test_the_job_setting_does_not_apply_in_a_drill_trial(home: Home, tmp_path: Path) -> None:
    """A drill trial's run does its own outcome only: drills count each trial's effects."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(DAILY)
    log = tmp_path / "ran.log"
    done = home.run("run", "daily", "--", *_recorder(log), env={"RETRYSAFE_DRILL_TRIAL": "t1"})
    assert done.returncode == 0, done.stdout + done.stderr
    [only] = _ran(log)
    assert only.endswith("~t1") and "catch-up" not in done.stdout


def test_a_dry_run_in_a_new_home_creates_no_ledger(weekly: Home, tmp_path: Path) -> None:
    """A dry run only reads: in a home that has not run yet it lists every occurrence as
    missing and leaves the home as it found it (no ledger, no runs/); the run after it
    still creates them and runs."""
    log = tmp_path / "ran.log"
    listed = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up-window",
                        "2", "--dry-run", "--json", "--", *_recorder(log))
    assert listed.returncode == 0, listed.stderr
    plan = json.loads(listed.stdout)
    assert [(e["key"], e["state"]) for e in plan["catch_up"]] == [
        ("weekly:2026-11-09T0700", "missing"), ("weekly:2026-11-16T0700", "missing")]
    assert plan["current"]["state"] == "missing"
    assert sorted(p.name for p in weekly.path.iterdir()) == ["retrysafe.toml"]
    plain = weekly.run("run", "adhoc", "-p", "week=2026-W49", "--dry-run", "--", "true")
    assert plain.returncode == 0, plain.stderr
    assert "adhoc:2026-W49  missing  run" in plain.stdout
    assert sorted(p.name for p in weekly.path.iterdir()) == ["retrysafe.toml"]
    assert _week(weekly, "2026-11-23", *_recorder(log)) == 0
    assert _ran(log) == ["weekly:2026-11-23T0700"]


def test_a_dry_run_in_a_home_that_lost_its_ledger_is_refused_as_the_run_is(
        weekly: Home, tmp_path: Path) -> None:
    """A used home whose ledger file was deleted: a run would repeat done outcomes and is
    refused; the dry run says the same instead of listing them as missing and to run."""
    assert _week(weekly, "2026-11-23", "true") == 0
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):
        (weekly.path / name).unlink(missing_ok=True)
    listed = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--dry-run", "--",
                        "true")
    real = weekly.run("run", "weekly", "-p", "occurrence=2026-11-23", "--", "true")
    assert listed.returncode == real.returncode == 2, listed.stdout + listed.stderr
    assert "ledger.sqlite3 is missing" in listed.stderr
    assert "missing  run" not in listed.stdout
    assert not (weekly.path / "ledger.sqlite3").exists()
