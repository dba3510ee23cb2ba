"""The dashboard tests' site (a home whose outcome a real crash blocked) and
``retrysafe ui`` as a real server process on a loopback port. A module of its own
(not ``conftest``, whose name the notification tests' fixtures share), imported by
the tests and the fixtures alike."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
from support import Home

TOKEN = "test-token-0123456789abcdef"
KEY = "report:2026-W32"

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
"""

# the effect appends a line to a file (what a provider would count) and prints its id
SEND = """#!/bin/sh
exec {py} -m retrysafe step send --class message -- sh -c 'echo "$RETRYSAFE_STEP_KEY" >> {sent}; echo msg-4711'
"""


@dataclass
class Site:
    """A home with outcomes, the step command that sends, and where it counts sends."""

    home: Home
    send: Path
    sent: Path

    def run(self, week: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.home.run("run", "report", "-p", f"week={week}", "--", str(self.send), env=env)

    def sends(self, key: str = KEY) -> int:
        lines = self.sent.read_text().splitlines() if self.sent.exists() else []
        return lines.count(f"{key}/send")


def make_site(home: Home) -> Site:
    """One outcome done, one blocked by a crash: the sending step is killed with
    SIGKILL after its effect and before its record (``RETRYSAFE_CRASH_AT``), and
    the re-run cannot look a message up, so it stops for a human."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    sent = home.path.parent / "sent.txt"
    send = home.path.parent / "send.sh"
    send.write_text(SEND.format(py=sys.executable, sent=sent))
    send.chmod(0o755)
    site = Site(home, send, sent)
    assert site.run("2026-W31").returncode == 0
    crashed = site.run("2026-W32", env={"RETRYSAFE_CRASH_AT": "send:after-execute"})
    assert crashed.returncode != 0
    blocked = site.run("2026-W32")
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    assert site.sends() == 1
    return site


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    banner: list[str]

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, follow_redirects=False)


def start_server(home: Home, *args: str) -> Server:
    """``retrysafe ui`` on a free loopback port, once it answers."""
    proc = home.popen("ui", "--bind", "127.0.0.1:0", "--token", TOKEN, *args)
    assert proc.stdout is not None
    banner = [proc.stdout.readline() for _ in range(3)]
    found = re.search(r"listening on (http://\S+/)", "".join(banner))
    if found is None:
        proc.kill()
        raise AssertionError(f"no address in {banner!r}: {proc.stderr.read() if proc.stderr else ''}")
    return Server(proc, found.group(1).rstrip("/"), banner)


def stop_server(server: Server) -> None:
    server.proc.send_signal(signal.SIGINT)
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
