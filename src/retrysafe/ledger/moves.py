"""The SQL of one step move: a fenced, conditional write and its history.

A step moves at least twice per effect (intent and record), so this is the
ledger's hot path. Every statement here is built once per shape and cached,
and each carries its own guards, so a move never reads before it writes:

* the **fence**: the write applies only while the attempt still holds the
  outcome's current fencing token (``EXISTS`` on the outcome row);
* the **expected state**: a step is created only if it does not exist, and
  moved only from one of the states the caller expects.

Two forms, one meaning:

* :func:`single_statement` (PostgreSQL): one statement with data-modifying
  ``WITH`` clauses. It locks the outcome row only if the attempt holds the
  fence, writes the step, appends the history row and moves the outcome's
  progress mark, all or nothing, in one round trip and one implicit
  transaction, timed by the server's clock.
* :func:`step_insert` or :func:`step_update` (SQLite, which has no writable
  ``WITH``): the step write alone, committed on its own; the ledger's
  triggers (migrations 3 and 11) append its history row within that statement.
  When the outcome's progress mark moves too, :func:`progress` adds two
  statements and all three run in one ``BEGIN IMMEDIATE`` transaction.

Either way a move that writes no step changed nothing; the caller then reads
why (a stale fence, or a step in another state) and raises.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from .backend import Tx
from .migrations import WORDS
from .records import OUTCOME_COLUMNS

__all__ = ["CODES", "HISTORY_CODES", "HISTORY_COLUMNS", "HISTORY_VALUES", "KNOWN_WORDS",
           "OUTCOME_ID", "STARTED_IT",
           "add_words", "finish_writes", "progress", "single_statement", "step_insert",
           "step_suffix",
           "step_update", "word"]

HISTORY_COLUMNS = ("outcome, step, at, attempt, fence, actor, kind, from_state, to_state,"
                   " reason")
"""``rs_history``'s columns as writers fill them (migration 11): the outcome by its id,
the step by what its key adds to the outcome's (:func:`step_suffix`), the attempt by
its number, and the actor empty when it is that attempt."""
OUTCOME_ID = "(SELECT id FROM rs_outcomes WHERE key = ?)"
"""The id of the outcome with the key given, as a history row's value."""


def word(expr: str = "?") -> str:
    """The code ``rs_words`` gives the word ``expr`` (SQL: a parameter, a column, a
    literal): how a history row stores its kind and states (migration 12)."""
    return f"(SELECT code FROM rs_words WHERE word = {expr})"


HISTORY_VALUES = f"({OUTCOME_ID}, ?, ?, ?, ?, ?, {word()}, {word()}, {word()}, ?)"
"""One history row's values for :data:`HISTORY_COLUMNS`, the outcome by its key and the
kind and states as words; a reason of ``NULL`` is the row's usual one (see
:data:`STARTED_IT`)."""
CODES = {w: code for code, w in enumerate(WORDS)}
"""The code of each word every ledger of schema 12 or later has (:data:`WORDS`)."""
KNOWN_WORDS = frozenset(CODES)
HISTORY_CODES = f"({OUTCOME_ID}, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
"""One history row's values as the engine writes them: the kind and states given as
their codes (:func:`codes`), no lookup in the statement."""


def add_words(tx: Tx, words: Iterable[str]) -> dict[str, int]:
    """Give each of ``words`` that ``rs_words`` lacks a code of its own, from 1000 on (a
    kind or state :data:`KNOWN_WORDS` does not hold: an older export, an edit); the
    codes of ``words``."""
    asked = set(words)
    new = sorted(asked - KNOWN_WORDS)
    if not new:
        return CODES
    known = {str(r["word"]): int(r["code"]) for r in tx.rows(
        f"SELECT word, code FROM rs_words WHERE word IN ({', '.join('?' * len(new))})",
        tuple(new))}
    row = tx.one("SELECT MAX(code) AS top FROM rs_words")
    code = max(999, int(row["top"]) if row and row["top"] is not None else 0)
    for w in new:
        if w not in known:
            code += 1
            tx.run("INSERT INTO rs_words (code, word) VALUES (?, ?)", (code, w))
            known[w] = code
    return {**CODES, **known}


_OUTCOME, _STEP = CODES["outcome"], CODES["step"]
_PREVIOUS = word("COALESCE(w.previous_state, '')")
STARTED_IT = "'attempt ' || {} || ' started it'"
"""The reason of a step's first move by an attempt, as SQL of the attempt's number: a
history row with that reason stores ``NULL`` instead, which ``rs_events`` reads back as
this text (migration 12)."""
#: true while the attempt (the last three parameters: key, fence, attempt id) holds
#: the outcome's current fencing token
_FENCED = ("EXISTS (SELECT 1 FROM rs_outcomes WHERE key = ? AND fence = ?"
           " AND current_attempt = ?)")


