"""A done ``retrysafe step`` has one answer: the console script's fast path
(``retrysafe._entry``, no click) and the full CLI (``retrysafe.cli.main``) give
the same stdout, stderr, exit code and log line, and the fast path is taken
both under ``retrysafe run`` and after ``retrysafe begin``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import Home

from retrysafe.config import load_config
from retrysafe.donestep import locate
from retrysafe.engine import Engine
from retrysafe.errors import ApprovalRequired

CONFIG = """
[jobs.weekly]
key = "weekly:{week}"
params = { week = "isoweek" }

[jobs.other]
key = "other:{week}"
params = { week = "isoweek" }
"""

#: the full CLI, without the console script's fast path (python -m retrysafe takes it)
FULL_CLI = "import sys; from retrysafe.cli import main; main(sys.argv[1:])"


def fast_cmd(*args: str) -> list[str]:
    """The installed ``retrysafe`` executable (``python -m retrysafe`` is the same entry)."""
    script = Path(sys.executable).parent / "retrysafe"
    entry = [str(script)] if script.is_file() else [sys.executable, "-m", "retrysafe"]
    return [*entry, *args]


def full_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", FULL_CLI, *args]


def run(cmd: list[str], env: Mapping[str, str]) -> tuple[str, str, int]:
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=120,
                          check=False)
    return proc.stdout, proc.stderr, proc.returncode


def log_lines(folder: Path) -> list[dict[str, Any]]:
    path = folder / "log.jsonl"
    lines = path.read_text("utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


@dataclass
class World:
    """A home with done, blocked and per-item steps in attempts of two kinds."""

    home: Home
    run_env: dict[str, str]  # what `retrysafe run` hands its command
    begin_env: dict[str, str]  # an agent after `retrysafe begin`: the home only
    run_attempt: str
    other_attempt: str  # the current attempt of another outcome
    agent_attempt: str
    folders: dict[str, Path]  # attempt id -> attempt folder


def _start(engine: Engine, job: str, week: str) -> Any:
    begun = engine.begin(job, {"week": week})
    assert begun.run is not None and begun.run.attempt is not None
    return begun.run


@pytest.fixture
def world(home: Home) -> Iterator[World]:
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    (home.path / "nojob.toml").write_text("[jobs.other]" + CONFIG.split("[jobs.other]")[1])
    with Engine.open(home.path) as engine:
        main = _start(engine, "weekly", "2026-W32")
        main.effect("send", "message", execute=lambda skey: "msg-1")
        main.effect("send", "message", item="a1", execute=lambda skey: "msg-a1")
        main.effect("silent", "local_write", execute=lambda skey: "")
        with pytest.raises(ApprovalRequired):
            main.effect("pay", "payment", execute=lambda skey: "never")
        other = _start(engine, "other", "2026-W32")
        other.effect("send", "message", execute=lambda skey: "msg-other")
        for r in (main, other):
            r.folder.close()
        run_env = {**home.env, **main.env()}
    begun = home.run("begin", "weekly", "-p", "week=2026-W40", "--json")
    assert begun.returncode == 0, begun.stderr
    agent = json.loads(begun.stdout)
    sent = home.run("step", "send", "--class", "message", "--attempt", agent["attempt_id"],
                    "--", sys.executable, "-c", "print('msg-agent')")
    assert (sent.returncode, sent.stdout) == (0, "msg-agent\n"), sent.stderr
    yield World(home, run_env, dict(home.env), main.attempt.id, other.attempt.id,
                agent["attempt_id"], {main.attempt.id: main.dir, other.attempt.id: other.dir,
                                      agent["attempt_id"]: Path(agent["folder"])})


CMD = ("--", "true")

# id, environment, arguments, expected (stdout, exit code) of both paths
CASES: list[tuple[str, str, tuple[str, ...], tuple[str, int]]] = [
    ("done step", "run", ("step", "send", "--class", "message", *CMD), ("msg-1\n", 0)),
    ("done step, empty evidence", "run", ("step", "silent", "--class", "local_write", *CMD),
     ("\n", 0)),
    ("done step, option=value", "run", ("step", "send", "--class=message", *CMD), ("msg-1\n", 0)),
    ("done step, another valid class", "run", ("step", "send", "--class", "publish", *CMD),
     ("msg-1\n", 0)),
    ("bad class", "run", ("step", "send", "--class", "bogus", *CMD), ("", 2)),
    ("no class", "run", ("step", "send", *CMD), ("", 2)),
    ("bad step name", "run", ("step", "bad!name", "--class", "message", *CMD), ("", 2)),
    ("wrong attempt id", "run", ("step", "send", "--class", "message", "--attempt", "nope", *CMD),
     ("", 2)),
    ("attempt of another outcome", "run",
     ("step", "send", "--class", "message", "--attempt", "{other}", *CMD), ("msg-other\n", 0)),
    ("step blocked, not done", "run", ("step", "pay", "--class", "payment", *CMD), ("", 3)),
    ("item given", "run", ("step", "send", "--class", "message", "--item", "a1", *CMD),
     ("msg-a1\n", 0)),
    ("bad item", "run", ("step", "send", "--class", "message", "--item", "a/1", *CMD), ("", 2)),
    ("attempt from begin, home only", "begin",
     ("step", "send", "--class", "message", "--attempt", "{agent}", *CMD), ("msg-agent\n", 0)),
    ("attempt from begin, bad class", "begin",
     ("step", "send", "--class", "bogus", "--attempt", "{agent}", *CMD), ("", 2)),
    ("attempt from begin, --home flag", "none",
     ("--home", "{home}", "step", "send", "--class", "message", "--attempt", "{agent}", *CMD),
     ("msg-agent\n", 0)),
    ("attempt from begin, --ledger and --config flags", "none",
     ("--home", "{home}", "--ledger", "sqlite:///{home}/ledger.sqlite3", "--config",
      "{home}/retrysafe.toml", "step", "send", "--class", "message", "--attempt", "{agent}",
      *CMD), ("msg-agent\n", 0)),
    ("no attempt", "begin", ("step", "send", "--class", "message", *CMD), ("", 2)),
    ("job no longer declared, ledger in the environment", "run-nojob",
     ("step", "send", "--class", "message", *CMD), ("msg-1\n", 0)),
    ("job no longer declared, ledger from the config", "begin-nojob",
     ("step", "send", "--class", "message", "--attempt", "{agent}", *CMD), ("", 2)),
]


@pytest.mark.parametrize(("env_name", "args", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_fast_path_and_full_cli_give_one_answer(world: World, env_name: str,
                                                args: tuple[str, ...],
                                                expected: tuple[str, int]) -> None:
    """The executable and the full CLI print the same, exit the same and log the same line."""
    names = {"other": world.other_attempt, "agent": world.agent_attempt,
             "home": str(world.home.path)}
    argv = [a.format(**names) for a in args]
    nojob = {"RETRYSAFE_CONFIG": str(world.home.path / "nojob.toml")}
    env = {"run": world.run_env, "begin": world.begin_env,
           "run-nojob": {**world.run_env, **nojob}, "begin-nojob": {**world.begin_env, **nojob},
           "none": {k: v for k, v in world.begin_env.items() if k != "RETRYSAFE_HOME"}}[env_name]
    answers, logged = [], []
    for cmd in (fast_cmd(*argv), full_cmd(*argv)):
        before = {a: len(log_lines(f)) for a, f in world.folders.items()}
        answers.append(run(cmd, env))
        logged.append({a: [{k: v for k, v in line.items() if k != "time"}
                           for line in log_lines(f)[before[a]:]]
                       for a, f in world.folders.items()})
    assert answers[0] == answers[1]
    assert logged[0] == logged[1]
    stdout, stderr, code = answers[0]
    assert (stdout, code) == expected
    if code == 0:
        assert stderr == ""
        assert sum(len(lines) for lines in logged[0].values()) == 1
        (line,) = [ln for lines in logged[0].values() for ln in lines]
        assert (line["action"], line["result"], line["evidence"] or "") == (
            "check", "skip", stdout[:-1])
    else:
        assert stderr.startswith("retrysafe: ") and stderr.count("\n") == 1, stderr
    if "bogus" in argv:
        assert "unknown effect class 'bogus'" in stderr


def _imported(env: Mapping[str, str], *args: str) -> tuple[set[str], str, int]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "retrysafe", *args],
                          env=dict(env), capture_output=True, text=True, timeout=120, check=False)
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:")}
    return modules, proc.stdout, proc.returncode


@pytest.mark.parametrize("env_name", ["run", "begin"])
def test_done_step_is_answered_without_loading_the_cli(world: World, env_name: str) -> None:
    """A done step under `retrysafe run` or after `retrysafe begin` never imports click,
    the engine or the config's job parsing; a bad class does load the full CLI."""
    env = world.run_env if env_name == "run" else world.begin_env
    attempt = world.run_attempt if env_name == "run" else world.agent_attempt
    step = ("step", "send", "--attempt", attempt, "--class")
    modules, stdout, code = _imported(env, *step, "message", *CMD)
    assert code == 0 and stdout == ("msg-1\n" if env_name == "run" else "msg-agent\n")
    assert "retrysafe.donestep" in modules
    assert not modules & {"click", "retrysafe.cli", "retrysafe.engine", "retrysafe.attempt",
                          "retrysafe.config", "retrysafe.connectors"}
    modules, _, code = _imported(env, *step, "bogus", *CMD)
    assert code == 2 and "click" in modules


