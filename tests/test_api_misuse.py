"""The Python API misused: wrong types from ``execute`` and ``lookup``, clashing step
names, parameters that are not text. Each is one error of retrysafe's own types, the
ledger stays right, and no effect is repeated."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import ledger_states as _states

import retrysafe
from retrysafe import ABSENT, Found
from retrysafe.errors import AttemptNotActive, InvalidInput, InvalidParameter, StepUnknown

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "str" }
max_attempts = 5

[jobs.count]
key = "count:{n}"
params = { n = "int" }
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "retrysafe.toml").write_text(CONFIG)
    return tmp_path


def _ledger(home: Path) -> retrysafe.Ledger:
    return retrysafe.open_ledger(f"sqlite:///{home / 'ledger.sqlite3'}")


def _explode(key: str) -> str:
    raise ConnectionError("dropped")


@pytest.mark.parametrize("answer", ["msg-1", None, True, Found(42), Found(None)],  # type: ignore[arg-type]
                         ids=["bare-evidence", "none", "true", "found-int", "found-none"])
def test_a_lookup_answer_of_another_type_is_refused_and_nothing_runs_again(
        home: Path, answer: object) -> None:
    """A lookup that answers with a bare evidence string, ``None`` or ``True`` (not
    ``Found``/``ABSENT``/``Ambiguous``) was taken as "absent": the effect that may have
    happened ran again. It is refused now; the step stays unknown, the outcome too."""
    calls: list[str] = []
    with pytest.raises(StepUnknown), retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.effect("send", "message", execute=_explode, lookup=lambda k: ABSENT)
    with pytest.raises(InvalidInput, match=r"the lookup answered .* nothing was executed"), \
            retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.effect("send", "message", execute=lambda k: calls.append(k) or "msg-2",
                   lookup=lambda k: answer)  # type: ignore[arg-type, return-value]
    assert calls == []
    state, steps = _states(home, "report:w1")
    assert state == "unknown" and steps["send"][0] == "unknown"
    # before the first execution (lookup_first) the same: nothing runs, nothing is recorded
    with pytest.raises(InvalidInput, match="the lookup answered"), \
            retrysafe.start("report", {"week": "w2"}, home=home) as run:
        run.effect("send", "message", execute=lambda k: calls.append(k) or "msg-3",
                   lookup=lambda k: answer)  # type: ignore[arg-type, return-value]
    assert calls == [] and _states(home, "report:w2") == ("failed", {})


def _generator(key: str) -> Iterator[str]:
    yield "never ran"


@pytest.mark.parametrize("execute", [
    lambda k: 42, lambda k: {"id": 7}, lambda k: b"msg-1", _generator,
    lambda k: "msg\x001", lambda k: "msg-\udcff",
], ids=["int", "dict", "bytes", "generator", "nul", "not-utf8"])
def test_execute_returning_no_storable_evidence_leaves_the_step_unknown(
        home: Path, execute: Callable[[str], Any]) -> None:
    """``execute`` returned something that is not evidence text (or text no ledger holds):
    the step was left ``running`` under a raw AttributeError, a ledger error or an
    InvalidInput, its reason "its process ended before recording a result" (on SQLite a
    NUL was stored, on PostgreSQL refused). Now it is ``unknown`` with the reason, the
    error is StepUnknown, and the next run looks it up instead of executing again."""
    with pytest.raises(StepUnknown, match="execute returned") as err, \
            retrysafe.start("report", {"week": "w3"}, home=home) as run:
        run.effect("send", "message", execute=execute)
    assert isinstance(err.value, retrysafe.errors.RetrysafeError)
    state, steps = _states(home, "report:w3")
    assert state == "unknown"
    assert steps["send"][0] == "unknown" and steps["send"][1].startswith("execute returned")
    calls: list[str] = []
    with retrysafe.start("report", {"week": "w3"}, home=home) as run:
        got = run.effect("send", "message", execute=lambda k: calls.append(k) or "again",
                         lookup=lambda k: Found("msg-1"))
    assert got == "msg-1" and calls == []
    assert _states(home, "report:w3")[0] == "done"


def test_an_effect_named_like_a_generate_step_is_refused_not_skipped(home: Path) -> None:
    """An effect given the name of a generate step was answered with the artifact's
    checksum as its evidence and never executed, silently."""
    calls: list[str] = []
    with pytest.raises(InvalidInput, match="is a generate step"), \
            retrysafe.start("report", {"week": "w4"}, home=home) as run:
        run.generate("report", lambda p: p.write_text("hello"))
        run.effect("report", "message", execute=lambda k: calls.append(k) or "msg-1")
    assert calls == []
    with retrysafe.start("report", {"week": "w4"}, home=home) as run:
        assert run.effect("send", "message", execute=lambda k: calls.append(k) or "msg-1") \
            == "msg-1"
    assert calls == ["report:w4/send"] and _states(home, "report:w4")[0] == "done"


@pytest.mark.parametrize(("job", "params"), [
    ("count", {"n": 5}), ("count", {"n": True}), ("report", {"week": 1.5}),
    ("report", {"week": ["a"]}), ("report", {"week": datetime.date(2026, 8, 3)}),
    ("report", {"week": b"w5"}), ("report", "week=w5"),
])
def test_parameters_that_are_not_text_are_refused(home: Path, job: str, params: Any) -> None:
    """Parameters must be text: an int, a list, a date or bytes was a raw TypeError or
    AttributeError from deep inside; now it is InvalidParameter, and nothing is made."""
    with pytest.raises(InvalidParameter, match="text"), \
            retrysafe.start(job, params, home=home):
        pass
    ledger = _ledger(home)
    try:
        assert ledger.outcomes() == []
    finally:
        ledger.close()
    with retrysafe.start("count", {"n": "5"}, home=home) as run:
        assert run.key == "count:5"


def test_a_run_used_after_its_block_and_an_interrupt_mid_effect(home: Path) -> None:
    """A run kept past its ``with`` block refuses to write (AttemptNotActive). A
    KeyboardInterrupt inside ``execute`` propagates as it is, the step is ``unknown``
    (never repeated blindly) and the outcome too."""
    with retrysafe.start("report", {"week": "w6"}, home=home) as run:
        run.effect("first", "message", execute=lambda k: "msg-1")
    with pytest.raises(AttemptNotActive):
        run.effect("late", "message", execute=lambda k: "msg-2")

    def interrupted(key: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), \
            retrysafe.start("report", {"week": "w7"}, home=home) as run:
        run.effect("send", "message", execute=interrupted)
    state, steps = _states(home, "report:w7")
    assert state == "unknown" and steps == {"send": ("unknown", "KeyboardInterrupt")}


def test_an_explicit_close_inside_the_block_is_not_closed_again(home: Path) -> None:
    """``run.close(success=True)`` inside the ``with`` block, then the block ends: the
    end closed the attempt a second time and raised AttemptNotActive ("has already
    finished") from a run that was done. An attempt closes once."""
    with retrysafe.start("report", {"week": "w8"}, home=home) as run:
        run.effect("send", "message", execute=lambda k: "msg-1")
        closed = run.close(success=True)
    assert closed.state == "done" and run.close(success=False).state == "done"
    state, steps = _states(home, "report:w8")
    assert state == "done" and steps == {"send": ("done", "")}
    with pytest.raises(AttemptNotActive):  # a closed attempt still writes nothing
        run.effect("late", "message", execute=lambda k: "msg-2")


@pytest.mark.parametrize("given", ["execute", "lookup"])
def test_an_execute_or_lookup_that_is_not_a_function_is_refused_before_the_intent(
        home: Path, given: str) -> None:
    """``execute="./send.sh"`` (a command line, as for ``retrysafe step``) wrote the
    intent, then failed calling it: the step was ``unknown`` and the next run blocked
    for a human, though nothing had happened. It is refused before anything is written."""
    functions: dict[str, Any] = {"execute": lambda k: "msg-1", "lookup": lambda k: ABSENT}
    functions[given] = "./send.sh"
    with pytest.raises(InvalidInput, match=f"{given}= must be a function"), \
            retrysafe.start("report", {"week": "w9"}, home=home) as run:
        run.effect("send", "message", **functions)
    assert _states(home, "report:w9") == ("failed", {})
    with retrysafe.start("report", {"week": "w9"}, home=home) as run:
        assert run.effect("send", "message", execute=lambda k: "msg-1") == "msg-1"


def test_a_busy_answer_names_each_live_process_once(tmp_path: Path) -> None:
    """The holder that also runs one of its steps is one process: the busy answer names it
    once (it was 'pid N (python), pid N (python)')."""
    from retrysafe.ledger import Holder
    from retrysafe.ledger.records import AttemptRecord
    from retrysafe.process import attempt_liveness, this_holder

    me = this_holder()
    attempt = AttemptRecord(id="a1", outcome_key="k", number=1, fence=1, state="active",
                            result="", holder=Holder(me.host, 1, None), lease_expires=0.0,
                            context={}, started_at=0.0, ended_at=None)
    runner = Holder(me.host, 1, None)  # pid 1 lives on every Linux host
    alive, why = attempt_liveness(attempt, [runner])
    assert alive is True
    assert why.count("pid 1 ") == 1, why
