"""An accepted artifact that is missing or changed when a later attempt needs it.

Generation is frozen: a retry delivers what was accepted, never a new take. So an
accepted artifact someone edited or deleted is not produced again on its own. It used
to raise StepBlocked whose command ('resolve ... --absent') was refused, because the
step was still done in the ledger, and the outcome ended 'failed' for some other
reason: no way forward but restoring the file. Now the step is recorded blocked (cause
'artifact'), the outcome waits for a human, and both ways out work: restore the file,
or resolve it absent and have it produced again.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from support import Home

import retrysafe
from retrysafe import EffectFailed
from retrysafe.engine import close_all
from retrysafe.errors import InvalidInput, StepBlocked

CONFIG = """
[jobs.rep]
key = "rep:{week}"
params = { week = "isoweek" }
"""
WEEK = {"week": "2026-W11"}
KEY = "rep:2026-W11"


@pytest.fixture
def made(any_home: Home) -> Home:
    any_home.path.mkdir(parents=True)
    any_home.config(CONFIG)
    return any_home


def _attempt(home: Home, draft: str, *, send: str | None) -> Path:
    """One attempt: generate the draft (``draft`` is what a new take writes), then
    send it (``send`` None: the send fails, nothing happened)."""
    def execute(_key: str) -> str:
        if send is None:
            raise EffectFailed("smtp down")
        return send

    try:
        with retrysafe.start("rep", WEEK, home=home.path, ledger=home.ledger,
                             heartbeat=False) as run:
            path = run.generate("draft", lambda out: out.write_text(draft))
            run.effect("send", "local_write", execute=execute)
            return path
    finally:
        close_all()


def _first_take_then_edited(home: Home) -> Path:
    """Attempt 1 accepts the draft and fails to send it; someone edits the draft."""
    with pytest.raises(retrysafe.StepFailed):
        _attempt(home, "first take", send=None)
    with home.open_ledger() as ledger:
        step = ledger.step(f"{KEY}/draft")
    assert step is not None and step.state == "done" and step.artifact
    path = Path(step.artifact)
    path.write_text("edited by hand")
    return path


def test_a_changed_artifact_blocks_the_step_and_the_printed_command_works(made: Home) -> None:
    path = _first_take_then_edited(made)
    with pytest.raises(StepBlocked) as caught:
        _attempt(made, "second take", send="msg-1")
    err = caught.value
    assert err.cause == "artifact" and "changed after it was accepted" in err.reason
    # the home (and a server's ledger) given to start() named, so the line pastes anywhere
    assert err.unblock.startswith(f"retrysafe --home {made.path} ")
    assert err.unblock.endswith(f" resolve {KEY} draft --absent")
    with made.open_ledger() as ledger:
        out, step = ledger.outcome(KEY), ledger.step(f"{KEY}/draft")
    assert out is not None and out.state == "blocked"
    assert step is not None and step.state == "blocked" and step.cause == "artifact"
    assert path.read_text() == "edited by hand"  # not produced again on its own
    attention = made.run("needs-attention")
    assert KEY in attention.stdout, attention.stdout

    resolved = made.run(*shlex.split(err.unblock)[1:])  # the command as printed
    assert resolved.returncode == 0, resolved.stderr
    sent = _attempt(made, "second take", send="msg-1")
    assert sent.read_text() == "second take"
    with made.open_ledger() as ledger:
        out = ledger.outcome(KEY)
        assert out is not None and out.state == "done"
        kinds = [(e.step_key, e.from_state, e.to_state) for e in ledger.history(KEY)]
    assert (f"{KEY}/draft", "done", "blocked") in kinds
    assert (f"{KEY}/draft", "blocked", "planned") in kinds


def test_an_artifact_restored_as_accepted_is_taken_again(made: Home) -> None:
    path = _first_take_then_edited(made)
    with pytest.raises(StepBlocked):
        _attempt(made, "second take", send="msg-1")
    path.write_text("first take")  # restored from a copy
    assert _attempt(made, "second take", send="msg-1") == path
    assert path.read_text() == "first take"
    with made.open_ledger() as ledger:
        out, step = ledger.outcome(KEY), ledger.step(f"{KEY}/draft")
    assert out is not None and out.state == "done"
    assert step is not None and step.state == "done" and "restored" in step.reason


def test_a_done_outcomes_lost_artifact_only_says_restore_it(made: Home) -> None:
    """A read-only run changes nothing, so the only way out is the file itself; the
    error names no command that would be refused."""
    path = _attempt(made, "first take", send="msg-1")
    path.unlink()
    before = made.snapshot()
    with pytest.raises(StepBlocked) as caught, \
            retrysafe.start("rep", WEEK, home=made.path, ledger=made.ledger) as run:
        run.generate("draft", lambda out: out.write_text("second take"))
    close_all()
    assert caught.value.unblock.startswith(f"restore {path} as it was accepted")
    assert "resolve" not in str(caught.value)
    after = made.snapshot()
    after.pop("runs/.ledger-id", None)  # (the home's mark of the server's ledger it uses)
    before.pop("runs/.ledger-id", None)
    assert after == before
    with made.open_ledger() as ledger:
        assert ledger.outcome(KEY).state == "done"  # type: ignore[union-attr]


def test_an_agent_cannot_block_a_done_step(made: Home) -> None:
    """Done steps stay final for every other cause: 'retrysafe block' is refused."""
    with pytest.raises(retrysafe.StepFailed):
        _attempt(made, "first take", send=None)
    begun = made.run("begin", "rep", "-p", "week=2026-W11", "--json")
    assert begun.returncode == 0, begun.stderr
    import json

    attempt = json.loads(begun.stdout)["attempt_id"]
    refused = made.run("block", KEY, "draft", "--attempt", attempt, "--reason", "no")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "is done; nothing to block" in refused.stderr and refused.stderr.count("\n") == 1
    with made.open_ledger() as ledger:
        assert ledger.step(f"{KEY}/draft").state == "done"  # type: ignore[union-attr]


def test_blocking_a_done_step_for_another_cause_is_refused_in_python(made: Home) -> None:
    with pytest.raises(retrysafe.StepFailed):
        _attempt(made, "first take", send=None)
    with retrysafe.start("rep", WEEK, home=made.path, ledger=made.ledger,
                         heartbeat=False) as run:
        with pytest.raises(InvalidInput, match="is done; nothing to block"):
            run.declare_blocked("draft", "changed my mind")
        run.generate("draft", lambda out: out.write_text("unused"))
        run.effect("send", "local_write", execute=lambda _k: "msg-1")
    close_all()


def test_a_restored_artifact_settled_by_another_run_first_is_no_error(made: Home) -> None:
    """Two runs find the restored file at once: the one that settles the step second finds
    it done already, and goes on to its claim instead of failing."""
    path = _first_take_then_edited(made)
    with pytest.raises(StepBlocked):
        _attempt(made, "second take", send="msg-1")
    path.write_text("first take")
    engine = retrysafe.Engine.open(made.path, ledger=made.ledger)
    try:
        known, steps = engine.ledger.outcome_and_steps(KEY)
        assert known is not None and known.state == "blocked"
        engine._take_back_restored(known, steps)  # the first run's settling
        engine._take_back_restored(known, steps)  # the second, from what it read before
        assert engine.ledger.step(f"{KEY}/draft").state == "done"  # type: ignore[union-attr]
    finally:
        engine.close()
    assert _attempt(made, "second take", send="msg-1") == path


def test_every_reader_judges_an_artifact_the_same_way(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``fsio.artifact_problem`` is the one judge of an accepted artifact (generate's
    reuse, close-out, verify, the take-back of a restored one): missing, changed, or a
    file that cannot be read, said in words, never an exception."""
    from retrysafe import fsio

    path = tmp_path / "draft.md"
    assert fsio.artifact_problem(path, "sha256:00") == "is missing"
    path.mkdir()
    assert fsio.artifact_problem(path, "sha256:00") == "is missing"  # a folder is no artifact
    path.rmdir()
    path.write_text("accepted")
    accepted = fsio.sha256_file(path)
    assert fsio.artifact_problem(path, accepted) == ""
    path.write_text("edited")
    assert fsio.artifact_problem(path, accepted) == "changed after it was accepted"

    def unreadable(_p: Path) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(fsio, "sha256_file", unreadable)
    assert fsio.artifact_problem(path, accepted) == "cannot be read (Permission denied)"
