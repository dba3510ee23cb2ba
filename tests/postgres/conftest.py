"""Fixtures for the PostgreSQL tests: a database per test, a server a test may restart."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

# pgtest and pgrace, also when this folder is run on its own
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pgrace import EFFECTS_TABLE
from pgtest import ThrowawayServer, absent, fresh_database, pg_admin_dsn, require_server

__all__ = ["own_server", "password_server", "pg_admin_dsn", "pg_db", "sent"]


@pytest.fixture
def pg_db() -> Iterator[str]:
    """A database of this test's own, with an ``effects`` table (no unique constraint)."""
    with fresh_database(require_server()) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(EFFECTS_TABLE)
        yield url


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement this thread sends through a psycopg cursor from now on (a
    connection's own ``execute`` opens a cursor for it), not the pool's empty ping of an
    idle connection."""
    out: list[str] = []
    real = psycopg.Cursor.execute
    here = threading.get_ident()

    def counted(self: psycopg.Cursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if str(query) and threading.get_ident() == here:
            out.append(str(query))
        return real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return out


def _throwaway(password_auth: bool = False) -> ThrowawayServer:
    try:
        return ThrowawayServer(password_auth=password_auth)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        absent(f"cannot create a throwaway PostgreSQL server: {exc}")
        raise


@pytest.fixture
def own_server() -> Iterator[ThrowawayServer]:
    """A PostgreSQL server this test owns: it may stop, crash and start it."""
    server = _throwaway()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def password_server() -> Iterator[ThrowawayServer]:
    """A server whose TCP logins need a password (SCRAM)."""
    server = _throwaway(password_auth=True)
    try:
        server.start()
        yield server
    finally:
        server.close()
