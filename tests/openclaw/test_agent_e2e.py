"""Real agent turns through a real OpenClaw gateway, guarded by the retrysafe plugin.

Run by ``scripts/e2e-openclaw`` only. A scripted OpenAI-compatible model
server on loopback (tests/openclaw/scripted_model.py) plays the model: it
decides which tool calls each turn makes. The plugin is installed with
``retrysafe openclaw install-plugin --link --yes`` and configured in
OpenClaw's config; cron agent jobs are forced with ``openclaw cron run``.
No prompt mentions retrysafe: the guard acts on the tool calls alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scripted_model import Call, ScriptedModel, serve
from test_gateway_e2e import Gateway, launch, openclaw_cli, scratch_env

from retrysafe.engine import Engine
from retrysafe.schedule import resolve_occurrence

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("RETRYSAFE_E2E_OPENCLAW") != "1",
        reason="needs a real OpenClaw gateway: run scripts/e2e-openclaw",
    ),
]

SCHEDULE, TZ = "0 7 * * 1", "Europe/Warsaw"

# The effect: one line in an outbox per call, and a message id in the output,
# as a mail or chat CLI prints it.
SEND = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/outbox.txt"
echo "{\\"messageId\\": \\"out-$(grep -c '' "$(dirname "$0")/outbox.txt")\\"}"
"""
NOTIFY = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/feed.txt"
echo "{\\"postId\\": \\"post-$(grep -c '' "$(dirname "$0")/feed.txt")\\"}"
"""
MAIL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/mail.txt"
echo "queued as <mail-$(grep -c '' "$(dirname "$0")/mail.txt")@example.org>"
"""
PAY = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/payments.txt"
echo "{\\"id\\": \\"pay-$(grep -c '' "$(dirname "$0")/payments.txt")\\"}"
"""


@dataclass
class AgentWorld:
    gateway: Gateway
    model: ScriptedModel
    home: Path
    bin: Path

    @property
    def config_path(self) -> Path:
        return self.gateway.state_dir / "openclaw.json"

    def lines(self, name: str) -> list[str]:
        path = self.bin / name
        return path.read_text().splitlines() if path.exists() else []

    def add_agent_job(self, name: str, message: str, rs_job: str | None) -> str:
        """An isolated cron agent turn, mapped to a retrysafe job in the plugin's config
        (``rs_job`` None: not mapped, the plugin guards none of its calls)."""
        job: dict[str, Any] = self.gateway.cli(
            "cron", "add", "--name", name, "--cron", SCHEDULE, "--tz", TZ, "--exact",
            "--session", "isolated", "--no-deliver", "--message", message,
            "--timeout-seconds", "300", "--json",
        )
        job_id = str(job["id"])
        if rs_job is None:
            return job_id
        jobs = json.loads(self.config_path.read_text())["plugins"]["entries"]["retrysafe"]["config"]["jobs"]
        self.reload_plugin_config({"jobs": {**jobs, job_id: rs_job}})
        return job_id

    def reload_plugin_config(self, change: dict[str, Any]) -> None:
        """Set entries of the plugin's config and wait for the gateway to reload it."""
        config = json.loads(self.config_path.read_text())
        config["plugins"]["entries"]["retrysafe"]["config"].update(change)
        log = self.gateway.scratch / "gateway.log"
        seen = log.read_bytes().count(b"config hot reload applied")
        self.config_path.write_text(json.dumps(config, indent=2))
        deadline = time.monotonic() + 60
        while log.read_bytes().count(b"config hot reload applied") <= seen:
            assert time.monotonic() < deadline, "the plugin config was not reloaded"
            time.sleep(0.3)

    def run_turn(self, job_id: str) -> dict[str, Any]:
        """Force the job, wait for the turn to finish and return its history entry."""
        return self.gateway.run_now(job_id)

    def outcome(self, key: str) -> dict[str, Any]:
        engine = Engine.open(self.home)
        try:
            led = engine.ledger
            out = led.require_outcome(key)
            return {
                "state": out.state,
                "attempts": [(a.number, a.result or a.state) for a in led.attempts(key)],
                "steps": {s.name: (s.state, s.evidence, s.cause) for s in led.steps(key)},
                "runners": [a.context.get("runner") for a in led.attempts(key)],
            }
        finally:
            engine.close()


