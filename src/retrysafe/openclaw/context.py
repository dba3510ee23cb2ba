"""What OpenClaw tells a process it starts, read from the environment.

OpenClaw passes no run or job id to the processes it starts. What it does
pass, and what this module reads:

* ``OPENCLAW_SHELL``: set for commands an agent runs through a tool
  (``exec``) and for a few other runtimes (``acp``, ``acp-client``,
  ``tui-local``);
* ``OPENCLAW_CLI`` and ``OPENCLAW_GATEWAY_PORT``: inherited from the gateway
  by automation command jobs (``openclaw cron add --command``);
* ``OPENCLAW_STATE_DIR`` / ``OPENCLAW_HOME``: where OpenClaw keeps its state
  (skills live in its ``skills/`` folder).

The gateway also hands its own credentials (``OPENCLAW_GATEWAY_TOKEN``,
``OPENCLAW_GATEWAY_PASSWORD``) to command jobs. They are never read here, so
they cannot reach the ledger, a log or an error message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OpenClawContext", "detect_context", "openclaw_context", "openclaw_state_dir"]

# OpenClaw treats these spellings of a variable as unset.
_UNSET = frozenset({"", "undefined", "null"})


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() in _UNSET:
        return None
    return value.strip()


@dataclass(frozen=True)
class OpenClawContext:
    """Whether and how OpenClaw started this process.

    ``kind`` is ``agent-exec`` (an agent's tool call), ``command`` (an
    automation command job or other gateway child), another ``OPENCLAW_SHELL``
    value, or ``""`` outside OpenClaw.
    """

    kind: str
    gateway_port: str | None = None
    state_dir: str | None = None

    @property
    def present(self) -> bool:
        return bool(self.kind)

    def as_context(self) -> dict[str, str]:
        """Fields worth keeping with an attempt (never credentials)."""
        if not self.present:
            return {}
        out = {"runner": f"openclaw:{self.kind}"}
        if self.gateway_port:
            out["openclaw_gateway_port"] = self.gateway_port
        return out


def openclaw_context(env: Mapping[str, str] | None = None) -> OpenClawContext:
    """Read the context from ``env`` (default: this process's environment)."""
    env = os.environ if env is None else env
    shell = _get(env, "OPENCLAW_SHELL")
    port = _get(env, "OPENCLAW_GATEWAY_PORT")
    state = _get(env, "OPENCLAW_STATE_DIR")
    if shell:
        kind = "agent-exec" if shell == "exec" else shell
    elif _get(env, "OPENCLAW_CLI") or port:
        kind = "command"
    else:
        kind = ""
    return OpenClawContext(kind, port if kind else None, state if kind else None)


def detect_context(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The fields to record with an attempt; empty outside OpenClaw."""
    return openclaw_context(env).as_context()


def openclaw_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """OpenClaw's state folder: ``$OPENCLAW_STATE_DIR``, else ``$OPENCLAW_HOME/.openclaw``,
    else ``~/.openclaw``, as OpenClaw itself resolves it."""
    env = os.environ if env is None else env
    state = _get(env, "OPENCLAW_STATE_DIR")
    if state:
        return Path(state).expanduser()
    home = _get(env, "OPENCLAW_HOME") or _get(env, "HOME")
    base = Path(home).expanduser() if home else Path.home()
    return base / ".openclaw"
