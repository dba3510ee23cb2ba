"""PostgreSQL restarted (cleanly, then crashed) while workers run: they fail cleanly
or retry, and re-runs finish every outcome with no duplicate effect and no lost
evidence.

The test fails as soon as it knows why it cannot pass, instead of waiting for its
deadline: a restart that did not bring the server back (bounded tries, the
server log's tail), or no outcome done for ``STALL_SECONDS`` while the server is
up (the outcomes left, their attempts and whether each holder still lives)."""

from __future__ import annotations

import os
import shutil
import signal
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
DEADLINE = 480  # seconds for the whole race; a stall or a failed restart ends it sooner
STALL_SECONDS = 90  # no outcome done this long, server up and no outage under way
READY_SECONDS = 240  # from a stop until the server takes connections again (crash
# recovery first fsyncs the whole data folder: slow on a loaded CI disk)
RESTART_TRIES = 3


def done_count(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM rs_outcomes WHERE state = 'done'").fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else 0


def refusal(dsn: str) -> str | None:
    """``None`` if the server takes a connection and a query, else why not."""
    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())[-200:]
    return None


def postmaster_alive(server: ThrowawayServer) -> bool:
    pid = server.pid()
    return pid is not None and os.path.exists(f"/proc/{pid}")


def log_tail(server: ThrowawayServer, chars: int = 1500) -> str:
    log = server.root / "log"
    return log.read_text(errors="replace")[-chars:] if log.is_file() else "(no log)"


def restart(server: ThrowawayServer, give_up_at: float) -> int:
    """Start ``server`` and wait until it takes connections; the tries it took.

    ``pg_ctl start -w`` gives up after its own timeout while a crash recovery may
    still run: then wait for that postmaster (never start a second one beside it),
    and start again only if it died. Raises with the reason and the server log."""
    problems: list[str] = []
    for tries in range(1, RESTART_TRIES + 1):
        try:
            server.start()
            return tries
        except (RuntimeError, subprocess.SubprocessError) as exc:
            problems.append(" ".join(f"{type(exc).__name__}: {exc}".split())[-300:])
        why = refusal(server.admin_dsn)
        while why is not None and postmaster_alive(server) and time.monotonic() < give_up_at:
            time.sleep(0.5)
            why = refusal(server.admin_dsn)
        if why is None:
            return tries
        if postmaster_alive(server):
            raise RuntimeError(f"server still refuses connections {READY_SECONDS} s after the "
                               f"stop ({why}); start tries: {problems}")
    raise RuntimeError(f"server did not start in {RESTART_TRIES} tries: {problems}")


def stacks(procs: list[subprocess.Popen[str]]) -> str:
    """Where each of ``procs`` (live workers) is: each writes its threads' stacks to
    stderr on SIGUSR1 (pg_worker.py); it is then killed and its stderr's tail read."""
    said = []
    procs = list(dict.fromkeys(procs))  # a worker holding two outcomes is named twice
    for proc in procs:
        proc.send_signal(signal.SIGUSR1)
    time.sleep(1)
    for proc in procs:
        proc.kill()
        _out, err = proc.communicate()
        said.append(f"pid {proc.pid}: {err[-4000:]}")
    return " | ".join(said)


