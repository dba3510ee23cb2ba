"""The embedded default: one SQLite file in the home folder.

Opened deliberately: WAL (readers never block the writer), ``synchronous=FULL``
(a committed transition survives a power cut; ``normal`` is available for
throwaway ledgers), write transactions ``BEGIN IMMEDIATE`` (the write lock is
taken before the first read, so read-then-write races cannot happen) and a
busy timeout so concurrent processes queue instead of failing.

At ``synchronous=normal`` the write-ahead log is copied back into the file (a
checkpoint) every ``WAL_AUTOCHECKPOINT_NORMAL`` pages rather than SQLite's
default 1,000: an outcome's commits append about 40 pages, most of them the
same few (the newest leaves of the tables and indexes), a checkpoint copies each
page once however often it was appended and syncs the files, so a longer
interval copies fewer pages and syncs less per outcome. At ``full`` the default
stays: there every commit syncs the log, and a sync of a log that grows (a new
log, or one not yet refilled from its start after a checkpoint) costs far more
than a sync of one being rewritten in place; a short log is refilled soon.
A log a long reader let grow past ``WAL_SIZE_LIMIT`` is cut back to it; the
last connection to close checkpoints the log whole and removes it.

A new ledger file is private: ``0600`` less what the umask takes away (SQLite
gives its ``-wal`` and ``-shm`` files the database file's mode), in a folder
made ``0700`` when it is missing. An existing file keeps its mode.

A connection never crosses ``fork()``: a child forked from a process with the
ledger open closes the connections it inherited, at once (the parent still holds
the file's locks then, so the close changes nothing on disk), and opens its own
on first use. Used in the child, the parent's connection would claim locks the
child does not hold: the parent's close could then remove the write-ahead log
under the child, and the child's commits with it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..errors import (
    HomeNotWritable,
    LedgerError,
    LedgerUnavailable,
    RetrysafeError,
    StorageFull,
    command_line,
    not_text,
)
from .backend import Backend, Tx

__all__ = ["SqliteBackend"]

BUSY_TIMEOUT_MS = 30_000
PAGE_SIZE = 1024
"""Bytes per page of a new ledger (SQLite's default is 4096). A commit appends every
page it changed to the log, whole: one outcome changes about 37 pages (rows in four
tables and their indexes), each a few rows of 100 to 200 bytes, so smaller pages write
and sync a quarter of the bytes for the same rows (a first run 20% faster at
``NORMAL``, 11% at ``FULL``; docs/performance.md). A ledger keeps the page size it
was created with."""
WAL_AUTOCHECKPOINT_NORMAL = 10_000  # pages between checkpoints (10 MB of log at PAGE_SIZE)
WAL_SIZE_LIMIT = 64 << 20  # bytes a log is cut back to once checkpointed (a reader held it longer)


_LOW_SPACE = 4 * 1024 * 1024
"""Free bytes below which an I/O error of the ledger is taken for a full disk."""


def _free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use where ``path`` lives (None: unknown)."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class _SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection, write: bool) -> None:
        self.conn = conn
        # a write's clock is read as it begins; a read's only if asked (most never are)
        self._now: float | None = time.time() if write else None

    @property
    def now(self) -> float:
        if self._now is None:
            self._now = time.time()
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, tuple(params)).rowcount

    def records(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, tuple(params)).fetchall()

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.row_factory = None
        return cur.execute(sql, tuple(params)).fetchall()



class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (a class, not a generator: it runs twice
    per effect), with errors translated to the ledger's own."""

    __slots__ = ("backend", "conn", "lazy", "write")

    def __init__(self, backend: SqliteBackend, conn: sqlite3.Connection, write: bool,
                 lazy: bool) -> None:
        self.backend, self.conn, self.write, self.lazy = backend, conn, write, lazy

    def __enter__(self) -> Tx:
        self.backend._busy.add(self.conn)
        if self.write:
            try:
                if self.lazy:  # this commit only: appended to the WAL, not synced
                    self.conn.execute("PRAGMA synchronous = NORMAL")
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                self._restore()
                self.backend._busy.discard(self.conn)
                raise self.backend._translate(exc) from None
        return _SqliteTx(self.conn, self.write)

    def _restore(self) -> None:
        if self.lazy:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute(f"PRAGMA synchronous = {self.backend.synchronous}")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        try:
            self._end(exc)
        finally:
            self._restore()
            self.backend._busy.discard(self.conn)

    def _end(self, exc: BaseException | None) -> None:
        conn = self.conn
        if exc is not None:
            if self.write and conn.in_transaction:
                conn.execute("ROLLBACK")
            self.backend._raise_own(exc)
            return
        if self.write:
            self.backend._commit(conn)


class _Joined:
    """A write transaction inside a shared commit (:meth:`SqliteBackend.open_shared`): a
    savepoint, so it is still all or nothing, committed with the rest."""

    __slots__ = ("backend", "conn")

    def __init__(self, backend: SqliteBackend, conn: sqlite3.Connection) -> None:
        self.backend, self.conn = backend, conn

    def __enter__(self) -> Tx:
        self.backend._busy.add(self.conn)
        try:
            self.conn.execute("SAVEPOINT rs_joined")
        except sqlite3.Error as exc:
            self.backend._busy.discard(self.conn)
            raise self.backend._translate(exc) from None
        return _SqliteTx(self.conn, True)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        conn = self.conn
        try:
            if exc is None:
                try:
                    conn.execute("RELEASE rs_joined")
                except sqlite3.Error as err:
                    raise self.backend._translate(err) from None
                return
            if conn.in_transaction:  # (an I/O error may have ended the whole transaction)
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK TO rs_joined")
                    conn.execute("RELEASE rs_joined")
            self.backend._raise_own(exc)
        finally:
            self.backend._busy.discard(conn)


HEALTH_FINDINGS = 20
"""The most damage ``doctor`` lists from SQLite's ``quick_check``."""


class SqliteBackend(Backend):
    name = "sqlite"
    serial_pk = "INTEGER PRIMARY KEY AUTOINCREMENT"
    float_type = "REAL"
    shares_commits = True

    def __init__(self, path: Path, *, synchronous: str = "full", must_exist: bool = False) -> None:
        self.path = path
        self.synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._busy: set[sqlite3.Connection] = set()
        self._opened: tuple[int, int] | None = None
        """the file the first connection opened (device, inode): :meth:`gone`"""
        """connections inside a transaction or statement now (a forked child leaves them)"""
        self._lock = threading.Lock()
        _OPEN.add(self)
        if must_exist and not path.is_file():
            raise LedgerError(f"no ledger at {path} (is --home right?)")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise HomeNotWritable(f"ledger folder {path.parent} cannot be created: "
                                  f"{exc.strerror or exc}") from None

    def _conn(self) -> sqlite3.Connection:
        # sqlite3 connections must stay on their thread; the heartbeat has its own.
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self._create_private()
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                       isolation_level=None, check_same_thread=False)
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only an empty file takes it
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise LedgerError(f"ledger {self.path}: cannot switch to WAL mode ({mode})")
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                if self.synchronous == "NORMAL":
                    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_NORMAL}")
                conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
                conn.execute("PRAGMA foreign_keys = ON")
            except sqlite3.Error as exc:
                raise self._translate(exc) from None
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
                if self._opened is None:
                    with contextlib.suppress(OSError):
                        st = os.stat(self.path)
                        self._opened = (st.st_dev, st.st_ino)
        return conn

    def _create_private(self) -> None:
        """Create a missing ledger file ``0600`` (less the umask) before SQLite
        would create it ``0644``; an empty file is an empty database."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            return  # it exists (or cannot be made: SQLite's own open says why)
        os.close(fd)

    def _translate(self, exc: sqlite3.Error) -> RetrysafeError:
        text = str(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL or "disk is full" in text:
            return StorageFull(f"ledger {self.path}: {text}; free some space and run again")
        if (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR) or "disk I/O error" in text:
            # a write that ran out of space can come back as an I/O error too: the free
            # space tells the two apart
            name = getattr(exc, "sqlite_errorname", "") or "SQLITE_IOERR"
            free = _free_bytes(self.path)
            if free is not None and free < _LOW_SPACE:
                return StorageFull(f"ledger {self.path}: {text} ({name}) with "
                                   f"{free // 1024} KiB free; free some space and run again")
            return LedgerError(
                f"ledger {self.path}: {text} ({name}): the disk or the file system failed "
                "a read or a write; nothing more was recorded. Check the disk and the "
                f"kernel log, then check the ledger: {command_line('doctor')}")
        if "locked" in text or "busy" in text:
            from .sqlite_locks import holder_text

            return LedgerUnavailable(f"ledger {self.path} is busy: {text}{holder_text(self.path)}")
        if "readonly" in text or "unable to open" in text:
            return HomeNotWritable(f"ledger {self.path} cannot be written: {text}")
        if "not a database" in text or "malformed" in text:
            return LedgerError(f"ledger {self.path} is not a retrysafe ledger: {text}")
        return LedgerError(f"ledger {self.path}: {text}")

    def transaction(self, write: bool = True, *, durable: bool = True) -> AbstractContextManager[Tx]:
        # Reads run in autocommit: each statement sees one consistent snapshot,
        # and a BEGIN/COMMIT pair would double the cost of a one-query read.
        # A commit that need not be durable on its own skips its WAL sync: in WAL
        # mode a later synced commit syncs it too (the file is synced whole, and
        # frames are replayed in order), so it can only be lost with all after it.
        conn = self._conn()
        if write and getattr(self._local, "shared", False):
            return _Joined(self, conn)
        return _Transaction(self, conn, write,
                            not durable and write and self.synchronous in ("FULL", "EXTRA"))

    def open_shared(self) -> bool:
        # one BEGIN IMMEDIATE for all: the write lock is taken now, and the joined
        # transactions are savepoints; a statement run on its own (execute) joins as is
        if getattr(self._local, "shared", False):
            return True
        conn = self._conn()
        self._busy.add(conn)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._busy.discard(conn)
            raise self._translate(exc) from None
        self._local.shared = True
        return True

    def close_shared(self) -> None:
        if not getattr(self._local, "shared", False):
            return
        self._local.shared = False
        conn = self._conn()
        try:
            if conn.in_transaction:
                self._commit(conn)
        finally:
            self._busy.discard(conn)

    def _commit(self, conn: sqlite3.Connection) -> None:
        """COMMIT; one that fails is rolled back and said as the ledger's own error."""
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as err:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise self._translate(err) from None

    def _raise_own(self, exc: BaseException) -> None:
        """Raise the driver's error that ended a transaction as the ledger's own; any
        other error is left to go on as it is."""
        if isinstance(exc, sqlite3.Error):
            raise self._translate(exc) from None
        if isinstance(exc, UnicodeEncodeError):
            raise not_text(exc) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        # A writing statement in autocommit takes the write lock when it starts
        # (waiting up to the busy timeout) and commits, durably, when it ends.
        conn = self._conn()
        self._busy.add(conn)
        try:
            return conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except UnicodeEncodeError as exc:
            raise not_text(exc) from None
        finally:
            self._busy.discard(conn)

    @contextlib.contextmanager
    def migration_lock(self) -> Iterator[Tx]:
        """The migrations' transaction, with foreign keys off: SQLite rebuilds a table
        that others reference only so (and ignores the switch inside a transaction).
        The references are checked before the commit, and the switch is on again after."""
        conn = self._conn()
        conn.execute("PRAGMA foreign_keys = OFF")
        try:
            with self.transaction(write=True) as tx:
                yield tx
                broken = tx.rows("PRAGMA foreign_key_check")
                if broken:
                    raise LedgerError(f"ledger {self.path}: a migration would leave "
                                      f"{len(broken)} rows naming rows that do not exist; "
                                      "nothing was changed")
        finally:
            conn.execute("PRAGMA foreign_keys = ON")

    def gone(self) -> str | None:
        # one stat: the open connections write to the inode they opened, which a deleted
        # or replaced file (a home removed, a copy put back) no longer is
        if self._opened is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return f"ledger {self.path} was deleted"
        if (st.st_dev, st.st_ino) != self._opened:
            return f"ledger {self.path} was replaced by another file"
        return None

    def has_table(self, tx: Tx, name: str) -> bool:
        return tx.one("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (name,)) is not None

    def display_url(self) -> str:
        return f"sqlite:///{self.path}"

    def health(self) -> dict[str, Any]:
        conn = self._conn()
        # quick_check reads every page of the file (the b-trees' structure, not
        # whether each index matches its table): what it finds is a damaged file
        try:
            found = [str(r[0]) for r in conn.execute(f"PRAGMA quick_check({HEALTH_FINDINGS})")]
        except sqlite3.DatabaseError as exc:  # damage the check itself stops at
            found = [str(exc)]
        report: dict[str, Any] = {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": {0: "off", 1: "normal", 2: "full", 3: "extra"}.get(
                conn.execute("PRAGMA synchronous").fetchone()[0], "?"),
            "integrity": "ok" if found == ["ok"] else "damaged",
        }
        if found != ["ok"]:
            lines = [ln for f in found for ln in f.splitlines() if not ln.startswith("***")]
            report["problems"] = [
                "the ledger file is damaged (SQLite's quick_check: " + "; ".join(lines) + "): "
                "stop its jobs and keep a copy of the file with its -wal file, then save what "
                "it still holds with 'retrysafe export', or move both aside and rebuild the "
                "ledger from the attempt folders with 'retrysafe recover'"]
        return report

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

    def _forked(self) -> None:
        """In a child just forked (the one thread left): close the connections the
        parent opened, so SQLite forgets the locks it holds for the parent, and let
        the child open its own. A connection another of the parent's threads was
        using at the fork is left alone, never used nor closed: closing it would wait
        for that thread's lock forever, or undo its write in the memory both share."""
        inherited, busy = self._all, self._busy
        self._all, self._busy = [], set()
        self._local = threading.local()
        self._lock = threading.Lock()  # the parent's may have been held by another thread
        for conn in inherited:
            if conn in busy or conn.in_transaction:
                _LEFT_ALONE.append(conn)
                continue
            with contextlib.suppress(sqlite3.Error):
                conn.close()


_OPEN: weakref.WeakSet[SqliteBackend] = weakref.WeakSet()
"""Every backend of this process (a forked child closes what their connections inherited)."""
_LEFT_ALONE: list[sqlite3.Connection] = []
"""Connections a forked child inherited mid-use: kept, so nothing ever closes them."""


def _after_fork_in_child() -> None:
    for backend in list(_OPEN):
        backend._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
