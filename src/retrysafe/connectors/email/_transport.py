"""Opening SMTP and IMAP connections the way the config says (ssl, starttls, none).

Failures while connecting or logging in are :class:`ServerRefused`: at that
point nothing can have been sent or filed, so callers may call them definite.
"""

from __future__ import annotations

import contextlib
import imaplib
import smtplib
import ssl

from ._settings import ServerSettings

__all__ = ["ServerRefused", "close_imap", "close_smtp", "open_imap", "open_smtp", "tls_context"]


class ServerRefused(Exception):
    """Connecting or logging in failed; nothing was sent. The message holds no secret."""


def tls_context(server: ServerSettings) -> ssl.SSLContext:
    """A verifying TLS context; ``ca_file`` adds a private CA (self-signed test servers)."""
    return ssl.create_default_context(cafile=server.ca_file)


def open_imap(server: ServerSettings, password: str) -> imaplib.IMAP4:
    """Connect, secure and log in; :class:`ServerRefused` when that is not possible."""
    client: imaplib.IMAP4 | None = None
    try:
        if server.security == "ssl":
            client = imaplib.IMAP4_SSL(
                server.host, server.port, ssl_context=tls_context(server), timeout=server.timeout
            )
        else:
            client = imaplib.IMAP4(server.host, server.port, timeout=server.timeout)
            if server.security == "starttls":
                client.starttls(ssl_context=tls_context(server))
    except (OSError, imaplib.IMAP4.error) as exc:
        _close_imap(client)
        raise ServerRefused(f"cannot connect to {server.describe()}: {_reason(exc)}") from None
    try:
        client.login(server.username, password)
    except imaplib.IMAP4.error as exc:
        _close_imap(client)
        raise ServerRefused(
            f"{server.describe()} refused the login of {server.username!r}: {_reason(exc)}"
        ) from None
    except OSError as exc:
        _close_imap(client)
        raise ServerRefused(f"{server.describe()} dropped the login: {_reason(exc)}") from None
    return client


def close_imap(client: imaplib.IMAP4 | None) -> None:
    """Log out, ignoring a connection that is already gone."""
    _close_imap(client)


def open_smtp(server: ServerSettings, password: str) -> smtplib.SMTP:
    """Connect, secure and log in; :class:`ServerRefused` when that is not possible."""
    client: smtplib.SMTP | None = None
    try:
        if server.security == "ssl":
            client = smtplib.SMTP_SSL(
                server.host, server.port, timeout=server.timeout, context=tls_context(server)
            )
        else:
            client = smtplib.SMTP(server.host, server.port, timeout=server.timeout)
        client.ehlo()
        if server.security == "starttls":
            client.starttls(context=tls_context(server))
            client.ehlo()
        client.login(server.username, password)
    except smtplib.SMTPAuthenticationError as exc:
        _close_smtp(client)
        raise ServerRefused(
            f"{server.describe()} refused the login of {server.username!r}: "
            f"{exc.smtp_code} {_text(exc.smtp_error)}"
        ) from None
    except smtplib.SMTPNotSupportedError as exc:
        _close_smtp(client)
        raise ServerRefused(
            f"{server.describe()} does not offer what is needed ({_reason(exc)}); check 'security' and 'port'"
        ) from None
    except (OSError, smtplib.SMTPException) as exc:
        _close_smtp(client)
        raise ServerRefused(f"cannot connect to {server.describe()}: {_reason(exc)}") from None
    return client


def close_smtp(client: smtplib.SMTP | None) -> None:
    """Say QUIT, ignoring a connection that is already gone."""
    _close_smtp(client)


def _close_imap(client: imaplib.IMAP4 | None) -> None:
    if client is None:
        return
    try:
        client.logout()
    except Exception:  # closing a broken connection: nothing left to do
        with contextlib.suppress(Exception):  # the socket is already gone
            client.shutdown()


def _close_smtp(client: smtplib.SMTP | None) -> None:
    if client is None:
        return
    try:
        client.quit()
    except Exception:  # closing a broken connection: nothing left to do
        client.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_text(exc.smtp_error)}"
    text = str(exc) or type(exc).__name__
    if text.startswith("b'") or text.startswith('b"'):
        text = text[2:-1]
    return text


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
