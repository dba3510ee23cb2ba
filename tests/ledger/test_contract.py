"""The ledger contract: every backend must pass every test here.

Run once per backend through the ``ledger_url`` fixture (SQLite, PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from retrysafe.errors import Busy, InvalidInput, SchemaTooNew, StaleAttempt, UnknownOutcome, UnknownStep
from retrysafe.ledger import Holder, Ledger, open_ledger

H1 = Holder("host-a", 1001, "boot:1")
H2 = Holder("host-b", 2002, "boot:2")


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    with open_ledger(ledger_url) as led:
        yield led


def claim(ledger: Ledger, key: str = "job:1", holder: Holder = H1, lease: float = 60,
          max_attempts: int = 5, gone: bool = False):  # type: ignore[no-untyped-def]
    return ledger.claim(key, job="job", params={"n": "1"}, holder=holder, lease_seconds=lease,
                        max_attempts=max_attempts, liveness=lambda _a, _r: (False, "holder process is gone") if gone else (None, ""))


def test_first_claim_starts_attempt_one_with_fence_one(ledger: Ledger) -> None:
    """A new key creates the outcome and attempt 1 holding fencing token 1."""
    c = claim(ledger)
    assert c.status == "started"
    assert c.attempt is not None and c.attempt.number == 1 and c.attempt.fence == 1
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "running" and out.current_attempt == c.attempt.id


def test_live_lease_makes_second_claim_busy(ledger: Ledger) -> None:
    """While attempt 1 holds a live lease, nobody else may start."""
    first = claim(ledger)
    second = claim(ledger, holder=H2)
    assert second.status == "busy"
    assert second.attempt is not None and second.attempt.id == first.attempt.id  # type: ignore[union-attr]


def test_expired_lease_is_superseded_and_running_steps_become_unknown(ledger: Ledger) -> None:
    """After expiry (by the ledger's clock) a new attempt takes over with a higher fence."""
    first = claim(ledger, lease=0.2)
    assert first.attempt is not None
    ledger.move_step(first.attempt, "job:1/send", "running", name="send", expect=[None])
    time.sleep(0.5)
    second = claim(ledger, holder=H2)
    assert second.status == "started" and second.attempt is not None
    assert second.attempt.fence == 2 and second.attempt.number == 2
    assert second.superseded is not None and second.superseded.id == first.attempt.id
    step = ledger.step("job:1/send")
    assert step is not None and step.state == "unknown"
    assert "lease expired" in step.reason


def test_gone_holder_is_broken_at_once(ledger: Ledger) -> None:
    """A holder known to be dead does not make the next run wait for expiry."""
    claim(ledger, lease=3600)
    second = claim(ledger, holder=H2, gone=True)
    assert second.status == "started"
    assert second.superseded is not None and "gone" in ledger.attempts("job:1")[0].result


def test_stale_attempt_writes_are_refused(ledger: Ledger) -> None:
    """Once superseded, every write of the old attempt fails and changes nothing."""
    first = claim(ledger, lease=0.2)
    assert first.attempt is not None
    time.sleep(0.5)
    second = claim(ledger, holder=H2)
    assert second.attempt is not None
    with pytest.raises(StaleAttempt):
        ledger.move_step(first.attempt, "job:1/x", "running", name="x", expect=[None])
    with pytest.raises(StaleAttempt):
        ledger.renew(first.attempt, 60)
    with pytest.raises(StaleAttempt):
        ledger.finish(first.attempt, "done", accepted=True)
    assert ledger.step("job:1/x") is None
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "running" and out.fence == 2


def test_done_outcome_is_never_claimed_again(ledger: Ledger) -> None:
    """Outcomes never repeat: a done key answers done."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.finish(c.attempt, "done", accepted=True)
    again = claim(ledger, holder=H2)
    assert again.status == "done" and again.attempt is None
    out = ledger.outcome("job:1")
    assert out is not None and out.accepted_attempt == c.attempt.id and out.attempts == 1


def test_attempt_limit_blocks_until_retry(ledger: Ledger) -> None:
    """Past max_attempts the outcome is blocked; retry grants a fresh budget."""
    for _ in range(2):
        c = claim(ledger, max_attempts=2)
        assert c.status == "started" and c.attempt is not None
        ledger.finish(c.attempt, "failed", "boom")
    blocked = claim(ledger, max_attempts=2)
    assert blocked.status == "blocked" and "attempts exhausted" in blocked.reason
    assert claim(ledger, max_attempts=2).status == "blocked"
    ledger.retry("job:1", actor="tester")
    again = claim(ledger, max_attempts=2)
    assert again.status == "started" and again.attempt is not None and again.attempt.number == 3


def test_step_transitions_check_the_expected_state(ledger: Ledger) -> None:
    """Two racers on one step: the second write, expecting the old state, is refused."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/s", "running", name="s", expect=[None])
    with pytest.raises(Busy):
        ledger.move_step(c.attempt, "job:1/s", "running", name="s", expect=[None])
    ledger.move_step(c.attempt, "job:1/s", "done", name="s", expect=["running"], evidence="id-1")
    with pytest.raises(InvalidInput):
        ledger.move_step(c.attempt, "job:1/s", "running", name="s", expect=["done"])
    step = ledger.step("job:1/s")
    assert step is not None and step.state == "done" and step.evidence == "id-1" and step.tries == 1


