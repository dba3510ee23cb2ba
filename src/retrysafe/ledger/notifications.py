"""Notifications as the ledger records them: one row per transition and channel.

A notification is an effect of its own. Its row is written before anything is
sent (``pending``), a sender takes it with a conditional update (``sending``,
until ``claimed_until``), and the outcome of the try is written after
(``sent``; back to ``pending`` with the error; ``failed`` after the last try).
The unique key (outcome, transition, event, channel) makes two processes that
notify the same transition write one row; the conditional take makes only one
of them send it. A sender that dies while sending leaves ``sending`` until its
claim expires; then the row is taken again (the message carries its ``id`` so
a receiver can tell a repeat).

Reached as ``Notifications(ledger.backend)``; :mod:`retrysafe.notify` is its
only user, and only when a ``[notify]`` channel is configured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from .backend import Backend

__all__ = ["NewNotification", "NotificationRecord", "NotificationState", "Notifications"]


class NotificationState(StrEnum):
    PENDING = "pending"
    """recorded, not sent yet (or its last try failed and it will be tried again)"""
    SENDING = "sending"
    """a process is sending it, until ``claimed_until``"""
    SENT = "sent"
    FAILED = "failed"
    """every try failed; ``retrysafe notify flush --failed`` tries again"""


_N = NotificationState


class NewNotification(NamedTuple):
    """A notification to record: which transition, which channel, what it says."""

    outcome_key: str
    job: str
    event_id: int
    event: str
    channel: str
    body: dict[str, Any]


class NotificationRecord(NamedTuple):
    id: int
    outcome_key: str
    job: str
    event_id: int
    event: str
    channel: str
    state: str
    tries: int
    last_error: str
    body: dict[str, Any]
    claimed_until: float | None
    created_at: float
    updated_at: float
    sent_at: float | None

    def to_json(self) -> dict[str, Any]:
        out = self._asdict()
        out.pop("claimed_until")
        return out


def _record(row: dict[str, Any]) -> NotificationRecord:
    return NotificationRecord(
        id=int(row["id"]), outcome_key=row["outcome_key"], job=row["job"],
        event_id=int(row["event_id"]), event=row["event"], channel=row["channel"],
        state=row["state"], tries=int(row["tries"]), last_error=row["last_error"],
        body=json.loads(row["body"]), claimed_until=row["claimed_until"],
        created_at=row["created_at"], updated_at=row["updated_at"], sent_at=row["sent_at"])


class Notifications:
    """The ``rs_notifications`` table."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def transition_id(self, key: str, state: str) -> int:
        """The history row of the outcome's latest move to ``state`` (0: none)."""
        with self.backend.transaction(write=False) as tx:
            row = tx.one("SELECT MAX(id) AS id FROM rs_events WHERE outcome_key = ? AND kind = ?"
                         " AND to_state = ?", (key, "outcome", state))
            return int(row["id"]) if row and row["id"] is not None else 0

    def record(self, new: Iterable[NewNotification]) -> list[NotificationRecord]:
        """Record each notification once (an existing row for the same transition and
        channel is kept as it is); returns the rows of these transitions that are
        still to be sent."""
        items = list(new)
        if not items:
            return []
        with self.backend.transaction() as tx:
            for n in items:
                tx.run(
                    "INSERT INTO rs_notifications (outcome_key, job, event_id, event, channel, state,"
                    " body, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (outcome_key, event_id, event, channel) DO NOTHING",
                    (n.outcome_key, n.job, n.event_id, n.event, n.channel, _N.PENDING.value,
                     json.dumps(n.body, sort_keys=True), tx.now, tx.now))
            found: list[NotificationRecord] = []
            for n in items:
                row = tx.one(
                    "SELECT * FROM rs_notifications WHERE outcome_key = ? AND event_id = ?"
                    " AND event = ? AND channel = ?", (n.outcome_key, n.event_id, n.event, n.channel))
                if row is not None and row["state"] == _N.PENDING.value:
                    found.append(_record(row))
            return found

    def due(self, *, job: str | None = None, failed: bool = False,
            limit: int = 100) -> list[NotificationRecord]:
        """Rows a sender may take now: pending, a ``sending`` whose claim expired,
        and with ``failed`` the ones that gave up; oldest first."""
        states = [_N.PENDING.value, *([_N.FAILED.value] if failed else [])]
        marks = ", ".join("?" for _ in states)
        where = f"(state IN ({marks}) OR (state = ? AND claimed_until < ?))"
        with self.backend.transaction(write=False) as tx:
            params: list[Any] = [*states, _N.SENDING.value, tx.now]
            if job is not None:
                where += " AND job = ?"
                params.append(job)
            rows = tx.rows(f"SELECT * FROM rs_notifications WHERE {where} ORDER BY id LIMIT ?",
                           (*params, limit))
            return [_record(r) for r in rows]

    def take(self, rec: NotificationRecord, claim_seconds: float,
             *, failed: bool = False) -> NotificationRecord | None:
        """Take ``rec`` for sending (one try more), or ``None`` when another process
        sent it or is sending it. The update is conditional: of two processes that
        try, exactly one gets the row."""
        states = [_N.PENDING.value, *([_N.FAILED.value] if failed else [])]
        marks = ", ".join("?" for _ in states)
        with self.backend.transaction() as tx:
            changed = tx.run(
                "UPDATE rs_notifications SET state = ?, tries = tries + 1, claimed_until = ?,"
                f" updated_at = ? WHERE id = ? AND (state IN ({marks})"
                " OR (state = ? AND claimed_until < ?))",
                (_N.SENDING.value, tx.now + claim_seconds, tx.now, rec.id, *states,
                 _N.SENDING.value, tx.now))
            if not changed:
                return None
            row = tx.one("SELECT * FROM rs_notifications WHERE id = ?", (rec.id,))
            assert row is not None
            return _record(row)

    def sent(self, rec: NotificationRecord) -> None:
        """The try that took ``rec`` delivered it."""
        self._settle(rec, _N.SENT, "", sent=True)

    def try_failed(self, rec: NotificationRecord, error: str, *, give_up: bool) -> None:
        """The try that took ``rec`` failed: pending again, or ``failed`` with ``give_up``."""
        self._settle(rec, _N.FAILED if give_up else _N.PENDING, error[:2000])

    def _settle(self, rec: NotificationRecord, state: NotificationState, error: str, *,
                sent: bool = False) -> None:
        with self.backend.transaction() as tx:
            # only the try that took the row (its tries count) may settle it
            tx.run("UPDATE rs_notifications SET state = ?, last_error = ?, claimed_until = NULL,"
                   " updated_at = ?" + (", sent_at = ?" if sent else "") +
                   " WHERE id = ? AND state = ? AND tries = ?",
                   (state.value, error, tx.now, *((tx.now,) if sent else ()), rec.id,
                    _N.SENDING.value, rec.tries))

    def listing(self, *, states: Sequence[str] = (), key: str | None = None,
                limit: int = 200) -> list[NotificationRecord]:
        """Notifications, newest first."""
        where: list[str] = []
        params: list[Any] = []
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            params += list(states)
        if key is not None:
            where.append("outcome_key = ?")
            params.append(key)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows(f"SELECT * FROM rs_notifications{clause} ORDER BY id DESC LIMIT ?",
                           (*params, limit))
            return [_record(r) for r in rows]
