"""Shared fixtures: a fresh home, the CLI as a real process, and ledger URLs.

Ledger-level tests run once per backend through the ``ledger_url`` fixture:
SQLite always, PostgreSQL from ``tests/pgtest.py`` (never skipped under CI).
The PostgreSQL leg carries the ``postgres`` marker, as the tests in
``tests/postgres/`` do, so ``-m postgres`` / ``-m "not postgres"`` select it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support import Home

try:
    from pgtest import pg_dsn
except ImportError:  # pragma: no cover - before the PostgreSQL support lands

    @pytest.fixture(scope="session")
    def pg_dsn() -> str:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL test support is missing")
        pytest.skip("PostgreSQL test support is missing")


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
    with open_ledger(dsn) as ledger, ledger.backend.transaction() as tx:
        for table in ("rs_events", "rs_steps", "rs_attempts", "rs_outcomes"):
            tx.run(f"DELETE FROM {table}")
    return dsn


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """A fresh home on the embedded SQLite ledger."""
    yield Home(tmp_path / "home")


@pytest.fixture
def any_home(tmp_path: Path, ledger_url: str) -> Iterator[Home]:
    """A fresh home on each ledger backend (SQLite, PostgreSQL)."""
    yield Home(tmp_path / "home", ledger=None if ledger_url.startswith("sqlite") else ledger_url)
