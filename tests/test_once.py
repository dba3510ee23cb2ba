"""``retrysafe.once``: one outcome whose work is one effect, in two commits.

It answers and fails as ``with start(...) as run: run.effect(...)`` does (the same
ledger rows, the same errors); on SQLite the claim shares the intent's commit and
the record shares the finish's. Crash drills kill a real process at every point of
the effect and re-run it: the effect happens once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import Home

import retrysafe
from retrysafe.connectors.base import ABSENT, EffectFailed, Found
from retrysafe.engine import Engine, close_all
from retrysafe.errors import Busy, InvalidInput, StepFailed

CONFIG = """\
[jobs.rep]
key = "rep:{week}"
params = { week = "isoweek" }

[jobs.checked]
key = "checked:{week}"
params = { week = "isoweek" }
accept = ["true"]

[jobs.short]
key = "short:{week}"
params = { week = "isoweek" }
lease_seconds = 2

[jobs.notify]
key = "notify:{user}:{topic}"
params = { user = "str", topic = "str" }

[jobs.twin]
key = "rep:{week}"
params = { week = "isoweek" }
"""
WEEK = {"week": "2026-W10"}


@pytest.fixture
def engine(any_home: Home) -> Iterator[Engine]:
    any_home.path.mkdir()
    any_home.config(CONFIG)
    with Engine.open(any_home.path, ledger=any_home.ledger) as opened:
        yield opened


def _trail(engine: Engine, key: str) -> list[tuple[str, str, str]]:
    return [(e.kind, e.from_state, e.to_state) for e in engine.ledger.history(key)]


def test_once_performs_the_effect_once_and_answers_its_evidence_again(engine: Engine) -> None:
    sent: list[str] = []

    def send(step_key: str) -> str:
        sent.append(step_key)
        return f"msg-{len(sent)}"

    first = engine.once("rep", WEEK, "send", "message", execute=send)
    again = engine.once("rep", WEEK, "send", "message", execute=send)
    assert (first, again, sent) == ("msg-1", "msg-1", ["rep:2026-W10/send"])
    out = engine.ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "done" and out.attempts == 1
    step = engine.ledger.step("rep:2026-W10/send")
    assert step is not None and (step.state, step.evidence) == ("done", "msg-1")
    # the history start() writes, without the progress mark nobody could see (the record
    # and the finish are one commit: on SQLite a shared one, on a server one statement)
    assert _trail(engine, "rep:2026-W10") == [
        ("attempt", "", "active"), ("outcome", "planned", "running"),
        ("step", "", "running"), ("step", "running", "done"),
        ("attempt", "active", "finished"), ("outcome", "running", "done")]


def _statements(engine: Engine) -> list[str]:
    seen: list[str] = []
    conn = engine.ledger.backend._conn()  # type: ignore[attr-defined]
    conn.set_trace_callback(seen.append)
    return seen


def test_a_first_run_is_two_commits_on_sqlite_and_a_rerun_none(home: Home) -> None:
    home.path.mkdir()
    home.config(CONFIG)
    with Engine.open(home.path) as engine:
        engine.once("rep", {"week": "2026-W01"}, "send", "message", execute=lambda k: "m")
        seen = _statements(engine)
        engine.once("rep", WEEK, "send", "message", execute=lambda k: "m")
        commits = [s for s in seen if s == "COMMIT"]
        begins = [s for s in seen if s.startswith("BEGIN")]
        assert (len(begins), len(commits)) == (2, 2), seen
        # the step's intent is inside the first commit, its record inside the second
        first_commit = seen.index("COMMIT")
        assert any(s.startswith("INSERT INTO rs_steps") for s in seen[:first_commit])
        assert any(s.startswith("INSERT INTO rs_outcomes") for s in seen[:first_commit])
        assert any(s.startswith("UPDATE rs_steps") for s in seen[first_commit:])
        seen.clear()
        engine.once("rep", WEEK, "send", "message", execute=lambda k: "m")
        assert not [s for s in seen if s.startswith(("BEGIN", "COMMIT", "INSERT", "UPDATE"))]
        # the same outcome through start(): the claim, the record and the finish commit,
        # and the intent is a statement committed on its own
        seen.clear()
        with engine.start("rep", {"week": "2026-W11"}) as run:
            run.effect("send", "message", execute=lambda k: "m")
        assert len([s for s in seen if s == "COMMIT"]) == 3
        conn = engine.ledger.backend._conn()  # type: ignore[attr-defined]
        assert not conn.in_transaction
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL, as configured


def test_a_failed_effect_fails_the_outcome_and_the_next_call_retries(engine: Engine) -> None:
    tries: list[str] = []

    def flaky(step_key: str) -> str:
        tries.append(step_key)
        if len(tries) == 1:
            raise EffectFailed("connection refused")
        return "ok"

    with pytest.raises(StepFailed, match="connection refused"):
        engine.once("rep", WEEK, "send", "local_write", execute=flaky)
    out = engine.ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "failed" and out.current_attempt is None
    assert engine.once("rep", WEEK, "send", "local_write", execute=flaky) == "ok"
    assert len(tries) == 2
    out = engine.ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "done" and out.attempts == 2


def test_an_effect_that_raises_leaves_it_unknown_and_the_retry_looks_it_up(
        engine: Engine) -> None:
    done: list[str] = []

    def crashes_after_acting(step_key: str) -> str:
        done.append(step_key)
        raise RuntimeError("socket closed after the request went out")

    def lookup(step_key: str) -> Any:
        return Found("found-1") if step_key in done else ABSENT

    with pytest.raises(retrysafe.StepUnknown):
        engine.once("rep", WEEK, "send", "message", execute=crashes_after_acting, lookup=lookup)
    assert engine.once("rep", WEEK, "send", "message", execute=crashes_after_acting,
                       lookup=lookup) == "found-1"
    assert len(done) == 1


@pytest.mark.parametrize(("step", "cls", "said"), [
    ("send", "no-such-class", "unknown effect class 'no-such-class'"),
    ("a/b", "message", "step"),
    ("caf\udce9", "message", "step"),
    ("", "message", "step"),
])
def test_bad_input_executes_nothing_and_writes_nothing(engine: Engine, step: str, cls: str,
                                                        said: str) -> None:
    """Refused with one clear error before the claim (under start() the block has
    claimed an attempt by then, and it ends failed)."""
    called: list[str] = []
    with pytest.raises(InvalidInput, match=said):
        engine.once("rep", WEEK, step, cls, execute=called.append)
    assert called == []
    assert engine.ledger.outcome("rep:2026-W10") is None
    assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "m-1") == "m-1"


@pytest.mark.parametrize(("given", "said"), [
    ({"lookup": "not a function"}, "lookup= must be a function"),
    ({"execute": "nope"}, "execute= must be a function"),
    ({"execute": None}, "give execute= and an effect class"),
    ({"check": "echo \udcff"}, "check= is not UTF-8 text"),
    ({"check": b"echo"}, "check= must be text"),
    ({"connector_name": "a\x00b"}, "connector_name= holds a NUL"),
    ({"payload": {1: "a", "b": 2}}, "payload cannot be fingerprinted"),
])
def test_bad_arguments_are_refused_before_the_claim(engine: Engine, given: dict[str, Any],
                                                    said: str) -> None:
    """What effect() would refuse, or a ledger could not store, is refused with one clear
    error before anything is written (on either backend, whichever path the claim
    takes), and the next call with good arguments does the work."""
    called: list[str] = []
    kwargs: dict[str, Any] = {"execute": lambda k: called.append(k) or "x", **given}
    with pytest.raises(InvalidInput, match=said):
        engine.once("rep", WEEK, "send", "local_write", **kwargs)
    assert called == []
    assert engine.ledger.outcome("rep:2026-W10") is None
    assert engine.once("rep", WEEK, "send", "local_write", execute=lambda k: "m-1") == "m-1"


def _answer(call: Any) -> tuple[str, Any]:
    """What a call gives: ("value", its value and type) or ("error", type and text)."""
    try:
        got = call()
    except Exception as exc:  # noqa: BLE001 - the error is the answer compared
        return "error", (type(exc).__name__, str(exc))
    return "value", (got, type(got).__name__, getattr(got, "fields", None))


def test_a_rerun_answers_as_effect_answers_a_done_outcome(engine: Engine) -> None:
    """once() answers a re-run of a done outcome from one narrow read; whatever it is
    asked, the answer (or the error) is the one effect() gives on the done outcome's
    read-only run, which reads the outcome and every step whole."""
    from retrysafe.connectors.base import ConnectorBase
    from retrysafe.evidence import Evidence

    class Sink(ConnectorBase):
        effect_class = "publish"

        def validate(self, payload: Any) -> None:
            if "title" not in payload:
                raise InvalidInput("a title is needed")

        def execute(self, step_key: str, payload: Any) -> str:
            return "s-" + payload["title"]

        def lookup(self, step_key: str, payload: Any) -> Any:
            return ABSENT

    sink = Sink()
    with engine.start("rep", WEEK) as run:
        run.effect("sunk", connector=sink, payload={"title": "a"})
        run.effect("plain", "local_write", execute=lambda k: "p-1")
        run.effect("fields", "local_write", execute=lambda k: Evidence("f-1", {"id": 7}))
        run.effect("none", "local_write", execute=lambda k: None)
        run.effect("paid", "local_write", execute=lambda k: "q-1", payload={"to": "a"})
        run.effect("item", "local_write", execute=lambda k: "i-1", item="x")
        run.generate("draft", lambda path: path.write_text("text"))
    engine.once("notify", {"user": "bob", "topic": "billing:overdue"}, "send", "message",
                execute=lambda k: "n-1")
    called: list[str] = []

    def nope(k: str) -> str:
        called.append(k)
        return "never"

    asks: list[tuple[str, dict[str, str], str, dict[str, Any]]] = [
        ("rep", WEEK, "plain", {}),
        ("rep", WEEK, "fields", {}),
        ("rep", WEEK, "none", {}),
        ("rep", WEEK, "paid", {"payload": {"to": "a"}}),
        ("rep", WEEK, "paid", {"payload": {"to": "b"}}),  # another payload
        ("rep", WEEK, "item", {"item": "x"}),
        ("rep", WEEK, "item", {}),  # no such step (the item is part of the key)
        ("rep", WEEK, "never-recorded", {}),
        ("rep", WEEK, "draft", {}),  # a generate step
        ("twin", WEEK, "plain", {}),  # the same key, another job
        ("notify", {"user": "bob:billing", "topic": "overdue"}, "send", {}),  # a collision
        ("notify", {"user": "bob", "topic": "billing:overdue"}, "send", {}),
        ("rep", WEEK, "sunk", {"connector": sink, "payload": {"title": "a"}}),
        ("rep", WEEK, "sunk", {"connector": sink, "payload": {"title": "b"}}),
        ("rep", WEEK, "sunk", {"connector": sink, "payload": {"no": "title"}}),
        ("rep", WEEK, "sunk", {"connector": sink, "payload": {"title": "a"},
                               "effect_class": "no-such-class"}),
    ]
    def given(extra: dict[str, Any]) -> dict[str, Any]:
        if "connector" in extra:
            return {"effect_class": None, **extra}
        return {"effect_class": "local_write", "execute": nope, **extra}

    def by_once(job: str, params: dict[str, str], step: str, extra: dict[str, Any]) -> str:
        return engine.once(job, params, step, **given(extra))

    def by_effect(job: str, params: dict[str, str], step: str, extra: dict[str, Any]) -> str:
        with engine.start(job, params) as run:
            return run.effect(step, **given(extra))

    for ask in asks:
        assert _answer(lambda: by_once(*ask)) == _answer(lambda: by_effect(*ask)), ask  # noqa: B023
    assert called == []
    assert _answer(lambda: engine.once("rep", WEEK, "plain", "local_write", execute=nope)) \
        == ("value", ("p-1", "str", None))


def test_a_rerun_is_one_read(home: Home) -> None:
    """A re-run of a done outcome's effect is one statement, which reads the outcome's
    state and that one step; a new outcome after it is claimed as before."""
    home.path.mkdir()
    home.config(CONFIG)
    with Engine.open(home.path) as engine:
        engine.once("rep", WEEK, "send", "message", execute=lambda k: "m-1")
        statements = _statements(engine)
        assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "no") == "m-1"
        assert len(statements) == 1 and "LEFT JOIN rs_steps" in statements[0], statements
        assert "o.state, o.job, o.params, s.kind" in statements[0]


def test_bad_parameters_are_refused_before_anything_is_written(engine: Engine) -> None:
    with pytest.raises(retrysafe.InvalidParameter):
        engine.once("rep", {"week": "W10"}, "send", "message", execute=lambda k: "m")
    with pytest.raises(retrysafe.InvalidParameter):
        engine.once("rep", {"week": 10}, "send", "message",  # type: ignore[dict-item]
                    execute=lambda k: "m")
    assert engine.ledger.outcome("rep:W10") is None
    assert engine.ledger.outcome("rep:10") is None


def test_a_busy_outcome_is_refused_and_the_ledger_is_left_unlocked(engine: Engine) -> None:
    release, holding = threading.Event(), threading.Event()

    def slow(step_key: str) -> str:
        holding.set()
        release.wait(20)
        return "slow-1"

    holder = threading.Thread(target=lambda: engine.once("rep", WEEK, "send", "message",
                                                         execute=slow))
    holder.start()
    try:
        assert holding.wait(20)
        with pytest.raises(Busy):
            engine.once("rep", WEEK, "send", "message", execute=lambda k: "second")
        # nothing of this thread's is left open: another outcome is written at once
        assert engine.once("rep", {"week": "2026-W12"}, "send", "message",
                           execute=lambda k: "other") == "other"
    finally:
        release.set()
        holder.join(20)
    assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "never") == "slow-1"


def test_racing_threads_perform_a_new_outcome_once(engine: Engine) -> None:
    performed: list[str] = []
    barrier = threading.Barrier(6)
    answers: list[str] = []

    def send(step_key: str) -> str:
        performed.append(step_key)
        time.sleep(0.2)
        return "once-1"

    def racer() -> None:
        barrier.wait(20)
        try:
            answers.append(engine.once("rep", WEEK, "send", "message", execute=send))
        except Busy:
            answers.append("busy")

    threads = [threading.Thread(target=racer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert performed == ["rep:2026-W10/send"]
    assert answers.count("once-1") >= 1 and set(answers) <= {"once-1", "busy"}
    assert engine.ledger.outcome("rep:2026-W10").attempts == 1  # type: ignore[union-attr]


def test_nothing_holds_the_ledger_while_the_lookup_or_the_effect_runs(home: Home) -> None:
    import sqlite3

    home.path.mkdir()
    home.config(CONFIG)
    writable: list[bool] = []

    def can_write() -> None:
        other = sqlite3.connect(home.path / "ledger.sqlite3", timeout=0.2,
                                isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            writable.append(True)
        except sqlite3.OperationalError:
            writable.append(False)
        finally:
            other.close()

    def lookup(step_key: str) -> Any:
        can_write()
        return ABSENT

    def send(step_key: str) -> str:
        can_write()
        return "m-1"

    with Engine.open(home.path) as engine:
        assert engine.once("rep", WEEK, "send", "message", execute=send, lookup=lookup) == "m-1"
        assert engine.once("rep", {"week": "2026-W11"}, "send", "local_write",
                           execute=send) == "m-1"
    assert writable == [True, True, True]


def test_an_outcome_another_run_finished_after_the_read_answers_its_evidence(
        home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read found no outcome, and by the claim another run had finished it: the
    answer is that run's evidence (it was "", from a run that knew no steps)."""
    home.path.mkdir()
    home.config(CONFIG)
    with Engine.open(home.path) as engine:
        assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "m-1") == "m-1"
        monkeypatch.setattr(engine.ledger, "outcome_and_steps", lambda key: (None, []))
        assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "again") == "m-1"
        with engine.start("rep", WEEK) as run:
            assert run.read_only
            assert run.effect("send", "message", execute=lambda k: "again") == "m-1"
        assert engine.ledger.outcome("rep:2026-W10").attempts == 1  # type: ignore[union-attr]


