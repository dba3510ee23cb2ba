"""A frozen worker on a shared ledger: its lease expires by the server clock,
another worker takes over, and when it wakes its writes are refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pg_worker import Effects
from pgrace import ZOMBIE, effects_by_step, race_home, worker_env

import retrysafe
from retrysafe.ledger import open_ledger

pytestmark = pytest.mark.postgres

LEASE = 2


OTHER_HOST = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', "zombie-host"]


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"child exited {proc.returncode} early: {out} {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("when", ["before-effect", "after-effect"])
def test_a_frozen_worker_is_superseded_and_its_writes_are_refused(
    pg_db: str, tmp_path: Path, when: str
) -> None:
    """SIGSTOP a worker holding outcome race:1 (lease 2 s, heartbeat frozen with it),
    wait past the lease, let another worker take over and finish, then SIGCONT:
    the zombie gets StaleAttempt (exit 75) and the effect exists exactly once.

    before-effect: frozen right after its claim; the taker executes the effect.
    after-effect: frozen after executing, before recording; the taker finds the
    effect by lookup and records it without executing again.
    """
    home = race_home(tmp_path / "home", lease_seconds=LEASE)
    signals = tmp_path / "signals"
    signals.mkdir()
    # The zombie runs as another host (a UTS namespace with its own host name): on
    # the same host a frozen holder is alive and never taken over; across hosts
    # the lease, by the server's clock, decides.
    zombie = subprocess.Popen(
        [*OTHER_HOST, sys.executable, str(ZOMBIE), str(home), pg_db, pg_db, str(signals), when],
        env={**worker_env(), "PYTHONPATH": str(ZOMBIE.parent)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(signals / "ready", zombie)
        os.kill(zombie.pid, signal.SIGSTOP)
        with open_ledger(pg_db) as ledger:
            held = ledger.require_outcome("race:1")
            assert held.state in ("running", "delivered") and held.current_attempt
            time.sleep(LEASE + 1.5)  # past the lease, by any clock

        effects = Effects(pg_db)
        with retrysafe.start("race", {"n": "1"}, home=home, ledger=pg_db) as run:
            assert run.number == 2
            evidence = run.effect("send", "message", execute=effects.execute,
                                  lookup=effects.lookup)

        with open_ledger(pg_db) as ledger:
            out = ledger.require_outcome("race:1")
            assert out.state == "done"
            first, second = ledger.attempts("race:1")
            assert first.state == "superseded" and "lease expired" in first.result
            assert out.accepted_attempt == second.id
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
        (signals / "go").write_text("go")
    stdout, stderr = zombie.communicate(timeout=60)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert zombie.returncode == 75, (stdout, stderr)
    assert report["error"] in ("StaleAttempt", "AttemptNotActive"), report
    assert report["executed"] == (1 if when == "after-effect" else 0), report
    assert effects_by_step(pg_db) == {"race:1/send": [int(evidence)]}

    with open_ledger(pg_db) as ledger:
        # nothing the zombie tried after waking reached the ledger
        out = ledger.require_outcome("race:1")
        assert out.state == "done" and out.accepted_attempt == second.id
        step = ledger.steps("race:1")[0]
        assert step.state == "done" and step.evidence == evidence
        assert step.attempt_id == second.id
        assert all(e.attempt_id != first.id for e in ledger.history("race:1")
                   if e.kind == "step" and e.to_state == "done")
