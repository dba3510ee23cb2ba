"""Reading the ledger in pages and in totals: the dashboard's lists and the metrics.

:class:`Listing` is reached as ``Listing(ledger.backend)``; it only reads.
Pages are keyset pages (newest first, the cursor is the last row's
``(updated_at, id)``), served by the indexes of schema migrations 6 and 12, so the
thousandth page of a ledger with a million outcomes costs what the first does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..keys import DRILL_MARK
from .backend import Backend, Tx
from .migrations import WORDS
from .records import OutcomeRecord, outcome_from_row

__all__ = ["ROW_MARK", "UNLOGGED", "WHOLE_MARK", "Cursor", "Gauges", "HistoryDelta", "Listing",
           "OutcomePage", "Totals", "note_unlogged"]


class Cursor(NamedTuple):
    """Where a page ends: the last row's ``updated_at`` and its outcome's ``id`` (the
    tie-break of the order, which the listing indexes end in: schema 12)."""

    updated_at: float
    id: int

    @classmethod
    def after(cls, row: dict[str, Any]) -> Cursor:
        """The cursor of the page after ``row``, an outcome row."""
        return cls(float(row["updated_at"]), int(row["id"]))


class OutcomePage(NamedTuple):
    outcomes: list[OutcomeRecord]
    next: Cursor | None
    """the cursor of the following page (``None``: this is the last)"""


class Totals(NamedTuple):
    """What the ledger holds, counted (for metrics). Each mapping is keyed by job."""

    outcomes: dict[tuple[str, str], int]
    """outcomes by ``(job, state)``"""
    attempts: dict[tuple[str, str], int]
    """attempts by ``(job, attempt state)``"""
    executions: dict[tuple[str, str], int]
    """step intents written (an effect executed, or a generate step produced), by ``(job, kind)``"""
    lookups_found: dict[str, int]
    """steps a lookup found done (instead of executing them again)"""
    skips: dict[str, int]
    """later attempts of an outcome that found an effect step already done"""
    blocks: dict[str, int]
    """times a step was blocked for a human"""


class HistoryDelta(NamedTuple):
    """What a stretch of the history (``rs_history`` rows) adds to the counters of
    :class:`Totals`, and how it moves attempts between states."""

    executions: dict[tuple[str, str], int]
    lookups_found: dict[str, int]
    skips: dict[str, int]
    """attempts started in the stretch, counted by the done effect steps they found"""
    blocks: dict[str, int]
    attempts: dict[tuple[str, str, bool], int]
    """the change of attempts by ``(job, attempt state, drill)``: +1 to a state an
    attempt entered, -1 from the one it left"""
    outcomes: dict[tuple[str, str], int]
    """the change of outcomes (drill trials left out) by ``(job, state)``, ``planned``
    left out: a new outcome is inserted already claimed, with the history row
    ``planned`` -> ``running``, so only the counts of the index know the planned ones"""


class Gauges(NamedTuple):
    """What the ledger holds, counted in one snapshot, and how far the history had
    reached then: where :class:`HistoryDelta` stretches carry the counts on from."""

    attempts: dict[tuple[str, str, bool], int]
    outcomes: dict[tuple[str, str], int]
    """outcomes by ``(job, state)``, drill trials and ``planned`` left out"""
    hw: int
    """the highest history row id"""
    unlogged: str
    """the ledger's :data:`UNLOGGED` mark"""
    top: str
    """what marks the history row ``hw`` (:data:`ROW_MARK`)"""
    visible: list[int]
    """the history ids asked for (near the top, and the gaps) that the snapshot held"""


ROW_MARK = "outcome_key || '|' || kind || '|' || to_state || '|' || CAST(at AS TEXT)"
"""What tells one history row from another that took its id (SQL over rs_events)."""
# the codes of the kinds and states the metrics count (rs_history, migration 12): a
# word of migrations.WORDS keeps its code
_STEP, _ATTEMPT, _OUTCOME = (WORDS.index(w) for w in ("step", "attempt", "outcome"))
_RUNNING, _DONE, _BLOCKED, _ACTIVE = (WORDS.index(w) for w in ("running", "done", "blocked",
                                                             "active"))
