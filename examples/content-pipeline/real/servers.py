#!/usr/bin/env python3
"""The pipeline's three systems as real servers on loopback, started the way the
connector tests start them (``tests/connectors/``):

* **WordPress**: Debian's ``wordpress`` package on ``php -S``, a database of
  its own on the local MariaDB, the must-use plugin retrysafe ships
  (``wpserver.py``);
* **Google Sheets**: the contract stand-in of the Sheets v4 values API and
  Google's token endpoint (``servers/sheets_api.py``), reached through
  ``gspread`` with a service-account key made here;
* **Matrix**: a Synapse homeserver with SQLite storage (``synapseserver.py``)
  and a room of the bot's.

    python3 servers.py serve SERVERS     # runs until stopped (Ctrl-C, SIGTERM)
    python3 servers.py config SERVERS    # prints retrysafe.toml for these servers
    python3 servers.py count SERVERS     # effects per step key in each system, as JSON

``serve`` writes ``SERVERS/servers.json`` (addresses and secrets, mode 0600)
once everything answers, and ``SERVERS/env`` (the two secrets the config names,
to source). ``count`` reads each system as it is: WordPress's database, the
sheet through the values API, the room through the client API.

Needs the Python that runs retrysafe with its test extras (``gspread``,
``matrix-synapse``) and the packages ``wordpress``, ``php-cli``,
``php-mysql``, a MariaDB server (``RETRYSAFE_TEST_MARIADB``, as the tests).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent
REPO = EXAMPLE.parents[1]
HELPERS = REPO / "tests" / "connectors"
for _path in (HELPERS, HELPERS / "servers"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

SERVICE_EMAIL = "pipeline@content-example.iam.gserviceaccount.com"
COLUMNS = ["occurrence", "title", "post", "retrysafe_key"]
WP_PASSWORD_ENV = "CONTENT_WP_PASSWORD"
MATRIX_TOKEN_ENV = "CONTENT_MATRIX_TOKEN"
SYSTEMS = ("cms", "sheet", "chat")


class ServersError(Exception):
    """The servers cannot start, or SERVERS holds no running ones."""


# --- the Sheets stand-in ------------------------------------------------------

def _key_pair() -> tuple[str, str]:
    """A service account's RSA key: (private PEM, public PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@contextlib.contextmanager
def sheets_standin(folder: Path) -> Iterator[dict[str, str]]:
    """The Sheets stand-in, its worksheet "Log" headed by COLUMNS, and a key file for it."""
    import sheets_api
    import standin

    private, public = _key_pair()
    app = sheets_api.SheetsApp(public, SERVICE_EMAIL)
    app.rows = [list(COLUMNS)]
    with standin.serve(app) as base:
        key_file = folder / "service-account.json"
        key_file.write_text(json.dumps({
            "type": "service_account", "project_id": "content-example",
            "private_key_id": "content-example-1", "private_key": private,
            "client_email": SERVICE_EMAIL, "client_id": "100000000000000000002",
            "token_uri": f"{base}/token",
        }))
        key_file.chmod(0o600)
        yield {"api": base, "spreadsheet_id": sheets_api.SPREADSHEET_ID,
               "service_account": str(key_file)}


# --- what a run of servers is ---------------------------------------------------

def describe(site: Any, synapse: Any, room: str, sheets: dict[str, str]) -> dict[str, Any]:
    """The description ``config`` and ``count`` read: addresses, secrets, the database."""
    return {
        "wordpress": {"url": site.url, "user": site.user, "password": site.password,
                      "db": {"host": site.db.host, "port": site.db.port, "user": site.db.user,
                             "password": site.db.password, "name": site.db.name}},
        "sheets": sheets,
        "matrix": {"url": synapse.base, "room": room, "user_id": synapse.bot.user_id,
                   "token": synapse.bot.access_token, "device_id": synapse.bot.device_id},
    }


def write(folder: Path, servers: dict[str, Any]) -> None:
    """SERVERS/env, then SERVERS/servers.json (its appearance says: ready)."""
    env = folder / "env"
    env.write_text(f"export {WP_PASSWORD_ENV}={shlex.quote(servers['wordpress']['password'])}\n"
                   f"export {MATRIX_TOKEN_ENV}={shlex.quote(servers['matrix']['token'])}\n")
    env.chmod(0o600)
    tmp = folder / ".servers.json"
    tmp.write_text(json.dumps(servers, indent=1))
    tmp.chmod(0o600)
    tmp.replace(folder / "servers.json")


def secrets_env(servers: dict[str, Any]) -> dict[str, str]:
    """The environment variables the connectors read their secrets from."""
    return {WP_PASSWORD_ENV: servers["wordpress"]["password"],
            MATRIX_TOKEN_ENV: servers["matrix"]["token"]}


