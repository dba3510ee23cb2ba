"""Housekeeping on the ledger: what waits for a human, and removing old outcomes.

:class:`Retention` is reached as ``ledger.retention``. Pruning
never removes an outcome that waits for a human (``blocked``, ``unknown``) or
one an attempt is working on (an ``active`` attempt, live or not): those are
exactly the records that prevent a repeat or an unseen loss. Drill trials
(keys with ``~``) are kept apart: a plain prune leaves them, a drill prune
removes only them, whatever their state (they are test runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from ..errors import InvalidInput
from ..keys import DRILL_MARK
from ..states import AttemptState, OutcomeState
from .backend import Backend, Tx
from .listing import Cursor, note_unlogged
from .records import OutcomeRecord, StepRecord, outcome_from_row, step_from_row

__all__ = ["PROTECTED_STATES", "AttentionPage", "PruneHooks", "PruneResult", "Pruning", "Retention",
           "Waiting"]

_T = TypeVar("_T")


PROTECTED_STATES = (OutcomeState.BLOCKED.value, OutcomeState.UNKNOWN.value)
"""Outcomes that wait for a human: never pruned."""

_BATCH = 200
_PAGE = 500
_WAITING_STEPS = ("blocked", "unknown", "running")
"""The steps shown with a waiting outcome."""
_NO_LIVE_ATTEMPT = "(a.id IS NULL OR a.state <> ? OR a.lease_expires <= ?)"
"""An unknown outcome waits for a human when no live attempt could still settle it."""

OnBatch = Callable[[dict[str, list[dict[str, Any]]]], None]
"""Called with a batch's rows (by table) inside its transaction, before they are
deleted: an export that fails stops the prune and the batch stays."""


class Waiting(NamedTuple):
    """An outcome that waits for a human, and its steps that do."""

    outcome: OutcomeRecord
    steps: list[StepRecord]


class AttentionPage(NamedTuple):
    """A page of what waits for a human, oldest first."""

    waiting: list[Waiting]
    next: Cursor | None
    """the cursor of the following page (``None``: this is the last)"""


class Pruning(NamedTuple):
    """An outcome a prune batch removes. ``created_at`` tells it from an outcome made
    again later under the same key."""

    job: str
    key: str
    created_at: float


class PruneHooks(Protocol):
    """What goes with each batch a prune removes (its outcomes' ``runs/`` folders)."""

    def before_commit(self, batch: list[Pruning]) -> None:
        """Inside the batch's transaction, its rows deleted, just before the commit:
        an exception rolls the batch back (and is raised)."""

    def after_commit(self, batch: list[Pruning]) -> None:
        """The batch is committed: its rows are gone."""

    def rolled_back(self, batch: list[Pruning]) -> None:
        """The batch was rolled back after :meth:`before_commit` began: its rows stay."""


class PruneResult(NamedTuple):
    """What a prune removed (or, dry, would remove): rows per table, and the
    outcomes as ``(job, key)`` (their ``runs/`` folders go too)."""

    counts: dict[str, int]
    outcomes: list[tuple[str, str]]


def _age_filter(older_than: float | None, keep: Mapping[str, float], now: float
                ) -> tuple[str, list[Any]]:
    """SQL for "old enough": one age for every job, else each job's own ``keep``."""
    if older_than is not None:
        return "o.updated_at < ?", [now - older_than]
    if not keep:
        return "1 = 0", []
    clause = " OR ".join("(o.job = ? AND o.updated_at < ?)" for _ in keep)
    params: list[Any] = []
    for job, age in sorted(keep.items()):
        params += [job, now - age]
    return f"({clause})", params


class Retention:
    """Reading what waits for a human, and pruning: ``ledger.retention`` (built on
    first use, so a command that never prunes never imports this module)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    # --- what waits for a human ----------------------------------------------------

    def needs_attention(self, *, drills: bool = False) -> list[Waiting]:
        """Every outcome a human must settle, oldest first: ``blocked`` (any cause,
        the attempt limit included), and ``unknown`` with no live attempt that
        could still settle it. Drill trials only with ``drills``. Read in pages
        (:meth:`attention_page`)."""
        out: list[Waiting] = []
        after: Cursor | None = None
        while True:
            page = self.attention_page(after=after, limit=_PAGE, drills=drills)
            out += page.waiting
            if page.next is None:
                return out
            after = page.next

    def attention_page(self, *, after: Cursor | None = None, limit: int = 50,
                       drills: bool = False) -> AttentionPage:
        """A page of :meth:`needs_attention`, oldest first, starting after ``after``
        (a keyset page: the ``(state, updated_at, id)`` index serves each state's
        part, so every page costs what the first does), with the steps that wait."""
        if limit < 1:
            raise InvalidInput("the page size must be at least 1")
        with self.backend.transaction(write=False) as tx:
            # each state's first page from the index, merged by the database
            parts = [self._waiting_part(tx, state, after, limit + 1, drills)
                     for state in (OutcomeState.BLOCKED.value, OutcomeState.UNKNOWN.value)]
            merged = tx.rows(
                " UNION ALL ".join(f"SELECT * FROM ({sql}) {alias}"
                                   for (sql, _), alias in zip(parts, ("b", "u"), strict=True))
                + f" ORDER BY updated_at, id LIMIT {int(limit) + 1}",
                tuple(p for _, params in parts for p in params))
            found = [outcome_from_row(r) for r in merged[:limit]]
            steps: dict[str, list[StepRecord]] = {o.key: [] for o in found}
            if found:
                marks = ", ".join("?" * len(found))
                for s in tx.rows(
                        f"SELECT * FROM rs_steps WHERE outcome_key IN ({marks})"
                        f" AND state IN ({', '.join('?' * len(_WAITING_STEPS))})"
                        " ORDER BY outcome_key, created_at, step_key",
                        (*steps, *_WAITING_STEPS)):
                    steps[s["outcome_key"]].append(step_from_row(s))
        more = len(merged) > limit and found
        return AttentionPage([Waiting(o, steps[o.key]) for o in found],
                             Cursor.after(merged[limit - 1]) if more else None)

    def attention_counts(self, *, drills: bool = False) -> dict[str, int]:
        """How many outcomes wait for a human, by state (``blocked``, ``unknown``):
        a count over the state index (and, for ``unknown``, each one's attempt)."""
        drill = "" if drills else " AND o.key NOT LIKE ?"
        dp: tuple[Any, ...] = () if drills else (f"%{DRILL_MARK}%",)
        with self.backend.transaction(write=False) as tx:
            blocked = tx.one(f"SELECT COUNT(*) AS n FROM rs_outcomes o WHERE o.state = ?{drill}",
                             (OutcomeState.BLOCKED.value, *dp))
            unknown = tx.one(
                "SELECT COUNT(*) AS n FROM rs_outcomes o LEFT JOIN rs_attempts a"
                f" ON a.id = o.current_attempt WHERE o.state = ? AND {_NO_LIVE_ATTEMPT}{drill}",
                (OutcomeState.UNKNOWN.value, AttemptState.ACTIVE.value, tx.now, *dp))
        return {OutcomeState.BLOCKED.value: int(blocked["n"]) if blocked else 0,
                OutcomeState.UNKNOWN.value: int(unknown["n"]) if unknown else 0}

    def _waiting_part(self, tx: Tx, state: str, after: Cursor | None, limit: int,
                      drills: bool) -> tuple[str, list[Any]]:
        """SQL for the first ``limit`` waiting outcomes in ``state`` after ``after``,
        oldest first (a range of the state index), and its parameters."""
        where = ["o.state = ?"]
        params: list[Any] = [state]
        join = ""
        if state == OutcomeState.UNKNOWN.value:
            join = " LEFT JOIN rs_attempts a ON a.id = o.current_attempt"
            where.append(_NO_LIVE_ATTEMPT)
            params += [AttemptState.ACTIVE.value, tx.now]
        if after is not None:
            where.append("(o.updated_at, o.id) > (?, ?)")
            params += [after.updated_at, after.id]
        if not drills:
            where.append("o.key NOT LIKE ?")
            params.append(f"%{DRILL_MARK}%")
        return (f"SELECT o.* FROM rs_outcomes o{join} WHERE {' AND '.join(where)}"
                f" ORDER BY o.updated_at, o.id LIMIT {int(limit)}", params)

    # --- pruning -----------------------------------------------------------------------

    def prune(
        self,
        *,
        older_than: float | None = None,
        keep: Mapping[str, float] | None = None,
        states: Sequence[str] = (),
        job: str | None = None,
        drills: bool = False,
        dry_run: bool = False,
        on_batch: OnBatch | None = None,
        hooks: PruneHooks | None = None,
    ) -> PruneResult:
        """Remove old outcomes with their attempts, steps and history.

        Old means last changed more than ``older_than`` seconds ago by the
        ledger's clock, or, without it, more than the job's ``keep`` (jobs not
        in ``keep`` are left alone). ``states`` narrows it (``blocked`` and
        ``unknown`` are refused); ``drills`` prunes drill trials only (every
        state, at any age unless ``older_than``). Never an outcome with an
        active attempt. One transaction per batch, with ``hooks`` around its commit;
        ``dry_run`` counts only.
        """
        bad = sorted(set(states) & set(PROTECTED_STATES)) if not drills else []
        if bad:
            raise InvalidInput(f"{bad[0]} outcomes wait for a human and are never pruned: "
                               "settle them first (retrysafe needs-attention)")
        unknown_states = sorted(set(states) - {s.value for s in OutcomeState})
        if unknown_states:
            raise InvalidInput(f"unknown state {unknown_states[0]!r} (states: "
                               f"{', '.join(s.value for s in OutcomeState)})")
        from .transfer import TABLES, rows_of  # on use: the step fast path imports this module

        counts = dict.fromkeys(TABLES, 0)
        removed: list[tuple[str, str]] = []
        while True:
            with self._batch(not dry_run, hooks) as (tx, hooked):
                batch = self._prune_candidates(tx, older_than, keep or {}, states, job, drills,
                                               None if dry_run else _BATCH)
                if not batch:
                    break
                if not dry_run:
                    batch = self._still_prunable(tx, batch, drills)
                    if not batch:
                        continue
                keys = [p.key for p in batch]
                if dry_run:
                    for i in range(0, len(keys), _BATCH):
                        chunk = keys[i:i + _BATCH]
                        for table, column in (("rs_attempts", "outcome_key"),
                                              ("rs_steps", "outcome_key"),
                                              ("rs_events", "outcome_key"),
                                              ("rs_notifications", "outcome_key")):
                            row = tx.one(f"SELECT COUNT(*) AS n FROM {table} WHERE {column} IN"
                                         f" ({', '.join('?' * len(chunk))})", tuple(chunk))
                            counts[table] += int(row["n"]) if row else 0
                    counts["rs_outcomes"] += len(keys)
                    removed += [(p.job, p.key) for p in batch]
                    break
                if on_batch is not None:
                    on_batch({t: rows_of(tx, t, keys) for t in TABLES})
                marks = ", ".join("?" * len(keys))
                note_unlogged(tx)  # outcomes and attempts gone, their history with them
                # the history names its outcome by id (rs_events is its view): before the outcome
                counts["rs_events"] += tx.run("DELETE FROM rs_history WHERE outcome IN (SELECT id"
                                              f" FROM rs_outcomes WHERE key IN ({marks}))",
                                              tuple(keys))
                for table in ("rs_notifications", "rs_steps", "rs_attempts"):
                    counts[table] += tx.run(f"DELETE FROM {table} WHERE outcome_key IN ({marks})",
                                            tuple(keys))
                counts["rs_outcomes"] += tx.run(f"DELETE FROM rs_outcomes WHERE key IN ({marks})",
                                                tuple(keys))
                removed += [(p.job, p.key) for p in batch]
                if hooks is not None:
                    hooked += batch
                    hooks.before_commit(batch)
        return PruneResult(counts, removed)

    @contextlib.contextmanager
    def _batch(self, write: bool, hooks: PruneHooks | None
               ) -> Iterator[tuple[Tx, list[Pruning]]]:
        """A batch's transaction, and the list its hooked outcomes go in: after the
        commit they are passed to ``hooks.after_commit``, after a rollback to
        ``hooks.rolled_back``."""
        hooked: list[Pruning] = []
        try:
            with self.backend.transaction(write=write) as tx:
                yield tx, hooked
        except BaseException:
            if hooks is not None and hooked:
                hooks.rolled_back(hooked)
            raise
        if hooks is not None and hooked:
            hooks.after_commit(hooked)

    def holding(self, keys: Sequence[str], then: Callable[[dict[str, float]], _T]) -> _T:
        """``then`` called with those of ``keys`` the ledger holds (each one's
        ``created_at``), their rows locked until it returns (on SQLite, the ledger's
        write lock): a prune's batch in flight is committed or rolled back before, so
        what it set aside is judged by what it did, never by what it was doing."""
        with self.backend.transaction() as tx:
            known: dict[str, float] = {}
            for i in range(0, len(keys), _BATCH):
                chunk = list(keys[i:i + _BATCH])
                for r in tx.rows(f"SELECT key, created_at FROM rs_outcomes WHERE key IN"
                                 f" ({', '.join('?' * len(chunk))}){self.backend.lock_clause}",
                                 tuple(chunk)):
                    known[r["key"]] = float(r["created_at"])
            return then(known)

    def _still_prunable(self, tx: Tx, batch: list[Pruning], drills: bool) -> list[Pruning]:
        """``batch`` read again now that its rows are locked: an attempt that began
        (or a block that came) while the prune waited for the lock keeps its outcome."""
        if not batch:
            return batch
        keys = [p.key for p in batch]
        marks = ", ".join("?" * len(keys))
        busy = {r["outcome_key"] for r in tx.rows(
            f"SELECT outcome_key FROM rs_attempts WHERE outcome_key IN ({marks}) AND state = ?",
            (*keys, AttemptState.ACTIVE.value))}
        if not drills:
            busy |= {r["key"] for r in tx.rows(
                f"SELECT key FROM rs_outcomes WHERE key IN ({marks})"
                f" AND state IN ({', '.join('?' * len(PROTECTED_STATES))})",
                (*keys, *PROTECTED_STATES))}
        return [p for p in batch if p.key not in busy]

    def _prune_candidates(self, tx: Tx, older_than: float | None, keep: Mapping[str, float],
                          states: Sequence[str], job: str | None, drills: bool,
                          limit: int | None) -> list[Pruning]:
        """The outcomes to prune now, oldest first (locked on PostgreSQL)."""
        where: list[str] = []
        params: list[Any] = []
        if drills:
            where.append("o.key LIKE ?")
            params.append(f"%{DRILL_MARK}%")
            if older_than is not None:
                where.append("o.updated_at < ?")
                params.append(tx.now - older_than)
        else:
            where.append("o.key NOT LIKE ?")
            params.append(f"%{DRILL_MARK}%")
            where.append(f"o.state NOT IN ({', '.join('?' * len(PROTECTED_STATES))})")
            params += PROTECTED_STATES
            age, age_params = _age_filter(older_than, keep, tx.now)
            where.append(age)
            params += age_params
        if states:
            where.append(f"o.state IN ({', '.join('?' * len(states))})")
            params += states
        if job:
            where.append("o.job = ?")
            params.append(job)
        where.append("NOT EXISTS (SELECT 1 FROM rs_attempts a WHERE a.outcome_key = o.key"
                     " AND a.state = ?)")
        params.append(AttemptState.ACTIVE.value)
        sql = (f"SELECT o.job, o.key, o.created_at FROM rs_outcomes o WHERE {' AND '.join(where)}"
               " ORDER BY o.updated_at, o.key")
        if limit is not None:
            sql += f" LIMIT {int(limit)}{self.backend.lock_clause}"
        return [Pruning(r["job"], r["key"], float(r["created_at"]))
                for r in tx.rows(sql, tuple(params))]
