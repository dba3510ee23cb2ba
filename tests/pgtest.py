"""How the tests find PostgreSQL, and the throwaway servers they own.

Order of search (:func:`pg_server_dsn`):

1. ``RETRYSAFE_TEST_PG_DSN``: a URL of a server where the user may create
   databases (``postgresql://user@host:5432/postgres``);
2. a server on ``127.0.0.1:5432`` with trust authentication (user
   ``postgres``, database ``test``), as a developer machine or a CI service
   container runs it;
3. a throwaway server from the ``pgserver`` wheel, started once per test run
   and deleted at exit.

``RETRYSAFE_TEST_PG=pgserver`` skips the first two (to test the fallback);
``RETRYSAFE_TEST_PG=off`` disables PostgreSQL tests. Every test run works in
its own database (:func:`fresh_database`), dropped at the end. Under
``CI=true`` a missing server fails the run instead of skipping tests.

Use from a conftest (``tests/`` is on ``sys.path`` when pytest imports
``tests/conftest.py``)::

    from pgtest import pg_admin_dsn, pg_dsn  # noqa: F401  (fixtures)
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

__all__ = [
    "LOCAL_DSN",
    "ThrowawayServer",
    "absent",
    "fresh_database",
    "pg_admin_dsn",
    "pg_dsn",
    "pg_server_dsn",
    "require_server",
    "with_database",
]

ENV_DSN = "RETRYSAFE_TEST_PG_DSN"
ENV_MODE = "RETRYSAFE_TEST_PG"
LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"

_found: tuple[str | None, str] | None = None  # (dsn, why not) once searched
_keep: list[object] = []  # the pgserver handle lives as long as the test run


def _reachable(dsn: str, timeout: int = 3) -> str | None:
    """``None`` if ``dsn`` accepts a connection, else the one-line reason."""
    try:
        with psycopg.connect(dsn, connect_timeout=timeout, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())
    return None


def _start_pgserver() -> str:
    import pgserver  # the fallback only: imported when needed

    folder = Path(tempfile.mkdtemp(prefix="rs-pgserver-"))
    folder.chmod(0o755)  # when run as root, pgserver's own user must enter it
    # registered before pgserver registers its own stop-and-delete, so it runs after it
    atexit.register(shutil.rmtree, folder, True)
    server = pgserver.get_server(folder / "data", cleanup_mode="delete")
    _keep.append(server)
    return str(server.get_uri())


def pg_server_dsn() -> str | None:
    """A URL of a server where databases may be created, or ``None`` (see :func:`why_no_server`)."""
    global _found
    if _found is not None:
        return _found[0]
    mode = os.environ.get(ENV_MODE, "auto").lower()
    reasons: list[str] = []
    dsn: str | None = None
    if mode == "off":
        reasons.append(f"{ENV_MODE}=off")
    else:
        if mode != "pgserver":
            env = os.environ.get(ENV_DSN)
            if env:
                why = _reachable(env)
                if why is None:
                    dsn = env
                else:
                    reasons.append(f"{ENV_DSN} is not reachable: {why}")
            if dsn is None and not env:
                why = _reachable(LOCAL_DSN, timeout=2)
                if why is None:
                    dsn = LOCAL_DSN
                else:
                    reasons.append(f"no server on 127.0.0.1:5432 ({why})")
        if dsn is None and (mode == "pgserver" or not os.environ.get(ENV_DSN)):
            try:
                dsn = _start_pgserver()
            except Exception as exc:  # noqa: BLE001 - any failure means "no server"
                reasons.append(f"pgserver could not start one ({type(exc).__name__}: {exc})")
    _found = (dsn, "; ".join(reasons))
    return dsn


def why_no_server() -> str:
    pg_server_dsn()
    assert _found is not None
    return _found[1] or "no PostgreSQL server"


def with_database(dsn: str, dbname: str) -> str:
    """``dsn`` (a URL or ``key=value`` conninfo) as a URL naming database ``dbname``."""
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(dsn)
        return urlunsplit((parts.scheme, parts.netloc, "/" + quote(dbname), parts.query, ""))
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", "")
    auth = user + (":" + quote(password, safe="") if password else "")
    host = params.pop("host", "")
    port = params.pop("port", "")
    params.pop("dbname", None)
    netloc = (auth + "@" if auth else "") + (quote(host, safe="") if host.startswith("/")
                                              else host) + (":" + port if port else "")
    query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in params.items())
    return urlunsplit(("postgresql", netloc, "/" + quote(dbname), query, ""))


@contextlib.contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """Create database ``rs_test_<random>``, yield its URL, drop it at the end."""
    name = f"rs_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(admin_dsn, name)
    finally:
        # FORCE: processes a test killed may still hold sessions
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def absent(reason: str) -> None:
    """Skip the test, or fail it under ``CI=true`` where PostgreSQL must be present."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests must run in CI, but: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


