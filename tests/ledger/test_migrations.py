"""Upgrading a ledger written by an earlier schema: it migrates and keeps working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retrysafe.keys import step_key
from retrysafe.ledger import Holder, open_ledger
from retrysafe.ledger.backend import Backend
from retrysafe.ledger.listing import Listing
from retrysafe.ledger.migrations import MIGRATIONS, SCHEMA_TABLE, SCHEMA_VERSION, render, statements
from retrysafe.ledger.sqlite import SqliteBackend


def _ledger_at(path: Path, version: int) -> None:
    """A SQLite ledger as a retrysafe knowing schema ``version`` left it."""
    _schema_at(SqliteBackend(path), version)


def _schema_at(backend: Backend, version: int) -> None:
    try:
        with backend.transaction() as tx:
            tx.run(render(backend, SCHEMA_TABLE))
            for number, name, script in MIGRATIONS[:version]:
                for stmt in statements(backend, script):
                    tx.run(stmt)
                tx.run("INSERT INTO rs_schema (version, name, applied_at) VALUES (?, ?, 0)",
                       (number, name))
    finally:
        backend.close()


def test_a_version_2_ledger_is_upgraded_and_its_step_moves_keep_their_history(
        tmp_path: Path) -> None:
    """Schema 3 moved SQLite's step history into triggers; an older ledger gets them on open."""
    path = tmp_path / "ledger.sqlite3"
    _ledger_at(path, 2)
    with open_ledger(f"sqlite:///{path}") as led:
        assert led.schema_version() == SCHEMA_VERSION
        claim = led.claim("job:1", job="job", params={}, holder=Holder("h", None),
                          lease_seconds=60, max_attempts=3)
        assert claim.attempt is not None
        led.move_step(claim.attempt, "job:1/send", "running", name="send", expect=[None])
        led.move_step(claim.attempt, "job:1/send", "done", name="send", expect=["running"],
                      evidence="id-1", outcome_state="delivered")
        steps = [(e.from_state, e.to_state, e.actor) for e in led.history("job:1")
                 if e.kind == "step"]
        assert steps == [("", "running", "attempt-1"), ("running", "done", "attempt-1")]
        marks = [(e.from_state, e.to_state) for e in led.history("job:1") if e.kind == "outcome"]
        assert marks[-1] == ("running", "delivered")


_LEGACY_BLOCKS = {
    # step name -> (reason as earlier versions wrote it, the cause schema 4 gives it)
    "charge": ("awaiting approval: class payment needs an approval record", "approval"),
    "post": ("lookup is ambiguous: two drafts titled X", "ambiguous"),
    "ping": ("the lookup found nothing, but it cannot prove job:1/ping never happened",
             "not_provable"),
    "mail": ("mail may have happened (timeout) and there is no lookup to tell: check the "
             "external system for job:1/mail", "no_lookup"),
    "wipe": ("class delete is never retried blindly after an unclear result", "never_blind"),
    "drop": ("drop failed (denied); class delete is not retried automatically", "not_retried"),
    "sms": ("two messages on the gateway, ids 4 and 5", "agent"),
}


