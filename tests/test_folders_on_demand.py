"""Attempts of the Python API make their folder on demand (folders.py): an outcome
whose steps write no file leaves lines in its job's journal, not two folders and
three files; the journal is enough for ``retrysafe recover`` to keep a done
outcome done and to look up, not repeat, an effect a crash left unrecorded. The
claim and the finish of such an outcome commit without syncs of their own
(ledger/backend.py); the intent and the record keep theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import retrysafe
from retrysafe.engine import Engine, close_all
from retrysafe.identity import LedgerMismatch

CONFIG = """
[jobs.report]
key = "report:{week}"
params = { week = "isoweek" }
"""

# one outcome through the API; the effect appends its step key to a file (the
# external system), the lookup finds it there
SCRIPT = """
import sys
from pathlib import Path
import retrysafe

home, week, effects = sys.argv[1], sys.argv[2], Path(sys.argv[3])

def send(key):
    with effects.open("a") as fh:
        fh.write(key + "\\n")
    return "msg-" + key.rsplit(":", 1)[-1]

def lookup(key):
    lines = effects.read_text().splitlines()
    return retrysafe.Found("msg-" + key.rsplit(":", 1)[-1]) if key in lines else retrysafe.ABSENT

with retrysafe.start("report", {"week": week}, home=home) as run:
    print(run.effect("send", "message", execute=send, lookup=lookup))
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    (path / "retrysafe.toml").write_text(CONFIG)
    yield path
    close_all()