def step_suffix(outcome_key: str, step_key: str) -> str:
    """What ``step_key`` adds to its outcome's key (``/send``, ``//send/item``): how a
    history row names its step; empty for a row about no step."""
    if not step_key:
        return ""
    if not step_key.startswith(outcome_key) or len(step_key) == len(outcome_key):
        raise ValueError(f"step key {step_key!r} is not one of outcome {outcome_key!r}")
    return step_key[len(outcome_key):]


@functools.lru_cache(maxsize=256)
def step_insert(columns: tuple[str, ...]) -> str:
    """Create the step, fenced; nothing if it already exists (see the row count).

    Parameters: the columns' values, then the fence (key, fence, attempt id).
    """
    return (f"INSERT INTO rs_steps ({', '.join(columns)}) SELECT {', '.join('?' * len(columns))}"
            f" WHERE {_FENCED} ON CONFLICT (step_key) DO NOTHING")


def _assignments(columns: tuple[str, ...], count_try: bool) -> str:
    # SET sees the old row: previous_state keeps the state the step moves from
    assign = ", ".join(["previous_state = rs_steps.state", *(f"{c} = ?" for c in columns)])
    return assign + (", tries = rs_steps.tries + 1" if count_try else "")


@functools.lru_cache(maxsize=256)
def step_update(columns: tuple[str, ...], sources: int, count_try: bool) -> str:
    """Move an existing step, fenced, only from one of ``sources`` states.

    Parameters: the columns' values, the step key, the source states, then
    the fence (see the row count).
    """
    return (f"UPDATE rs_steps SET {_assignments(columns, count_try)} WHERE step_key = ?"
            f" AND state IN ({', '.join('?' * sources)}) AND {_FENCED}")


@functools.lru_cache(maxsize=16)
def progress(sources: int) -> tuple[str, str]:
    """Move the outcome's progress mark forward: its history row, then the move.

    The history row is written first, from the outcome's state before the
    move; both statements apply only when that state is one of ``sources``.
    Parameters of the first: time, attempt number, fence, actor, the new state's code,
    key, sources; of the second: new state, time, key, sources.
    """
    marks = ", ".join("?" * sources)
    return (f"INSERT INTO rs_history ({HISTORY_COLUMNS}) SELECT id, '', ?, ?, ?, ?,"
            f" {_OUTCOME}, {word('rs_outcomes.state')}, ?, ''"
            f" FROM rs_outcomes WHERE key = ? AND state IN ({marks})",
            "UPDATE rs_outcomes SET state = ?, reason = '', updated_at = ?"
            f" WHERE key = ? AND state IN ({marks})")


