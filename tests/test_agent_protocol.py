"""The agent protocol (begin/check/intent/record/unknown/block/close) as real CLI processes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support import Home

KEY = "weekly:2026-W32"


@pytest.fixture
def agent_home(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.weekly]
        key = "weekly:{week}"
        params = { week = "isoweek" }
        """
    )
    return home


def begin(home: Home, *extra: str) -> dict[str, Any]:
    done = home.run("begin", "weekly", "-p", "week=2026-W32", "--json", *extra)
    assert done.returncode in (0, 3, 75), done.stderr
    info: dict[str, Any] = json.loads(done.stdout)
    info["rc"] = done.returncode
    return info


def check(home: Home, step: str, cls: str, attempt: str | None = None) -> dict[str, Any]:
    args = ["check", KEY, step, "--class", cls, "--json"]
    if attempt:
        args += ["--attempt", attempt]
    done = home.run(*args)
    info: dict[str, Any] = json.loads(done.stdout)
    info["rc"] = done.returncode
    return info


def one_error_line(stderr: str) -> str:
    assert stderr.startswith("retrysafe: "), stderr
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    return stderr


def test_agent_turn_sends_once_and_a_rerun_skips(agent_home: Home, tmp_path: Path) -> None:
    """begin, check, intent, act, record, close: done; the next turn finds it done."""
    h, outbox = agent_home, tmp_path / "outbox.txt"
    first = begin(h)
    assert first["status"] == "started" and first["key"] == KEY
    attempt = first["attempt_id"]
    assert Path(first["folder"]).is_dir()
    assert check(h, "send", "message", attempt)["action"] == "execute"
    assert h.run("intent", KEY, "send", "--class", "message", "--attempt", attempt).returncode == 0
    with outbox.open("a") as f:  # the one real effect
        f.write("report\n")
    rec = h.run("record", KEY, "send", "--evidence", "msg-1", "--attempt", attempt)
    assert rec.returncode == 0, rec.stderr
    closed = h.run("close", KEY, "--attempt", attempt)
    assert closed.returncode == 0 and closed.stdout.startswith(f"done: {KEY}")

    again = begin(h)
    assert again["status"] == "done" and again["rc"] == 0
    decision = check(h, "send", "message")
    assert decision["action"] == "skip" and decision["evidence"] == "msg-1"
    assert outbox.read_text() == "report\n"


def test_record_without_intent_is_refused(agent_home: Home) -> None:
    """Recording a step that was never intended: exit 2, one line, the step stays absent."""
    attempt = begin(agent_home)["attempt_id"]
    done = agent_home.run("record", KEY, "send", "--evidence", "x", "--attempt", attempt)
    assert done.returncode == 2
    assert "was never intended" in one_error_line(done.stderr)
    assert check(agent_home, "send", "message", attempt)["action"] == "execute"


def test_record_twice_same_evidence_is_idempotent_other_evidence_refused(agent_home: Home) -> None:
    """A repeated record with the same id is fine; a different id for a done step is exit 2."""
    attempt = begin(agent_home)["attempt_id"]
    agent_home.run("intent", KEY, "send", "--class", "message", "--attempt", attempt)
    args = ("record", KEY, "send", "--attempt", attempt, "--evidence")
    assert agent_home.run(*args, "m1").returncode == 0
    assert agent_home.run(*args, "m1").returncode == 0
    other = agent_home.run(*args, "m2")
    assert other.returncode == 2
    assert "already done with evidence m1" in one_error_line(other.stderr)


def test_record_with_evidence_that_is_not_utf8_is_refused(agent_home: Home) -> None:
    """Evidence given as bytes that are not UTF-8 (argv keeps them as surrogates): exit 2,
    one line naming the value, nothing recorded; the step stays running for a record
    with text."""
    attempt = begin(agent_home)["attempt_id"]
    agent_home.run("intent", KEY, "send", "--class", "message", "--attempt", attempt)
    args = ("record", KEY, "send", "--attempt", attempt, "--evidence")
    bad = agent_home.run(*args, "id\udcff\udcfe")  # the bytes 0xff 0xfe on the command line
    assert bad.returncode == 2
    assert "is not UTF-8 text" in one_error_line(bad.stderr)
    status = agent_home.run("status", KEY, "--json")
    [step] = json.loads(status.stdout)["steps"]
    assert step["state"] == "running"
    assert agent_home.run(*args, "id-1").returncode == 0