def test_done_is_refused_while_a_step_is_open(ledger: Ledger) -> None:
    """Close-out cannot mark done over a running, unknown or blocked step."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/s", "running", name="s", expect=[None])
    ledger.move_step(c.attempt, "job:1/s", "unknown", name="s", expect=["running"], reason="timeout")
    with pytest.raises(InvalidInput, match="step s is unknown"):
        ledger.finish(c.attempt, "done", accepted=True)
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "running"


def test_history_records_every_transition_with_fence_and_actor(ledger: Ledger) -> None:
    """The history is the record: each change, its attempt, fencing token and reason."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/s", "running", name="s", expect=[None])
    ledger.move_step(c.attempt, "job:1/s", "done", name="s", expect=["running"], evidence="e",
                     outcome_state="delivered")
    ledger.finish(c.attempt, "done", accepted=True)
    events = ledger.history("job:1")
    pairs = [(e.kind, e.from_state, e.to_state) for e in events]
    assert ("step", "", "running") in pairs and ("step", "running", "done") in pairs
    assert ("outcome", "running", "delivered") in pairs and ("outcome", "delivered", "done") in pairs
    assert all(e.fence == 1 and e.attempt_id == c.attempt.id for e in events)
    assert [e.id for e in events] == sorted(e.id for e in events)


def test_progress_marks_only_move_forward(ledger: Ledger) -> None:
    """generated, then delivered; a later generate step never lowers delivered."""
    c = claim(ledger)
    assert c.attempt is not None
    for name, mark in (("draft", "generated"), ("send", "delivered"), ("draft2", "generated")):
        ledger.move_step(c.attempt, f"job:1/{name}", "running", name=name, expect=[None])
        ledger.move_step(c.attempt, f"job:1/{name}", "done", name=name, expect=["running"],
                         evidence="e", outcome_state=mark)
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "delivered"
    marks = [(e.from_state, e.to_state) for e in ledger.history("job:1") if e.kind == "outcome"]
    assert marks == [("planned", "running"), ("running", "generated"), ("generated", "delivered")]


def test_a_refused_move_writes_nothing(ledger: Ledger) -> None:
    """Neither a stale fence nor an unexpected state leaves a step change or a history row."""
    first = claim(ledger, lease=0.2)
    assert first.attempt is not None
    ledger.move_step(first.attempt, "job:1/s", "running", name="s", expect=[None])
    before = ledger.history("job:1")
    with pytest.raises(Busy):
        ledger.move_step(first.attempt, "job:1/s", "done", name="s", expect=["unknown"],
                         evidence="e", outcome_state="delivered")
    assert ledger.history("job:1") == before
    time.sleep(0.5)
    second = claim(ledger, holder=H2)
    assert second.attempt is not None
    before = ledger.history("job:1")
    with pytest.raises(StaleAttempt):
        ledger.move_step(first.attempt, "job:1/s", "done", name="s", expect=["unknown"],
                         evidence="e", outcome_state="delivered")
    assert ledger.history("job:1") == before
    step = ledger.step("job:1/s")
    assert step is not None and step.state == "unknown" and step.evidence is None
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "running"


def test_resolve_found_and_absent(ledger: Ledger) -> None:
    """A human settles unknown steps: found records evidence, absent allows execution."""
    c = claim(ledger)
    assert c.attempt is not None
    for name in ("a", "b"):
        ledger.move_step(c.attempt, f"job:1/{name}", "running", name=name, expect=[None])
        ledger.move_step(c.attempt, f"job:1/{name}", "blocked", name=name, expect=["running"],
                         reason="ambiguous")
    ledger.finish(c.attempt, "blocked", "step a: ambiguous")
    a = ledger.resolve("job:1", "a", found="msg-1", actor="ops")
    assert a.state == "done" and a.evidence == "msg-1"
    assert ledger.outcome("job:1").state == "blocked"  # type: ignore[union-attr]
    b = ledger.resolve("job:1", "b", found=None, actor="ops", note="not in the inbox")
    assert b.state == "planned" and "not in the inbox" in b.reason
    out = ledger.outcome("job:1")
    assert out is not None and out.state == "settled" and "re-run" in out.reason
    assert any(e.actor == "ops" for e in ledger.history("job:1"))