def test_a_job_with_acceptance_closes_out_as_start_does(engine: Engine) -> None:
    assert engine.once("checked", WEEK, "send", "message", execute=lambda k: "m-1") == "m-1"
    out = engine.ledger.outcome("checked:2026-W10")
    assert out is not None and out.state == "done"


def test_the_heartbeat_renews_the_lease_while_the_effect_runs(engine: Engine) -> None:
    leases: list[float] = []

    def long_send(step_key: str) -> str:
        first = engine.ledger.attempts("short:2026-W10")[0].lease_expires
        time.sleep(1.4)
        leases.extend([first, engine.ledger.attempts("short:2026-W10")[0].lease_expires])
        return "long-1"

    assert engine.once("short", WEEK, "send", "message", execute=long_send) == "long-1"
    assert leases[1] > leases[0]
    leases.clear()
    assert engine.once("short", {"week": "2026-W11"}, "send", "message", execute=long_send,
                       heartbeat=False) == "long-1"
    assert leases[1] == leases[0]


def test_the_module_call_keeps_its_engine(home: Home) -> None:
    home.path.mkdir()
    home.config(CONFIG)
    try:
        assert retrysafe.once("rep", WEEK, "send", "message", execute=lambda k: "m-1",
                              home=home.path) == "m-1"
        assert retrysafe.once("rep", WEEK, "send", "message", execute=lambda k: "m-2",
                              home=home.path) == "m-1"
    finally:
        close_all()