def _doc(text: str) -> dict[str, Any]:
    """The JSON object a command printed (exec's result may carry other text around it)."""
    start = text.find("{")
    assert start >= 0, f"no JSON in tool result: {text[-500:]!r}"
    found, _ = json.JSONDecoder().raw_decode(text[start:])
    assert isinstance(found, dict), found
    return found


def skill_protocol(mail: Path) -> list[Call]:
    """The model's side of the skill path: the calls SKILL.md tells an agent to make, each
    built from what the previous command printed (begin's key and attempt id, check's
    action, the mail tool's queue id). A begin that is not 'started' ends the turn."""

    def begun(results: list[str]) -> dict[str, Any]:
        return _doc(results[0])

    def then(build: Any) -> Any:
        def call(results: list[str]) -> dict[str, Any] | None:
            if begun(results).get("status") != "started":
                return None  # done (or busy, blocked): report it and stop
            return {"command": build(begun(results), results)}
        return call

    def act(b: dict[str, Any], results: list[str]) -> str:
        assert _doc(results[1])["action"] == "execute", results[1]
        return f"retrysafe intent {b['key']} send --class message --attempt {b['attempt_id']}"

    def record(b: dict[str, Any], results: list[str]) -> str:
        (queued,) = re.findall(r"<([^>]+)>", results[3])
        return f"retrysafe record {b['key']} send --evidence {queued} --attempt {b['attempt_id']}"

    return [
        Call("exec", {"command": "retrysafe begin agent-digest --json"}),
        Call("exec", then(lambda b, r: f"retrysafe check {b['key']} send --class message "
                                       f"--attempt {b['attempt_id']} --json")),
        Call("exec", then(act)),
        Call("exec", then(lambda b, r: f"{mail} daily digest to ops")),
        Call("exec", then(record)),
        Call("exec", then(lambda b, r: f"retrysafe close {b['key']} --attempt {b['attempt_id']}")),
    ]


