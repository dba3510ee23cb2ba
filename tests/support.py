"""Test support: a retrysafe home in a temporary folder and the CLI as a real process."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("RETRYSAFE_") or k.startswith("RETRYSAFE_TEST_")}


@dataclass
class Home:
    """A retrysafe home in a temporary folder, and the CLI run against it."""

    path: Path
    ledger: str | None = None
    env: dict[str, str] = field(default_factory=_clean_env)

    def __post_init__(self) -> None:
        self.env["RETRYSAFE_HOME"] = str(self.path)
        if self.ledger:
            self.env["RETRYSAFE_LEDGER"] = self.ledger
        self.env.setdefault("PYTHONDONTWRITEBYTECODE", "1")

    def config(self, text: str) -> Path:
        path = self.path / "retrysafe.toml"
        path.write_text(textwrap.dedent(text))
        return path

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "retrysafe", *args]

    def run(self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.cmd(*args), env={**self.env, **(env or {})}, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def popen(self, *args: str, env: Mapping[str, str] | None = None,
              **kw: object) -> subprocess.Popen[str]:
        return subprocess.Popen(self.cmd(*args), env={**self.env, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                **kw)  # type: ignore[call-overload]

    def open_ledger(self) -> Any:
        from retrysafe.ledger import open_ledger

        return open_ledger(self.ledger or f"sqlite:///{self.path / 'ledger.sqlite3'}")

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the home, for "nothing changed" assertions."""
        out: dict[str, bytes] = {}
        for p in sorted(self.path.rglob("*")):
            if not p.is_file() or p.name.endswith(("-wal", "-shm")):
                continue
            if p.suffix == ".sqlite3":
                # compare the ledger's content, not its pages (a checkpoint moves bytes)
                conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
                try:
                    out[str(p.relative_to(self.path))] = "\n".join(conn.iterdump()).encode()
                finally:
                    conn.close()
            else:
                out[str(p.relative_to(self.path))] = p.read_bytes()
        return out


def executable(path: Path, text: str) -> Path:
    """``text`` written to ``path`` and made executable (a stand-in program)."""
    import stat

    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def can_map_an_unknown_uid() -> bool:
    """Can a process run here as uid 4242, which has no user name (``unshare -U``)?"""
    import shutil

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-U", "--map-user=4242", "--map-group=4242", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


REPORT_CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
"""
"""A weekly job of one parameter, as the tests of lost and pruned work use it."""


def report_with_checked_step(home: Home, tmp_path: Path) -> tuple[Path, str]:
    """``home`` with :data:`REPORT_CONFIG`, a file standing for the external system,
    and the command of a step whose effect appends its key to that file and whose
    check finds it there."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(REPORT_CONFIG)
    effects = tmp_path / "effects.txt"
    effects.touch()
    script = (f"{sys.executable} -m retrysafe step send --class message"
              f" --check 'grep -qx \"$RETRYSAFE_STEP_KEY\" {effects} && echo found'"
              f" -- sh -c 'echo \"$RETRYSAFE_STEP_KEY\" >> {effects}; echo msg-1'")
    return effects, script


def ledger_states(home: Path, key: str) -> tuple[str | None, dict[str, tuple[str, str]]]:
    """The state of the outcome ``key`` in the SQLite ledger of ``home`` (``None``: not
    there), and each of its steps' state and reason, by name."""
    import retrysafe

    ledger = retrysafe.open_ledger(f"sqlite:///{home / 'ledger.sqlite3'}")
    try:
        out = ledger.outcome(key)
        steps = {s.name: (s.state, s.reason) for s in ledger.steps(key)}
        return (out.state if out else None), steps
    finally:
        ledger.close()


def one_line_refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a command refused as bad input: exit 2, one line, no traceback."""
    err = proc.stderr
    assert proc.returncode == 2, proc.stdout + err
    assert len(err.splitlines()) == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    return err


def age_outcomes(home: Home) -> None:
    """Every outcome of ``home``'s SQLite ledger, a year old (``prune --older-than 30d``
    takes them)."""
    with sqlite3.connect(home.path / "ledger.sqlite3") as db:
        db.execute("UPDATE rs_outcomes SET updated_at = updated_at - 365 * 86400")
    db.close()


def ledger_keys(home: Home) -> list[str]:
    """The keys ``retrysafe ls`` lists in ``home``, sorted."""
    import json

    proc = home.run("ls", "--json")
    assert proc.returncode == 0, proc.stderr
    return sorted(o["key"] for o in json.loads(proc.stdout))