def load(folder: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((folder / "servers.json").read_text())
    except FileNotFoundError:
        raise ServersError(f"no servers.json in {folder}: start them with 'servers.py serve'") from None
    return data


# --- the three commands -----------------------------------------------------------

def serve(folder: Path) -> None:
    """Start WordPress, the Sheets stand-in and Synapse; keep them until stopped."""
    import synapseserver
    import wpserver

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "servers.json").unlink(missing_ok=True)
    # SIGTERM unwinds like Ctrl-C, so every server is stopped and the database dropped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with contextlib.ExitStack() as stack:
            site = stack.enter_context(wpserver.start_wordpress())
            synapse = stack.enter_context(synapseserver.start_synapse())
            sheets = stack.enter_context(sheets_standin(folder))
            for name in ("servers.json", "env"):
                stack.callback((folder / name).unlink, missing_ok=True)
            write(folder, describe(site, synapse, synapse.new_room(), sheets))
            print(f"servers: WordPress {site.url}, Sheets {sheets['api']}, Matrix {synapse.base}",
                  file=sys.stderr, flush=True)
            signal.pause()
    except (wpserver.MissingWordPress, synapseserver.MissingSynapse) as exc:
        raise ServersError(str(exc)) from None
    except KeyboardInterrupt:
        pass


def config(folder: Path) -> str:
    """retrysafe.toml: the job of ../retrysafe.toml as it is, connectors on these servers."""
    servers = load(folder)
    loopback = (EXAMPLE / "retrysafe.toml").read_text()
    job = loopback[loopback.index("[jobs.content-pipeline]"):loopback.index("[connectors.")]
    values = {
        "@WP_URL@": servers["wordpress"]["url"], "@WP_USER@": servers["wordpress"]["user"],
        "@SHEET_ID@": servers["sheets"]["spreadsheet_id"],
        "@SERVICE_ACCOUNT@": servers["sheets"]["service_account"],
        "@SHEETS_API@": servers["sheets"]["api"],
        "@MATRIX_URL@": servers["matrix"]["url"], "@MATRIX_ROOM@": servers["matrix"]["room"],
    }
    connectors = (HERE / "connectors.toml").read_text()
    for name, value in values.items():
        connectors = connectors.replace(name, value)
    return ("# The content pipeline on real servers (written by real/servers.py config).\n\n"
            + job + connectors)


def _count_wordpress(servers: dict[str, Any]) -> dict[str, int]:
    import wpserver

    db = wpserver.Database(**servers["wordpress"]["db"])
    out: dict[str, int] = {}
    for (key,) in db.query("SELECT m.meta_value FROM wp_postmeta m JOIN wp_posts p ON p.ID = m.post_id "
                           "WHERE m.meta_key = 'retrysafe_key'"):
        out[key] = out.get(key, 0) + 1
    return out


def _count_sheet(servers: dict[str, Any]) -> dict[str, int]:
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.service_account import Credentials

    sheets = servers["sheets"]
    creds = Credentials.from_service_account_file(
        sheets["service_account"], scopes=["https://www.googleapis.com/auth/spreadsheets"])
    resp = AuthorizedSession(creds).get(
        f"{sheets['api']}/v4/spreadsheets/{sheets['spreadsheet_id']}/values/Log!A1:Z", timeout=30)
    resp.raise_for_status()
    header, *rows = resp.json().get("values", [[]])
    column = header.index("retrysafe_key")
    out: dict[str, int] = {}
    for row in rows:
        if column < len(row) and row[column]:
            out[row[column]] = out.get(row[column], 0) + 1
    return out


def _count_chat(servers: dict[str, Any]) -> dict[str, int]:
    import synapseserver

    matrix = servers["matrix"]
    bot = synapseserver.Account(matrix["user_id"], "", matrix["token"], matrix["device_id"])
    server = synapseserver.Synapse(matrix["url"], "", Path(), bot, bot)
    out: dict[str, int] = {}
    for event in server.messages(matrix["room"]):
        key = event.get("content", {}).get(synapseserver.KEY_FIELD)
        if event.get("sender") == bot.user_id and key:
            out[key] = out.get(key, 0) + 1
    return out


def count(folder: Path) -> dict[str, dict[str, int]]:
    """How many posts, rows and messages carry each step key, read from the systems."""
    servers = load(folder)
    return {"cms": _count_wordpress(servers), "sheet": _count_sheet(servers),
            "chat": _count_chat(servers)}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("serve", "config", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[2]).absolute()
    try:
        if argv[1] == "serve":
            serve(folder)
        elif argv[1] == "config":
            sys.stdout.write(config(folder))
        else:
            print(json.dumps(count(folder), indent=1, sort_keys=True))
    except ServersError as exc:
        print(f"servers.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
