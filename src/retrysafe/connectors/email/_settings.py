"""The ``[connectors.NAME]`` table of an email connector, parsed and checked once.

Secrets are never stored here: only the *name* of the environment variable
that holds each password. :func:`password_from_env` reads it at connect time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import ConfigError

__all__ = [
    "DEFAULT_MESSAGE_ID_DOMAIN",
    "EmailSettings",
    "RecipientMailbox",
    "ServerSettings",
    "parse_settings",
    "password_from_env",
]

Security = Literal["ssl", "starttls", "none"]
SentCopy = Literal["client", "server"]

DEFAULT_MESSAGE_ID_DOMAIN = "retrysafe.invalid"
DEFAULT_TIMEOUT = 30.0
DEFAULT_SETTLE_SECONDS = 300.0

_SECURITIES: tuple[Security, ...] = ("ssl", "starttls", "none")
_DEFAULT_PORTS: dict[str, dict[str, int]] = {
    "smtp": {"ssl": 465, "starttls": 587, "none": 25},
    "imap": {"ssl": 993, "starttls": 143, "none": 143},
}
# Keys shared by the top table and the server sub-tables: a sub-table value wins.
_SHARED_KEYS = ("username", "password_env", "timeout", "ca_file")
_TOP_KEYS = frozenset(
    {
        "type",
        "from",
        "sent_folder",
        "sent_copy",
        "message_id_domain",
        "smtp",
        "imap",
        "recipient_imap",
        *_SHARED_KEYS,
    }
)
_SERVER_KEYS = frozenset({"host", "port", "security", *_SHARED_KEYS})
_RECIPIENT_KEYS = _SERVER_KEYS | {"address", "folder", "settle_seconds"}


@dataclass(frozen=True)
class ServerSettings:
    """How to reach and log in to one SMTP or IMAP server."""

    protocol: Literal["smtp", "imap"]
    host: str
    port: int
    security: Security
    username: str
    password_env: str
    timeout: float
    ca_file: str | None

    def describe(self) -> str:
        """``imap 127.0.0.1:143 (none)``: for messages; holds no secret."""
        return f"{self.protocol} {self.host}:{self.port} ({self.security})"


@dataclass(frozen=True)
class RecipientMailbox:
    """A mailbox that receives the messages, searched to settle a pending copy."""

    server: ServerSettings
    address: str
    folders: tuple[str, ...]
    settle_seconds: float


@dataclass(frozen=True)
class EmailSettings:
    """Everything an :class:`EmailConnector` needs, checked."""

    name: str
    smtp: ServerSettings
    imap: ServerSettings
    sender: str | None
    sent_folder: str
    sent_copy: SentCopy
    message_id_domain: str
    recipient: RecipientMailbox | None


def password_from_env(server: ServerSettings, connector: str) -> str:
    """The password named by ``password_env``; a missing variable is a config error."""
    value = os.environ.get(server.password_env)
    if value is None:
        raise ConfigError(
            f"connector {connector!r}: environment variable {server.password_env} "
            f"(password for {server.describe()}) is not set"
        )
    return value


def parse_settings(name: str, table: Mapping[str, Any]) -> EmailSettings:
    """Check a ``[connectors.NAME]`` table; every mistake is a one-line :class:`ConfigError`."""
    where = f"connector {name!r}"
    _reject_unknown(where, table, _TOP_KEYS)
    shared = {key: table[key] for key in _SHARED_KEYS if key in table}
    smtp = _server(f"{where} [smtp]", "smtp", _required_table(where, table, "smtp"), shared)
    imap = _server(f"{where} [imap]", "imap", _required_table(where, table, "imap"), shared)

    sent_copy = table.get("sent_copy", "client")
    if sent_copy not in ("client", "server"):
        raise ConfigError(f'{where}: sent_copy must be "client" or "server", not {sent_copy!r}')
    domain = _string(where, table, "message_id_domain", DEFAULT_MESSAGE_ID_DOMAIN)
    if not domain or any(ch in domain for ch in "<>@ \t\r\n"):
        raise ConfigError(f"{where}: message_id_domain {domain!r} is not a domain name")

    recipient: RecipientMailbox | None = None
    if table.get("recipient_imap") is not None:
        recipient_table = _required_table(where, table, "recipient_imap")
        recipient = _recipient(f"{where} [recipient_imap]", recipient_table)

    sender = table.get("from")
    if sender is not None and not isinstance(sender, str):
        raise ConfigError(f"{where}: 'from' must be a string")
    return EmailSettings(
        name=name,
        smtp=smtp,
        imap=imap,
        sender=sender,
        sent_folder=_string(where, table, "sent_folder", "Sent"),
        sent_copy=sent_copy,
        message_id_domain=domain,
        recipient=recipient,
    )


def _recipient(where: str, table: Mapping[str, Any]) -> RecipientMailbox:
    _reject_unknown(where, table, _RECIPIENT_KEYS)
    server_table = {key: value for key, value in table.items() if key in _SERVER_KEYS}
    server = _server(where, "imap", server_table, {})
    address = table.get("address", server.username)
    # Absence in this mailbox only means something when this address was a
    # recipient, so the connector must know which address the mailbox is.
    if not isinstance(address, str) or "@" not in address:
        raise ConfigError(f"{where}: 'address' (the address this mailbox receives) is required")
    folder = table.get("folder", "INBOX")
    folders = (folder,) if isinstance(folder, str) else folder
    if (
        not isinstance(folders, list | tuple)
        or not folders
        or not all(isinstance(f, str) and f for f in folders)
    ):
        raise ConfigError(f"{where}: 'folder' must be a folder name or a list of them")
    settle = _number(where, table, "settle_seconds", DEFAULT_SETTLE_SECONDS)
    return RecipientMailbox(
        server=server, address=address.lower(), folders=tuple(folders), settle_seconds=settle
    )


def _server(
    where: str,
    protocol: Literal["smtp", "imap"],
    table: Mapping[str, Any],
    shared: Mapping[str, Any],
) -> ServerSettings:
    _reject_unknown(where, table, _SERVER_KEYS)
    merged = {**shared, **table}
    host = merged.get("host")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"{where}: 'host' is required")
    security = merged.get("security", "ssl" if protocol == "imap" else "starttls")
    if security not in _SECURITIES:
        raise ConfigError(f"{where}: security must be one of ssl, starttls, none; not {security!r}")
    port = merged.get("port", _DEFAULT_PORTS[protocol][security])
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ConfigError(f"{where}: port must be a number from 1 to 65535, not {port!r}")
    username = merged.get("username")
    if not isinstance(username, str) or not username:
        raise ConfigError(f"{where}: 'username' is required")
    password_env = merged.get("password_env")
    if not isinstance(password_env, str) or not password_env:
        raise ConfigError(
            f"{where}: 'password_env' (the environment variable holding the password) is required"
        )
    ca_file = merged.get("ca_file")
    if ca_file is not None and not isinstance(ca_file, str):
        raise ConfigError(f"{where}: 'ca_file' must be a path")
    return ServerSettings(
        protocol=protocol,
        host=host,
        port=port,
        security=security,
        username=username,
        password_env=password_env,
        timeout=_number(where, merged, "timeout", DEFAULT_TIMEOUT),
        ca_file=ca_file,
    )


def _required_table(where: str, table: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = table.get(key)
    if value is None:
        raise ConfigError(f"{where}: the [{key}] table (host, port, security) is required")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: '{key}' must be a table")
    return value


def _reject_unknown(where: str, table: Mapping[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _string(where: str, table: Mapping[str, Any], key: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return value


def _number(where: str, table: Mapping[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: '{key}' must be a number of seconds, not {value!r}")
    return float(value)
