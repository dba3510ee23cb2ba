"""The agent protocol driven carelessly, as real CLI processes: text that is not UTF-8 or
not one line, an attempt id kept from another outcome, a record or close repeated after
its answer was lost."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from support import Home

KEY = "weekly:2026-W32"
BAD = os.fsdecode(b"id\xff\xfe")  # bytes that are not UTF-8, as argv keeps them


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


def begin(home: Home, week: str = "2026-W32", *extra: str) -> str:
    done = home.run("begin", "weekly", "-p", f"week={week}", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["attempt_id"])


def one_error_line(stderr: str) -> str:
    assert stderr.startswith("retrysafe: ") and stderr.count("\n") == 1, stderr
    assert "internal error" not in stderr
    return stderr


def steps(home: Home) -> dict[str, dict[str, Any]]:
    status = home.run("status", KEY, "--json")
    assert status.returncode == 0, status.stderr
    return {s["name"]: s for s in json.loads(status.stdout)["steps"]}


def lease_expires(home: Home, attempt: str) -> float:
    with home.open_ledger() as ledger:
        return float(ledger.attempt(attempt).lease_expires)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("intent", KEY, "look", "--class", "message", "--absent", BAD), "--absent"),
        (("unknown", KEY, "send", "--reason", BAD), "--reason"),
        (("block", KEY, "send", "--reason", BAD), "--reason"),
        (("block", KEY, "send", "--reason", BAD, "--json"), "--reason"),
        (("record", KEY, "send", "--evidence", BAD), "--evidence"),
        (("close", KEY, "--failed", BAD), "--failed"),
    ],
)
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(
    agent_home: Home, args: tuple[str, ...], option: str
) -> None:
    """Exit 2, one line naming the option, and the attempt as it was: its lease not
    renewed, its steps unchanged (``intent --absent`` was an internal error, exit 1)."""
    h = agent_home
    attempt = begin(h)
    assert h.run("intent", KEY, "send", "--class", "message", "--attempt", attempt).returncode == 0
    h.run("unknown", KEY, "look", "--reason", "timeout", "--attempt", attempt)
    before, was = lease_expires(h, attempt), steps(h)
    time.sleep(0.05)
    done = h.run(*args, "--attempt", attempt)
    assert done.returncode == 2, done.stderr
    assert f"{option}: a value is not UTF-8 text" in one_error_line(done.stderr)
    assert done.stdout == ""
    assert lease_expires(h, attempt) == before
    assert steps(h) == was


def test_text_of_many_lines_is_recorded_as_one(agent_home: Home) -> None:
    """A reason or evidence with line breaks and control characters is kept as one
    line, so the lines that show it (the block error, close, status) stay one line each."""
    h = agent_home
    a = ("--attempt", begin(h))
    h.run("intent", KEY, "send", "--class", "message", *a)
    h.run("intent", KEY, "post", "--class", "publish", *a)
    rec = h.run("record", KEY, "send", "--evidence", "msg-1\n\tsha \x1b[31mx\n", *a)
    assert rec.returncode == 0 and rec.stdout == f"done: {KEY}/send; evidence: msg-1 sha [31mx\n"
    again = h.run("record", KEY, "send", "--evidence", "msg-1 sha \x1b[31mx", *a, "--json")
    assert json.loads(again.stdout)["recorded"] is False
    blocked = h.run("block", KEY, "post", "--reason", "two drafts:\n41\r\nand 42", *a)
    assert blocked.returncode == 3
    assert "two drafts: 41 and 42" in one_error_line(blocked.stderr)
    closed = h.run("close", KEY, "--failed", "it\nbroke", *a)
    assert closed.returncode == 3
    assert closed.stdout.splitlines()[0] == f"blocked: {KEY} (attempt 1): step post: two drafts: 41 and 42"
    got = steps(h)
    assert got["send"]["evidence"] == "msg-1 sha [31mx"
    assert got["post"]["reason"] == "two drafts: 41 and 42"


@pytest.mark.parametrize("command", [
    ("check", KEY, "send", "--class", "message"),
    ("intent", KEY, "send", "--class", "message"),
    ("record", KEY, "send", "--evidence", "m-1"),
    ("unknown", KEY, "send", "--reason", "timeout"),
    ("close", KEY),
])
def test_an_ended_attempt_of_another_outcome_is_a_usage_error(
    agent_home: Home, command: tuple[str, ...]
) -> None:
    """Last week's attempt id, kept by mistake: exit 2 naming its outcome, not exit 75
    (which says this outcome's own attempt was taken over)."""
    h = agent_home
    last_week = begin(h, "2026-W31")
    assert h.run("close", "weekly:2026-W31", "--attempt", last_week).returncode == 0
    begin(h)
    done = h.run(*command, "--attempt", last_week)
    assert done.returncode == 2, done.stderr
    assert f"belongs to weekly:2026-W31, not {KEY}" in one_error_line(done.stderr)


def test_a_close_repeated_says_what_it_closed(agent_home: Home) -> None:
    """The answer of a close was lost and the agent closes again: the same state and
    exit code, not 'its writes are refused' (exit 75)."""
    h = agent_home
    a = ("--attempt", begin(h))
    h.run("intent", KEY, "send", "--class", "message", *a)
    h.run("record", KEY, "send", "--evidence", "m-1", *a)
    assert h.run("close", KEY, *a).returncode == 0
    again = h.run("close", KEY, *a)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"done: {KEY} (attempt 1, closed already)\n"
    shown = json.loads(h.run("close", KEY, *a, "--json").stdout)
    assert shown == {"key": KEY, "state": "done", "reason": "", "unblock": "", "attempt": 1}


def test_a_close_repeated_of_a_blocked_outcome_exits_3(agent_home: Home) -> None:
    h = agent_home
    a = ("--attempt", begin(h))
    h.run("intent", KEY, "post", "--class", "publish", *a)
    h.run("block", KEY, "post", "--reason", "two drafts", *a)
    assert h.run("close", KEY, *a).returncode == 3
    again = h.run("close", KEY, *a)
    assert again.returncode == 3, again.stderr
    assert f"to unblock: retrysafe resolve {KEY} post" in again.stdout


def test_a_superseded_attempt_still_cannot_close(agent_home: Home) -> None:
    """Only the outcome's last, finished attempt answers a repeated close."""
    h = agent_home
    old = begin(h, "2026-W32", "--lease", "1")
    time.sleep(2.2)
    new = begin(h)
    assert h.run("close", KEY, "--attempt", new).returncode == 0
    done = h.run("close", KEY, "--attempt", old)
    assert done.returncode == 75
    assert "superseded" in one_error_line(done.stderr)


def test_a_record_repeated_after_close_is_recorded_already(agent_home: Home) -> None:
    """The same evidence again after the close: recorded already (exit 0); other
    evidence is still refused with the line that would record it."""
    h = agent_home
    a = ("--attempt", begin(h))
    h.run("intent", KEY, "send", "--class", "message", *a)
    assert h.run("record", KEY, "send", "--evidence", "m-1", *a).returncode == 0
    assert h.run("close", KEY, *a).returncode == 0
    again = h.run("record", KEY, "send", "--evidence", "m-1", *a)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"done: {KEY}/send (already recorded)\n"
    other = h.run("record", KEY, "send", "--evidence", "m-2", *a)
    assert other.returncode == 75
    assert "m-2 was NOT recorded" in one_error_line(other.stderr)


def test_an_agents_attempt_is_told_as_an_agents_not_as_pid_none(agent_home: Home) -> None:
    """An agent's attempt has no process: the busy answer, status and history say so
    ('an agent on HOST') instead of 'pid None'."""
    begin(agent_home)
    busy = agent_home.run("begin", "weekly", "-p", "week=2026-W32")
    assert busy.returncode == 75, busy.stdout + busy.stderr
    status = agent_home.run("status", KEY)
    history = agent_home.run("history", KEY)
    for said in (busy.stdout + busy.stderr, status.stdout, history.stdout):
        assert "pid None" not in said and "an agent on " in said, said
