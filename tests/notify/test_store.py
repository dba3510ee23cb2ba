"""The ledger's record of notifications, on SQLite and PostgreSQL: one row per
transition and channel, taken by one sender at a time, settled by that sender."""

from __future__ import annotations

from retrysafe.ledger import open_ledger
from retrysafe.ledger.notifications import NewNotification, Notifications


def new(channel: str = "hook", event_id: int = 7) -> NewNotification:
    return NewNotification("pay:1", "pay", event_id, "blocked", channel, {"key": "pay:1"})


def test_a_transition_is_recorded_once_per_channel(ledger_url: str) -> None:
    """Recording the same transition twice (two processes) leaves one row per channel."""
    with open_ledger(ledger_url) as ledger:
        store = Notifications(ledger.backend)
        first = store.record([new("a"), new("b")])
        again = store.record([new("a"), new("b")])
        assert [r.id for r in first] == [r.id for r in again]
        assert len(store.listing()) == 2
        store.record([new("a", event_id=8)])  # a later transition is a new notification
        assert len(store.listing()) == 3


def test_one_sender_takes_a_row_and_only_it_settles_it(ledger_url: str) -> None:
    """Of two senders (two ledger connections), one takes the row; a failed try puts
    it back as pending, a sent one is never due again; give_up makes it failed."""
    with open_ledger(ledger_url) as one, open_ledger(ledger_url) as two:
        a, b = Notifications(one.backend), Notifications(two.backend)
        [rec] = a.record([new()])
        taken = a.take(rec, 60)
        assert taken is not None and taken.state == "sending" and taken.tries == 1
        assert b.take(rec, 60) is None
        assert b.due() == []
        a.try_failed(taken, "HTTP 500", give_up=False)
        [due] = b.due()
        assert (due.state, due.last_error) == ("pending", "HTTP 500")
        retaken = b.take(due, 60)
        assert retaken is not None and retaken.tries == 2
        a.sent(taken)  # a stale try cannot settle the row another sender holds
        assert b.listing()[0].state == "sending"
        b.sent(retaken)
        [row] = a.listing()
        assert row.state == "sent" and row.sent_at is not None
        assert a.due() == [] and a.due(failed=True) == []


def test_an_expired_claim_is_taken_again(ledger_url: str) -> None:
    """A sender that died while sending leaves its row taken until the claim expires."""
    with open_ledger(ledger_url) as ledger:
        store = Notifications(ledger.backend)
        [rec] = store.record([new()])
        assert store.take(rec, -1) is not None  # a claim already expired
        [due] = store.due()
        again = store.take(due, 60)
        assert again is not None and again.tries == 2
        store.try_failed(again, "down", give_up=True)
        assert store.due() == []
        assert [r.state for r in store.due(failed=True)] == ["failed"]