# flags (home, config, ledger), environment, config file text
LOCATIONS: list[tuple[tuple[str | None, str | None, str | None], dict[str, str], str | None]] = [
    ((None, None, None), {}, None),
    ((None, None, None), {}, '[ledger]\nurl = "sqlite:///{tmp}/file.db"\n'),
    ((None, None, None), {"RETRYSAFE_LEDGER": "sqlite:///{tmp}/env.db"},
     '[ledger]\nurl = "sqlite:///{tmp}/file.db"\nsqlite_synchronous = "normal"\n'),
    ((None, None, "sqlite:///{tmp}/flag.db"), {"RETRYSAFE_LEDGER": "sqlite:///{tmp}/env.db"},
     None),
    (("{tmp}/flaghome", None, None), {}, None),
    ((None, "{tmp}/elsewhere.toml", None), {"RETRYSAFE_CONFIG": "{tmp}/nowhere.toml"}, None),
    ((None, None, None), {"RETRYSAFE_CONFIG": "{tmp}/elsewhere.toml"}, None),
    ((None, None, None), {"RETRYSAFE_LEDGER": ""}, None),
    ((None, None, None), {}, "not = [toml"),
    ((None, None, None), {}, "ledger = 3\n"),
    ((None, None, None), {}, "[ledger]\nurl = 3\n"),
    ((None, None, None), {}, '[ledger]\nsqlite_synchronous = "off"\n'),
    ((None, None, None), {}, "jobs = 3\n"),
    ((None, "{tmp}/elsewhere.toml", None), {}, '[ledger]\nurl = "sqlite:///{tmp}/file.db"\n'),
    ((None, None, None), {"RETRYSAFE_LEDGER": "sqlite:///{tmp}/env.db"}, "not = [toml"),
]


