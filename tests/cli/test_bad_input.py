"""Bad input: one clear line on stderr, exit 2, and the home exactly as it was."""

from __future__ import annotations

import json
import os

import pytest
from support import Home

CONFIG = """
    [jobs.report]
    key = "report:{week}:{team}"
    params = { week = "isoweek", team = "slug" }
"""


@pytest.fixture
def ready(home: Home) -> Home:
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    # one real outcome, so "unchanged" covers a non-empty ledger too
    assert home.run("run", "report", "-p", "week=2026-W01", "-p", "team=ops", "--", "true").returncode == 0
    return home


def assert_clean_error(proc, before: dict[str, bytes], home: Home, code: int = 2,  # type: ignore[no-untyped-def]
                       match: str = "") -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retrysafe: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert match.lower() in lines[0].lower()
    assert home.snapshot() == before


RUN_CASES = [
    (["run", "nope", "--", "true"], "unknown job"),
    (["run", "report", "-p", "week=2026-W32", "--", "true"], "missing parameter 'team'"),
    (["run", "report", "-p", "week=2026-W32", "-p", "team=ops", "-p", "x=1", "--", "true"], "unknown parameter"),
    (["run", "report", "-p", "week=2026-W54", "-p", "team=ops", "--", "true"], "not an iso week"),
    (["run", "report", "-p", "week=2026-W32", "-p", "team=", "--", "true"], "not a slug"),
    (["run", "report", "-p", "week=2026-W32", "-p", "team=" + "a" * 10_000, "--", "true"], "at most"),
    (["run", "report", "-p", "week=2026-W32", "-p", "team=ops", "--", "/no/such/cmd"], "command not found"),
    (["run", "report", "-p", "week", "--", "true"], "NAME=VALUE"),
    (["run", "report", "-p", "week=2026-W32", "-p", "week=2026-W33", "--", "true"], "given twice"),
    (["step", "send", "--class", "message", "--", "true"], "not inside an attempt"),
    (["step", "a/b", "--class", "message", "--", "true"], "not valid"),
    (["step", "..", "--class", "message", "--", "true"], "not valid"),
    (["step", "a\x07b", "--class", "message", "--", "true"], "not valid"),
    (["step", "send", "--class", "teleport", "--attempt", "x", "--", "true"], ""),
    (["generate", "draft", "--", "true"], "not inside an attempt"),
    (["status", "no:such:key"], "no outcome"),
    (["resolve", "report:2026-W01:ops", "nostep", "--absent"], "no step"),
    (["resolve", "report:2026-W01:ops", "x", "--absent", "--found", "y"], "exactly one"),
    (["retry", "report:2026-W01:ops"], "never repeat"),
    (["job", "add", "bad", "--key", "k:{a}", "--param", "a=float"], "unknown type"),
    (["job", "add", "bad", "--key", "k:{a}"], "no such parameter"),
    (["job", "add", "bad", "--key", "k:{a}", "--param", "a=str", "--lease-seconds", "9" * 23],
     "from 1 to 999999999"),
    (["job", "add", "bad", "--key", "k\u2028{a}", "--param", "a=str"], "line break"),
    (["ls", "--limit", "9" * 23], "--limit"),
    (["job", "add", "bad", "--key", "k:{a}" + os.fsdecode(b"\xff"), "--param", "a=str"],
     "not UTF-8"),
    (["needs-attention", "--limit", "9" * 23], "--limit"),
]