def test_intent_from_a_second_attempt_must_look_first(agent_home: Home) -> None:
    """Attempt 1 intends and vanishes; attempt 2's intent is refused until it looks up.

    The zombie attempt 1 is then fenced off (exit 75), and its evidence is echoed
    so it is not lost; attempt 2 records what its lookup found.
    """
    h = agent_home
    a1 = begin(h, "--lease", "1")["attempt_id"]
    assert h.run("intent", KEY, "send", "--class", "message", "--attempt", a1).returncode == 0
    time.sleep(2.5)  # attempt 1's lease runs out
    second = begin(h)
    assert second["status"] == "started" and second["attempt"] == 2
    a2 = second["attempt_id"]

    refused = h.run("intent", KEY, "send", "--class", "message", "--attempt", a2)
    assert refused.returncode == 2
    assert "look first" in one_error_line(refused.stderr)
    assert check(h, "send", "message", a2)["action"] == "lookup"

    zombie = h.run("record", KEY, "send", "--evidence", "msg-7", "--attempt", a1)
    assert zombie.returncode == 75
    assert "msg-7 was NOT recorded" in one_error_line(zombie.stderr)
    zombie_intent = h.run("intent", KEY, "other", "--class", "message", "--attempt", a1)
    assert zombie_intent.returncode == 75

    found = h.run("record", KEY, "send", "--evidence", "msg-7", "--attempt", a2)
    assert found.returncode == 0, found.stderr
    settled = check(h, "send", "message", a2)
    assert settled["action"] == "skip" and settled["evidence"] == "msg-7"


def test_unknown_then_lookup_absent_then_send(agent_home: Home) -> None:
    """A timeout leaves the step unknown; the next turn looks, finds nothing, sends once."""
    h = agent_home
    a1 = begin(h)["attempt_id"]
    h.run("intent", KEY, "send", "--class", "message", "--attempt", a1)
    assert h.run("unknown", KEY, "send", "--reason", "timeout", "--attempt", a1).returncode == 0
    closed = h.run("close", KEY, "--attempt", a1)
    assert closed.returncode == 1 and closed.stdout.startswith(f"unknown: {KEY}")

    a2 = begin(h)["attempt_id"]
    assert check(h, "send", "message", a2)["action"] == "lookup"
    ok = h.run(
        "intent",
        KEY,
        "send",
        "--class",
        "message",
        "--attempt",
        a2,
        "--absent",
        "Sent folder, Message-ID search",
    )
    assert ok.returncode == 0, ok.stderr
    assert h.run("record", KEY, "send", "--evidence", "m2", "--attempt", a2).returncode == 0
    assert h.run("close", KEY, "--attempt", a2).returncode == 0


def test_unknown_on_a_step_not_running_is_refused(agent_home: Home) -> None:
    """Only an intended step can become unknown."""
    attempt = begin(agent_home)["attempt_id"]
    done = agent_home.run("unknown", KEY, "send", "--reason", "x", "--attempt", attempt)
    assert done.returncode == 2
    assert "not started" in one_error_line(done.stderr)


def test_ambiguity_blocks_with_the_reconciliation(agent_home: Home) -> None:
    """block exits 3; close and status say exactly what a human must run."""
    h = agent_home
    attempt = begin(h)["attempt_id"]
    h.run("intent", KEY, "publish", "--class", "publish", "--attempt", attempt)
    blocked = h.run(
        "block", KEY, "publish", "--reason", "two drafts: ids 41 and 42", "--attempt", attempt
    )
    assert blocked.returncode == 3
    assert f"retrysafe resolve {KEY} publish" in one_error_line(blocked.stderr)
    closed = h.run("close", KEY, "--attempt", attempt)
    assert closed.returncode == 3
    assert "two drafts: ids 41 and 42" in closed.stdout
    assert f"to unblock: retrysafe resolve {KEY} publish" in closed.stdout
    assert begin(h)["rc"] == 3


def test_payment_needs_approval_and_the_block_is_recorded(agent_home: Home) -> None:
    """check on a payment step without approval says blocked (exit 3) and the ledger shows it."""
    attempt = begin(agent_home)["attempt_id"]
    decision = check(agent_home, "charge", "payment", attempt)
    assert decision["rc"] == 3 and decision["action"] == "blocked"
    assert decision["unblock"] == f"retrysafe approve {KEY} charge"
    refused = agent_home.run("intent", KEY, "charge", "--class", "payment", "--attempt", attempt)
    assert refused.returncode == 3
    with agent_home.open_ledger() as ledger:
        step = ledger.step(f"{KEY}/charge")
        assert step is not None and step.state == "blocked"


def test_second_begin_while_the_first_lives_is_busy(agent_home: Home) -> None:
    """Two agent turns at once: the second gets busy (exit 75), not a second attempt."""
    assert begin(agent_home)["status"] == "started"
    second = begin(agent_home)
    assert second["status"] == "busy" and second["rc"] == 75


def test_attempt_of_another_key_is_refused(agent_home: Home) -> None:
    """Passing an attempt id with the wrong key is exit 2 before anything is written."""
    attempt = begin(agent_home)["attempt_id"]
    done = agent_home.run(
        "check", "weekly:2026-W33", "send", "--class", "message", "--attempt", attempt
    )
    assert done.returncode == 2
    assert "belongs to weekly:2026-W32" in one_error_line(done.stderr)


def test_protocol_commands_need_an_attempt(agent_home: Home) -> None:
    """intent without --attempt (and outside 'retrysafe run') is a usage error."""
    begin(agent_home)
    done = agent_home.run("intent", KEY, "send", "--class", "message")
    assert done.returncode == 2
    assert "not inside an attempt" in one_error_line(done.stderr)
