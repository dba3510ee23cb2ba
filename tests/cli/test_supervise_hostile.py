"""How ``retrysafe run`` and ``retrysafe step`` supervise their commands when
things go wrong: a command that cannot be executed, and stop signals sent to
retrysafe alone while an effect is under way (real processes, real SQLite)."""

from __future__ import annotations

import json
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
lease_seconds = 2
"""

# the effect: it starts, takes a while, then lands (one line in $SENT)
EFFECT = 'touch "$STARTED"; sleep 3; echo sent >> "$SENT"; echo msg-1'
CHECK = 'test -f "$SENT" || exit 1; echo found'


def _setup(home: Home, tmp_path: Path) -> dict[str, str]:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    return {"SENT": str(tmp_path / "sent"), "STARTED": str(tmp_path / "started")}


def _step(home: Home, *extra: str) -> list[str]:
    return ["step", "send", "--class", "message", "--check", CHECK, *extra,
            "--", "sh", "-c", EFFECT]


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ended early ({proc.returncode}): {out} {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _sent(tmp_path: Path) -> list[str]:
    path = tmp_path / "sent"
    return path.read_text().splitlines() if path.exists() else []


def test_a_command_that_cannot_be_executed_fails_its_attempt(home: Home, tmp_path: Path) -> None:
    """An executable file the system cannot run (a missing interpreter, not a program):
    the attempt is closed ``failed`` saying so, exit 1, no internal error, and the outcome
    is not left ``running``."""
    _setup(home, tmp_path)
    for n, body in (("shebang", b"#!/no/such/interpreter\necho hi\n"), ("garbage", b"\x7fELF??")):
        script = tmp_path / n
        script.write_bytes(body)
        script.chmod(0o755)
        proc = home.run("run", "job", "-p", f"n={n}", "--", str(script))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stdout.startswith(f"failed: job:{n} (attempt 1): command could not start: "
                                      f"{script}: "), proc.stdout
        status = json.loads(home.run("status", f"job:{n}", "--json").stdout)
        assert status["outcome"]["state"] == "failed", status


def test_a_stop_signal_to_run_stops_what_its_command_left_running(
        home: Home, tmp_path: Path) -> None:
    """SIGTERM to ``retrysafe run`` alone is passed to CMD, a shell that dies of it and
    leaves its step (and the step's effect) running. The attempt is closed only once
    nothing of it runs: the effect never lands late, and the re-run does it once."""
    env = _setup(home, tmp_path)
    job = tmp_path / "job.sh"
    step = " ".join(f"'{w}'" for w in _step(home))
    job.write_text(f'#!/bin/sh\n"{sys.executable}" -m retrysafe {step}\necho after\n')
    job.chmod(0o755)
    args = ["run", "job", "-p", "n=a", "--", str(job)]
    first = home.popen(*args, env=env)
    _wait_for(tmp_path / "started", first)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 1, out + err
    time.sleep(3.5)  # the effect would have landed by now
    assert _sent(tmp_path) == []
    again = home.run(*args, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _sent(tmp_path) == ["sent"]


def test_a_stop_signal_to_a_step_without_timeout_reaches_its_command(
        home: Home, tmp_path: Path) -> None:
    """SIGTERM to ``retrysafe step`` (no --timeout) is passed to its command, and the
    step waits for it: the step is ``unknown``, the effect does not land behind a
    retry's back, and the retry does it once."""
    env = _setup(home, tmp_path)
    begun = home.run("begin", "job", "-p", "n=b", "--json")
    attempt = json.loads(begun.stdout)["attempt_id"]
    first = home.popen(*_step(home, "--attempt", attempt), env=env)
    _wait_for(tmp_path / "started", first)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 1, out + err
    time.sleep(3.5)
    assert _sent(tmp_path) == []
    status = json.loads(home.run("status", "job:b", "--json").stdout)
    assert [s["state"] for s in status["steps"]] == ["unknown"]
    again = home.run(*_step(home, "--attempt", attempt), env=env)
    assert again.returncode == 0 and again.stdout == "msg-1\n", again.stdout + again.stderr
    assert _sent(tmp_path) == ["sent"]
