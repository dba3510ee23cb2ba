"""IMAP operations on one folder: find the copies of a message, file, flag, discard.

A copy is found by its ``Message-ID`` (or ``X-Retrysafe-Key``) header and then
compared exactly, because IMAP ``SEARCH HEADER`` matches substrings: the key
``job/send`` must not match the copy of ``job/send/item-1``.
"""

from __future__ import annotations

import imaplib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email import policy
from email.parser import BytesHeaderParser
from email.utils import getaddresses

from ._message import KEY_HEADER

__all__ = [
    "FAILED",
    "PENDING",
    "SENT",
    "Copy",
    "FolderMissing",
    "ImapFailure",
    "Mailbox",
]

PENDING = "$RetrysafePending"
"""Filed before the SMTP send: the send may or may not have happened."""
SENT = "$RetrysafeSent"
"""The SMTP server accepted the message."""
FAILED = "$RetrysafeFailed"
"""The send failed definitely; the copy is only left if the server cannot expunge it."""

_FETCH_ITEMS = (
    f"(UID FLAGS INTERNALDATE BODY.PEEK[HEADER.FIELDS (MESSAGE-ID {KEY_HEADER.upper()} TO CC SUBJECT)])"
)
_UID = re.compile(rb"\bUID (\d+)")
_APPENDUID = re.compile(rb"\[APPENDUID \d+ (\d+)\]")


class ImapFailure(Exception):
    """The IMAP server answered NO/BAD or the connection broke; holds no secret."""


class FolderMissing(ImapFailure):
    """The folder does not exist."""


@dataclass(frozen=True)
class Copy:
    """One message in a folder that carries the step's identity."""

    uid: str
    flags: frozenset[str]
    message_id: str
    step_key: str | None
    recipients: frozenset[str]
    subject: str
    filed_at: float | None
    """When the server filed it (INTERNALDATE), seconds since the epoch."""

    @property
    def sent(self) -> bool:
        return SENT in self.flags

    @property
    def discarded(self) -> bool:
        return FAILED in self.flags or "\\Deleted" in self.flags


