"""The PostgreSQL backend on its own: errors as one line, hidden passwords, lost
connections, concurrent migrations and claims, all against real servers."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgrace import worker_env
from pgtest import ThrowawayServer, _free_port, fresh_database, with_database

from retrysafe.errors import (
    EXIT_BUSY,
    EXIT_USAGE,
    LedgerAuthError,
    LedgerError,
    LedgerUnavailable,
)
from retrysafe.ledger import Holder, open_ledger
from retrysafe.ledger.migrations import SCHEMA_VERSION
from retrysafe.ledger.postgres import PostgresBackend, hide_password

pytestmark = pytest.mark.postgres

SECRET = "s3cr3t-Pa55"


def cli(home: Path, ledger: str, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    full = {**worker_env(), "RETRYSAFE_HOME": str(home), "RETRYSAFE_LEDGER": ledger,
            **(env or {})}
    return subprocess.run([sys.executable, "-m", "retrysafe", *args], env=full,
                          capture_output=True, text=True, timeout=120, check=False)


def test_display_url_hides_the_password() -> None:
    """A password in the URL, in the user part or as a parameter, is never shown."""
    assert hide_password("postgresql://u:pw@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert "pw" not in hide_password("postgres://u@db/x?password=pw&sslmode=require")
    assert hide_password("postgresql://u@db/x") == "postgresql://u@db/x"
    backend = PostgresBackend("postgresql://u:pw@127.0.0.1:1/x")
    assert "pw" not in backend.display_url()
    with pytest.raises(LedgerError) as err:  # not valid percent-encoding: still not echoed
        PostgresBackend("postgresql://u:bad%zzpass@127.0.0.1:1/x")
    assert "zzpass" not in str(err.value)


def test_unreachable_server_is_unavailable_with_exit_75(tmp_path: Path) -> None:
    """Nothing listening: LedgerUnavailable (exit 75, try later), one line, no traceback."""
    url = f"postgresql://nobody:{SECRET}@127.0.0.1:{_free_port()}/ledger"
    with pytest.raises(LedgerUnavailable) as err:
        open_ledger(url)
    assert "unreachable" in str(err.value) and SECRET not in str(err.value)
    assert "\n" not in str(err.value)
    proc = cli(tmp_path / "home", url, "status", "job:1")
    assert proc.returncode == EXIT_BUSY, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("retrysafe: ledger ")
    assert SECRET not in proc.stderr and "Traceback" not in proc.stderr


def _worker_role(server: ThrowawayServer) -> None:
    with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE worker LOGIN PASSWORD '{SECRET}'")
        conn.execute("CREATE DATABASE ledger OWNER worker")


def test_wrong_password_is_an_auth_error_with_exit_2(password_server: ThrowawayServer,
                                                     tmp_path: Path) -> None:
    """Refused credentials: LedgerAuthError (exit 2), and the password is not echoed."""
    _worker_role(password_server)
    url = f"postgresql://worker:wrong-{SECRET}@127.0.0.1:{password_server.port}/ledger"
    with pytest.raises(LedgerAuthError) as err:
        open_ledger(url)
    assert "credentials" in str(err.value) and SECRET not in str(err.value)
    proc = cli(tmp_path / "home", url, "status", "job:1")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert proc.stderr.count("\n") == 1 and SECRET not in proc.stderr


def test_password_from_pgpassword_works_and_stays_hidden(password_server: ThrowawayServer,
                                                          tmp_path: Path) -> None:
    """The password comes from PGPASSWORD, not the URL; doctor shows URL, schema, server."""
    _worker_role(password_server)
    url = f"postgresql://worker@127.0.0.1:{password_server.port}/ledger"
    migrated = cli(tmp_path / "home", url, "migrate", env={"PGPASSWORD": SECRET})
    assert migrated.returncode == 0, migrated.stderr  # doctor only reads: it migrates nothing
    proc = cli(tmp_path / "home", url, "doctor", "--json", env={"PGPASSWORD": SECRET})
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout
    assert f'"schema_version": {SCHEMA_VERSION}' in proc.stdout
    assert '"server_version"' in proc.stdout and '"database": "ledger"' in proc.stdout
    shown = cli(tmp_path / "home", f"postgresql://worker:{SECRET}@127.0.0.1:"
                f"{password_server.port}/ledger", "doctor")
    assert shown.returncode == 0 and SECRET not in shown.stdout + shown.stderr
    assert "worker:***@" in shown.stdout


def test_missing_database_is_a_usage_error(pg_admin_dsn: str, tmp_path: Path) -> None:
    """A database that does not exist: LedgerError (exit 2) naming it, not 'unavailable'."""
    url = with_database(pg_admin_dsn, "rs_no_such_database")
    with pytest.raises(LedgerError) as err:
        open_ledger(url)
    assert not isinstance(err.value, LedgerUnavailable)
    assert "does not exist" in str(err.value)
    assert cli(tmp_path / "home", url, "status", "job:1").returncode == EXIT_USAGE


def _kill_session(tx: object, pg_db: str, wait_ms: int | None = None) -> None:
    """End this transaction's server session from another connection."""
    pid = tx.rows("SELECT pg_backend_pid() AS pid")[0]["pid"]  # type: ignore[attr-defined]
    with psycopg.connect(pg_db, autocommit=True) as killer:
        if wait_ms is None:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        else:
            killer.execute("SELECT pg_terminate_backend(%s, %s)", (pid, wait_ms))