def test_a_version_3_ledger_gets_block_causes_from_its_reasons(tmp_path: Path) -> None:
    """Schema 4 stores why a step is blocked as a cause; rows blocked before the
    upgrade get the cause their reason text was written for, so approving and
    unblocking keep working on them without parsing English."""
    from retrysafe.engine import unblock_hint

    path = tmp_path / "ledger.sqlite3"
    _ledger_at(path, 3)
    backend = SqliteBackend(path)
    try:
        with backend.transaction() as tx:
            for key, reason in (("job:1", "step post: lookup is ambiguous: two drafts titled X"),
                                ("job:2", "attempts exhausted (3 of 3); check what failed")):
                tx.run("INSERT INTO rs_outcomes (key, job, params, state, reason, created_at,"
                       " updated_at) VALUES (?, 'job', '{}', 'blocked', ?, 0, 0)", (key, reason))
            for name, (reason, _) in _LEGACY_BLOCKS.items():
                tx.run("INSERT INTO rs_steps (step_key, outcome_key, name, kind, state, reason,"
                       " created_at, updated_at) VALUES (?, 'job:1', ?, 'effect', 'blocked', ?, 0, 0)",
                       (f"job:1/{name}", name, reason))
            tx.run("INSERT INTO rs_steps (step_key, outcome_key, name, kind, state, reason,"
                   " evidence, created_at, updated_at)"
                   " VALUES ('job:1/done', 'job:1', 'done', 'effect', 'done', '', 'id-9', 0, 0)")
    finally:
        backend.close()
    with open_ledger(f"sqlite:///{path}") as led:
        causes = {s.name: s.cause for s in led.steps("job:1")}
        assert causes == {**{n: c for n, (_, c) in _LEGACY_BLOCKS.items()}, "done": ""}
        out1, out2 = led.outcome("job:1"), led.outcome("job:2")
        assert out1 is not None and out2 is not None
        assert out1.cause in {c for _, c in _LEGACY_BLOCKS.values()}
        assert out2.cause == "exhausted"
        assert unblock_hint(led, out2) == "retrysafe retry job:2"
        approved = led.approve("job:1", "charge", actor="ops")
        assert (approved.state, approved.cause) == ("planned", "")
        still = led.approve("job:1", "post", actor="ops")
        assert (still.state, still.cause) == ("blocked", "ambiguous")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
        return
    from pgtest import fresh_database, require_server

    with fresh_database(require_server()) as url:
        yield url


def _backend(url: str) -> Backend:
    if url.startswith("sqlite:///"):
        return SqliteBackend(Path(url.removeprefix("sqlite:///")))
    from retrysafe.ledger.postgres import PostgresBackend

    return PostgresBackend(url)


# (outcome key, step, item, state) rows as a version-4 ledger holds them, under the
# old rendering "<outcome>/<step>[/<item>]"
_V4_STEPS = [
    ("rep:eng", "mail", "", "done"),                 # no "/" in the outcome: key unchanged
    ("rep:eng", "send", "a.b", "unknown"),           # unchanged, even while in flight
    ("rep:eng/send", "mail", "", "done"),            # "/" outcome, settled: re-keyed
    ("rep:ops/x", "post", "", "unknown"),            # "/" outcome, in flight: re-keyed, blocked
    ("rep:ops/x", "ping", "p1", "running"),
]


def test_a_version_4_ledger_gets_unambiguous_step_keys(ledger_url: str) -> None:
    """Schema 5: a step key names its outcome unambiguously. Keys of outcomes
    without "/" keep their value (providers find what was recorded under them);
    steps of outcomes with "/" are re-keyed, and those that may have an effect in
    flight under the old key are blocked for a human, with the old key named."""
    backend = _backend(ledger_url)
    _schema_at(backend, 4)
    backend = _backend(ledger_url)
    try:
        with backend.transaction() as tx:
            for key in sorted({row[0] for row in _V4_STEPS}):
                tx.run("INSERT INTO rs_outcomes (key, job, params, state, created_at, updated_at)"
                       " VALUES (?, 'rep', '{}', 'running', 0, 0)", (key,))
            for key, name, item, st in _V4_STEPS:
                old = f"{key}/{name}" + (f"/{item}" if item else "")
                tx.run("INSERT INTO rs_steps (step_key, outcome_key, name, item, kind, state,"
                       " created_at, updated_at) VALUES (?, ?, ?, ?, 'effect', ?, 0, 0)",
                       (old, key, name, item, st))
                tx.run("INSERT INTO rs_events (outcome_key, step_key, at, actor, kind, to_state)"
                       " VALUES (?, ?, 0, 'attempt-1', 'step', ?)", (key, old, st))
    finally:
        backend.close()
    with open_ledger(ledger_url) as led:
        assert led.schema_version() == SCHEMA_VERSION
        for key, name, item, st in _V4_STEPS:
            new = step_key(key, name, item or None)
            assert (new == f"{key}/{name}" + (f"/{item}" if item else "")) == ("/" not in key)
            rec = led.step(new)
            assert rec is not None, new
            assert (rec.outcome_key, rec.name, rec.item) == (key, name, item)
            in_flight = "/" in key and st in ("running", "unknown")
            assert rec.state == ("blocked" if in_flight else st)
            if in_flight:
                assert rec.cause == "not_provable"
                assert f"it was {key}/{name}" in rec.reason
            history = [e for e in led.history(key) if e.kind == "step" and e.step_key == new]
            assert [e.to_state for e in history] == ([st, "blocked"] if in_flight else [st])
        # the collision of the old rendering is gone: both steps exist, each its own
        assert led.step("rep:eng/send/mail") is None
        assert led.step("rep:eng/send//mail") is not None


