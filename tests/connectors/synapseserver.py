"""A real Matrix homeserver (Synapse, SQLite storage) on loopback, for the Matrix tests.

Synapse comes from PyPI (``matrix-synapse``, the ``matrix`` extra). The
server gets a configuration written to a temporary folder (client API only,
no federation, no key servers, rate limits raised for tests), a signing key
made with ``signedjson``, and an account registered through the shared-secret
admin API. It starts once per test session (a few seconds) and each test
uses rooms of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

TOKEN_ENV = "RS_TEST_MATRIX_TOKEN"
PASSWORD_ENV = "RS_TEST_MATRIX_PASSWORD"
SERVER_NAME = "localhost"
KEY_FIELD = "retrysafe.step_key"


class MissingSynapse(Exception):
    """Synapse is not installed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Account:
    user_id: str
    password: str
    access_token: str
    device_id: str


@dataclass
class Synapse:
    """The running homeserver and a way to read it through its own client API."""

    base: str
    secret: str
    root: Path
    bot: Account
    """The account the connector sends as (its token is in ``TOKEN_ENV``)."""
    other: Account
    """A second member of every room, who also writes in it."""

    def client(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
        """A client-server API call, as ``token``'s owner (the bot by default)."""
        headers = {"Authorization": f"Bearer {token or self.bot.access_token}"}
        return httpx.request(method, f"{self.base}/_matrix/client/v3{path}", headers=headers, timeout=30,
                             **kwargs)

    def register(self, name: str) -> Account:
        """A new account, through the shared-secret admin API."""
        password = secrets.token_hex(12)
        nonce = httpx.get(f"{self.base}/_synapse/admin/v1/register", timeout=30).json()["nonce"]
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), name.encode(), password.encode(), b"notadmin"]))
        resp = httpx.post(f"{self.base}/_synapse/admin/v1/register", timeout=30, json={
            "nonce": nonce, "username": name, "password": password, "admin": False, "mac": mac.hexdigest(),
        })
        assert resp.status_code == 200, resp.text
        data = resp.json()
        return Account(data["user_id"], password, data["access_token"], data["device_id"])

    def login(self, account: Account, device_id: str) -> str:
        """A new access token for ``account`` on the device ``device_id``."""
        resp = httpx.post(f"{self.base}/_matrix/client/v3/login", timeout=30, json={
            "type": "m.login.password", "identifier": {"type": "m.id.user", "user": account.user_id},
            "password": account.password, "device_id": device_id,
        })
        assert resp.status_code == 200, resp.text
        token: str = resp.json()["access_token"]
        return token

    def new_room(self) -> str:
        """A private room of the bot's, which the other account has joined."""
        resp = self.client("POST", "/createRoom", json={"preset": "private_chat", "name": f"t-{uuid.uuid4().hex[:6]}",
                                                         "invite": [self.other.user_id]})
        assert resp.status_code == 200, resp.text
        room: str = resp.json()["room_id"]
        joined = self.client("POST", f"/rooms/{quote(room)}/join", token=self.other.access_token, json={})
        assert joined.status_code == 200, joined.text
        return room

    def messages(self, room: str) -> list[dict[str, Any]]:
        """Every m.room.message event of the room, oldest first, read through /messages."""
        events: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "b", "limit": 100}
        while True:
            resp = self.client("GET", f"/rooms/{quote(room)}/messages", params=params)
            assert resp.status_code == 200, resp.text
            data = resp.json()
            events += [e for e in data.get("chunk", []) if e.get("type") == "m.room.message"]
            if not data.get("end") or not data.get("chunk"):
                return events[::-1]
            params["from"] = data["end"]

    def keyed(self, room: str, key: str) -> list[dict[str, Any]]:
        """The messages the bot sent carrying ``key``."""
        return [e for e in self.messages(room)
                if e.get("sender") == self.bot.user_id and e.get("content", {}).get(KEY_FIELD) == key]

    def send(self, room: str, content: dict[str, Any], token: str | None = None) -> str:
        resp = self.client("PUT", f"/rooms/{quote(room)}/send/m.room.message/{uuid.uuid4().hex}",
                           token=token, json=content)
        assert resp.status_code == 200, resp.text
        event_id: str = resp.json()["event_id"]
        return event_id

    def redact(self, room: str, event_id: str) -> None:
        resp = self.client("PUT", f"/rooms/{quote(room)}/redact/{quote(event_id)}/{uuid.uuid4().hex}",
                           json={"reason": "removed by a person"})
        assert resp.status_code == 200, resp.text


def _config(root: Path, port: int, secret: str) -> str:
    limits = {"per_second": 1000, "burst_count": 1000}
    config = {
        "server_name": SERVER_NAME,
        "pid_file": str(root / "homeserver.pid"),
        "listeners": [{"port": port, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
                       "x_forwarded": False, "resources": [{"names": ["client"], "compress": False}]}],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "log_config": str(root / "log.config"),
        "media_store_path": str(root / "media"),
        "registration_shared_secret": secret,
        "report_stats": False,
        "macaroon_secret_key": secrets.token_hex(24),
        "form_secret": secrets.token_hex(24),
        "signing_key_path": str(root / "signing.key"),
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "enable_metrics": False,
        "url_preview_enabled": False,
        "presence": {"enabled": False},
        "rc_message": limits,
        "rc_login": {"address": limits, "account": limits, "failed_attempts": limits},
        "rc_joins": {"local": limits, "remote": limits},
        "rc_invites": {"per_room": limits, "per_user": limits, "per_issuer": limits},
        "rc_registration": limits,
        "rc_admin_redaction": limits,
        "rc_joins_per_room": limits,
        "rc_room_creation": limits,
        "rc_third_party_invite": limits,
        "rc_media_create": limits,
    }
    return json.dumps(config)  # JSON is YAML


def _log_config(root: Path) -> str:
    return json.dumps({
        "version": 1,
        "formatters": {"precise": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "formatter": "precise",
                              "filename": str(root / "homeserver.log")}},
        "root": {"level": "WARNING", "handlers": ["file"]},
        "disable_existing_loggers": False,
    })


@contextlib.contextmanager
def start_synapse() -> Iterator[Synapse]:
    """Configure, start and stop a homeserver in a temporary folder, with two accounts."""
    if importlib.util.find_spec("synapse") is None:
        raise MissingSynapse("Synapse is not installed (pip install 'retrysafe[matrix-server]')")
    from signedjson.key import generate_signing_key, write_signing_keys

    root = Path(tempfile.mkdtemp(prefix="rs-synapse-"))
    port, secret = free_port(), secrets.token_hex(16)
    proc: subprocess.Popen[bytes] | None = None
    try:
        (root / "homeserver.yaml").write_text(_config(root, port, secret))
        (root / "log.config").write_text(_log_config(root))
        with (root / "signing.key").open("w") as fh:
            write_signing_keys(fh, [generate_signing_key("a_test")])
        out = (root / "stdout.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "synapse.app.homeserver", "-c", str(root / "homeserver.yaml")],
            stdout=out, stderr=subprocess.STDOUT, cwd=root, env={**os.environ, "SYNAPSE_NO_TLS": "1"},
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (root / "stdout.log").read_text()[-3000:] + (root / "homeserver.log").read_text()[-3000:] \
                    if (root / "homeserver.log").exists() else (root / "stdout.log").read_text()[-3000:]
                raise RuntimeError(f"Synapse did not start: {log}")
            time.sleep(0.1)
        server = Synapse(base, secret, root, Account("", "", "", ""), Account("", "", "", ""))
        server.bot = server.register("bot")
        server.other = server.register("alice")
        yield server
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)
