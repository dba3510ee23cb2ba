"""A home knows its ledger: a deleted, emptied or replaced ledger is refused, never
silently recreated (which would repeat every done outcome), and ``retrysafe
recover`` rebuilds it from the attempt folders, keeping only what they prove."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import REPORT_CONFIG, Home
from support import report_with_checked_step as _setup

CONFIG = REPORT_CONFIG


def _delete_ledger(home: Home) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)


def test_a_deleted_ledger_is_refused_and_recover_rebuilds_what_the_folders_prove(
        home: Home, tmp_path: Path) -> None:
    effects, script = _setup(home, tmp_path)
    done = home.run("run", "report", "-p", "week=2026-W10", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    crashed = home.run("run", "report", "-p", "week=2026-W11", "--", "sh", "-c", script,
                       env={"RETRYSAFE_CRASH_AT": "send:after-execute"})
    assert crashed.returncode != 0
    assert effects.read_text().splitlines() == ["report:2026-W10/send", "report:2026-W11/send"]
    folder = home.path / "runs/report/report+2026-W10/attempt-1"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    _delete_ledger(home)

    refused = home.run("run", "report", "-p", "week=2026-W10", "--", "sh", "-c", script)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "retrysafe recover" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert len(effects.read_text().splitlines()) == 2

    dry = home.run("recover", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout)
    assert (counts["outcomes"], counts["done"], counts["unknown"]) == (2, 1, 1)
    rebuilt = home.run("recover")
    assert rebuilt.returncode == 0 and "rebuilt 2 outcomes" in rebuilt.stdout, rebuilt.stderr

    status = json.loads(home.run("status", "report:2026-W10", "--json").stdout)
    assert status["outcome"]["state"] == "done"
    assert [(s["name"], s["state"], s["evidence"]) for s in status["steps"]] == [
        ("send", "done", "msg-1")]
    again = home.run("run", "report", "-p", "week=2026-W10", "--", "sh", "-c", script)
    assert again.returncode == 0, again.stdout + again.stderr
    # the crashed one is unknown: its next run looks the effect up and does not repeat it
    finish = home.run("run", "report", "-p", "week=2026-W11", "--", "sh", "-c", script)
    assert finish.returncode == 0, finish.stdout + finish.stderr
    assert effects.read_text().splitlines() == ["report:2026-W10/send", "report:2026-W11/send"]
    assert (home.path / "runs/report/report+2026-W11/attempt-2").is_dir()
    assert home.run("recover").returncode == 2  # the ledger is not empty any more


def test_a_replaced_ledger_is_refused_until_adopted(home: Home, tmp_path: Path) -> None:
    _, script = _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W12", "--", "sh", "-c", script).returncode == 0
    other = f"sqlite:///{tmp_path / 'other.sqlite3'}"
    # a file that is not there is refused before it is made: not created behind the refusal
    for args, said in ((("run", "report", "-p", "week=2026-W13", "--", "true"), "points elsewhere"),
                       (("ls",), "no ledger at")):
        proc = home.run(*args, env={"RETRYSAFE_LEDGER": other})
        assert proc.returncode == 2 and said in proc.stderr, proc.stdout + proc.stderr
        assert not (tmp_path / "other.sqlite3").exists()
    adopted = home.run("recover", "--adopt", env={"RETRYSAFE_LEDGER": other})
    assert adopted.returncode == 0, adopted.stderr
    assert home.run("run", "report", "-p", "week=2026-W13", "--", "true",
                    env={"RETRYSAFE_LEDGER": other}).returncode == 0
    back = home.run("ls")
    assert back.returncode == 2 and "another ledger" in back.stderr


def test_an_attempt_folder_left_by_a_lost_ledger_is_kept_not_overwritten(
        home: Home, tmp_path: Path) -> None:
    _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W14", "--", "true").returncode == 0
    stale = home.path / "runs/report/report+2026-W15/attempt-1"
    stale.mkdir(parents=True)
    # a claim a power cut took from the ledger (it is not synced): no work followed it
    (stale / "status.json").write_text('{"attempt_id": "0123abcd", "state": "running"}')
    (stale / "log.jsonl").write_text('{"action": "begin", "result": "started"}\n')
    (stale / "report.md").write_text("an earlier report\n")
    assert home.run("run", "report", "-p", "week=2026-W15", "--", "true").returncode == 0
    kept = stale.with_name("attempt-1.orphan-0123abcd")
    assert (kept / "report.md").read_text() == "an earlier report\n"
    assert json.loads((stale / "status.json").read_text())["attempt_id"] != "0123abcd"


@pytest.mark.parametrize("how", ["older copy", "wal deleted"])
def test_a_ledger_that_lost_work_its_folders_show_is_refused_before_anything_runs(
        home: Home, tmp_path: Path, how: str) -> None:
    """The home's own ledger put back from an older copy, or its -wal file deleted
    after a crash, has the right identity but has forgotten work an attempt folder
    shows (a record, a done close-out). Running on would send the message again: the
    run is refused, exit 2, one line naming the folder and 'retrysafe recover'."""
    import shutil

    effects, script = _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W20", "--", "sh", "-c", script
                    ).returncode == 0
    db = home.path / "ledger.sqlite3"
    if how == "older copy":
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copy(db, tmp_path / "copy.sqlite3")
        done = home.run("run", "report", "-p", "week=2026-W21", "--", "sh", "-c", script)
        assert done.returncode == 0, done.stdout + done.stderr
        shutil.copy(tmp_path / "copy.sqlite3", db)
    else:
        crashed = home.run("run", "report", "-p", "week=2026-W21", "--", "sh", "-c", script,
                           env={"RETRYSAFE_CRASH_AT": "run:before-closeout"})
        assert crashed.returncode != 0
        # a copy of the files as the crash left them, without the log a reader keeps
        shutil.copy(db, tmp_path / "copy.sqlite3")
        shutil.copy(tmp_path / "copy.sqlite3", db)
    for suffix in ("-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    assert effects.read_text().splitlines() == ["report:2026-W20/send", "report:2026-W21/send"]
    again = home.run("run", "report", "-p", "week=2026-W21", "--", "sh", "-c", script)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "report+2026-W21/attempt-1 shows work" in again.stderr
    assert "retrysafe recover" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert effects.read_text().splitlines() == ["report:2026-W20/send", "report:2026-W21/send"]
    assert (home.path / "runs/report/report+2026-W21/attempt-1").is_dir()


def test_temporary_files_a_killed_writer_left_are_removed_by_the_next_attempt(
        home: Home, tmp_path: Path) -> None:
    import os
    import time

    _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W16", "--", "false").returncode == 1
    outcome = home.path / "runs/report/report+2026-W16"
    old = [outcome / ".summary.json.abc123.tmp", outcome / "attempt-1/.status.json.xyz.tmp"]
    fresh = outcome / "attempt-1/.status.json.new.tmp"
    for path in (*old, fresh):
        path.write_text("{")
    for path in old:
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    assert home.run("run", "report", "-p", "week=2026-W16", "--", "true").returncode == 0
    assert not any(p.exists() for p in old)
    assert fresh.exists()  # it may belong to a writer at work


def test_recover_survives_torn_and_hostile_folders_and_a_mistyped_home(
        home: Home, tmp_path: Path) -> None:
    """A torn log line, bytes that are not UTF-8, a summary that is not an object,
    a folder name that is no slug: recover keeps what is proven and skips the rest;
    a home without runs/ is refused (exit 2) and nothing is created."""
    from support import Home as Other

    typo = Other(tmp_path / "typo")
    refused = typo.run("recover")
    assert refused.returncode == 2 and "nothing to recover" in refused.stderr
    assert not typo.path.exists()

    _, script = _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W17", "--", "sh", "-c", script).returncode == 0
    folder = home.path / "runs/report/report+2026-W17"
    with (folder / "attempt-1/log.jsonl").open("ab") as fh:
        fh.write(b'{"step_key": "report:2026-W17/send", "action": "rec\xff\xfe')  # torn
    (folder / "summary.json").write_text("[1, 2]")
    odd = home.path / "runs/report/%ZZ"
    (odd / "attempt-1").mkdir(parents=True)
    _delete_ledger(home)
    got = home.run("recover", "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    counts = json.loads(got.stdout)
    assert counts["outcomes"] == 1 and counts["steps_done"] == 1 and len(counts["skipped"]) == 1
    status = json.loads(home.run("status", "report:2026-W17", "--json").stdout)
    # the summary no longer says done: proven steps stay done, the outcome is re-checked
    assert status["outcome"]["state"] == "unknown"
    assert [(s["state"], s["evidence"]) for s in status["steps"]] == [("done", "msg-1")]
    assert home.run("run", "report", "-p", "week=2026-W17", "--", "sh", "-c", script).returncode == 0
    assert len((tmp_path / "effects.txt").read_text().splitlines()) == 1


def test_work_another_worker_did_after_this_one_read_the_ledger_is_not_lost(
        home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker B reads the outcome (not there yet), worker A claims it and works in its
    folder, then B looks at the folder: the work is A's, which the ledger records, so B
    goes on to its claim (and is answered as the ledger says) instead of refusing."""
    from retrysafe.engine import Engine
    from retrysafe.ledger import Ledger
    from retrysafe.states import ClaimStatus

    _, script = _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W40", "--", "sh", "-c", script
                    ).returncode == 0  # worker A, all the way to done
    stale = Ledger.outcome_and_steps
    monkeypatch.setattr(Ledger, "outcome_and_steps", lambda self, key: (None, []))
    with Engine.open(home.path) as engine:
        begun = engine.begin("report", {"week": "2026-W40"})  # worker B, its read was stale
    monkeypatch.setattr(Ledger, "outcome_and_steps", stale)
    assert begun.status is ClaimStatus.DONE


def test_a_stray_folder_name_beside_the_attempts_is_not_an_attempt(home: Home, tmp_path: Path) -> None:
    """'attempt-²' (a digit Python's isdigit accepts and int refuses) or 'attempt-x' in an
    outcome's folder is not an attempt folder: the run goes on."""
    _setup(home, tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W40", "--", "true").returncode == 0
    outcome = home.path / "runs/report/report+2026-W41"
    for name in ("attempt-\u00b2", "attempt-x"):
        (outcome / name).mkdir(parents=True)
        (outcome / name / "status.json").write_text('{"state": "done"}')
    proc = home.run("run", "report", "-p", "week=2026-W41", "--", "true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
