"""Loose ends of ``retrysafe prune`` and ``retrysafe recover``, with real processes,
a real SQLite ledger and a real SIGKILL (``RETRYSAFE_CRASH_AT=prune:...``).

``prune --older-than`` refuses an age of zero (everything, done a moment ago
included, would be forgotten). ``prune --dry-run`` says what the next prune does
first with the folders a killed prune set aside in ``runs/JOB/.journal/pruning/``
(removes those whose outcomes left the ledger, puts back the rest), changing
nothing. ``recover`` never reads a set-aside folder, or the journal lines of its
outcome, as an outcome: nothing tells a prune killed before its commit from one
killed after it, so each such folder is named for a person to decide."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import Home
from support import age_outcomes as _age
from support import ledger_keys as _keys
from support import report_with_checked_step as _setup

AGED = ("prune", "--older-than", "30d")

# report:2026-W12 in two attempts: the first makes its folder and fails, the second
# (no folder: folders.py) journals its lines and is done; report:2026-W13 journals only
API = """
import sys
import retrysafe
from retrysafe.errors import RetrysafeError

def boom(key):
    raise RuntimeError("boom")

home = sys.argv[1]
try:
    with retrysafe.start("report", {"week": "2026-W12"}, home=home) as run:
        run.dir
        run.effect("send", "local_write", execute=boom)
except RetrysafeError:
    pass
with retrysafe.start("report", {"week": "2026-W12"}, home=home) as run:
    run.effect("send", "local_write", execute=lambda key: "ev-2")
