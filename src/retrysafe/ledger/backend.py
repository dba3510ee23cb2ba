"""The backend interface: the few primitives a database must provide.

The :class:`~retrysafe.ledger.core.LedgerCore` owns every rule (claims, fencing,
transitions, history); a backend only opens transactions, tells the time by
its own clock and translates its errors. Write SQL once with ``?``
placeholders; a backend rewrites them for its driver.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["Backend", "Tx"]


class Tx(ABC):
    """One open transaction. ``now`` is the database's clock, read once at the start."""

    now: float

    @abstractmethod
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    @abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a statement; return the number of rows it changed."""

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def records(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]:
        """:meth:`rows` as the driver gives them, read by column name and not copied
        into dicts (a hot read that builds records from them at once)."""
        return self.rows(sql, params)

    @abstractmethod
    def tuples(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        """The rows as tuples of the selected columns, in order (a hot read that builds
        records by position). Read from the driver by position, never through
        :meth:`rows`: a dict per row would merge columns of the same name."""

    def final_writes(self) -> AbstractContextManager[object]:
        """The writes that end the transaction, whose results nobody reads: a
        client-server backend sends them with the COMMIT (one round trip) and reports
        any error of theirs then (:meth:`run` returns no row count there). Nothing may
        run in the transaction after the block but its COMMIT. In-process backends
        run them one by one, as without it."""
        return contextlib.nullcontext()


class Backend(ABC):
    """A database holding the ledger's tables."""

    name: str
    #: appended to a SELECT that must lock the row it reads until commit
    lock_clause: str = ""
    #: DDL type for an auto-incrementing integer primary key
    serial_pk: str
    #: DDL type for a floating point timestamp
    float_type: str = "DOUBLE PRECISION"
    #: can a step move, its history and the progress mark be one statement
    #: (writable ``WITH``, see ``ledger/moves.py``)? Such backends provide :attr:`now_sql`.
    single_statement_moves: bool = False
    #: the database's clock as an SQL expression, in seconds since the epoch
    now_sql: str = ""
    #: a query (one row) whose evaluation inside a statement run on its own (autocommit)
    #: lets that statement's commit skip the wait for the disk, as
    #: :meth:`transaction` ``durable=False`` does; "" where there is none
    lazy_commit_sql: str = ""
    #: can the database crash while the processes using it live on (a server)? A
    #: commit that did not wait for the disk is then lost under a live holder, and
    #: an attempt whose holder lives is never taken over by another process
    #: (process.py): commits that end an attempt wait for the disk there.
    crashes_alone: bool = False
    #: does :meth:`open_shared` open a shared commit here?
    shares_commits: bool = False

    def open_shared(self) -> bool:
        """Start a shared commit on this thread's connection: every write transaction
        and statement until :meth:`close_shared` joins it (each still all or nothing),
        and they commit together, durably, once. ``False`` where a backend has none (a
        server gains nothing from it: its commits are round trips, not pages written),
        and then nothing changes. No external call may run while one is open: it holds
        the ledger's write lock."""
        return False

    def close_shared(self) -> None:
        """Commit the shared commit :meth:`open_shared` opened on this thread, if one is
        open (also after an error inside it: what each joined transaction wrote whole
        stands, as it would have on its own)."""
        return None

    @abstractmethod
    def transaction(self, write: bool = True, *, durable: bool = True) -> AbstractContextManager[Tx]:
        """A transaction; a write transaction takes the write lock at once
        (SQLite ``BEGIN IMMEDIATE``), so no read-then-write race is possible.

        ``durable=False``: the commit does not wait for the disk (SQLite
        ``synchronous=NORMAL`` for this one commit, PostgreSQL
        ``synchronous_commit=off``). It survives the process and is ordered
        before every later commit, so the next durable commit makes it durable
        too; only a power cut or OS crash before that (on a server, also the
        server's own crash: :attr:`crashes_alone`) can lose it, and then it
        is lost whole, with nothing committed after it. The core uses it where
        losing the commit repeats no effect (docs/reliability.md, "Durable
        syncs")."""

    def execute_rows(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        """One statement committed on its own (as :meth:`execute`), durably; its rows as
        :meth:`Tx.tuples` gives them. A server plans it once per connection."""
        with self.transaction() as tx:
            return tx.tuples(sql, params)

    @abstractmethod
    def display_url(self) -> str:
        """The ledger URL with any password hidden."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def has_table(self, tx: Tx, name: str) -> bool:
        """Does the table exist? (Read-only: opening a ledger must not write.)"""

    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement that commits on its own (autocommit); return how
        many rows it changed (or, for a statement returning rows, returned).

        If the connection is lost while it runs, it may or may not have been
        applied: the error says so.
        """

    def gone(self) -> str | None:
        """Is the ledger this backend writes no longer the one its URL names (a SQLite
        file deleted or replaced since it was opened, so what is written now is lost)?
        What happened, or ``None``. A server cannot tell, and is never gone."""
        return None

    def migration_lock(self) -> AbstractContextManager[Tx]:
        """The transaction migrations run in (PostgreSQL adds an advisory lock)."""
        return self.transaction(write=True)

    def health(self) -> dict[str, Any]:
        """Facts about the database for ``doctor``; ``"problems"``, when present,
        lists what is wrong with it (each with what to do), and makes doctor fail."""
        return {}

    @staticmethod
    def iter_split(script: str) -> Iterator[str]:
        for stmt in script.split(";"):
            if stmt.strip():
                yield stmt.strip()
