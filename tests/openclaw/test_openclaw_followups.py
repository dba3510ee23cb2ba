"""The lines the agent commands print for the next step, and the OpenClaw checks around them.

* ``intent`` prints the ``record`` line to run after the action (``--json``: ``next``),
  ``<EVIDENCE>`` standing for the evidence: pasted unedited into a shell it is refused,
  and ``record`` refuses a placeholder as evidence; the plugin's settle line and the
  skill say the same;
* ``openclaw runs``: a run whose time has no occurrence to join it to is a warning
  for that run, the others are listed;
* ``openclaw doctor`` fails a command job that would be refused at every run (a job
  this home does not declare, a ``-p`` the job needs left out), and a plugin mapping
  without the parameters its job needs;
* ``openclaw install-plugin`` refuses a program that does not answer as OpenClaw.

Real processes: the CLI, ``bash`` for pasted lines, Node for the plugin's guard (skipped
without Node, as tests/openclaw/test_plugin_node.py is). ``openclaw`` is a stand-in
program answering with fixed JSON (the real gateway is scripts/e2e-openclaw's tier).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import Home, executable

from retrysafe.openclaw.plugin import plugin_dir
from retrysafe.openclaw.skill import skill_text

BIN = Path(sys.executable).parent
RETRYSAFE = BIN / "retrysafe"
NODE = os.environ.get("RETRYSAFE_E2E_NODE_BIN", "")
NODE_EXE = str(Path(NODE) / "node") if NODE else shutil.which("node")

AGENT = """
[jobs.rep]
key = "rep:{name}"
params = { name = "str" }
"""
ODD = "it's a test"  # a key with a quote and a space: every printed line quotes it
KEY = f"rep:{ODD}"

REPORT = """
[jobs.report]
key = "report:{region}:{occurrence}"
schedule = "0 7 * * 1"
params = { region = "str", occurrence = "occurrence" }
"""


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.stderr.startswith("retrysafe: ") and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr.rstrip("\n")


def bash(home: Home, line: str) -> subprocess.CompletedProcess[str]:
    """A printed line pasted into a shell, as a person or an agent's exec tool runs it."""
    env = {**home.env, "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}
    return subprocess.run(["bash", "-c", line], env=env, cwd=home.path, capture_output=True,
                          text=True, timeout=120, check=False)


def steps(home: Home, key: str) -> dict[tuple[str, str | None], dict[str, Any]]:
    status = home.run("status", key, "--json")
    assert status.returncode == 0, status.stderr
    return {(s["name"], s["item"] or None): s for s in json.loads(status.stdout)["steps"]}


@pytest.fixture
def agent(home: Home) -> Home:
    home.path.mkdir(parents=True)
    home.config(AGENT)
    return home


def begin(home: Home) -> str:
    done = home.run("begin", "rep", "-p", f"name={ODD}", "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["attempt_id"])


# --- 1. the record line intent prints ---------------------------------------------------


@pytest.mark.parametrize("item", [None, "row-7"], ids=["step", "item"])
def test_the_record_line_intent_prints_records_nothing_until_the_evidence_is_given(
    agent: Home, item: str | None
) -> None:
    """Printed and in ``next`` it is one line, the placeholder last: pasted as printed the
    shell refuses it and the step stays running; with the id in its place it records it."""
    attempt = begin(agent)
    args = ("intent", KEY, "send", "--class", "message", *(("--item", item) if item else ()),
            "--attempt", attempt)
    text = agent.run(*args)
    assert text.returncode == 0, text.stderr
    line = text.stdout.rstrip("\n").split("act once now, then '", 1)[1][:-1]

    pasted = bash(agent, line)
    assert pasted.returncode != 0, pasted.stdout
    assert steps(agent, KEY)[("send", item)]["state"] == "running"
    assert line.endswith(" --evidence <EVIDENCE>"), line

    given = bash(agent, line.replace("<EVIDENCE>", shlex.quote("<m-1@mail>")))
    assert given.returncode == 0, given.stderr
    step = steps(agent, KEY)[("send", item)]
    assert (step["state"], step["evidence"]) == ("done", "<m-1@mail>")


def test_the_json_next_is_the_printed_line(agent: Home) -> None:
    attempt = begin(agent)
    a = ("--class", "message", "--attempt", attempt)
    text = agent.run("intent", KEY, "send", *a)
    as_json = agent.run("intent", KEY, "post", *a, "--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    printed = text.stdout.rstrip("\n").split("act once now, then '", 1)[1][:-1]
    assert json.loads(as_json.stdout)["next"] == printed.replace(" send ", " post ")

    pasted = bash(agent, json.loads(as_json.stdout)["next"])
    assert pasted.returncode != 0
    assert steps(agent, KEY)[("post", None)]["state"] == "running"


def test_the_record_line_of_a_look_first_refusal_is_refused_as_printed(agent: Home) -> None:
    attempt = begin(agent)
    a = ("--class", "publish", "--attempt", attempt)
    assert agent.run("intent", KEY, "post", *a).returncode == 0
    assert agent.run("unknown", KEY, "post", "--reason", "timeout", "--attempt", attempt).returncode == 0
    refused = agent.run("intent", KEY, "post", *a)
    error = one_line_error(refused, 2, "look first")
    found = error.split("Found: '", 1)[1].split("'. Certainly absent", 1)[0]
    assert bash(agent, found).returncode != 0
    assert steps(agent, KEY)[("post", None)]["state"] == "unknown"
    assert found.endswith(" --evidence <EVIDENCE>"), found


@pytest.mark.parametrize("placeholder", ["ID", "<EVIDENCE>", "EVIDENCE", "PROVIDER_ID", " <ID> "])
def test_record_refuses_a_placeholder_as_evidence(agent: Home, placeholder: str) -> None:
    """Quoted past the shell (or from an older printed line), a placeholder is still not
    evidence: exit 2, one line, nothing written (not even the lease renewed)."""
    attempt = begin(agent)
    assert agent.run("intent", KEY, "send", "--class", "message", "--attempt", attempt).returncode == 0
    before = agent.snapshot()
    done = agent.run("record", KEY, "send", "--evidence", placeholder, "--attempt", attempt)
    one_line_error(done, 2, "placeholder")
    assert agent.snapshot() == before
    assert steps(agent, KEY)[("send", None)]["state"] == "running"
    # an id that merely contains such a word is evidence
    ok = agent.run("record", KEY, "send", "--evidence", "ID-7", "--attempt", attempt)
    assert ok.returncode == 0, ok.stderr


def test_the_skill_records_with_the_placeholder_intent_prints() -> None:
    lines = [ln for ln in skill_text().splitlines() if ln.startswith("retrysafe record ")]
    assert lines and all(ln.endswith(" --evidence <EVIDENCE>") for ln in lines), lines


GUARD = """
import { createGuard } from %(guard)s;
import { execFileSync } from "node:child_process";
const config = { retrysafe: %(bin)s, home: %(home)s, jobs: { "job-1": "report" },
                 guards: [{ tool: "message", class: "message", step: "send" }] };
const guard = createGuard(config);
const ctx = { jobId: "job-1", sessionKey: "agent:main:cron:job-1:run:r1", runId: "r1" };
const call = (id) => ({ toolName: "message", params: { text: "hi" }, toolCallId: id });
await guard.before(call("c1"), ctx);
const { key, attempt } = [...guard.attempts.values()][0];
execFileSync(config.retrysafe, ["--home", config.home, "unknown", key, "send", "--reason",
                                "timeout", "--attempt", attempt]);
const decided = await guard.before(call("c2"), ctx);
console.log(JSON.stringify({ key, decided }));
"""


@pytest.mark.skipif(NODE_EXE is None, reason="Node is not installed (scripts/e2e-openclaw runs this)")
def test_the_plugins_settle_line_is_refused_as_printed(home: Home) -> None:
    """A guarded call that may have happened and has no lookup is blocked with the line a
    person runs to settle it; pasted unedited, it settles nothing."""
    assert NODE_EXE is not None
    home.path.mkdir(parents=True)
    home.config('[jobs.report]\nkey = "report:{occurrence}"\nschedule = "0 7 * * 1"\n'
                'params = { occurrence = "occurrence" }\n')
    script = GUARD % {"guard": json.dumps((plugin_dir() / "guard.js").as_uri()),
                      "bin": json.dumps(str(RETRYSAFE)), "home": json.dumps(str(home.path))}
    ran = subprocess.run([NODE_EXE, "--input-type=module", "-e", script], env=home.env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    reason = out["decided"]["blockReason"]
    line = reason.split("a human decides: ", 1)[1]
    assert steps(home, out["key"])[("send", None)]["state"] == "blocked"

    pasted = bash(home, line)
    assert pasted.returncode != 0
    step = steps(home, out["key"])[("send", None)]
    assert step["state"] == "blocked" and step["evidence"] != "EVIDENCE", step
    assert line.endswith(" --found <EVIDENCE> | --absent"), reason
    settled = bash(home, line.split(" | ", 1)[0].replace("<EVIDENCE>", "m-5"))
    assert settled.returncode == 0, settled.stderr
    step = steps(home, out["key"])[("send", None)]
    assert (step["state"], step["evidence"]) == ("done", "m-5")


# --- a stand-in openclaw --------------------------------------------------------------

STUB = """#!{python}
import json, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:1] == ["--version"]:
    print({version!r})
elif args[:2] == ["cron", "list"]:
    print(json.dumps({{"jobs": {jobs!r}}}))
elif args[:2] == ["cron", "runs"]:
    print(json.dumps({{"entries": {runs!r}}}))
elif args[:2] == ["plugins", "install"]:
    print("installed")
else:
    sys.exit(2)
"""


def stub(tmp_path: Path, *, jobs: list[dict[str, Any]] | None = None,
         runs: list[dict[str, Any]] | None = None, version: str = "OpenClaw 2026.9.6 (0123abc)") -> Path:
    return executable(tmp_path / "openclaw", STUB.format(
        python=sys.executable, log=str(tmp_path / "openclaw.log"), version=version,
        jobs=jobs or [], runs=runs or []))


def stub_calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "openclaw.log"
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def command_job(cron_id: str, command: str, cwd: str | None = "/srv") -> dict[str, Any]:
    payload: dict[str, Any] = {"kind": "command", "command": command}
    if cwd:
        payload["cwd"] = cwd
    return {"id": cron_id, "name": f"auto {cron_id}", "payload": payload}


@pytest.fixture
def report(home: Home, tmp_path: Path) -> dict[str, str]:
    """A home declaring a scheduled job with a parameter; OpenClaw's state folder of the test."""
    home.path.mkdir(parents=True)
    home.config(REPORT)
    state = tmp_path / "openclaw-state"
    state.mkdir()
    return {"OPENCLAW_STATE_DIR": str(state), "OPENCLAW_CONFIG_PATH": ""}


# --- 2. openclaw runs: runs that cannot be joined ------------------------------------------

MONDAY_MS = 1767596405250  # 2026-01-05 07:00:05.25 UTC, a Monday
LAST_MS = 253_402_041_600_000  # 9999-12-29 UTC: at the end of the dates a time can hold
LONG = """
[jobs.long]
key = "long:{a}:{b}:{occurrence}"
schedule = "0 7 * * 1"
params = { a = "str", b = "str", occurrence = "occurrence" }
"""


def test_runs_that_cannot_be_joined_are_warnings_and_the_others_are_listed(
    home: Home, report: dict[str, str], tmp_path: Path
) -> None:
    """A run at the end of the calendar (no occurrence to join it to could be computed)
    and an automation whose parameters make a key too long (each is valid alone) do not
    take the command down: each is a warning, the other runs are listed, exit 0."""
    home.config(REPORT + LONG)
    command = f"{RETRYSAFE} --home {home.path} openclaw run report -p region=eu -- ./send.sh"
    assert home.run("run", "report", "-p", "region=eu", "--", "true", env=report).returncode == 0
    long_key = home.run("run", "long", "-p", f"a={'x' * 200}", "-p", f"b={'y' * 40}", "--", "true",
                        env=report)
    one_line_error(long_key, 2, "outcome key is")  # what each run of such an automation gets
    long_job = command_job("j4", f"{RETRYSAFE} --home {home.path} openclaw run long "
                                 f"-p a={'x' * 200} -p b={'y' * 40} -- ./send.sh")
    fake = stub(tmp_path, jobs=[command_job("j1", command), long_job], runs=[
        {"action": "finished", "status": "ok", "runAtMs": LAST_MS, "summary": "?"},
        {"action": "finished", "status": "ok", "runAtMs": MONDAY_MS,
         "summary": "done: report:eu:2026-01-05T0700 (attempt 1)"},
    ])

    for job in ("report", "long"):
        done = home.run("openclaw", "runs", job, "--openclaw", str(fake), env=report)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        warnings = done.stderr.splitlines()
        assert all(w.startswith("retrysafe: warning: automation ") for w in warnings), warnings
        if job == "long":
            (warning,) = warnings
            assert warning.startswith("retrysafe: warning: automation 'auto j4' (id j4): runs not "
                                      "shown: its command passes parameters"), warning
            assert "outcome key is" in warning and done.stdout == ""
            continue
        rows = done.stdout.splitlines()
        assert "report:eu:2026-01-05T0700" in done.stdout, done.stdout
        # the last run is either joined to the last occurrence or named in a warning
        late = [r for r in rows if r.startswith("9999-12-29 ")]
        assert len(rows) == 2 + len(late) and len(late) + len(warnings) == 1, (rows, warnings)
        if warnings:
            assert warnings[0].startswith("retrysafe: warning: automation 'auto j1' (id j1): run "
                                          "at 9999-12-29 00:00:00Z not shown: "), warnings

    as_json = home.run("openclaw", "runs", "report", "--openclaw", str(fake), "--json", env=report)
    assert as_json.returncode == 0, as_json.stderr
    entries = json.loads(as_json.stdout)
    (joined,) = [e for e in entries if e["key"] == "report:eu:2026-01-05T0700"]
    assert joined["not_joined"] is None
    (late,) = [e for e in entries if e["at"].startswith("9999-12-29T00:00:00")]
    assert late["openclaw_status"] == "ok"
    assert (late["key"] is None) == bool(late["not_joined"]) == (late["state"] is None)


def test_cron_command_refuses_parameters_that_make_too_long_a_key(
    home: Home, report: dict[str, str]
) -> None:
    """Each value fits, the key they make does not: refused when the line is made, not at
    every run of the automation."""
    home.config(REPORT + LONG)
    done = home.run("openclaw", "cron-command", "long", "-p", f"a={'x' * 200}",
                    "-p", f"b={'y' * 40}", "--", "/srv/send.sh", env=report)
    one_line_error(done, 2, "outcome key is")
    assert done.stdout == ""


def test_runs_finds_an_automation_made_with_busy_error(
    home: Home, report: dict[str, str], tmp_path: Path
) -> None:
    """'cron-command --busy-error' puts the option before JOB; its runs are still joined."""
    line = home.run("openclaw", "cron-command", "report", "-p", "region=eu", "--busy-error",
                    "--", "/srv/send.sh", env=report)
    assert line.returncode == 0, line.stderr
    words = shlex.split(line.stdout)
    command = words[words.index("--command") + 1]
    assert "--busy-error report" in command
    fake = stub(tmp_path, jobs=[command_job("j2", command)], runs=[
        {"action": "finished", "status": "ok", "runAtMs": MONDAY_MS, "summary": "done: x"}])
    assert home.run("run", "report", "-p", "region=eu", "--", "true", env=report).returncode == 0
    done = home.run("openclaw", "runs", "report", "--openclaw", str(fake), env=report)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "report:eu:2026-01-05T0700" in done.stdout and "auto j2" in done.stdout, done.stdout


# --- 3. openclaw doctor: automations every run of which is refused -------------------------


def plugin_config(report: dict[str, str], home: Home, jobs: dict[str, Any]) -> None:
    entry = {"enabled": True, "hooks": {"allowConversationAccess": True},
             "config": {"retrysafe": str(RETRYSAFE), "home": str(home.path), "jobs": jobs}}
    Path(report["OPENCLAW_STATE_DIR"], "openclaw.json").write_text(
        json.dumps({"plugins": {"entries": {"retrysafe": entry}}}))


def doctor_lines(home: Home, report: dict[str, str], fake: Path) -> tuple[int, list[str]]:
    done = home.run("openclaw", "doctor", "--openclaw", str(fake), env=report)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done.returncode, done.stdout.splitlines()


def named(lines: list[str], name: str) -> str:
    (found,) = [ln for ln in lines if ln[5:].startswith(f"{name}:")]
    return found


def test_doctor_fails_a_command_job_that_lacks_a_parameter_the_job_needs(
    home: Home, report: dict[str, str], tmp_path: Path
) -> None:
    base = f"{RETRYSAFE} --home {home.path} openclaw run"
    fake = stub(tmp_path, jobs=[
        command_job("good", f"{base} report -p region=eu -- ./send.sh"),
        command_job("nop", f"{base} report -- ./send.sh"),
        command_job("busy", f"{base} --busy-error report -- ./send.sh"),
        command_job("other", f"{base} nosuch -- ./send.sh"),
        command_job("extra", f"{base} report -p region=eu -p colour=red -- ./send.sh"),
    ])
    plugin_config(report, home, {"cron-1": {"job": "report", "params": {"region": "eu"}}})
    code, lines = doctor_lines(home, report, fake)
    assert code == 1, lines
    assert named(lines, "cron job auto good").startswith("ok   ")
    for cron_id in ("nop", "busy"):
        line = named(lines, f"cron job auto {cron_id}")
        assert line.startswith("FAIL ") and "passes no -p region=VALUE, which job 'report' needs" in line
        assert "every run fails" in line
        assert "fix: re-create it from retrysafe openclaw cron-command report -p region=VALUE -- CMD" in line
    assert "job 'nosuch', which this home does not declare" in named(lines, "cron job auto other")
    assert "colour" in named(lines, "cron job auto extra")
    assert named(lines, "cron job auto other").startswith("FAIL ")
    assert not [ln for ln in lines if "plugin jobs" in ln], lines


def test_doctor_fails_a_plugin_mapping_without_the_parameters_its_job_needs(
    home: Home, report: dict[str, str], tmp_path: Path
) -> None:
    fake = stub(tmp_path)
    plugin_config(report, home, {"cron-1": {"job": "report", "params": {"region": "eu"}},
                                 "cron-2": "report"})
    code, lines = doctor_lines(home, report, fake)
    assert code == 1, lines
    line = named(lines, "plugin jobs")
    assert line.startswith("FAIL plugin jobs: cron job cron-2: its mapping passes no -p region=VALUE")
    fix = line.split("; fix: ", 1)[1]
    words = shlex.split(fix)
    assert words[:4] == ["openclaw", "config", "set", "plugins.entries.retrysafe.config.jobs.cron-2"]
    assert json.loads(words[4]) == {"job": "report", "params": {"region": "VALUE"}}


# --- 4. install-plugin: a program that is not OpenClaw ------------------------------------


@pytest.mark.parametrize("answer", ["", "hello, I am not openclaw", "v1.2.3", "OpenClaw"],
                         ids=["silent", "other", "other-version", "no-version"])
def test_install_plugin_refuses_a_program_that_is_not_openclaw(
    home: Home, report: dict[str, str], tmp_path: Path, answer: str
) -> None:
    fake = stub(tmp_path, version=answer)
    done = home.run("openclaw", "install-plugin", "--openclaw", str(fake), env=report)
    one_line_error(done, 2, str(fake), "not the openclaw executable")
    assert done.stdout == ""
    assert not [c for c in stub_calls(tmp_path) if c[:2] == ["plugins", "install"]]


@pytest.mark.parametrize("version", ["OpenClaw 2026.9.6 (0123abc)", "2026.1.29"])
def test_install_plugin_runs_openclaw(
    home: Home, report: dict[str, str], tmp_path: Path, version: str
) -> None:
    fake = stub(tmp_path, version=version)
    done = home.run("openclaw", "install-plugin", "--yes", "--openclaw", str(fake), env=report)
    assert done.returncode == 0, done.stderr
    assert "then configure it" in done.stdout
    installs = [c for c in stub_calls(tmp_path) if c[:2] == ["plugins", "install"]]
    assert installs == [["plugins", "install", "--force", "--accept-capabilities", str(plugin_dir())]]


def test_install_plugin_with_openclaw_on_path_is_checked_too(
    home: Home, report: dict[str, str], tmp_path: Path
) -> None:
    fake = stub(tmp_path, version="something else 1.0")
    path = os.pathsep.join([str(fake.parent), os.environ.get("PATH", "")])
    done = home.run("openclaw", "install-plugin", env={**report, "PATH": path})
    one_line_error(done, 2, str(fake), "not the openclaw executable")
    assert re.search(r"--version' printed 'something else 1\.0'", done.stderr), done.stderr


@pytest.mark.parametrize("placeholder", ["EVIDENCE", "<EVIDENCE>", " ID "])
def test_resolve_refuses_a_placeholder_as_evidence(agent: Home, placeholder: str) -> None:
    """``resolve --found EVIDENCE`` pasted from the docs without the evidence is refused
    as ``record`` refuses it: exit 2, one line, the step still unknown; real evidence
    settles it."""
    attempt = begin(agent)
    assert agent.run("intent", KEY, "send", "--class", "message", "--attempt", attempt).returncode == 0
    assert agent.run("unknown", KEY, "send", "--attempt", attempt,
                     "--reason", "the call timed out").returncode == 0
    before = agent.snapshot()
    refused = agent.run("resolve", KEY, "send", "--found", placeholder)
    one_line_error(refused, 2, "placeholder")
    assert agent.snapshot() == before
    assert steps(agent, KEY)[("send", None)]["state"] == "unknown"
    ok = agent.run("resolve", KEY, "send", "--found", "msg-4711")
    assert ok.returncode == 0, ok.stderr
    assert steps(agent, KEY)[("send", None)]["state"] == "done"
