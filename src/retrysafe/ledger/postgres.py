"""The shared ledger: PostgreSQL, for workers on many machines.

Opened deliberately:

* a small connection pool (``psycopg_pool``), opened on first use; a
  connection that sat idle is checked on checkout, so a server restart
  between jobs costs one failed check instead of one failed transaction;
* ``READ COMMITTED`` transactions; rows that decide something are read with
  ``SELECT ... FOR UPDATE`` (:attr:`PostgresBackend.lock_clause`), so every
  writer of an outcome queues on that outcome's row;
* time from the server (``now()``, the transaction's start by the database
  clock): leases expire by one clock, whatever the workers' clocks say;
* ``lock_timeout`` and ``idle_in_transaction_session_timeout`` on every
  session, so a worker frozen inside a transaction (SIGSTOP, a hung VM) is cut
  off by the server and cannot hold an outcome's row forever;
* migrations serialized by a transaction-scoped advisory lock;
* no connection crosses ``fork()``: a forked child sets the pool it inherited
  aside, never using or closing it (a close would end the parent's sessions,
  whose sockets both share), and opens a pool of its own on first use.

Errors become one line each: the server cannot be reached, restarted, or
dropped the connection → :class:`~retrysafe.errors.LedgerUnavailable` (exit
75, try again later); wrong credentials → :class:`~retrysafe.errors.LedgerAuthError`;
a setting libpq or psycopg refuses (``connect_timeout=x``, ``sslmode=bogus``), a
missing database or anything else → :class:`~retrysafe.errors.LedgerError` (exit
2: the configuration must change, waiting will not help). Passwords are masked
in every message (:mod:`retrysafe.ledger.conninfo`).

A transaction that fails is rolled back and never retried here. In
particular a ``COMMIT`` whose connection is lost may or may not have been
applied: the caller gets ``LedgerUnavailable`` and runs again. That is safe
because every ledger write is conditional (fenced on the attempt's token,
guarded by the expected step state): a write that did land is not applied
twice, it is found already done or refused as stale.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import LedgerAuthError, LedgerError, LedgerUnavailable, not_text
from .backend import Backend, Tx
from .conninfo import mask, parse

__all__ = ["PostgresBackend"]

# psycopg and its pool warn about connections they discard (after a restart, a
# failed rollback); without a handler those warnings would reach stderr through
# logging's last resort and break the CLI's one-line errors. Applications that
# configure logging still receive them.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

#: the advisory lock key migrations take ("retrysafe" as 8 bytes, big endian)
MIGRATION_LOCK_KEY = int.from_bytes(b"rtrysafe", "big") & 0x7FFF_FFFF_FFFF_FFFF

CONNECT_TIMEOUT = 10
"""Seconds to wait for a new connection (unless the URL sets ``connect_timeout``)."""
POOL_TIMEOUT = 15.0
"""Seconds a transaction waits for a working pooled connection."""
LOCK_TIMEOUT = "30s"
"""How long a statement waits for a row lock before giving up (exit 75, retry)."""
IDLE_IN_TRANSACTION_TIMEOUT = "60s"
"""The server ends a session that sits inside a transaction this long (a frozen worker)."""
POOL_MAX = 4
CHECK_AFTER_IDLE = 1.0
"""Seconds idle after which a pooled connection is pinged before use."""

# SQLSTATE classes and codes meaning "try again later": the transaction was
# rolled back by the server or never reached it.
_TRANSIENT_CLASSES = ("08", "40", "53", "57")
# lock_not_available (lock_timeout); idle_in_transaction_session_timeout (the server
# ended a session that sat inside a transaction: nothing of it was committed)
_TRANSIENT_CODES = frozenset({"55P03", "25P03"})
_AUTH_CLASSES = ("28",)
_AUTH_CODES = frozenset({"42501"})  # insufficient_privilege

_AUTH_TEXT = (
    "password authentication failed",
    "authentication failed",
    "no pg_hba.conf entry",
    "password is required",
    "no password supplied",
    "role \"",
    "permission denied for database",
)
_TRANSIENT_TEXT = (
    "too many clients",
    "too many connections",
    "starting up",
    "shutting down",
    "in recovery mode",
    "not yet accepting connections",
    "not accepting connections",
    "administrator command",
)


_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT extract(epoch FROM now()) AS now"
# the same, for a commit that need not wait for the server's WAL flush (Backend.transaction)
_BEGIN_LAZY = ("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO OFF;"
               " SELECT extract(epoch FROM now()) AS now")


def _rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    """End a failed transaction; on a broken connection the server already did."""
    if conn.closed or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    # if the connection is gone, the pool discards it and the server rolled back
    with contextlib.suppress(psycopg.Error):
        conn.execute("ROLLBACK")


@functools.lru_cache(maxsize=512)
def _driver_sql(sql: str) -> str:
    """The core's ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` is escaped)."""
    return sql.replace("%", "%%").replace("?", "%s")


