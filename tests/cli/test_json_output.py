"""``--json`` on every command that prints a result (run, step, generate, the agent
protocol), parsed as a script would, with ISO 8601 times; a step's output streams
live to stderr and to its log while it still runs."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support import Home

RS = f"{sys.executable} -m retrysafe"


@pytest.fixture
def jobs(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config("""
        [jobs.rep]
        key = "rep:{n}"
        params = { n = "int" }

        [jobs.agent]
        key = "agent:{n}"
        params = { n = "int" }
        """)
    return home


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def _is_iso(text: Any) -> bool:
    return isinstance(text, str) and "T" in text and text.endswith("Z") and \
        datetime.fromisoformat(text).utcoffset() is not None


def test_run_json_is_one_object_on_stdout_with_the_commands_output_on_stderr(jobs: Home) -> None:
    """A first run, a done re-run and a blocked run each print one JSON object (the
    command's own stdout goes to stderr), with the exit code the text form has."""
    first = jobs.run("run", "rep", "-p", "n=1", "--json", "--", "sh", "-c", "echo from-cmd")
    got = _json(first)
    assert first.returncode == 0 and "from-cmd" in first.stderr
    assert (got["key"], got["status"], got["state"], got["attempt"], got["exit_code"],
            got["command_exit"]) == ("rep:1", "started", "done", 1, 0, 0)
    again = _json(jobs.run("run", "rep", "-p", "n=1", "--json", "--", "false"))
    assert (again["status"], again["state"], again["attempt"]) == ("done", "done", None)
    assert again["command_exit"] is None  # named, null: CMD did not run

    script = f"{RS} step charge --class payment -- echo ch-1"
    blocked = jobs.run("run", "rep", "-p", "n=2", "--json", "--", "sh", "-c", script)
    out = _json(blocked)
    assert blocked.returncode == 3 and out["exit_code"] == 3 and out["state"] == "blocked"
    assert out["unblock"] == "retrysafe approve rep:2 charge"


def test_json_times_are_iso_8601_in_status_history_and_ls(jobs: Home) -> None:
    """Every time a reading command prints in JSON is ISO 8601 UTC text, not a number."""
    assert jobs.run("run", "rep", "-p", "n=1", "--", "true").returncode == 0
    status = _json(jobs.run("status", "rep:1", "--json"))
    out, attempt = status["outcome"], status["attempts"][0]
    assert _is_iso(out["created_at"]) and _is_iso(out["updated_at"])
    assert _is_iso(attempt["started_at"]) and _is_iso(attempt["ended_at"])
    assert _is_iso(attempt["lease_expires"])
    assert all(_is_iso(e["at"]) for e in _json(jobs.run("history", "rep:1", "--json")))
    assert all(_is_iso(o["updated_at"]) for o in _json(jobs.run("ls", "--json")))


def test_step_and_generate_json_inside_a_run(jobs: Home, tmp_path: Path) -> None:
    """``step --json`` and ``generate --json`` print the step key, the state and the
    evidence (or the artifact's path); a done step answers in JSON too."""
    out = tmp_path / "out"
    out.mkdir()
    script = (
        f"{RS} generate draft --json -- sh -c 'echo text > \"$RETRYSAFE_OUTPUT\"' > {out}/gen.json\n"
        f"{RS} step send --class message --json -- echo msg-9 > {out}/step.json\n"
        f"{RS} step send --class message --json -- echo never > {out}/again.json\n")
    proc = jobs.run("run", "rep", "-p", "n=3", "--", "sh", "-ec", script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gen = json.loads((out / "gen.json").read_text())
    assert (gen["key"], gen["step"], gen["step_key"], gen["state"]) == ("rep:3", "draft",
                                                                         "rep:3/draft", "done")
    assert Path(gen["path"]).read_text() == "text\n"
    step = json.loads((out / "step.json").read_text())
    assert (step["step_key"], step["state"], step["evidence"], step["attempt"]) == (
        "rep:3/send", "done", "msg-9", 1)
    assert json.loads((out / "again.json").read_text())["evidence"] == "msg-9"


def test_the_agent_protocol_speaks_json_at_every_phase(jobs: Home) -> None:
    """begin, check, intent, record, unknown, block and close each print one JSON object
    a script parses; block still exits 3, with the command that unblocks it."""
    begun = _json(jobs.run("begin", "agent", "-p", "n=1", "--json"))
    att, key = begun["attempt_id"], begun["key"]
    assert _is_iso(begun["lease_expires"])
    a = ("--attempt", att, "--json")
    assert _json(jobs.run("check", key, "send", "--class", "message", *a))["action"] == "execute"
    intent = _json(jobs.run("intent", key, "send", "--class", "message", *a))
    assert (intent["step_key"], intent["state"]) == ("agent:1/send", "running")
    assert intent["next"].startswith("retrysafe record agent:1 send")
    rec = _json(jobs.run("record", key, "send", "--evidence", "m-1", *a))
    assert (rec["state"], rec["evidence"], rec["recorded"]) == ("done", "m-1", True)
    assert _json(jobs.run("record", key, "send", "--evidence", "m-1", *a))["recorded"] is False
    assert jobs.run("intent", key, "post", "--class", "publish", *a).returncode == 0
    unk = _json(jobs.run("unknown", key, "post", "--reason", "timeout", *a))
    assert (unk["state"], unk["reason"]) == ("unknown", "timeout")
    assert jobs.run("intent", key, "pay", "--class", "read", *a).returncode == 0
    blocked = jobs.run("block", key, "pay", "--reason", "two ids", *a)
    got = _json(blocked)
    assert blocked.returncode == 3
    assert (got["state"], got["reason"], got["cause"]) == ("blocked", "two ids", "agent")
    assert got["unblock"].startswith("retrysafe resolve agent:1 pay")
    closed = jobs.run("close", key, *a)
    assert closed.returncode == 3 and _json(closed)["state"] == "blocked"


def test_a_steps_output_is_seen_live_before_the_step_finishes(jobs: Home, tmp_path: Path) -> None:
    """The step's command prints a line, then waits until the test has seen that line
    both on the run's stderr and in ``attempt-1/step-slow.log``; only then may it end."""
    go = tmp_path / "go"
    cmd = tmp_path / "slow.sh"
    cmd.write_text(
        "#!/bin/sh\necho first-line\n"
        f'i=0; while [ ! -f "{go}" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n'
        "echo last-line\n")
    cmd.chmod(0o755)
    proc = jobs.popen("run", "rep", "-p", "n=5", "--", "sh", "-c",
                      f"{RS} step slow --class message -- {cmd}")
    try:
        assert proc.stderr is not None
        seen = ""
        while "first-line" not in seen:
            line = proc.stderr.readline()
            assert line, "stderr closed before the step's first line"
            seen += line
        logs = list(jobs.path.glob("runs/**/attempt-1/step-slow.log"))
        assert len(logs) == 1 and logs[0].read_text() == "first-line\n"
        assert proc.poll() is None and not go.exists()  # the step is still waiting
        go.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "last-line" in err
    assert logs[0].read_text() == "first-line\nlast-line\n"
    status = _json(jobs.run("status", "rep:5", "--json"))
    assert [s["evidence"] for s in status["steps"]] == ["last-line"]
