"""Command lines inside messages: quoted once for the shell, so each pastes as printed;
a per-item step named once; the agent protocol's ``record`` row names ``--item``."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import Home

from retrysafe.errors import StaleAttempt

ROOT = Path(__file__).resolve().parents[2]
RS = f"{shlex.quote(sys.executable)} -m retrysafe"
# a key with a space and a quote (a str parameter): every printed command must quote it
ODD = "it's a x"
KEY = f"once:{ODD}"


def command_at(text: str, verb: str) -> list[str]:
    """The words of the ``retrysafe VERB ...`` command in ``text``, as a shell reads them
    when the command is pasted: up to the first unquoted ``;`` or the end of the line."""
    start = text.index(f"retrysafe {verb} ")
    lexer = shlex.shlex(text[start:].splitlines()[0], posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    words: list[str] = []
    for word in lexer:
        if word == ";":
            break
        words.append(word)
    return words


def paste(home: Home, words: list[str]) -> subprocess.CompletedProcess[str]:
    line = " ".join(shlex.quote(w) for w in words).replace("retrysafe", RS, 1)
    return subprocess.run(line, shell=True, env=home.env, capture_output=True, text=True,
                          check=False)


@pytest.fixture
def exhausted(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.once]
        key = "once:{s}"
        params = { s = "str" }
        max_attempts = 1
        """
    )
    for want in (1, 3):  # fails, then past the limit: blocked, attempts exhausted
        proc = home.run("run", "once", "-p", f"s={ODD}", "--", "sh", "-c", "exit 1")
        assert proc.returncode == want, proc.stdout + proc.stderr
    return home


def test_the_exhausted_reason_holds_each_command_once_quoted_and_they_paste(
        exhausted: Home) -> None:
    """The reason of an outcome blocked by its attempt limit, as status, ls and
    needs-attention show it: each command is quoted once for the shell (no quotes
    around the already quoted key), and pasted, status shows it and retry settles it."""
    shown = {
        "status": exhausted.run("status", KEY).stdout,
        "ls": exhausted.run("ls", "--json").stdout,
        "ls --attention": exhausted.run("ls", "--attention").stdout,
        "needs-attention": exhausted.run("needs-attention").stdout,
    }
    items: list[dict[str, Any]] = json.loads(exhausted.run("needs-attention", "--json").stdout)
    shown["needs-attention --json"] = items[0]["reason"]
    listed: list[dict[str, Any]] = json.loads(shown.pop("ls"))
    shown["ls --json"] = listed[0]["reason"]
    table = exhausted.run("ls").stdout
    assert "attempts exhausted" in table and "'retrysafe" not in table
    for where, text in shown.items():
        reason = text[text.index("attempts exhausted"):].splitlines()[0]
        assert "'retrysafe" not in reason, (where, reason)
        assert command_at(reason, "status") == ["retrysafe", "status", KEY], (where, reason)
        assert command_at(reason, "retry") == ["retrysafe", "retry", KEY], (where, reason)

    reason = items[0]["reason"]
    status = paste(exhausted, command_at(reason, "status"))
    assert status.returncode == 0 and f"outcome   {KEY}" in status.stdout, status.stderr
    retry = paste(exhausted, command_at(reason, "retry"))
    assert retry.returncode == 0, retry.stderr
    assert json.loads(exhausted.run("needs-attention", "--json").stdout) == []


@pytest.mark.parametrize(("step", "named"), [
    ("rep:x/send/row-1", "if step rep:x/send/row-1 is still unknown"),
    ("send", "if step send of rep:x is still unknown"),
])
def test_a_superseded_records_message_names_the_step_once(step: str, named: str) -> None:
    """The step of per-item work is its full step key, which holds the key: named once."""
    exc = StaleAttempt.unrecorded(StaleAttempt("stale: attempt 1 of rep:x lost its lease"),
                                  "rep:x", step, "msg-7")
    assert named in exc.message
    assert "rep:x/rep:x" not in exc.message


def test_a_superseded_per_item_record_names_its_step_key_once(home: Home) -> None:
    """``record --item`` from an attempt that was taken over: the refusal names the step
    key once (it said ``rep:x/rep:x/send/row-1``)."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.rep]
        key = "rep:{name}"
        params = { name = "slug" }
        """
    )

    def begin(*extra: str) -> str:
        done = home.run("begin", "rep", "-p", "name=x", "--json", *extra)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["attempt_id"])

    first = begin("--lease", "1")
    a = ("--item", "row-1", "--attempt", first)
    assert home.run("intent", "rep:x", "send", "--class", "message", *a).returncode == 0
    time.sleep(2.5)  # the first attempt's lease runs out
    begin()
    stale = home.run("record", "rep:x", "send", "--evidence", "msg-7", *a)
    assert stale.returncode == 75, stale.stderr
    assert "if step rep:x/send/row-1 is still unknown" in stale.stderr, stale.stderr
    assert stale.stderr.count("rep:x/send/row-1") == 2, stale.stderr  # and in the command


def test_the_protocol_table_row_of_record_names_item() -> None:
    """docs/openclaw.md's protocol table: the ``record`` row gives ``--item ID`` for
    per-item work, as ``retrysafe record`` accepts it."""
    doc = (ROOT / "docs" / "openclaw.md").read_text()
    rows = [ln for ln in doc.splitlines() if ln.startswith("| `retrysafe record KEY STEP")]
    assert len(rows) == 1
    usage = re.search(r"`(retrysafe record [^`]*)`", rows[0])
    assert usage is not None and "[--item ID]" in usage.group(1), rows[0]
    helped = subprocess.run([sys.executable, "-m", "retrysafe", "record", "--help"],
                            capture_output=True, text=True, check=False)
    assert "--item ID" in helped.stdout


def test_the_break_lease_line_of_a_busy_outcome_pastes(home: Home) -> None:
    """An outcome held by a live run: the refusal's break-lease line is quoted once, so a
    pasted copy names the held outcome (it was wrapped in another pair of quotes, which a
    shell joined to the key's own quoting)."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config('[jobs.hold]\nkey = "hold:{s}"\nparams = { s = "str" }\n')
    held = home.popen("run", "hold", "-p", f"s={ODD}", "--", "sleep", "30",
                      start_new_session=True)
    try:
        for _ in range(400):
            if home.run("status", f"hold:{ODD}").returncode == 0:
                break
            time.sleep(0.05)
        busy = home.run("run", "hold", "-p", f"s={ODD}", "--", "true")
        assert busy.returncode == 75, busy.stdout + busy.stderr
        words = command_at(busy.stdout + busy.stderr, "break-lease")
        assert words == ["retrysafe", "break-lease", f"hold:{ODD}"]
    finally:
        os.killpg(held.pid, signal.SIGKILL)  # the run and its sleep
        held.communicate()
