"""Metrics carried on from the history of a PostgreSQL ledger, where a transaction's
history ids become visible when it commits, not in the order they were drawn: a
move that commits around the moment the gauges are read whole is counted once,
in the gauges and in the counters."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from retrysafe.ledger import Holder, Ledger, open_ledger
from retrysafe.ledger.listing import Gauges, Listing, note_unlogged
from retrysafe.metrics import HistoryCounts

HOLDER = Holder("host-a", os.getpid(), "boot:1")


@pytest.fixture
def ledger(pg_db: str) -> Iterator[Ledger]:
    with open_ledger(pg_db) as opened:
        yield opened


def _claim(ledger: Ledger, key: str) -> Any:
    return ledger.claim(key, job="j", params={}, holder=HOLDER, lease_seconds=60, max_attempts=3)


def _truth(ledger: Ledger) -> dict[tuple[str, str], int]:
    return Listing(ledger.backend).totals().outcomes


def _in_flight(url: str, key: str) -> psycopg.Connection[Any]:
    """Another writer's move of ``key`` to failed: its history row drawn and written,
    its transaction not committed yet."""
    conn = psycopg.connect(url)
    conn.execute("INSERT INTO rs_history (outcome, at, actor, kind, from_state, to_state)"
                 " SELECT id, 0, 'other', k.code, f.code, t.code FROM rs_outcomes, rs_words k,"
                 " rs_words f, rs_words t WHERE key = %s AND k.word = 'outcome'"
                 " AND f.word = 'running' AND t.word = 'failed'", (key,))
    conn.execute("UPDATE rs_outcomes SET state = 'failed', current_attempt = NULL"
                 " WHERE key = %s", (key,))
    return conn


def _around_gauges(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None] | None,
                   after: Callable[[], None] | None) -> None:
    real = Listing.gauges

    def gauges(self: Listing, **kw: Any) -> Gauges:
        if before:
            before()
        got = real(self, **kw)
        if after:
            after()
        return got
    monkeypatch.setattr(Listing, "gauges", gauges)


def test_a_move_committed_just_after_the_gauges_are_read_is_counted_once(
        ledger: Ledger, pg_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _claim(ledger, "k0")
    other = _in_flight(pg_db, "k0")  # an id drawn below the next ones, not committed
    ledger.finish(_claim(ledger, "k1").attempt, "done", "")
    counts = HistoryCounts()
    with monkeypatch.context() as m:
        _around_gauges(m, None, other.commit)  # commits after the snapshot, before the rest
        counts.update(ledger)
    counts.update(ledger)
    other.close()
    assert counts.outcomes == _truth(ledger) == {("j", "done"): 1, ("j", "failed"): 1}


def test_a_gap_committed_just_before_the_gauges_are_read_again_is_counted_once(
        ledger: Ledger, pg_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _claim(ledger, "k2")
    other = _in_flight(pg_db, "k2")
    ledger.finish(_claim(ledger, "k3").attempt, "done", "")
    counts = HistoryCounts()
    counts.update(ledger)
    assert counts.gaps  # the in-flight id, seen missing
    with ledger.backend.transaction() as tx:
        note_unlogged(tx)  # as a prune of something else would: the gauges are read again
    with monkeypatch.context() as m:
        _around_gauges(m, other.commit, None)
        counts.update(ledger)
    counts.update(ledger)
    other.close()
    assert counts.outcomes == _truth(ledger) == {("j", "done"): 1, ("j", "failed"): 1}
    assert not counts.gaps

