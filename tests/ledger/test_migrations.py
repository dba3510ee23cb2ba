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
