"""A writer that gives up on a locked SQLite ledger names the process holding the lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from retrysafe.errors import LedgerUnavailable
from retrysafe.ledger import open_ledger
from retrysafe.ledger import sqlite as sqlite_backend

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the system lists no record locks")
def test_a_busy_ledger_names_the_process_holding_its_write_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "ledger.sqlite3"
    open_ledger(f"sqlite:///{db}").close()  # a ledger in WAL mode
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_MS", 300)
        with (open_ledger(f"sqlite:///{db}") as ledger, pytest.raises(LedgerUnavailable) as err,
              ledger.backend.transaction() as tx):
            tx.run("DELETE FROM rs_meta")
        assert f"held by pid {holder.pid} (" in err.value.message
        assert "time.sleep" in err.value.message or sys.executable in err.value.message
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize(("synchronous", "interval"), [("full", 1000), ("normal", 10_000)])
def test_checkpoint_interval_follows_synchronous(tmp_path: Path, synchronous: str,
                                                 interval: int) -> None:
    """At full every commit syncs the log, and a log rewritten in place syncs faster than
    one that grows: SQLite's short default stays. At normal no commit syncs, and a longer
    interval copies each often-rewritten page back fewer times."""
    backend = sqlite_backend.SqliteBackend(tmp_path / "l.sqlite3", synchronous=synchronous)
    try:
        with backend.transaction(write=False) as tx:
            assert tx.rows("PRAGMA wal_autocheckpoint")[0]["wal_autocheckpoint"] == interval
    finally:
        backend.close()


def test_a_new_ledger_has_small_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """A new ledger is created with PAGE_SIZE pages (a commit appends each page it
    changed whole, so small pages write fewer bytes for the same rows); a ledger made
    with SQLite's default 4096 keeps its pages, and is read and written as before."""
    import sqlite3

    with open_ledger(f"sqlite:///{tmp_path / 'new.sqlite3'}") as ledger, \
            ledger.backend.transaction(write=False) as tx:
        assert tx.rows("PRAGMA page_size")[0]["page_size"] == sqlite_backend.PAGE_SIZE == 1024

    old = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE made_before (x INTEGER)")  # the file now has 4096-byte pages
    conn.close()
    with open_ledger(f"sqlite:///{old}") as ledger:
        from retrysafe.ledger import Holder

        claimed = ledger.claim("report:1", job="report", params={"n": "1"},
                               holder=Holder("host-a", 1001, "boot:1"), lease_seconds=60,
                               max_attempts=3)
        with ledger.backend.transaction(write=False) as tx:
            assert tx.rows("PRAGMA page_size")[0]["page_size"] == 4096
            assert tx.rows("PRAGMA quick_check")[0]["quick_check"] == "ok"
        assert claimed.outcome.state == ledger.require_outcome("report:1").state == "running"
