"""A plain ``retrysafe run JOB [-p NAME=VALUE]... -- CMD`` on an outcome that is not
done is run by the executable without click (``retrysafe.cli.run.run_plain``). It
must do what the full command does: the same stdout, stderr and exit code, the same
outcome, attempts and history in the ledger, the same files under ``runs/``.

Each case runs once through the executable in one home and once through the full
CLI in a twin home (same config, same earlier history), and the two are compared.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from support import Home
from test_done_step_paths import _imported, fast_cmd, full_cmd

CONFIG = """
[jobs.bench]
key = "bench:{run}"
params = { run = "slug" }

[jobs.once]
key = "once:{run}"
params = { run = "slug" }
max_attempts = 1

[jobs.daily]
key = "daily:{day}"
params = { day = "occurrence" }
schedule = "0 6 * * *"
tz = "UTC"
catch_up = 2
"""


def run(cmd: list[str], env: Mapping[str, str],
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=dict(env), cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def same_home(text: str, home: Home) -> str:
    """``text`` with the home's path and the times (a lease's end) put as placeholders."""
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", "{time}",
                  text.replace(str(home.path), "{home}"))


def ledger_state(home: Home, keys: list[str]) -> dict[str, Any]:
    """What the ledger holds about ``keys``, without times, pids and attempt ids."""
    if not (home.path / "ledger.sqlite3").exists():
        return {}
    out: dict[str, Any] = {}
    with home.open_ledger() as ledger:
        for key in keys:
            rec = ledger.outcome(key)
            if rec is None:
                continue
            out[key] = {
                "outcome": (rec.job, dict(rec.params), rec.state, rec.reason, rec.cause,
                            rec.attempts),
                "attempts": [(a.number, a.state, a.result,
                              sorted((k, same_home(v, home)) for k, v in a.context.items()))
                             for a in ledger.attempts(key)],
                "history": [(e.step_key, e.actor.split("-")[0], e.kind, e.from_state, e.to_state)
                            for e in ledger.history(key)],
            }
    return out


def runs_files(home: Home) -> list[str]:
    runs = home.path / "runs"
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*")) if runs.is_dir() else []


@pytest.fixture
def twins(tmp_path: Path) -> tuple[Home, Home]:
    """Two homes with the same config: one for the executable, one for the full CLI."""
    homes = []
    for name in ("fast", "full"):
        home = Home(tmp_path / name)
        home.path.mkdir()
        home.config(CONFIG)
        homes.append(home)
    return homes[0], homes[1]


# id, arguments after `run`, keys to compare, expected exit code; {home} is the home
CASES: list[tuple[str, tuple[str, ...], list[str], int]] = [
    ("new outcome, done", ("bench", "-p", "run=a", "--", "true"), ["bench:a"], 0),
    ("--param=", ("bench", "--param=run=a", "--", "true"), ["bench:a"], 0),
    ("command fails", ("bench", "-p", "run=a", "--", "false"), ["bench:a"], 1),
    ("command prints on both streams",
     ("bench", "-p", "run=a", "--", "sh", "-c", "echo out; echo err >&2; exit 0"), ["bench:a"], 0),
    ("command killed by a signal", ("bench", "-p", "run=a", "--", "sh", "-c", "kill -TERM $$"),
     ["bench:a"], 1),
    ("command not found", ("bench", "-p", "run=a", "--", "no-such-command-here"), ["bench:a"], 2),
    ("command path not executable", ("bench", "-p", "run=a", "--", "./retrysafe.toml"),
     ["bench:a"], 2),
    ("unknown job", ("nojob", "-p", "run=a", "--", "true"), [], 2),
    ("bad parameter", ("bench", "-p", "run=Not/A/Slug", "--", "true"), [], 2),
    ("missing parameter", ("bench", "--", "true"), [], 2),
    ("unknown parameter", ("bench", "-p", "run=a", "-p", "day=1", "--", "true"), [], 2),
    ("not an assignment", ("bench", "-p", "run", "--", "true"), [], 2),
    ("out of attempts: blocked", ("once", "-p", "run=x", "--", "true"), ["once:x"], 3),
    ("held by an agent: busy", ("bench", "-p", "run=held", "--", "true"), ["bench:held"], 75),
    ("a job that catches up (the full command runs it)", ("daily", "--", "true"), [], 0),
]


def _prepare(home: Home) -> None:
    """The same earlier history in both homes: a failed attempt of once:x (its only
    one), and bench:held begun by an agent."""
    failed = home.run("run", "once", "-p", "run=x", "--", "false")
    assert failed.returncode == 1, failed.stderr
    begun = home.run("begin", "bench", "-p", "run=held", "--json")
    assert begun.returncode == 0, begun.stderr


@pytest.mark.parametrize(("args", "keys", "code"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_plain_run_does_what_the_full_command_does(twins: tuple[Home, Home], args: tuple[str, ...],
                                                  keys: list[str], code: int) -> None:
    answers, states = [], []
    for home, make in zip(twins, (fast_cmd, full_cmd), strict=True):
        _prepare(home)
        got = run(make("run", *args), home.env, cwd=home.path)
        answers.append((same_home(got.stdout + "\x00" + got.stderr, home), got.returncode))
        states.append((ledger_state(home, keys), runs_files(home)))
    assert answers[0] == answers[1]
    assert states[0] == states[1]
    assert answers[0][1] == code, answers[0][0]


def test_plain_run_with_the_home_as_a_flag(twins: tuple[Home, Home]) -> None:
    """``--home`` before ``run``, no ``RETRYSAFE_HOME``: the same as the full command."""
    answers = []
    for home, make in zip(twins, (fast_cmd, full_cmd), strict=True):
        env = {k: v for k, v in home.env.items() if k != "RETRYSAFE_HOME"}
        got = run(make("--home", str(home.path), "run", "bench", "-p", "run=a", "--", "true"), env)
        answers.append((got.stdout, got.stderr, got.returncode,
                        ledger_state(home, ["bench:a"]), runs_files(home)))
    assert answers[0] == answers[1]
    assert answers[0][2] == 0 and answers[0][0] == "done: bench:a (attempt 1)\n"


def test_plain_run_started_by_openclaw_records_its_context(twins: tuple[Home, Home]) -> None:
    """Under OpenClaw (``OPENCLAW_SHELL``) the attempt records the runner, as the full
    command does; a re-run of the done outcome records the answer in the history."""
    results = []
    for home, make in zip(twins, (fast_cmd, full_cmd), strict=True):
        env = home.env | {"OPENCLAW_SHELL": "exec"}
        first = run(make("run", "bench", "-p", "run=a", "--", "true"), env)
        again = run(make("run", "bench", "-p", "run=a", "--", "true"), env)
        results.append((first.stdout, first.returncode, again.stdout, again.returncode,
                        ledger_state(home, ["bench:a"])))
    assert results[0] == results[1]
    state = results[0][4]["bench:a"]
    assert ("runner", "openclaw:agent-exec") in state["attempts"][0][3]
    assert state["history"][-1][2] == "answer"


def test_plain_run_does_not_load_click(twins: tuple[Home, Home]) -> None:
    """A plain run of a new outcome never imports click (nor OpenClaw's modules outside
    OpenClaw); with ``--json`` the full command runs it."""
    home = twins[0]
    modules, _, code = _imported(home.env, "run", "bench", "-p", "run=a", "--", "true")
    assert code == 0
    assert "retrysafe.cli.run" in modules
    assert not modules & {"click", "retrysafe.cli._app", "retrysafe.cli.run_command",
                          "retrysafe.openclaw"}
    modules, _, code = _imported(home.env, "run", "bench", "-p", "run=b", "--json", "--", "true")
    assert code == 0 and "click" in modules
    out = json.loads(run(fast_cmd("status", "bench:b", "--json"), home.env).stdout)
    assert out["outcome"]["state"] == "done"


@pytest.mark.parametrize("path", [None, "", ":", "{tmp}/bin", "{tmp}/plain:{tmp}/bin",
                                  "{tmp}/dir:{tmp}/bin", "{tmp}/nowhere::/usr/bin"])
@pytest.mark.parametrize("name", ["tool", "plain", "dir", "sh", "missing"])
def test_a_command_starts_where_shutil_which_finds_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      path: str | None, name: str) -> None:
    """``run``'s check that its command can start (without importing shutil) finds a
    name on PATH exactly where ``shutil.which`` does: PATH unset, empty, or naming the
    current folder; a file that is not executable and a folder do not count."""
    import shutil

    from retrysafe.donestep import startable

    for folder, mode in (("bin", 0o755), ("plain", 0o644), ("dir", 0o755)):
        (tmp_path / folder).mkdir()
        if folder != "dir":
            (tmp_path / folder / ("tool" if folder == "bin" else "plain")).write_text("#!/bin/sh\n")
            (tmp_path / folder / ("tool" if folder == "bin" else "plain")).chmod(mode)
    (tmp_path / "dir" / "dir").mkdir()
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    if path is None:
        monkeypatch.delenv("PATH", raising=False)
    else:
        monkeypatch.setenv("PATH", path.format(tmp=tmp_path))
    assert startable(name, str(tmp_path)) == (shutil.which(name) is not None)
    assert startable(f"./{name}", str(tmp_path)) == (tmp_path / name).is_file()
