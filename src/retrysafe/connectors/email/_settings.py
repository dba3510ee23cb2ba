"""The ``[connectors.NAME]`` table of an email connector, parsed and checked once.

Secrets are never stored here: only the *name* of the environment variable
that holds each password. :func:`password_from_env` reads it at connect time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import ConfigError
from .._config import env_secret, number, optional_str, reject_unknown, required_str, string, sub_table

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
    return env_secret(f"connector {connector!r}", server.password_env, f"password for {server.describe()}")


def parse_settings(name: str, table: Mapping[str, Any]) -> EmailSettings:
    """Check a ``[connectors.NAME]`` table; every mistake is a one-line :class:`ConfigError`."""
    where = f"connector {name!r}"
    reject_unknown(where, table, _TOP_KEYS, noun="key")
    shared = {key: table[key] for key in _SHARED_KEYS if key in table}
    smtp = _server(f"{where} [smtp]", "smtp", _required_table(where, table, "smtp"), shared)
    imap = _server(f"{where} [imap]", "imap", _required_table(where, table, "imap"), shared)

    sent_copy = table.get("sent_copy", "client")
    if sent_copy not in ("client", "server"):
        raise ConfigError(f'{where}: sent_copy must be "client" or "server", not {sent_copy!r}')
    domain = string(where, table, "message_id_domain", DEFAULT_MESSAGE_ID_DOMAIN)
    if not domain or any(ch in domain for ch in "<>@ \t\r\n"):
        raise ConfigError(f"{where}: message_id_domain {domain!r} is not a domain name")

    recipient: RecipientMailbox | None = None
    if table.get("recipient_imap") is not None:
        recipient_table = _required_table(where, table, "recipient_imap")
        recipient = _recipient(f"{where} [recipient_imap]", recipient_table)

    sender = optional_str(where, table, "from")
    return EmailSettings(
        name=name,
        smtp=smtp,
        imap=imap,
        sender=sender,
        sent_folder=string(where, table, "sent_folder", "Sent"),
        sent_copy=sent_copy,
        message_id_domain=domain,
        recipient=recipient,
    )


def _recipient(where: str, table: Mapping[str, Any]) -> RecipientMailbox:
    reject_unknown(where, table, _RECIPIENT_KEYS, noun="key")
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
    settle = number(where, table, "settle_seconds", DEFAULT_SETTLE_SECONDS, unit="seconds")
    return RecipientMailbox(
        server=server, address=address.lower(), folders=tuple(folders), settle_seconds=settle
    )


def _server(
    where: str,
    protocol: Literal["smtp", "imap"],
    table: Mapping[str, Any],
    shared: Mapping[str, Any],
) -> ServerSettings:
    reject_unknown(where, table, _SERVER_KEYS, noun="key")
    merged = {**shared, **table}
    host = required_str(where, merged, "host")
    security = merged.get("security", "ssl" if protocol == "imap" else "starttls")
    if security not in _SECURITIES:
        raise ConfigError(f"{where}: security must be one of ssl, starttls, none; not {security!r}")
    port = merged.get("port", _DEFAULT_PORTS[protocol][security])
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ConfigError(f"{where}: port must be a number from 1 to 65535, not {port!r}")
    username = required_str(where, merged, "username")
    password_env = required_str(
        where, merged, "password_env", "the environment variable holding the password"
    )
    return ServerSettings(
        protocol=protocol,
        host=host,
        port=port,
        security=security,
        username=username,
        password_env=password_env,
        timeout=number(where, merged, "timeout", DEFAULT_TIMEOUT, unit="seconds"),
        ca_file=optional_str(where, merged, "ca_file"),
    )


def _required_table(where: str, table: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = sub_table(where, table, key)
    if value is None:
        raise ConfigError(f"{where}: the [{key}] table (host, port, security) is required")
    return value