"""


def _run(home: Home, week: str, *cmd: str) -> int:
    return home.run("run", "report", "-p", f"week={week}", "--", *cmd).returncode






def _killed(home: Home, point: str) -> Path:
    """A prune of every aged outcome killed at ``point``; the folder it set them aside in."""
    _age(home)
    killed = home.run(*AGED, env={"RETRYSAFE_CRASH_AT": f"prune:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    (aside,) = (p for p in (home.path / "runs/report/.journal/pruning").iterdir() if p.is_dir())
    return aside


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    assert isinstance(got, dict)
    return got


# --- 1. a zero age ------------------------------------------------------------------


@pytest.mark.parametrize(("age", "extra"), [
    ("0s", ()), ("0d", ("--dry-run",)), ("00m", ("--json",)), (" 0h ", ("--drills",)),
    ("0w", ("--state", "done")), ("0", ()), ("-1d", ())])
def test_prune_refuses_an_age_of_zero_in_one_line_and_changes_nothing(
        home: Home, tmp_path: Path, age: str, extra: tuple[str, ...]) -> None:
    """An outcome done a second ago is not old: a zero (or negative, or unitless) age is
    refused, exit 2, one line, nothing changed; a positive age is accepted."""
    _setup(home, tmp_path)
    assert _run(home, "2026-W01", "true") == 0
    before = home.snapshot()
    refused = home.run("prune", "--older-than", age, *extra)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--older-than" in lines[0] and "Traceback" not in refused.stderr
    assert refused.stdout == ""
    assert home.snapshot() == before
    assert _keys(home) == ["report:2026-W01"]
    assert home.run("prune", "--older-than", "1s", *extra).returncode == 0


def test_a_zero_age_names_why_and_prune_by_keep_is_unchanged(home: Home) -> None:
    home.path.mkdir(parents=True)
    home.config("""
        [jobs.report]
        key = "report:{week}"
        params = { week = "isoweek" }
        keep = "1s"
        """)
    assert _run(home, "2026-W02", "true") == 0
    refused = home.run("prune", "--older-than", "0s")
    assert refused.stderr.strip() == (
        "retrysafe: --older-than '0s' must be longer than zero (it would prune outcomes "
        "finished a moment ago)")
    import time

    time.sleep(1.1)  # older than the job's keep
    assert _json(home.run("prune", "--json"))["keys"] == ["report:2026-W02"]


# --- 2. prune --dry-run and what a killed prune left -------------------------------


def test_dry_run_says_it_would_remove_what_a_prune_killed_after_its_commit_set_aside(
        home: Home, tmp_path: Path) -> None:
    _, script = _setup(home, tmp_path)
    assert _run(home, "2026-W10", "sh", "-c", script) == 0
    assert _run(home, "2026-W11", "sh", "-c", script) == 0
    aside = _killed(home, "after-commit")
    assert _keys(home) == []
    # the key runs again: a new outcome, made after the set-aside one (never put back)
    assert _run(home, "2026-W10", "sh", "-c", script) == 0
    names = [str(aside / "report+2026-W10"), str(aside / "report+2026-W11")]
    before = home.snapshot()

    dry = _json(home.run(*AGED, "--dry-run", "--json"))
    assert dry["set_aside"] == {"removed": names, "put_back": []}
    assert (dry["keys"], dry["folders"]) == ([], 2)
    text = home.run(*AGED, "--dry-run")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[1:] == [
        "a killed prune left folders set aside: would first remove 2 (their outcomes are gone "
        "from the ledger) and put back 0 (their outcomes are still in it)",
        *(f"would remove set-aside folder: {n}" for n in names)]
    assert home.snapshot() == before  # a dry run changes nothing

    real = _json(home.run(*AGED, "--json"))
    assert real["set_aside"] == dry["set_aside"] and real["folders"] == dry["folders"]
    assert not aside.exists()
    assert _keys(home) == ["report:2026-W10"]
    assert (home.path / "runs/report/report+2026-W10/attempt-1/status.json").is_file()


def test_dry_run_says_it_would_put_back_what_a_prune_killed_before_its_commit_set_aside(
        home: Home, tmp_path: Path) -> None:
    _, script = _setup(home, tmp_path)
    assert _run(home, "2026-W20", "sh", "-c", script) == 0
    assert _run(home, "2026-W21", "false") == 1
    aside = _killed(home, "before-commit")
    assert _keys(home) == ["report:2026-W20", "report:2026-W21"]  # rolled back
    names = [str(aside / "report+2026-W20"), str(aside / "report+2026-W21")]
    before = home.snapshot()

    keeping = _json(home.run("prune", "--older-than", "3650d", "--dry-run", "--json"))
    assert keeping["set_aside"] == {"removed": [], "put_back": names}
    assert (keeping["keys"], keeping["folders"]) == ([], 0)
    text = home.run("prune", "--older-than", "3650d", "--dry-run")
    assert text.stdout.splitlines()[1:] == [
        "a killed prune left folders set aside: would first remove 0 (their outcomes are gone "
        "from the ledger) and put back 2 (their outcomes are still in it)",
        *(f"would put back set-aside folder: {n}" for n in names)]
    # a prune that takes them too counts their folders: put back first, then removed
    taking = _json(home.run(*AGED, "--dry-run", "--json"))
    assert taking["set_aside"] == keeping["set_aside"]
    assert (taking["keys"], taking["folders"]) == (["report:2026-W20", "report:2026-W21"], 2)
    assert home.snapshot() == before  # a dry run changes nothing

    real = _json(home.run(*AGED, "--json"))
    assert {k: real[k] for k in ("keys", "folders", "set_aside")} == {
        k: taking[k] for k in ("keys", "folders", "set_aside")}
    assert _keys(home) == [] and not (home.path / "runs/report").exists()


# --- 3. recover and what a killed prune left -----------------------------------------


def _api(home: Home) -> None:
    made = subprocess.run([sys.executable, "-c", API, str(home.path)], env=home.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr


def _delete_ledger(home: Home) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize("point", ["after-commit", "before-commit"])
def test_recover_names_set_aside_folders_and_never_brings_their_outcomes_back(
        home: Home, tmp_path: Path, point: str) -> None:
    """Killed after the commit the outcome was pruned; killed before it, the lost ledger
    still held it: the marker is the same, so recover leaves the folder (and the
    outcome's journal lines, which say done) alone and names it. Moved back by a
    person, the folder is recovered."""
    _, script = _setup(home, tmp_path)
    _api(home)
    assert _run(home, "2026-W14", "sh", "-c", script) == 0
    _age(home)
    assert _run(home, "2026-W15", "sh", "-c", script) == 0  # not old: stays in place
    killed = home.run(*AGED, env={"RETRYSAFE_CRASH_AT": f"prune:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    (aside,) = (p for p in (home.path / "runs/report/.journal/pruning").iterdir() if p.is_dir())
    names = sorted(p.name for p in aside.iterdir())
    assert names == ["report+2026-W12", "report+2026-W14"]
    _delete_ledger(home)
    before = home.snapshot()

    dry = _json(home.run("recover", "--dry-run", "--json"))
    assert (dry["outcomes"], dry["done"]) == (1, 1)  # report:2026-W15 alone
    assert dry["set_aside"] == [{"job": "report", "key": f"report:{w}", "folder": str(aside / n)}
                                for w, n in zip(("2026-W12", "2026-W14"), names, strict=True)]
    text = home.run("recover", "--dry-run")
    assert text.returncode == 0 and home.snapshot() == before
    said = text.stderr.strip().splitlines()
    assert len(said) == 2 and all(line.startswith("not recovered: ") for line in said)
    assert f"{aside / names[0]} (outcome report:2026-W12)" in said[0]
    assert "move it back into runs/report/ first" in said[0]

    rebuilt = home.run("recover")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stderr.strip().splitlines() == said
    assert _keys(home) == ["report:2026-W15"]  # neither set-aside outcome came back as done
    assert sorted(p.name for p in aside.iterdir()) == names  # nor was it touched

    # a person who knows the prune never committed moves the folders back: recovered
    _delete_ledger(home)
    for name in names:
        (aside / name).rename(home.path / "runs/report" / name)
    again = _json(home.run("recover", "--json"))
    assert (again["outcomes"], again["done"], again["set_aside"]) == (3, 3, [])
    status = json.loads(home.run("status", "report:2026-W12", "--json").stdout)
    assert [(s["name"], s["state"], s["evidence"]) for s in status["steps"]] == [
        ("send", "done", "ev-2")]


@pytest.mark.parametrize(("point", "verdict"), [("after-commit", "removed"),
                                                ("before-commit", "put_back")])
def test_dry_run_tells_what_a_killed_prune_left_on_either_ledger(
        any_home: Home, tmp_path: Path, point: str, verdict: str) -> None:
    """The outcome's time of making, read back from either ledger, tells the same
    outcome (put back) from a pruned one (removed), as the real prune does."""
    import time

    home = any_home
    _, script = _setup(home, tmp_path)
    assert _run(home, "2026-W40", "sh", "-c", script) == 0
    time.sleep(1.1)  # older than 1s
    killed = home.run("prune", "--older-than", "1s", env={"RETRYSAFE_CRASH_AT": f"prune:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    (aside,) = (p for p in (home.path / "runs/report/.journal/pruning").iterdir() if p.is_dir())
    told = {"removed": [], "put_back": [], verdict: [str(aside / "report+2026-W40")]}
    dry = _json(home.run("prune", "--older-than", "3650d", "--dry-run", "--json"))
    assert dry["set_aside"] == told and (aside / "report+2026-W40").is_dir()
    real = _json(home.run("prune", "--older-than", "3650d", "--json"))
    assert real["set_aside"] == told and real["folders"] == dry["folders"]
    assert (home.path / "runs/report/report+2026-W40").is_dir() == (verdict == "put_back")
