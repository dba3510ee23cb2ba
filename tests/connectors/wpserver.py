"""A real WordPress site on loopback, for the WordPress connector tests.

Debian's ``wordpress`` package (``/usr/share/wordpress``) is served by PHP's
built-in server (``php -S``) from a site folder in a temporary directory:

* the site folder links every file of the package except ``wp-config.php``
  and ``wp-content``; its own ``wp-config.php`` points at a database of its
  own on the MariaDB server (``RETRYSAFE_TEST_MARIADB``, default
  ``root@127.0.0.1:3306``, empty password) and sets
  ``WP_ENVIRONMENT_TYPE=local``, without which WordPress refuses application
  passwords over plain http;
* ``auto_prepend_file`` defines ``ABSPATH`` as the site folder, so the
  package's own files (reached through the links) load this configuration
  and not Debian's ``/etc/wordpress`` lookup;
* ``wp-content/mu-plugins`` holds the plugin retrysafe ships
  (``retrysafe-keys.php``) and a test-only one (``servers/wp_test_faults.php``);
* ``servers/wp_bootstrap.php`` creates the database, installs the site and an
  administrator, and prints an application password (WP-CLI is not packaged
  in Debian 12). The install runs before the server starts, so WordPress
  keeps plain permalinks (``/?p=ID``) and the REST API is at ``/?rest_route=``.

The site starts once per test session (about 2 s) and its database is dropped
at the end. Needs the ``wordpress``, ``php-cli`` and ``php-mysql`` packages
and a MariaDB (or MySQL) server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

import retrysafe.connectors

HERE = Path(__file__).resolve().parent
WORDPRESS = Path("/usr/share/wordpress")
PLUGIN = Path(next(iter(retrysafe.connectors.__path__))) / "wordpress_plugin" / "retrysafe-keys.php"
PASSWORD_ENV = "RS_TEST_WP_PASSWORD"
FAIL_AFTER_INSERT = "[fail after insert]"
"""A post title containing this makes the test site answer 500 right after inserting the post."""


class MissingWordPress(Exception):
    """A package or the database server the test site needs is not there."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Database:
    """The MariaDB server and the site's database on it, read with the ``mariadb`` client."""

    host: str
    port: int
    user: str
    password: str
    name: str

    def _client(self) -> list[str]:
        client = shutil.which("mariadb") or shutil.which("mysql")
        if client is None:
            raise MissingWordPress("no mariadb/mysql client (package mariadb-client)")
        return [client, f"--host={self.host}", f"--port={self.port}", f"--user={self.user}", "--batch",
                "--skip-column-names"]

    def query(self, sql: str, database: bool = True) -> list[list[str]]:
        """Run SQL and return the rows (tab-separated fields); fails loudly on error."""
        env = {**os.environ, "MYSQL_PWD": self.password}
        proc = subprocess.run([*self._client(), *([self.name] if database else [])], input=sql,
                              capture_output=True, text=True, env=env, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"mariadb: {proc.stderr.strip()}")
        return [line.split("\t") for line in proc.stdout.splitlines()]


def quote(value: str) -> str:
    """A SQL string literal (for the tests' own read-back queries)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass
class WordPressSite:
    """The running site: its URL, credentials, and its database read directly."""

    url: str
    user: str
    password: str
    db: Database
    root: Path
    noplugin_password: str
    """The application password of ``noplugin``, for whom the site runs as if without our plugin."""

    def config(self, **extra: Any) -> dict[str, Any]:
        """A connector table for this site (the password comes from ``PASSWORD_ENV``)."""
        return {"url": self.url, "user": self.user, "password_env": PASSWORD_ENV, **extra}

    def rest(self, method: str, route: str, **kwargs: Any) -> httpx.Response:
        """Call the REST API directly as the site's administrator (not through the connector)."""
        params = {"rest_route": route, **kwargs.pop("params", {})}
        return httpx.request(method, f"{self.url}/", params=params, auth=(self.user, self.password),
                             timeout=30, **kwargs)

    def posts_with_key(self, key: str) -> list[tuple[int, str, str]]:
        """(ID, status, slug) of every post whose ``retrysafe_key`` meta is exactly ``key``."""
        rows = self.db.query(
            "SELECT p.ID, p.post_status, p.post_name FROM wp_posts p JOIN wp_postmeta m ON m.post_id = p.ID "
            f"WHERE m.meta_key = 'retrysafe_key' AND BINARY m.meta_value = {quote(key)} ORDER BY p.ID"
        )
        return [(int(r[0]), r[1], r[2]) for r in rows]

    def posts_with_slug(self, slug: str) -> list[tuple[int, str, str]]:
        rows = self.db.query(
            f"SELECT ID, post_status, post_name FROM wp_posts WHERE post_name = {quote(slug)} ORDER BY ID"
        )
        return [(int(r[0]), r[1], r[2]) for r in rows]

    def post(self, post_id: int) -> dict[str, str] | None:
        rows = self.db.query(
            f"SELECT post_title, post_status, post_name, post_type FROM wp_posts WHERE ID = {post_id}"
        )
        if not rows:
            return None
        return dict(zip(("title", "status", "slug", "type"), rows[0], strict=True))

    def evidence(self, post_id: int) -> str:
        """The evidence the connector gives for a post: its id and link (plain permalinks)."""
        return f"{post_id} {self.url}/?p={post_id}"

    def state(self) -> list[list[str]]:
        """Every post and every key, to compare before and after."""
        return self.db.query(
            "SELECT ID, post_status, post_name, post_modified, post_title FROM wp_posts ORDER BY ID"
        ) + self.db.query("SELECT meta_id, post_id, meta_value FROM wp_postmeta "
                          "WHERE meta_key = 'retrysafe_key' ORDER BY meta_id")


