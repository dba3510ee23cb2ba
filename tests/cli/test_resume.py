"""Settled is not failed: a resolved outcome awaits its re-run, and ``resume`` /
``resolve --rerun`` run the recorded command again, as ``retrysafe run`` did."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import Home

RS = f"{sys.executable} -m retrysafe"
KEY = "pub:7"


@pytest.fixture
def blocked(any_home: Home, tmp_path: Path) -> tuple[Home, Path]:
    """``pub:7`` blocked for real: its first run's step exited 9 (unknown), the second
    run found no lookup to settle it. The job's script is ``./job.sh`` in ``work``."""
    home = any_home
    home.path.mkdir(parents=True, exist_ok=True)
    home.config("""
        [jobs.pub]
        key = "pub:{n}"
        params = { n = "int" }
        """)
    work = tmp_path / "work dir"
    work.mkdir()
    script = work / "job.sh"
    script.write_text(
        "#!/bin/sh\nset -e\n"
        'echo "$RETRYSAFE_OUTCOME_KEY $RETRYSAFE_ATTEMPT_ID" >> runs.log\n'
        f"{RS} step post --class publish -- sh -c "
        "'if [ -f ok ]; then echo post-1; else exit 9; fi'\n")
    script.chmod(0o755)
    assert home.run("run", "pub", "-p", "n=7", "--", "./job.sh", cwd=work).returncode == 1
    second = home.run("run", "pub", "-p", "n=7", "--", "./job.sh", cwd=work)
    assert second.returncode == 3, second.stdout + second.stderr
    return home, work


def _ls(home: Home, state: str) -> list[str]:
    proc = home.run("ls", "--state", state, "--json")
    assert proc.returncode == 0, proc.stderr
    return [o["key"] for o in json.loads(proc.stdout)]


def test_a_resolved_outcome_is_settled_not_failed_and_resume_reruns_its_command(
        blocked: tuple[Home, Path], tmp_path: Path) -> None:
    """After ``resolve --absent`` the outcome reads ``settled`` (absent from
    ``ls --state failed``); ``resume`` from another folder runs ``./job.sh`` again in
    the folder it ran in, with the same job and parameters, to done."""
    home, work = blocked
    settled = home.run("resolve", KEY, "post", "--absent", "--note", "not on the site")
    assert settled.returncode == 0, settled.stderr
    status = json.loads(home.run("status", KEY, "--json").stdout)
    assert status["outcome"]["state"] == "settled"
    assert "re-run" in status["outcome"]["reason"]
    assert KEY not in _ls(home, "failed")
    assert _ls(home, "settled") == [KEY]
    assert json.loads(status["attempts"][-1]["context"]["command"]) == ["./job.sh"]

    (work / "ok").touch()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = home.run("resume", KEY, cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.strip().splitlines()[-1] == f"done: {KEY} (attempt 3)"
    runs = (work / "runs.log").read_text().splitlines()
    assert len(runs) == 3 and all(line.startswith(f"{KEY} ") for line in runs)
    assert not (elsewhere / "runs.log").exists()
    again = home.run("resume", KEY)
    assert again.returncode == 0 and "already done" in again.stdout


def test_resolve_rerun_settles_and_runs_again_with_one_json_result(
        blocked: tuple[Home, Path]) -> None:
    """``resolve --absent --rerun --json``: one JSON object on stdout holding the
    resolved step and the re-run's result; the command's own output is not in it."""
    home, work = blocked
    (work / "ok").touch()
    proc = home.run("resolve", KEY, "post", "--absent", "--rerun", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    assert got["resolved"]["state"] == "planned"
    assert (got["key"], got["state"], got["status"], got["attempt"]) == (KEY, "done", "started", 3)
    assert got["exit_code"] == 0 and got["command_exit"] == 0
    assert "post-1" in proc.stderr


def test_rerun_of_an_outcome_still_blocked_exits_3_with_the_unblock_command(
        blocked: tuple[Home, Path]) -> None:
    """``resume`` of an outcome that is still blocked runs nothing and prints what
    settles it."""
    home, work = blocked
    proc = home.run("resume", KEY)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "to unblock: retrysafe resolve pub:7 post" in proc.stdout
    assert len((work / "runs.log").read_text().splitlines()) == 2


def test_resume_without_a_recorded_command_is_refused_with_exit_2(home: Home) -> None:
    """An outcome an agent drove with ``begin`` has no command: one line, exit 2,
    and ``resolve --rerun`` refuses before settling anything."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config("""
        [jobs.agent]
        key = "agent:{n}"
        params = { n = "int" }
        """)
    begun = json.loads(home.run("begin", "agent", "-p", "n=1", "--json").stdout)
    att = begun["attempt_id"]
    assert home.run("intent", "agent:1", "send", "--class", "message", "--attempt", att).returncode == 0
    assert home.run("unknown", "agent:1", "send", "--reason", "timeout", "--attempt", att).returncode == 0
    assert home.run("close", "agent:1", "--attempt", att).returncode == 1
    proc = home.run("resume", "agent:1")
    assert proc.returncode == 2
    assert proc.stderr.startswith("retrysafe: no attempt of agent:1 recorded a command")
    assert "Traceback" not in proc.stderr
    before = home.snapshot()
    refused = home.run("resolve", "agent:1", "send", "--absent", "--rerun")
    assert refused.returncode == 2 and "recorded a command" in refused.stderr
    assert home.snapshot() == before
    missing = home.run("resume", "agent:404")
    assert missing.returncode == 2 and "agent:404" in missing.stderr