_WORDS = (" JOIN rs_words wf ON wf.code = e.from_state"
          " JOIN rs_words wt ON wt.code = e.to_state")
"""the words of a history row's states, as ``wf.word`` and ``wt.word``"""

UNLOGGED = "unlogged"
"""The ``rs_meta`` row given a new value by every write that adds or removes outcomes
or attempts without their history rows (prune, recover, import): counts carried on
from the history (:class:`Gauges`) are read again when it changed."""


WHOLE_MARK = "whole:"
"""How an :data:`UNLOGGED` mark starts when the ledger was replaced whole (recover, an
import into an empty ledger): what was counted from its history is not it any more."""


def note_unlogged(tx: Tx, *, whole: bool = False) -> None:
    """Mark, in ``tx``, that outcomes or attempts changed without their history
    (``whole``: the ledger's rows were replaced whole)."""
    import os

    tx.run("INSERT INTO rs_meta (name, value) VALUES (?, ?)"
           " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
           (UNLOGGED, (WHOLE_MARK if whole else "rows:") + os.urandom(8).hex()))


_FOUND = "found by %"
_DRILL = f"CASE WHEN o.key LIKE '%{DRILL_MARK}%' THEN 1 ELSE 0 END"
_DRILL_COUNTS = ("SELECT job, state, COUNT(*) AS n FROM rs_outcomes"
                 f" WHERE key LIKE '%{DRILL_MARK}%' GROUP BY job, state")