def test_a_version_8_ledger_keeps_working_through_schemas_9_and_10(ledger_url: str) -> None:
    """Schema 9 drops an index another one serves, schema 10 indexes the drill trials
    apart: an attempt begun before the upgrade (a 32-digit id) records and finishes
    after it, lookups by outcome still work, and the metrics leave the trials out."""
    backend = _backend(ledger_url)
    _schema_at(backend, 8)
    backend = _backend(ledger_url)
    old_id = "0123456789abcdef0123456789abcdef"
    try:
        with backend.transaction() as tx:
            for key, state, current in (("rep:old", "running", old_id),
                                        ("rep:t~trial-1", "done", None),
                                        ("rep:done", "done", None)):
                tx.run("INSERT INTO rs_outcomes (key, job, params, state, fence, attempts,"
                       " current_attempt, created_at, updated_at)"
                       " VALUES (?, 'rep', '{}', ?, 1, 1, ?, 0, 0)", (key, state, current))
            tx.run("INSERT INTO rs_attempts (id, outcome_key, number, fence, state, holder_host,"
                   " lease_expires, started_at) VALUES (?, 'rep:old', 1, 1, 'active', 'h',"
                   " 1e12, 0)", (old_id,))
    finally:
        backend.close()
    with open_ledger(ledger_url) as led:
        assert led.schema_version() == SCHEMA_VERSION
        attempt = led.attempt(old_id)
        assert attempt is not None
        led.move_step(attempt, "rep:old/send", "running", name="send", expect=[None])
        led.move_step(attempt, "rep:old/send", "done", name="send", expect=["running"],
                      evidence="id-1", outcome_state="delivered")
        assert [s.name for s in led.steps("rep:old")] == ["send"]
        out = led.finish(attempt, "done", accepted=True)
        assert out.state == "done" and out.accepted_attempt == old_id
        assert led.outcome_and_steps("rep:old")[1][0].evidence == "id-1"
        assert Listing(led.backend).totals().outcomes == {("rep", "done"): 2}
        assert Listing(led.backend).totals(drills=True).outcomes == {("rep", "done"): 3}


# history rows as a version-10 ledger holds them: (outcome, step key, attempt id, actor,
# kind, from, to, reason); ids 1..n in this order
_V10_EVENTS = [
    ("rep:a", "", "att-a1", "attempt-1", "attempt", "", "active", "attempt 1 started: pid 7"),
    ("rep:a", "", "att-a1", "attempt-1", "outcome", "planned", "running", ""),
    ("rep:a", "rep:a/send", "att-a1", "attempt-1", "step", "", "running", "attempt 1 started it"),
    ("rep:eng/x", "", "att-x1", "attempt-1", "attempt", "", "active", ""),
    ("rep:eng/x", "rep:eng/x//mail/it.em", "att-x1", "attempt-1", "step", "", "running", ""),
    ("rep:a", "rep:a/send", "att-a1", "retrysafe", "step", "running", "unknown", "lease broken"),
    ("rep:a", "", None, "alice", "outcome", "running", "blocked", "ópś: checked by hand"),
    ("rep:a", "", "att-a2", "attempt-2", "attempt", "", "active", ""),
    ("rep:a", "rep:a/send", None, "retrysafe", "step", "", "done", "rebuilt from the folders"),
]


