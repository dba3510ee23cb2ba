"""The command lines the agent protocol prints for per-item work, pasted exactly as
printed: each names the item (and the attempt), so it settles that item's step."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from typing import Any

import pytest
from support import Home

# a key with a space and a quote: every printed line must quote it for the shell
ODD = "it's a test"
KEY = f"rep:{ODD}"


@pytest.fixture
def agent_home(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.rep]
        key = "rep:{name}"
        params = { name = "str" }
        """
    )
    return home


def begin(home: Home, *extra: str) -> str:
    done = home.run("begin", "rep", "-p", f"name={ODD}", "--json", *extra)
    assert done.returncode == 0, done.stderr
    info: dict[str, Any] = json.loads(done.stdout)
    assert info["key"] == KEY
    return str(info["attempt_id"])


def paste(home: Home, line: str) -> subprocess.CompletedProcess[str]:
    """Run a printed command line as a shell would split it."""
    words = shlex.split(line)
    assert words[0] == "retrysafe", line
    return home.run(*words[1:])


def item_steps(home: Home) -> dict[str | None, dict[str, Any]]:
    status = home.run("status", KEY, "--json")
    assert status.returncode == 0, status.stderr
    return {s["item"]: s for s in json.loads(status.stdout)["steps"]}


def one_error_line(stderr: str) -> str:
    assert stderr.startswith("retrysafe: ") and stderr.count("\n") == 1, stderr
    return stderr.rstrip("\n")


def test_the_record_line_intent_prints_settles_that_item(agent_home: Home) -> None:
    """``intent --item``: the printed ``record`` line, pasted, records that item's step
    (not the step without an item, nor another item's)."""
    h = agent_home
    attempt = begin(h)
    a = ("--class", "message", "--attempt", attempt)
    other = h.run("intent", KEY, "send", "--item", "row-8", *a, "--json")
    assert other.returncode == 0, other.stderr
    intent = h.run("intent", KEY, "send", "--item", "row-7", *a)
    assert intent.returncode == 0, intent.stderr
    line = intent.stdout.rstrip("\n")
    assert line.startswith("running: ") and line.endswith("'")
    follow_up = line.split("act once now, then '", 1)[1][:-1]
    assert "--item row-7" in follow_up and follow_up.endswith(" --evidence <EVIDENCE>")

    pasted = paste(h, follow_up.replace("<EVIDENCE>", "msg-7"))  # the id, as the line asks
    assert pasted.returncode == 0, pasted.stderr
    steps = item_steps(h)
    assert (steps["row-7"]["state"], steps["row-7"]["evidence"]) == ("done", "msg-7")
    assert steps["row-8"]["state"] == "running"
    assert None not in steps

    # the JSON answer's `next` is the same line, for the other item
    pasted = paste(h, json.loads(other.stdout)["next"].replace("<EVIDENCE>", "msg-8"))
    assert pasted.returncode == 0, pasted.stderr
    assert item_steps(h)["row-8"]["state"] == "done"


def test_the_record_line_of_a_look_first_refusal_settles_that_item(agent_home: Home) -> None:
    """``intent --item`` on a step that may have acted is refused (look first); the
    ``record`` line it names, pasted, settles that item's step as found."""
    h = agent_home
    attempt = begin(h)
    a = ("--item", "a.1", "--attempt", attempt)
    assert h.run("intent", KEY, "post", "--class", "publish", *a).returncode == 0
    assert h.run("unknown", KEY, "post", "--reason", "timeout", *a).returncode == 0

    refused = h.run("intent", KEY, "post", "--class", "publish", *a)
    assert refused.returncode == 2
    error = one_error_line(refused.stderr)
    assert "look first" in error
    found = error.split("Found: '", 1)[1].split("'. Certainly absent", 1)[0]
    assert "--item a.1" in found

    pasted = paste(h, found.replace("<EVIDENCE>", "post-41"))
    assert pasted.returncode == 0, pasted.stderr
    steps = item_steps(h)
    assert (steps["a.1"]["state"], steps["a.1"]["evidence"]) == ("done", "post-41")
    assert None not in steps


def test_the_resolve_line_of_a_superseded_record_names_that_item(agent_home: Home) -> None:
    """``record --item`` from an attempt that was taken over is refused (exit 75) with
    the ``resolve`` line for a human; pasted, it records that item's step found (the
    step name alone would not do: two items of it are unsettled)."""
    h = agent_home
    first = begin(h, "--lease", "1")
    a = ("--item", "row-1", "--attempt", first)
    assert h.run("intent", KEY, "send", "--class", "message", *a).returncode == 0
    assert h.run("intent", KEY, "send", "--class", "message", "--item", "row-2",
                 "--attempt", first).returncode == 0
    time.sleep(2.5)  # the first attempt's lease runs out
    begin(h)

    stale = h.run("record", KEY, "send", "--evidence", "msg 7", *a)
    assert stale.returncode == 75
    error = one_error_line(stale.stderr)
    resolve = error.split("still unknown, run: ", 1)[1]
    before = item_steps(h)["row-2"]

    pasted = paste(h, resolve)
    assert pasted.returncode == 0, pasted.stderr
    steps = item_steps(h)
    assert (steps["row-1"]["state"], steps["row-1"]["evidence"]) == ("done", "msg 7")
    assert steps["row-2"] == before
    assert None not in steps