def require_server() -> str:
    """:func:`pg_server_dsn`, or skip the test (fail it under ``CI=true``)."""
    dsn = pg_server_dsn()
    if dsn is None:
        absent(why_no_server())
    assert dsn is not None
    return dsn


# Both fixtures stand alone, so a conftest may import either without the other.


@pytest.fixture(scope="session")
def pg_admin_dsn() -> str:
    """A server URL where the test may create databases (skip, or fail under CI)."""
    return require_server()


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """The URL of a database of this test run's own, dropped at the end."""
    with fresh_database(require_server()) as dsn:
        yield dsn


# --- a server a test may stop and start ---------------------------------------------


def _bin_dir() -> Path | None:
    """PostgreSQL server binaries: the distribution's newest, else the pgserver wheel's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:
        return None
    return Path(POSTGRES_BIN_PATH) if (Path(POSTGRES_BIN_PATH) / "initdb").exists() else None


def _run_as() -> str | None:
    """PostgreSQL refuses to run as root: the user to run it as, if we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    from pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayServer:
    """A PostgreSQL server in a temporary folder, on a loopback TCP port, that a
    test owns: it may stop, crash and start it. ``close`` deletes everything.

    With ``password_auth`` TCP connections must give a password (SCRAM); the
    superuser still connects without one through :attr:`admin_dsn` (the
    server's Unix socket).
    """

    def __init__(self, *, password_auth: bool = False) -> None:
        bindir = _bin_dir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.bindir = bindir
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="rs-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.port = _free_port()
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        host_auth = "scram-sha-256" if password_auth else "trust"
        self._pg(["initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  f"--auth-host={host_auth}", "--encoding=UTF8", "--no-sync"])
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.admin_dsn = (f"postgresql://postgres@/postgres?host={quote(str(self.root))}"
                          f"&port={self.port}")

    def _pg(self, argv: list[str], timeout: float = 60) -> None:
        argv = [str(self.bindir / argv[0]), *argv[1:]]
        proc = subprocess.run(argv, user=self.user, cwd=self.root, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: "
                               f"{proc.stderr.strip() or proc.stdout.strip()}")

    def start(self) -> None:
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c max_connections=200"
                " -c fsync=on -c synchronous_commit=on")
        self._pg(["pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-t", "60", "-o", opts, "start"])
        deadline = time.monotonic() + 30
        while _reachable(self.admin_dsn, timeout=2) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not come up")
            time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        """``fast`` ends sessions cleanly; ``immediate`` is a crash (recovery on start)."""
        self._pg(["pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop"])

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(Exception):
                self.stop("immediate")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def empty_ledger_tables(dsn: str) -> None:
    """Empty every ledger table of the database at ``dsn`` but the migration record and
    the history's words (written by a migration: ``rs_words``).

    The ``rs_`` tables are read from the database, so tables added by later
    migrations are emptied too; ``RESTART IDENTITY`` makes history ids replay.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND left(tablename, 3) = 'rs_'"
            " AND tablename NOT IN ('rs_schema', 'rs_words')"
            " ORDER BY tablename").fetchall()]
        if tables:
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in tables)))
