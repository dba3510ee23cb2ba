"""Fixtures for the table connectors: a writing child process, a PostgreSQL table."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"

COLUMNS_SQL = "{id} , retrysafe_key TEXT NOT NULL UNIQUE, title TEXT NOT NULL, amount INTEGER, note TEXT"


def _reachable_pg_dsn(request: pytest.FixtureRequest) -> str:
    """The shared ``pg_dsn`` fixture when the suite has one, else env or the local default."""
    try:
        return str(request.getfixturevalue("pg_dsn"))
    except pytest.FixtureLookupError:
        # Run outside this suite's root conftest: find a server ourselves below.
        pass
    import psycopg

    dsn = os.environ.get("RETRYSAFE_TEST_PG_DSN") or DEFAULT_PG_DSN
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI and not reachable: {exc}")
        pytest.skip(f"no PostgreSQL reachable (set RETRYSAFE_TEST_PG_DSN): {exc}")
    return dsn


@dataclass
class SqlTarget:
    """A real table with a UNIQUE key column, and a way to read it back."""

    url: str
    table: str
    rows: Callable[[], list[tuple[Any, ...]]]
    execute: Callable[[str], Any]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sql_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    """The same table on SQLite and on PostgreSQL (own schema, dropped afterwards)."""
    if request.param == "sqlite":
        db = tmp_path / "ledger-side.db"

        def sqlite_run(sql: str) -> list[tuple[Any, ...]]:
            with contextlib.closing(sqlite3.connect(db)) as conn, conn:
                return conn.execute(sql).fetchall()

        sqlite_run(f"CREATE TABLE items ({COLUMNS_SQL.format(id='id INTEGER PRIMARY KEY')})")
        yield SqlTarget(
            f"sqlite:///{db}",
            "items",
            lambda: sqlite_run("SELECT id, retrysafe_key, title, amount, note FROM items ORDER BY id"),
            sqlite_run,
        )
        return

    import psycopg

    dsn = _reachable_pg_dsn(request)
    schema = f"rs_test_{uuid.uuid4().hex[:12]}"

    def pg_run(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(sql.replace("items", f"{schema}.items"))
            return cur.fetchall() if cur.description else []

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        pg_run(f"CREATE TABLE items ({COLUMNS_SQL.format(id='id BIGSERIAL PRIMARY KEY')})")
        yield SqlTarget(
            dsn,
            f"{schema}.items",
            lambda: pg_run("SELECT id, retrysafe_key, title, amount, note FROM items ORDER BY id"),
            pg_run,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
