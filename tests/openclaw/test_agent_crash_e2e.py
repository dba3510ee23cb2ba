"""A real agent turn killed after its tool call and before the record (full tier only).

Run by ``scripts/e2e-openclaw`` (not ``--lean``: it kills and restarts its own
gateway). The agent's guarded post runs through the plugin, which writes the
intent; the post lands, and the post tool then SIGKILLs the gateway, so the turn
dies before ``after_tool_call`` records anything. A new gateway starts on the same
state; once the dead turn's agent lease has run out, a forced re-run's post is
looked up (the declared lookup finds it in the feed), recorded with that evidence
and blocked: one post in all.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from scripted_model import Call
from test_agent_e2e import SCHEDULE, TZ, AgentWorld, open_world
from test_gateway_e2e import Gateway, launch

from retrysafe.schedule import resolve_occurrence

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        os.environ.get("RETRYSAFE_E2E_OPENCLAW") != "1",
        reason="needs a real OpenClaw gateway: run scripts/e2e-openclaw",
    ),
]

LEASE = 5  # seconds: how long the dead turn's attempt holds the outcome

# the effect, then (the first time) the gateway running the turn is killed outright
POST = """#!/bin/sh
here="$(dirname "$0")"
echo "$*" >> "$here/posts.txt"
if [ -e "$here/kill-gateway" ]; then
  rm -f "$here/kill-gateway"
  kill -9 "$(cat "$here/gateway.pid")"
  sleep 30
fi
echo "{\\"postId\\": \\"post-$(grep -c '' "$here/posts.txt")\\"}"
"""


def _force(gw: Gateway, job_id: str) -> subprocess.CompletedProcess[str]:
    """``openclaw cron run --wait``, whatever becomes of the gateway meanwhile."""
    return subprocess.run(
        [gw.openclaw, "cron", "run", job_id, "--wait", "--poll-interval", "500ms",
         "--wait-timeout", "240s", "--port", str(gw.port), "--token", gw.token],
        env=gw.env, capture_output=True, text=True, timeout=300, check=False)


def test_a_turn_killed_after_its_post_is_looked_up_not_repeated(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with open_world(tmp_path_factory) as world:
        _killed_turn(world, tmp_path_factory)


def _killed_turn(world: AgentWorld, tmp_path_factory: pytest.TempPathFactory) -> None:
    gw = world.gateway
    post = world.bin / "post.sh"
    post.write_text(POST)
    post.chmod(0o755)
    with (world.home / "retrysafe.toml").open("a") as fh:
        fh.write(f'[jobs.agent-post]\nkey = "agent-post:{{occurrence}}"\nschedule = "{SCHEDULE}"\n'
                 f'tz = "{TZ}"\nparams = {{ occurrence = "occurrence" }}\nlease_seconds = {LEASE}\n')
    feed = world.bin / "posts.txt"
    config = json.loads((gw.state_dir / "openclaw.json").read_text())
    guards = config["plugins"]["entries"]["retrysafe"]["config"]["guards"]
    world.reload_plugin_config({"guards": [*guards, {
        "tool": "exec", "command": r"post\.sh", "class": "publish", "step": "post",
        "lookup": f"grep -q . {feed} 2>/dev/null && echo post-1 || exit 1"}]})
    world.model.scripts["post"] = [Call("exec", {"command": f"{post} release notes 1.4"})]
    job = world.add_agent_job("post", "Post the release notes. [script:post]", "agent-post")
    key = f"agent-post:{resolve_occurrence(SCHEDULE, TZ, None)}"

    (world.bin / "gateway.pid").write_text(str(gw.proc.pid))
    (world.bin / "kill-gateway").touch()
    _force(gw, job)  # the gateway dies inside the turn: the client's answer does not matter
    deadline = time.monotonic() + 60
    while gw.proc.poll() is None:
        assert time.monotonic() < deadline, "the gateway was not killed"
        time.sleep(0.2)
    assert feed.read_text().splitlines() == ["release notes 1.4"]
    died = world.outcome(key)
    assert died["steps"]["post"][0] == "running", died  # the intent, and no record

    time.sleep(LEASE + 1)  # the dead turn's lease runs out
    with launch(gw.scratch, gw.env) as again:
        world.gateway = again
        rerun = _force(again, job)
        assert rerun.returncode in (0, 1), rerun.stderr[-2000:]
        assert feed.read_text().splitlines() == ["release notes 1.4"]  # not posted again
        ledger = world.outcome(key)
        assert ledger["steps"]["post"][:2] == ("done", "post-1"), ledger
        told = world.model.tool_results("post")
        assert told and "already done (found by lookup): evidence post-1" in told[-1], told
        # the dead turn's attempt was taken over once its lease ran out; one more ran
        assert [n for n, _ in ledger["attempts"]] == [1, 2], ledger