@pytest.mark.parametrize("final", [False, True], ids=["plain", "final-writes"])
def test_connection_lost_mid_transaction_rolls_back(
        pg_db: str, final: bool) -> None:
    """A session killed inside a transaction: LedgerUnavailable, nothing half-written,
    and the next transaction gets a fresh connection. So too when the last write is
    one of the final writes sent together with the COMMIT."""
    backend = PostgresBackend(pg_db)
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT)")
        told = "nothing was recorded|may or may not have been recorded" if final else \
            "nothing was recorded"
        with pytest.raises(LedgerUnavailable, match=told), backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("half",))
            _kill_session(tx, pg_db)
            with tx.final_writes() if final else contextlib.nullcontext():
                tx.run("INSERT INTO probe (v) VALUES (?)", ("other half",))
        with backend.transaction(write=False) as tx:
            assert tx.rows("SELECT v FROM probe") == []
    finally:
        backend.close()


def test_connection_lost_at_commit_says_the_outcome_is_unknown(pg_db: str) -> None:
    """A connection that dies as COMMIT is sent: LedgerUnavailable saying the change may
    or may not have been recorded (never a silent retry), and the pool recovers."""
    backend = PostgresBackend(pg_db)
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT)")
        with pytest.raises(LedgerUnavailable, match="may or may not have been recorded"), \
                backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("maybe",))
            _kill_session(tx, pg_db, 5000)
        with backend.transaction(write=False) as tx:
            # here the server had not committed: the session ended before COMMIT arrived
            assert tx.rows("SELECT v FROM probe") == []
    finally:
        backend.close()


def test_percent_and_question_marks_in_values_pass_through(pg_db: str) -> None:
    """Placeholders are rewritten without touching values: '%' and '?' survive."""
    with open_ledger(pg_db) as ledger:
        c = ledger.claim("odd:100%?", job="odd", params={"q": "50%?x"},
                         holder=Holder("h", None), lease_seconds=30, max_attempts=3)
        assert c.status == "started"
        got = ledger.require_outcome("odd:100%?")
        assert got.params == {"q": "50%?x"}


def test_lease_times_come_from_the_server_clock(pg_db: str) -> None:
    """Lease expiry is stamped by the database clock, whatever this host's clock says."""
    with open_ledger(pg_db) as ledger:
        c = ledger.claim("clock:1", job="clock", params={}, holder=Holder("h", None),
                         lease_seconds=60, max_attempts=3)
        assert c.attempt is not None
        with psycopg.connect(pg_db) as conn:
            row = conn.execute("SELECT extract(epoch FROM now())").fetchone()
        assert row is not None
        server_now = float(row[0])
        assert abs(c.attempt.started_at - server_now) < 5
        assert c.attempt.lease_expires == pytest.approx(c.attempt.started_at + 60)
        assert ledger.backend.health()["isolation"] == "read committed"


