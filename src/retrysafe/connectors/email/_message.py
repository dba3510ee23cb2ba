"""The message a step sends: payload checked, identity derived from the step key.

The same step key always gives the same ``Message-ID``; that is what lets a
later lookup recognise the message in a Sent folder or a recipient's mailbox.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate, getaddresses
from pathlib import Path
from typing import Any

from ...errors import InvalidInput
from .._config import reject_unknown

__all__ = [
    "KEY_HEADER",
    "OutgoingMessage",
    "build_message",
    "message_id_for",
]

KEY_HEADER = "X-Retrysafe-Key"
_PAYLOAD_KEYS = frozenset({"to", "cc", "subject", "body", "body_file", "from"})


@dataclass(frozen=True)
class OutgoingMessage:
    """A checked message, ready for the Sent folder and for SMTP."""

    message_id: str
    envelope_from: str
    recipients: tuple[str, ...]
    message: EmailMessage

    def as_bytes(self) -> bytes:
        """The RFC 5322 bytes, CRLF line ends, as both SMTP and IMAP APPEND want them."""
        return self.message.as_bytes(policy=self.message.policy.clone(linesep="\r\n"))


def message_id_for(step_key: str, domain: str) -> str:
    """``<hex@domain>``: the Message-ID a step key always gets.

    >>> message_id_for("weekly:2026-W32/send", "retrysafe.invalid")[:9]
    '<7824abeb'
    """
    digest = hashlib.sha256(step_key.encode("utf-8")).hexdigest()[:40]
    return f"<{digest}@{domain}>"


def build_message(
    step_key: str,
    payload: Mapping[str, Any],
    *,
    default_sender: str | None,
    message_id_domain: str,
) -> OutgoingMessage:
    """Check ``payload`` and build the message; bad input raises :class:`InvalidInput`.

    Fields: ``to`` (list or comma-separated string), ``subject``, ``body`` or
    ``body_file``, optional ``cc`` and ``from`` (overrides the config's).
    """
    reject_unknown("email payload", payload, _PAYLOAD_KEYS, error=InvalidInput, list_known=True)
    to = _addresses("to", payload.get("to"), required=True)
    cc = _addresses("cc", payload.get("cc"), required=False)
    sender_value = payload.get("from", default_sender)
    if sender_value is None:
        raise InvalidInput("email payload: 'from' is missing (set it in the payload or the config)")
    senders = _addresses("from", sender_value, required=True)
    if len(senders) != 1:
        raise InvalidInput("email payload: 'from' must be exactly one address")
    subject = payload.get("subject")
    if not isinstance(subject, str):
        raise InvalidInput("email payload: 'subject' is missing")
    if "\r" in subject or "\n" in subject:
        raise InvalidInput("email payload: 'subject' must be one line")
    body = _body(payload)

    message_id = message_id_for(step_key, message_id_domain)
    message = EmailMessage()
    message["From"] = senders[0]
    message["To"] = to
    if cc:
        message["Cc"] = cc
    message["Subject"] = subject
    message["Date"] = formatdate(localtime=True)
    message["Message-ID"] = message_id
    message[KEY_HEADER] = step_key
    # Quoted-printable keeps non-ASCII text 7-bit clean for servers without 8BITMIME.
    message.set_content(body, cte=None if body.isascii() else "quoted-printable")
    return OutgoingMessage(
        message_id=message_id,
        envelope_from=senders[0].addr_spec,
        recipients=tuple(dict.fromkeys(a.addr_spec for a in (*to, *cc))),
        message=message,
    )


def _body(payload: Mapping[str, Any]) -> str:
    body = payload.get("body")
    body_file = payload.get("body_file")
    if body is not None and body_file is not None:
        raise InvalidInput("email payload: give 'body' or 'body_file', not both")
    if body is not None:
        if not isinstance(body, str):
            raise InvalidInput("email payload: 'body' must be text")
        return body
    if body_file is None:
        raise InvalidInput("email payload: 'body' (or 'body_file') is missing")
    if not isinstance(body_file, str | Path):
        raise InvalidInput("email payload: 'body_file' must be a path")
    try:
        return Path(body_file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"email payload: body_file {str(body_file)!r} does not exist") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"email payload: body_file {str(body_file)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidInput(
            f"email payload: body_file {str(body_file)!r} cannot be read: {exc.strerror}"
        ) from None


def _addresses(field: str, value: Any, *, required: bool) -> list[Address]:
    """Parse one field into addresses; each entry must be one well-formed address."""
    if value is None or value == "" or value == []:
        if required:
            raise InvalidInput(f"email payload: '{field}' is missing")
        return []
    if isinstance(value, str):
        entries = [value]
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        entries = list(value)
    else:
        raise InvalidInput(f"email payload: '{field}' must be an address, a list or a comma string")
    result: list[Address] = []
    for entry in entries:
        # A line break in an address is an attempt to add headers, not a typo.
        if "\r" in entry or "\n" in entry:
            raise InvalidInput(f"email payload: '{field}' contains a line break")
        for display_name, addr_spec in getaddresses([entry]):
            result.append(_address(field, entry, display_name, addr_spec))
    return result


def _address(field: str, entry: str, display_name: str, addr_spec: str) -> Address:
    bad = f"email payload: malformed address in '{field}': {entry.strip()!r}"
    if not addr_spec or not addr_spec.isascii():
        raise InvalidInput(bad)
    try:
        address = Address(display_name=display_name, addr_spec=addr_spec)
    except Exception:  # the parser raises several types; any of them means "malformed"
        raise InvalidInput(bad) from None
    if not address.username or not address.domain:
        raise InvalidInput(bad)
    return address
