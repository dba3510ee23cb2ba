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
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import HomeNotWritable
from .fsio import JsonlAppender, atomic_write_json, json_members, json_string, private_dirs
from .keys import check_name, slug

__all__ = ["AttemptFolder", "outcome_dir"]


def outcome_dir(home: Path, job: str, key: str) -> Path:
    runs = (home / "runs").absolute()
    path = runs / check_name("job", job) / slug(key)
    # slug() cannot produce separators or dot-dot; this is the belt to its braces.
    if runs not in path.parents:
        raise HomeNotWritable(f"outcome key {key!r} would leave {runs}")
    return path


class AttemptFolder:
    def __init__(self, home: Path, job: str, key: str, number: int) -> None:
        self.outcome_dir = outcome_dir(home, job, key)
        self.path = self.outcome_dir / f"attempt-{number}"
        self.key = key
        self.job = job
        self.number = number
        self._log = JsonlAppender(self.path / "log.jsonl")
        self._base = self.outcome_dir.parent.parent.parent  # the home, as given
        self._parts = ("runs", self.outcome_dir.parent.name, self.outcome_dir.name, self.path.name)
        self._checked = 0  # how many of _parts are known to be real folders

    def create(self) -> None:
        """Make the attempt folder (and those above it, ``0700``), refusing links."""
        try:
            private_dirs(self._base, self._parts)
        except OSError as exc:
            raise HomeNotWritable(f"attempt folder {self.path} cannot be created: "
                                  f"{exc.strerror or exc}") from None
        self._checked = len(self._parts)

    def _check(self, depth: int) -> None:
        """Once per folder object: the first ``depth`` folders are real, not links."""
        if self._checked < depth:
            private_dirs(self._base, self._parts[:depth], create=False)
            self._checked = depth

    def write_status(self, attempt_id: str, state: str, **extra: Any) -> None:
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
        if self._checked < 4:
            self._check(4)
        self._log.append_members(members, sync=sync)

    def open_log(self) -> None:
        """Open the log now (checking the folders, refusing a link), so that a
        caller can be refused before it records anything."""
        self._check(4)
        self._log.open()

    def close(self) -> None:
        """Close the log (the next :meth:`log` opens it again)."""
        self._log.close()

    def write_summary(self, state: str, accepted: str | None, reason: str,
                      steps: Mapping[str, Any]) -> None:
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
