"""A pruned key stays forgotten when a lost ledger is rebuilt.

An outcome of the Python API whose steps write no file has no folder: its lines
are in its job's journal (``runs/JOB/.journal/DAY.jsonl``, folders.py), and a
prune removes a journal file only once none of its outcomes is left, so today's
and yesterday's files, and any that names a kept outcome, keep the lines of
pruned outcomes. Before its batch commits, a prune appends one ``pruned`` line
per such outcome to the last journal file naming it (synced); ``retrysafe
recover`` forgets every earlier line of a key when it meets that line, so a
pruned key is not rebuilt as ``done`` and its next run starts afresh, while a key
run again after its prune is rebuilt from its newer lines. Real processes, a real
SQLite ledger, real journal files.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPORT_CONFIG, Home
from support import ledger_keys as _keys

# one outcome through the API: its effect appends its step key to a file outside the
# home (the external system) and answers how many lines it has, so the attempt makes
# no folder; with a fourth argument the effect fails instead (nothing happened), and so
# does the attempt
API = """
import sys
from pathlib import Path
import retrysafe
from retrysafe.errors import RetrysafeError

home, week, effects = sys.argv[1], sys.argv[2], Path(sys.argv[3])

def send(key):
    if len(sys.argv) > 4:
        raise retrysafe.EffectFailed("refused")
    with effects.open("a") as fh:
        fh.write(key + "\\n")
    return f"msg-{len(effects.read_text().splitlines())}"

try:
    with retrysafe.start("report", {"week": week}, home=home) as run:
        print(run.effect("send", "message", execute=send))
except RetrysafeError:
    print("failed")
