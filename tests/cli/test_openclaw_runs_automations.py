"""``retrysafe openclaw runs`` and ``cron-command`` with one automation per parameter value.

``runs`` shows every automation it can join; one whose command lacks a parameter
the job needs (a line made without ``-p``) or passes one the job does not declare
is named with what is wrong, not the end of the answer. ``cron-command`` names
each automation after its parameter values, so two regions' automations differ.
No gateway: ``openclaw`` here is a stub that answers ``cron list`` and ``cron
runs`` with the JSON the real one prints.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support import Home, executable

CONFIG = """
[jobs.report]
key = "report:{region}:{occurrence}"
schedule = "0 7 * * 1"
params = { region = "str", occurrence = "occurrence" }

[jobs.weekly]
key = "weekly:{occurrence}"
schedule = "0 7 * * 1"
params = { occurrence = "occurrence" }
"""

AT_MS = 1767596405250  # 2026-01-05 07:00:05.25 UTC, a Monday
RETRYSAFE = "/opt/retrysafe/bin/retrysafe --home /srv/retrysafe openclaw run"
AUTOMATIONS = [
    {"id": "job-eu", "name": "report region=eu",
     "command": f"{RETRYSAFE} report -p region=eu -- ./send.sh"},
    {"id": "job-old", "name": "report",  # made by a cron-command without -p
     "command": f"{RETRYSAFE} report -- ./send.sh"},
    {"id": "job-odd", "name": "report colour",
     "command": f"{RETRYSAFE} report -p region=us -p colour=red -- ./send.sh"},
]

STUB = """#!{python}
import json, sys
automations = {automations!r}
args = sys.argv[1:]
if args[:2] == ["cron", "list"]:
    print("banner line of the gateway")
    print(json.dumps({{"jobs": [{{"id": a["id"], "name": a["name"], "enabled": True,
        "payload": {{"kind": "command", "command": a["command"], "cwd": "/srv"}}}}
        for a in automations]}}))
elif args[:2] == ["cron", "runs"]:
    job = args[args.index("--id") + 1]
    region = {{"job-eu": "eu", "job-old": "?", "job-odd": "us"}}[job]
    print(json.dumps({{"entries": [{{"ts": {at_ms}, "jobId": job, "action": "finished",
        "status": "ok", "runAtMs": {at_ms},
        "summary": "done: report:" + region + ":2026-01-05T0700 (attempt 1)"}}]}}))
else:
    sys.exit(2)
"""


@pytest.fixture
def env(home: Home, tmp_path: Path) -> dict[str, str]:
    """OpenClaw's state folder of the test, not the user's."""
    state = tmp_path / "openclaw-state"
    state.mkdir()
    home.path.mkdir()
    home.config(CONFIG)
    return {"OPENCLAW_STATE_DIR": str(state), "OPENCLAW_CONFIG_PATH": ""}


@pytest.fixture
def fake(home: Home, env: dict[str, str], tmp_path: Path) -> Path:
    """The stub openclaw, and a ledger with report:eu's outcome of 2026-01-05."""
    ran = home.run("run", "report", "-p", "region=eu", "-p", "occurrence=2026-01-05T0700",
                   "--", "true", env=env)
    assert ran.returncode == 0, ran.stderr
    return executable(tmp_path / "openclaw", STUB.format(python=sys.executable,
                                                         automations=AUTOMATIONS, at_ms=AT_MS))


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr


# --- runs: an automation that cannot be joined ---------------------------------


def test_runs_shows_the_others_and_names_the_one_it_cannot_join(
    home: Home, env: dict[str, str], fake: Path
) -> None:
    done = home.run("openclaw", "runs", "report", "--openclaw", str(fake), env=env)
    no_traceback(done)
    assert done.returncode == 0, (done.stdout, done.stderr)
    rows = done.stdout.splitlines()
    assert rows[0].split() == ["TIME", "OPENCLAW", "KEY", "STATE", "ANSWER", "AUTOMATION"]
    assert [r.split()[2:] for r in rows[1:]] == [
        ["ok", "report:eu:2026-01-05T0700", "done", "done", "report", "region=eu"]]
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 2, done.stderr
    old, odd = warnings
    assert old.startswith("retrysafe: warning: automation 'report' (id job-old)"), old
    assert "-p region=VALUE" in old and "report" in old
    assert odd.startswith("retrysafe: warning: automation 'report colour' (id job-odd)"), odd
    assert "colour" in odd


def test_runs_json_says_why_an_automation_is_not_joined(
    home: Home, env: dict[str, str], fake: Path
) -> None:
    done = home.run("openclaw", "runs", "report", "--openclaw", str(fake), "--json", env=env)
    no_traceback(done)
    assert done.returncode == 0, (done.stdout, done.stderr)
    entries = json.loads(done.stdout)
    joined = [e for e in entries if e["not_joined"] is None]
    assert [(e["cron_job"], e["cron_job_id"], e["key"], e["state"], e["answer"]) for e in joined] == [
        ("report region=eu", "job-eu", "report:eu:2026-01-05T0700", "done", "done")]
    assert joined[0]["at"] == "2026-01-05T07:00:05.250000Z"
    skipped = {e["cron_job_id"]: e for e in entries if e["not_joined"] is not None}
    assert set(skipped) == {"job-old", "job-odd"}
    assert skipped["job-old"]["cron_job"] == "report"
    assert "region" in skipped["job-old"]["not_joined"]
    assert "colour" in skipped["job-odd"]["not_joined"]
    assert all(skipped[i]["key"] is None and skipped[i]["at"] is None for i in skipped)
    assert "job-old" in done.stderr and "job-odd" in done.stderr  # warned on stderr too


# --- cron-command: the automation's default name ---------------------------------


def cron_add_name(line: str) -> str:
    words = shlex.split(line)
    assert words[:3] == ["openclaw", "cron", "add"], line
    return words[words.index("--name") + 1]


def test_cron_command_default_name_carries_the_parameter_values(
    home: Home, env: dict[str, str]
) -> None:
    names = []
    for region in ("eu", "us"):
        done = home.run("openclaw", "cron-command", "report", "-p", f"region={region}",
                        "--", "/srv/send.sh", env=env)
        assert done.returncode == 0, done.stderr
        names.append(cron_add_name(done.stdout.strip()))
    assert names == ["report region=eu", "report region=us"]


def test_cron_command_name_without_params_or_given_is_kept(
    home: Home, env: dict[str, str]
) -> None:
    plain = home.run("openclaw", "cron-command", "weekly", "--", "/srv/send.sh", env=env)
    assert plain.returncode == 0, plain.stderr
    assert cron_add_name(plain.stdout.strip()) == "weekly"
    named = home.run("openclaw", "cron-command", "report", "-p", "region=eu", "--name", "eu-report",
                     "--", "/srv/send.sh", env=env)
    assert named.returncode == 0, named.stderr
    assert cron_add_name(named.stdout.strip()) == "eu-report"
