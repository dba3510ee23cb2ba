"""One SMTP transaction, in stages, so a failure says whether anything may have been sent.

Until the server answers the end of DATA with 250 it has not taken the
message: every refusal before that point is definite (:class:`SendRefused`).
A connection lost or a timeout while the data is in flight or the final reply
is awaited is not (:class:`SendUnknown`): the server may have queued it.
"""

from __future__ import annotations

import smtplib

from ._message import OutgoingMessage
from ._settings import ServerSettings
from ._transport import ServerRefused, close_smtp, open_smtp

__all__ = ["SendRefused", "SendUnknown", "send"]


class SendRefused(Exception):
    """The server did not take the message; nothing was sent."""


class SendUnknown(Exception):
    """The message may have been taken; only a lookup can tell."""


def send(server: ServerSettings, password: str, message: OutgoingMessage) -> str:
    """Send ``message``; returns the server's final reply (often its queue id)."""
    try:
        client = open_smtp(server, password)
    except ServerRefused as exc:
        raise SendRefused(str(exc)) from None
    try:
        _envelope(server, client, message)
        return _data(server, client, message)
    finally:
        close_smtp(client)


def _envelope(server: ServerSettings, client: smtplib.SMTP, message: OutgoingMessage) -> None:
    """MAIL FROM and RCPT TO. All recipients must be accepted: a partial send is not offered."""
    where = server.describe()
    try:
        code, reply = client.mail(message.envelope_from)
        if code != 250:
            raise SendRefused(f"{where} refused sender {message.envelope_from}: {code} {_text(reply)}")
        refused = []
        for recipient in message.recipients:
            code, reply = client.rcpt(recipient)
            if code not in (250, 251):
                refused.append(f"{recipient} ({code} {_text(reply)})")
        if refused:
            client.rset()
            raise SendRefused(f"{where} refused recipient(s) {', '.join(refused)}")
    except (OSError, smtplib.SMTPException) as exc:
        # No DATA yet: the server holds no message it could deliver.
        raise SendRefused(f"{where} failed before the message was sent: {_reason(exc)}") from None


def _data(server: ServerSettings, client: smtplib.SMTP, message: OutgoingMessage) -> str:
    where = server.describe()
    try:
        code, reply = client.data(message.as_bytes())
    except smtplib.SMTPDataError as exc:
        # Raised only when DATA itself is refused (not 354): nothing was taken.
        raise SendRefused(f"{where} refused the message: {_reason(exc)}") from None
    except (OSError, smtplib.SMTPException) as exc:
        raise SendUnknown(
            f"{where} connection failed while sending {message.message_id}: {_reason(exc)}"
        ) from exc
    if code != 250:
        raise SendRefused(f"{where} rejected the message: {code} {_text(reply)}")
    return _text(reply)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_text(exc.smtp_error)}"
    return str(exc) or type(exc).__name__


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
