"""Who holds a SQLite ledger's write lock, where the system can tell.

A process frozen in a write transaction (stopped, swapped out, stuck in a
hook) makes every other writer wait for the busy timeout and then give up.
"The database is locked" does not say whom to look at; this does. In WAL
mode the write lock is a POSIX record lock on byte 120 of the ``-shm`` file
(in rollback mode, the RESERVED byte of the database file); Linux lists
every such lock, with its process, in ``/proc/locks``. Elsewhere the answer
is simply not given.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["holder_text", "write_lock_holder"]

_WAL_WRITE_LOCK = 120  # the first lock slot of the shared-memory index
_RESERVED_BYTE = 0x40000001  # PENDING_BYTE + 1, in the database file itself


def _inode(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def _describe(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"pid {pid}"
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    text = " ".join(words)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"pid {pid} ({text})" if text else f"pid {pid}"


def write_lock_holder(db: Path) -> int | None:
    """The pid holding ``db``'s write lock, when ``/proc/locks`` says."""
    wanted: dict[tuple[int, int, int], int] = {}
    for path, offset in ((Path(f"{db}-shm"), _WAL_WRITE_LOCK), (db, _RESERVED_BYTE)):
        ident = _inode(path)
        if ident is not None:
            wanted[ident] = offset
    if not wanted:
        return None
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END
        if len(fields) < 8 or fields[1] != "POSIX" or fields[3] != "WRITE":
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            ident = (int(major, 16), int(minor, 16), int(inode))
            start = int(fields[6])
            end = int(fields[7]) if fields[7] != "EOF" else None
        except ValueError:
            continue
        at = wanted.get(ident)
        if at is not None and start <= at and (end is None or at <= end) and pid > 0:
            return pid
    return None


def holder_text(db: Path) -> str:
    """``"; the write lock is held by pid N (its command)"`` or ``""``."""
    pid = write_lock_holder(db)
    if pid is None or pid == os.getpid():
        return ""
    return f"; the write lock is held by {_describe(pid)}"