@pytest.mark.parametrize(("args", "match"), RUN_CASES, ids=[" ".join(a)[:50] for a, _ in RUN_CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(ready: Home, args: list[str], match: str) -> None:
    """Each malformed request is refused before anything is written."""
    before = ready.snapshot()
    assert_clean_error(ready.run(*args), before, ready, match=match)


def test_unknown_class_inside_an_attempt(ready: Home) -> None:
    """An unknown effect class is refused inside a real attempt, and nothing is recorded."""
    proc = ready.run("run", "report", "-p", "week=2026-W02", "-p", "team=ops", "--", "sh", "-c",
                     f"{' '.join(ready.cmd())} step send --class teleport -- true; echo rc=$?")
    assert "unknown effect class 'teleport'" in proc.stderr and "rc=2" in proc.stdout
    status = json.loads(ready.run("status", "report:2026-W02:ops", "--json").stdout)
    assert status["steps"] == []


@pytest.mark.parametrize("text", [
    "[jobs.x\nkey=1",
    "[jobs.x]\nkey = 3",
    "[jobs.x]\nkey = \"x:{a}\"\nparams = { a = \"str\" }\nmax_attempts = 0",
    "[jobs.x]\nkey = \"x:{a}\"\nparams = { a = \"str\", b = \"int\" }",
    "[jobs.x]\nkey = \"x\"\nsurprise = 1",
    "[jobs.x]\nkey = \"x:{a!r}\"\nparams = { a = \"str\" }",
    "[jobs.x]\nkey = \"x\"\nclasses = { payment = { approval = \"no\" } }",
    "[ledger]\nurl = \"mysql://x\"",
    "[jobs.x]\nkey = \"x:{a}\" # caf\xe9 in Latin-1\nparams = { a = \"str\" }",
    "[jobs.x]\nkey = \"x~{a}\"\nparams = { a = \"str\" }",
    "[jobs.x]\nkey = \"x:{a}\"\nparams = { a = \"str\" }\nlease_seconds = 99999999999999",
])
def test_malformed_config_is_one_line(home: Home, text: str) -> None:
    """A broken config names the file and the problem, exit 2, and no ledger is created."""
    home.path.mkdir(parents=True)
    (home.path / "retrysafe.toml").write_bytes(text.encode("latin-1"))  # (one is not UTF-8)
    before = home.snapshot()
    proc = home.run("run", "x", "-p", "a=1", "--", "true")
    assert_clean_error(proc, before, home)


def test_unwritable_home(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A home that cannot be created (a file is in the way) is one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    config = tmp_path / "retrysafe.toml"
    config.write_text('[jobs.j]\nkey = "j:{d}"\nparams = { d = "date" }\n')
    home = Home(blocker / "home")
    proc = home.run("run", "j", "-p", "d=2026-01-02", "--", "true",
                    env={"RETRYSAFE_CONFIG": str(config)})
    assert proc.returncode == 2 and "cannot be created" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert blocker.read_text() == "x"


def test_newer_schema_is_refused_untouched(ready: Home) -> None:
    """A ledger from a newer retrysafe: exit 2 and the file is not modified."""
    import sqlite3

    db = ready.path / "ledger.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO rs_schema (version, name, applied_at) VALUES (99, 'future', 0)")
    before = ready.snapshot()
    proc = ready.run("run", "report", "-p", "week=2026-W09", "-p", "team=ops", "--", "true")
    assert_clean_error(proc, before, ready, match="schema version 99")


@pytest.mark.parametrize("value", ["send:after-exec", "nonsense", "run:before-closing"])
def test_a_mistyped_crash_point_is_refused_not_ignored(ready: Home, value: str) -> None:
    """A crash drill whose RETRYSAFE_CRASH_AT names no point a run reaches would pass
    without crashing: refused before anything is claimed, one line listing the points."""
    before = ready.snapshot()
    proc = ready.run("run", "report", "-p", "week=2026-W09", "-p", "team=ops", "--", "true",
                     env={"RETRYSAFE_CRASH_AT": value})
    assert_clean_error(proc, before, ready, match="after-execute")


def test_a_step_named_run_can_be_crash_drilled_at_a_step_point(ready: Home) -> None:
    """'run' is a legal step name: run:after-intent names its step point (the drill
    planner writes NAME:POINT for every step), not a mistyped run point."""
    import sys

    step = f"{sys.executable} -m retrysafe step run --class local_write -- true"
    proc = ready.run("run", "report", "-p", "week=2026-W08", "-p", "team=ops", "--", "sh", "-c",
                     step, env={"RETRYSAFE_CRASH_AT": "run:after-intent"})
    assert proc.returncode != 2 and "is not STEP:POINT" not in proc.stderr, proc.stderr
