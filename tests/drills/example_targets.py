"""The examples' local targets, started for tests; shared by the drill and chaos suites."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CONTENT = EXAMPLES / "content-pipeline"
BIN = Path(sys.executable).parent


def example_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment whose ``retrysafe`` and ``python3`` are the ones under test."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RETRYSAFE_") or k.startswith("RETRYSAFE_TEST_")}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["RETRYSAFE_HOME"] = str(home)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def retrysafe(*args: str, env: Mapping[str, str], cwd: Path | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "retrysafe"), *args], env=dict(env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class ContentTargets:
    """The content pipeline's CMS, chat webhook and sheet, as a real loopback server."""

    root: Path
    proc: subprocess.Popen[bytes] | None = None
    homes: list[Path] = field(default_factory=list)

    def start(self) -> ContentTargets:
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, str(CONTENT / "targets.py"), "serve",
                                      str(self.root)], start_new_session=True)
        deadline = time.monotonic() + 15
        while not (self.root / "port").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the example targets did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)

    def home(self, path: Path, ledger: str | None = None) -> Path:
        """A home whose retrysafe.toml points at these targets (and at ``ledger``)."""
        path.mkdir(parents=True, exist_ok=True)
        text = subprocess.run([sys.executable, str(CONTENT / "targets.py"), "config",
                               str(self.root)], capture_output=True, text=True,
                              check=True).stdout
        if ledger:
            text = f'[ledger]\nurl = "{ledger}"\n\n' + text
        (path / "retrysafe.toml").write_text(text)
        return path

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "state.json").read_text())
        return data

    def counts(self) -> dict[str, dict[str, int]]:
        """Effects per step key in each system, read from what the targets really hold."""
        out: dict[str, dict[str, int]] = {"cms": {}, "chat": {}, "sheet": {}}
        data = self.state()
        for system in ("cms", "chat"):
            for rec in data[system]:
                out[system][rec["key"]] = out[system].get(rec["key"], 0) + 1
        sheet = self.root / "sheet.csv"
        if sheet.exists():
            with sheet.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    key = row["retrysafe_key"]
                    out["sheet"][key] = out["sheet"].get(key, 0) + 1
        return out