# --- crash drills: a real process killed at each point, then run again ------------

DRILL = """
import os
import signal
import sys
from pathlib import Path

import retrysafe
from retrysafe import ABSENT, Found

home, box, step, cls, kill = sys.argv[1], Path(sys.argv[2]), *sys.argv[3:6]


def send(step_key):
    if kill == "before":  # (from inside the effect, before it acts)
        os.kill(os.getpid(), signal.SIGKILL)
    with box.open("a") as f:
        f.write(step_key + "\\n")
    if kill == "after":  # (after it acted, before it returns)
        os.kill(os.getpid(), signal.SIGKILL)
    return "sent-" + step_key


def lookup(step_key):
    lines = box.read_text().splitlines() if box.exists() else []
    return Found("sent-" + step_key) if step_key in lines else ABSENT


print(retrysafe.once("rep", {"week": "2026-W10"}, step, cls, execute=send, lookup=lookup,
                     home=home))
"""


def _drill(home: Home, box: Path, crash_at: str = "", *, step: str = "send",
           cls: str = "message", kill: str = "") -> subprocess.CompletedProcess[str]:
    """One once() of ``step`` in a process of its own, its effect writing to ``box`` (and
    its lookup reading it), killed at ``crash_at`` or from inside the effect (``kill``:
    before or after it acts)."""
    env = dict(home.env)
    if crash_at:
        env["RETRYSAFE_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-c", DRILL, str(home.path), str(box), step, cls,
                           kill], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("point", ["before-intent", "after-intent", "after-execute",
                                   "after-record"])