@pytest.mark.parametrize(("flags", "env", "text"), LOCATIONS)
def test_done_step_finds_the_ledger_by_the_config_precedence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        flags: tuple[str | None, str | None, str | None], env: dict[str, str],
        text: str | None) -> None:
    """locate() gives the home, config file and ledger that load_config gives, and
    gives up where load_config refuses a file it had to read to find the ledger."""
    home = tmp_path / "home"
    home.mkdir()
    for name in [k for k in os.environ if k.startswith("RETRYSAFE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RETRYSAFE_HOME", str(home))
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    if text is not None:
        target = Path(flags[1] or os.environ.get("RETRYSAFE_CONFIG") or home / "retrysafe.toml")
        Path(str(target).format(tmp=tmp_path)).write_text(text.format(tmp=tmp_path), "utf-8")
    home_flag, config_flag, ledger_flag = (f.format(tmp=tmp_path) if f else None for f in flags)
    found = locate(home_flag, config_flag, ledger_flag)
    try:
        settings = load_config(home_flag, config_flag, ledger_flag).settings
    except Exception:  # noqa: BLE001 - the CLI refuses this file: so must locate(), if it read it
        assert found is None or found.jobs is None
        return
    assert found is not None
    assert (found.home, found.config_path, found.ledger_url) == (
        settings.home, settings.config_path, settings.ledger_url)
    if found.jobs is not None:  # the file was read: the ledger's name came from it
        assert found.sqlite_synchronous == settings.sqlite_synchronous


# -- `run` on a done outcome, `status`, `history`: the same two paths ------------------

# id, environment, arguments, expected exit code of both paths (stdout compared between them)
OUTCOME_CASES: list[tuple[str, str, tuple[str, ...], int]] = [
    ("run, outcome done", "begin", ("run", "weekly", "-p", "week=2026-W30", "--", "true"), 0),
    ("run, outcome done, --param=", "begin",
     ("run", "weekly", "--param=week=2026-W30", "--", "true"), 0),
    ("run, outcome done, week misspelt", "begin",
     ("run", "weekly", "-p", "week=2026-w30", "--", "true"), 2),
    ("run, outcome done, --json", "begin",
     ("run", "weekly", "-p", "week=2026-W30", "--json", "--", "true"), 0),
    ("run, outcome done, --home flag", "none",
     ("--home", "{home}", "run", "weekly", "-p", "week=2026-W30", "--", "true"), 0),
    ("run, outcome done, command not found", "begin",
     ("run", "weekly", "-p", "week=2026-W30", "--", "no-such-command-here"), 2),
    ("run, unknown parameter", "begin",
     ("run", "weekly", "-p", "week=2026-W30", "-p", "day=1", "--", "true"), 2),
    ("run, bad parameter", "begin", ("run", "weekly", "-p", "week=soon", "--", "true"), 2),
    ("run, job no longer declared", "begin-nojob",
     ("run", "weekly", "-p", "week=2026-W30", "--", "true"), 2),
    ("run, config unreadable", "begin-broken",
     ("run", "weekly", "-p", "week=2026-W30", "--", "true"), 2),
    ("run, another ledger", "begin-otherledger",
     ("run", "weekly", "-p", "week=2026-W30", "--", "true"), 2),
    ("status, done", "begin", ("status", "weekly:2026-W30"), 0),
    ("status, failed", "begin", ("status", "other:2026-W30"), 0),
    ("status, running, steps and evidence", "begin", ("status", "weekly:2026-W32"), 0),
    ("status, --ledger and --config flags", "none",
     ("--home", "{home}", "--ledger", "sqlite:///{home}/ledger.sqlite3", "--config",
      "{home}/retrysafe.toml", "status", "weekly:2026-W30"), 0),
    ("status, --json", "begin", ("status", "weekly:2026-W30", "--json"), 0),
    ("status, job no longer declared", "begin-nojob", ("status", "weekly:2026-W30"), 0),
    ("status, a job's name", "begin", ("status", "weekly"), 2),
    ("status, unknown key", "begin", ("status", "weekly:1999-W01"), 2),
    ("status, config unreadable", "begin-broken", ("status", "weekly:2026-W30"), 2),
    ("status, another ledger", "begin-otherledger", ("status", "weekly:2026-W30"), 2),
    ("status, no ledger", "begin-noledger", ("status", "weekly:2026-W30"), 2),
    ("history, done", "begin", ("history", "weekly:2026-W30"), 0),
    ("history, running", "begin", ("history", "weekly:2026-W32"), 0),
    ("history, --json", "begin", ("history", "weekly:2026-W30", "--json"), 0),
    ("history, a job's name", "begin", ("history", "weekly"), 2),
    ("history, another ledger", "begin-otherledger", ("history", "weekly:2026-W30"), 2),
]


def _tree(home: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``runs/`` with its size and modification time."""
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted((home / "runs").rglob("*")) if p.is_file()}


@pytest.fixture
def outcomes(world: World) -> World:
    """The world, plus a done outcome, a failed one, another ledger and a broken config."""
    for args, code in ((("weekly", "-p", "week=2026-W30", "--", "true"), 0),
                       (("other", "-p", "week=2026-W30", "--", "false"), 1)):
        done = world.home.run("run", *args, env=world.begin_env)
        assert done.returncode == code, done.stderr
    (world.home.path / "broken.toml").write_text("not = [toml")
    other = world.home.path.parent / "other-home"
    other.mkdir()
    made = world.home.run("run", "weekly", "-p", "week=2026-W30", "--", "true",
                          env={"RETRYSAFE_HOME": str(other),
                               "RETRYSAFE_CONFIG": str(world.home.path / "retrysafe.toml")})
    assert made.returncode == 0, made.stderr
    return world


@pytest.mark.parametrize(("env_name", "args", "code"), [c[1:] for c in OUTCOME_CASES],
                         ids=[c[0] for c in OUTCOME_CASES])
def test_outcome_commands_give_one_answer_on_both_paths(outcomes: World, env_name: str,
                                                        args: tuple[str, ...], code: int) -> None:
    """`run` on a done outcome, `status` and `history`: the executable and the full CLI
    print the same bytes, exit the same, and neither writes to the attempt folders."""
    home = outcomes.home.path
    argv = [a.format(home=str(home)) for a in args]
    base = outcomes.begin_env
    env = {"begin": base, "none": {k: v for k, v in base.items() if k != "RETRYSAFE_HOME"},
           "begin-nojob": {**base, "RETRYSAFE_CONFIG": str(home / "nojob.toml")},
           "begin-broken": {**base, "RETRYSAFE_CONFIG": str(home / "broken.toml")},
           "begin-otherledger": {
               **base, "RETRYSAFE_LEDGER": f"sqlite:///{home.parent}/other-home/ledger.sqlite3"},
           "begin-noledger": {**base, "RETRYSAFE_LEDGER": f"sqlite:///{home}/none.sqlite3"},
           }[env_name]
    answers = []
    for cmd in (fast_cmd(*argv), full_cmd(*argv)):
        before = _tree(home)
        answers.append(run(cmd, env))
        assert _tree(home) == before
    assert answers[0] == answers[1]
    stdout, stderr, got = answers[0]
    assert got == code
    if code == 0:
        assert stderr == "" and stdout.endswith("\n")
        if argv[-1] == "true" and "--json" not in argv:
            assert stdout == "done: weekly:2026-W30 is already done; nothing to do\n"
    else:
        assert stdout == "" and stderr.startswith("retrysafe: ") and stderr.count("\n") == 1
    assert not (home / "none.sqlite3").exists()


@pytest.mark.parametrize("args", [
    ("run", "weekly", "-p", "week=2026-W30", "--", "true"),
    ("status", "weekly:2026-W30"),
    ("history", "weekly:2026-W32"),
], ids=["run-done", "status", "history"])
def test_outcome_commands_are_answered_without_loading_the_cli(outcomes: World,
                                                              args: tuple[str, ...]) -> None:
    """A done outcome's `run`, `status` and `history` (home only, as after `begin`) never
    import click, the engine or the config's job parsing; `--json` loads the full CLI."""
    modules, stdout, code = _imported(outcomes.begin_env, *args)
    assert code == 0 and stdout
    assert "retrysafe.donestep" in modules
    assert not modules & {"click", "retrysafe.cli", "retrysafe.engine", "retrysafe.attempt",
                          "retrysafe.config", "retrysafe.connectors"}
    modules, _, code = _imported(outcomes.begin_env, *args[:2], "--json", *args[2:])
    assert code == 0 and "click" in modules