def _api(home: Path, week: str, effects: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(home), week, str(effects)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retrysafe", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120)


def _journal(home: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted((home / "runs/report/.journal").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_an_outcome_without_files_writes_journal_lines_not_folders(home: Path) -> None:
    with retrysafe.start("report", {"week": "2026-W10"}, home=home) as run:
        assert run.effect("send", "message", execute=lambda key: "msg-1") == "msg-1"
    assert sorted(p.name for p in (home / "runs/report").iterdir()) == [".journal"]
    lines = _journal(home)
    assert [(line["outcome_key"], line["attempt"], line["action"], line["result"])
            for line in lines] == [
        ("report:2026-W10", 1, "begin", "started"),
        ("report:2026-W10", 1, "intent", "running"),
        ("report:2026-W10", 1, "record", "done"),
        ("report:2026-W10", 1, "closeout", "done"),
    ]
    assert lines[2]["evidence"] == "msg-1"
    status = json.loads(_cli(home, "status", "report:2026-W10", "--json").stdout)
    assert status["outcome"]["state"] == "done"


def test_the_folder_is_made_when_the_attempt_needs_one(home: Path) -> None:
    with retrysafe.start("report", {"week": "2026-W11"}, home=home) as run:
        run.effect("send", "message", execute=lambda key: "msg-2")
        folder = run.dir  # asked for: made now, with what the attempt journaled so far
        assert folder == home / "runs/report/report+2026-W11/attempt-1"
        status = json.loads((folder / "status.json").read_text())
        assert (status["state"], status["attempt_id"]) == ("running", run.attempt.id)
        logged = [json.loads(line)["action"] for line in (folder / "log.jsonl").read_text().splitlines()]
        assert logged == ["begin", "intent", "record"]
        art = run.generate("draft", lambda out: out.write_text("hello"))
        assert art.parent == folder
    summary = json.loads((folder.parent / "summary.json").read_text())
    assert (summary["state"], summary["accepted_attempt"]) == ("done", "attempt-1")
    assert json.loads((folder / "status.json").read_text())["state"] == "done"


def test_a_stale_folder_of_the_same_attempt_number_is_set_aside_when_made(home: Path) -> None:
    with retrysafe.start("report", {"week": "2026-W09"}, home=home) as run:
        run.effect("send", "message", execute=lambda key: "msg-0")
    # a folder the ledger does not know, left by a claim a power cut took (no work
    # followed it; one that shows work is refused, tests/cli/test_lost_ledger.py):
    # never written into
    stale = home / "runs/report/report+2026-W12/attempt-1"
    stale.mkdir(parents=True)
    (stale / "status.json").write_text('{"attempt_id": "0123abcd", "state": "running"}')
    with retrysafe.start("report", {"week": "2026-W12"}, home=home) as run:
        assert run.dir == stale
    assert (stale.parent / "attempt-1.orphan-0123abcd" / "status.json").is_file()
    assert json.loads((stale / "status.json").read_text())["attempt_id"] == run.attempt.id


def test_a_deleted_ledger_is_refused_and_recover_rebuilds_from_the_journal(
        home: Path, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    effects.touch()
    assert _api(home, "2026-W10", effects).returncode == 0
    crashed = _api(home, "2026-W11", effects, RETRYSAFE_CRASH_AT="send:after-execute")
    assert crashed.returncode != 0
    assert effects.read_text().splitlines() == ["report:2026-W10/send", "report:2026-W11/send"]
    assert sorted(p.name for p in (home / "runs/report").iterdir()) == [".journal"]
    for suffix in ("", "-wal", "-shm"):
        (home / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)

    refused = _api(home, "2026-W10", effects)
    assert refused.returncode != 0 and LedgerMismatch.__name__ in refused.stderr
    assert len(effects.read_text().splitlines()) == 2

    counts = json.loads(_cli(home, "recover", "--dry-run", "--json").stdout)
    assert (counts["outcomes"], counts["done"], counts["unknown"]) == (2, 1, 1)
    assert _cli(home, "recover").returncode == 0
    status = json.loads(_cli(home, "status", "report:2026-W10", "--json").stdout)
    assert status["outcome"]["state"] == "done"
    assert [(s["name"], s["state"], s["evidence"]) for s in status["steps"]] == [
        ("send", "done", "msg-2026-W10/send")]
    # the done one executes nothing; the crashed one is looked up, found, not repeated
    again = _api(home, "2026-W10", effects)
    assert again.returncode == 0 and again.stdout.strip() == "msg-2026-W10/send", again.stderr
    finish = _api(home, "2026-W11", effects)
    assert finish.returncode == 0 and finish.stdout.strip() == "msg-2026-W11/send", finish.stderr
    assert effects.read_text().splitlines() == ["report:2026-W10/send", "report:2026-W11/send"]
    attempts = {(line["outcome_key"], line["attempt"]) for line in _journal(home)}
    assert ("report:2026-W11", 2) in attempts  # numbers continue above the journal's


def test_a_home_another_process_just_started_is_not_taken_for_a_deleted_ledger(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes opening a new home at once: the first records the ledger's mark,
    then writes its first journal line while its claim is not committed yet (once()
    commits the claim with the intent). The second, which read no mark a moment before,
    finds the journal and an empty ledger: that is the first process's work, not a
    deleted ledger, since the mark it reads again now names this ledger."""
    from retrysafe import identity
    from retrysafe.ledger import open_ledger

    real = identity.has_outcome_folders
    marked: list[bool] = []

    def meanwhile(runs: Path) -> bool:
        if not (home / "ledger.sqlite3").exists():  # (the check before the ledger is made)
            return real(runs)
        # the first process, between the second's two reads: its mark, its journal line
        with open_ledger(f"sqlite:///{home / 'ledger.sqlite3'}") as ledger:
            identity.record_identity(home, identity.ledger_identity(ledger))
        marked.append(True)
        (runs / "report" / ".journal").mkdir(parents=True, exist_ok=True)
        (runs / "report" / ".journal" / "2026-03-09.jsonl").write_text("{}\n")
        return real(runs)

    (home / "runs").mkdir()
    monkeypatch.setattr(identity, "_recorded", lambda runs, _real=identity._recorded: (
        _real(runs) if marked else None))
    monkeypatch.setattr(identity, "has_outcome_folders", meanwhile)
    with Engine.open(home) as second:
        assert second.once("report", {"week": "2026-W10"}, "send", "local_write",
                           execute=lambda k: "m-1") == "m-1"
    assert marked == [True]


def test_claim_and_finish_skip_their_sync_and_the_connection_keeps_full(home: Path) -> None:
    with Engine.open(home) as engine:
        backend = engine.ledger.backend
        conn = backend._conn()  # type: ignore[attr-defined]
        with engine.start("report", {"week": "2026-W13"}) as run:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL, after the claim
            with backend.transaction(durable=False):
                assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL inside
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
            run.effect("send", "message", execute=lambda key: "msg-3")
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_prune_removes_a_journal_file_once_none_of_its_outcomes_is_left(home: Path) -> None:
    import sqlite3

    def outcome(week: str) -> None:
        with retrysafe.start("report", {"week": week}, home=home) as run:
            run.effect("send", "message", execute=lambda key: "msg")
        close_all()

    def prune(*weeks: str) -> dict[str, object]:
        with sqlite3.connect(home / "ledger.sqlite3") as db:  # these are a year old
            db.executemany("UPDATE rs_outcomes SET updated_at = updated_at - 365 * 86400"
                           " WHERE key = ?", [(f"report:{w}",) for w in weeks])
        got = _cli(home, "prune", "--older-than", "30d", "--json")
        assert got.returncode == 0, got.stderr
        return json.loads(got.stdout)

    outcome("2026-W14")
    outcome("2026-W15")
    (today,) = (home / "runs/report/.journal").glob("*.jsonl")
    assert prune("2026-W14")["keys"] == ["report:2026-W14"]
    assert today.is_file()  # it still names report:2026-W15, which is kept
    assert prune("2026-W15")["journals"] == 0 and today.is_file()  # a worker may append to it
    old = today.rename(today.with_name("2020-01-06.jsonl"))  # as if written long ago
    outcome("2026-W16")
    pruned = prune("2026-W16")
    assert pruned["keys"] == ["report:2026-W16"] and pruned["journals"] == 1
    assert not old.exists() and today.is_file()


def test_a_journal_folder_replaced_by_a_link_is_refused_not_followed(
        home: Path, tmp_path: Path) -> None:
    import shutil

    from retrysafe.errors import UnsafePath

    with retrysafe.start("report", {"week": "2026-W16"}, home=home) as run:
        run.effect("send", "message", execute=lambda key: "msg-6")
    journal = home / "runs/report/.journal"
    shutil.rmtree(journal)  # removed while this process keeps its file open
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    journal.symlink_to(elsewhere)
    with pytest.raises(UnsafePath), retrysafe.start("report", {"week": "2026-W17"}, home=home):
        pass
    assert list(elsewhere.iterdir()) == []


def test_start_keeps_one_engine_until_its_config_or_ledger_file_changes(home: Path) -> None:
    """start() in one process reuses its engine from outcome to outcome; an edited config
    is read again by the next start(), and a ledger file deleted under a kept engine is
    noticed before anything is written to the deleted file: refused, not recorded."""
    import retrysafe
    from retrysafe.engine import _cached_engine

    def send(key: str) -> str:
        return "msg-" + key

    with retrysafe.start("report", {"week": "2026-W10"}, home=home) as run:
        run.effect("send", "message", execute=send)
    kept = _cached_engine(home, None, None)
    with retrysafe.start("report", {"week": "2026-W11"}, home=home) as run:
        run.effect("send", "message", execute=send)
    assert _cached_engine(home, None, None) is kept

    (home / "retrysafe.toml").write_text(CONFIG + '[jobs.digest]\nkey = "digest:{day}"\n'
                                         'params = { day = "date" }\n')
    with retrysafe.start("digest", {"day": "2026-03-02"}, home=home) as run:
        run.effect("send", "message", execute=send)
    reopened = _cached_engine(home, None, None)
    assert reopened is not kept

    for suffix in ("", "-wal", "-shm"):
        (home / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerMismatch), \
            retrysafe.start("report", {"week": "2026-W12"}, home=home) as run:
        run.effect("send", "message", execute=send)
    assert reopened._ledger is None  # closed, not reused