@functools.lru_cache(maxsize=256)
def single_statement(
    now: str,
    insert: tuple[str, ...] | None,
    update: tuple[str, ...] | None,
    sources: int,
    count_try: bool,
    progress_sources: int,
    finish_from: int = 0,
) -> str:
    """The whole move as one statement; ``now`` is the database clock as an expression.

    Parameters, in order: outcome key, fence, attempt id (the fence check);
    the inserted columns' values (when ``insert``); the updated columns'
    values, the step key and the ``sources`` states (when ``update``); the
    history row's attempt number, actor, the code of the step's new state and the
    attempt number again; and, when ``progress_sources``,
    the outcome's new state, the states it may move from, then the attempt
    number, the actor and the new state's code for the outcome's history row.
    The result is one row (the state the step moved from, ``NULL`` when it
    was created), or none.

    ``finish_from`` (a record, :meth:`~retrysafe.ledger.core.LedgerCore.record_and_finish`):
    the attempt is finished ``done`` and accepted by the same statement when the step
    moved, the outcome is in one of ``finish_from`` states and every other step of it is
    ``done`` with no artifact (:func:`finish_writes`, after the step's history row). More
    parameters, after the move's: those states, the step key, the ``done`` step state,
    then :func:`finish_writes`'. The result then also holds the finished outcome's
    columns (``NULL`` when it was not finished).
    """
    parts = ["f AS (SELECT id, key, state FROM rs_outcomes"
             " WHERE key = ? AND fence = ? AND current_attempt = ? FOR UPDATE)"]
    written = []
    if insert is not None:
        values = ", ".join(now if c in ("created_at", "updated_at") else "?" for c in insert)
        parts.append(f"i AS (INSERT INTO rs_steps ({', '.join(insert)}) SELECT {values} FROM f"
                     " ON CONFLICT (step_key) DO NOTHING RETURNING *)")
        written.append("SELECT * FROM i")
    if update is not None:
        assign = _assignments(update, count_try).replace("updated_at = ?", f"updated_at = {now}")
        # a step that did not exist when the statement began cannot be updated by it:
        # an insert above and this update never both write
        parts.append(f"u AS (UPDATE rs_steps SET {assign} FROM f WHERE step_key = ?"
                     f" AND rs_steps.state IN ({', '.join('?' * sources)}) RETURNING rs_steps.*)")
        written.append("SELECT * FROM u")
    parts.append(f"w AS ({' UNION ALL '.join(written)})")
    parts.append(f"e AS (INSERT INTO rs_history ({HISTORY_COLUMNS}) SELECT f.id,"
                 f" substr(w.step_key, length(w.outcome_key) + 1), {now}, ?, w.fence, ?,"
                 f" {_STEP}, {_PREVIOUS},"
                 f" ?, NULLIF(w.reason, {STARTED_IT.format('CAST(? AS TEXT)')})"
                 " FROM w, f RETURNING id)")
    if progress_sources:
        # progress marks only move forward (running -> generated -> delivered)
        parts.append(f"o AS (UPDATE rs_outcomes SET state = ?, reason = '', updated_at = {now}"
                     " FROM f WHERE rs_outcomes.key = f.key AND EXISTS (SELECT 1 FROM w)"
                     f" AND f.state IN ({', '.join('?' * progress_sources)})"
                     " RETURNING f.key AS key, f.state AS old)")
        # reading e, the outcome's row is written after the step's (and takes the next
        # id), as on SQLite: the order of a statement's writes is otherwise the server's
        parts.append(f"oe AS (INSERT INTO rs_history ({HISTORY_COLUMNS}) SELECT f.id, '',"
                     f" {now}, ?, w.fence, ?, {_OUTCOME}, {word('o.old')}, ?, ''"
                 " FROM o, w, f, e)")
    if not finish_from:
        return "WITH " + ",\n".join(parts) + "\nSELECT previous_state FROM w"
    assert not progress_sources  # (the finish moves the outcome: no mark on the way)
    marks = ", ".join("?" * finish_from)
    parts.append(
        # (f's row as the statement began: the step it moved is skipped, w says it moved)
        "c AS (SELECT f.id, f.key, f.state, k.reason FROM f JOIN rs_outcomes k ON k.id = f.id"
        f" WHERE EXISTS (SELECT 1 FROM w WHERE COALESCE(w.artifact, '') = '')"
        f" AND f.state IN ({marks}) AND NOT EXISTS (SELECT 1 FROM rs_steps"
        " WHERE outcome_key = f.key AND step_key <> ? AND (state <> ?"
        " OR COALESCE(artifact, '') <> '')))")
    # reading e, the finish's rows are written after the step's (and take later ids)
    parts += finish_writes(now, "c", after="e")
    return ("WITH " + ",\n".join(parts) + "\nSELECT w.previous_state, "
            + ", ".join(f"fo.{c}" for c in OUTCOME_COLUMNS) + " FROM w LEFT JOIN fo ON TRUE")


def finish_writes(now: str, gate: str, after: str = "") -> list[str]:
    """The writes of an attempt's finish as ``done`` and accepted, as ``WITH`` clauses
    ``fa`` (the attempt), ``fo`` (the outcome, its row returned) and ``fh`` (the two
    history rows: the attempt's; the outcome's when its state or reason changes), made
    only while the clause ``gate`` holds the outcome's row (its ``id``, ``key``,
    ``state`` and ``reason``, locked); the history rows are written after the clause
    ``after``, when given. Parameters: the attempt's new state and result, its id; the
    outcome's new state, reason and accepted attempt; the attempt's number and fence; the
    attempt row's kind, from, to and reason; the outcome row's kind and to, its reason;
    the outcome's new state and reason again."""
    return [
        f"fa AS (UPDATE rs_attempts SET state = ?, result = ?, ended_at = {now} FROM {gate}"
        " WHERE rs_attempts.id = ? RETURNING rs_attempts.id)",
        f"fo AS (UPDATE rs_outcomes SET state = ?, reason = ?, cause = '', updated_at = {now},"
        f" current_attempt = NULL, accepted_attempt = ? FROM {gate}, fa"
        f" WHERE rs_outcomes.key = {gate}.key RETURNING rs_outcomes.*)",
        f"fh AS (INSERT INTO rs_history ({HISTORY_COLUMNS})"
        f" SELECT {gate}.id, '', {now}, ?, ?, '', v.kind, v.frm, v.too, v.reason"
        f" FROM {gate}, fa{f', {after}' if after else ''}, LATERAL (VALUES (1, ?, ?, ?, ?),"
        f" (2, ?, {word(f'{gate}.state')}, ?, ?)) AS v (n, kind, frm, too, reason)"
        f" WHERE v.n = 1 OR {gate}.state <> ? OR {gate}.reason <> ? ORDER BY v.n)"]
