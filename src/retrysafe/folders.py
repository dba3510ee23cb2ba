"""The local record of attempts: ``<home>/runs/<job>/<outcome slug>/attempt-N/``.

Each attempt writes only inside its own folder (``status.json``, ``log.jsonl``,
artifacts); the outcome folder's ``summary.json`` points at the accepted
attempt. The ledger is the source of truth; these files are what a person
opens first, derived from it: each is replaced whole (a reader sees the old
file or the new one, never a mix) but not synced on its own, because the
ledger's commits are the durable record. After a power cut a file may be
empty or show an older state; the outcome's next attempt rewrites its earlier
attempts' ``status.json`` from the ledger (``Engine._repair_folders``) and
every close-out rewrites ``summary.json``. The terminal status is still
written before the summary, so a process crash between them leaves the
status right and the summary old, never the other way round.

Nothing below the home is followed through a symbolic link: the folders are
checked once (made ``0700`` when created), the log is opened without
following a link, and ``status.json``/``summary.json`` refuse one
(:class:`~retrysafe.errors.UnsafePath`, exit 2).

Folders on demand. An attempt of the Python API (:func:`retrysafe.start`) gets
its folder only when something needs a place on disk: a generated artifact,
``run.dir``, a command's environment, the job's acceptance checks. Until then
its log lines go to the job's journal, ``runs/<job>/.journal/<UTC day>.jsonl``
(one line per action, each naming its outcome and attempt, appended with
``O_APPEND`` by every process of the job), and it writes no ``status.json``: the
ledger says the same. So an outcome with one effect and no file costs a line
or three in a shared file instead of two folders and three files, and no
folder holds one entry per outcome. ``retrysafe recover`` reads the journals
as well as the folders. A slug never starts with ``.``, so ``.journal`` is
never an outcome's folder.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import HomeNotWritable
from .fsio import (
    JsonlAppender,
    atomic_write_json,
    fsync_dir,
    json_members,
    json_string,
    private_dirs,
)
from .keys import check_name, slug

__all__ = ["JOURNAL", "AttemptFolder", "append_journal", "close_journals", "journal_day",
           "journal_dir", "outcome_dir"]

JOURNAL = ".journal"
"""The folder of a job's journal, beside its outcomes' folders."""


def outcome_dir(home: Path, job: str, key: str) -> Path:
    name = slug(key)
    # slug() cannot produce separators or dot-dot; this is the belt to its braces.
    if not name or "/" in name or name.startswith("."):
        raise HomeNotWritable(f"outcome key {key!r} would leave {home / 'runs'}")
    return (home / "runs").absolute() / check_name("job", job) / name


def journal_dir(home: Path, job: str) -> Path:
    return (home / "runs").absolute() / check_name("job", job) / JOURNAL


def journal_day() -> str:
    """The name (less ``.jsonl``) of the journal file lines go to now: the UTC day."""
    return time.strftime("%Y-%m-%d", time.gmtime())


def append_journal(home: Path, job: str,
                   lines: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Append lines (each naming its outcome) to the job's journal files, by file name
    less ``.jsonl`` (a UTC day), each file synced once, then the folder: for lines that
    must outlast a power cut on their own (a prune's, housekeeping.py), where an
    attempt's lines rely on the ledger's commits."""
    folder = journal_dir(home, job)
    private_dirs(folder.parent.parent.parent, ("runs", folder.parent.name, JOURNAL))
    for day, some in sorted(lines.items()):
        path = folder / f"{day}.jsonl"
        with JsonlAppender(path) as log:
            size = os.fstat(log.open().fileno()).st_size
            if size and _last_byte(path, size) != b"\n":
                log.open().write(b"\n")  # a torn last line (a power cut) stays apart
            for i, line in enumerate(some):
                log.append_members(json_members(line), sync=i == len(some) - 1)
    fsync_dir(folder)