def test_approve_ahead_of_the_step(ledger: Ledger) -> None:
    """Approval can be recorded before the step first runs, but only on purpose (``new``):
    a typo is refused naming the known steps, and a planned step can be forgotten."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=[None])
    with pytest.raises(UnknownStep, match=r"'chrage' \(known: send\).*--new"):
        ledger.approve("job:1", "chrage", actor="finance")
    assert ledger.step("job:1/chrage") is None
    step = ledger.approve("job:1", "charge", actor="finance", note="ok", new=True)
    assert step.state == "planned" and step.approved_by == "finance: ok"
    with pytest.raises(InvalidInput, match="only a planned step"):
        ledger.forget("job:1", "send", actor="ops")
    ledger.forget("job:1", "charge", actor="ops", note="approved the wrong step")
    assert ledger.step("job:1/charge") is None
    assert any(e.kind == "forget" and "wrong step" in e.reason for e in ledger.history("job:1"))


def test_retry_refuses_while_a_step_is_blocked(ledger: Ledger) -> None:
    """retry does not bypass a step a human must settle."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/a", "running", name="a", expect=[None])
    ledger.move_step(c.attempt, "job:1/a", "blocked", name="a", expect=["running"], reason="?")
    ledger.finish(c.attempt, "blocked", "a")
    with pytest.raises(InvalidInput, match="resolve"):
        ledger.retry("job:1", actor="ops")


def test_unknown_outcome_errors(ledger: Ledger) -> None:
    """Human commands on a key that does not exist say so."""
    with pytest.raises(UnknownOutcome):
        ledger.resolve("nope", "s", found="x", actor="ops")
    with pytest.raises(UnknownOutcome):
        ledger.retry("nope", actor="ops")
    assert ledger.outcome("nope") is None


def test_key_belongs_to_one_job(ledger: Ledger) -> None:
    """The same key from another job is refused rather than merged."""
    claim(ledger)
    with pytest.raises(InvalidInput, match="belongs to job"):
        ledger.claim("job:1", job="other", params={}, holder=H2, lease_seconds=5, max_attempts=3)


def test_listing_filters_by_job_and_state(ledger: Ledger) -> None:
    """ls: outcomes by job and state."""
    c = claim(ledger, key="job:1")
    claim(ledger, key="job:2")
    assert c.attempt is not None
    ledger.finish(c.attempt, "done", accepted=True)
    assert [o.key for o in ledger.outcomes(state="done")] == ["job:1"]
    assert {o.key for o in ledger.outcomes(job="job")} == {"job:1", "job:2"}
    assert ledger.outcomes(job="other") == []


def test_migrations_are_recorded_and_a_newer_schema_is_refused(ledger_url: str) -> None:
    """A ledger written by a newer retrysafe is refused and left untouched."""
    with open_ledger(ledger_url) as led:
        version = led.schema_version()
        assert version >= 1 and led.migrate() == []
        with led.backend.transaction() as tx:
            tx.run("INSERT INTO rs_schema (version, name, applied_at) VALUES (?, ?, ?)",
                   (version + 1, "from the future", 0.0))
    with pytest.raises(SchemaTooNew, match="upgrade retrysafe"):
        open_ledger(ledger_url)
    with pytest.raises(SchemaTooNew):
        open_ledger(ledger_url, auto_migrate=False)


def test_renew_extends_the_lease_by_the_ledger_clock(ledger: Ledger) -> None:
    """A heartbeat keeps a slow attempt alive past its first lease."""
    c = claim(ledger, lease=0.4)
    assert c.attempt is not None
    for _ in range(4):
        time.sleep(0.2)
        ledger.renew(c.attempt, 0.4)
    assert claim(ledger, holder=H2).status == "busy"


