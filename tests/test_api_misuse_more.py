"""More of the Python API misused: a step name that is not text, a ``validate`` that
returns nothing, an ``EffectFailed`` whose message is not UTF-8, and an engine used by
a child forked from the process that opened it. Each gives one clear error of
retrysafe's own types (or just works), and the ledger keeps what happened."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import pytest
from support import ledger_states as _states

import retrysafe
from retrysafe import ABSENT, EffectFailed
from retrysafe.errors import InvalidInput, StepFailed

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "str" }
max_attempts = 5
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "retrysafe.toml").write_text(CONFIG)
    return tmp_path


@pytest.mark.parametrize("name", [5, 2.5, None, b"send", ["send"]],
                         ids=["int", "float", "none", "bytes", "list"])
def test_a_step_or_item_name_that_is_not_text_is_refused_as_invalid_input(
        home: Path, name: Any) -> None:
    """``run.effect(5, ...)`` raised a bare TypeError from the name check; it is the
    same InvalidInput as any other bad name, saying a name is text, and nothing runs."""
    calls: list[str] = []
    with pytest.raises(InvalidInput, match=r"step name .* is not valid: give it as text"), \
            retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.effect(name, "message", execute=lambda k: calls.append(k) or "sent")
    if name is not None:  # (no item at all is item=None)
        with pytest.raises(InvalidInput, match=r"item name .* is not valid: give it as text"), \
                retrysafe.start("report", {"week": "w2"}, home=home) as run:
            run.effect("send", "message", item=name, execute=lambda k: calls.append(k) or "sent")
    with pytest.raises(InvalidInput, match=r"step name .* is not valid: give it as text"), \
            retrysafe.start("report", {"week": "w3"}, home=home) as run:
        run.generate(name, lambda out: out.write_text("x"))
    assert calls == []
    assert _states(home, "report:w1")[1] == {} and _states(home, "report:w2")[1] == {}


def test_a_validate_that_returns_none_says_what_it_should_return(home: Path) -> None:
    """A ``validate`` that forgets its ``return`` rejected the artifact with "validation
    rejected the artifact"; the error now says it returned None where True (accept) or
    False (reject) was expected. The step is failed, the next run produces it again."""
    with pytest.raises(StepFailed) as raised, \
            retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.generate("render", lambda out: out.write_text("report"), validate=lambda p: None)
    assert "validate returned None" in str(raised.value)
    assert "True" in str(raised.value) and "False" in str(raised.value)
    state, steps = _states(home, "report:w1")
    assert state == "failed" and steps["render"][0] == "failed"
    assert "validate returned None" in steps["render"][1]
    with retrysafe.start("report", {"week": "w1"}, home=home) as run:
        path = run.generate("render", lambda out: out.write_text("report"),
                            validate=lambda p: p.read_text() == "report")
    assert path.read_text() == "report"
    assert _states(home, "report:w1")[0] == "done"


@pytest.mark.parametrize(("message", "stored"), [
    (b"smtp said \xff\xfe no", "smtp said \\xff\\xfe no"),
    ("smtp said \udcff no", "smtp said \\xff no"),
    ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
    (b"plain bytes", "plain bytes"),
], ids=["bytes", "surrogate-escaped", "lone-surrogate", "utf8-bytes"])
def test_effect_failed_with_a_message_that_is_not_utf8_fails_the_step(
        home: Path, message: Any, stored: str) -> None:
    """The step said "nothing happened" (EffectFailed), but its message was bytes or held
    lone surrogates: the step ended unknown (a raw TypeError, or the ledger refusing the
    text), so the next run had to look it up. It is failed now, the message escaped."""
    def execute(key: str) -> str:
        raise EffectFailed(message)

    with pytest.raises(StepFailed) as raised, \
            retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.effect("send", "message", execute=execute)
    assert stored in str(raised.value)
    str(raised.value).encode("utf-8")  # text, all of it
    state, steps = _states(home, "report:w1")
    assert state == "failed"
    assert steps["send"] == ("failed", stored)
    # failed means nothing happened: the next run executes again, without a lookup
    with retrysafe.start("report", {"week": "w1"}, home=home) as run:
        assert run.effect("send", "message", execute=lambda k: "sent") == "sent"


def _child(work: Any) -> int:
    """Fork; run ``work`` in the child (its exit code: 0, or 1 with the traceback on
    stderr); returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit code
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_using_its_parents_engine_keeps_its_work(
        tmp_path: Path, ledger_url: str) -> None:
    """A child forked from a process with an open Engine used the parent's ledger
    connection. On SQLite the child did not hold the file's locks, so the parent's
    close removed the write-ahead log under it and the child's outcome, reported done,
    was lost; on PostgreSQL the parent's close ended the session the child still used.
    The child now opens connections of its own, and its work is kept."""
    (tmp_path / "retrysafe.toml").write_text(CONFIG)
    engine = retrysafe.Engine.open(tmp_path, ledger=ledger_url)
    with engine.start("report", {"week": "parent"}) as run:
        run.effect("send", "message", execute=lambda k: "sent-parent", lookup=lambda k: ABSENT)
    go_read, go_write = os.pipe()

    def child() -> None:
        os.read(go_read, 1)  # the parent closed its engine
        with engine.start("report", {"week": "child"}) as run:
            run.effect("send", "message", execute=lambda k: "sent-child", lookup=lambda k: ABSENT)
        # and ends as a multiprocessing worker does: os._exit, closing nothing

    pid = _child(child)
    engine.close()
    os.write(go_write, b"x")
    assert _exit_code(pid) == 0
    # the parent's engine works on after the child closed its own
    with engine.start("report", {"week": "after"}) as run:
        run.effect("send", "message", execute=lambda k: "sent-after", lookup=lambda k: ABSENT)
    engine.close()
    ledger = retrysafe.open_ledger(ledger_url)
    try:
        for week in ("parent", "child", "after"):
            out = ledger.outcome(f"report:{week}")
            assert out is not None and out.state == "done", week
            [step] = ledger.steps(f"report:{week}")
            assert step.evidence == f"sent-{week}"
    finally:
        ledger.close()
    for fd in (go_read, go_write):
        os.close(fd)