def _last_byte(path: Path, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.pread(fd, 1, size - 1)
    finally:
        os.close(fd)


# One journal file per job and UTC day, kept open by the process that appends to it
# (a worker handling many outcomes opens it once a day); never shared across fork.
_JOURNALS: dict[tuple[int, Path, str], tuple[str, JsonlAppender]] = {}
_JOURNALS_KEPT = 16


def _journal(home: Path, job: str) -> JsonlAppender:
    day = journal_day()
    key = (os.getpid(), home, job)
    kept = _JOURNALS.get(key)
    if kept is not None and kept[0] == day and _still_linked(kept[1]):
        return kept[1]
    for stale in [k for k in _JOURNALS if k[0] != key[0] or k == key]:
        _, old = _JOURNALS.pop(stale)  # yesterday's file of this job, or another process's
        if stale[0] == key[0]:
            old.close()
    while len(_JOURNALS) >= _JOURNALS_KEPT:
        _JOURNALS.pop(next(iter(_JOURNALS)))[1].close()
    folder = journal_dir(home, job)
    private_dirs(folder.parent.parent.parent, ("runs", folder.parent.name, JOURNAL))
    log = JsonlAppender(folder / f"{day}.jsonl")
    _JOURNALS[key] = (day, log)
    return log


def _still_linked(log: JsonlAppender) -> bool:
    """Is the open journal still the file its name shows (not removed since)?"""
    fh = log._fh
    if fh is None:
        return True  # opened again, by name, on the next line
    try:
        return os.fstat(fh.fileno()).st_nlink > 0
    except OSError:
        return False


def close_journals() -> None:
    """Close the journal files this process keeps open (``engine.close_all``)."""
    for _, log in _JOURNALS.values():
        log.close()
    _JOURNALS.clear()


class AttemptFolder:
    def __init__(self, home: Path, job: str, key: str, number: int, *,
                 on_demand: bool = False) -> None:
        # the folder's paths are worked out when first needed: an attempt that only
        # journals (on demand) never needs them
        self._home = home
        self.key = key
        self.job = job
        self.number = number
        self._base = (home / "runs").absolute().parent  # the home, as given
        self._checked = 0  # how many of _parts are known to be real folders
        #: lines written to the journal before the folder was made (on demand only)
        self._early: list[str] | None = [] if on_demand else None
        self._attempt_id = ""
        self._status: dict[str, Any] = {}  # what status.json says once it is made
        self._journal: JsonlAppender | None = None  # the file this attempt journals to

    @functools.cached_property
    def outcome_dir(self) -> Path:
        return outcome_dir(self._home, self.job, self.key)

    @functools.cached_property
    def path(self) -> Path:
        return self.outcome_dir / f"attempt-{self.number}"

    @functools.cached_property
    def _log(self) -> JsonlAppender:
        return JsonlAppender(self.path / "log.jsonl")

    @functools.cached_property
    def _parts(self) -> tuple[str, ...]:
        return ("runs", self.outcome_dir.parent.name, self.outcome_dir.name, self.path.name)

    def create(self) -> None:
        """Make the attempt folder (and those above it, ``0700``), refusing links."""
        try:
            private_dirs(self._base, self._parts)
        except OSError as exc:
            raise HomeNotWritable(f"attempt folder {self.path} cannot be created: "
                                  f"{exc.strerror or exc}") from None
        self._checked = len(self._parts)

    def ensure(self) -> Path:
        """The folder of an attempt made on demand, made now if it is not yet: an
        old folder of the same number is set aside first (identity.py), then the
        attempt's status and the lines it journaled so far are written into it."""
        early = self._early
        if early is not None:
            from .identity import set_aside_stale_folder

            if self._attempt_id:
                set_aside_stale_folder(self.path, self._attempt_id)
            self.create()
            self._early = None
            if self._attempt_id:
                self.write_status(self._attempt_id, **{"state": "running", **self._status})
            for members in early:
                self._log.append_members(members)
        return self.path

    def _check(self, depth: int) -> None:
        """Once per folder object: the first ``depth`` folders are real, not links."""
        if self._checked < depth:
            private_dirs(self._base, self._parts[:depth], create=False)
            self._checked = depth

    def write_status(self, attempt_id: str, state: str, **extra: Any) -> None:
        if self._early is not None:  # no folder yet: the ledger says it; kept for ensure()
            self._attempt_id, self._status = attempt_id, {"state": state, **extra}
            return
        self._check(4)
        atomic_write_json(self.path / "status.json", refuse_link=True, durable=False, obj={
            "outcome_key": self.key,
            "job": self.job,
            "attempt": self.number,
            "attempt_id": attempt_id,
            "state": state,
            "updated_at": time.time(),
            **extra,
        })

    def stale_status(self, attempt_id: str, state: str) -> bool:
        """Is ``status.json`` torn (empty, not JSON) or does it show another state of
        ``attempt_id``? A missing file, or one naming another attempt, is not stale."""
        import json

        try:
            raw = (self.path / "status.json").read_bytes()
        except FileNotFoundError:
            return False
        try:
            data = json.loads(raw)
        except ValueError:
            return True
        if not isinstance(data, dict):
            return True
        return data.get("attempt_id") == attempt_id and data.get("state") != state

    def log(self, attempt_id: str, step_key: str, action: str, result: str,
            *, sync: bool = False, **extra: Any) -> None:
        """One line per action; ``sync`` flushes the whole log to disk (close-out).

        The log stays open until :meth:`close`, so an action costs one write.
        """
        members = (f'"time": {time.time()!r}, "attempt_id": {json_string(attempt_id)}, '
                   f'"step_key": {json_string(step_key)}, "action": {json_string(action)}, '
                   f'"result": {json_string(result)}')
        if extra:
            members += ", " + json_members(extra)
        early = self._early
        if early is not None:
            self._attempt_id = attempt_id
            early.append(members)
            if self._journal is None or self._journal._fh is None:
                self._journal = _journal(self._base, self.job)
            self._journal.append_members(
                f'"outcome_key": {json_string(self.key)}, "job": {json_string(self.job)}, '
                f'"attempt": {self.number}, {members}', sync=sync)
            return
        if self._checked < 4:
            self._check(4)
        self._log.append_members(members, sync=sync)

    def open_log(self) -> None:
        """Open the log now (checking the folders, refusing a link), so that a
        caller can be refused before it records anything."""
        if self._early is not None:
            return
        self._check(4)
        self._log.open()

    def close(self) -> None:
        """Close the log (the next :meth:`log` opens it again)."""
        if "_log" in self.__dict__:  # (never opened: nothing to close)
            self._log.close()

    @property
    def summarized(self) -> bool:
        """Will :meth:`write_summary` write a ``summary.json``? Not while no attempt of
        the outcome has a folder: its summary is then the ledger's."""
        return self._early is None or (self.number > 1 and self.outcome_dir.is_dir())

    def write_summary(self, state: str, accepted: str | None, reason: str,
                      steps: Mapping[str, Any]) -> None:
        if not self.summarized:
            return  # no attempt of the outcome has a folder: its summary is the ledger's
        self._check(3)
        atomic_write_json(self.outcome_dir / "summary.json", refuse_link=True, durable=False,
                          obj={
            "outcome_key": self.key,
            "job": self.job,
            "state": state,
            "reason": reason,
            "accepted_attempt": accepted,
            "latest_attempt": f"attempt-{self.number}",
            "steps": dict(steps),
            "updated_at": time.time(),
        })
