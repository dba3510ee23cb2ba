"""A home knows its ledger: the ledger's identity is written into ``runs/``.

The ledger draws a random identity once (table ``rs_meta``); the home keeps a
copy in ``runs/.ledger-id``. When they disagree, the ledger at hand is not the
one the home's attempt folders were written with: it was deleted and recreated
empty, replaced by another, or the ledger URL points somewhere else. Running on
would repeat every done outcome (and attempt 1 would meet the old
``attempt-1`` folder), so every command that opens the ledger refuses, exit 2,
with what happened and what to do: restore the ledger, point at the right one,
or rebuild it from the folders with ``retrysafe recover``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InvalidInput
from .ledger import Ledger

__all__ = ["MARK", "LedgerMismatch", "check_home", "ledger_identity", "lost_work", "record_identity",
           "recorded_identity",
           "refuse_missing_file"]

MARK = ".ledger-id"
"""The file under ``runs/`` that names the home's ledger."""

_NAME = "identity"


class LedgerMismatch(InvalidInput):
    """The ledger is not the one this home's attempt folders were written with (exit 2)."""


def ledger_identity(ledger: Ledger, *, create: bool = True) -> str | None:
    """The ledger's identity, drawn (once, whoever comes first) when ``create``."""
    query = "SELECT value FROM rs_meta WHERE name = ?"
    with ledger.backend.transaction(write=False) as tx:
        row = tx.one(query, (_NAME,))
    if row is None and create:
        with ledger.backend.transaction() as tx:
            tx.run("INSERT INTO rs_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                   (_NAME, os.urandom(16).hex()))
            row = tx.one(query, (_NAME,))
    return None if row is None else str(row["value"])


def set_identity(ledger: Ledger, identity: str) -> None:
    """Give the ledger ``identity`` (a ledger imported whole keeps its source's)."""
    with ledger.backend.transaction() as tx:
        tx.run("DELETE FROM rs_meta WHERE name = ?", (_NAME,))
        tx.run("INSERT INTO rs_meta (name, value) VALUES (?, ?)", (_NAME, identity))


def _recorded(runs: Path) -> str | None:
    try:
        return (runs / MARK).read_text(encoding="ascii").strip() or None
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None


def recorded_identity(home: Path) -> str | None:
    """The identity of the ledger ``home``'s folders were written with, if recorded."""
    return _recorded(home / "runs")


def record_identity(home: Path, identity: str) -> None:
    """Write ``runs/.ledger-id`` (atomically; ``runs/`` must exist)."""
    from .fsio import atomic_write_bytes

    atomic_write_bytes(home / "runs" / MARK, identity.encode("ascii") + b"\n")


def has_outcome_folders(runs: Path) -> bool:
    """Whether ``runs/`` holds any attempt folder or journal (folders.py), stopping
    at the first one."""
    return (next(runs.glob("*/*/attempt-*"), None) is not None
            or next(runs.glob("*/.journal/*.jsonl"), None) is not None)


def refuse_missing_file(home: Path, path: Path) -> None:
    """Before a SQLite ledger is opened to be written: a file that is missing or holds
    no bytes, in a home whose ``runs/`` were written with a ledger, is refused
    (:class:`LedgerMismatch`) before opening it would create it. Only ``recover``
    makes such a ledger again."""
    try:
        if path.stat().st_size > 0:
            return
        what = "is empty"
    except FileNotFoundError:
        what = "is missing"
    except OSError:
        return  # (opening it says why)
    runs = home / "runs"
    if _recorded(runs) is None and not (runs.is_dir() and has_outcome_folders(runs)):
        return  # a new home: the first run creates its ledger
    raise LedgerMismatch(
        f"the ledger file {path} {what}, but {runs} was written with a ledger (it was "
        "deleted or emptied, or the ledger URL points elsewhere), and running on would "
        "repeat every done outcome: point --ledger/RETRYSAFE_LEDGER at the home's own "
        "ledger, restore it, or rebuild it from the attempt folders with 'retrysafe recover'")


def _is_empty(ledger: Ledger) -> bool:
    with ledger.backend.transaction(write=False) as tx:
        return tx.one("SELECT 1 AS one FROM rs_outcomes LIMIT 1") is None


def check_home(home: Path, ledger: Ledger, url: str, *, write: bool) -> None:
    """Refuse a ledger this home was not written with (:class:`LedgerMismatch`).

    A home without the mark (new, or written before homes recorded it) adopts
    the ledger, unless its folders hold attempts that the ledger knows
    nothing of. Reading commands (``write`` false) never write the mark.
    """
    runs = home / "runs"
    recorded = _recorded(runs)
    identity = ledger_identity(ledger, create=write)
    if recorded is not None and recorded == identity:
        return
    from .ledger.conninfo import mask  # only to name a refused ledger (it imports dataclasses)

    where = mask(url)
    if recorded is not None:
        raise LedgerMismatch(
            f"{runs} was written with another ledger than {where} (it was replaced, or the "
            "ledger URL points elsewhere): point --ledger/RETRYSAFE_LEDGER at the home's own "
            "ledger, restore it, or rebuild it from the attempt folders with 'retrysafe recover'")
    if not runs.is_dir() or not has_outcome_folders(runs):
        if write and identity is not None and runs.is_dir():
            record_identity(home, identity)
        return
    if _is_empty(ledger) and _recorded(runs) != identity:
        # (read again: another process of this ledger may have recorded it since the first
        # read, and then written the folders found, its outcome's claim not yet committed)
        raise LedgerMismatch(
            f"the ledger {where} records no outcome, but {runs} holds attempt folders: it was "
            "deleted, emptied or replaced, and running on would repeat every done outcome; "
            "restore it, or rebuild it from the attempt folders with 'retrysafe recover'")
    if write and identity is not None:
        record_identity(home, identity)


def set_aside_stale_folder(path: Path, attempt_id: str) -> Path | None:
    """An attempt folder that already exists for another attempt (written with a
    ledger that no longer knows it) is never written into: it is renamed
    ``attempt-N.orphan-<its attempt id>`` and kept. Returns the new name, if any."""
    try:
        status = (path / "status.json").read_bytes()
    except FileNotFoundError:
        if not path.exists() or not any(path.iterdir()):
            return None
        status = b""
    except (NotADirectoryError, IsADirectoryError):
        status = b""
    import json

    try:
        owner = json.loads(status).get("attempt_id") if status else None
    except (ValueError, AttributeError):
        owner = None
    if owner == attempt_id:
        return None
    suffix = owner if isinstance(owner, str) and owner.isalnum() else os.urandom(8).hex()
    target = path.with_name(f"{path.name}.orphan-{suffix}")
    while target.exists():
        target = path.with_name(f"{path.name}.orphan-{os.urandom(8).hex()}")
    os.rename(path, target)
    return target


def _shows_work(folder: Path) -> bool:
    """Does an attempt folder show more than a claim: a state past ``running``, or a
    logged action after ``begin`` (an intent, a record, a lookup, a generation)?"""
    import json

    try:
        status = json.loads((folder / "status.json").read_bytes())
        if isinstance(status, dict) and status.get("state") not in (None, "running"):
            return True
    except (OSError, ValueError):
        pass
    try:
        with open(folder / "log.jsonl", "rb") as fh:
            for line in fh:
                try:
                    action = json.loads(line).get("action")
                except (ValueError, AttributeError):
                    continue
                if action not in (None, "begin"):
                    return True
    except OSError:
        pass
    return False


def lost_work(outcome_dir: str | Path, known_attempts: int) -> str | None:
    """The first attempt folder of an outcome that shows work (:func:`_shows_work`)
    although the ledger knows fewer attempts of it: the ledger lost records this home
    holds (an older copy of it was put back, its ``-wal`` file was deleted after a
    crash). Running on would repeat that work, so the caller refuses. A folder a
    lost claim left (a power cut takes an unsynced claim, which started nothing)
    shows no work and is set aside as before (:func:`set_aside_stale_folder`)."""
    try:
        names = os.listdir(outcome_dir)
    except OSError:  # no folder (the common case: one failed stat)
        return None
    for name in sorted(names):
        number = name.removeprefix("attempt-")
        if (number == name or not (number.isascii() and number.isdigit())
                or int(number) <= known_attempts):
            continue
        if _shows_work(Path(outcome_dir, name)):
            return name
    return None


TEMP_AGE = 60.0
"""Seconds after which a temporary file of an atomic write is a leftover, not work in progress."""


def remove_temp_leftovers(outcome_dir: Path, now: float | None = None) -> int:
    """Remove the temporary files a killed writer left in an outcome's folders
    (``.NAME.XXXX.tmp``, older than :data:`TEMP_AGE`): the file they were for is
    whole or absent either way. Returns how many were removed."""
    import time

    cutoff = (time.time() if now is None else now) - TEMP_AGE
    removed = 0
    try:
        folders = [outcome_dir, *(p for p in outcome_dir.iterdir()
                                  if p.name.startswith("attempt-") and not p.is_symlink())]
    except OSError:
        return 0
    for folder in folders:
        try:
            leftovers = [p for p in folder.glob(".*.tmp") if p.is_file() and not p.is_symlink()]
        except OSError:
            continue
        for path in leftovers:
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
    return removed