def test_a_forked_child_closing_the_engine_leaves_the_parents_connection_alone(
        tmp_path: Path, ledger_url: str) -> None:
    """The child ends with ``engine.close()`` (a ``with`` block, an exit handler): the
    parent's connection, which the child inherited, stays open and working for the
    parent."""
    (tmp_path / "retrysafe.toml").write_text(CONFIG)
    engine = retrysafe.Engine.open(tmp_path, ledger=ledger_url)
    with engine.start("report", {"week": "w1"}) as run:
        run.effect("send", "message", execute=lambda k: "one", lookup=lambda k: ABSENT)

    def child() -> None:
        with engine.start("report", {"week": "w2"}) as run:
            run.effect("send", "message", execute=lambda k: "two", lookup=lambda k: ABSENT)
        engine.close()

    assert _exit_code(_child(child)) == 0
    with engine.start("report", {"week": "w3"}) as run:
        run.effect("send", "message", execute=lambda k: "three", lookup=lambda k: ABSENT)
    assert [engine.ledger.outcome(f"report:w{n}").state for n in (1, 2, 3)] == ["done"] * 3
    engine.close()


def test_an_execute_that_returns_none_gives_the_same_evidence_on_every_run(home: Path) -> None:
    """``execute=lambda k: send(...)`` where ``send`` returns None: the effect happened,
    with no evidence; ``effect`` returned None on the first run but ``""`` on every
    later one. It is ``""`` each time now (the signature's ``str``), and nothing runs
    twice."""
    sent: list[str] = []
    results = []
    for _ in range(2):
        with retrysafe.start("report", {"week": "w1"}, home=home) as run:
            results.append(run.effect("send", "local_write", execute=sent.append))
    assert results == ["", ""]
    assert len(sent) == 1


