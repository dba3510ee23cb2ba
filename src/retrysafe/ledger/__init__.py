"""Ledger backends, chosen by URL.

* ``sqlite:///path/to/ledger.sqlite3`` (the default, in the home folder)
* ``postgresql://user@host/db`` (``pip install 'retrysafe[postgres]'``)

Backends are imported lazily: a SQLite user never imports psycopg.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .backend import Backend, Tx
from .core import HolderCheck
from .decisions import Ledger
from .records import AttemptRecord, Claim, Event, Holder, OutcomeRecord, StepRecord

__all__ = [
    "AttemptRecord",
    "Backend",
    "Claim",
    "Event",
    "Holder",
    "HolderCheck",
    "Ledger",
    "OutcomeRecord",
    "StepRecord",
    "Tx",
    "open_backend",
    "open_ledger",
]


def open_backend(url: str, *, sqlite_synchronous: str = "full") -> Backend:
    if url.startswith("sqlite:///"):
        from .sqlite import SqliteBackend

        return SqliteBackend(Path(url[len("sqlite:///"):]), synchronous=sqlite_synchronous)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresBackend
        except ImportError as exc:
            raise ConfigError(
                f"a PostgreSQL ledger needs the postgres extra: pip install 'retrysafe[postgres]' ({exc})"
            ) from None
        return PostgresBackend(url)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise ConfigError(f"unsupported ledger URL scheme {scheme!r}: use sqlite:///PATH or postgresql://...")


def open_ledger(url: str, *, sqlite_synchronous: str = "full", auto_migrate: bool = True) -> Ledger:
    """Open (and by default migrate) the ledger at ``url``."""
    backend = open_backend(url, sqlite_synchronous=sqlite_synchronous)
    try:
        return Ledger(backend, auto_migrate=auto_migrate)
    except BaseException:
        backend.close()
        raise
