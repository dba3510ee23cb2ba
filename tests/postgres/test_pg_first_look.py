"""A server's first look at an outcome (LedgerCore.claim_or_read): a new outcome is
claimed by the first statement the Python API sends, a known one is read by it and
nothing is written; what a begin checks before a claim still comes first."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from retrysafe import engine as engine_module
from retrysafe.engine import Engine
from retrysafe.errors import InvalidInput, InvalidParameter
from retrysafe.ledger import Holder, open_ledger
from retrysafe.schedule import format_occurrence, next_occurrence
from retrysafe.states import ClaimStatus

pytestmark = pytest.mark.postgres

DAILY, WARSAW = "0 7 * * *", "Europe/Warsaw"
CONFIG = f"""
[jobs.j]
key = "j:{{n}}"
params = {{ n = "slug" }}

[jobs.k]
key = "j:{{n}}"
params = {{ n = "slug" }}

[jobs.s]
key = "s:{{at}}"
params = {{ at = "occurrence" }}
schedule = "{DAILY}"
tz = "{WARSAW}"
"""


@pytest.fixture
def engine(pg_db: str, tmp_path: Path) -> Iterator[Engine]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
    with Engine.open(home, ledger=pg_db) as opened:
        with opened.start("j", {"n": "warm"}) as run:  # the schema, a pooled connection
            run.effect("send", "local_write", execute=lambda _k: "warm")
        yield opened


def test_a_new_outcome_is_claimed_by_the_first_statement(engine: Engine,
                                                          sent: list[str]) -> None:
    """No read before the claim: the claim, the intent, the record and the finish are
    the four statements of a first run; the re-run is one statement, which writes
    nothing and answers every step from what it read."""
    calls: list[str] = []
    with engine.start("j", {"n": "a"}) as run:
        assert len(sent) == 1 and sent[0].startswith("WITH o AS (INSERT"), sent
        run.effect("send", "local_write", execute=lambda _k: calls.append("sent") or "id-1")
    assert len(sent) == 4, sent
    history = engine.ledger.history("j:a")
    sent.clear()
    with engine.start("j", {"n": "a"}) as run:
        assert run.effect("send", "local_write",
                          execute=lambda _k: calls.append("again") or "id-2") == "id-1"
    assert len(sent) == 1 and sent[0].startswith("WITH o AS (INSERT"), sent
    assert calls == ["sent"]
    assert engine.ledger.history("j:a") == history
    assert engine.ledger.outcome("j:a").attempts == 1  # type: ignore[union-attr]


def test_after_a_done_outcome_the_engine_reads_first_until_a_read_finds_a_new_one(
        engine: Engine, sent: list[str]) -> None:
    """A done outcome's read costs more inside the first look than alone, so an engine
    that met one reads first: a new outcome then takes a read and a claim, and the one
    after it is claimed by the first statement again."""
    with engine.start("j", {"n": "warm"}):  # done (the fixture's)
        pass
    assert len(sent) == 1 and sent[0].startswith("WITH o AS (INSERT"), sent
    for name, before_effect in (("warm", ["SELECT"]), ("e", ["SELECT", "WITH o AS (INSERT"]),
                                ("f", ["WITH o AS (INSERT"])):
        sent.clear()
        with engine.start("j", {"n": name}) as run:
            assert [q.split(" ", 3)[0] if q.startswith("SELECT") else q[:17] for q in sent] \
                == before_effect, (name, sent)
            run.effect("send", "local_write", execute=lambda _k: "ok")


def test_a_known_outcome_is_read_and_claimed_as_before(engine: Engine) -> None:
    """A failed outcome is read by the first look, then claimed by attempt 2 (the full
    claim); an outcome held by a live attempt answers busy and writes nothing."""
    with pytest.raises(RuntimeError), engine.start("j", {"n": "b"}) as run:
        run.effect("send", "local_write", execute=lambda _k: "ok")
        raise RuntimeError("boom")
    ledger = engine.ledger
    assert ledger.outcome("j:b").state == "failed"  # type: ignore[union-attr]
    begun = engine.begin("j", {"n": "b"}, folder=False)
    assert begun.status is ClaimStatus.STARTED and begun.claim.attempt is not None
    assert begun.claim.attempt.number == 2
    history = ledger.history("j:b")
    busy = engine.begin("j", {"n": "b"}, folder=False)
    assert busy.status is ClaimStatus.BUSY
    assert ledger.history("j:b") == history
    assert begun.run is not None
    begun.run.close(success=False, reason="test")


def test_a_key_another_job_holds_is_refused_and_nothing_is_written(engine: Engine) -> None:
    """Two jobs whose rules render the same key: the first look reads the other job's
    outcome, and the claim refuses it by name, done or not, writing nothing."""
    with engine.start("j", {"n": "d"}) as run:
        run.effect("send", "local_write", execute=lambda _k: "ok")
    history = engine.ledger.history("j:d")
    with pytest.raises(InvalidInput, match="belongs to job 'j', not 'k'"):
        engine.begin("k", {"n": "d"}, folder=False)
    assert engine.ledger.history("j:d") == history


def test_a_done_occurrence_stays_done_when_the_clock_is_set_back(engine: Engine) -> None:
    """The first look is not taken for an occurrence ahead of its time: a done one still
    answers done (the read comes first), a new one is refused and nothing is written."""
    at = format_occurrence(DAILY, WARSAW, next_occurrence(DAILY, WARSAW, datetime.now(UTC)))
    ahead = datetime.now(UTC) + timedelta(days=2)  # its time has come, as far as we know
    run = engine.begin("s", {"at": at}, now=ahead, folder=False).run
    assert run is not None
    run.effect("send", "local_write", execute=lambda _k: "ok")
    run.close(success=True)
    assert engine.ledger.outcome(f"s:{at}").state == "done"  # type: ignore[union-attr]
    again = engine.begin("s", {"at": at}, folder=False)  # now: its time is still ahead
    assert again.status is ClaimStatus.DONE
    later = format_occurrence(DAILY, WARSAW, next_occurrence(DAILY, WARSAW, ahead))
    with pytest.raises(InvalidParameter):
        engine.begin("s", {"at": later}, folder=False)
    assert engine.ledger.outcome(f"s:{later}") is None


def test_a_key_inserted_while_the_first_look_ran_is_neither_claimed_nor_read(
        pg_db: str, engine: Engine) -> None:
    """Another claim's insert, committed after the statement began: the statement waits
    for it, claims nothing and cannot read it (its snapshot is older), so it says so,
    and a begin goes on to read the outcome and answer from it."""
    ledger = open_ledger(pg_db)
    try:
        result: list[Any] = []
        with psycopg.connect(pg_db) as other, psycopg.connect(pg_db, autocommit=True) as watch:
            other.execute("INSERT INTO rs_outcomes (key, job, params, state, created_at,"
                          " updated_at) VALUES ('j:c', 'j', '{\"n\":\"c\"}', 'planned', 0, 0)")
            looker = threading.Thread(target=lambda: result.append(ledger.claim_or_read(
                "j:c", job="j", params={"n": "c"}, holder=Holder("host", 1, "boot:1"),
                lease_seconds=60)))
            looker.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until it waits for the insert
                waiting = watch.execute(  # (its own: a transaction reads activity once)
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE 'WITH o AS (INSERT%'").fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.02)
            other.commit()
            looker.join(30)
        assert result == [(None, None, [])]
        out = ledger.outcome("j:c")
        assert out is not None and out.state == "planned" and out.attempts == 0
        begun = engine.begin("j", {"n": "c"}, folder=False)
        assert begun.status is ClaimStatus.STARTED and begun.claim.attempt is not None
        assert begun.claim.attempt.number == 1
        assert begun.run is not None
        begun.run.close(success=False, reason="test")
    finally:
        ledger.close()


def test_sixteen_engines_starting_one_new_outcome_at_once_start_one_attempt(
        pg_db: str, engine: Engine) -> None:
    """Sixteen engines (each its own connections) begin the same new outcome at once:
    the first looks race on one insert, and whichever way each loses (it reads the
    winner's outcome, or it waited on the insert and reads again), exactly one attempt
    starts and every other answers busy, nothing else written."""
    home = engine.home
    barrier, ended = threading.Barrier(16), threading.Barrier(16)
    statuses: list[ClaimStatus] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with Engine.open(home, ledger=pg_db) as mine:
                barrier.wait(30)
                begun = mine.begin("j", {"n": "race"}, folder=False)
                statuses.append(begun.status)
                # the started attempt's run is kept until every engine has answered: a
                # run of this process that is gone lets the next claim take it over
                ended.wait(30)
                if begun.run is not None:
                    begun.run.close(success=False, reason="test")
        except BaseException as exc:  # (reported below, not lost in the thread)
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(statuses) == sorted([ClaimStatus.STARTED] + [ClaimStatus.BUSY] * 15)
    assert len(engine.ledger.attempts("j:race")) == 1
    started = [e for e in engine.ledger.history("j:race") if e.kind == "attempt"]
    assert [e.to_state for e in started] == ["active", "finished"]  # (closed above)


def test_once_records_and_finishes_in_one_statement(engine: Engine, sent: list[str]) -> None:
    """``once()`` on a server: the claim with the intent, and the record with the finish
    are two statements (``start()`` with ``effect()``: four), and the outcome's history
    is the same but for the progress mark between the record and the finish."""
    assert engine.once("j", {"n": "b"}, "send", "local_write", execute=lambda k: "m-1") == "m-1"
    assert len(sent) == 2, sent
    assert "INSERT INTO rs_steps" in sent[0] and "set_config" not in sent[0]  # (synced)
    assert "rs_attempts" in sent[-1] and "UPDATE rs_steps" in sent[-1]
    out = engine.ledger.outcome("j:b")
    assert out is not None and (out.state, out.current_attempt) == ("done", None)
    assert out.accepted_attempt is not None
    attempt = engine.ledger.attempts("j:b")[0]
    assert (attempt.state, attempt.result) == ("finished", "done")
    step = engine.ledger.step("j:b/send")
    assert step is not None and (step.state, step.evidence) == ("done", "m-1")
    ids = [e.id for e in engine.ledger.history("j:b")]
    assert ids == sorted(ids) and [(e.kind, e.to_state) for e in engine.ledger.history("j:b")][-3:] \
        == [("step", "done"), ("attempt", "finished"), ("outcome", "done")]
    sent.clear()
    assert engine.once("j", {"n": "b"}, "send", "local_write", execute=lambda k: "no") == "m-1"
    assert len(sent) == 1


def _rows(pg_db: str, key: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The outcome's step rows and history rows as written, without what differs from
    one run to another (times, ids, the attempt id, the key's own text)."""
    with psycopg.connect(pg_db) as conn:
        steps = conn.execute(
            "SELECT name, item, kind, effect_class, state, fence, evidence, artifact, checksum,"
            " check_cmd, connector, fingerprint, reason, cause, approved_by, runner_host,"
            " runner_pid, runner_started, tries, previous_state, created_at = updated_at"
            " FROM rs_steps WHERE outcome_key = %s ORDER BY step_key", (key,)).fetchall()
        history = conn.execute(
            "SELECT substr(step_key, length(outcome_key) + 1), attempt_id IS NULL, fence, actor,"
            " kind, from_state, to_state, reason FROM rs_events WHERE outcome_key = %s"
            " ORDER BY id", (key,)).fetchall()
    return steps, history


@pytest.mark.parametrize("given", [
    {},
    {"check": "test -e x", "connector_name": "mine", "payload": {"to": "a", "n": 1}},
    {"item": "it-1", "lookup": lambda _k: None},
])
def test_once_writes_the_intent_with_the_claim_as_effect_writes_it(
        engine: Engine, pg_db: str, sent: list[str], given: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The intent a new outcome's claim writes (once() on a server, one statement) is the
    row and the history effect() writes after a claim alone: compared with the same
    once() with that shortcut switched off (its claim and intent two statements)."""
    def execute(_k: str) -> str:
        assert len(sent) == 1, sent  # the claim and the intent, then nothing before this
        return "m-9"

    assert engine.once("j", {"n": "merged"}, "send", "local_write", execute=execute,
                       **given) == "m-9"
    sent.clear()
    monkeypatch.setattr(engine_module, "_first_intent", lambda *_a: None)

    def apart(_k: str) -> str:
        assert len(sent) == 2, sent  # the claim, the intent
        return "m-9"

    assert engine.once("j", {"n": "apart"}, "send", "local_write", execute=apart,
                       **given) == "m-9"
    merged, separate = _rows(pg_db, "j:merged"), _rows(pg_db, "j:apart")
    assert merged[0] and merged == separate
    assert [h[4:7] for h in merged[1]][:3] == [("attempt", "", "active"),
                                              ("outcome", "planned", "running"),
                                              ("step", "", "running")]


def test_a_lookup_first_or_approval_step_is_not_written_with_the_claim(
        engine: Engine, sent: list[str]) -> None:
    """once() writes the intent with the claim only where effect() would write it first
    thing: a class that needs approval waits for it (nothing running), and a
    lookup-first class asks its lookup before any intent."""
    from retrysafe.connectors import ABSENT
    from retrysafe.errors import ApprovalRequired

    with pytest.raises(ApprovalRequired):
        engine.once("j", {"n": "pay"}, "charge", "payment", execute=lambda _k: "no")
    assert "INSERT INTO rs_steps" not in sent[0], sent
    step = engine.ledger.step("j:pay/charge")
    assert step is not None and step.state == "blocked"
    sent.clear()
    asked: list[str] = []
    assert engine.once("j", {"n": "ask"}, "post", "message",
                       execute=lambda _k: "p-1",
                       lookup=lambda k: asked.append(k) or ABSENT) == "p-1"
    assert asked == ["j:ask/post"]
    assert "INSERT INTO rs_steps" not in sent[0], sent


def test_once_after_a_done_outcome_reads_narrowly_then_claims_with_the_intent(
        engine: Engine, sent: list[str]) -> None:
    """An engine that met a done outcome reads first: once()'s read is the narrow one (the
    outcome's state and the one step), which answers a re-run by itself; a key it finds
    new is then claimed with its intent by the first look, as on a fresh engine: three
    statements for that first run, one for a re-run."""
    assert engine.once("j", {"n": "c"}, "send", "local_write", execute=lambda k: "c-1") == "c-1"
    sent.clear()
    # (the first look, which claims first, finds it done: the engine reads first from now on)
    assert engine.once("j", {"n": "c"}, "send", "local_write", execute=lambda k: "no") == "c-1"
    assert len(sent) == 1 and sent[0].startswith("WITH o AS (INSERT"), sent
    sent.clear()
    assert engine.once("j", {"n": "c"}, "send", "local_write", execute=lambda k: "no") == "c-1"
    assert len(sent) == 1 and "s.kind, s.evidence, s.fingerprint" in sent[0], sent
    sent.clear()
    assert engine.once("j", {"n": "d"}, "send", "local_write", execute=lambda k: "d-1") == "d-1"
    assert len(sent) == 3, sent
    assert "s.kind, s.evidence" in sent[0] and "INSERT INTO rs_steps" in sent[1], sent
