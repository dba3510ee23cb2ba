"""Real agent turns through a real OpenClaw gateway, guarded by the retrysafe plugin.

Run by ``scripts/e2e-openclaw`` only. A scripted OpenAI-compatible model
server on loopback (tests/openclaw/scripted_model.py) plays the model: it
decides which tool calls each turn makes. The plugin is installed with
``retrysafe openclaw install-plugin --link --yes`` and configured in
OpenClaw's config; cron agent jobs are forced with ``openclaw cron run``.
No prompt mentions retrysafe: the guard acts on the tool calls alone.
"""

from __future__ import annotations

import json
import os
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

    def add_agent_job(self, name: str, message: str, rs_job: str) -> str:
        """An isolated cron agent turn, mapped to a retrysafe job in the plugin's config."""
        job: dict[str, Any] = self.gateway.cli(
            "cron", "add", "--name", name, "--cron", SCHEDULE, "--tz", TZ, "--exact",
            "--session", "isolated", "--no-deliver", "--message", message,
            "--timeout-seconds", "300", "--json",
        )
        job_id = str(job["id"])
        config = json.loads(self.config_path.read_text())
        config["plugins"]["entries"]["retrysafe"]["config"]["jobs"][job_id] = rs_job
        log = self.gateway.scratch / "gateway.log"
        seen = log.read_bytes().count(b"config hot reload applied")
        self.config_path.write_text(json.dumps(config, indent=2))
        deadline = time.monotonic() + 60
        while log.read_bytes().count(b"config hot reload applied") <= seen:
            assert time.monotonic() < deadline, "the plugin config was not reloaded"
            time.sleep(0.3)
        return job_id

    def run_turn(self, job_id: str, count: int) -> dict[str, Any]:
        """Force the job and return its ``count``-th finished run."""
        self.gateway.force_run(job_id)
        return self.gateway.finished_runs(job_id, count, timeout=300)[count - 1]

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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentWorld]:
    scratch = tmp_path_factory.mktemp("openclaw-agent")
    env = scratch_env(scratch)
    bin_dir = scratch / "tools"
    bin_dir.mkdir()
    for name, text in (("send.sh", SEND), ("pay.sh", PAY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    home = scratch / "rs-home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        "".join(
            f'[jobs.{job}]\nkey = "{job}:{{occurrence}}"\nschedule = "{SCHEDULE}"\ntz = "{TZ}"\n'
            'params = { occurrence = "occurrence" }\n\n'
            for job in ("agent-report", "agent-pay")
        )
    )
    send = Call("exec", {"command": f"{bin_dir / 'send.sh'} weekly report to ops"})
    model = ScriptedModel(
        scripts={
            "twice": [send, send],
            "again": [send],
            "pay": [Call("exec", {"command": f"{bin_dir / 'pay.sh'} invoice 17 EUR 120"})],
            "home": [Call("exec", {"command": 'echo "home=$RETRYSAFE_HOME"'})],
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
    first = world.run_turn(job, 1)
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

    again = world.run_turn(job, 2)
    assert again["status"] == "ok", again
    other = world.add_agent_job("report-again", "The ops list says the report never came. "
                                "Send it again. [script:again]", "agent-report")
    third = world.run_turn(other, 1)
    assert third["status"] == "ok", third
    assert "already done: evidence out-1" in third["summary"], third
    assert world.lines("outbox.txt") == ["weekly report to ops"]
    assert world.outcome(key)["attempts"] == [(1, "done")]


def test_payment_waits_for_a_person_and_unanswered_is_blocked(world: AgentWorld) -> None:
    """A payment call asks OpenClaw for a person's approval; nobody answers in a cron run,
    OpenClaw denies it, nothing is paid, and the ledger says who must do what."""
    job = world.add_agent_job("pay", "Pay supplier invoice 17. [script:pay]", "agent-pay")
    run = world.run_turn(job, 1)
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
    run = world.run_turn(job, 1)
    assert run["status"] == "ok", run
    (result,) = world.model.tool_results("home")
    assert result.strip() == f"home={world.home}", result


def _keys(home: Path) -> list[str]:
    engine = Engine.open(home)
    try:
        return [o.key for o in engine.ledger.outcomes()]
    finally:
        engine.close()