def stuck_outcomes(url: str, workers: dict[int, tuple[int, subprocess.Popen[str]]],
                   stuck: list[subprocess.Popen[str]] | None = None) -> str:
    """The outcomes not done, with their current attempt and whether its holder lives
    (a live holder that is a worker is added to ``stuck``)."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            rows = conn.execute(
                "SELECT o.key, o.state, a.state, a.holder_pid,"
                " a.lease_expires - extract(epoch FROM now())"
                " FROM rs_outcomes o LEFT JOIN rs_attempts a ON a.id = o.current_attempt"
                " WHERE o.state <> 'done' ORDER BY o.key LIMIT 5").fetchall()
    except psycopg.Error as exc:
        return f"(not readable: {' '.join(str(exc).split())[-200:]})"
    said = []
    for key, state, attempt, pid, lease in rows:
        if attempt is None:
            said.append(f"{key} {state}, no current attempt")
            continue
        slot, proc = workers.get(pid, (None, None))
        if proc is not None and proc.poll() is None and stuck is not None:
            stuck.append(proc)
        who = (f"worker {slot} ({'exits 75' if slot % 2 == 0 else 'waits and retries'}), "
               f"{'alive' if proc.poll() is None else 'exited'}" if slot is not None and proc
               else "not one of the workers")
        said.append(f"{key} {state}, attempt {attempt} held by pid {pid} [{who}], lease "
                    + (f"expired {-lease:.0f} s ago" if lease < 0 else f"{lease:.0f} s left"))
    return "; ".join(said) or "none"


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
        began = time.monotonic()
        outages: list[str] = []  # mode, and how long until the server took connections again
        chaos_errors: list[str] = []  # a restart that failed, said at once below
        in_outage = threading.Event()  # stopped, not yet taking connections: not a stall
        quit_chaos = threading.Event()

        def restarter() -> None:
            try:
                for mode, at in (("fast", OUTCOMES // 4), ("immediate", OUTCOMES // 2)):
                    deadline = time.monotonic() + 240
                    while done_count(url) < at and time.monotonic() < deadline:
                        if quit_chaos.wait(0.05):
                            return
                    in_outage.set()
                    stopped = time.monotonic()
                    own_server.stop(mode)
                    time.sleep(1.5)  # workers meet a server that is not there
                    tries = restart(own_server, stopped + READY_SECONDS)
                    outages.append(f"{mode} ({time.monotonic() - stopped:.1f} s"
                                   + (f", {tries} start tries)" if tries > 1 else ")"))
                    in_outage.clear()
            except Exception as exc:  # noqa: BLE001 - a daemon thread's error is otherwise lost
                chaos_errors.append(f"{type(exc).__name__}: {exc}; server log: "
                                    f"{log_tail(own_server)}")

        chaos = threading.Thread(target=restarter, daemon=True)
        chaos.start()
        exits: list[int] = []
        one_line_errors: list[str] = []  # each with when it was met: old ones are not news
        seed = 0
        running: dict[int, subprocess.Popen[str]] = {}
        workers: dict[int, tuple[int, subprocess.Popen[str]]] = {}  # pid: (slot, process)
        finished: set[int] = set()

        def why_not_finished(what: str) -> str:
            stuck: list[subprocess.Popen[str]] = []
            said = (f"{what}: outages {outages}, restart errors {chaos_errors}, "
                    f"server now: {refusal(own_server.admin_dsn) or 'takes connections'}, "
                    f"outcomes not done: {stuck_outcomes(url, workers, stuck)}, "
                    f"last worker errors {one_line_errors[-2:]}, {len(exits)} exits "
                    f"({exits.count(75)} of them 75), ledger {ledger_states(url)}")
            return said + (f"; where the live holders are: {stacks(stuck)}" if stuck else "")

        try:
            deadline = began + DEADLINE
            progress, progress_at, checked_at = -1, time.monotonic(), 0.0
            while time.monotonic() < deadline:
                if chaos_errors:
                    pytest.fail(why_not_finished("the server could not be restarted"),
                                pytrace=False)
                now = time.monotonic()
                if now - checked_at >= 1:
                    checked_at = now
                    count = done_count(url)
                    if count > progress or in_outage.is_set():
                        progress, progress_at = max(count, progress), now
                    elif now - progress_at > STALL_SECONDS:
                        pytest.fail(why_not_finished(
                            f"no outcome done for {STALL_SECONDS} s ({progress} of {OUTCOMES})"),
                            pytrace=False)
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
                            one_line_errors.append(f"{time.monotonic() - began:.0f} s: "
                                                   f"{err.strip()}")
                        if proc.returncode == 0 and not chaos.is_alive():
                            running.pop(slot)
                            finished.add(slot)
                            continue  # this worker saw every outcome done
                    flags = ("--exit-on-unavailable",) if slot % 2 == 0 else ()
                    seed += 1
                    running[slot] = subprocess.Popen(
                        worker_cmd(home, url, url, OUTCOMES, seed, *flags), env=worker_env(),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    workers[running[slot].pid] = (slot, running[slot])
                if not running and not chaos.is_alive():
                    break
                time.sleep(0.1)
            assert not running, why_not_finished(f"workers did not finish in {DEADLINE} s")
        finally:
            quit_chaos.set()
            for proc in running.values():
                proc.kill()
                proc.communicate()
            chaos.join(timeout=120)
            shutil.rmtree(folder, ignore_errors=True)

        assert [o.split()[0] for o in outages] == ["fast", "immediate"], outages
        assert one_line_errors, "no worker ever met the outage: the test proved nothing"
        with open_ledger(url) as ledger:
            assert_exactly_once_and_intact(ledger, url, OUTCOMES)
        print(f"outages {outages}; worker exits: {exits}; e.g. {one_line_errors[0]}")


def ledger_states(url: str) -> object:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT state, count(*) FROM rs_outcomes GROUP BY state"
                                " UNION ALL SELECT 'step ' || state, count(*) FROM rs_steps"
                                " GROUP BY state").fetchall()
    except psycopg.Error as exc:
        return str(exc)
