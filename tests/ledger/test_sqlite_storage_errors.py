"""A SQLite ledger whose disk fills up or fails: one clear error that says which.

A full disk is real (a size-limited tmpfs in a private mount namespace, as the
resource chaos tests use); a failing disk cannot be made on demand, so its error
is built as SQLite raises it (the extended code and its name) and judged by the
same translation."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from retrysafe.errors import LedgerError, StorageFull
from retrysafe.ledger import open_ledger
from retrysafe.ledger import sqlite as sqlite_backend


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True,
                          check=False).returncode == 0


FILL = textwrap.dedent("""
    import sys
    from retrysafe.errors import RetrysafeError
    from retrysafe.ledger import Holder, open_ledger
    ledger = open_ledger(f"sqlite:///{sys.argv[1]}")
    holder = Holder("host", 1, "boot:1")
    try:
        for n in range(100000):
            ledger.claim(f"job:{n}:" + "x" * 400, job="job", params={}, holder=holder,
                         lease_seconds=60, max_attempts=3, liveness=lambda a, r: (None, ""))
    except RetrysafeError as exc:
        print(type(exc).__name__, exc.exit_code, exc.message)
        print("claimed", n)
""")


@pytest.mark.skipif(not _can_unshare(), reason="needs 'unshare -m' and mount privileges")
def test_a_full_disk_says_free_some_space_and_keeps_what_was_committed(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    db = disk / "ledger.sqlite3"
    script = tmp_path / "fill.py"
    script.write_text(FILL)
    # the ledger is copied out before the namespace (and its tmpfs) goes away
    copy = tmp_path / "kept.sqlite3"
    shell = (f"mount -t tmpfs -o size=512k tmpfs '{disk}' && "
             f"'{sys.executable}' '{script}' '{db}'; "
             f"'{sys.executable}' -c \"import sqlite3; sqlite3.connect('{db}')"
             f".backup(sqlite3.connect('{copy}'))\"")
    done = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True,
                          text=True, timeout=300, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    first, claimed = done.stdout.splitlines()[:2]
    name, code, message = first.split(" ", 2)
    assert name == "StorageFull" and code == str(StorageFull.exit_code), first
    assert message.startswith(f"ledger {db}: ") and message.endswith(
        "free some space and run again"), message
    # every claim before the full disk is there, and the ledger is whole
    n = int(claimed.removeprefix("claimed "))
    assert n > 10
    with open_ledger(f"sqlite:///{copy}") as ledger:
        assert len(ledger.outcomes(job="job", limit=100000)) == n
    check = sqlite3.connect(copy)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _ioerr() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = sqlite3.SQLITE_IOERR | (3 << 8)  # type: ignore[attr-defined]
    exc.sqlite_errorname = "SQLITE_IOERR_WRITE"  # type: ignore[attr-defined]
    return exc


def test_an_io_error_with_space_left_is_not_called_a_full_disk(tmp_path: Path) -> None:
    """A disk I/O error is a failing disk or file system unless the disk is (nearly) full:
    then it is the full disk it most likely is."""
    with open_ledger(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        backend = ledger.backend
        assert isinstance(backend, sqlite_backend.SqliteBackend)
        err = backend._translate(_ioerr())
        assert type(err) is LedgerError and "free some space" not in err.message
        assert "(SQLITE_IOERR_WRITE): the disk or the file system failed" in err.message
        assert err.message.endswith("check the ledger: retrysafe doctor")
        full = sqlite3.OperationalError("database or disk is full")
        full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
        assert isinstance(backend._translate(full), StorageFull)


def test_an_io_error_on_a_nearly_full_disk_is_a_full_disk(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_backend, "_free_bytes", lambda _p: 8192)
    with open_ledger(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        err = ledger.backend._translate(_ioerr())  # type: ignore[attr-defined]
        assert isinstance(err, StorageFull)
        assert "with 8 KiB free; free some space and run again" in err.message