def test_workers_migrating_a_fresh_database_at_once_all_succeed(pg_admin_dsn: str) -> None:
    """Sixteen processes opening an empty database together: one migrates, none fails."""
    script = textwrap.dedent("""
        import sys
        from retrysafe.ledger import open_ledger
        with open_ledger(sys.argv[1]) as led:
            print(led.schema_version())
    """)
    with fresh_database(pg_admin_dsn) as url:
        procs = [subprocess.Popen([sys.executable, "-c", script, url], env=worker_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(16)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 16, [e for _o, e in outs]
        assert {o.strip() for o, _e in outs} == {str(SCHEMA_VERSION)}
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT version FROM rs_schema ORDER BY version").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_32_concurrent_claims_of_a_new_outcome_start_exactly_one_attempt(pg_db: str) -> None:
    """INSERT ... ON CONFLICT DO NOTHING then SELECT ... FOR UPDATE, under READ COMMITTED:
    32 claimers on separate connections racing for a key nobody has seen: one wins."""
    open_ledger(pg_db).close()
    results: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(32)

    def claim(i: int) -> None:
        try:
            with open_ledger(pg_db) as ledger:
                ledger.schema_version()  # connected before the barrier
                start.wait()
                c = ledger.claim("fresh:1", job="fresh", params={}, holder=Holder(f"h{i}", None),
                                 lease_seconds=60, max_attempts=5)
                results.append(c.status)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == ["busy"] * 31 + ["started"]
    with open_ledger(pg_db) as ledger:
        assert [a.number for a in ledger.attempts("fresh:1")] == [1]
        assert ledger.require_outcome("fresh:1").fence == 1


def test_final_writes_go_together_and_fail_whole(pg_db: str) -> None:
    """The writes that end a transaction go out together. They land with its COMMIT;
    one the server refuses undoes the whole transaction and is reported as a plain
    failure (not 'may or may not'); the pooled connection works afterwards."""
    backend = PostgresBackend(pg_db)

    def values() -> list[str]:
        with backend.transaction(write=False) as tx:
            return [r["v"] for r in tx.rows("SELECT v FROM probe ORDER BY v")]

    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT PRIMARY KEY)")
        with backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("a",))
            with tx.final_writes():
                tx.run("INSERT INTO probe (v) VALUES (?)", ("b",))
                tx.run("INSERT INTO probe (v) VALUES (?)", ("c",))
        assert values() == ["a", "b", "c"]
        with pytest.raises(LedgerError) as err, backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("d",))
            with tx.final_writes():
                tx.run("INSERT INTO probe (v) VALUES (?)", ("e",))
                tx.run("INSERT INTO probe (v) VALUES (?)", ("a",))  # a duplicate key
        assert not isinstance(err.value, LedgerUnavailable)
        assert "duplicate key" in str(err.value)
        assert values() == ["a", "b", "c"]
        with backend.transaction() as tx, tx.final_writes():
            tx.run("INSERT INTO probe (v) VALUES (?)", ("f",))
        assert values() == ["a", "b", "c", "f"]
    finally:
        backend.close()



def test_a_write_transaction_keeps_the_servers_clock(pg_db: str) -> None:
    """A write transaction reads the server's clock with its BEGIN, sent with its first
    statement: the clock is the transaction's own (the same now() a statement in it
    writes), an empty transaction commits nothing, and a failing first statement
    rolls it back."""
    backend = PostgresBackend(pg_db)
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT, at DOUBLE PRECISION)")
        with backend.transaction():
            pass
        with backend.transaction(durable=False) as tx:
            tx.run("INSERT INTO probe (v, at) VALUES ('x', extract(epoch FROM now()))")
            now = tx.now
            assert tx.rows("SELECT current_setting('synchronous_commit') AS s")[0]["s"] == "off"
        with backend.transaction(write=False) as tx:
            assert tx.rows("SELECT at FROM probe") == [{"at": now}]
        with backend.transaction() as tx:
            early = tx.now  # asked for before any statement: the BEGIN goes alone
            tx.run("INSERT INTO probe (v, at) VALUES ('z', extract(epoch FROM now()))")
        with backend.transaction(write=False) as tx:
            assert tx.rows("SELECT at FROM probe WHERE v = 'z'") == [{"at": early}]
            tx.run("DELETE FROM probe WHERE v = 'z'")
        with pytest.raises(LedgerError), backend.transaction() as tx:
            tx.run("INSERT INTO no_such_table (v) VALUES ('y')")
        with backend.transaction() as tx:
            assert tx.rows("SELECT v FROM probe") == [{"v": "x"}]
    finally:
        backend.close()


def test_a_lazy_statement_skips_the_flush_for_itself_only(pg_db: str) -> None:
    """``lazy_commit_sql`` inside a statement run on its own (the one-trip claim)
    turns the wait for the WAL flush off for that statement's commit, and the
    setting ends with it: the next statement on the same connection waits again."""
    backend = PostgresBackend(pg_db)
    try:
        def setting(sql: str) -> str:
            return str(backend.execute_rows(sql)[0][0])

        before = setting("SELECT current_setting('synchronous_commit')")
        assert before != "off"
        assert setting(f"WITH z AS ({backend.lazy_commit_sql})"
                       " SELECT current_setting('synchronous_commit') FROM z") == "off"
        assert setting("SELECT current_setting('synchronous_commit')") == before
    finally:
        backend.close()