class Listing:
    """Pages and totals of the ledger's outcomes (read-only)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def outcomes(
        self,
        *,
        job: str | None = None,
        state: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after: Cursor | None = None,
        limit: int = 50,
        drills: bool = False,
    ) -> OutcomePage:
        """A page of outcomes last changed in ``[since, until)``, newest first,
        starting after ``after``."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("job", job), ("state", state)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("updated_at >= ?")
            params.append(since)
        if until is not None:
            where.append("updated_at < ?")
            params.append(until)
        if after is not None:
            where.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
            params += [after.updated_at, after.updated_at, after.id]
        if not drills:
            where.append("key NOT LIKE ?")
            params.append(f"%{DRILL_MARK}%")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows(f"SELECT * FROM rs_outcomes{clause} ORDER BY updated_at DESC, id DESC"
                           " LIMIT ?", (*params, limit + 1))
        found = [outcome_from_row(r) for r in rows[:limit]]
        more = len(rows) > limit and found
        return OutcomePage(found, Cursor.after(rows[limit - 1]) if more else None)

    def jobs(self) -> list[str]:
        """Every job with outcomes in the ledger (served by the job index)."""
        with self.backend.transaction(write=False) as tx:
            return [r["job"] for r in tx.rows("SELECT DISTINCT job FROM rs_outcomes ORDER BY job")]

    @staticmethod
    def _outcome_counts(tx: Tx, drills: bool,
                        states: Sequence[str] | None = None) -> dict[tuple[str, str], int]:
        """Outcomes by ``(job, state)`` (of ``states``, every state without): a count of
        each range of the ``(job, state)`` index (reading index entries, never rows),
        less the drill trials, counted in their own index."""
        from ..states import OutcomeState

        counts: dict[tuple[str, str], int] = {}
        for job in [r["job"] for r in tx.rows("SELECT DISTINCT job FROM rs_outcomes")]:
            for state in [s.value for s in OutcomeState] if states is None else states:
                row = tx.one("SELECT COUNT(*) AS n FROM rs_outcomes WHERE job = ? AND state = ?",
                             (job, state))
                if row and int(row["n"]):
                    counts[(job, state)] = int(row["n"])
        if not drills:
            # the pattern is written out, as in the index's own WHERE (migration 10):
            # only then may the database answer from that index alone
            for r in tx.rows(_DRILL_COUNTS):
                left = counts.get((r["job"], r["state"]), 0) - int(r["n"])
                if left > 0:
                    counts[(r["job"], r["state"])] = left
                else:
                    counts.pop((r["job"], r["state"]), None)
        return counts

    def totals(self, *, drills: bool = False) -> Totals:
        """Every count the metrics report, in one read transaction."""
        drill = "" if drills else " AND o.key NOT LIKE ?"
        dp: tuple[Any, ...] = () if drills else (f"%{DRILL_MARK}%",)
        with self.backend.transaction(write=False) as tx:
            def pairs(sql: str, params: tuple[Any, ...] = ()) -> dict[tuple[str, str], int]:
                return {(r["a"], r["b"]): int(r["n"]) for r in tx.rows(sql, (*params, *dp))}

            def singles(sql: str, params: tuple[Any, ...] = ()) -> dict[str, int]:
                return {r["a"]: int(r["n"]) for r in tx.rows(sql, (*params, *dp))}

            return Totals(
                outcomes=self._outcome_counts(tx, drills),
                attempts=pairs("SELECT o.job AS a, t.state AS b, COUNT(*) AS n FROM rs_attempts t"
                               f" JOIN rs_outcomes o ON o.key = t.outcome_key WHERE 1 = 1{drill}"
                               " GROUP BY o.job, t.state"),
                executions=pairs(
                    "SELECT o.job AS a, s.kind AS b, COUNT(*) AS n FROM rs_history e"
                    " JOIN rs_outcomes o ON o.id = e.outcome"
                    " JOIN rs_steps s ON s.step_key = o.key || e.step"
                    f" WHERE e.kind = {_STEP} AND e.to_state = {_RUNNING}{drill}"
                    " GROUP BY o.job, s.kind"),
                lookups_found=singles(
                    "SELECT o.job AS a, COUNT(*) AS n FROM rs_history e"
                    " JOIN rs_outcomes o ON o.id = e.outcome"
                    f" WHERE e.kind = {_STEP} AND e.to_state = {_DONE} AND e.reason LIKE ?"
                    f"{drill} GROUP BY o.job", ("found by %",)),
                skips=singles(
                    "SELECT o.job AS a, COUNT(*) AS n FROM rs_steps s"
                    " JOIN rs_attempts t ON t.outcome_key = s.outcome_key"
                    " JOIN rs_outcomes o ON o.key = s.outcome_key"
                    " WHERE s.kind = 'effect' AND s.state = 'done' AND t.started_at > s.updated_at"
                    f"{drill} GROUP BY o.job"),
                blocks=singles(
                    "SELECT o.job AS a, COUNT(*) AS n FROM rs_history e"
                    " JOIN rs_outcomes o ON o.id = e.outcome"
                    f" WHERE e.kind = {_STEP} AND e.to_state = {_BLOCKED}{drill} GROUP BY o.job"),
            )

    # --- the history, counted a stretch at a time (metrics.HistoryCounts) -------------

    def horizon(self, seen: int = 0) -> tuple[int, str, str, str]:
        """The highest history row id, the :data:`UNLOGGED` mark, and what marks the
        history rows ``seen`` and the highest (:data:`ROW_MARK`), in one statement
        (one snapshot): what the history has reached, whether anything changed
        besides it, and whether the row counted last is still the same row (not a
        ledger put back from a copy and grown again). Reads a few rows, whatever
        the size of the ledger."""
        with self.backend.transaction(write=False) as tx:
            row = tx.one("SELECT (SELECT MAX(id) FROM rs_history) AS hw,"
                         " (SELECT value FROM rs_meta WHERE name = ?) AS mark,"
                         f" (SELECT {ROW_MARK} FROM rs_events WHERE id = ?) AS seen,"
                         f" (SELECT {ROW_MARK} FROM rs_events"
                         " WHERE id = (SELECT MAX(id) FROM rs_history)) AS top", (UNLOGGED, seen))
        if not row:
            return 0, "", "", ""
        return (int(row["hw"] or 0), str(row["mark"] or ""), str(row["seen"] or ""),
                str(row["top"] or ""))

    def gauges(self, *, after: int | None = None, window: int = 0,
               ids: Sequence[int] = ()) -> Gauges:
        """Attempts and outcomes as the ledger holds them, the history's highest row
        id and the :data:`UNLOGGED` mark, in one statement (one snapshot). Reads
        every attempt and every outcome's index entry: done once, then carried on
        with :meth:`history_delta`. With ``after``, also which history ids the same
        snapshot holds among those above ``after`` within ``window`` of the top, and
        among ``ids``."""
        held, held_params = "", tuple[int, ...]()
        if after is not None:
            listed = f" OR id IN ({', '.join('?' * len(ids))})" if ids else ""
            held = (" UNION ALL SELECT 'i', '', '', 0, id FROM rs_history WHERE (id > ? AND"
                    f" id > (SELECT MAX(id) FROM rs_history) - ?){listed}")
            held_params = (after, window, *ids)
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows(
                # the drill pattern is written out as in the partial index's WHERE
                f"SELECT 'a' AS what, o.job AS job, t.state AS state, {_DRILL} AS drill,"
                " COUNT(*) AS n FROM rs_attempts t JOIN rs_outcomes o ON o.key = t.outcome_key"
                " GROUP BY o.job, t.state, 4"
                " UNION ALL SELECT 'o', job, state, 0, COUNT(*) FROM rs_outcomes"
                " WHERE state <> 'planned' GROUP BY job, state"
                f" UNION ALL SELECT 'd', job, state, 1, COUNT(*) FROM rs_outcomes"
                f" WHERE key LIKE '%{DRILL_MARK}%' GROUP BY job, state"
                " UNION ALL SELECT 'h', '', COALESCE((SELECT value FROM rs_meta WHERE name = ?),"
                " ''), 0, COALESCE((SELECT MAX(id) FROM rs_history), 0)"
                f" UNION ALL SELECT 't', '', COALESCE((SELECT {ROW_MARK} FROM rs_events"
                f" WHERE id = (SELECT MAX(id) FROM rs_history)), ''), 0, 0{held}",
                (UNLOGGED, *held_params))
        attempts: dict[tuple[str, str, bool], int] = {}
        outcomes: dict[tuple[str, str], int] = {}
        hw, mark, top, visible = 0, "", "", []
        for r in rows:
            what, n = r["what"], int(r["n"])
            if what == "i":
                visible.append(n)
            elif what == "a":
                attempts[(r["job"], r["state"], bool(r["drill"]))] = n
            elif what == "o":
                outcomes[(r["job"], r["state"])] = outcomes.get((r["job"], r["state"]), 0) + n
            elif what == "d" and r["state"] != "planned":
                outcomes[(r["job"], r["state"])] = outcomes.get((r["job"], r["state"]), 0) - n
            elif what == "h":
                hw, mark = n, str(r["state"])
            elif what == "t":
                top = str(r["state"])
        return Gauges(attempts, {k: n for k, n in outcomes.items() if n > 0}, hw, mark, top,
                      visible)

    def planned_counts(self) -> dict[str, int]:
        """Planned outcomes by job (drill trials left out): for each job a range of the
        ``(job, state)`` index, as long as the outcomes waiting to start, less the
        planned trials of the drill index."""
        with self.backend.transaction(write=False) as tx:
            counts = self._outcome_counts(tx, drills=False, states=("planned",))
        return {job: n for (job, _state), n in counts.items()}

    def event_ids(self, after: int, upto: int) -> list[int]:
        """The ids of the history rows in ``(after, upto]`` (a range of the primary key)."""
        with self.backend.transaction(write=False) as tx:
            return [int(r["id"]) for r in tx.rows(
                "SELECT id FROM rs_history WHERE id > ? AND id <= ? ORDER BY id", (after, upto))]

    def present(self, ids: Sequence[int]) -> list[int]:
        """Which of ``ids`` the history holds."""
        if not ids:
            return []
        with self.backend.transaction(write=False) as tx:
            return [int(r["id"]) for r in tx.rows(
                f"SELECT id FROM rs_history WHERE id IN ({', '.join('?' * len(ids))})", tuple(ids))]

    def history_delta(self, *, after: int = 0, upto: int = 0, ids: Sequence[int] | None = None,
                      attempts: bool = True, drills: bool = False) -> HistoryDelta:
        """What the history rows with an id in ``(after, upto]`` (or, given ``ids``,
        those rows) add to the counters: a range of the primary key, each row joined
        to its outcome (and step, attempt) by their keys, so the cost follows the
        rows asked for, not the size of the ledger. ``attempts``: also how the
        rows moved attempts and outcomes between states (the gauges)."""
        delta = HistoryDelta({}, {}, {}, {}, {}, {})
        if ids is not None:
            if not ids:
                return delta
            span, sp = f"e.id IN ({', '.join('?' * len(ids))})", tuple(ids)
        elif upto <= after:
            return delta
        else:
            span, sp = "e.id > ? AND e.id <= ?", (after, upto)
        nodrill = "" if drills else f" AND o.key NOT LIKE '%{DRILL_MARK}%'"
        with self.backend.transaction(write=False) as tx:
            if attempts:
                for r in tx.rows(
                    f"SELECT o.job AS job, {_DRILL} AS drill, wf.word AS frm,"
                    " wt.word AS tos, COUNT(*) AS n FROM rs_history e"
                    f" JOIN rs_outcomes o ON o.id = e.outcome{_WORDS} WHERE {span}"
                    f" AND e.kind = {_ATTEMPT} GROUP BY 1, 2, 3, 4", sp):
                    for state, sign in ((r["frm"], -1), (r["tos"], 1)):
                        if state:
                            k = (r["job"], state, bool(r["drill"]))
                            delta.attempts[k] = delta.attempts.get(k, 0) + sign * int(r["n"])
                for r in tx.rows(
                    "SELECT o.job AS job, wf.word AS frm, wt.word AS tos, COUNT(*) AS n"
                    f" FROM rs_history e JOIN rs_outcomes o ON o.id = e.outcome{_WORDS}"
                    f" WHERE {span} AND e.kind = {_OUTCOME}{nodrill} GROUP BY 1, 2, 3", sp):
                    for state, sign in ((r["frm"], -1), (r["tos"], 1)):
                        if state and state != "planned":
                            moved = (str(r["job"]), str(state))
                            delta.outcomes[moved] = delta.outcomes.get(moved, 0) + sign * int(r["n"])
            for r in tx.rows(
                "SELECT o.job AS job, s.kind AS kind, COUNT(*) AS n FROM rs_history e"
                " JOIN rs_outcomes o ON o.id = e.outcome"
                " JOIN rs_steps s ON s.step_key = o.key || e.step"
                f" WHERE {span} AND e.kind = {_STEP} AND e.to_state = {_RUNNING}{nodrill}"
                " GROUP BY o.job, s.kind", sp):
                delta.executions[(r["job"], r["kind"])] = int(r["n"])
            for into, cond in ((delta.lookups_found, f"e.to_state = {_DONE} AND e.reason LIKE '{_FOUND}'"),
                               (delta.blocks, f"e.to_state = {_BLOCKED}")):
                for r in tx.rows(
                    "SELECT o.job AS job, COUNT(*) AS n FROM rs_history e"
                    " JOIN rs_outcomes o ON o.id = e.outcome"
                    f" WHERE {span} AND e.kind = {_STEP} AND {cond}{nodrill} GROUP BY o.job", sp):
                    into[r["job"]] = int(r["n"])
            for r in tx.rows(
                "SELECT o.job AS job, COUNT(*) AS n FROM rs_history e"
                " JOIN rs_outcomes o ON o.id = e.outcome"
                " JOIN rs_attempts t ON t.outcome_key = o.key AND t.number = e.attempt"
                " JOIN rs_steps s ON s.outcome_key = o.key"
                f" WHERE {span} AND e.kind = {_ATTEMPT} AND e.to_state = {_ACTIVE}"
                " AND s.kind = 'effect' AND s.state = 'done' AND t.started_at > s.updated_at"
                f"{nodrill} GROUP BY o.job", sp):
                delta.skips[r["job"]] = int(r["n"])
        return delta
