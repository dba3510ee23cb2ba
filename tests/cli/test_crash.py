"""Crash tests with real processes and real SIGKILL.

Every injection point of a pipeline with a generate step and three effect
steps; a kill from outside after the effect and before the record; eight
concurrent runs; a zombie attempt woken after another finished the outcome.

Every test runs once per ledger backend (SQLite, PostgreSQL) through the
``any_pipeline`` / ``any_home`` fixtures, which build on ``ledger_url``; the
PostgreSQL legs carry the ``postgres`` marker. The signals (SIGKILL, SIGSTOP)
hit the retrysafe processes on this host whatever the ledger, so each test
means the same on both: what the ledger keeps across the crash is what is
under test. The injection points run as a sample by default (:data:`DEFAULT_CRASHES`);
``-m heavy`` runs the rest of the matrix, every step at every point on both backends.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from pipeline import Pipeline, make_pipeline
from support import Home

STEPS = ("draft", "publish", "row", "notify")
POINTS = ("before-intent", "after-intent", "after-execute", "after-record")
CRASHES = [f"{s}:{p}" for s in STEPS for p in POINTS] + ["run:after-begin", "run:before-closeout"]


def settle(p: Pipeline, max_runs: int = 4) -> int:
    """Re-run until the outcome is done; returns how many re-runs it took."""
    for n in range(1, max_runs + 1):
        proc = p.run()
        if proc.returncode == 0:
            return n
    raise AssertionError(f"not done after {max_runs} re-runs: {proc.stdout} {proc.stderr}")


def assert_one_outcome(p: Pipeline) -> None:
    for system in ("publish", "row", "notify"):
        assert p.count(system) == 1, f"{system} happened {p.count(system)} times"
    assert p.count("generator") == 1, "the generator ran more than once"
    assert len(p.bodies()) == 1, "different drafts were delivered"
    status = json.loads(p.home.run("status", p.key, "--json").stdout)
    assert status["outcome"]["state"] == "done"
    assert all(s["state"] == "done" for s in status["steps"])
    assert p.home.run("verify", p.key).returncode == 0


# The default run: on SQLite the generate step and one effect step at every point, the last
# step after its record and the run's own points; on PostgreSQL one effect step at every point
# and the run's points (the protocol is the backend's, the same at every step). Every other
# pair is the heavy tier's (-m heavy).
DEFAULT_CRASHES = {
    "sqlite": frozenset({f"{s}:{p}" for s in ("draft", "publish") for p in POINTS}
                        | {"notify:after-record", "run:after-begin", "run:before-closeout"}),
    "postgres": frozenset({f"publish:{p}" for p in POINTS}
                          | {"run:after-begin", "run:before-closeout"}),
}
MATRIX = [pytest.param(backend, crash, id=f"{crash}-{backend}",
                       marks=([pytest.mark.postgres] if backend == "postgres" else [])
                       + ([] if crash in DEFAULT_CRASHES[backend] else [pytest.mark.heavy]))
          for crash in CRASHES for backend in ("sqlite", "postgres")]


@pytest.mark.parametrize(("ledger_url", "crash"), MATRIX, indirect=["ledger_url"])
def test_sigkill_at_every_injection_point_then_rerun(any_pipeline: Pipeline, crash: str) -> None:
    """Killed at any point, re-runs finish with each effect once and the draft generated once."""
    first = any_pipeline.run(env={"RETRYSAFE_CRASH_AT": crash})
    assert first.returncode != 0
    settle(any_pipeline)
    assert_one_outcome(any_pipeline)
    again = any_pipeline.run()
    assert again.returncode == 0 and "already done" in again.stdout


def test_kill_of_the_whole_process_group_after_the_effect(any_pipeline: Pipeline) -> None:
    """A cron timeout killing everything after the effect landed: the re-run looks it up."""
    pidfile = any_pipeline.ext / "pgid"
    env = {"EFFECT_SLOW": "row", "EFFECT_SLEEP": "30", "EFFECT_PIDFILE": str(pidfile)}
    proc = any_pipeline.popen(env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while any_pipeline.count("row") == 0:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any_pipeline.count("row") == 1
    # a killed process lingers until the kernel lets it go (one stuck in an fsync is
    # still alive): meanwhile the outcome is busy, as a scheduler's re-run would see
    deadline = time.monotonic() + 60
    while (rerun := any_pipeline.run()).returncode == 75 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_one_outcome(any_pipeline)
    history = json.loads(any_pipeline.home.run("history", any_pipeline.key, "--json").stdout)
    assert any(e["step_key"].endswith("/row") and e["reason"] == "found by lookup"
               for e in history)


def test_eight_concurrent_runs_make_one_outcome(any_pipeline: Pipeline) -> None:
    """Eight copies started at once: one does the work, the others exit 0 or 75."""
    procs = [any_pipeline.popen() for _ in range(8)]
    codes = [p.wait(timeout=120) for p in procs]
    assert all(c in (0, 75) for c in codes), codes
    assert codes.count(0) >= 1
    while any_pipeline.run().returncode != 0:  # a busy loser may have left it to the winner
        time.sleep(0.2)
    assert_one_outcome(any_pipeline)


def test_zombie_attempt_cannot_write_or_execute_again(any_home: Home, tmp_path: Path) -> None:
    """SIGSTOP past the lease: a re-run is refused (the frozen holder is alive on this
    host) until a human breaks the lease; then another attempt finishes, SIGCONT:
    the zombie is refused.

    Through the CLI (``retrysafe run`` and its ``step`` children); the library's
    own zombie test on a shared PostgreSQL ledger is tests/postgres/test_pg_zombie.py.
    """
    p = make_pipeline(any_home, tmp_path, lease=2)
    pidfile = p.ext / "pgid"
    env = {"EFFECT_SLOW": "publish", "EFFECT_SLEEP": "1", "EFFECT_PIDFILE": str(pidfile)}
    zombie = p.popen(env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not pidfile.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(zombie.pid, signal.SIGSTOP)
    time.sleep(3)  # past the lease
    # a stopped process is alive: on its own host it is never taken over, whatever the lease
    busy = p.run()
    assert busy.returncode == 75, busy.stdout + busy.stderr
    assert "still running on this host" in busy.stdout and "break-lease" in busy.stdout
    broken = p.home.run("break-lease", p.key, "--note", "frozen")
    assert broken.returncode == 0, broken.stdout + broken.stderr
    first_status = p.home.path / "runs" / "content" / "content+2026-W32" / "attempt-1" / "status.json"
    assert json.loads(first_status.read_text())["state"] == "superseded"
    second = p.run()
    assert second.returncode == 0, second.stdout + second.stderr
    os.killpg(zombie.pid, signal.SIGCONT)
    out, err = zombie.communicate(timeout=60)
    assert zombie.returncode in (1, 75), out + err
    assert "stale" in (out + err)
    assert p.count("publish") == 1 and p.count("row") == 1 and p.count("notify") == 1
    status = json.loads(p.home.run("status", p.key, "--json").stdout)
    assert status["outcome"]["state"] == "done"
    assert [a["state"] for a in status["attempts"]] == ["superseded", "finished"]


def test_definite_failure_then_success_after_the_fix(any_pipeline: Pipeline) -> None:
    """Exit 75 from an effect: failed, nothing happened; the re-run after the fix completes."""
    first = any_pipeline.run(env={"EFFECT_FAIL": "row"})
    assert first.returncode == 1
    summary = first.stdout.strip().splitlines()[-1]
    assert summary.startswith("failed:") and "step row failed" in summary and "75" in summary
    assert any_pipeline.count("row") == 0
    assert any_pipeline.run().returncode == 0
    assert_one_outcome(any_pipeline)
