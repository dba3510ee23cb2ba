"""``retrysafe prune`` killed part-way, with real processes and a real SIGKILL
(``RETRYSAFE_CRASH_AT=prune:...``).

A batch's folders are set aside before its rows are removed: killed after the
commit, the folders left behind are not where a new outcome of the same key
looks, so its run is not refused as lost work, and the next prune finishes the
removal (journals too). Killed before the commit, the outcomes are still in the
ledger and the next prune puts their folders back. The lost-work check still
refuses a ledger put back from an older copy."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from support import REPORT_CONFIG, Home
from support import age_outcomes as _age
from support import ledger_keys as _keys
from support import report_with_checked_step as _setup

PY = sys.executable
CONFIG = REPORT_CONFIG

# one outcome through the Python API, whose attempt writes journal lines, not a folder
API = """
import sys
import retrysafe

with retrysafe.start("report", {"week": sys.argv[1]}, home=sys.argv[2]) as run:
    run.effect("send", "message", execute=lambda key: "msg-api")
"""

# outcomes 0..N-1 of a job keyed "report:{n}", each with a folder (as a command's attempt has)
MAKE = """
import sys
import retrysafe

for n in range(int(sys.argv[2])):
    with retrysafe.start("report", {"n": str(n)}, home=sys.argv[1]) as run:
        run.dir