def test_a_new_outcomes_claim_is_one_lazy_statement(pg_db: str, sent: list[str]) -> None:
    """A new outcome's claim is one statement on its own (no BEGIN, no COMMIT: the server
    prepares it once per connection), which skips the flush; a claim of a taken key
    writes nothing and goes on to the full claim, which answers busy."""
    ledger = open_ledger(pg_db)
    sent.clear()  # (what opening the ledger sent)
    try:
        holder = Holder("host-a", 1001, "boot:1")
        first = ledger.claim("job:1", job="job", params={}, holder=holder, lease_seconds=60,
                             max_attempts=3, liveness=lambda _a, _r: (True, "alive"))
        assert len(sent) == 1 and sent[0].startswith("WITH o AS (INSERT"), sent
        assert PostgresBackend.lazy_commit_sql in sent[0] and "COMMIT" not in sent[0]
        assert first.status == "started" and first.attempt is not None
        assert ledger.outcome("job:1") == first.outcome
        again = ledger.claim("job:1", job="job", params={}, holder=holder, lease_seconds=60,
                             max_attempts=3, liveness=lambda _a, _r: (True, "alive"))
        assert again.status == "busy" and again.attempt == first.attempt
    finally:
        ledger.close()


def test_a_renewal_is_one_statement_holding_no_lock_after_it(pg_db: str,
                                                               sent: list[str]) -> None:
    """A heartbeat's renewal is one statement in autocommit: the server commits it
    whatever the holder does next, so a holder frozen (SIGSTOP) right after it holds no
    row another claim waits for. A stale attempt's renewal writes nothing and is
    refused as before."""
    from retrysafe.errors import StaleAttempt

    with open_ledger(pg_db) as ledger:
        holder = Holder("host-a", 1001, "boot:1")
        first = ledger.claim("renew:1", job="renew", params={}, holder=holder,
                             lease_seconds=60, max_attempts=3)
        assert first.attempt is not None
        sent.clear()
        expires = ledger.renew(first.attempt, 600)
        assert len(sent) == 1 and "BEGIN" not in sent[0] and "COMMIT" not in sent[0], sent
        assert expires == pytest.approx(first.attempt.started_at + 600, abs=30)
        assert ledger.attempts("renew:1")[0].lease_expires == expires
        with psycopg.connect(pg_db, autocommit=True) as other:
            other.execute("SET lock_timeout = '1s'")  # nothing of the renewal is held
            other.execute("SELECT 1 FROM rs_outcomes WHERE key = 'renew:1' FOR UPDATE")
        ledger.break_lease("renew:1", actor="tester", note="test")
        taken = ledger.claim("renew:1", job="renew", params={}, holder=holder,
                             lease_seconds=60, max_attempts=3)
        assert taken.status == "started"
        with pytest.raises(StaleAttempt):
            ledger.renew(first.attempt, 600)
        assert ledger.attempts("renew:1")[0].lease_expires == expires  # (not renewed)


