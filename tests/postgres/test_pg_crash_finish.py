"""A server that crashes alone right after an attempt's finish: the worker that
finished lives on and has moved on, so the finish must not be lost with the crash.
Were it lost, the outcome would stay open under a live holder, which no other
process takes over (process.py), until that worker exits."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pgrace import race_home
from pgtest import ThrowawayServer, fresh_database

from retrysafe.engine import Engine
from retrysafe.ledger import open_ledger

pytestmark = [pytest.mark.postgres]


def test_a_finish_survives_a_server_crash_under_a_live_worker(
        own_server: ThrowawayServer, tmp_path: Path) -> None:
    """The server's WAL writer is slowed to its longest delay, so an unsynced commit
    stays in memory for seconds; the server is killed (immediate shutdown: crash
    recovery) right after the close. After recovery the outcome is done, by the
    attempt that closed it, and the worker, still alive, is not its holder any more."""
    with psycopg.connect(own_server.admin_dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        admin.execute("SELECT pg_reload_conf()")
    try:
        with fresh_database(own_server.dsn) as url:
            home = race_home(tmp_path / "home", lease_seconds=3)
            engine = Engine.open(home=home, ledger=url)
            try:
                begun = engine.begin("race", {"n": "1"})
                assert begun.run is not None
                begun.run.effect("send", "message", execute=lambda key: "msg-1")
                assert begun.run.close(success=True).state == "done"
                own_server.stop("immediate")
                own_server.start()
            finally:
                engine.close()
            with open_ledger(url) as ledger:
                outcome = ledger.outcome("race:1")
                assert outcome is not None
                assert (outcome.state, outcome.current_attempt) == ("done", None), outcome
                assert outcome.accepted_attempt == begun.run.attempt.id
    finally:
        with psycopg.connect(own_server.admin_dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM RESET wal_writer_delay")
