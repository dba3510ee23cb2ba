"""Operating a home: what waits for a human, and pruning old outcomes with their folders.

The ledger decides (:class:`retrysafe.ledger.retention.Retention`); this adds
what a person needs around it: the command that settles each waiting outcome
(:func:`retrysafe.engine.settle_hint`),
the jobs' ``keep`` settings, and the ``runs/`` folders of pruned outcomes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InvalidInput
from .keys import step_ref

if TYPE_CHECKING:
    from .engine import Engine
    from .ledger.listing import Cursor
    from .ledger.retention import OnBatch, Waiting

__all__ = ["Attention", "Pruned", "attention_page", "iso", "needs_attention", "prune"]


def iso(ts: float | None) -> str | None:
    """A time in JSON: ISO 8601, UTC."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Attention:
    """An outcome that waits for a human: why, and the command that settles it."""

    key: str
    job: str
    state: str
    cause: str
    reason: str
    since: float
    unblock: str
    steps: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "job": self.job, "state": self.state, "cause": self.cause,
                "reason": self.reason, "since": iso(self.since), "unblock": self.unblock,
                "steps": self.steps}


def needs_attention(engine: Engine, *, drills: bool = False, limit: int | None = None
                    ) -> list[Attention]:
    """Every outcome that waits for a human, oldest first (see :meth:`Retention.needs_attention`);
    with ``limit``, the oldest ``limit`` of them."""
    if limit is not None:
        return attention_page(engine, drills=drills, limit=limit)[0]
    items: list[Attention] = []
    after: Cursor | None = None
    while True:
        page, after = attention_page(engine, drills=drills, after=after, limit=500)
        items += page
        if after is None:
            return items


def attention_page(engine: Engine, *, drills: bool = False, after: Cursor | None = None,
                   limit: int = 50) -> tuple[list[Attention], Cursor | None]:
    """A page of :func:`needs_attention` after ``after`` (:meth:`Retention.attention_page`),
    and the cursor of the next page (``None``: this is the last)."""
    page = engine.existing_ledger().retention.attention_page(after=after, limit=limit,
                                                             drills=drills)
    return [_attention(w) for w in page.waiting], page.next


def _attention(waiting: Waiting) -> Attention:
    """What a person needs about a waiting outcome, from its record and its waiting steps."""
    out = waiting.outcome
    steps = [{"step": step_ref(out.key, s.name, s.item), "state": s.state, "cause": s.cause,
              "reason": s.reason} for s in waiting.steps]
    from .engine import settle_hint

    # the waiting steps hold every blocked, unknown and running one, in the ledger's order
    hint = settle_hint(out, waiting.steps)
    return Attention(out.key, out.job, out.state, out.cause, out.reason, out.updated_at,
                     hint, steps)


@dataclass
class Pruned:
    """What a prune removed (or would remove)."""

    outcomes: int = 0
    attempts: int = 0
    steps: int = 0
    events: int = 0
    folders: int = 0
    journals: int = 0
    """journal files (folders.py) none of whose outcomes is left"""
    kept_folders: list[str] = field(default_factory=list)
    """folders that could not be removed (a link, a permission): named, left alone"""
    keys: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"outcomes": self.outcomes, "attempts": self.attempts, "steps": self.steps,
                "history": self.events, "folders": self.folders, "journals": self.journals,
                "kept_folders": self.kept_folders, "keys": self.keys}