def _count_messages(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Any]:
    """The messages this thread sends from now on, and the real ``execute``."""
    sent: list[str] = []
    real = psycopg.Connection.execute
    here = threading.get_ident()

    def counted(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
        # not the pool's empty ping of a connection idle a while, nor what its own
        # threads send to set up a new connection
        if str(query) and threading.get_ident() == here:
            sent.append(str(query))
        return real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    return sent, real


def test_a_write_transaction_is_two_round_trips(pg_db: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """BEGIN goes with the first statement and the final writes with the COMMIT: a read
    then writes is two messages to the server, with quoting done by psycopg (a value
    that looks like SQL stays a value)."""
    backend = PostgresBackend(pg_db)
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT PRIMARY KEY, n BIGINT, at DOUBLE PRECISION)")
        sent, real = _count_messages(monkeypatch)
        odd = "it's; DROP TABLE probe; -- \u00e9 %s ? $1"
        with backend.transaction() as tx:
            assert tx.rows("SELECT count(*) AS n FROM probe") == [{"n": 0}]
            with tx.final_writes():
                tx.run("INSERT INTO probe (v, n, at) VALUES (?, ?, ?)", (odd, 2**40, tx.now))
                tx.run("INSERT INTO probe (v, n, at) VALUES (?, ?, ?)", ("b", None, 1.5))
        assert len(sent) == 2, sent
        assert sent[0].startswith("BEGIN") and sent[1].rstrip().endswith("COMMIT")
        monkeypatch.setattr(psycopg.Connection, "execute", real)
        with backend.transaction(write=False) as tx:
            assert tx.rows("SELECT v, n FROM probe ORDER BY v") == [
                {"v": "b", "n": None}, {"v": odd, "n": 2**40}]
    finally:
        backend.close()


def test_a_value_that_is_not_utf8_is_refused_as_input(pg_db: str) -> None:
    """A string holding bytes that are not UTF-8 (lone surrogates) cannot be sent: an
    InvalidInput naming it, nothing written, and the pooled connection works after, in
    a plain statement, inside a transaction and among the final writes."""
    from retrysafe.errors import InvalidInput

    backend = PostgresBackend(pg_db)
    bad = "id\udcff"
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT)")
        with pytest.raises(InvalidInput, match="not UTF-8 text"):
            backend.execute("INSERT INTO probe (v) VALUES (?)", (bad,))
        with pytest.raises(InvalidInput, match="not UTF-8 text"), backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("kept back",))
            tx.run("INSERT INTO probe (v) VALUES (?)", (bad,))
        with pytest.raises(InvalidInput, match="not UTF-8 text"), backend.transaction() as tx:
            tx.run("INSERT INTO probe (v) VALUES (?)", ("kept back",))
            with tx.final_writes():
                tx.run("INSERT INTO probe (v) VALUES (?)", (bad,))
        backend.execute("INSERT INTO probe (v) VALUES (?)", ("text",))
        with backend.transaction(write=False) as tx:
            assert tx.rows("SELECT v FROM probe") == [{"v": "text"}]
    finally:
        backend.close()


def test_what_is_pending_survives_reads_binds_and_the_clock(pg_db: str) -> None:
    """The pending BEGIN and the held writes: the clock read inside the final writes is
    the transaction's own; a value refused while binding changes nothing pending (the
    next statement still opens the transaction); tuples keep columns of the same name
    apart; a read-only transaction sends its writes at once (there is no COMMIT)."""
    backend = PostgresBackend(pg_db)
    try:
        with backend.transaction() as tx:
            tx.run("CREATE TABLE probe (v TEXT, at DOUBLE PRECISION, at2 DOUBLE PRECISION)")
        with backend.transaction() as tx, tx.final_writes():
            tx.run("INSERT INTO probe (v, at) VALUES ('a', extract(epoch FROM now()))")
            tx.run("UPDATE probe SET at2 = ? WHERE v = 'a'", (tx.now,))
        with backend.transaction() as tx:
            with contextlib.suppress(UnicodeEncodeError):
                tx.run("INSERT INTO probe (v) VALUES (?)", ("\udcff",))
            tx.run("INSERT INTO probe (v) VALUES ('b')")
            status = tx.conn.info.transaction_status  # type: ignore[attr-defined]
            assert status == psycopg.pq.TransactionStatus.INTRANS
            assert tx.tuples("SELECT p.v, q.v FROM probe p, probe q WHERE p.v = 'a'"
                             " AND q.v = 'b'") == [("a", "b")]
        with backend.transaction(write=False) as tx, tx.final_writes():
            tx.run("INSERT INTO probe (v) VALUES ('c')")
        with backend.transaction(write=False) as tx:
            rows = {r["v"]: r for r in tx.rows("SELECT * FROM probe")}
        assert sorted(rows) == ["a", "b", "c"]
        assert rows["a"]["at"] == rows["a"]["at2"]
    finally:
        backend.close()


def test_doctor_on_a_database_without_the_ledger_creates_nothing(pg_db: str,
                                                                 tmp_path: Path) -> None:
    """A ledger URL naming a database that holds other things (a mistyped URL): doctor
    says it has no retrysafe tables, and creates none."""
    import json
    import os

    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text('[jobs.j]\nkey = "j:{n}"\nparams = { n = "slug" }\n')
    proc = subprocess.run([sys.executable, "-m", "retrysafe", "--home", str(home), "doctor",
                           "--json"], env={**os.environ, "RETRYSAFE_LEDGER": pg_db},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no retrysafe tables" in json.loads(proc.stdout)["ledger_state"]
    with psycopg.connect(pg_db) as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.tables"
                            " WHERE table_name LIKE 'rs\\_%'").fetchone() == (0,)