@contextlib.contextmanager
def open_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentWorld]:
    """A gateway with the scripted model as its agents' model and the plugin installed.

    One per test session (the ``world`` and ``gateway`` fixtures of conftest.py): the
    command-job and schedule tests use its gateway too, since starting one takes
    a while; their jobs are command jobs, which the plugin never sees."""
    scratch = tmp_path_factory.mktemp("openclaw-agent")
    env = scratch_env(scratch)
    bin_dir = scratch / "tools"
    bin_dir.mkdir()
    for name, text in (("send.sh", SEND), ("pay.sh", PAY), ("mail.sh", MAIL),
                       ("notify.sh", NOTIFY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    home = scratch / "rs-home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        "".join(
            f'[jobs.{job}]\nkey = "{job}:{{occurrence}}"\nschedule = "{SCHEDULE}"\ntz = "{TZ}"\n'
            'params = { occurrence = "occurrence" }\n\n'
            for job in ("agent-report", "agent-pay", "agent-digest", "agent-notify")
        )
    )
    send = Call("exec", {"command": f"{bin_dir / 'send.sh'} weekly report to ops"})
    model = ScriptedModel(
        scripts={
            "twice": [send, send],
            "again": [send],
            "pay": [Call("exec", {"command": f"{bin_dir / 'pay.sh'} invoice 17 EUR 120"})],
            "home": [Call("exec", {"command": 'echo "home=$RETRYSAFE_HOME"'})],
            "skill": skill_protocol(bin_dir / "mail.sh"),
            "notify": [Call("exec", {"command": f"{bin_dir / 'notify.sh'} maintenance tonight"})],
        }
    )
    server, port = serve(model)
    state = Path(env["OPENCLAW_STATE_DIR"])
    (state / "openclaw.json").write_text(json.dumps({
        "gateway": {"mode": "local"},
        "models": {"providers": {"scripted": {
            "baseUrl": f"http://127.0.0.1:{port}/v1", "apiKey": "scripted", "api": "openai-completions",
            "models": [{"id": "scripted", "name": "scripted", "reasoning": False, "input": ["text"],
                        "contextWindow": 128000, "maxTokens": 4096,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
        }}},
        "agents": {"defaults": {"model": {"primary": "scripted/scripted"}}},
    }, indent=2))
    # exec runs on the gateway host without asking: the guard is the only gate under test
    openclaw_cli(env, "exec-policy", "preset", "yolo")
    installed = _install_plugin(scratch, env)
    skill = subprocess.run([str(scratch / "bin" / "retrysafe"), "openclaw", "install-skill", "--global"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert skill.returncode == 0, skill.stdout + skill.stderr
    assert "plugins.entries.retrysafe.config" in installed
    config = json.loads((state / "openclaw.json").read_text())
    entry = config["plugins"]["entries"]["retrysafe"]
    entry["hooks"] = {"allowConversationAccess": True}  # agent_end, to close the attempt
    entry["config"] = {
        "retrysafe": str(scratch / "bin" / "retrysafe"),
        "home": str(home),
        "jobs": {},
        "approvalTimeoutMs": 3000,
        "guards": [
            {"tool": "exec", "command": r"send\.sh", "class": "message", "step": "send",
             "lookup": f"grep -q . {bin_dir / 'outbox.txt'} 2>/dev/null && echo found || exit 1"},
            {"tool": "exec", "command": r"pay\.sh", "class": "payment", "step": "charge"},
            # the feed shows a post like ours but cannot say whether it is ours: exit 2
            {"tool": "exec", "command": r"notify\.sh", "class": "publish", "step": "notify",
             "lookup": "echo 'two posts titled maintenance tonight, none with our key' >&2; exit 2"},
        ],
    }
    (state / "openclaw.json").write_text(json.dumps(config, indent=2))
    try:
        with launch(scratch, env) as gw:
            log = (scratch / "gateway.log").read_text()
            assert "retrysafe" in log.split("plugins:", 1)[1].split(")", 1)[0], "plugin not loaded"
            yield AgentWorld(gw, model, home, bin_dir)
    finally:
        server.shutdown()


def _install_plugin(scratch: Path, env: dict[str, str]) -> str:
    """``retrysafe openclaw install-plugin --link --yes`` with the fetched openclaw on PATH."""
    done = subprocess.run(
        [str(scratch / "bin" / "retrysafe"), "openclaw", "install-plugin", "--link", "--yes"],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_agent_cannot_send_twice_in_a_turn_or_a_rerun(world: AgentWorld) -> None:
    """The model sends the same report twice in one turn, then again in a forced re-run and
    from another automation's turn: one message goes out; the repeats are answered from
    the ledger, with the evidence the first call's result carried."""
    job = world.add_agent_job("report", "Weekly ops report: send it to the ops list. [script:twice]",
                              "agent-report")
    first = world.run_turn(job)
    assert first["status"] == "ok", first
    assert world.lines("outbox.txt") == ["weekly report to ops"]
    results = world.model.tool_results("twice")
    assert results[0].strip().endswith('"messageId": "out-1"}'), results
    assert results[1] == "retrysafe: already done: evidence out-1; do not repeat it", results

    key = next(iter(_keys(world.home)))
    ledger = world.outcome(key)
    assert ledger["state"] == "done"
    assert ledger["steps"]["send"][:2] == ("done", "out-1")
    assert ledger["runners"] == ["openclaw:plugin"]

    again = world.run_turn(job)
    assert again["status"] == "ok", again
    other = world.add_agent_job("report-again", "The ops list says the report never came. "
                                "Send it again. [script:again]", "agent-report")
    third = world.run_turn(other)
    assert third["status"] == "ok", third
    assert "already done: evidence out-1" in third["summary"], third
    assert world.lines("outbox.txt") == ["weekly report to ops"]
    assert world.outcome(key)["attempts"] == [(1, "done")]


def test_payment_needs_a_person_and_a_cron_run_is_blocked(world: AgentWorld) -> None:
    """A payment call asks OpenClaw for a person's approval; a cron run has nobody to ask,
    OpenClaw denies it, nothing is paid, and the ledger says who must do what."""
    job = world.add_agent_job("pay", "Pay supplier invoice 17. [script:pay]", "agent-pay")
    run = world.run_turn(job)
    assert world.lines("payments.txt") == []
    (key,) = [k for k in _keys(world.home) if k.startswith("agent-pay:")]
    ledger = world.outcome(key)
    assert ledger["steps"]["charge"][0] == "blocked" and ledger["steps"]["charge"][2] == "approval"
    assert ledger["state"] == "blocked", (ledger, run)


def test_agent_exec_sees_the_plugins_home(world: AgentWorld) -> None:
    """The gateway has no RETRYSAFE_HOME; the plugin hands its home to every agent exec
    (resolve_exec_env), so the skill's commands use the ledger the guard uses."""
    assert "RETRYSAFE_HOME" not in world.gateway.env
    job = world.add_agent_job("where", "Which ledger? [script:home]", "agent-report")
    run = world.run_turn(job)
    assert run["status"] == "ok", run
    (result,) = world.model.tool_results("home")
    assert result.strip() == f"home={world.home}", result


def test_ambiguous_lookup_asks_for_a_person_and_a_cron_run_is_blocked(world: AgentWorld) -> None:
    """An earlier run of the occurrence died after posting may have happened (its step is
    unknown). The agent's post goes through the plugin: it runs the declared lookup, which
    cannot tell (exit 2), so the plugin asks for a person (requireApproval); a cron run has
    nobody to ask, so OpenClaw denies it at once, nothing is posted, and the ledger says
    blocked with the lookup's words and the line that settles it."""
    key = f"agent-notify:{resolve_occurrence(SCHEDULE, TZ, None)}"
    rs = str(world.gateway.scratch / "bin" / "retrysafe")

    def cli(*args: str) -> dict[str, Any]:
        done = subprocess.run([rs, "--home", str(world.home), *args], env=world.gateway.env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode in (0, 1), f"retrysafe {args}: {done.stdout}{done.stderr}"
        return _doc(done.stdout) if "--json" in args else {}

    # the earlier run: intent written, then killed before its record (unknown)
    begun = cli("begin", "agent-notify", "--json")
    assert begun["key"] == key, begun
    cli("intent", key, "notify", "--class", "publish", "--attempt", begun["attempt_id"])
    cli("unknown", key, "notify", "--reason", "the run was killed after posting",
        "--attempt", begun["attempt_id"])
    cli("close", key, "--attempt", begun["attempt_id"])
    assert world.outcome(key)["state"] == "unknown"

    job = world.add_agent_job("notify", "Post tonight's maintenance notice. [script:notify]",
                              "agent-notify")
    run = world.run_turn(job)
    assert world.lines("feed.txt") == []
    ledger = world.outcome(key)
    state, evidence, _ = ledger["steps"]["notify"]
    assert state == "blocked" and evidence is None, ledger
    (result,) = world.model.tool_results("notify")
    assert "notify.sh" not in result and "post-" not in result, result
    # the request reached OpenClaw's approvals, which deny it at once in a cron run (no
    # person can be asked there), not after approvalTimeoutMs
    log = (world.gateway.scratch / "gateway.log").read_text(errors="replace")
    assert "cron runs have no approval-capable initiating surface" in log, log[-3000:]
    status = subprocess.run([rs, "--home", str(world.home), "status", key, "--json"],
                            env=world.gateway.env, capture_output=True, text=True, timeout=120,
                            check=False)
    shown = json.dumps(_doc(status.stdout))
    assert "two posts titled maintenance tonight" in shown, shown
    # status was asked with --home: the printed unblock names that home, so it pastes anywhere
    assert f"retrysafe --home {world.home} resolve {key} notify --found" in shown, shown
    assert run["status"] in ("ok", "error"), run


def test_skill_path_agent_follows_the_protocol(world: AgentWorld) -> None:
    """No guard covers the mail tool and the job is not the plugin's: the agent follows the
    installed skill through exec (begin, check, intent, the send, record, close). The forced
    re-run's begin answers done and the model sends nothing: one mail, the ledger done with
    the queue id the tool printed."""
    job = world.add_agent_job("digest", "Daily digest for ops. [script:skill]", None)
    first = world.run_turn(job)
    assert first["status"] == "ok", first
    results = world.model.tool_results("skill")
    assert len(results) == 6, results
    assert world.lines("mail.txt") == ["daily digest to ops"]
    begun = _doc(results[0])
    key = begun["key"]
    assert begun["status"] == "started" and key.startswith("agent-digest:"), begun
    assert "done" in results[5], results[5]
    # the model was given the skill (its description is in the turn's prompt)
    (request,) = [r for r in world.model.requests if "[script:skill]" in json.dumps(r)][:1]
    assert "Do each side effect once" in json.dumps(request)

    again = world.run_turn(job)
    assert again["status"] == "ok", again
    (told,) = world.model.tool_results("skill")
    assert _doc(told)["status"] == "done", told
    assert world.lines("mail.txt") == ["daily digest to ops"]
    ledger = world.outcome(key)
    assert ledger["state"] == "done" and ledger["attempts"] == [(1, "done")]
    assert ledger["steps"]["send"][:2] == ("done", "mail-1@example.org")


def _keys(home: Path) -> list[str]:
    engine = Engine.open(home)
    try:
        return [o.key for o in engine.ledger.outcomes()]
    finally:
        engine.close()
