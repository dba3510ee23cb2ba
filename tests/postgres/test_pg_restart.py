"""PostgreSQL restarted (cleanly, then crashed) while workers run: they fail cleanly
or retry, and re-runs finish every outcome with no duplicate effect and no lost
evidence."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import psycopg
import pytest
from pgrace import (
    EFFECTS_TABLE,
    assert_exactly_once_and_intact,
    fast_folder,
    race_home,
    worker_cmd,
    worker_env,
)
from pgtest import ThrowawayServer, fresh_database

from retrysafe.ledger import open_ledger

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WORKERS = 6
OUTCOMES = 300


def done_count(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM rs_outcomes WHERE state = 'done'").fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else 0


def ledger_states(url: str) -> object:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT state, count(*) FROM rs_outcomes GROUP BY state"
                                " UNION ALL SELECT 'step ' || state, count(*) FROM rs_steps"
                                " GROUP BY state").fetchall()
    except psycopg.Error as exc:
        return str(exc)


@pytest.mark.timeout(600)
def test_workers_survive_a_database_restart_and_a_crash(own_server: ThrowawayServer) -> None:
    """Six workers (half exit 75 when the ledger is unavailable, half wait and retry)
    race over 300 outcomes; the server is stopped (fast) and later killed
    (immediate, crash recovery) while they run. Workers that exit are started
    again. In the end every outcome is done, each effect happened once, each step's
    evidence is its effect, and every attempt's start and end are in the history."""
    with fresh_database(own_server.dsn) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(EFFECTS_TABLE)
        open_ledger(url).close()
        folder = fast_folder()
        home = race_home(folder / "home", lease_seconds=3)
        outages: list[str] = []
        chaos_errors: list[str] = []  # a restart that failed, said in the assertion below

        def restarter() -> None:
            try:
                for mode, at in (("fast", OUTCOMES // 4), ("immediate", OUTCOMES // 2)):
                    deadline = time.monotonic() + 240
                    while done_count(url) < at and time.monotonic() < deadline:
                        time.sleep(0.05)
                    own_server.stop(mode)
                    outages.append(mode)
                    time.sleep(1.5)  # workers meet a server that is not there
                    own_server.start()
            except Exception as exc:  # noqa: BLE001 - a daemon thread's error is otherwise lost
                log = own_server.root / "log"
                tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
                chaos_errors.append(f"{type(exc).__name__}: {exc}; server log: {tail}")

        chaos = threading.Thread(target=restarter, daemon=True)
        chaos.start()
        exits: list[int] = []
        one_line_errors: list[str] = []
        seed = 0
        running: dict[int, subprocess.Popen[str]] = {}
        finished: set[int] = set()
        try:
            deadline = time.monotonic() + 480
            while time.monotonic() < deadline:
                for slot in set(range(WORKERS)) - finished:
                    proc = running.get(slot)
                    if proc is not None and proc.poll() is None:
                        continue
                    if proc is not None:
                        _out, err = proc.communicate()
                        exits.append(proc.returncode)
                        assert proc.returncode in (0, 75), err[-3000:]
                        if proc.returncode == 75:
                            assert err.startswith("retrysafe: ledger ") and err.count("\n") == 1
                            assert "Traceback" not in err
                            one_line_errors.append(err.strip())
                        if proc.returncode == 0 and not chaos.is_alive():
                            running.pop(slot)
                            finished.add(slot)
                            continue  # this worker saw every outcome done
                    flags = ("--exit-on-unavailable",) if slot % 2 == 0 else ()
                    seed += 1
                    running[slot] = subprocess.Popen(
                        worker_cmd(home, url, url, OUTCOMES, seed, *flags), env=worker_env(),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if not running and not chaos.is_alive():
                    break
                time.sleep(0.1)
            assert not running, (f"workers did not finish in time: outages {outages}, "
                                 f"restart errors {chaos_errors}, errors {one_line_errors[-3:]}, "
                                 f"exits {exits}, ledger {ledger_states(url)}")
        finally:
            for proc in running.values():
                proc.kill()
                proc.communicate()
            chaos.join(timeout=120)
            shutil.rmtree(folder, ignore_errors=True)

        assert outages == ["fast", "immediate"]
        assert one_line_errors, "no worker ever met the outage: the test proved nothing"
        with open_ledger(url) as ledger:
            assert_exactly_once_and_intact(ledger, url, OUTCOMES)
        print(f"worker exits: {exits}; e.g. {one_line_errors[0]}")
