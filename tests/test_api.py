"""The Python API: the same guarantees as the CLI, from library code."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import pytest

import retrysafe
from retrysafe import ABSENT, Ambiguous, EffectFailed, Found
from retrysafe.errors import (
    ApprovalRequired,
    AttemptsExhausted,
    Busy,
    InvalidParameter,
    PayloadMismatch,
    StepBlocked,
    StepFailed,
    StepUnknown,
)

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
max_attempts = 3
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "retrysafe.toml").write_text(CONFIG)
    return tmp_path


class Outbox:
    """A tiny external system: sent messages by step key."""

    def __init__(self) -> None:
        self.sent: dict[str, str] = {}
        self.ids = itertools.count(1)

    def send(self, key: str) -> str:
        self.sent[key] = f"msg-{next(self.ids)}"
        return self.sent[key]

    def lookup(self, key: str) -> Found | type[ABSENT]:  # type: ignore[valid-type]
        return Found(self.sent[key]) if key in self.sent else ABSENT


def test_effect_once_and_done_is_read_only(home: Path) -> None:
    """A second start of a done outcome executes nothing and returns the evidence."""
    box = Outbox()
    with retrysafe.start("report", {"week": "2026-W32"}, home=home) as run:
        draft = run.generate("draft", lambda p: p.write_text("hello"))
        assert draft.read_text() == "hello"
        assert run.effect("send", "message", execute=box.send, lookup=box.lookup) == "msg-1"
    with retrysafe.start("report", {"week": "2026-W32"}, home=home) as again:
        assert again.read_only
        assert again.effect("send", "message", execute=box.send) == "msg-1"
    assert box.sent == {"report:2026-W32/send": "msg-1"}


def test_a_step_done_in_an_earlier_attempt_is_skipped_and_left_untouched(home: Path) -> None:
    """The next attempt writes its intent without reading first; a step that is
    already done is then read and skipped: not executed, not moved, no history."""
    box = Outbox()

    def refuse(key: str) -> str:
        raise EffectFailed("503, nothing sent")

    with pytest.raises(StepFailed), retrysafe.start("report", {"week": "2026-W33"}, home=home) as run:
        run.effect("send", "message", execute=box.send)
        run.effect("post", "publish", execute=refuse)
    ledger = retrysafe.open_ledger(f"sqlite:///{home / 'ledger.sqlite3'}")
    try:
        before = [e for e in ledger.history("report:2026-W33") if e.step_key.endswith("/send")]
        with retrysafe.start("report", {"week": "2026-W33"}, home=home) as run:
            assert run.number == 2
            assert run.effect("send", "message", execute=box.send) == "msg-1"
            assert run.effect("post", "publish", execute=box.send) == "msg-2"
        after = [e for e in ledger.history("report:2026-W33") if e.step_key.endswith("/send")]
        assert after == before and [(e.from_state, e.to_state) for e in after] == [
            ("", "running"), ("running", "done")]
        out = ledger.outcome("report:2026-W33")
        assert out is not None and out.state == "done"
    finally:
        ledger.close()
    assert box.sent == {"report:2026-W33/send": "msg-1", "report:2026-W33/post": "msg-2"}


def test_unknown_effect_is_looked_up_not_repeated(home: Path) -> None:
    """A timeout after the provider accepted: the next attempt finds it by lookup."""
    box = Outbox()

    def send_then_time_out(key: str) -> str:
        box.send(key)
        raise TimeoutError("no answer")

    with pytest.raises(StepUnknown), retrysafe.start("report", {"week": "2026-W01"}, home=home) as run:
        run.effect("send", "message", execute=send_then_time_out, lookup=box.lookup)
    with retrysafe.start("report", {"week": "2026-W01"}, home=home) as run:
        assert run.effect("send", "message", execute=box.send, lookup=box.lookup) == "msg-1"
    assert len(box.sent) == 1


def test_ambiguous_lookup_blocks_and_resolve_continues(home: Path) -> None:
    """Ambiguity stops the run; a human's resolve lets it finish."""
    def explode(key: str) -> str:
        raise ConnectionError("dropped")

    with pytest.raises(StepUnknown), retrysafe.start("report", {"week": "2026-W02"}, home=home) as run:
        run.effect("post", "publish", execute=explode, lookup=lambda k: ABSENT)
    with pytest.raises(StepBlocked) as err, retrysafe.start("report", {"week": "2026-W02"}, home=home) as run:
        run.effect("post", "publish", execute=explode, lookup=lambda k: Ambiguous("two drafts titled X"))
    assert err.value.unblock and "resolve report:2026-W02 post" in err.value.unblock
    with retrysafe.Engine.open(home) as engine:
        engine.ledger.resolve("report:2026-W02", "post", found="post-9", actor="ops")
    with retrysafe.start("report", {"week": "2026-W02"}, home=home) as run:
        assert run.effect("post", "publish", execute=explode) == "post-9"