def test_a_version_10_ledger_gets_the_compact_history_and_reads_it_as_before(
        ledger_url: str) -> None:
    """Schema 11 stores the history compactly (outcome id, attempt number, the
    attempt's own actor left out) behind a view with the old columns: every history
    row reads back as it was, ids included, the next id continues the old sequence
    (not the highest id kept), attempts begun before the upgrade move on after it,
    and a prune removes the compact rows."""
    backend = _backend(ledger_url)
    _schema_at(backend, 10)
    backend = _backend(ledger_url)
    try:
        with backend.transaction() as tx:
            for key in ("rep:a", "rep:eng/x"):
                tx.run("INSERT INTO rs_outcomes (key, job, params, state, fence, attempts,"
                       " current_attempt, created_at, updated_at)"
                       " VALUES (?, 'rep', '{}', 'running', ?, ?, ?, 0, 0)",
                       (key, *((2, 2, "att-a2") if key == "rep:a" else (1, 1, "att-x1"))))
            for aid, key, number, state in (("att-a1", "rep:a", 1, "superseded"),
                                            ("att-a2", "rep:a", 2, "active"),
                                            ("att-x1", "rep:eng/x", 1, "active")):
                tx.run("INSERT INTO rs_attempts (id, outcome_key, number, fence, state,"
                       " holder_host, lease_expires, started_at) VALUES (?, ?, ?, ?, ?, 'h',"
                       " 1e12, 0)", (aid, key, number, number, state))
            for i, (key, skey, aid, actor, kind, frm, to, why) in enumerate(_V10_EVENTS):
                tx.run("INSERT INTO rs_events (outcome_key, step_key, at, attempt_id, fence,"
                       " actor, kind, from_state, to_state, reason)"
                       " VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)",
                       (key, skey, 100.0 + i, aid, actor, kind, frm, to, why))
            # the step in flight (its history row above; SQLite's trigger of schema 3
            # writes one only for a step inserted with its attempt)
            tx.run("INSERT INTO rs_steps (step_key, outcome_key, name, item, kind, state,"
                   " created_at, updated_at) VALUES ('rep:eng/x//mail/it.em', 'rep:eng/x',"
                   " 'mail', 'it.em', 'effect', 'running', 0, 0)")
            tx.run("UPDATE rs_steps SET attempt_id = 'att-x1', fence = 1")
            # the newest row was deleted: its id is not drawn again
            tx.run("INSERT INTO rs_events (outcome_key, at, actor, kind, to_state)"
                   " VALUES ('rep:a', 0, 'x', 'outcome', 'gone')")
            tx.run("DELETE FROM rs_events WHERE to_state = 'gone'")
            before = tx.rows("SELECT * FROM rs_events ORDER BY id")
    finally:
        backend.close()
    with open_ledger(ledger_url) as led:
        assert led.schema_version() == SCHEMA_VERSION
        after = [e._asdict() for key in ("rep:a", "rep:eng/x") for e in led.history(key)]
        assert sorted(after, key=lambda e: e["id"]) == [
            {**row, "at": float(row["at"]), "fence": int(row["fence"])} for row in before]
        # an attempt begun before the upgrade moves its step on, fenced as before
        attempt = led.attempt("att-x1")
        assert attempt is not None
        skey = step_key("rep:eng/x", "mail", "it.em")
        led.move_step(attempt, skey, "done", name="mail", item="it.em", expect=["running"],
                      evidence="id-1", outcome_state="delivered")
        newer = led.history("rep:eng/x")[-2:]
        assert [(e.step_key, e.attempt_id, e.actor, e.to_state) for e in newer] == [
            (skey, "att-x1", "attempt-1", "done"), ("", "att-x1", "attempt-1", "delivered")]
        assert newer[0].id == len(_V10_EVENTS) + 2  # after the deleted row's id
        with led.backend.transaction(write=False) as tx:
            stored = tx.rows("SELECT outcome, step, attempt, actor FROM rs_history"
                             " WHERE id = ?", (newer[0].id,))
        assert [(r["step"], r["attempt"], r["actor"]) for r in stored] == [("//mail/it.em", 1, "")]
        # a new outcome claimed after the upgrade gets an id of its own
        claim = led.claim("rep:new", job="rep", params={}, holder=Holder("h", None),
                          lease_seconds=60, max_attempts=3)
        assert claim.attempt is not None
        assert [e.outcome_key for e in led.history("rep:new")] == ["rep:new", "rep:new"]
        assert led.history("rep:a") == [e for e in led.history("rep:a")]
        with led.backend.transaction() as tx:
            ids = tx.rows("SELECT key, id FROM rs_outcomes ORDER BY id")
        assert len({r["id"] for r in ids}) == 3


