"""``retrysafe begin --context``: who started an agent's attempt (OpenClaw's run and
job ids, from the guard plugin) is recorded with the attempt, and a done or busy
answer to such a run is put in the outcome's history, so OpenClaw's run history
joins the ledger's. Bad names and values are one line, exit 2, nothing written."""

from __future__ import annotations

import json

from support import Home

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
"""


def test_the_context_is_recorded_and_a_done_answer_joins_the_history(home: Home) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    begun = home.run("begin", "report", "-p", "week=2026-W20", "--json",
                     "--context", "runner=openclaw:plugin", "--context", "openclaw_run_id=r-1")
    assert begun.returncode == 0, begun.stderr
    info = json.loads(begun.stdout)
    closed = home.run("close", info["key"], "--attempt", info["attempt_id"])
    assert closed.returncode == 0, closed.stderr
    status = json.loads(home.run("status", "report:2026-W20", "--json").stdout)
    context = status["attempts"][0]["context"]
    assert (context["runner"], context["openclaw_run_id"]) == ("openclaw:plugin", "r-1")

    again = home.run("begin", "report", "-p", "week=2026-W20", "--json",
                     "--context", "runner=openclaw:plugin", "--context", "openclaw_run_id=r-2")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "done"
    history = json.loads(home.run("history", "report:2026-W20", "--json").stdout)
    answers = [e for e in history if e["kind"] == "answer"]
    assert len(answers) == 1
    assert answers[0]["to_state"] == "done" and "openclaw run r-2" in answers[0]["reason"]
    assert answers[0]["actor"] == "openclaw:plugin"
    # without a --context nobody asked by name: no history row per answer
    home.run("begin", "report", "-p", "week=2026-W20")
    history = json.loads(home.run("history", "report:2026-W20", "--json").stdout)
    assert len([e for e in history if e["kind"] == "answer"]) == 1


def test_a_bad_context_is_one_line_and_exit_2(home: Home) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    for bad in ("Runner=x", "x", "agent_lease_seconds=5", "command=rm", "note=a\nb",
                "note=" + "x" * 201):
        got = home.run("begin", "report", "-p", "week=2026-W21", "--context", bad)
        assert got.returncode == 2, (bad, got.stdout, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1 and "Traceback" not in got.stderr
    status = home.run("status", "report:2026-W21")
    assert status.returncode != 0  # nothing was recorded
