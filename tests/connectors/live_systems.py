"""The real systems the connector tests talk to, as fixtures and helpers.

``tests/connectors/conftest.py`` exposes the fixtures to every connector test
(the per-connector files and the conformance suite alike):

* ``api``: the HTTP API of ``servers/http_api.py``, a real process on loopback;
* ``repos``: a git work tree on ``main`` and its bare remote on disk;
* ``sql_target``: the same table on SQLite and on PostgreSQL (``tests/pgtest.py``);
* ``mail_servers`` / ``mail``: Dovecot IMAP and SMTP listeners (``email/mailservers.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
# mailservers.py stays next to the email tests (examples/ runs it from there).
if str(HERE / "email") not in sys.path:
    sys.path.insert(0, str(HERE / "email"))

from mailservers import PASSWORD, PASSWORD_ENV, MailServers, MissingMailServer, start_mail_servers  # noqa: E402

__all__ = ["Api", "Repos", "SqlTarget", "api", "git", "mail", "mail_servers", "open_sql_target", "repos", "sql_target"]

# --- HTTP ---------------------------------------------------------------------------

TOKEN = "tok-3f9a1c-never-printed"
TOKEN_ENV = "RS_TEST_API_TOKEN"


@dataclass
class Api:
    """The running API: its base URL and what it really holds."""

    base: str
    state_path: Path

    def knob(self, api: str, action: str, **fields: Any) -> None:
        """Queue one misbehaviour for the next matching request."""
        httpx.post(f"{self.base}/_control", json={"api": api, "action": action, **fields})

    def resources(self, api: str, key: str | None = None) -> list[dict[str, Any]]:
        data = json.loads(self.state_path.read_text())
        return [r for r in data["resources"] if r["api"] == api and (key is None or r["key"] == key)]

    def delete(self, api: str, resource_id: str) -> None:
        """Remove a resource, as a person using the API could."""
        resp = httpx.delete(
            f"{self.base}/{api}/items/{resource_id}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert resp.status_code == 204, resp.text

    def config(self, api: str, **extra: Any) -> dict[str, Any]:
        """A connector table for one of the two collections, with the token from the env."""
        table: dict[str, Any] = {
            "url": f"{self.base}/{api}/items",
            "token_env": TOKEN_ENV,
            "lookup_url": f"{self.base}/{api}/items/by-key/{{key}}",
            "lookup_max_wait": 0.05,
        }
        table.update(extra)
        return {k: v for k, v in table.items() if v is not None}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """A fresh API process per test, its token in the environment as the config names it."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    state, port_file = tmp_path / "api-state.json", tmp_path / "api.port"
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS / "http_api.py"), str(state), str(port_file)],
        env={**os.environ, "API_TOKEN": TOKEN},
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the test API server did not start")
            time.sleep(0.02)
        yield Api(f"http://127.0.0.1:{port_file.read_text()}", state)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- git --------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    """Run real git in ``repo`` and return its output (fails the test on error)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.rstrip("\n")


@dataclass
class Repos:
    """A bare remote on disk and a clone of it on branch ``main`` with one commit."""

    remote: Path
    work: Path
    root: Path

    @staticmethod
    def git(repo: Path, *args: str) -> str:
        """Run real git in ``repo`` and return its output (fails the test on error)."""
        return git(repo, *args)

    def clone(self, name: str) -> Path:
        path = self.root / name
        subprocess.run(["git", "clone", "-q", str(self.remote), str(path)], check=True)
        _identity(path)
        return path

    def keyed(self, repo: Path, ref: str, key: str) -> list[str]:
        """SHAs on ``ref`` whose Retrysafe-Key trailer is ``key``, by plain git."""
        out = git(repo, "log", ref, "--format=%H %(trailers:key=Retrysafe-Key,valueonly,separator=)")
        return [line.split()[0] for line in out.splitlines() if line.split()[1:] == [key]]


def _identity(repo: Path) -> None:
    git(repo, "config", "user.name", "Report Bot")
    git(repo, "config", "user.email", "bot@example.org")


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    """A work tree with one commit on ``main``, pushed to its bare remote ``origin``."""
    root = tmp_path / "git"
    root.mkdir()
    remote = root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    work = root / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    _identity(work)
    (work / "README.md").write_text("notes\n")
    git(work, "add", "README.md")
    git(work, "commit", "-q", "-m", "Start")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "-u", "origin", "main")
    return Repos(remote, work, root)


# --- SQL ----------------------------------------------------------------------------------

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


@contextlib.contextmanager
def open_sql_target(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    """The test table on ``kind`` (``sqlite`` or ``postgresql``: own schema, dropped afterwards)."""
    if kind == "sqlite":
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


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sql_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    """The same table on SQLite and on PostgreSQL."""
    with open_sql_target(request.param, request, tmp_path) as target:
        yield target


# --- email ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mail_servers() -> Iterator[MailServers]:
    """Dovecot and the SMTP listeners, started once per test run."""
    try:
        with start_mail_servers() as servers:
            yield servers
    except MissingMailServer as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{exc}: scripts/setup --test installs them")  # never skipped in CI
        pytest.skip(str(exc))


@pytest.fixture
def mail(mail_servers: MailServers, monkeypatch: pytest.MonkeyPatch) -> MailServers:
    """The servers, with the password in the environment as the config names it."""
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    return mail_servers
