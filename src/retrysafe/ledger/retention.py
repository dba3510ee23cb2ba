"""Housekeeping on the ledger: what waits for a human, and removing old outcomes.

:class:`Retention` is reached as ``ledger.retention``. Pruning
never removes an outcome that waits for a human (``blocked``, ``unknown``) or
one an attempt is working on (an ``active`` attempt, live or not): those are
exactly the records that prevent a repeat or an unseen loss. Drill trials
(keys with ``~``) are kept apart: a plain prune leaves them, a drill prune
removes only them, whatever their state (they are test runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import InvalidInput
from ..keys import DRILL_MARK
from ..states import AttemptState, OutcomeState
from .backend import Backend, Tx
from .records import OutcomeRecord, StepRecord, outcome_from_row, step_from_row

__all__ = ["PROTECTED_STATES", "PruneResult", "Retention", "Waiting"]


PROTECTED_STATES = (OutcomeState.BLOCKED.value, OutcomeState.UNKNOWN.value)
"""Outcomes that wait for a human: never pruned."""

_BATCH = 200

OnBatch = Callable[[dict[str, list[dict[str, Any]]]], None]
"""Called with a batch's rows (by table) inside its transaction, before they are
deleted: an export that fails stops the prune and the batch stays."""


class Waiting(NamedTuple):
    """An outcome that waits for a human, and its steps that do."""

    outcome: OutcomeRecord
    steps: list[StepRecord]


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
        could still settle it. Drill trials only with ``drills``."""
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT o.* FROM rs_outcomes o LEFT JOIN rs_attempts a ON a.id = o.current_attempt"
                " WHERE (o.state = ? OR (o.state = ? AND (a.id IS NULL OR a.state <> ?"
                " OR a.lease_expires <= ?)))"
                + ("" if drills else " AND o.key NOT LIKE ?")
                + " ORDER BY o.updated_at, o.key",
                (OutcomeState.BLOCKED.value, OutcomeState.UNKNOWN.value, AttemptState.ACTIVE.value,
                 tx.now, *(() if drills else (f"%{DRILL_MARK}%",))),
            )
            out: list[Waiting] = []
            for row in rows:
                outcome = outcome_from_row(row)
                steps = [step_from_row(s) for s in tx.rows(
                    "SELECT * FROM rs_steps WHERE outcome_key = ? AND state IN (?, ?, ?)"
                    " ORDER BY created_at, step_key",
                    (outcome.key, "blocked", "unknown", "running"))]
                out.append(Waiting(outcome, steps))
            return out

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
    ) -> PruneResult:
        """Remove old outcomes with their attempts, steps and history.

        Old means last changed more than ``older_than`` seconds ago by the
        ledger's clock, or, without it, more than the job's ``keep`` (jobs not
        in ``keep`` are left alone). ``states`` narrows it (``blocked`` and
        ``unknown`` are refused); ``drills`` prunes drill trials only (every
        state, at any age unless ``older_than``). Never an outcome with an
        active attempt. One transaction per batch; ``dry_run`` counts only.
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
            with self.backend.transaction(write=not dry_run) as tx:
                batch = self._prune_candidates(tx, older_than, keep or {}, states, job, drills,
                                               None if dry_run else _BATCH)
                if not batch:
                    break
                if not dry_run:
                    batch = self._still_prunable(tx, batch, drills)
                    if not batch:
                        continue
                keys = [k for _, k in batch]
                if dry_run:
                    for i in range(0, len(keys), _BATCH):
                        chunk = keys[i:i + _BATCH]
                        for table, column in (("rs_attempts", "outcome_key"),
                                              ("rs_steps", "outcome_key"),
                                              ("rs_events", "outcome_key")):
                            row = tx.one(f"SELECT COUNT(*) AS n FROM {table} WHERE {column} IN"
                                         f" ({', '.join('?' * len(chunk))})", tuple(chunk))
                            counts[table] += int(row["n"]) if row else 0
                    counts["rs_outcomes"] += len(keys)
                    removed += batch
                    break
                if on_batch is not None:
                    on_batch({t: rows_of(tx, t, keys) for t in TABLES})
                marks = ", ".join("?" * len(keys))
                for table in ("rs_events", "rs_steps", "rs_attempts"):
                    counts[table] += tx.run(f"DELETE FROM {table} WHERE outcome_key IN ({marks})",
                                            tuple(keys))
                counts["rs_outcomes"] += tx.run(f"DELETE FROM rs_outcomes WHERE key IN ({marks})",
                                                tuple(keys))
                removed += batch
        return PruneResult(counts, removed)

    def _still_prunable(self, tx: Tx, batch: list[tuple[str, str]], drills: bool
                        ) -> list[tuple[str, str]]:
        """``batch`` read again now that its rows are locked: an attempt that began
        (or a block that came) while the prune waited for the lock keeps its outcome."""
        if not batch:
            return batch
        keys = [k for _, k in batch]
        marks = ", ".join("?" * len(keys))
        busy = {r["outcome_key"] for r in tx.rows(
            f"SELECT outcome_key FROM rs_attempts WHERE outcome_key IN ({marks}) AND state = ?",
            (*keys, AttemptState.ACTIVE.value))}
        if not drills:
            busy |= {r["key"] for r in tx.rows(
                f"SELECT key FROM rs_outcomes WHERE key IN ({marks})"
                f" AND state IN ({', '.join('?' * len(PROTECTED_STATES))})",
                (*keys, *PROTECTED_STATES))}
        return [(j, k) for j, k in batch if k not in busy]

    def _prune_candidates(self, tx: Tx, older_than: float | None, keep: Mapping[str, float],
                          states: Sequence[str], job: str | None, drills: bool,
                          limit: int | None) -> list[tuple[str, str]]:
        """``(job, key)`` of the outcomes to prune now, oldest first (locked on PostgreSQL)."""
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
        sql = (f"SELECT o.job, o.key FROM rs_outcomes o WHERE {' AND '.join(where)}"
               " ORDER BY o.updated_at, o.key")
        if limit is not None:
            sql += f" LIMIT {int(limit)}{self.backend.lock_clause}"
        return [(r["job"], r["key"]) for r in tx.rows(sql, tuple(params))]