# history rows as a version-11 ledger holds them: (step, attempt, actor, kind, from, to,
# reason, stored as NULL by schema 12?)
_V11_ROWS = [
    ("", 1, "", "attempt", "", "active", "attempt 1 started: pid 42 on h", True),
    ("", 1, "", "outcome", "planned", "running", "", False),
    ("/send", 1, "", "step", "", "running", "attempt 1 started it", True),
    ("/send", 1, "alice", "step", "", "running", "attempt 1 started it", False),
    ("/send", 1, "", "step", "running", "done", "attempt 2 started it", False),
    ("", 2, "", "attempt", "", "active", "attempt 2 started: an agent on h2 (no process)", True),
    ("", 2, "", "attempt", "", "active", "attempt 2 started: pid 42 on h", False),
    ("", None, "bob", "odd", "", "weird", "ópś", False),
]


def test_a_version_11_ledger_stores_kinds_as_codes_and_reads_its_history_as_before(
        ledger_url: str) -> None:
    """Schema 12 stores a history row's kind and states as codes and the reasons an
    attempt writes in every outcome as NULL: each row reads back as it was, the
    ones stored as NULL only where the text is exactly what the row's attempt
    gives, a word this version does not write keeps its own code, and the next id
    continues the old sequence."""
    backend = _backend(ledger_url)
    _schema_at(backend, 11)
    backend = _backend(ledger_url)
    try:
        with backend.transaction() as tx:
            tx.run("INSERT INTO rs_outcomes (key, job, params, state, fence, attempts,"
                   " current_attempt, created_at, updated_at)"
                   " VALUES ('rep:a', 'rep', '{}', 'running', 2, 2, 'att-2', 0, 0)")
            for aid, number, pid, host in (("att-1", 1, 42, "h"), ("att-2", 2, None, "h2")):
                tx.run("INSERT INTO rs_attempts (id, outcome_key, number, fence, state,"
                       " holder_host, holder_pid, lease_expires, started_at)"
                       " VALUES (?, 'rep:a', ?, ?, 'active', ?, ?, 1e12, 0)",
                       (aid, number, number, host, pid))
            for i, (step, number, actor, kind, frm, to, why, _) in enumerate(_V11_ROWS):
                tx.run("INSERT INTO rs_history (outcome, step, at, attempt, fence, actor, kind,"
                       " from_state, to_state, reason) SELECT id, ?, ?, ?, 1, ?, ?, ?, ?, ?"
                       " FROM rs_outcomes", (step, 100.0 + i, number, actor, kind, frm, to, why))
            tx.run("INSERT INTO rs_history (outcome, at, kind, to_state)"
                   " SELECT id, 0, 'outcome', 'gone' FROM rs_outcomes")
            tx.run("DELETE FROM rs_history WHERE to_state = 'gone'")
            before = tx.rows("SELECT * FROM rs_events ORDER BY id")
    finally:
        backend.close()
    assert len(before) == len(_V11_ROWS)
    with open_ledger(ledger_url) as led:
        assert led.schema_version() == SCHEMA_VERSION
        after = [e._asdict() for e in led.history("rep:a")]
        assert after == [{**row, "at": float(row["at"]), "fence": int(row["fence"])}
                         for row in before]
        with led.backend.transaction(write=False) as tx:
            stored = tx.rows("SELECT h.id, h.reason, k.word AS kind, k.code FROM rs_history h"
                             " JOIN rs_words k ON k.code = h.kind ORDER BY h.id")
        assert [r["reason"] is None for r in stored] == [row[-1] for row in _V11_ROWS]
        assert [r["kind"] for r in stored] == [row[3] for row in _V11_ROWS]
        assert stored[-1]["code"] >= 1000  # "odd": not a word of this version
        # an attempt begun before the upgrade moves a step on: the usual reason is
        # stored as NULL and read back; the id continues after the deleted row's
        attempt = led.attempt("att-2")
        assert attempt is not None
        led.move_step(attempt, "rep:a/post", "running", name="post", expect=[None],
                      reason="attempt 2 started it")
        newest = led.history("rep:a")[-1]
        assert (newest.id, newest.step_key, newest.reason) == (
            len(_V11_ROWS) + 2, "rep:a/post", "attempt 2 started it")
        with led.backend.transaction(write=False) as tx:
            row = tx.one("SELECT reason FROM rs_history WHERE id = ?", (newest.id,))
        assert row is not None and row["reason"] is None


