"""A ``retrysafe step`` that ``retrysafe run``'s command leaves running when it ends
(``retrysafe step ... &``): close-out waits for its result instead of calling it
``unknown`` while it still runs, and stops it, saying so, only past the job's
``lease_seconds`` (real processes, real SQLite)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import Home

CONFIG = """
[jobs.job]
key = "job:{n}"
params = { n = "slug" }

[jobs.short]
key = "short:{n}"
params = { n = "slug" }
lease_seconds = 2
"""

# the effect lands (one line in $SENT), then takes $NAP seconds to answer
EFFECT = 'echo sent >> "$SENT"; sleep "$NAP"; echo "msg-$NAP"'
CHECK = 'test -f "$SENT" || exit 1; echo found'


def _setup(home: Home, tmp_path: Path, nap: float) -> dict[str, str]:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    return {"SENT": str(tmp_path / "sent"), "NAP": f"{nap:g}"}


def _step_line() -> str:
    """A shell line running the step ``send`` of the current attempt."""
    return (f"'{sys.executable}' -m retrysafe step send --class message --check '{CHECK}' "
            f"-- sh -c '{EFFECT}'")


def _sent(tmp_path: Path) -> list[str]:
    path = tmp_path / "sent"
    return path.read_text().splitlines() if path.exists() else []


def _status(home: Home, key: str) -> dict[str, object]:
    got = home.run("status", key, "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    return json.loads(got.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("after", ["exit 0", "sleep 0.5; exit 0", "sleep 0.5; exit 4"])
def test_run_waits_for_a_step_its_command_left_running(
        home: Home, tmp_path: Path, after: str) -> None:
    """The command backgrounds a step and ends (at once, before the step even
    started; or once the step is under way; or failing): the run says it waits,
    the step records its own result and evidence, and close-out counts it. A
    re-run of the done outcome does not send again."""
    env = _setup(home, tmp_path, nap=1)
    args = ["run", "job", "-p", "n=a", "--", "sh", "-c", f"{_step_line()} & {after}"]
    first = home.run(*args, env=env)
    failing = after.endswith("exit 4")
    assert first.returncode == (1 if failing else 0), first.stdout + first.stderr
    assert "ended, but left pid" in first.stderr and "(retrysafe step send) running: " \
        "waiting for it to end (at most 900 s) before close-out" in first.stderr, first.stderr
    assert "closing out" in first.stderr, first.stderr
    assert first.stdout.splitlines()[-1] == (
        "failed: job:a (attempt 1): command exited 4" if failing
        else "done: job:a (attempt 1)"), first.stdout
    status = _status(home, "job:a")
    steps = status["steps"]
    assert isinstance(steps, list) and len(steps) == 1, status
    assert (steps[0]["state"], steps[0]["evidence"]) == ("done", "msg-1"), steps[0]
    assert _sent(tmp_path) == ["sent"]
    again = home.run(*args, env=env)
    if failing:  # the retry runs the command again; the step answers from the ledger
        assert again.returncode == 1, again.stdout + again.stderr
        assert "attempt 2" in again.stdout
    else:
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already done" in again.stdout
    time.sleep(1.5)  # a second send would have landed by now
    assert _sent(tmp_path) == ["sent"]
    assert _status(home, "job:a")["steps"][0]["evidence"] == "msg-1"  # type: ignore[index]


def test_run_waits_with_json_on_stdout_alone(home: Home, tmp_path: Path) -> None:
    """With --json the wait is told on stderr: stdout still holds the result alone."""
    env = _setup(home, tmp_path, nap=1)
    first = home.run("run", "job", "-p", "n=j", "--json", "--", "sh", "-c",
                     f"{_step_line()} & exit 0", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    result = json.loads(first.stdout)
    assert (result["state"], result["exit_code"]) == ("done", 0), result
    assert "waiting for it to end" in first.stderr


def test_a_step_still_running_past_the_lease_is_stopped_and_unknown(
        home: Home, tmp_path: Path) -> None:
    """The step's effect landed but it has not answered ``lease_seconds`` (2 s) after
    the command ended: the run stops it (nothing of it runs on), leaves it
    ``unknown`` saying it was still running after the command ended, and the
    re-run finds the effect by its check instead of sending again."""
    env = _setup(home, tmp_path, nap=30)
    args = ["run", "short", "-p", "n=a", "--", "sh", "-c", f"{_step_line()} & exit 0"]
    began = time.monotonic()
    first = home.run(*args, env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert time.monotonic() - began < 20
    assert "still running 2 s after the command ended: stopping it" in first.stderr
    why = "it was still running 2 s after the command ended, and was stopped"
    assert first.stdout.splitlines()[-1].startswith(
        f"unknown: short:a (attempt 1): step send may or may not have happened: {why}"), \
        first.stdout
    step = _status(home, "short:a")["steps"][0]  # type: ignore[index]
    assert step["state"] == "unknown" and step["reason"].startswith(why), step
    assert step["evidence"] is None
    assert _sent(tmp_path) == ["sent"]
    again = home.run(*args[:-1], f"{_step_line()}", env={**env, "NAP": "0"})
    assert again.returncode == 0, again.stdout + again.stderr
    step = _status(home, "short:a")["steps"][0]  # type: ignore[index]
    assert (step["state"], step["evidence"]) == ("done", "found"), step
    assert _sent(tmp_path) == ["sent"]


def test_what_runs_no_step_is_not_waited_for_nor_stopped(home: Home, tmp_path: Path) -> None:
    """A process the command leaves running that runs no step (a daemon) does not hold
    the run up to ``lease_seconds``, nor is it killed: the run says so and closes out."""
    env = _setup(home, tmp_path, nap=0)
    pidfile = tmp_path / "daemon.pid"
    began = time.monotonic()
    first = home.run("run", "job", "-p", "n=d", "--", "sh", "-c",
                     f"sleep 60 >/dev/null 2>&1 & echo $! > '{pidfile}'; exit 0", env=env)
    pid = int(pidfile.read_text())
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert time.monotonic() - began < 20
        assert f"not waiting for pid {pid} (sleep)" in first.stderr, first.stderr
        os.kill(pid, 0)  # still running
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_stop_signal_during_the_wait_stops_the_step(home: Home, tmp_path: Path) -> None:
    """SIGTERM to the run while it waits for a step its command left running stops
    that step too before close-out: the step is ``unknown`` (its effect does not land
    behind the retry's back) and the outcome is not ``done``."""
    env = _setup(home, tmp_path, nap=0)
    env["STARTED"] = str(tmp_path / "started")
    late = 'touch "$STARTED"; sleep 31.5; echo sent >> "$SENT"; echo msg'  # lands after 31.5 s
    line = (f"'{sys.executable}' -m retrysafe step send --class read -- sh -c '{late}'")
    first = home.popen("run", "job", "-p", "n=s", "--", "sh", "-c", f"{line} & exit 0", env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 1, out + err
    assert "waiting for it to end" in err, err
    assert out.startswith("unknown: job:s (attempt 1): step send may or may not have happened"), out
    gone = subprocess.run(["pgrep", "-f", "sleep 31[.]5"], capture_output=True, check=False)
    assert gone.returncode == 1, gone.stdout  # nothing of the step runs on
    assert _status(home, "job:s")["steps"][0]["state"] == "unknown"  # type: ignore[index]


def test_an_attempt_whose_leftovers_were_stopped_is_never_done(
        home: Home, tmp_path: Path) -> None:
    """The step the command left running is still looking its effect up (its --check
    runs before anything is recorded) when the job's ``lease_seconds`` run out: it
    is stopped having recorded nothing, and the attempt, whose command exited 0 and
    has no open step, is ``failed`` saying why, not ``done``: the re-run does the work."""
    env = _setup(home, tmp_path, nap=0)
    env["SLOW"] = str(tmp_path / "slow")
    check = 'test -f "$SLOW" && sleep 31.5; test -f "$SENT" || exit 1; echo found'
    line = (f"'{sys.executable}' -m retrysafe step send --class message --check '{check}' "
            f"-- sh -c '{EFFECT}'")
    (tmp_path / "slow").touch()
    args = ["run", "short", "-p", "n=c", "--", "sh", "-c", f"{line} & exit 0"]
    first = home.run(*args, env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert first.stdout.splitlines()[-1] == (
        "failed: short:c (attempt 1): what the command left running still ran 2 s after it "
        "ended, and was stopped"), first.stdout
    assert _status(home, "short:c")["steps"] == []
    assert _sent(tmp_path) == []
    (tmp_path / "slow").unlink()
    again = home.run(*args, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    step = _status(home, "short:c")["steps"][0]  # type: ignore[index]
    assert (step["state"], step["evidence"]) == ("done", "msg-0"), step
    assert _sent(tmp_path) == ["sent"]


# A child of the command that starts a program with an empty environment for a moment,
# then the step with the attempt's environment: what /proc shows of a process inside
# execve (neither its command line nor its environment yet), held long enough to look.
LATE_STEP = r'''
import os, sys, time
env = dict(os.environ)
if os.fork() == 0:
    pairs = [f"{k}={v}" for k, v in env.items()]
    then = ("import os, sys, time; time.sleep(0.4); "
            "env = dict(p.split('=', 1) for p in sys.argv[1:]); "
            "os.execve(sys.executable, [sys.executable, '-m', 'retrysafe', 'step', 'send', "
            "'--class', 'message', '--', 'sh', '-c', 'echo sent >> \"$SENT\"; echo msg-late'], env)")
    os.execve(sys.executable, [sys.executable, "-c", then, *pairs], {})
'''


def test_run_waits_for_a_child_of_its_command_still_starting_a_program(
        home: Home, tmp_path: Path) -> None:
    """The command's child is still starting a program when the command ends (its
    environment cannot be read yet, as inside ``execve``): the run does not close the
    attempt out under it, it looks again, finds the step, and waits for its result."""
    env = _setup(home, tmp_path, nap=0)
    got = home.run("run", "job", "-p", "n=late", "--", sys.executable, "-c", LATE_STEP, env=env)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.splitlines()[-1] == "done: job:late (attempt 1)", got.stdout
    steps = _status(home, "job:late")["steps"]
    assert isinstance(steps, list) and len(steps) == 1, steps
    assert (steps[0]["state"], steps[0]["evidence"]) == ("done", "msg-late"), steps[0]
    assert _sent(tmp_path) == ["sent"]