def prune(engine: Engine, *, older_than: str | None, states: Sequence[str] = (),
          job: str | None = None, drills: bool = False, dry_run: bool = False,
          export: Path | None = None) -> Pruned:
    """Prune the ledger (:meth:`Retention.prune`) and the pruned outcomes' ``runs/`` folders.

    Without ``older_than`` each job keeps its outcomes for its ``keep`` (jobs
    without one are left alone), unless ``drills``, which then removes every
    drill trial. ``export`` appends the removed rows, before they are removed,
    as ``retrysafe export`` writes them (so ``retrysafe import --merge`` brings
    them back).
    """
    from .ages import parse_age
    from .ledger.transfer import TABLES, header, open_private, write_lines

    age = parse_age(older_than, "--older-than") if older_than is not None else None
    keep = {name: j.keep for name, j in engine.config.jobs.items() if j.keep is not None}
    if job is not None:
        engine.config.job(job)  # an unknown job is refused, not silently matched by nothing
        keep = {k: v for k, v in keep.items() if k == job}
    if age is None and not keep and not drills:
        raise InvalidInput("nothing says what is old: give --older-than AGE (e.g. 90d), or set "
                           "keep = \"90d\" in a job's [jobs.NAME] table")
    ledger = engine.existing_ledger()
    on_batch: OnBatch | None = None
    fh = None
    if export is not None and not dry_run:
        try:
            fh = open_private(export, append=True)
        except OSError as exc:
            raise InvalidInput(f"cannot write {export}: {exc.strerror or exc}") from None
        opened = fh

        def on_batch(rows: dict[str, list[dict[str, Any]]]) -> None:
            import os

            # each batch counts its rows, so a file cut short at a line end is refused
            counts = {t: len(rows.get(t, ())) for t in TABLES}
            write_lines(opened, [header(ledger, counts)] + [{"table": t, "row": r}
                                                             for t, rs in rows.items() for r in rs])
            opened.flush()
            os.fsync(opened.fileno())

    try:
        result = ledger.retention.prune(older_than=age, keep=keep, states=states, job=job, drills=drills,
                              dry_run=dry_run, on_batch=on_batch)
    finally:
        if fh is not None:
            fh.close()
    c = result.counts
    pruned = Pruned(outcomes=c["rs_outcomes"], attempts=c["rs_attempts"], steps=c["rs_steps"],
                    events=c["rs_events"], keys=[k for _, k in result.outcomes])
    for job_name, key in result.outcomes:
        _remove_folder(engine.home, job_name, key, pruned, dry_run)
    if not dry_run:
        for job_name in sorted({j for j, _ in result.outcomes}):
            pruned.journals += _remove_journals(engine, job_name)
    return pruned


def _remove_journals(engine: Engine, job: str) -> int:
    """Remove the job's journal files (folders.py) whose every outcome has left the
    ledger: a file that names one kept outcome stays whole. Returns how many went."""
    from .folders import journal_dir

    folder = journal_dir(engine.home, job)
    if folder.is_symlink() or folder.parent.is_symlink() or not folder.is_dir():
        return 0
    removed = 0
    ledger = engine.ledger
    # today's and yesterday's files (UTC) stay: a running worker may still append to them
    recent = datetime.fromtimestamp(time.time() - 86400, UTC).strftime("%Y-%m-%d")
    for path in sorted(folder.glob("*.jsonl")):
        if path.is_symlink() or path.stem >= recent:
            continue
        keys: set[str] = set()
        try:
            with path.open("rb") as fh:
                for line in fh:
                    with contextlib.suppress(ValueError, AttributeError):
                        keys.add(json.loads(line).get("outcome_key"))
        except OSError:
            continue
        if any(ledger.outcome(k) is not None for k in sorted(k for k in keys if isinstance(k, str))):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed


def _remove_folder(home: Path, job: str, key: str, pruned: Pruned, dry_run: bool) -> None:
    """The outcome's ``runs/`` folder, removed unless a link is on the way (never followed)."""
    from .folders import outcome_dir

    try:
        path = outcome_dir(home, job, key)
    except InvalidInput:
        return
    runs = path.parent.parent
    if any(p.is_symlink() for p in (runs, path.parent, path)):
        pruned.kept_folders.append(str(path))
        return
    if not path.is_dir():
        return
    if dry_run:
        pruned.folders += 1
        return
    try:
        shutil.rmtree(path)
    except OSError:
        pruned.kept_folders.append(str(path))
        return
    pruned.folders += 1
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the job's folder, once its last outcome is gone
