"""A live attempt on this host is never taken over: orphans, frozen holders, shifted clocks.

Real processes: ``retrysafe run`` killed alone with SIGKILL while its command
and step live on, and a second run whose clock is two hours ahead (libfaketime).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import Home

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
lease_seconds = 2
"""

# the effect lands late: it takes a while, then writes its line
EFFECT = """#!/bin/sh
touch "$STARTED"
sleep "${EFFECT_SLEEP:-3}"
echo "$RETRYSAFE_STEP_KEY" >> "$SENT"
echo "msg-$$"
"""
# exit 0 found, 1 absent (also before anything was ever sent), anything else ambiguous
CHECK = 'test -f "$SENT" && grep -qx "$RETRYSAFE_STEP_KEY" "$SENT" && echo found'
JOB = """#!/bin/sh
exec "$RETRYSAFE_PY" -m retrysafe step send --class message --check '{check}' -- "$EFFECT"
"""


def _setup(home: Home, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    effect = tmp_path / "effect.sh"
    effect.write_text(EFFECT)
    effect.chmod(0o755)
    job = tmp_path / "job.sh"
    job.write_text(JOB.format(check=CHECK))
    job.chmod(0o755)
    env = {"RETRYSAFE_PY": sys.executable, "EFFECT": str(effect), "SENT": str(tmp_path / "sent"),
           "STARTED": str(tmp_path / "started")}
    return ["run", "report", "-p", "week=2026-W10", "--", str(job)], env


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended early ({proc.returncode}): {out} {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _sent(tmp_path: Path) -> list[str]:
    path = tmp_path / "sent"
    return path.read_text().splitlines() if path.exists() else []


def test_killing_only_the_run_process_leaves_no_duplicate(home: Home, tmp_path: Path) -> None:
    """SIGKILL of the ``retrysafe run`` process alone: its command and step live on as
    orphans and their effect lands late. A re-run meanwhile is busy (exit 75) naming
    what still runs, even past the lease; once they end, the re-run closes the
    outcome with the one effect."""
    args, env = _setup(home, tmp_path)
    env["EFFECT_SLEEP"] = "10"  # still at work when the re-run asks, on a loaded machine too
    first = home.popen(*args, env=env)
    _wait_for(tmp_path / "started", first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    time.sleep(2.5)  # past the lease, too
    busy = home.run(*args, env=env)
    assert busy.returncode == 75, busy.stdout + busy.stderr
    assert "still running on this host: pid " in busy.stdout
    deadline = time.monotonic() + 30
    while not _sent(tmp_path):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    while (rerun := home.run(*args, env=env)).returncode == 75:
        assert time.monotonic() < deadline, rerun.stdout
        time.sleep(0.2)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert _sent(tmp_path) == ["report:2026-W10/send"]
    with home.open_ledger() as ledger:
        step = ledger.step("report:2026-W10/send")
        # the orphaned step, still holding a current fence, recorded its own evidence
        assert step is not None and step.state == "done" and (step.evidence or "").startswith("msg-")


@pytest.mark.skipif(shutil.which("faketime") is None and os.environ.get("CI") != "true",
                    reason="libfaketime (Debian package faketime) is not installed")
def test_a_run_whose_clock_is_hours_ahead_does_not_take_over_a_live_attempt(
        home: Home, tmp_path: Path) -> None:
    """A second run on the same host with its clock two hours ahead sees the lease
    as long expired, but the holder is alive: busy, and the effect happens once."""
    args, env = _setup(home, tmp_path)
    first = home.popen(*args, env=env)
    _wait_for(tmp_path / "started", first)
    ahead = subprocess.run(["faketime", "-f", "+2h", *home.cmd(*args)], env={**home.env, **env},
                           capture_output=True, text=True, timeout=60, check=False)
    assert ahead.returncode == 75, ahead.stdout + ahead.stderr
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert _sent(tmp_path) == ["report:2026-W10/send"]


def test_break_lease_is_refused_when_nothing_holds_the_outcome(home: Home, tmp_path: Path) -> None:
    """``break-lease`` on an outcome no attempt holds: exit 2, one line, nothing changed."""
    args, env = _setup(home, tmp_path)
    env["EFFECT_SLEEP"] = "0"
    assert home.run(*args, env=env).returncode == 0
    before = home.snapshot()
    proc = home.run("break-lease", "report:2026-W10")
    assert proc.returncode == 2 and "nothing to break" in proc.stderr
    assert home.snapshot() == before