def test_resolving_a_running_step_ends_its_attempt_so_a_resumed_holder_cannot_act(
        ledger: Ledger) -> None:
    """A step ``running`` in an attempt whose lease is current cannot be resolved;
    once the lease ran out (and nothing says the holder lives), resolving it also
    supersedes that attempt: a holder that was frozen and resumes has its intent
    and record refused, so it cannot act after a human said "absent"."""
    import time

    c = claim(ledger, lease=0.5)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=[None])
    with pytest.raises(Busy, match="live attempt"):
        ledger.resolve("job:1", "send", found=None, actor="ops")
    with pytest.raises(Busy, match="still running here"):
        ledger.resolve("job:1", "send", found=None, actor="ops",
                       liveness=lambda _a, _r: (True, "still running here"))
    time.sleep(0.7)
    step = ledger.resolve("job:1", "send", found=None, actor="ops")
    assert step.state == "planned"
    with pytest.raises(StaleAttempt):
        ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=["planned"])
    attempts = ledger.attempts("job:1")
    assert attempts[0].state == "superseded" and "resolved by ops" in attempts[0].result


def test_outcome_and_steps_reads_both_in_one_statement(ledger: Ledger) -> None:
    """A re-run's one read: the outcome with its steps (in no particular order: a re-run
    finds them by key), the same records the separate reads give; nothing for an
    unknown key."""
    assert ledger.outcome_and_steps("job:none") == (None, [])
    c = claim(ledger)
    assert c.attempt is not None
    out, steps = ledger.outcome_and_steps("job:1")
    assert out == ledger.outcome("job:1") and steps == []
    for name in ("b", "a"):
        ledger.move_step(c.attempt, f"job:1/{name}", "running", name=name, expect=[None])
        ledger.move_step(c.attempt, f"job:1/{name}", "done", name=name, expect=["running"],
                         evidence=f"id-{name}")
    ledger.finish(c.attempt, "done")
    out, steps = ledger.outcome_and_steps("job:1")
    assert out == ledger.outcome("job:1") and out is not None and out.state == "done"
    assert sorted(steps) == sorted(ledger.steps("job:1"))
    assert sorted((s.name, s.evidence) for s in steps) == [("a", "id-a"), ("b", "id-b")]


def test_a_new_outcome_is_claimed_with_its_history_in_order(ledger: Ledger) -> None:
    """The first claim writes the outcome already held by attempt 1, and its history
    still says what happened: the attempt started, then planned -> running."""
    c = claim(ledger)
    assert c.attempt is not None and c.outcome.state == "running"
    assert c.outcome == ledger.outcome("job:1")
    events = ledger.history("job:1")
    assert [(e.kind, e.from_state, e.to_state) for e in events] == [
        ("attempt", "", "active"), ("outcome", "planned", "running")]
    assert all(e.attempt_id == c.attempt.id and e.fence == 1 for e in events)
    assert len(c.attempt.id) == 20 and int(c.attempt.id, 16) >= 0


def test_a_claim_and_a_finish_return_the_rows_they_wrote(ledger: Ledger) -> None:
    """A new outcome's claim and a ``done`` finish are one round trip each on a server
    (one statement builds the rows): what they return is what a read finds, and the
    history says the same as a claim and a finish made statement by statement."""
    c = claim(ledger)
    assert c.attempt is not None
    assert c.attempt == ledger.attempt(c.attempt.id)
    assert c.attempt.lease_expires == pytest.approx(c.attempt.started_at + 60)
    ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=[None])
    ledger.move_step(c.attempt, "job:1/send", "done", name="send", expect=["running"],
                     evidence="id-1")
    out = ledger.finish(c.attempt, "done", "all good", accepted=True)
    assert out == ledger.outcome("job:1")
    assert (out.state, out.reason, out.current_attempt, out.accepted_attempt) == (
        "done", "all good", None, c.attempt.id)
    ended = ledger.attempt(c.attempt.id)
    assert ended is not None and (ended.state, ended.result) == ("finished", "done")
    assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    events = [(e.kind, e.from_state, e.to_state, e.reason, e.attempt_id, e.fence)
              for e in ledger.history("job:1")]
    assert events[-2:] == [
        ("attempt", "active", "finished", "result done", c.attempt.id, 1),
        ("outcome", "running", "done", "all good", c.attempt.id, 1)]
    # a second finish of the same attempt is refused and writes nothing
    with pytest.raises(Exception, match="already finished"):
        ledger.finish(c.attempt, "done", accepted=True)
    assert len(ledger.history("job:1")) == len(events)