"""

AGED = ["prune", "--older-than", "30d", "--json"]


def _run(home: Home, week: str, *cmd: str) -> int:
    proc = home.run("run", "report", "-p", f"week={week}", "--", *cmd)
    return proc.returncode






def _api_outcome(home: Home, week: str) -> None:
    import subprocess

    proc = subprocess.run([PY, "-c", API, week, str(home.path)], env=home.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("export", [False, True], ids=["plain", "export"])
def test_a_prune_killed_after_its_commit_leaves_nothing_in_a_new_runs_way_and_is_finished(
        home: Home, tmp_path: Path, export: bool) -> None:
    effects, script = _setup(home, tmp_path)
    assert _run(home, "2026-W10", "sh", "-c", script) == 0
    assert _run(home, "2026-W11", "sh", "-c", script) == 0
    _api_outcome(home, "2026-W12")
    jobdir = home.path / "runs/report"
    (today,) = (jobdir / ".journal").glob("*.jsonl")
    old_journal = today.rename(today.with_name("2020-01-06.jsonl"))  # as if written long ago
    _age(home)
    file = tmp_path / "pruned.jsonl"
    args = AGED + (["--export", str(file)] if export else [])

    killed = home.run(*args, env={"RETRYSAFE_CRASH_AT": "prune:after-commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _keys(home) == []  # the rows went (committed); the folders had not been removed

    # the pruned key runs again: a new outcome (its step's check finds the earlier effect)
    again = home.run("run", "report", "-p", "week=2026-W10", "--", "sh", "-c", script)
    assert again.returncode == 0, again.stdout + again.stderr
    assert effects.read_text().splitlines() == ["report:2026-W10/send", "report:2026-W11/send"]

    # the next prune finishes what the killed one began, and keeps the new outcome
    finished = home.run(*args)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    got = json.loads(finished.stdout)
    assert got["keys"] == [] and got["kept_folders"] == []
    assert got["folders"] == 2 and got["journals"] == 1
    assert not old_journal.exists()
    assert sorted(p.name for p in jobdir.iterdir()) == [".journal", "report+2026-W10"]
    assert list((jobdir / ".journal").iterdir()) == []
    status = json.loads(home.run("status", "report:2026-W10", "--json").stdout)
    assert status["outcome"]["state"] == "done" and status["outcome"]["attempts"] == 1
    attempt = json.loads((jobdir / "report+2026-W10/attempt-1/status.json").read_text())
    assert attempt["attempt_id"] == status["outcome"]["accepted_attempt"]
    assert _run(home, "2026-W11", "true") == 0  # the other pruned key runs afresh too
    assert _keys(home) == ["report:2026-W10", "report:2026-W11"]

    if export:  # the batch the killed prune exported is whole: it imports into a new ledger
        other = Home(tmp_path / "other")
        other.path.mkdir()
        other.config(CONFIG)
        back = other.run("import", str(file), "--json")
        assert back.returncode == 0, back.stdout + back.stderr
        assert json.loads(back.stdout)["outcomes"] == 3
        assert _keys(other) == ["report:2026-W10", "report:2026-W11", "report:2026-W12"]


def test_a_prune_killed_before_its_commit_keeps_the_outcomes_and_the_next_puts_folders_back(
        home: Home, tmp_path: Path) -> None:
    effects, script = _setup(home, tmp_path)
    assert _run(home, "2026-W20", "sh", "-c", script) == 0
    assert _run(home, "2026-W21", "false") == 1
    jobdir = home.path / "runs/report"
    before = {p.relative_to(jobdir): p.read_bytes() for p in jobdir.rglob("*") if p.is_file()}
    _age(home)

    killed = home.run(*AGED, env={"RETRYSAFE_CRASH_AT": "prune:before-commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _keys(home) == ["report:2026-W20", "report:2026-W21"]  # rolled back
    # the failed one runs again before any prune: its next attempt works
    assert _run(home, "2026-W21", "true") == 0
    assert _run(home, "2026-W20", "sh", "-c", script) == 0  # done, not repeated
    assert effects.read_text().splitlines() == ["report:2026-W20/send"]

    # a prune that takes nothing still puts the set-aside folders back
    nothing = home.run("prune", "--older-than", "3650d", "--json")
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert json.loads(nothing.stdout)["folders"] == 0
    after = {p.relative_to(jobdir): p.read_bytes() for p in jobdir.rglob("*") if p.is_file()}
    assert {p: after[p] for p in before if p.name not in ("summary.json",)} == {
        p: b for p, b in before.items() if p.name not in ("summary.json",)}
    assert (jobdir / "report+2026-W21/attempt-2/status.json").is_file()
    # nothing left beside them (these runs had no journal: the prune's own folder went too)
    assert sorted(p.name for p in jobdir.iterdir()) == ["report+2026-W20", "report+2026-W21"]
    assert json.loads(home.run("status", "report:2026-W21", "--json").stdout
                      )["outcome"]["state"] == "done"

    # and the next prune of them goes all the way
    _age(home)
    pruned = json.loads(home.run(*AGED).stdout)
    assert pruned["keys"] == ["report:2026-W20", "report:2026-W21"] and pruned["folders"] == 2
    assert not jobdir.exists()


def test_after_a_killed_prune_a_ledger_put_back_from_an_older_copy_is_still_refused(
        home: Home, tmp_path: Path) -> None:
    """The lost-work check still does its work in a home a killed prune left: a ledger
    put back from a copy older than a run refuses the next run of that key, exit 2."""
    effects, script = _setup(home, tmp_path)
    assert _run(home, "2026-W30", "sh", "-c", script) == 0
    _age(home)
    killed = home.run(*AGED, env={"RETRYSAFE_CRASH_AT": "prune:after-commit"})
    assert killed.returncode == -signal.SIGKILL
    db = home.path / "ledger.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copy(db, tmp_path / "copy.sqlite3")  # a copy without report:2026-W30
    assert _run(home, "2026-W30", "sh", "-c", script) == 0  # a new outcome, done
    shutil.copy(tmp_path / "copy.sqlite3", db)
    for suffix in ("-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    for _ in range(2):  # a prune in between does not make the folder look pruned
        refused = home.run("run", "report", "-p", "week=2026-W30", "--", "sh", "-c", script)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "report+2026-W30/attempt-1 shows work" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert home.run(*AGED).returncode == 0
    assert effects.read_text().splitlines() == ["report:2026-W30/send"]


@pytest.mark.parametrize("point", ["after-commit", "before-commit"])
def test_the_next_prune_finishes_a_killed_one_on_either_ledger(
        any_home: Home, tmp_path: Path, point: str) -> None:
    """Killed after the commit, the set-aside folder is removed by the next prune;
    killed before it, the next prune puts it back whole, as the ledger still holds it."""
    home = any_home
    _, script = _setup(home, tmp_path)
    assert _run(home, "2026-W40", "sh", "-c", script) == 0
    folder = home.path / "runs/report/report+2026-W40"
    files = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
    killed = home.run("prune", "--older-than", "1s", env={"RETRYSAFE_CRASH_AT": f"prune:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert not folder.exists()  # set aside before the commit
    if point == "after-commit":
        assert _keys(home) == []
        again = home.run("prune", "--older-than", "1s", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        got = json.loads(again.stdout)
        assert (got["keys"], got["folders"], got["kept_folders"]) == ([], 1, [])
        assert not (home.path / "runs/report").exists()
        assert _run(home, "2026-W40", "true") == 0
    else:
        assert _keys(home) == ["report:2026-W40"]
        again = home.run("prune", "--older-than", "3650d", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["folders"] == 0
        assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
                if p.is_file()} == files
        assert sorted(p.name for p in folder.parent.iterdir()) == ["report+2026-W40"]


def test_two_prunes_finishing_the_same_killed_prune_remove_each_folder_once(home: Home) -> None:
    """Both find what the killed one left: each folder is removed, and counted, once."""
    import subprocess

    home.path.mkdir(parents=True)
    home.config("""
        [jobs.report]
        key = "report:{n}"
        params = { n = "int" }
        """)
    made = subprocess.run([PY, "-c", MAKE, str(home.path), "260"],
                          env=home.env, capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
    killed = home.run("prune", "--older-than", "1s",
                      env={"RETRYSAFE_CRASH_AT": "prune:after-commit"})
    assert killed.returncode == -signal.SIGKILL  # after its first batch (200 outcomes)
    procs = [home.popen("prune", "--older-than", "1s", "--json") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    got = [json.loads(out) for out, _ in outs]
    assert sum(g["outcomes"] for g in got) == 60
    assert sum(g["folders"] for g in got) == 260 and [g["kept_folders"] for g in got] == [[], []]
    assert _keys(home) == []
    jobdir = home.path / "runs/report"  # today's journal stays (a worker may append to it)
    assert [p.name for p in jobdir.iterdir()] == [".journal"]
    assert [p.suffix for p in (jobdir / ".journal").iterdir()] == [".jsonl"]