"""


@pytest.fixture
def effects(home: Home, tmp_path: Path) -> Path:
    home.path.mkdir(parents=True)
    home.config(REPORT_CONFIG)
    path = tmp_path / "effects.txt"
    path.touch()
    return path


def _api(home: Home, week: str, effects: Path, *fail: str) -> str:
    made = subprocess.run([sys.executable, "-c", API, str(home.path), week, str(effects), *fail],
                          env=home.env, capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _age(home: Home, *weeks: str) -> None:
    """These outcomes, a year old (``prune --older-than 30d`` takes them)."""
    with sqlite3.connect(home.path / "ledger.sqlite3") as db:
        db.executemany("UPDATE rs_outcomes SET updated_at = updated_at - 365 * 86400"
                       " WHERE key = ?", [(f"report:{w}",) for w in weeks])
    db.close()


def _prune(home: Home, *extra: str) -> dict[str, object]:
    got = home.run("prune", "--older-than", "30d", "--json", *extra)
    assert got.returncode == 0, got.stdout + got.stderr
    out = json.loads(got.stdout)
    assert isinstance(out, dict)
    return out


def _delete_ledger(home: Home) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)


def _recover(home: Home) -> dict[str, object]:
    got = home.run("recover", "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    out = json.loads(got.stdout)
    assert isinstance(out, dict)
    return out


def _journal(home: Home) -> Path:
    return home.path / "runs/report/.journal"


def _lines(home: Home) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted(_journal(home).glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _steps(home: Home, key: str) -> list[tuple[str, str, str]]:
    status = json.loads(home.run("status", key, "--json").stdout)
    return [(s["name"], s["state"], s["evidence"]) for s in status["steps"]]


def test_a_pruned_key_is_not_rebuilt_by_recover_and_its_next_run_starts_afresh(
        home: Home, effects: Path) -> None:
    assert _api(home, "2026-W01", effects) == "msg-1"
    assert _api(home, "2026-W02", effects) == "msg-2"
    _age(home, "2026-W01", "2026-W02")
    assert _api(home, "2026-W03", effects) == "msg-3"  # not old: kept
    assert sorted(p.name for p in (home.path / "runs/report").iterdir()) == [".journal"]
    pruned = _prune(home)
    assert pruned["keys"] == ["report:2026-W01", "report:2026-W02"]
    assert pruned["journals"] == 0  # today's file stays, with their lines
    assert [(line["outcome_key"], line["action"]) for line in _lines(home)
            if line["action"] == "pruned"] == [("report:2026-W01", "pruned"),
                                                ("report:2026-W02", "pruned")]
    _delete_ledger(home)

    rebuilt = _recover(home)
    assert (rebuilt["outcomes"], rebuilt["done"]) == (1, 1)
    assert _keys(home) == ["report:2026-W03"]
    # forgotten: a run of a pruned key starts afresh and does its work again
    assert _api(home, "2026-W01", effects) == "msg-4"
    assert _api(home, "2026-W03", effects) == "msg-3"  # the kept one is still done
    assert effects.read_text().splitlines() == [
        "report:2026-W01/send", "report:2026-W02/send", "report:2026-W03/send",
        "report:2026-W01/send"]


def test_a_key_run_again_after_its_prune_is_rebuilt_from_its_newer_lines(
        home: Home, effects: Path) -> None:
    assert _api(home, "2026-W05", effects) == "msg-1"
    _age(home, "2026-W05")
    assert _prune(home)["keys"] == ["report:2026-W05"]
    assert _api(home, "2026-W05", effects) == "msg-2"  # afresh
    _delete_ledger(home)

    rebuilt = _recover(home)
    assert (rebuilt["outcomes"], rebuilt["done"], rebuilt["unknown"]) == (1, 1, 0)
    assert _steps(home, "report:2026-W05") == [("send", "done", "msg-2")]
    attempts = json.loads(home.run("status", "report:2026-W05", "--json").stdout)["attempts"]
    assert len(attempts) == 1  # the pruned outcome's attempt is not among them
    assert _api(home, "2026-W05", effects) == "msg-2"  # done: skipped, not repeated
    assert len(effects.read_text().splitlines()) == 2


def test_a_dry_run_writes_no_line(home: Home, effects: Path) -> None:
    _api(home, "2026-W07", effects)
    _age(home, "2026-W07")
    before = home.snapshot()
    dry = _prune(home, "--dry-run")
    assert dry["keys"] == ["report:2026-W07"]
    assert home.snapshot() == before
    assert all(line["action"] != "pruned" for line in _lines(home))


@pytest.mark.parametrize(("point", "then"), [("after-commit", "recover"),
                                             ("before-commit", "prune"),
                                             ("before-commit", "recover")])
def test_a_killed_prune_has_written_its_lines(home: Home, effects: Path, point: str,
                                               then: str) -> None:
    """The lines are synced before the commit. Killed after it, the outcome was pruned and
    stays forgotten. Killed before it, the ledger still holds the outcome, which the next
    prune removes; were the ledger lost first, recover forgets it as well: it was being
    pruned on purpose."""
    _api(home, "2026-W08", effects)
    _api(home, "2026-W09", effects)
    _age(home, "2026-W08")
    killed = home.run("prune", "--older-than", "30d",
                      env={"RETRYSAFE_CRASH_AT": f"prune:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert [line["outcome_key"] for line in _lines(home) if line["action"] == "pruned"] == [
        "report:2026-W08"]
    assert _keys(home) == (["report:2026-W08", "report:2026-W09"] if point == "before-commit"
                           else ["report:2026-W09"])
    if then == "prune":
        assert _prune(home)["keys"] == ["report:2026-W08"]
    _delete_ledger(home)

    assert _recover(home)["outcomes"] == 1
    assert _keys(home) == ["report:2026-W09"]


def test_a_torn_last_line_does_not_swallow_the_pruned_line(home: Home, effects: Path) -> None:
    _api(home, "2026-W11", effects)
    (today,) = _journal(home).glob("*.jsonl")
    with today.open("ab") as fh:
        fh.write(b'{"outcome_key": "report:2026-W11", "job": "rep')  # a power cut, mid-line
    _age(home, "2026-W11")
    assert _prune(home)["keys"] == ["report:2026-W11"]
    assert today.read_bytes().splitlines()[-2].endswith(b'"job": "rep')
    assert json.loads(today.read_bytes().splitlines()[-1])["action"] == "pruned"
    _delete_ledger(home)
    assert _recover(home)["outcomes"] == 0


def test_a_line_of_a_pruned_attempt_after_its_pruned_line_does_not_bring_it_back(
        home: Home, effects: Path) -> None:
    """A close-out line is written just after its commit: one that lands after the prune's
    line names an attempt of the pruned outcome, and is passed over like the rest."""
    _api(home, "2026-W10", effects)
    _age(home, "2026-W10")
    assert _prune(home)["keys"] == ["report:2026-W10"]
    (today,) = _journal(home).glob("*.jsonl")
    closeout = next(line for line in today.read_text().splitlines()
                    if json.loads(line)["action"] == "closeout")
    with today.open("a") as fh:
        fh.write(closeout + "\n")
    _delete_ledger(home)

    assert _recover(home)["outcomes"] == 0


def test_a_pruned_line_goes_with_its_file_but_not_while_an_older_file_holds_its_key(
        home: Home, effects: Path) -> None:
    """The line is appended to the last file naming its outcome, and a file whose outcomes
    are all gone is removed with it, as before; but not while an older file that stays (it
    names a kept outcome) holds lines of its outcome: they would come back without it."""
    assert _api(home, "2026-W20", effects, "fail") == "failed"  # attempt 1, on one day
    assert _api(home, "2026-W21", effects) == "msg-1"
    (first,) = _journal(home).glob("*.jsonl")
    first = first.rename(first.with_name("2020-01-01.jsonl"))  # as if written long ago
    assert _api(home, "2026-W20", effects) == "msg-2"  # attempt 2, on the next
    (second,) = (p for p in _journal(home).glob("*.jsonl") if p != first)
    second = second.rename(second.with_name("2020-01-02.jsonl"))
    _age(home, "2026-W20")
    pruned = _prune(home)
    assert (pruned["keys"], pruned["journals"]) == (["report:2026-W20"], 0)
    assert json.loads(second.read_text().splitlines()[-1])["action"] == "pruned"
    # the first stays (it names 2026-W21, kept), and so the second, whose outcome is gone
    assert first.is_file() and second.is_file()
    assert sorted(p.name for p in _journal(home).glob("*.jsonl")) == [
        "2020-01-01.jsonl", "2020-01-02.jsonl"]  # no file of today was made for it
    _delete_ledger(home)
    assert _recover(home)["outcomes"] == 1
    assert _keys(home) == ["report:2026-W21"]

    # once nothing older holds their keys' lines, both go, their pruned lines with them
    _age(home, "2026-W21")
    pruned = _prune(home)
    assert (pruned["keys"], pruned["journals"]) == (["report:2026-W21"], 2)
    assert list(_journal(home).glob("*.jsonl")) == []
    _delete_ledger(home)
    assert _recover(home)["outcomes"] == 0
    assert _api(home, "2026-W20", effects) == "msg-3"  # afresh
