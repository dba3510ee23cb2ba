"""Operating a home: what waits for a human, and pruning old outcomes with their folders.

The ledger decides (:class:`retrysafe.ledger.retention.Retention`); this adds
what a person needs around it: the command that settles each waiting outcome
(:func:`retrysafe.engine.settle_hint`),
the jobs' ``keep`` settings, and the ``runs/`` folders of pruned outcomes.

A pruned outcome's folder is set aside before the batch that removes its rows
commits: a file naming the batch's outcomes (``<batch>.json``) is written and
synced in ``runs/<job>/.journal/pruning/``, the folders are moved into
``<batch>/`` beside it, and the moves are synced; then the batch commits and the
folders are removed. Killed after the commit, a prune leaves no folder where a
new outcome of the same key looks (one there would show work the ledger does not
know, and stop that run); killed before it, the outcomes stay in the ledger.
Either way the next prune finishes first: with the outcomes' rows locked, it puts
back the folders of those the ledger still holds (the same outcomes: made at the
same time), removes the rest, and then the job's old journals, as the killed
prune would have. A dry run says which it would put back and which remove.

The marker is written before the commit and says nothing of it: only the ledger
tells the two cases apart. Without it (``retrysafe recover`` of a lost ledger) a
set-aside folder may be an outcome pruned on purpose, so it is reported
(:func:`set_aside`), never read as an outcome.

An outcome's attempts without a folder (folders.py) leave lines in its job's journal,
and a journal file goes only once none of its outcomes is left: today's, yesterday's
and one that names a kept outcome keep a pruned outcome's lines. So before a batch
commits, a ``pruned`` line (:func:`pruned_line`) is appended for each of its outcomes
that the journal names, to the last file that names it (read after its lines, and gone
with them when that file goes), each file synced once per batch. ``recover`` forgets a
key's lines before that line: a pruned key is not rebuilt, and a key run again after
its prune is rebuilt from its newer lines alone. A file that holds such a line stays
while an older file that stays holds lines of its key. A prune killed before its commit
has written them too: its outcomes, still in the ledger, go with the next prune, and a
recover of a lost ledger before that forgets them as well, as they were being pruned
(one whose folder a person moves back out of ``pruning/`` keeps its lines).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InvalidInput
from .keys import step_ref

if TYPE_CHECKING:
    from .engine import Engine
    from .ledger.listing import Cursor
    from .ledger.retention import OnBatch, Pruning, Waiting

__all__ = ["PRUNED", "Attention", "Pruned", "SetAside", "attention_page", "iso",
           "needs_attention", "prune", "pruned_line", "set_aside"]

PRUNED = "pruned"
"""The action of the journal line a prune writes for each outcome it removes whose
lines the job's journal holds (see the module's docstring)."""


def pruned_line(rec: dict[str, Any]) -> bool:
    """Whether a journal line (folders.py) is one a prune wrote: its outcome
    (``outcome_key``) was pruned, and every earlier line of the key is of that outcome."""
    return rec.get("action") == PRUNED and "attempt_id" not in rec


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
    set_aside_removed: list[str] = field(default_factory=list)
    """folders a killed prune set aside whose outcomes the ledger no longer holds: removed
    (a dry run: would be), and counted in ``folders``"""
    set_aside_put_back: list[str] = field(default_factory=list)
    """folders a prune killed before its commit set aside, whose outcomes the ledger still
    holds: put back (a dry run: would be) as those outcomes' folders"""

    def to_json(self) -> dict[str, Any]:
        return {"outcomes": self.outcomes, "attempts": self.attempts, "steps": self.steps,
                "history": self.events, "folders": self.folders, "journals": self.journals,
                "kept_folders": self.kept_folders, "keys": self.keys,
                "set_aside": {"removed": self.set_aside_removed,
                              "put_back": self.set_aside_put_back}}


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
    if age is not None and age <= 0:
        # everything would be old: an outcome done a moment ago would be forgotten, and
        # a retry of it would do its work again
        raise InvalidInput(f"--older-than {older_than!r} must be longer than zero (it would "
                           "prune outcomes finished a moment ago)")
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

    pruned = Pruned()
    aside = None if dry_run else _SetAside(engine, pruned)
    put_back = _plan_earlier(engine, pruned) if dry_run else set()
    try:
        if aside is not None:
            aside.finish_earlier()  # what a prune killed part-way left
        result = ledger.retention.prune(older_than=age, keep=keep, states=states, job=job, drills=drills,
                              dry_run=dry_run, on_batch=on_batch, hooks=aside)
    finally:
        if fh is not None:
            fh.close()
    c = result.counts
    pruned.outcomes, pruned.attempts, pruned.steps, pruned.events = (
        c["rs_outcomes"], c["rs_attempts"], c["rs_steps"], c["rs_events"])
    pruned.keys = [k for _, k in result.outcomes]
    if aside is None:
        for job_name, key in result.outcomes:
            counted = pruned.folders
            _remove_folder(engine.home, job_name, key, pruned, dry_run)
            if pruned.folders == counted and (job_name, key) in put_back:
                pruned.folders += 1  # set aside now: put back first, then pruned with it
    else:
        for job_name in sorted(aside.jobs | {j for j, _ in result.outcomes}):
            pruned.journals += _remove_journals(engine, job_name)
        aside.close()
    return pruned


