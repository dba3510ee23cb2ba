"""docs/notifications.md: its config is what retrysafe reads, and its commands run as written."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from receivers import HttpReceiver, openclaw_calls, openclaw_stub, path_with
from support import Home

DOC = (Path(__file__).resolve().parents[2] / "docs" / "notifications.md").read_text()


def block(lang: str) -> str:
    [found] = re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)
    return str(found)


def test_the_documented_config_loads_as_described() -> None:
    """The example: every job gets the global events; weekly-ops-report uses only
    `chat` of the global channels, adds its ping, and has its own events."""
    import tomllib

    from retrysafe.config import parse_job
    from retrysafe.notify.config import attach_plans

    raw = tomllib.loads(block("toml"))
    jobs = {n: parse_job(n, t) for n, t in raw["jobs"].items()}
    plan = attach_plans(raw, jobs)["weekly-ops-report"].notify
    assert plan is not None
    assert [(c.name, c.type) for c in plan.channels] == [("chat", "openclaw"), ("hc", "ping")]
    assert plan.events == {"blocked", "failed", "done"}
    assert [c.name for c in plan.channels_for("unknown")] == ["hc"]  # a ping gets every event


def test_the_documented_webhook_body_has_the_fields_runs_send() -> None:
    """The JSON example lists exactly the fields a webhook receives."""
    body = json.loads(block("json"))
    assert set(body) == {"id", "event", "key", "job", "state", "reason", "unblock", "host", "time"}


def test_every_documented_command_runs_as_written(home: Home, receiver: HttpReceiver,
                                                  tmp_path: Path) -> None:
    """Each line of the commands block, pasted into sh, against the documented config
    (its URLs pointing at a receiver on loopback, a stub openclaw on PATH)."""
    import subprocess

    config = (block("toml").replace("https://hooks.example.com", receiver.url)
              .replace("https://hc-ping.com", receiver.url))
    home.path.mkdir(parents=True)
    home.config(config)
    folder, log = openclaw_stub(tmp_path / "bin")
    env = {**home.env, "PATH": path_with(Path(home.cmd()[0]).parent) + ":" + path_with(folder)}
    lines = [ln for ln in block("sh").splitlines() if ln.strip()]
    assert len(lines) >= 4
    for line in lines:
        assert shlex.split(line)[0] == "retrysafe"
        proc = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
    assert openclaw_calls(log)  # the chat channel was tested
    assert {r.path for r in receiver.delivered()} >= {"/retrysafe", "/5f0c1d2e-0000-4000-8000-000000000000/log"}