def test_a_kind_or_state_without_a_code_gets_one_of_its_own(ledger_url: str) -> None:
    """A history row whose kind or state ``rs_words`` has no code for (a word a later
    version writes) gets a code from 1000 on instead of being refused, and reads back."""
    with open_ledger(ledger_url) as led:
        claim = led.claim("rep:w", job="rep", params={}, holder=Holder("h", 7),
                          lease_seconds=60, max_attempts=3)
        assert claim.attempt is not None
        with led.backend.transaction() as tx:
            led._log(tx, "rep:w", kind="rehearsal", frm="running", to="rehearsed",
                     actor="carol", reason="a word of a later version")
            led._log(tx, "rep:w", kind="rehearsal", to="rehearsed", actor="carol")
        rows = [(e.kind, e.from_state, e.to_state, e.actor, e.reason)
                for e in led.history("rep:w")]
        assert rows == [
            ("attempt", "", "active", "attempt-1", "attempt 1 started: pid 7 on h"),
            ("outcome", "planned", "running", "attempt-1", ""),
            ("rehearsal", "running", "rehearsed", "carol", "a word of a later version"),
            ("rehearsal", "", "rehearsed", "carol", "")]
        with led.backend.transaction(write=False) as tx:
            codes = {r["word"]: int(r["code"]) for r in tx.rows(
                "SELECT word, code FROM rs_words WHERE code >= 1000")}
        assert codes == {"rehearsal": 1000, "rehearsed": 1001}


def test_a_word_written_where_a_code_goes_is_refused(ledger_url: str) -> None:
    """An older retrysafe still running after the upgrade writes history kinds and states
    as words; SQLite would keep them as text, where no reader would find the row. Both
    backends refuse the write instead (the upgrade caveat of docs/many-machines.md)."""
    from retrysafe.errors import LedgerError

    with open_ledger(ledger_url) as led:
        claim = led.claim("rep:old", job="rep", params={}, holder=Holder("h", 7),
                          lease_seconds=60, max_attempts=3)
        assert claim.attempt is not None
        before = led.history("rep:old")
        with pytest.raises(LedgerError), led.backend.transaction() as tx:
            tx.run("INSERT INTO rs_history (outcome, at, attempt, fence, kind, from_state,"
                   " to_state) SELECT id, 0, 1, 1, 'step', '', 'running' FROM rs_outcomes")
        assert led.history("rep:old") == before
