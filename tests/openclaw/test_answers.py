"""Runs that start no attempt still leave a trace: an ``answer`` event in the outcome's history.

A re-run answered "already done" and a twin answered "busy" are runs in
OpenClaw's history; the ledger keeps who asked (the runner, the process, the
OpenClaw run id when one is given), when, and what it was told, so the two
histories can be joined. Real processes against a real SQLite ledger (and
PostgreSQL through ``any_home``); no gateway.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from support import Home

CONFIG = """\
[jobs.report]
key = "report:{week}"
params = { week = "slug" }
"""
# what OpenClaw hands a command job (no run id, no job id)
OPENCLAW_ENV = {"OPENCLAW_CLI": "1", "OPENCLAW_GATEWAY_PORT": "18789"}


def configure(home: Home) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)


def answers(home: Home, key: str) -> list[dict[str, Any]]:
    done = home.run("history", key, "--json")
    assert done.returncode == 0, done.stderr
    return [e for e in json.loads(done.stdout) if e["kind"] == "answer"]


def test_done_rerun_is_recorded_with_runner_and_run_id(any_home: Home) -> None:
    configure(any_home)
    first = any_home.run("run", "report", "-p", "week=w1", "--", "true")
    assert first.returncode == 0, first.stderr
    assert answers(any_home, "report:w1") == []  # a run that did the work answers nothing extra

    again = any_home.run("openclaw", "run", "report", "-p", "week=w1",
                         "--openclaw-run-id", "run-42", "--", "true", env=OPENCLAW_ENV)
    assert again.returncode == 0, again.stderr
    assert "is already done" in again.stdout
    plain = any_home.run("run", "report", "-p", "week=w1", "--", "true")
    assert plain.returncode == 0

    # the scheduler's re-run is recorded; a re-run from a shell keeps its one-read answer
    (answer,) = answers(any_home, "report:w1")
    assert (answer["from_state"], answer["to_state"]) == ("done", "done")
    assert answer["actor"] == "openclaw:command"
    assert answer["reason"].startswith("already done; nothing ran (pid ")
    assert answer["reason"].endswith(", openclaw run run-42)")
    assert answer["attempt_id"] is None
    # a plain 'retrysafe run' that OpenClaw started is its re-run too (the fast path for a
    # done outcome leaves it to the full command, which records it)
    cron = any_home.run("run", "report", "-p", "week=w1", "--", "true", env=OPENCLAW_ENV)
    assert cron.returncode == 0 and "is already done" in cron.stdout
    assert [a["actor"] for a in answers(any_home, "report:w1")] == ["openclaw:command"] * 2
    # the outcome itself is untouched: still done, one attempt
    status = json.loads(any_home.run("status", "report:w1", "--json").stdout)
    assert status["outcome"]["state"] == "done" and len(status["attempts"]) == 1


def test_busy_answer_names_the_holder(home: Home, tmp_path: Path) -> None:
    configure(home)
    started = tmp_path / "started"
    release = tmp_path / "release"
    holder = home.popen("run", "report", "-p", "week=w2", "--", "sh", "-c",
                        f": > {started}; while [ ! -e {release} ]; do sleep 0.05; done")
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert holder.poll() is None, holder.communicate()
            assert time.monotonic() < deadline, "the holding run never started its command"
            time.sleep(0.05)
        twin = home.run("openclaw", "run", "report", "-p", "week=w2", "--", "true",
                        env=OPENCLAW_ENV)
        assert twin.returncode == 0, twin.stderr  # busy is not an OpenClaw error
        assert "busy: report:w2 is held by attempt 1" in twin.stdout
        plain_twin = home.run("run", "report", "-p", "week=w2", "--", "true")
        assert plain_twin.returncode == 75
    finally:
        release.touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0

    busy = answers(home, "report:w2")
    assert [(e["from_state"], e["to_state"], e["actor"]) for e in busy] == [
        ("running", "busy", "openclaw:command"), ("running", "busy", "run")]
    assert all(e["reason"].startswith("held by attempt 1; nothing ran (pid ") for e in busy)