def _database() -> Database:
    spec = os.environ.get("RETRYSAFE_TEST_MARIADB", "root@127.0.0.1:3306")
    user, _, hostport = spec.rpartition("@")
    host, _, port = hostport.partition(":")
    return Database(host or "127.0.0.1", int(port or 3306), user or "root",
                    os.environ.get("RETRYSAFE_TEST_MARIADB_PASSWORD", ""), f"rs_wp_{secrets.token_hex(6)}")


def _check_packages() -> None:
    if not (WORDPRESS / "wp-load.php").exists():
        raise MissingWordPress(f"WordPress is not installed at {WORDPRESS} (package wordpress)")
    php = shutil.which("php")
    if php is None:
        raise MissingWordPress("no php (packages php-cli, php-mysql)")
    modules = subprocess.run([php, "-m"], capture_output=True, text=True).stdout.split()
    if "mysqli" not in modules:
        raise MissingWordPress("PHP has no mysqli (package php-mysql)")


def _write_site(root: Path, db: Database, url: str) -> Path:
    site = root / "site"
    site.mkdir()
    for entry in WORDPRESS.iterdir():
        if entry.name not in ("wp-config.php", "wp-content"):
            (site / entry.name).symlink_to(entry)
    content = root / "wp-content"
    (content / "mu-plugins").mkdir(parents=True)
    (content / "plugins").mkdir()
    (content / "themes").symlink_to(WORDPRESS / "wp-content" / "themes")
    shutil.copy(PLUGIN, content / "mu-plugins" / "retrysafe-keys.php")
    shutil.copy(HERE / "servers" / "wp_test_faults.php", content / "mu-plugins" / "rs-test-faults.php")
    salts = "".join(
        f"define('{name}', '{secrets.token_hex(32)}');\n"
        for name in ("AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY",
                     "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT")
    )
    (site / "wp-config.php").write_text(
        "<?php\n"
        f"define('DB_NAME', '{db.name}');\n"
        f"define('DB_USER', '{db.user}');\n"
        f"define('DB_PASSWORD', {json.dumps(db.password)});\n"
        f"define('DB_HOST', '{db.host}:{db.port}');\n"
        "define('DB_CHARSET', 'utf8mb4');\n"
        "define('DB_COLLATE', '');\n"
        f"{salts}"
        "$table_prefix = 'wp_';\n"
        f"define('WP_HOME', '{url}');\n"
        f"define('WP_SITEURL', '{url}');\n"
        f"define('WP_CONTENT_DIR', '{content}');\n"
        f"define('WP_CONTENT_URL', '{url}/wp-content');\n"
        # application passwords over plain http need a local environment
        "define('WP_ENVIRONMENT_TYPE', 'local');\n"
        "define('DISABLE_WP_CRON', true);\n"
        "define('AUTOMATIC_UPDATER_DISABLED', true);\n"
        "define('WP_HTTP_BLOCK_EXTERNAL', true);\n"
        "define('WP_DEBUG', false);\n"
        "require_once ABSPATH . 'wp-settings.php';\n"
    )
    prepend = root / "prepend.php"
    prepend.write_text(f"<?php if (!defined('ABSPATH')) define('ABSPATH', '{site}/');\n")
    return prepend


@contextlib.contextmanager
def start_wordpress() -> Iterator[WordPressSite]:
    """Install a fresh site on its own database, serve it, and remove both afterwards."""
    _check_packages()
    db = _database()
    try:
        db.query("SELECT 1", database=False)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        raise MissingWordPress(f"no MariaDB server at {db.host}:{db.port} ({exc})") from None
    root = Path(tempfile.mkdtemp(prefix="rs-wp-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc: subprocess.Popen[bytes] | None = None
    try:
        prepend = _write_site(root, db, url)
        php = ["php", "-d", f"auto_prepend_file={prepend}", "-d", "display_errors=stderr"]
        env = {**os.environ, "RS_WP_DB_HOST": db.host, "RS_WP_DB_PORT": str(db.port),
               "RS_WP_DB_NAME": db.name, "RS_WP_DB_USER": db.user, "RS_WP_DB_PASSWORD": db.password}
        boot = subprocess.run([*php, str(HERE / "servers" / "wp_bootstrap.php")], capture_output=True,
                              text=True, env=env, timeout=120)
        if boot.returncode != 0:
            raise RuntimeError(f"WordPress install failed: {boot.stdout[-2000:]} {boot.stderr[-2000:]}")
        creds = json.loads(boot.stdout.strip().splitlines()[-1])
        log = (root / "php-server.log").open("wb")
        proc = subprocess.Popen(
            [*php, "-S", f"127.0.0.1:{port}", "-t", str(root / "site")],
            stdout=log, stderr=subprocess.STDOUT, cwd=root,
            # its own process group: the workers it forks are stopped with it
            env={**os.environ, "PHP_CLI_SERVER_WORKERS": "4"}, start_new_session=True,
        )
        site = WordPressSite(url, creds["user"], creds["password"], db, root, creds["other_password"])
        deadline = time.monotonic() + 30
        while True:
            try:
                if site.rest("GET", "/").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"php -S did not serve WordPress: {(root / 'php-server.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield site
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with contextlib.suppress(Exception):
            db.query(f"DROP DATABASE IF EXISTS `{db.name}`", database=False)
        shutil.rmtree(root, ignore_errors=True)