def test_a_kill_at_each_point_then_a_rerun_performs_the_effect_once(
        any_home: Home, tmp_path: Path, point: str) -> None:
    any_home.path.mkdir()
    any_home.config(CONFIG)
    box = tmp_path / "outbox.txt"
    killed = _drill(any_home, box, f"send:{point}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with any_home.open_ledger() as ledger:
        out = ledger.outcome("rep:2026-W10")
        step = ledger.step("rep:2026-W10/send")
    if point == "before-intent":
        # (a message with a lookup is looked up before its intent: the claim is committed
        # first, as start() commits it)
        assert step is None and (out is None or out.state == "running")
    elif point == "after-intent":
        # the point is reached once the intent is committed: the ledger holds it
        assert step is not None and step.state == "running"
    elif point == "after-record":
        assert step is not None and step.state == "done"
    again = _drill(any_home, box)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "sent-rep:2026-W10/send"
    assert box.read_text().splitlines() == ["rep:2026-W10/send"]  # sent once
    with any_home.open_ledger() as ledger:
        out = ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "done"


@pytest.mark.parametrize("point", ["save:before-intent", "save:after-intent",
                                   "save:after-execute", "save:after-record"])
def test_the_journal_tells_of_nothing_the_ledger_does_not_hold(
        any_home: Home, tmp_path: Path, point: str) -> None:
    """A kill at each point: every line of the job's journal is of an outcome, an
    attempt and a step the ledger holds. On SQLite the claim and the intent commit
    together, so their lines are written once that commit is in, not before it (a kill
    before it leaves neither)."""
    any_home.path.mkdir()
    any_home.config(CONFIG)
    killed = _drill(any_home, tmp_path / "box.txt", point, step="save", cls="local_write")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = any_home.path / "runs" / "rep" / ".journal"
    lines = [json.loads(line) for f in sorted(journal.glob("*.jsonl"))
             for line in f.read_text().splitlines()] if journal.exists() else []
    with any_home.open_ledger() as ledger:
        for line in lines:
            assert ledger.outcome(line["outcome_key"]) is not None, line
            assert line["attempt_id"] in {a.id for a in ledger.attempts(line["outcome_key"])}
            if line["action"] in ("intent", "record"):
                step = ledger.step(line["step_key"])
                assert step is not None and (line["action"], step.state) in (
                    ("intent", "running"), ("intent", "done"), ("record", "done")), line
    if point != "save:before-intent":
        assert [x["action"] for x in lines][:2] == ["begin", "intent"]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_inside_execute_leaves_the_intent_and_the_rerun_looks_it_up(
        any_home: Home, tmp_path: Path, when: str) -> None:
    """SIGKILL from inside the effect of a new outcome's first once() (on a server, its
    intent was written with the claim, and no crash drill is set to change that): the
    intent is in the ledger, and the next call asks the lookup, which decides whether
    the effect runs (it had not happened) or is recorded as found (it had)."""
    any_home.path.mkdir()
    any_home.config(CONFIG)
    box = tmp_path / "commits.txt"

    def call(kill: str) -> subprocess.CompletedProcess[str]:
        return _drill(any_home, box, step="commit", cls="git_commit", kill=kill)

    killed = call(when)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with any_home.open_ledger() as ledger:
        step = ledger.step("rep:2026-W10/commit")
    assert step is not None and step.state == "running" and step.tries == 1
    again = call("")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "sent-rep:2026-W10/commit"
    assert box.read_text().splitlines() == ["rep:2026-W10/commit"]  # once either way
    with any_home.open_ledger() as ledger:
        out = ledger.outcome("rep:2026-W10")
        trail = [(e.kind, e.to_state, e.reason) for e in ledger.history("rep:2026-W10")
                 if e.kind == "step"]
    assert out is not None and out.state == "done"
    expected = (["running", "unknown", "done"] if when == "after"  # found by the lookup
                else ["running", "unknown", "running", "done"])
    assert [t[1] for t in trail] == expected, trail


def test_a_kill_after_the_record_finds_the_outcome_done_not_delivered(
        any_home: Home, tmp_path: Path) -> None:
    """The record and the finish are one commit (on a server, one statement): a kill
    after the record is a done outcome, never a delivered one waiting for close-out."""
    home = any_home
    home.path.mkdir()
    home.config(CONFIG)
    box = tmp_path / "outbox.txt"
    assert _drill(home, box, "send:after-record").returncode == -signal.SIGKILL
    with home.open_ledger() as ledger:
        out = ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "done" and out.current_attempt is None
    assert os.path.exists(box)


@pytest.mark.parametrize("which", [1, 2])
def test_a_shared_commit_that_fails_says_why_and_the_next_call_does_the_work_once(
        home: Home, monkeypatch: pytest.MonkeyPatch, which: int) -> None:
    """The disk fills as a shared commit commits: the first (claim and intent) fails before
    the effect, which does not run; the second (record and finish) fails after it, and the
    step is left to be looked up. Either way the error is the disk's, and the next call
    ends with the effect done once."""
    from retrysafe.errors import StorageFull
    from retrysafe.ledger.sqlite import SqliteBackend

    home.path.mkdir()
    home.config(CONFIG)
    sent: list[str] = []

    def send(step_key: str) -> str:
        sent.append(step_key)
        return "m-1"

    def lookup(step_key: str) -> Any:
        return Found("m-1") if sent else ABSENT

    real = SqliteBackend.close_shared
    calls = {"n": 0}

    def failing(self: SqliteBackend) -> None:
        if getattr(self._local, "shared", False):
            calls["n"] += 1
            if calls["n"] == which:
                conn = self._conn()
                self._local.shared = False
                conn.execute("ROLLBACK")
                self._busy.discard(conn)
                raise StorageFull(f"ledger {self.path}: database or disk is full")
        real(self)

    with Engine.open(home.path) as engine:
        monkeypatch.setattr(SqliteBackend, "close_shared", failing)
        with pytest.raises(StorageFull, match="disk is full"):
            engine.once("rep", WEEK, "send", "local_write", execute=send, lookup=lookup)
        assert sent == ([] if which == 1 else ["rep:2026-W10/send"])
        monkeypatch.setattr(SqliteBackend, "close_shared", real)
        conn = engine.ledger.backend._conn()  # type: ignore[attr-defined]
        assert not conn.in_transaction
        assert engine.once("rep", WEEK, "send", "local_write", execute=send,
                           lookup=lookup) == "m-1"
        assert sent == ["rep:2026-W10/send"]
        out = engine.ledger.outcome("rep:2026-W10")
        assert out is not None and out.state == "done"


def test_a_payment_waits_for_approval_then_the_next_call_pays_once(engine: Engine) -> None:
    paid: list[str] = []

    def pay(step_key: str) -> str:
        paid.append(step_key)
        return "pay-1"

    def lookup(step_key: str) -> Any:
        return Found("pay-1") if paid else ABSENT

    with pytest.raises(retrysafe.StepBlocked):
        engine.once("rep", WEEK, "charge", "payment", execute=pay, lookup=lookup)
    assert paid == []
    out = engine.ledger.outcome("rep:2026-W10")
    assert out is not None and out.state == "blocked"
    engine.ledger.approve("rep:2026-W10", "charge", actor="alice")
    for _ in range(2):
        assert engine.once("rep", WEEK, "charge", "payment", execute=pay,
                           lookup=lookup) == "pay-1"
    assert paid == ["rep:2026-W10/charge"]


def test_once_inside_an_effect_of_another_once_keeps_both_apart(engine: Engine) -> None:
    inner: list[str] = []

    def outer_send(step_key: str) -> str:
        inner.append(engine.once("rep", {"week": "2026-W11"}, "child", "local_write",
                                 execute=lambda k: "child-1"))
        return "outer-1"

    assert engine.once("rep", WEEK, "send", "local_write", execute=outer_send) == "outer-1"
    assert inner == ["child-1"]
    for key in ("rep:2026-W10", "rep:2026-W11"):
        out = engine.ledger.outcome(key)
        assert out is not None and out.state == "done"


def test_a_done_outcome_answers_done_under_a_mistyped_crash_drill(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash point is checked before a claim, not before a done outcome's answer: a
    mistyped one refuses new work only (on both ledgers; a server's first look claims
    before it reads)."""
    assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "m-1") == "m-1"
    monkeypatch.setenv("RETRYSAFE_CRASH_AT", "send:after-exectue")
    assert engine.once("rep", WEEK, "send", "message", execute=lambda k: "again") == "m-1"
    with engine.start("rep", WEEK) as run:
        assert run.effect("send", "message", execute=lambda k: "again") == "m-1"
    with pytest.raises(InvalidInput, match="is not STEP:POINT"):
        engine.once("rep", {"week": "2026-W11"}, "send", "message", execute=lambda k: "m-2")
    assert engine.ledger.outcome("rep:2026-W11") is None


def test_a_record_with_another_step_open_closes_out_as_start_does(engine: Engine) -> None:
    """An earlier attempt left another step failed: the record stands, the finish does not
    happen with it, and close-out judges the outcome as under start()."""
    def refused(step_key: str) -> str:
        raise EffectFailed("refused")

    for week in ("2026-W10", "2026-W11"):
        with pytest.raises(StepFailed), engine.start("rep", {"week": week}) as run:
            run.effect("other", "local_write", execute=refused)
    assert engine.once("rep", WEEK, "send", "local_write", execute=lambda k: "m-1") == "m-1"
    with engine.start("rep", {"week": "2026-W11"}) as run:
        run.effect("send", "local_write", execute=lambda k: "m-1")
    a, b = engine.ledger.outcome("rep:2026-W10"), engine.ledger.outcome("rep:2026-W11")
    assert a is not None and b is not None
    assert (a.state, a.reason, a.current_attempt) == (b.state, b.reason, b.current_attempt)
    assert a.state == "failed" and "step other failed" in a.reason
    step = engine.ledger.step("rep:2026-W10/send")
    assert step is not None and (step.state, step.evidence) == ("done", "m-1")


def test_a_lease_broken_while_the_effect_ran_refuses_the_record(engine: Engine) -> None:
    """A person broke the attempt's lease while its effect ran: the record is refused
    (the attempt is stale), nothing finishes the outcome, and the step is left for the
    next run to look up."""
    def send(step_key: str) -> str:
        engine.break_lease("rep:2026-W10", actor="ops")
        return "m-1"

    with pytest.raises(retrysafe.StaleAttempt):
        engine.once("rep", WEEK, "send", "local_write", execute=send)
    out = engine.ledger.outcome("rep:2026-W10")
    assert out is not None and out.state != "done" and out.current_attempt is None
    step = engine.ledger.step("rep:2026-W10/send")
    assert step is not None and step.state == "unknown"


def test_a_claim_racing_another_threads_fresh_attempt_answers_busy(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between one thread's claim and its Run, another thread of the same process claims
    the same outcome: the fresh attempt is this process's, not one it abandoned, so the
    answer is busy (it was taken over, and the first thread's writes were refused)."""
    gate, inside = threading.Event(), threading.Event()
    real = Engine.run_for

    def slow_run_for(self: Engine, *args: Any, **kw: Any) -> Any:
        if threading.current_thread().name == "first":
            inside.set()
            gate.wait(20)
        return real(self, *args, **kw)

    monkeypatch.setattr(Engine, "run_for", slow_run_for)
    begun: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: begun.update(first=engine.begin("rep", WEEK, folder=False)),
        name="first")
    first.start()
    try:
        assert inside.wait(20)
        second = engine.begin("rep", WEEK, folder=False)
    finally:
        gate.set()
        first.join(20)
    assert (begun["first"].status, second.status) == ("started", "busy")
    assert begun["first"].run.close(success=True).state == "done"  # (not stale)
    assert len(engine.ledger.attempts("rep:2026-W10")) == 1


def test_a_close_out_that_fails_lets_the_next_run_of_this_process_take_over(
        home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finish fails (the disk filled): the error is said, and the same process's next
    run takes the open attempt over and closes the outcome, instead of answering busy
    until the process exits."""
    from retrysafe.errors import StorageFull
    from retrysafe.ledger.core import LedgerCore

    home.path.mkdir()
    home.config(CONFIG)
    sent: list[str] = []

    def full(self: LedgerCore, *args: Any, **kw: Any) -> Any:
        raise StorageFull("ledger: database or disk is full")

    with Engine.open(home.path) as engine:
        with monkeypatch.context() as patched:
            patched.setattr(LedgerCore, "finish_clear", full)
            patched.setattr(LedgerCore, "finish", full)
            with pytest.raises(StorageFull), engine.start("rep", WEEK) as run:
                run.effect("send", "message", execute=lambda k: sent.append(k) or "m-1")
        with engine.start("rep", WEEK) as run:
            assert run.effect("send", "message", execute=lambda k: "again") == "m-1"
        out = engine.ledger.outcome("rep:2026-W10")
        assert out is not None and out.state == "done" and out.attempts == 2
    assert sent == ["rep:2026-W10/send"]
