"""The email connector's class (the package's docstring describes it).

It lives here, not in the package's ``__init__``, so that importing the package
for its settings (:mod:`._settings`, which a config with an email notification
channel checks on every load) imports no SMTP, IMAP, TLS or message code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from ...errors import ConnectorError
from ..base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Found, LookupResult, Payload
from ._mailbox import PENDING, SENT, Copy, FolderMissing, ImapFailure, Mailbox
from ._message import OutgoingMessage, build_message, message_id_for
from ._settings import EmailSettings, ServerSettings, parse_settings, password_from_env
from ._smtp import SendRefused, SendUnknown, send
from ._transport import ServerRefused, close_imap, open_imap

__all__ = ["EmailConnector"]

log = logging.getLogger("retrysafe.connectors.email")


class EmailConnector(ConnectorBase):
    """Sends one email per step key; finds it again in the Sent folder.

    Payload: ``to`` (list or comma-separated string), ``subject``, ``body`` or
    ``body_file``, optional ``cc`` and ``from``. Evidence: the Message-ID.

    >>> conn = EmailConnector.from_config("mail", table)        # doctest: +SKIP
    >>> conn.execute("weekly:2026-W32/send", {"to": "team@example.com",
    ...     "subject": "Week 32", "body": "..."})                 # doctest: +SKIP
    '<7824abeb...@retrysafe.invalid>'
    """

    type_name: ClassVar[str] = "email"
    effect_class = "message"

    def __init__(self, settings: EmailSettings) -> None:
        self.settings = settings
        self.name = settings.name
        # With the server filing its own copy there is no pending marker, so a
        # copy not (yet) found proves nothing.
        self.authoritative = settings.sent_copy == "client"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> EmailConnector:
        """Build from a ``[connectors.NAME]`` table (see the module docs for the keys)."""
        return cls(parse_settings(name, table))

    # --- execute ------------------------------------------------------------

    def execute(self, step_key: str, payload: Payload) -> str:
        """Send the message for ``step_key``; returns its Message-ID.

        Raises :class:`InvalidInput` for a bad payload and :class:`EffectFailed`
        when nothing was sent (unreachable server, refused login, refused
        recipients); any other exception means it may have been sent.
        """
        message = self.message_for(step_key, payload)
        smtp_password = password_from_env(self.settings.smtp, self.name)
        with self._mailbox(self.settings.imap, definite=True) as sent_box:
            folder = self.settings.sent_folder
            try:
                copies = _live(sent_box.find(folder, message.message_id, step_key))
            except FolderMissing:
                copies = []
            except ImapFailure as exc:
                raise EffectFailed(f"{self._prefix(step_key)}{exc}; nothing was sent") from None
            done = [c for c in copies if self._counts_as_sent(c)]
            if done:
                log.info("%s: %s already sent; not sending again", step_key, done[0].message_id)
                return done[0].message_id
            uids: list[str] = []
            if self.settings.sent_copy == "client":
                uids = [c.uid for c in copies] or self._file_pending(sent_box, message)
            self._send(step_key, message, smtp_password, sent_box, uids)
            if uids:
                self._mark_sent(sent_box, uids)
        return message.message_id

    def message_for(self, step_key: str, payload: Payload) -> OutgoingMessage:
        """The message ``execute`` would send; raises :class:`InvalidInput` for a bad payload."""
        return build_message(
            step_key,
            payload,
            default_sender=self.settings.sender,
            message_id_domain=self.settings.message_id_domain,
        )

    def validate(self, payload: Payload) -> None:
        """Check a payload without touching any server; raises :class:`InvalidInput`.

        Lets a caller reject bad input before it records any intent to send.
        """
        self.message_for("validate/only", payload)

    def _file_pending(self, sent_box: Mailbox, message: OutgoingMessage) -> list[str]:
        """File the pending copy: from here on a lookup can never say absent."""
        folder = self.settings.sent_folder
        try:
            uid = sent_box.append(folder, [PENDING, "\\Seen"], message.as_bytes())
            if uid is not None:
                return [uid]
            # No UIDPLUS: find the copy just filed.
            copies = _live(sent_box.find(folder, message.message_id, None, readonly=False))
        except (ImapFailure, OSError, EOFError) as exc:
            raise EffectFailed(f"could not file the pending copy: {exc}; nothing was sent") from None
        return [c.uid for c in copies]

    def _send(
        self,
        step_key: str,
        message: OutgoingMessage,
        password: str,
        sent_box: Mailbox,
        uids: list[str],
    ) -> None:
        try:
            reply = send(self.settings.smtp, password, message)
        except SendRefused as exc:
            # A definite failure must leave no pending copy, or the next lookup
            # would call a message that was never sent ambiguous.
            self._discard(sent_box, uids)
            raise EffectFailed(f"{self._prefix(step_key)}{exc}; nothing was sent") from None
        except SendUnknown as exc:
            raise ConnectorError(
                f"{self._prefix(step_key)}{exc}; it may have been sent, a lookup will check the Sent folder",
                step=step_key,
            ) from exc
        log.info("%s: sent %s (%s)", step_key, message.message_id, reply)

    def _mark_sent(self, sent_box: Mailbox, uids: list[str]) -> None:
        """Flag the copy sent. The send already happened, so failing here is only logged."""
        try:
            sent_box.store(self.settings.sent_folder, uids, add=[SENT], remove=[PENDING])
            return
        except (ImapFailure, OSError, EOFError, ConnectionError) as exc:
            first_error = exc
        # The IMAP connection may have idled out during the SMTP send: one more try.
        try:
            with self._mailbox(self.settings.imap, definite=False) as fresh:
                fresh.store(self.settings.sent_folder, uids, add=[SENT], remove=[PENDING])
        except (ImapFailure, ConnectorError, OSError) as exc:
            log.warning(
                "sent, but could not flag the Sent copy (%s; then %s); it stays pending",
                first_error,
                exc,
            )

    def _discard(self, sent_box: Mailbox, uids: list[str]) -> None:
        if not uids:
            return
        try:
            sent_box.discard(self.settings.sent_folder, uids)
        except (ImapFailure, OSError, EOFError) as exc:
            # The copy stays pending: a later lookup calls it ambiguous, which
            # is safe; a re-run's execute reuses and sends it.
            log.warning("could not remove the pending copy of an unsent message: %s", exc)

    # --- lookup ------------------------------------------------------------------

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Found (sent copy), Absent (no copy: sending never began) or Ambiguous.

        A pending copy is settled by the recipient mailbox when one is
        configured; otherwise the reason says which mailbox to check for which
        Message-ID. Raises :class:`ConnectorError` when IMAP cannot be read.
        """
        message_id = message_id_for(step_key, self.settings.message_id_domain)
        copies = self._sent_copies(step_key, message_id)
        sent = [c for c in copies if self._counts_as_sent(c)]
        if sent:
            return Found(sent[0].message_id, {"folder": self.settings.sent_folder})
        if self.settings.sent_copy == "server":
            if self._in_recipient_mailbox(message_id):
                return Found(message_id, {"folder": "recipient mailbox"})
            return ABSENT
        if not copies:
            return ABSENT
        return self._settle_pending(step_key, copies[0])

    def _settle_pending(self, step_key: str, copy: Copy) -> LookupResult:
        where = f"{self.settings.sent_folder!r} on {self.settings.imap.describe()}"
        filed = _when(copy.filed_at)
        recipients = ", ".join(sorted(copy.recipients)) or "the recipients"
        check = (
            f"check the mailbox of {recipients} for Message-ID {copy.message_id} "
            f"(subject {copy.subject!r}): if it is there the message was sent, if not it was not"
        )
        rcpt = self.settings.recipient
        if rcpt is None:
            return Ambiguous(
                f"{step_key}: a try filed the message in {where}{filed} but died before "
                f"recording whether the SMTP server took it; {check}"
            )
        if rcpt.address not in copy.recipients:
            return Ambiguous(
                f"{step_key}: pending copy in {where}{filed}; the configured recipient "
                f"mailbox {rcpt.address} is not among its recipients, so {check}"
            )
        if self._in_recipient_mailbox(copy.message_id):
            return Found(copy.message_id, {"folder": "recipient mailbox"})
        age = time.time() - copy.filed_at if copy.filed_at is not None else 0.0
        if age < rcpt.settle_seconds:
            wait = int(rcpt.settle_seconds - age) + 1
            return Ambiguous(
                f"{step_key}: pending copy in {where}{filed} is not in {rcpt.address}'s "
                f"mailbox yet, but delivery may still be under way; look again in {wait} s"
            )
        return ABSENT

    # --- verify and count ----------------------------------------------------------

    def verify(self, step_key: str, evidence: str) -> bool:
        """Does a Sent copy with Message-ID ``evidence`` marked sent (or a delivered copy) exist?"""
        copies = self._sent_copies(step_key, evidence)
        if any(c.message_id == evidence and self._counts_as_sent(c) for c in copies):
            return True
        return self._in_recipient_mailbox(evidence)

    def count(self, step_key: str) -> int:
        """Copies delivered to the recipient mailbox if one is configured, else Sent copies
        marked sent. A drill expects exactly 1."""
        message_id = message_id_for(step_key, self.settings.message_id_domain)
        rcpt = self.settings.recipient
        if rcpt is not None:
            return len(self._recipient_copies(message_id, step_key))
        return sum(1 for c in self._sent_copies(step_key, message_id) if self._counts_as_sent(c))

    # --- shared ----------------------------------------------------------------------

    def _counts_as_sent(self, copy: Copy) -> bool:
        # A server-filed copy is only ever made for a message it accepted.
        return copy.sent or (self.settings.sent_copy == "server" and not copy.discarded)

    def _sent_copies(self, step_key: str, message_id: str) -> list[Copy]:
        with self._mailbox(self.settings.imap, definite=False) as sent_box:
            try:
                return _live(sent_box.find(self.settings.sent_folder, message_id, step_key))
            except FolderMissing:
                # The folder is created by the first pending copy: no folder, no copy.
                return []
            except ImapFailure as exc:
                raise ConnectorError(f"cannot search the Sent folder: {exc}", step=step_key) from None

    def _in_recipient_mailbox(self, message_id: str) -> bool:
        if self.settings.recipient is None:
            return False
        return bool(self._recipient_copies(message_id, None))

    def _recipient_copies(self, message_id: str, step_key: str | None) -> list[Copy]:
        rcpt = self.settings.recipient
        if rcpt is None:
            return []
        found: list[Copy] = []
        with self._mailbox(rcpt.server, definite=False) as box:
            for folder in rcpt.folders:
                try:
                    found.extend(box.find(folder, message_id, step_key))
                except FolderMissing:
                    continue
                except ImapFailure as exc:
                    raise ConnectorError(f"cannot search the recipient mailbox: {exc}") from None
        return [c for c in found if "\\Deleted" not in c.flags]

    @contextmanager
    def _mailbox(self, server: ServerSettings, *, definite: bool) -> Iterator[Mailbox]:
        """A logged-in IMAP connection. ``definite``: a refusal means nothing was sent."""
        password = password_from_env(server, self.name)
        try:
            client = open_imap(server, password)
        except ServerRefused as exc:
            if definite:
                raise EffectFailed(f"{exc}; nothing was sent") from None
            raise ConnectorError(str(exc)) from None
        try:
            yield Mailbox(client, server.describe())
        finally:
            close_imap(client)

    def _prefix(self, step_key: str) -> str:
        return f"connector {self.name!r}, step {step_key}: "


def _live(copies: list[Copy]) -> list[Copy]:
    """Copies that still count: those of a definitely failed send are ignored."""
    return [c for c in copies if not c.discarded]


def _when(filed_at: float | None) -> str:
    if filed_at is None:
        return ""
    return time.strftime(" at %Y-%m-%d %H:%M:%S %z", time.localtime(filed_at))