def test_a_done_finish_the_outcome_refuses_writes_nothing(ledger: Ledger) -> None:
    """A ``done`` finish meeting an open step or a newer attempt is refused with the
    reason, and neither the outcome, its attempt nor its history changes."""
    c = claim(ledger, lease=0.001)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=[None])
    before = (ledger.outcome("job:1"), ledger.attempt(c.attempt.id), ledger.history("job:1"))
    with pytest.raises(InvalidInput, match="step send is running"):
        ledger.finish(c.attempt, "done", accepted=True)
    assert (ledger.outcome("job:1"), ledger.attempt(c.attempt.id),
            ledger.history("job:1")) == before
    time.sleep(0.01)
    newer = claim(ledger, holder=H2)
    assert newer.status == "started"
    before = (ledger.outcome("job:1"), ledger.attempt(c.attempt.id), ledger.history("job:1"))
    with pytest.raises(StaleAttempt):
        ledger.finish(c.attempt, "done", accepted=True)
    assert (ledger.outcome("job:1"), ledger.attempt(c.attempt.id),
            ledger.history("job:1")) == before


def test_close_out_s_shortcut_finish_takes_only_a_clear_outcome(ledger: Ledger) -> None:
    """``finish_clear``: close-out's shortcut (one round trip on a server, one
    transaction without reading the steps first on SQLite). It finishes the attempt
    done when some step is recorded, every step is done and none holds an artifact
    whose file close-out would check; otherwise it writes nothing and answers None, and
    close-out reads and judges the steps as ever. What it writes is what ``finish``
    writes."""
    c = claim(ledger)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/draft", "running", name="draft", kind="generate",
                     expect=[None])
    ledger.move_step(c.attempt, "job:1/draft", "done", name="draft", kind="generate",
                     expect=["running"], artifact="/reports/w1.md", checksum="ab12")
    before = (ledger.outcome("job:1"), ledger.history("job:1"))
    assert ledger.finish_clear(c.attempt) is None  # an artifact to check
    assert (ledger.outcome("job:1"), ledger.history("job:1")) == before

    # no step: the finish alone says done, so it must be synced, which on SQLite only
    # the full finish does (a server syncs every finish: it takes it)
    empty = claim(ledger, key="job:0")
    assert empty.attempt is not None
    before = (ledger.outcome("job:0"), ledger.history("job:0"))
    if ledger.backend.crashes_alone:
        assert ledger.finish_clear(empty.attempt) == ledger.outcome("job:0")
        assert ledger.outcome("job:0").state == "done"  # type: ignore[union-attr]
    else:
        assert ledger.finish_clear(empty.attempt) is None
        assert (ledger.outcome("job:0"), ledger.history("job:0")) == before

    pairs = []
    for key, shortcut in (("job:2", True), ("job:3", False)):
        second = claim(ledger, key=key)
        assert second.attempt is not None
        ledger.move_step(second.attempt, f"{key}/send", "running", name="send", expect=[None])
        before = (ledger.outcome(key), ledger.history(key))
        assert ledger.finish_clear(second.attempt) is None  # a step still running
        assert (ledger.outcome(key), ledger.history(key)) == before
        ledger.move_step(second.attempt, f"{key}/send", "done", name="send",
                         expect=["running"], evidence="id-2")
        if shortcut:
            out = ledger.finish_clear(second.attempt)
        else:
            out = ledger.finish(second.attempt, "done", accepted=True, durable=False)
        assert out is not None and out == ledger.outcome(key)
        assert (out.state, out.accepted_attempt, out.current_attempt) == (
            "done", second.attempt.id, None)
        assert ledger.attempt(second.attempt.id).state == "finished"  # type: ignore[union-attr]
        pairs.append([(e.kind, e.from_state, e.to_state, e.actor, e.reason)
                      for e in ledger.history(key)])
    assert pairs[0] == pairs[1]
    assert [row[:3] for row in pairs[0]][-2:] == [
        ("attempt", "active", "finished"), ("outcome", "running", "done")]


def test_close_out_s_shortcut_refuses_an_attempt_that_lost_its_fence(ledger: Ledger) -> None:
    """An attempt taken over (its lease ran out, a newer claim holds the fence) is not
    finished by the shortcut: nothing is written, and the full finish says why."""
    c = claim(ledger, lease=0.001)
    assert c.attempt is not None
    ledger.move_step(c.attempt, "job:1/send", "running", name="send", expect=[None])
    ledger.move_step(c.attempt, "job:1/send", "done", name="send", expect=["running"],
                     evidence="id-1")
    time.sleep(0.01)
    newer = claim(ledger, holder=H2)
    assert newer.status == "started"
    before = (ledger.outcome("job:1"), ledger.attempt(c.attempt.id), ledger.history("job:1"))
    assert ledger.finish_clear(c.attempt) is None
    assert (ledger.outcome("job:1"), ledger.attempt(c.attempt.id),
            ledger.history("job:1")) == before
    with pytest.raises(StaleAttempt):
        ledger.finish(c.attempt, "done", accepted=True)