_AREA = "pruning"
"""The folder, in a job's journal folder (folders.py), that holds what a prune sets
aside: ``recover`` and the lost-work check look for outcomes elsewhere."""


@dataclass
class _Marker:
    """A batch's folders of one job, set aside (``<token>/``), and the synced file that
    names their outcomes (``<token>.json``)."""

    job: str
    area: Path
    token: str
    made_journal: bool
    """the job's journal folder was made for this (removed with the area, when empty)"""
    outcomes: list[tuple[str, float, str]]
    """(key, created_at, folder name) of each outcome whose folder was set aside"""

    @property
    def file(self) -> Path:
        return self.area / f"{self.token}.json"

    @property
    def aside(self) -> Path:
        return self.area / self.token

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "made_journal": self.made_journal,
                "outcomes": [{"key": k, "created_at": c, "folder": f} for k, c, f in self.outcomes]}

    @classmethod
    def read(cls, file: Path) -> _Marker | None:
        """The marker ``file`` names, if it is one a prune wrote (else ``None``: left alone)."""
        from .keys import check_name, slug

        token = file.name.removesuffix(".json")
        try:
            data = json.loads(file.read_bytes())
            job, made = data["job"], data["made_journal"]
            outcomes = [(o["key"], o["created_at"], o["folder"]) for o in data["outcomes"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if (not (token.isascii() and token.isalnum()) or job != file.parent.parent.parent.name
                or not isinstance(made, bool)
                or not all(isinstance(k, str) and isinstance(c, float) and f == slug(k)
                           for k, c, f in outcomes)):
            return None
        try:
            check_name("job", job)
        except InvalidInput:
            return None
        return cls(job, file.parent, token, made, outcomes)

    def children(self) -> list[Path] | None:
        """What is set aside in it now (``None``: its folder cannot be read)."""
        if self.aside.is_symlink() or not self.aside.is_dir():
            return []
        try:
            return sorted(self.aside.iterdir())
        except OSError:
            return None

    def named(self, child: Path) -> tuple[str, float] | None:
        """The outcome (key, created_at) whose folder ``child`` is, if the marker names it
        (one another prune took to remove, ``NAME.removing-…``, included)."""
        name = child.name.split(".removing-")[0]
        return next(((k, c) for k, c, f in self.outcomes if f == name), None)


def _markers(base: Path) -> Iterator[_Marker]:
    """The markers prunes left in ``base/runs/*/.journal/pruning/``, oldest name first;
    one behind a link, or not one a prune wrote, is passed over (never followed)."""
    from .folders import JOURNAL
    from .fsio import private_dirs

    runs = base / "runs"
    if runs.is_symlink() or not runs.is_dir():
        return
    for file in sorted(runs.glob(f"*/{JOURNAL}/{_AREA}/*.json")):
        job = file.parent.parent.parent.name
        try:
            private_dirs(base, ("runs", job, JOURNAL, _AREA), create=False)
        except (OSError, InvalidInput):
            continue  # a link on the way: never followed
        marker = None if file.is_symlink() else _Marker.read(file)
        if marker is not None:
            yield marker


@dataclass(frozen=True)
class SetAside:
    """A folder a prune set aside and did not finish with (it was killed, or could not
    remove it): the outcome's, in ``runs/JOB/.journal/pruning/<batch>/``."""

    job: str
    key: str | None
    """the outcome whose folder it is (``None``: the prune's marker does not name it)"""
    folder: Path

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "key": self.key, "folder": str(self.folder)}


def set_aside(home: Path) -> tuple[list[SetAside], set[tuple[str, str]]]:
    """Every folder killed prunes left set aside under ``home/runs``, and every outcome
    their markers name, as ``(job, key)`` (those whose folder went already included); read
    only. Whether such an outcome was pruned (its batch committed) or is still in the
    ledger (killed before the commit) only the ledger tells: the next prune asks it (puts
    the folder back or removes it); without the ledger nobody can."""
    found: list[SetAside] = []
    named: set[tuple[str, str]] = set()
    for marker in _markers((home / "runs").absolute().parent):
        named |= {(marker.job, key) for key, _, _ in marker.outcomes}
        for child in marker.children() or ():
            outcome = marker.named(child)
            found.append(SetAside(marker.job, outcome[0] if outcome else None, child))
    return found, named


def _plan_earlier(engine: Engine, pruned: Pruned) -> set[tuple[str, str]]:
    """What a prune does first with the folders killed prunes set aside
    (:meth:`_SetAside.finish_earlier`), told in ``pruned`` and done to nothing: each is
    put back if the ledger still holds its outcome (made at the same time), else removed.
    Returns the outcomes, as ``(job, key)``, whose folders would be put back."""
    from .folders import outcome_dir

    ledger = engine.existing_ledger()
    back: set[tuple[str, str]] = set()
    for marker in _markers((engine.home / "runs").absolute().parent):
        children = marker.children()
        if children is None:
            pruned.kept_folders.append(str(marker.aside))
            continue
        for child in children:
            if _taken_by_another(child.name):
                continue  # another prune, alive, is removing it
            named = marker.named(child)
            held = None
            if named is not None and ".removing-" not in child.name:
                held = ledger.outcome(named[0])
                if held is not None and float(held.created_at) != named[1]:
                    held = None  # the key made again since: another outcome
            if held is None:
                pruned.set_aside_removed.append(str(child))
                pruned.folders += 1
                continue
            try:
                outcome_dir(engine.home, marker.job, held.key)
            except InvalidInput:
                pruned.kept_folders.append(str(child))
                continue
            pruned.set_aside_put_back.append(str(child))
            back.add((marker.job, held.key))
    return back


class _SetAside:
    """The prune's hooks (:class:`~retrysafe.ledger.retention.PruneHooks`): a batch's
    folders are set aside, synced, before its commit, removed after it, and put back
    if it is rolled back (see the module's docstring)."""

    def __init__(self, engine: Engine, pruned: Pruned) -> None:
        self.engine = engine
        self.base = (engine.home / "runs").absolute().parent
        self.pruned = pruned
        self.jobs: set[str] = set()
        """jobs whose journals are looked at when the prune ends"""
        self.markers: list[_Marker] = []
        """markers whose folders are settled: each file is removed when the prune ends"""
        self._batch: list[_Marker] = []
        self._in_place: list[tuple[str, str]] = []
        """folders that could not be set aside: removed where they are, after the commit"""
        self._journals: dict[str, _JournalIndex] = {}
        """which outcomes each job's journal names, read on as the prune goes"""

    # --- the hooks of each batch ------------------------------------------------------

    def before_commit(self, batch: list[Pruning]) -> None:
        by_job: dict[str, list[Pruning]] = {}
        for p in batch:
            by_job.setdefault(p.job, []).append(p)
        for job, items in sorted(by_job.items()):
            self.jobs.add(job)
            self._set_aside(job, items)
            self._journal_pruned(job, items)
        from .crash import crash_point

        crash_point("prune", "before-commit")

    def after_commit(self, batch: list[Pruning]) -> None:
        from .crash import crash_point

        crash_point("prune", "after-commit")
        for marker in self._batch:
            self._remove_rest(marker, set())
            self.markers.append(marker)
        for job, key in self._in_place:
            _remove_folder(self.engine.home, job, key, self.pruned, False)
        self._batch, self._in_place = [], []

    def rolled_back(self, batch: list[Pruning]) -> None:
        from .errors import RetrysafeError

        for marker in self._batch:
            # the rows stayed: their folders go back (else the next prune puts them back)
            with contextlib.suppress(RetrysafeError, OSError):
                if self._settle(marker):
                    marker.file.unlink()
                    _tidy(marker.area, marker.made_journal)
        self._batch, self._in_place = [], []

    def _set_aside(self, job: str, items: list[Pruning]) -> None:
        from .folders import JOURNAL, journal_dir
        from .fsio import atomic_write_json, fsync_dir, private_dirs

        moving: list[tuple[Pruning, Path]] = []
        for p in items:
            path = _folder(self.engine.home, p.job, p.key, self.pruned)
            if path is not None and path.is_dir():
                moving.append((p, path))
        journal = journal_dir(self.engine.home, job)
        if not moving and not journal.is_dir():
            return  # nothing on disk to finish
        marker = _Marker(job, journal / _AREA, os.urandom(8).hex(),
                         not os.path.lexists(journal),
                         [(p.key, p.created_at, path.name) for p, path in moving])
        moved = 0
        try:
            private_dirs(self.base, ("runs", job, JOURNAL, _AREA))
            atomic_write_json(marker.file, marker.to_json())  # synced, as is its folder
            self._batch.append(marker)
            fsync_dir(journal)
            if moving:
                marker.aside.mkdir(mode=0o700)
                for _, path in moving:
                    path.rename(marker.aside / path.name)
                    moved += 1
                for folder in (marker.aside, marker.area, journal.parent):
                    fsync_dir(folder)  # the moves, before the commit that relies on them
        except (OSError, InvalidInput):
            pass  # what could not be set aside goes as before: after the commit, in place
        self._in_place += [(p.job, p.key) for p, _ in moving[moved:]]

    def _journal_pruned(self, job: str, items: list[Pruning]) -> None:
        """A ``pruned`` line for each of ``items`` that the job's journal names, appended
        to the last file that does (so it is read after them, and goes with them when that
        file goes), synced (see the module's docstring). One that cannot be written stops
        the prune (the batch rolls back): without it, ``recover`` would bring the outcome
        back as it was."""
        from .errors import HomeNotWritable
        from .folders import append_journal, journal_dir

        index = self._journals.get(job)
        if index is None:
            index = self._journals[job] = _JournalIndex(journal_dir(self.engine.home, job))
        index.read_on()
        now = time.time()
        lines: dict[str, list[dict[str, Any]]] = {}
        for p in items:
            if p.key in index.latest:
                lines.setdefault(index.latest[p.key], []).append(
                    {"outcome_key": p.key, "job": job, "time": now, "action": PRUNED,
                     "created_at": p.created_at})
        if not lines:
            return
        try:
            append_journal(self.engine.home, job, lines)
        except OSError as exc:
            raise HomeNotWritable(
                f"cannot write the journal {index.folder}: {exc.strerror or exc} (the "
                f"outcomes of job {job} in this batch were not pruned)") from None

    # --- finishing a prune killed part-way ------------------------------------------

    def finish_earlier(self) -> None:
        """Settle every marker a prune left (killed, or unable to remove a folder)."""
        for marker in _markers(self.base):
            self.jobs.add(marker.job)
            self._settle(marker, earlier=True)
            self.markers.append(marker)

    def _settle(self, marker: _Marker, *, earlier: bool = False) -> bool:
        """Put back the folders of the outcomes the ledger still holds (the same ones),
        with their rows locked, and remove the rest. Returns whether all are settled.
        ``earlier``: a prune that was killed set them aside (told in ``pruned``)."""
        from .folders import outcome_dir

        stuck: set[str] = set()

        def put_back(known: dict[str, float]) -> None:
            if marker.aside.is_symlink() or not marker.aside.is_dir():
                return
            for key, created_at, name in marker.outcomes:
                src = marker.aside / name
                if known.get(key) == created_at and os.path.lexists(src):
                    try:
                        dest = outcome_dir(self.engine.home, marker.job, key)
                    except InvalidInput:
                        dest = None
                    if dest is None or not _put_back(src, dest):
                        stuck.add(name)
                    elif earlier:
                        self.pruned.set_aside_put_back.append(str(src))

        if marker.outcomes:  # (a batch in flight is decided first: its rows are locked)
            self.engine.existing_ledger().retention.holding(
                [k for k, _, _ in marker.outcomes], put_back)
        if marker.aside.is_symlink() or not marker.aside.is_dir():
            return True
        return self._remove_rest(marker, stuck,
                                 self.pruned.set_aside_removed if earlier else None)

    def _remove_rest(self, marker: _Marker, keep: set[str],
                     told: list[str] | None = None) -> bool:
        """Remove what is set aside in ``marker`` but ``keep``; returns whether all went.
        Each removed folder is counted, and named in ``told`` if given."""
        try:
            children = sorted(marker.aside.iterdir())
        except FileNotFoundError:
            return True
        except OSError:
            self.pruned.kept_folders.append(str(marker.aside))
            return False
        left = False
        for child in children:
            if _taken_by_another(child.name):
                continue  # another prune, alive, is removing it (and counts it)
            if child.name in keep:
                self.pruned.kept_folders.append(str(child))
                left = True
                continue
            # taken first under a name of this process's: a prune finishing the same batch
            # at the same time removes (and counts) each folder once
            taken = child.with_name(f"{child.name.split('.removing-')[0]}.removing-"
                                    f"{os.getpid()}-{os.urandom(4).hex()}")
            try:
                child.rename(taken)
            except FileNotFoundError:
                continue
            except OSError:
                taken = child
            try:
                if taken.is_symlink() or not taken.is_dir():
                    taken.unlink()
                else:
                    shutil.rmtree(taken)
            except OSError:
                self.pruned.kept_folders.append(str(taken))
                left = True
                continue
            self.pruned.folders += 1
            if told is not None:
                told.append(str(child))
        if left:
            return False
        with contextlib.suppress(OSError):  # (not empty: another prune is at work in it)
            marker.aside.rmdir()
        return True

    def close(self) -> None:
        """The prune's end (its journals looked at): the settled markers' files go, and
        the folders they alone needed."""
        made: dict[Path, bool] = {}
        for marker in self.markers:
            made[marker.area] = made.get(marker.area, False) or marker.made_journal
            if not os.path.lexists(marker.aside):
                with contextlib.suppress(FileNotFoundError):
                    marker.file.unlink()
        for area, made_journal in sorted(made.items()):
            _tidy(area, made_journal)


class _JournalIndex:
    """Which outcomes a job's journal files (folders.py) name, each with the last file
    (by name, the order ``recover`` reads them in) that does: read whole once, then only
    what was appended since. A file behind a link is never read, as ``recover`` never
    reads one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.latest: dict[str, str] = {}
        """outcome key -> the name (less ``.jsonl``) of the last file naming it"""
        self._read: dict[str, int] = {}
        """file name -> how many of its bytes (whole lines) were read"""

    def read_on(self) -> None:
        folder = self.folder
        if folder.is_symlink() or folder.parent.is_symlink() or not folder.is_dir():
            return
        for path in sorted(folder.glob("*.jsonl")):
            if path.is_symlink():
                continue
            start = self._read.get(path.name, 0)
            try:
                with path.open("rb") as fh:
                    if os.fstat(fh.fileno()).st_size < start:
                        start = 0  # (not the file read before)
                    fh.seek(start)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # a line being written is read whole next time
            for line in data[:end].splitlines():
                with contextlib.suppress(ValueError, AttributeError):
                    key = json.loads(line).get("outcome_key")
                    if isinstance(key, str) and key:
                        self.latest[key] = max(self.latest.get(key, ""), path.stem)
            self._read[path.name] = start + end


def _tidy(area: Path, made_journal: bool) -> None:
    """Remove the area once empty, the journal folder if made for it, and the job's
    folder once its last outcome is gone."""
    try:
        area.rmdir()
        if made_journal:
            area.parent.rmdir()
        area.parent.parent.rmdir()
    except OSError:
        pass


def _put_back(src: Path, dest: Path) -> bool:
    """Move a set-aside outcome folder back to ``dest``; into it, when a later attempt
    made it since (what it has already, newer, wins). Returns whether it went."""
    try:
        src.rename(dest)
        return True
    except OSError:
        pass
    if dest.is_symlink() or not dest.is_dir():
        return False
    try:
        for child in sorted(src.iterdir()):
            if not os.path.lexists(dest / child.name):
                child.rename(dest / child.name)
    except OSError:
        return False
    shutil.rmtree(src, ignore_errors=True)  # an older summary.json: the newer one stays
    return True


def _remove_journals(engine: Engine, job: str) -> int:
    """Remove the job's journal files (folders.py) whose every outcome has left the
    ledger: a file that names one kept outcome stays whole, and so does one with the
    ``pruned`` line of a key that an older file that stays holds lines of (without it
    they would be read as the key's). Returns how many went."""
    from .folders import journal_dir

    folder = journal_dir(engine.home, job)
    if folder.is_symlink() or folder.parent.is_symlink() or not folder.is_dir():
        return 0
    removed = 0
    ledger = engine.ledger
    # today's and yesterday's files (UTC) stay: a running worker may still append to them
    recent = datetime.fromtimestamp(time.time() - 86400, UTC).strftime("%Y-%m-%d")
    held: set[str] = set()
    """keys with lines in a file that stays, and no ``pruned`` line after them"""
    unread = False
    """a file that stays could not be read: any of its keys may be held"""
    for path in sorted(folder.glob("*.jsonl")):
        if path.stem >= recent:
            break  # (every later name is as recent)
        if path.is_symlink():
            continue
        lines: list[tuple[str, bool]] = []
        try:
            with path.open("rb") as fh:
                for line in fh:
                    with contextlib.suppress(ValueError, AttributeError):
                        rec = json.loads(line)
                        if isinstance(rec.get("outcome_key"), str):
                            lines.append((rec["outcome_key"], pruned_line(rec)))
        except OSError:
            unread = True
            continue
        needed = any(pruned and (unread or k in held) for k, pruned in lines)
        if needed or any(ledger.outcome(k) is not None for k in sorted({k for k, _ in lines})):
            for k, pruned in lines:
                if pruned:
                    held.discard(k)
                else:
                    held.add(k)
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed


def _taken_by_another(name: str) -> bool:
    """Whether ``name`` is a folder another prune took to remove (``NAME.removing-PID-…``)
    and that prune still runs: taking it again would have both remove it at once. One
    left by a prune that died is taken again."""
    from .ledger import Holder
    from .process import holder_gone, host_id

    _, sep, rest = name.partition(".removing-")
    pid = rest.split("-", 1)[0]
    if not sep or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        return not holder_gone(Holder(host_id(), int(pid)))
    except OverflowError:
        return False  # no process has such a pid


def _folder(home: Path, job: str, key: str, pruned: Pruned) -> Path | None:
    """The outcome's ``runs/`` folder, unless a link is on the way (never followed:
    named as kept)."""
    from .folders import outcome_dir

    try:
        path = outcome_dir(home, job, key)
    except InvalidInput:
        return None
    runs = path.parent.parent
    if any(p.is_symlink() for p in (runs, path.parent, path)):
        pruned.kept_folders.append(str(path))
        return None
    return path


def _remove_folder(home: Path, job: str, key: str, pruned: Pruned, dry_run: bool) -> None:
    """The outcome's ``runs/`` folder, removed unless a link is on the way (never followed)."""
    path = _folder(home, job, key, pruned)
    if path is None or not path.is_dir():
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
