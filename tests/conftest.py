"""Shared fixtures: a fresh home, the CLI as a real process, and ledger URLs.

Ledger-level tests run once per backend through the ``ledger_url`` fixture:
SQLite always, PostgreSQL from ``tests/pgtest.py`` (never skipped under CI).
The PostgreSQL leg carries the ``postgres`` marker, as the tests in
``tests/postgres/`` do, so ``-m postgres`` / ``-m "not postgres"`` select it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pgtest import empty_ledger_tables, pg_dsn  # noqa: F401 - pg_dsn is a fixture for every test
from support import Home


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty ledger on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    from retrysafe.ledger import open_backend, open_ledger
    from retrysafe.ledger.migrations import SCHEMA_VERSION

    backend = open_backend(dsn)
    try:
        with backend.transaction() as tx:
            if tx.one("SELECT to_regclass('rs_schema') AS t")["t"]:  # type: ignore[index]
                # a test may have left a "future" schema row behind
                tx.run("DELETE FROM rs_schema WHERE version > ?", (SCHEMA_VERSION,))
    finally:
        backend.close()
    with open_ledger(dsn):
        pass  # migrated
    empty_ledger_tables(dsn)
    return dsn


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """A fresh home on the embedded SQLite ledger."""
    yield Home(tmp_path / "home")


@pytest.fixture
def any_home(tmp_path: Path, ledger_url: str) -> Iterator[Home]:
    """A fresh home on each ledger backend (SQLite, PostgreSQL)."""
    yield Home(tmp_path / "home", ledger=None if ledger_url.startswith("sqlite") else ledger_url)