def test_a_step_that_failed_in_a_block_that_ended_normally_is_named_once(home: Path) -> None:
    """The block catches a step's failure and ends normally: the outcome is failed and
    its reason names the step's failure once ("step post failed: 403"), not again as a
    step that is not done ("; step post is failed (403)")."""
    def refuse(_key: str) -> str:
        raise EffectFailed("403")

    with retrysafe.start("report", {"week": "w1"}, home=home) as run, pytest.raises(StepFailed):
        run.effect("post", "publish", execute=refuse)
    state, _ = _states(home, "report:w1")
    ledger = retrysafe.open_ledger(f"sqlite:///{home / 'ledger.sqlite3'}")
    try:
        out = ledger.outcome("report:w1")
    finally:
        ledger.close()
    assert state == "failed" and out is not None
    assert out.reason == "step post failed: 403"


def test_threads_starting_at_once_on_a_fresh_home_share_one_engine(tmp_path: Path) -> None:
    """Four threads call ``start()`` at once on a home whose ledger does not exist yet:
    each opened an engine, all creating the ledger together, and one could find it
    locked (``LedgerUnavailable``), the others' engines left open. One engine is opened,
    the others wait for it; every outcome is done. (A race: tried 20 times.)"""
    from concurrent.futures import ThreadPoolExecutor

    from retrysafe.engine import _ENGINES, close_all

    for trial in range(20):
        home = tmp_path / f"h{trial}"
        home.mkdir()
        (home / "retrysafe.toml").write_text(CONFIG)

        def one(week: str, home: Path = home) -> str:
            with retrysafe.start("report", {"week": week}, home=home) as run:
                return run.effect("send", "local_write", execute=lambda k: "ok")

        try:
            with ThreadPoolExecutor(max_workers=4) as pool:
                assert list(pool.map(one, [f"w{n}" for n in range(8)])) == ["ok"] * 8
            engines = {id(kept.engine) for k, kept in _ENGINES.items() if k[1] == str(home)}
            assert len(engines) == 1
        finally:
            close_all()


def test_an_execute_that_cannot_take_the_step_key_never_ran_so_the_step_failed(
        home: Path) -> None:
    """``execute=lambda: ...`` (no parameter for the step key): Python refuses the call
    before any of it runs. That left the step unknown ("may or may not have happened"),
    and the outcome waited for a person to resolve what certainly never happened. Now
    the step is failed, the TypeError is raised as it is, and the next run, with the
    callable fixed, executes it."""
    with pytest.raises(TypeError, match="positional argument"), \
            retrysafe.start("report", {"week": "w1"}, home=home) as run:
        run.effect("send", "message", execute=lambda: "sent")  # type: ignore[arg-type,misc]
    outcome, steps = _states(home, "report:w1")
    assert steps["send"][0] == "failed" and "never ran" in steps["send"][1], (outcome, steps)
    sent: list[str] = []
    with retrysafe.start("report", {"week": "w1"}, home=home) as run:
        assert run.effect("send", "message", execute=lambda k: sent.append(k) or "id-1") == "id-1"
    assert sent == ["report:w1/send"]
    outcome, steps = _states(home, "report:w1")
    assert outcome == "done" and steps["send"][0] == "done"


def test_a_type_error_raised_inside_execute_still_leaves_the_step_unknown(home: Path) -> None:
    """A TypeError from inside the callable (it ran, and may have acted first) is not
    taken for a refused call: the step is unknown, as for any other error."""
    def execute(key: str) -> str:
        return key + 1  # type: ignore[operator]

    with pytest.raises(retrysafe.StepUnknown), \
            retrysafe.start("report", {"week": "w2"}, home=home) as run:
        run.effect("send", "message", execute=execute)
    assert _states(home, "report:w2")[1]["send"][0] == "unknown"


def test_a_read_only_runs_dir_is_refused_not_a_folder_of_attempt_0(home: Path) -> None:
    """``run.dir`` of a done outcome's read-only run named ``attempt-0``, a folder no
    attempt ever had, for a caller to write into; it is refused as ``env()`` is, naming
    the outcome's folder."""
    with retrysafe.start("report", {"week": "w3"}, home=home) as run:
        run.effect("send", "message", execute=lambda _k: "id-1")
    with retrysafe.start("report", {"week": "w3"}, home=home) as run:
        assert run.read_only
        with pytest.raises(InvalidInput, match=r"is done; this run only reads and has no "
                                               r"attempt folder \(the outcome's folder is "):
            _ = run.dir
    assert not list(home.glob("runs/report/*/attempt-0"))