_ROWS = (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.SINGLE_TUPLE)


def _has_rows(cur: psycopg.Cursor[Any]) -> bool:
    """Whether the cursor's current result is rows (a ``SELECT``, a ``RETURNING``).
    Not ``cur.description``: that builds a column object per column on every look,
    a tenth of a re-run's time on a wide row."""
    res = cur.pgresult
    return res is not None and res.status in _ROWS


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


hide_password = mask
"""``url`` with every password masked (an alias of :func:`retrysafe.ledger.conninfo.mask`)."""

# libpq and psycopg refusing a connection setting: a configuration error, never
# "try later" (libpq checks these before it sends anything to the server)
_CONFIG_TEXT = re.compile(
    r"invalid [\w ]+ value|invalid integer value|invalid port number|"
    r"invalid connection option|bad value for|could not match \d+|"
    r"unterminated quoted string|missing \"=\" after|invalid uri|percent-encoded|"
    r"invalid require_auth|does not support ssl|root certificate file"
)


class _PgTx(Tx):
    """Statements on one pooled connection (inside BEGIN/COMMIT for a write).

    A write transaction's ``BEGIN`` (with its clock) is not sent on its own: it
    goes out with the first statement, in one message, and its final writes go
    out with the ``COMMIT`` (:meth:`final_writes`). A message of several
    statements is PostgreSQL's simple query protocol: the server runs them in
    order, stops at the first error, and is idle (in the transaction, where the
    idle timeout applies) once it has answered; nothing stays half-sent between
    two messages, as a libpq pipeline's unsynced statements could. Their
    parameters are bound by psycopg on this side (``ClientCursor.mogrify``),
    with the connection's own quoting.
    """

    def __init__(self, conn: psycopg.Connection[DictRow], now: float | None = None,
                 begin: str | None = None) -> None:
        self.conn = conn
        self._now = now
        self._begin = begin  # not sent yet: goes with the first statement
        self._write = begin is not None
        self._holding = False  # inside final_writes: statements are kept for the COMMIT
        self._held: list[str] = []
        self._client: psycopg.ClientCursor[Any] | None = None

    @property
    def now(self) -> float:
        # Write transactions read the clock with their BEGIN. Reads fetch it
        # only if asked (most never do): now() is the statement's start there.
        if self._now is None:
            if self._begin is not None:
                self._send(None, ())
            else:
                row = self.conn.execute("SELECT extract(epoch FROM now()) AS now").fetchone()
                assert row is not None
                self._now = float(row["now"])
        assert self._now is not None
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def _bound(self, sql: str, params: Sequence[Any]) -> str:
        if self._client is None:
            self._client = psycopg.ClientCursor(self.conn)
        return self._client.mogrify(_driver_sql(sql), tuple(params))

    def _send(self, sql: str | None, params: Sequence[Any], *,
              commit: bool = False) -> psycopg.Cursor[DictRow]:
        """One round trip: the pending BEGIN and its clock, the held writes, ``sql``,
        then the ``COMMIT`` when asked; the cursor is left at the last result. A value
        that cannot be bound is refused before anything changes."""
        begin = self._begin
        parts = [begin, *self._held] if begin is not None else [*self._held]
        if sql is not None:
            parts.append(self._bound(sql, params) if parts else _driver_sql(sql))
        if commit:
            parts.append("COMMIT")
        self._begin, self._held = None, []
        if len(parts) == 1 and sql is not None:
            return self.conn.execute(parts[0], tuple(params))
        cur = self.conn.execute("; ".join(parts))
        if begin is not None:  # the clock: the first result with columns
            while not _has_rows(cur) and cur.nextset():
                pass
            row = cur.fetchone()
            assert row is not None
            self._now = float(row["now"])
        while cur.nextset():  # on to the last result
            pass
        return cur

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self._send(sql, params)
        return [dict(r) for r in cur.fetchall()] if _has_rows(cur) else []

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        cur: psycopg.Cursor[Any] = self._send(sql, params)
        cur.row_factory = tuple_row  # (columns by position: repeated names stay apart)
        rows: list[tuple[Any, ...]] = cur.fetchall() if _has_rows(cur) else []
        return rows

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        if self._holding:
            self._held.append(self._bound(sql, params))
            return -1
        return self._send(sql, params).rowcount

    @contextmanager
    def final_writes(self) -> Iterator[object]:
        # kept here, sent with the COMMIT: one round trip for the writes and the commit
        # (a read runs in autocommit: there each write is sent at once)
        self._holding = self._write
        try:
            yield None
        finally:
            self._holding = False

    def commit(self) -> str | None:
        """Send the held writes with the ``COMMIT``; the server's answer to it
        (``None``: the transaction never started, so there is nothing to commit)."""
        if self._begin is not None and not self._held:
            return None
        return self._send(None, (), commit=True).statusmessage


