"""Ledger backends, chosen by URL.

* ``sqlite:///path/to/ledger.sqlite3`` (the default, in the home folder)
* ``postgresql://user@host/db`` (``pip install 'retrysafe[postgres]'``)

Backends are imported lazily: a SQLite user never imports psycopg. A URL is
shown with its password masked (:func:`display_url`), and commands run under an
attempt get it without the password (:func:`child_env`).
"""

from __future__ import annotations

from pathlib import Path

from .. import envvars
from ..errors import ConfigError
from .backend import Backend, Tx
from .core import Liveness
from .decisions import Ledger
from .records import AttemptRecord, Claim, Event, Holder, OutcomeRecord, StepRecord

__all__ = [
    "AttemptRecord",
    "Backend",
    "Claim",
    "Event",
    "Holder",
    "Ledger",
    "Liveness",
    "OutcomeRecord",
    "StepRecord",
    "Tx",
    "child_env",
    "display_url",
    "open_backend",
    "open_ledger",
]


def display_url(url: str) -> str:
    """``url`` as it may be printed: every password masked, however it was typed
    (in the user part or a ``password=`` parameter, percent-encoded or not, in a
    URL or in libpq's ``key=value`` form)."""
    from .conninfo import mask

    return mask(url)


def child_env(url: str) -> dict[str, str]:
    """The ledger's variables for a command run under an attempt: ``RETRYSAFE_LEDGER``
    without the password, and ``PGPASSWORD`` (which libpq reads) when the URL
    carried one. A URL without a password is handed on as it is."""
    if url.startswith("sqlite:///"):  # a file path: no user, no password
        return {envvars.LEDGER: url}
    from .conninfo import split_password

    bare, password = split_password(url)
    env = {envvars.LEDGER: bare}
    if password is not None:
        env["PGPASSWORD"] = password
    return env


def open_backend(url: str, *, sqlite_synchronous: str = "full", must_exist: bool = False) -> Backend:
    """The backend for ``url``; ``must_exist``: a SQLite file that is not there is
    refused instead of created (reading commands never create a ledger)."""
    if url.startswith("sqlite:///"):
        from .sqlite import SqliteBackend

        return SqliteBackend(Path(url[len("sqlite:///"):]), synchronous=sqlite_synchronous,
                             must_exist=must_exist)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresBackend
        except ImportError as exc:
            raise ConfigError(
                f"a PostgreSQL ledger needs the postgres extra: pip install 'retrysafe[postgres]' ({exc})"
            ) from None
        return PostgresBackend(url)
    shown = display_url(url)
    scheme = shown.split(":", 1)[0] if ":" in shown else shown
    raise ConfigError(f"unsupported ledger URL scheme {scheme!r}: use sqlite:///PATH or postgresql://...")


def open_ledger(url: str, *, sqlite_synchronous: str = "full", auto_migrate: bool = True,
                must_exist: bool = False) -> Ledger:
    """Open (and by default migrate) the ledger at ``url``; ``must_exist``: never
    create it (:func:`open_backend`)."""
    backend = open_backend(url, sqlite_synchronous=sqlite_synchronous, must_exist=must_exist)
    try:
        return Ledger(backend, auto_migrate=auto_migrate)
    except BaseException:
        backend.close()
        raise
