"""Outcome pages (keyset paging, filters) and the indexes of schema migration 6,
on SQLite and PostgreSQL."""

from __future__ import annotations

from retrysafe.ledger import Holder, open_ledger
from retrysafe.ledger.listing import Listing


def fill(url: str, n: int) -> None:
    with open_ledger(url) as ledger:
        for i in range(n):
            ledger.claim(f"{'a' if i % 2 else 'b'}:{i:03d}", job="a" if i % 2 else "b",
                         params={}, holder=Holder("elsewhere", None), lease_seconds=60,
                         max_attempts=3)


def test_pages_cover_every_outcome_once_newest_first_with_filters(ledger_url: str) -> None:
    """Paging by the cursor walks all outcomes exactly once, newest first, with or without
    a job or state filter; the last page has no cursor."""
    fill(ledger_url, 25)
    with open_ledger(ledger_url) as ledger:
        listing = Listing(ledger.backend)
        for job, expect in ((None, 25), ("a", 12)):
            seen, after = [], None
            while True:
                page = listing.outcomes(job=job, after=after, limit=10)
                seen += page.outcomes
                if page.next is None:
                    break
                after = page.next
            assert len(seen) == expect == len({o.key for o in seen})
            order = [(o.updated_at, o.key) for o in seen]
            assert order == sorted(order, reverse=True)
            assert job is None or {o.job for o in seen} == {job}
        assert listing.outcomes(state="done").outcomes == []
        assert len(listing.outcomes(state="running", limit=100).outcomes) == 25
        newest = listing.outcomes(limit=1).outcomes[0]
        assert listing.outcomes(since=newest.updated_at + 1).outcomes == []
        assert listing.jobs() == ["a", "b"]


def test_migration_6_indexes_serve_the_listing_orders(ledger_url: str) -> None:
    """The listing indexes exist on both backends; SQLite's planner reads a page of the
    state, job and unfiltered listings from them instead of sorting the table, newest
    first and oldest first (schema 12: the outcome's id breaks ties)."""
    with open_ledger(ledger_url) as ledger, ledger.backend.transaction(write=False) as tx:
        if ledger.backend.name == "sqlite":
            names = {r["name"] for r in tx.rows("SELECT name FROM sqlite_master WHERE type = 'index'")}
        else:
            names = {r["indexname"] for r in tx.rows("SELECT indexname FROM pg_indexes")}
        assert {"rs_outcomes_updated", "rs_outcomes_job_updated", "rs_outcomes_state_updated"} <= names
        if ledger.backend.name == "sqlite":
            for where, index in (("state = 'blocked'", "rs_outcomes_state_updated"),
                                 ("job = 'a'", "rs_outcomes_job_updated"),
                                 ("1 = 1", "rs_outcomes_updated")):
                for order in ("updated_at DESC, id DESC", "updated_at, id"):
                    plan = " ".join(str(r["detail"]) for r in tx.rows(
                        f"EXPLAIN QUERY PLAN SELECT * FROM rs_outcomes WHERE {where}"
                        f" ORDER BY {order} LIMIT 51"))
                    assert index in plan and "TEMP B-TREE" not in plan, plan


def test_needs_attention_pages_walk_what_waits_once_oldest_first(ledger_url: str) -> None:
    """Pages of what waits for a human (blocked, and unknown with no live attempt) walk
    it exactly once, oldest first, ties broken by the outcome's id, across both states; an unknown
    outcome whose attempt is live, a done one and a drill trial are left out; the
    counts agree with the pages; the landing page's cursor is a keyset one."""
    fill(ledger_url, 20)
    with open_ledger(ledger_url) as ledger:
        with ledger.backend.transaction() as tx:
            ids = {r["key"]: int(r["id"]) for r in tx.rows("SELECT key, id FROM rs_outcomes")}
            keys = sorted(ids)
            for i, key in enumerate(keys):
                state = ("blocked", "unknown", "done")[i % 3]
                # pairs share a time: the id decides their order
                tx.run("UPDATE rs_outcomes SET state = ?, updated_at = ? WHERE key = ?",
                       (state, 1000.0 + i // 2, key))
            tx.run("UPDATE rs_attempts SET lease_expires = 0")
            live = keys[4]  # unknown, its attempt's lease renewed: still being settled
            tx.run("UPDATE rs_attempts SET lease_expires = ? WHERE outcome_key = ?",
                   (tx.now + 600, live))
        ledger.claim("b:999~drill-1", job="b", params={}, holder=Holder("elsewhere", None),
                     lease_seconds=60, max_attempts=3)
        with ledger.backend.transaction() as tx:
            tx.run("UPDATE rs_outcomes SET state = 'blocked', updated_at = 1 WHERE key LIKE '%~%'")
        retention = ledger.retention
        seen, after, pages = [], None, 0
        while True:
            page = retention.attention_page(after=after, limit=3)
            seen += [w.outcome for w in page.waiting]
            pages += 1
            if page.next is None:
                break
            after = page.next
        expect = [(at, k) for at, _, k in sorted(
            (1000.0 + i // 2, ids[k], k) for i, k in enumerate(keys) if i % 3 in (0, 1) and k != live)]
        assert [(o.updated_at, o.key) for o in seen] == expect
        assert pages == -(-len(expect) // 3)
        assert [w.outcome.key for w in retention.needs_attention()] == [k for _, k in expect]
        counts = retention.attention_counts()
        assert counts == {"blocked": sum(1 for o in seen if o.state == "blocked"),
                          "unknown": sum(1 for o in seen if o.state == "unknown")}
        assert retention.attention_page(limit=1, drills=True).waiting[0].outcome.key == "b:999~drill-1"
        assert retention.attention_counts(drills=True)["blocked"] == counts["blocked"] + 1