class PostgresBackend(Backend):
    """A ledger in a PostgreSQL database, shared by workers on many hosts.

    ``url`` is a libpq URL (``postgresql://user@host:5432/dbname?sslmode=...``).
    Keep the password out of it: libpq reads ``PGPASSWORD`` and ``~/.pgpass``.
    """

    name = "postgresql"
    lock_clause = " FOR UPDATE"
    serial_pk = "BIGSERIAL PRIMARY KEY"
    float_type = "DOUBLE PRECISION"
    single_statement_moves = True
    now_sql = "extract(epoch FROM now())"
    # local to the transaction, which for a statement in autocommit is the statement:
    # its commit does not wait for the WAL flush, and the setting ends with it
    lazy_commit_sql = "SELECT set_config('synchronous_commit', 'off', true)"
    crashes_alone = True

    def __init__(self, url: str) -> None:
        self.url = url
        info = parse(url)
        self._shown = mask(url)
        self._secrets = {s for s in info.raw if s}
        if not info.clean and info.spans:
            # libpq would read the password as a host, a port or a query: refuse
            # before the driver echoes pieces of it
            raise LedgerError(
                f"ledger URL {self._shown} is not valid: percent-encode the user name and "
                "password (# as %23, ? as %3F, / as %2F, @ as %40), or keep the password "
                "out of the URL (PGPASSWORD or ~/.pgpass)")
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise LedgerError(f"ledger URL {self._shown} is not valid: "
                              f"{self._scrub(str(exc))}") from None
        if params.get("password"):
            self._secrets.add(str(params["password"]))
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._kwargs["connect_timeout"] = CONNECT_TIMEOUT
        if "application_name" not in params:
            self._kwargs["application_name"] = "retrysafe"
        # every value is Unicode text to the ledger, whatever the database's own encoding
        self._kwargs["client_encoding"] = "UTF8"
        self._pool: ConnectionPool[psycopg.Connection[DictRow]] | None = None
        self._lock = threading.Lock()
        self._used: weakref.WeakKeyDictionary[psycopg.Connection[DictRow], float] = (
            weakref.WeakKeyDictionary())
        _OPEN.add(self)

    # --- connections ------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[DictRow]:
        """A direct connection (the first one, and to explain a pool timeout)."""
        try:
            conn = psycopg.connect(self.url, row_factory=dict_row, **self._kwargs)
        except psycopg.Error as exc:
            raise self._translate_connect(exc) from None
        try:
            self._configure(conn)
        except psycopg.Error as exc:
            conn.close()
            raise self._translate(exc, in_commit=False) from None
        return conn

    @staticmethod
    def _configure(conn: psycopg.Connection[Any]) -> None:
        # extra_float_digits: floats as exact text before PostgreSQL 12 too (from 12 on
        # any value above 0 is the shortest exact form), so the clock a transaction reads
        # equals what now() stores through it
        conn.execute("SELECT set_config('lock_timeout', %s, false),"
                     " set_config('idle_in_transaction_session_timeout', %s, false),"
                     " set_config('extra_float_digits', '3', false)",
                     (LOCK_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT))

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[DictRow]]:
        with self._lock:
            if self._pool is not None:
                return self._pool
            # One direct connection first: a wrong password or an unreachable
            # server is reported at once, precisely, instead of as a pool timeout.
            self._connect().close()
            pool: ConnectionPool[psycopg.Connection[DictRow]] = ConnectionPool(
                self.url,
                kwargs={**self._kwargs, "row_factory": dict_row},
                min_size=1,
                max_size=POOL_MAX,
                open=False,
                configure=self._configure,
                check=self._check,
                timeout=POOL_TIMEOUT,
                name="retrysafe-ledger",
            )
            pool.open(wait=False)
            self._pool = pool
            return pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        pool = self._open_pool()
        try:
            conn = pool.getconn()
        except PoolTimeout:
            # The pool could not hand out a working connection: ask the server
            # directly, so the error says why (down, credentials, database).
            self._connect().close()
            raise LedgerUnavailable(
                f"ledger {self._shown}: no working connection within {POOL_TIMEOUT:.0f}s; "
                "try again later"
            ) from None
        except psycopg.Error as exc:
            raise self._translate_connect(exc) from None
        try:
            yield conn
        finally:
            self._used[conn] = time.monotonic()
            # a broken connection is discarded here, a healthy one reused
            pool.putconn(conn)

    def _check(self, conn: psycopg.Connection[DictRow]) -> None:
        """Checkout check: a connection idle for a while is pinged first, so one
        the server dropped (restart, idle timeout, a firewall) is replaced
        quietly instead of failing a transaction. One returned moments ago is
        trusted, as it just worked (the same bypass window other pools use)."""
        if time.monotonic() - self._used.get(conn, 0.0) > CHECK_AFTER_IDLE:
            ConnectionPool.check_connection(conn)

    # --- transactions -----------------------------------------------------------

    @contextmanager
    def transaction(self, write: bool = True, *, durable: bool = True) -> Iterator[Tx]:
        """A ``READ COMMITTED`` transaction.

        Writers serialize on the rows they lock (``FOR UPDATE``), not on a
        database-wide write lock as SQLite does.
        """
        with self._connection() as conn:
            if not write:
                # Under READ COMMITTED every statement takes its own snapshot,
                # so statements inside BEGIN/COMMIT see no more consistent a
                # picture than the same statements in autocommit: reads skip
                # the two round trips.
                try:
                    yield _PgTx(conn)
                except psycopg.Error as exc:
                    raise self._translate(exc, in_commit=False) from None
                except UnicodeEncodeError as exc:
                    raise not_text(exc) from None
                return
            # The BEGIN, which also reads the server's clock (leases are judged by
            # the database, never the worker), goes with the first statement.
            tx = _PgTx(conn, begin=_BEGIN if durable else _BEGIN_LAZY)
            try:
                yield tx
            except BaseException as exc:
                _rollback_quietly(conn)
                if isinstance(exc, psycopg.Error):
                    raise self._translate(exc, in_commit=False) from None
                if isinstance(exc, UnicodeEncodeError):  # refused before it was sent
                    raise not_text(exc) from None
                raise
            try:
                done = tx.commit()
            except psycopg.Error as exc:
                _rollback_quietly(conn)
                raise self._translate(exc, in_commit=True) from None
            if done not in ("COMMIT", None):  # ROLLBACK: the transaction had failed
                raise LedgerError(f"ledger {self._shown}: the transaction was rolled back "
                                  "by the server; nothing was recorded")

    @contextmanager
    def _autocommit(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A connection for one statement committed on its own, in one round trip (no
        BEGIN, no COMMIT), its parameters bound by the server (psycopg prepares a
        statement it sees again, so it is planned once per connection)."""
        with self._connection() as conn:
            try:
                yield conn
            except UnicodeEncodeError as exc:  # refused before it was sent
                raise not_text(exc) from None
            except psycopg.Error as exc:
                # a statement that writes also commits: a lost connection leaves
                # its fate unknown, which the error says
                raise self._translate(exc, in_commit=True) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Autocommit: a step move is one statement, committed on its own."""
        with self._autocommit() as conn:
            return conn.execute(_driver_sql(sql), params).rowcount

    def execute_rows(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        """Autocommit, as :meth:`execute`, reading the statement's rows."""
        with self._autocommit() as conn:
            cur: psycopg.Cursor[Any] = conn.cursor(row_factory=tuple_row)
            cur.execute(_driver_sql(sql), params)
            rows: list[tuple[Any, ...]] = cur.fetchall() if _has_rows(cur) else []
            return rows

    @contextmanager
    def migration_lock(self) -> Iterator[Tx]:
        """A transaction holding the migration advisory lock until it ends.

        Workers that start at once on a fresh database queue here: the first
        creates the tables, the others find them created.
        """
        with self.transaction() as tx:
            tx.rows("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK_KEY,))
            yield tx

    # --- errors -----------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        text = _one_line(text).replace(self.url, self._shown)
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def _translate_connect(self, exc: psycopg.Error) -> LedgerError:
        """A failure to connect, told by what the server or the network said."""
        text = self._scrub(str(exc)).removeprefix("connection failed: ")
        text = text.removeprefix("connection is bad: ")
        low = text.lower()
        if isinstance(exc, psycopg.ProgrammingError) or _CONFIG_TEXT.search(low):
            return LedgerError(f"ledger {self._shown}: a connection setting is not valid "
                               f"({text}); fix the URL or the PG* environment variables")
        missing = re.search(r'database "[^"]*" does not exist', text)
        if missing:
            return LedgerError(f"ledger {self._shown}: {missing.group(0)}: "
                               "create it or fix the URL")
        if any(t in low for t in _TRANSIENT_TEXT):
            return LedgerUnavailable(f"ledger {self._shown} is not accepting connections now "
                                     f"({text}); try again later")
        if any(t in low for t in _AUTH_TEXT):
            return LedgerAuthError(f"ledger {self._shown} refused the credentials ({text}); "
                                   "check the user and PGPASSWORD or ~/.pgpass")
        if "fatal:" in low:
            return LedgerError(f"ledger {self._shown} refused the connection: {text}")
        return LedgerUnavailable(f"ledger {self._shown} is unreachable ({text}); try again later")

    def _translate(self, exc: psycopg.Error, *, in_commit: bool) -> LedgerError:
        """A failure inside a transaction; the transaction did not take effect
        (or, for a lost COMMIT, may have: the caller's retry is safe either way)."""
        if isinstance(exc, PoolTimeout):
            return LedgerUnavailable(f"ledger {self._shown}: no connection available; "
                                     "try again later")
        state = exc.sqlstate or ""
        text = self._scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        broken = isinstance(exc, psycopg.OperationalError) and not state
        # the connection ended (network, restart, admin shutdown) while COMMIT was
        # in flight: whether the server committed first cannot be known here
        if in_commit and (broken or state.startswith(("08", "57"))):
            return LedgerUnavailable(
                f"ledger {self._shown}: the connection was lost while committing ({text}); "
                "the change may or may not have been recorded; run again, ledger writes are "
                "fenced so a repeat is safe"
            )
        if broken or state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_CODES:
            return LedgerUnavailable(f"ledger {self._shown} failed mid-transaction ({text}); "
                                     "nothing was recorded; try again later")
        if state.startswith(_AUTH_CLASSES) or state in _AUTH_CODES:
            return LedgerAuthError(f"ledger {self._shown}: not allowed ({text})")
        if state in ("42P01", "42703"):  # undefined table / column
            return LedgerError(f"ledger {self._shown} does not hold the expected tables ({text}); "
                               "run 'retrysafe migrate'")
        return LedgerError(f"ledger {self._shown}: {text}")

    # --- the rest of the contract -------------------------------------------------

    def has_table(self, tx: Tx, name: str) -> bool:
        row = tx.one("SELECT to_regclass(?) IS NOT NULL AS present", (name,))
        return bool(row and row["present"])

    def display_url(self) -> str:
        return self._shown

    def health(self) -> dict[str, Any]:
        before = time.time()
        with self.transaction(write=False) as tx:
            row = tx.one(
                "SELECT current_setting('server_version') AS version,"
                " current_database() AS db, current_user AS usr,"
                " current_setting('transaction_isolation') AS isolation,"
                " extract(epoch FROM clock_timestamp()) AS clock"
            )
        after = time.time()
        assert row is not None
        return {
            "server_version": row["version"],
            "database": row["db"],
            "user": row["usr"],
            "isolation": row["isolation"],
            # informative only: leases are judged by the server's clock
            "clock_offset_seconds": round(float(row["clock"]) - (before + after) / 2, 3),
        }

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5)

    def _forked(self) -> None:
        """In a child just forked: the parent's pool is the parent's (its connections
        talk over sockets the child shares, its workers are threads the child does not
        have). It is set aside, neither used nor closed; the child opens its own."""
        if self._pool is not None:
            _LEFT_ALONE.append(self._pool)
        self._pool = None
        self._lock = threading.Lock()  # the parent's may have been held by another thread
        self._used = weakref.WeakKeyDictionary()


_OPEN: weakref.WeakSet[PostgresBackend] = weakref.WeakSet()
"""Every backend of this process (a forked child sets their pools aside)."""
_LEFT_ALONE: list[ConnectionPool[psycopg.Connection[DictRow]]] = []
"""Pools a forked child inherited: kept, so it never closes the parent's sessions."""


def _after_fork_in_child() -> None:
    for backend in list(_OPEN):
        backend._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