class Mailbox:
    """Operations on the folders of one logged-in IMAP connection."""

    def __init__(self, client: imaplib.IMAP4, describe: str) -> None:
        self.client = client
        self.describe = describe

    def find(
        self, folder: str, message_id: str, step_key: str | None, *, readonly: bool = True
    ) -> list[Copy]:
        """Copies in ``folder`` whose Message-ID (or key header) is exactly this one."""
        self._select(folder, readonly=readonly)
        criteria = ["HEADER", "Message-ID", _quote(message_id)]
        # The key header catches a copy filed under another message_id_domain;
        # a non-ASCII key would need CHARSET, which not every server offers.
        if step_key is not None and step_key.isascii():
            criteria = ["OR", *criteria, "HEADER", KEY_HEADER, _quote(step_key)]
        data = self._ok("SEARCH", self.client.uid("SEARCH", *criteria))
        uids = b" ".join(part for part in data if isinstance(part, bytes)).split()
        if not uids:
            return []
        uid_set = b",".join(uids).decode()
        fetched = self._ok("FETCH", self.client.uid("FETCH", uid_set, _FETCH_ITEMS))
        copies = []
        for item in fetched:
            if not isinstance(item, tuple):
                continue
            copy = _parse_copy(item[0], item[1])
            if copy is None:
                continue
            if copy.message_id == message_id or (step_key is not None and copy.step_key == step_key):
                copies.append(copy)
        return copies

    def append(self, folder: str, flags: list[str], data: bytes) -> str | None:
        """File ``data`` in ``folder`` with ``flags``; the new UID when the server says it."""
        flag_list = "(" + " ".join(flags) + ")"
        try:
            typ, response = self.client.append(_mailbox(folder), flag_list, None, data)
        except imaplib.IMAP4.error as exc:
            typ, response = "NO", [str(exc).encode()]
        if typ != "OK" and b"TRYCREATE" in b" ".join(r for r in response if isinstance(r, bytes)):
            self._ok("CREATE", self.client.create(_mailbox(folder)))
            typ, response = self.client.append(_mailbox(folder), flag_list, None, data)
        self._ok("APPEND", (typ, response))
        for part in response:
            if isinstance(part, bytes) and (match := _APPENDUID.search(part)):
                return match.group(1).decode()
        return None

    def store(self, folder: str, uids: list[str], *, add: list[str], remove: list[str]) -> None:
        """Add, then remove flags: a crash in between leaves both flags, never neither."""
        if not uids:
            return
        self._select(folder, readonly=False)
        uid_set = ",".join(uids)
        if add:
            self._ok("STORE", self.client.uid("STORE", uid_set, "+FLAGS", _flags(add)))
        if remove:
            self._ok("STORE", self.client.uid("STORE", uid_set, "-FLAGS", _flags(remove)))

    def discard(self, folder: str, uids: list[str]) -> None:
        """Remove copies of a message that was definitely not sent."""
        self.store(folder, uids, add=[FAILED, "\\Deleted"], remove=[PENDING])
        # Plain EXPUNGE would also remove the user's own deleted messages, so
        # only UID EXPUNGE is used; without UIDPLUS the copy stays flagged
        # failed+deleted, which lookups ignore.
        if "UIDPLUS" in self._capabilities():
            self._ok("EXPUNGE", self.client.uid("EXPUNGE", ",".join(uids)))

    def _capabilities(self) -> set[str]:
        # imaplib keeps the capabilities from before login; servers add some after.
        typ, data = self.client.capability()
        if typ != "OK" or not data or not isinstance(data[0], bytes):
            return set(self.client.capabilities)
        return set(data[0].decode("ascii", "replace").upper().split())

    def _select(self, folder: str, *, readonly: bool) -> None:
        try:
            typ, data = self.client.select(_mailbox(folder), readonly=readonly)
        except imaplib.IMAP4.error as exc:
            typ, data = "NO", [str(exc).encode()]
        if typ == "OK":
            return
        try:
            typ_list, listed = self.client.list('""', _mailbox(folder))
        except imaplib.IMAP4.error:
            typ_list, listed = "NO", []
        if typ_list == "OK" and not any(listed):
            raise FolderMissing(f"{self.describe}: folder {folder!r} does not exist")
        raise ImapFailure(f"{self.describe}: cannot open folder {folder!r}: {_response(data)}")

    def _ok(self, command: str, result: tuple[str, Sequence[object]]) -> Sequence[object]:
        typ, data = result
        if typ != "OK":
            raise ImapFailure(f"{self.describe}: {command} failed: {_response(data)}")
        return data


def _parse_copy(meta: bytes, header_bytes: bytes) -> Copy | None:
    uid = _UID.search(meta)
    if uid is None:
        return None
    headers = BytesHeaderParser(policy=policy.default).parsebytes(header_bytes)
    message_id = str(headers.get("Message-ID", "")).strip()
    key = headers.get(KEY_HEADER)
    recipients = frozenset(
        addr.lower()
        for _, addr in getaddresses(
            [str(v) for v in headers.get_all("To", [])] + [str(v) for v in headers.get_all("Cc", [])]
        )
        if addr
    )
    filed = imaplib.Internaldate2tuple(meta)
    return Copy(
        uid=uid.group(1).decode(),
        flags=frozenset(flag.decode() for flag in imaplib.ParseFlags(meta)),
        message_id=message_id,
        step_key=str(key).strip() if key is not None else None,
        recipients=recipients,
        subject=str(headers.get("Subject", "")),
        filed_at=time.mktime(filed) if filed else None,
    )


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _mailbox(folder: str) -> str:
    # imaplib sends names as given; quote every name so spaces and specials survive.
    return _quote(folder)


def _flags(flags: list[str]) -> str:
    return "(" + " ".join(flags) + ")"


def _response(data: Sequence[object]) -> str:
    parts = [p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p) for p in data]
    return " ".join(parts) or "no reason given"