def test_definite_failure_and_attempt_limit(home: Path) -> None:
    """EffectFailed is failed (retried next attempt); past the limit the outcome blocks."""
    def refuse(key: str) -> str:
        raise EffectFailed("403 forbidden")

    for _ in range(3):
        with pytest.raises(StepFailed), retrysafe.start("report", {"week": "2026-W03"}, home=home) as run:
            run.effect("post", "publish", execute=refuse)
    with pytest.raises(AttemptsExhausted), retrysafe.start("report", {"week": "2026-W03"}, home=home):
        pass


def test_payment_waits_for_approval(home: Path) -> None:
    """payment needs an approval record before execute is ever called."""
    calls: list[str] = []
    with pytest.raises(ApprovalRequired), retrysafe.start("report", {"week": "2026-W04"}, home=home) as run:
        run.effect("charge", "payment", execute=lambda k: calls.append(k) or "ch_1")
    assert calls == []


def test_payload_change_is_refused(home: Path) -> None:
    """The same step key with a different payload is an error, not a silent second effect."""
    from retrysafe.connectors.base import ConnectorBase

    class Sink(ConnectorBase):
        effect_class = "publish"

        def __init__(self) -> None:
            self.rows: dict[str, dict[str, str]] = {}

        def execute(self, step_key, payload):  # type: ignore[no-untyped-def]
            self.rows[step_key] = dict(payload)
            return step_key

        def lookup(self, step_key, payload):  # type: ignore[no-untyped-def]
            return Found(step_key) if step_key in self.rows else ABSENT

    sink = Sink()
    with retrysafe.start("report", {"week": "2026-W05"}, home=home) as run:
        run.effect("row", connector=sink, payload={"title": "a"})
    with pytest.raises(PayloadMismatch), retrysafe.start("report", {"week": "2026-W05"}, home=home) as run:
        # the outcome is done: a different payload is still refused
        run.effect("row", connector=sink, payload={"title": "b"})


def test_busy_while_another_attempt_holds_the_lease(home: Path) -> None:
    """A second start inside a live attempt of the same outcome is Busy."""
    with (retrysafe.start("report", {"week": "2026-W06"}, home=home), pytest.raises(Busy),
          retrysafe.start("report", {"week": "2026-W06"}, home=home)):
        pass


