"""An outcome's whole story, as the outcome page shows it: attempts with their
folders' files, steps with evidence, the history, and what a human may do.

It reads what ``status`` and ``history`` read, plus the attempt folders; files
are listed without following a link (as nothing below the home is followed).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine import unblock_hint
from ..errors import RetrysafeError
from ..folders import AttemptFolder
from ..keys import step_ref
from ..ledger import AttemptRecord, OutcomeRecord
from ..ledger.records import Event, StepRecord
from ..states import AttemptState, BlockCause, OutcomeState, StepState

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["AttemptView", "FileView", "StepView", "Story", "story"]

PREVIEW_BYTES = 4096
"""How much of a text artifact the page shows."""
CHECKSUM_LIMIT = 64 * 1024 * 1024
"""Files larger than this are listed without a checksum (the page stays fast)."""
_FILES_PER_ATTEMPT = 200


@dataclass(frozen=True)
class FileView:
    name: str
    size: int
    sha256: str | None
    preview: str | None
    """the start of a text file (``None``: binary, or too large to read)"""
    truncated: bool
    recorded: str | None = None
    """the checksum the ledger recorded for this artifact, if it is one"""

    @property
    def matches(self) -> bool | None:
        if self.recorded is None or self.sha256 is None:
            return None
        return self.recorded.removeprefix("sha256:") == self.sha256


@dataclass(frozen=True)
class AttemptView:
    record: AttemptRecord
    folder: Path
    files: list[FileView]
    status: dict[str, Any] | None


@dataclass(frozen=True)
class StepView:
    record: StepRecord
    ref: str
    """the step as the deciding commands name it (``name`` or ``name/item``)"""
    evidence_url: str | None
    can_resolve: bool
    can_approve: bool


@dataclass
class Story:
    outcome: OutcomeRecord
    attempts: list[AttemptView]
    steps: list[StepView]
    history: list[Event]
    unblock: str
    can_retry: bool
    can_break_lease: bool
    live_attempt: AttemptRecord | None = None
    notes: list[str] = field(default_factory=list)


def _evidence_url(evidence: str | None) -> str | None:
    """Evidence that is an address, to link (only ``http(s)``: never ``javascript:``)."""
    if not evidence:
        return None
    text = evidence.strip()
    if text.startswith(("https://", "http://")) and " " not in text:
        return text
    return None


def _file(path: Path, recorded: dict[str, str]) -> FileView | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None  # links, folders, sockets: not followed, not read
    digest: str | None = None
    preview: str | None = None
    truncated = False
    if st.st_size <= CHECKSUM_LIMIT:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return FileView(path.name, st.st_size, None, None, False, recorded.get(path.name))
        with os.fdopen(fd, "rb") as fh:
            h = hashlib.sha256()
            head = b""
            while chunk := fh.read(1 << 20):
                if not head:
                    head = chunk[:PREVIEW_BYTES]
                h.update(chunk)
            digest = h.hexdigest()
        if b"\0" not in head:
            try:
                preview = head.decode("utf-8")
            except UnicodeDecodeError as exc:
                # a multi-byte character cut at the preview's end is still text
                preview = head[:exc.start].decode("utf-8") if exc.start > len(head) - 4 else None
            truncated = st.st_size > PREVIEW_BYTES
    return FileView(path.name, st.st_size, digest, preview, truncated, recorded.get(path.name))


def _attempt_view(engine: Engine, out: OutcomeRecord, attempt: AttemptRecord,
                  recorded: dict[str, str]) -> AttemptView:
    folder = AttemptFolder(engine.home, out.job, out.key, attempt.number).path
    files: list[FileView] = []
    status: dict[str, Any] | None = None
    try:
        names = sorted(os.listdir(folder))[:_FILES_PER_ATTEMPT] if not folder.is_symlink() else []
    except OSError:
        names = []
    for name in names:
        view = _file(folder / name, recorded)
        if view is None:
            continue
        files.append(view)
        if name == "status.json" and view.preview is not None and not view.truncated:
            try:
                status = json.loads(view.preview)
            except ValueError:
                status = None
    return AttemptView(attempt, folder, files, status)


def story(engine: Engine, key: str) -> Story | None:
    """The outcome ``key``'s story, or ``None`` when the ledger has no such outcome."""
    ledger = engine.existing_ledger()
    out = ledger.outcome(key)
    if out is None:
        return None
    attempts = ledger.attempts(key)
    steps = ledger.steps(key)
    recorded = {Path(s.artifact).name: s.checksum for s in steps
                if s.artifact and s.checksum}
    now_active = next((a for a in attempts if a.id == out.current_attempt
                       and a.state == AttemptState.ACTIVE), None)
    views = []
    for s in steps:
        waiting = s.state in (StepState.UNKNOWN, StepState.BLOCKED) or (
            s.state == StepState.RUNNING and now_active is None)
        approvable = (s.state == StepState.BLOCKED and s.cause == BlockCause.APPROVAL) or (
            s.state == StepState.PLANNED and not s.approved_by and s.kind == "effect")
        views.append(StepView(s, step_ref(key, s.name, s.item or None),
                              _evidence_url(s.evidence), waiting, approvable))
    hint = ""
    if out.state == OutcomeState.BLOCKED:
        try:
            hint = unblock_hint(ledger, out)
        except RetrysafeError:
            hint = ""
    return Story(
        outcome=out,
        attempts=[_attempt_view(engine, out, a, recorded) for a in reversed(attempts)],
        steps=views,
        history=ledger.history(key),
        unblock=hint,
        can_retry=out.state == OutcomeState.BLOCKED and out.cause == BlockCause.EXHAUSTED,
        can_break_lease=now_active is not None,
        live_attempt=now_active,
    )