def test_public_exports_are_one_table_and_the_type_checker_sees_the_same(home: Path) -> None:
    """``retrysafe.__all__`` comes from one table; the type-checking imports name the
    same objects, each resolves, and internal types (Start, Decision) stay internal."""
    import ast
    import importlib.metadata

    tree = ast.parse(Path(retrysafe.__file__).read_text("utf-8"))
    guarded = next(n for n in tree.body if isinstance(n, ast.If)
                   and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
    typed = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert {name: mod.lstrip(".") for name, mod in typed.items() if mod} == retrysafe._EXPORTS
    assert sorted(retrysafe.__all__) == sorted(typed)
    for name in retrysafe.__all__:
        assert getattr(retrysafe, name) is not None
    assert "Start" not in retrysafe.__all__ and "Decision" not in retrysafe.__all__
    assert retrysafe.__version__ == importlib.metadata.version("retrysafe")


def test_a_blocked_step_says_its_cause_and_an_unblock_command_quoted_for_the_shell(
        tmp_path: Path) -> None:
    """The block cause is a type the code decides by; the unblock command is built
    from it once and quoted once, so a key with a space or a quote pastes safely."""
    import shlex

    from retrysafe.states import BlockCause

    (tmp_path / "retrysafe.toml").write_text(
        '[jobs.team]\nkey = "team:{name}"\nparams = { name = "str" }\n')
    name = "ops it's me"

    def explode(key: str) -> str:
        raise ConnectionError("dropped")

    with pytest.raises(StepUnknown), retrysafe.start("team", {"name": name}, home=tmp_path) as run:
        run.effect("post", "publish", execute=explode, lookup=lambda k: ABSENT)
    with pytest.raises(StepBlocked) as err, retrysafe.start("team", {"name": name}, home=tmp_path) as run:
        run.effect("post", "publish", execute=explode, lookup=lambda k: Ambiguous("two drafts"))
    assert err.value.cause is BlockCause.AMBIGUOUS
    words = shlex.split(err.value.unblock.split(" | ")[0].replace("<EVIDENCE>", "EVIDENCE"))
    # (the home given to start() is named: pasted in a shell, the line acts on it)
    home = ["--home", str(tmp_path)]
    assert words == ["retrysafe", *home, "resolve", f"team:{name}", "post", "--found", "EVIDENCE"]
    with pytest.raises(ApprovalRequired) as approval, \
            retrysafe.start("team", {"name": "x"}, home=tmp_path) as run:
        run.effect("charge", "payment", execute=lambda k: "ch_1")
    assert approval.value.cause is BlockCause.APPROVAL
    assert shlex.split(approval.value.unblock) == ["retrysafe", *home, "approve", "team:x",
                                                   "charge"]
    with retrysafe.Engine.open(tmp_path) as engine:
        step = engine.ledger.step("team:x/charge")
        assert step is not None and (step.state, step.cause) == ("blocked", "approval")
        out = engine.ledger.outcome("team:x")
        assert out is not None and (out.state, out.cause) == ("blocked", "approval")


@pytest.mark.parametrize("answer", ["absent", "found"])
def test_a_human_resolve_landing_during_the_lookup_is_taken_and_the_run_goes_on(
        home: Path, answer: str) -> None:
    """While a run looks an unknown step up, a human records ``resolve --found``: the
    run takes the human's evidence (whatever its own lookup answered), never
    executes, and the outcome ends done."""
    calls: list[str] = []

    def explode(key: str) -> str:
        raise ConnectionError("dropped")

    with pytest.raises(StepUnknown), retrysafe.start("report", {"week": "2026-W20"}, home=home) as run:
        run.effect("send", "message", execute=explode, lookup=lambda k: ABSENT)

    def human_meanwhile(key: str) -> Found | type[ABSENT]:  # type: ignore[valid-type]
        with retrysafe.Engine.open(home) as engine:
            engine.ledger.resolve("report:2026-W20", "send", found="human-1", actor="ops")
        return ABSENT if answer == "absent" else Found("lookup-1")

    with retrysafe.start("report", {"week": "2026-W20"}, home=home) as run:
        got = run.effect("send", "message", execute=lambda k: calls.append(k) or "msg-2",
                         lookup=human_meanwhile)
    assert got == "human-1" and calls == []
    with retrysafe.Engine.open(home) as engine:
        step = engine.ledger.step("report:2026-W20/send")
        out = engine.ledger.outcome("report:2026-W20")
        assert step is not None and step.evidence == "human-1"
        assert out is not None and out.state == "done"


def test_lookup_first_finds_an_effect_the_ledger_never_saw(tmp_path: Path) -> None:
    """A message already in the external system (a lost ledger, another home) is found
    before the first execution and recorded, not sent again; ``lookup_first = false``
    turns that off, and classes without it (local_write) are never looked up first."""
    (tmp_path / "retrysafe.toml").write_text(CONFIG + """
[jobs.blind]
key = "blind:{week}"
params = { week = "isoweek" }
[jobs.blind.classes.message]
lookup_first = false
""")
    box = Outbox()
    box.sent["report:2026-W30/send"] = "msg-earlier"
    looked: list[str] = []

    def lookup(key: str) -> Found | type[ABSENT]:  # type: ignore[valid-type]
        looked.append(key)
        return box.lookup(key)

    with retrysafe.start("report", {"week": "2026-W30"}, home=tmp_path) as run:
        assert run.effect("send", "message", execute=box.send, lookup=lookup) == "msg-earlier"
        assert run.effect("note", "local_write", execute=lambda k: "ok", lookup=lookup) == "ok"
    assert looked == ["report:2026-W30/send"] and len(box.sent) == 1
    box.sent["blind:2026-W30/send"] = "msg-earlier"
    with retrysafe.start("blind", {"week": "2026-W30"}, home=tmp_path) as run:
        assert run.effect("send", "message", execute=box.send, lookup=lookup) == "msg-1"
    assert looked == ["report:2026-W30/send"]


def test_a_process_that_dropped_its_attempt_takes_it_over_itself(home: Path) -> None:
    """A worker that let an attempt go without closing it (a swallowed error) is alive,
    but no longer works on it: claiming the outcome again takes it over at once,
    while an attempt it still holds a Run for stays busy."""
    import gc

    with retrysafe.Engine.open(home) as engine:
        first = engine.begin("report", {"week": "2026-W40"})
        assert first.status == "started" and first.run is not None
        assert engine.begin("report", {"week": "2026-W40"}).status == "busy"
        first = None  # type: ignore[assignment]
        gc.collect()
        again = engine.begin("report", {"week": "2026-W40"})
        assert again.status == "started" and again.run is not None and again.run.number == 2
        assert again.claim.superseded is not None


def test_a_process_that_dropped_its_attempt_mid_step_takes_it_over_itself(home: Path) -> None:
    """The same, with a step it left ``running`` (its own process the runner): the
    re-claim takes the attempt over and the step becomes unknown, so it is looked up."""
    import gc

    with retrysafe.Engine.open(home) as engine:
        first = engine.begin("report", {"week": "2026-W41"})
        assert first.run is not None
        first.run.intent("send", "message")
        first = None  # type: ignore[assignment]
        gc.collect()
        again = engine.begin("report", {"week": "2026-W41"})
        assert again.status == "started", again.reason
        step = engine.ledger.step("report:2026-W41/send")
        assert step is not None and step.state == "unknown"


def test_an_attempt_dropped_inside_an_error_cycle_is_taken_over_without_a_collection(
        home: Path) -> None:
    """A worker that met an error, kept it, and moved on: the error's traceback holds the
    frame that held the Run, the frame holds the error. Nothing reaches the Run, but it
    lives until the cycle collector runs, which in a long-lived worker may be never
    (objects in its oldest generation wait for a full collection). Claiming the outcome
    again must take the attempt over now, not stay busy for as long as that garbage
    lives; a Run still reachable stays busy."""
    import gc

    def work_and_fail(engine: retrysafe.Engine) -> None:
        begun = engine.begin("report", {"week": "2026-W42"})
        assert begun.status == "started" and begun.run is not None
        try:
            begun.run.effect("send", "message", execute=lambda key: "msg-1")
            raise ConnectionError("the ledger went away before close")
        except ConnectionError as exc:
            error = exc  # frame -> error -> traceback -> frame: a cycle holding `begun`
        assert error.__traceback__ is not None

    with retrysafe.Engine.open(home) as engine:
        gc.collect()
        gc.disable()  # as if the collector did not get to the cycle
        try:
            work_and_fail(engine)
            again = engine.begin("report", {"week": "2026-W42"})
            assert again.status == "started", again.reason
            assert again.claim.superseded is not None
            assert again.run is not None and again.run.number == 2
            # the step was done: the second attempt does not send again
            assert again.run.effect("send", "message", execute=lambda key: "msg-2") == "msg-1"
            # a Run this process still holds keeps its outcome busy, collection or not
            assert engine.begin("report", {"week": "2026-W42"}).status == "busy"
            again.run.close(success=True)
        finally:
            gc.enable()


def test_intend_refuses_an_absent_that_is_not_text_and_records_nothing(home: Path) -> None:
    """``intend(absent=...)`` with bytes that are not UTF-8 (a surrogate-escaped file name):
    one InvalidInput, as the ledger gives for such a value, and nothing recorded; it was a
    UnicodeEncodeError from the attempt log. The attempt goes on."""
    import os

    from retrysafe.engine import Engine
    from retrysafe.errors import InvalidInput

    with Engine.open(home) as engine:
        begun = engine.begin("report", {"week": "2026-W32"})
        run = begun.run
        assert run is not None
        with pytest.raises(InvalidInput, match="not UTF-8 text"):
            run.intend("send", "message", absent=os.fsdecode(b"shelf \xff"))
        assert engine.ledger.steps(begun.key) == []
        run.intend("send", "message", absent="shelf 3")
        assert [s.state for s in engine.ledger.steps(begun.key)] == ["running"]
        run.close(success=False, reason="test over")


def test_retrying_an_outcome_this_process_holds_collects_once_a_second(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads of one process retrying an outcome another of its Runs really holds are
    answered busy each time, and the garbage collection that lets a dropped Run go
    (process.held) runs once a second for that attempt, before the claim, not once a
    try inside the claim's transaction."""
    import gc

    from retrysafe import process

    calls: list[bool] = []
    real = gc.collect

    def counting(*args: object) -> int:
        calls.append(True)
        return real(*args)  # type: ignore[arg-type]

    with retrysafe.Engine.open(home) as engine:
        begun = engine.begin("report", {"week": "2026-W43"})
        assert begun.status == "started" and begun.run is not None
        assert begun.claim.attempt is not None
        held = begun.claim.attempt.id
        monkeypatch.setattr(process.gc, "collect", counting)
        for _ in range(5):
            assert engine.begin("report", {"week": "2026-W43"}).status == "busy"
        assert len(calls) == 1
        # the next second's collection: made before the claim's write transaction began
        backend = engine.ledger.backend
        original = backend.transaction
        writes: list[int] = []

        def watched(write: bool = True, **kwargs: bool):  # type: ignore[no-untyped-def]
            if write:
                writes.append(len(calls))
            return original(write, **kwargs)

        monkeypatch.setattr(backend, "transaction", watched)
        process._COLLECTED.clear()
        assert engine.begin("report", {"week": "2026-W43"}).status == "busy"
        assert len(calls) == 2 and writes == [2]
        begun.run.close(success=True)
    assert held not in process._COLLECTED


def test_an_engine_renders_a_key_once_and_still_refuses_bad_parameters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine keeps the key its job renders from the same parameters (a worker asks
    again and again), hands out its own copy of the canonical parameters each time, and
    still refuses a value that is not text; a job whose key the clock fills in (an
    occurrence left out) is rendered afresh each time; a drill trial still gets its mark."""
    (tmp_path / "retrysafe.toml").write_text(CONFIG + """
[jobs.nightly]
key = "nightly:{run}"
params = { run = "occurrence" }
schedule = "0 3 * * *"
""")
    with retrysafe.Engine.open(tmp_path) as engine:
        _spec, key, canonical = engine.outcome_key("report", {"week": "2026-W42"})
        assert (key, canonical) == ("report:2026-W42", {"week": "2026-W42"})
        canonical["week"] = "changed"
        assert engine.outcome_key("report", {"week": "2026-W42"})[1:] == (
            "report:2026-W42", {"week": "2026-W42"})
        for bad in (5, ["2026-W42"], b"2026-W42"):
            with pytest.raises(InvalidParameter, match="not text"):
                engine.outcome_key("report", {"week": bad})  # type: ignore[dict-item]
        with pytest.raises(InvalidParameter):
            engine.outcome_key("report", {"week": "2026-W99"})
        with pytest.raises(InvalidParameter):  # refused each time, never kept
            engine.outcome_key("report", {"week": "2026-W99"})
        monkeypatch.setenv("RETRYSAFE_DRILL_TRIAL", "t1")
        assert engine.outcome_key("report", {"week": "2026-W42"})[1] == "report:2026-W42~t1"
        monkeypatch.delenv("RETRYSAFE_DRILL_TRIAL")
        early = datetime(2026, 10, 1, 4, 0, tzinfo=UTC)
        late = datetime(2026, 10, 5, 4, 0, tzinfo=UTC)
        import retrysafe.schedule as schedule_mod

        real = schedule_mod.resolve_occurrence
        for moment in (early, late):
            monkeypatch.setattr(schedule_mod, "resolve_occurrence",
                                lambda s, tz, v, now, m=moment: real(s, tz, v, now or m))
            key = engine.outcome_key("nightly", {})[1]
            assert key.startswith(f"nightly:{moment:%Y-%m-%d}"), key
