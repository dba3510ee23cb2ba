"""The ledger: outcomes, attempts, steps and their history, with every rule.

Each public method is one transaction. Every write made on behalf of an
attempt first locks the outcome row and compares the attempt's fencing token
with the outcome's current one *in that same transaction*, so an attempt that
lost its lease (a zombie woken from SIGSTOP, a worker on a host whose clock is
wrong) can never write again. Lease expiry is judged by the database's clock.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import (
    AttemptNotActive,
    Busy,
    InvalidInput,
    SchemaTooNew,
    StaleAttempt,
    UnknownOutcome,
    command_line,
    unblock_command,
)
from ..evidence import from_column, to_column
from ..states import (
    OUTCOME_TRANSITIONS,
    PROGRESS_MARKS,
    STEP_TRANSITIONS,
    AttemptState,
    BlockCause,
    ClaimStatus,
    OutcomeState,
    StepState,
    can_move,
)
from . import moves
from .backend import Backend, Tx
from .migrations import MIGRATIONS, SCHEMA_TABLE, SCHEMA_VERSION, render, statements
from .records import (
    OUTCOME_COLUMNS,
    STEP_COLUMNS,
    STEP_WIDTH,
    AttemptRecord,
    Claim,
    Event,
    Holder,
    OutcomeRecord,
    StepRecord,
    attempt_from_row,
    dumps,
    event_from_row,
    loads_map,
    outcome_from_row,
    outcome_from_values,
    step_from_row,
    step_from_values,
)

__all__ = ["Intent", "LedgerCore", "Liveness", "StepAnswer", "lease_only"]

Liveness = Callable[[AttemptRecord, list[Holder]], tuple[bool | None, str]]
"""Answers "does anything of this attempt still run?" given the attempt and the
runners of its running steps: ``True`` (alive: never take it over), ``False``
(known gone: take it over now) or ``None`` (cannot tell: the lease decides),
with what runs or why not (:func:`retrysafe.process.attempt_liveness`)."""


def lease_only(_attempt: AttemptRecord, _runners: list[Holder]) -> tuple[bool | None, str]:
    """The liveness that never knows: only the lease decides."""
    return None, ""

_O, _S = OutcomeState, StepState


@functools.lru_cache(maxsize=256)
def _sources(to: str, allowed: tuple[str | None, ...] | None) -> tuple[str, ...]:
    """The states a step may move to ``to`` from: the expected ones that are legal."""
    pool = STEP_TRANSITIONS if allowed is None else allowed
    return tuple(sorted(str(s) for s in pool
                        if s is not None and can_move(STEP_TRANSITIONS, s, to)))


_RUNNING = _S.RUNNING.value
#: the columns a new step gets besides its changes
_INSERT_FIXED = ("step_key", "outcome_key", "name", "item", "kind", "tries", "created_at",
                 "updated_at")

@functools.lru_cache(maxsize=16)
def _progress_sources(outcome_state: str | None) -> tuple[str, ...]:
    """The outcome states that ``outcome_state`` (a progress mark) moves the outcome from."""
    if not outcome_state:
        return ()
    return tuple(s.value for s in PROGRESS_MARKS[:PROGRESS_MARKS.index(_O(outcome_state))])


_STEP_FIELDS = frozenset(
    {
        "evidence",
        "artifact",
        "checksum",
        "check_cmd",
        "connector",
        "fingerprint",
        "reason",
        "approved_by",
        "effect_class",
    }
)


# the steps' columns, then the outcome's: records are built by position
_OUTCOME_AND_STEPS = (
    "SELECT " + ", ".join(f"s.{c}" for c in STEP_COLUMNS) + ", "
    + ", ".join(f"o.{c}" for c in OUTCOME_COLUMNS)
    + " FROM rs_outcomes o LEFT JOIN rs_steps s ON s.outcome_key = o.key WHERE o.key = ?")


_STEP_ANSWER = (
    "SELECT o.state, o.job, o.params, s.kind, s.evidence, s.fingerprint FROM rs_outcomes o"
    " LEFT JOIN rs_steps s ON s.step_key = ? AND s.outcome_key = o.key WHERE o.key = ?")
"""What a re-run of one effect needs to know (:meth:`LedgerCore.step_answer`)."""


class StepAnswer(NamedTuple):
    """An outcome's state, job and parameters, and one of its steps' kind, evidence (as
    :func:`~retrysafe.evidence.from_column` reads it) and payload fingerprint, each
    ``None`` when the outcome has no such step."""

    state: str
    job: str
    params: dict[str, str]
    kind: str | None
    evidence: str | None
    fingerprint: str | None


def _outcome_and_steps(rows: Sequence[Sequence[Any]]) -> tuple[OutcomeRecord, list[StepRecord]]:
    """The outcome and its steps from the rows :data:`_OUTCOME_AND_STEPS` reads (at least
    one: a step's columns are NULL on the row of an outcome without steps)."""
    return (outcome_from_values(rows[0][STEP_WIDTH:]),
            [step_from_values(r) for r in rows if r[0] is not None])


def new_attempt_id() -> str:
    """80 random bits as 20 hex digits: unique among a ledger's attempts (its primary
    key would refuse a repeat), and 12 bytes shorter than a uuid in every row naming it."""
    return os.urandom(10).hex()


def _event(tx: Tx, key: str, *, kind: str, to: str, frm: str = "", step_key: str = "",
           attempt: AttemptRecord | None = None, actor: str = "",
           reason: str | None = "") -> tuple[Any, ...]:
    """One history row's values, in :data:`moves.HISTORY_COLUMNS` order (the outcome
    by its key, which the insert turns into its id; the actor empty when it is the
    attempt itself; a reason of None the row's usual one, see :data:`moves.HISTORY_VALUES`)."""
    if attempt is not None and actor == f"attempt-{attempt.number}":
        actor = ""
    return (key, moves.step_suffix(key, step_key), tx.now, attempt.number if attempt else None,
            attempt.fence if attempt else 0, actor or ("" if attempt else "retrysafe"),
            kind, frm, to, reason)


def _active_attempt(attempt_id: str, key: str, number: int, fence: int, holder: Holder,
                    lease_expires: float, context: Mapping[str, str] | None,
                    started_at: float) -> AttemptRecord:
    """An attempt as a claim writes it, as a read of its row would give it (no trigger
    writes ``rs_attempts``), so the claim need not read it back."""
    return AttemptRecord(
        id=attempt_id, outcome_key=key, number=number, fence=fence,
        state=AttemptState.ACTIVE.value, result="", holder=holder,
        lease_expires=float(lease_expires), context={str(k): str(v) for k, v in
                                                     (context or {}).items()},
        started_at=float(started_at), ended_at=None)


_TO_DONE = tuple(s.value for s in _O if s != _O.DONE and can_move(OUTCOME_TRANSITIONS, s, _O.DONE))
"""the states an outcome may be ``done`` from"""


@functools.lru_cache(maxsize=16)
def _claim_new_sql(now: str, lazy: str = "", read: bool = False,
                   intent: tuple[str, ...] | None = None) -> str:
    """A new outcome, claimed by attempt 1, as one statement (a server's one-trip claim,
    :meth:`LedgerCore.claim`): the outcome inserted unless its key is taken, its attempt
    and the two history rows the claim writes (attempt active, planned -> running), all
    from the inserted row, so nothing is written when the key was taken (a key found
    taken is not even tried: no row is formed, no id drawn). ``lazy``: the
    backend's :attr:`~retrysafe.ledger.backend.Backend.lazy_commit_sql`, evaluated with
    the result so the statement's own commit does not wait for the disk. Parameters: the
    key, job, params, state and attempt id; the attempt's state, holder (host, pid,
    start) and lease seconds and context; the codes of the two history rows (kind, from,
    to). The result: the outcome's :data:`OUTCOME_COLUMNS` and the lease's end, or no
    row.

    ``read``: a key that is taken is read instead, in the same statement (the key once
    more as the last parameter): each row :data:`STEP_COLUMNS` and then the outcome's
    columns and the lease's end, as :data:`_OUTCOME_AND_STEPS` reads them, the steps'
    columns NULL on the claimed row and the lease's end NULL on a row read (the two are
    told apart by it). A key another claim inserted after the statement began is
    neither claimed nor read: no row.

    ``intent``: the claimed attempt's first step is written ``running`` too (its intent,
    as :meth:`LedgerCore.move_step` writes it, with these columns after
    :data:`_INSERT_FIXED`; its history row after the claim's two), and the statement
    commits durably (``lazy`` is not given). More parameters, before the read's key:
    the step key, name, item and kind, the columns' values; the step row's kind, from
    and to."""
    outcome = ", ".join(f"o.{c}" for c in OUTCOME_COLUMNS)
    step = ""
    if intent is not None:
        assert not lazy  # (an intent is written before an effect: it waits for the disk)
        step = (
            f",\nsi AS (INSERT INTO rs_steps ({', '.join(_INSERT_FIXED + intent)})"
            f" SELECT ?, o.key, ?, ?, ?, 1, o.created_at, o.created_at, {', '.join('?' * len(intent))}"
            " FROM o RETURNING step_key),\n"
            # reading h, the step's history row is written after the claim's (a later id)
            f"sh AS (INSERT INTO rs_history ({moves.HISTORY_COLUMNS})"
            " SELECT o.id, substr(si.step_key, length(o.key) + 1), o.created_at, 1, 1, '',"
            " ?, ?, ?, NULL FROM o, si, (SELECT count(*) FROM h) AS hh)")
    return (
        "WITH o AS (INSERT INTO rs_outcomes (key, job, params, state, fence, attempts,"
        " current_attempt, created_at, updated_at) SELECT * FROM (VALUES (?, ?, ?, ?, 1, 1, ?,"
        f" {now}, {now})) v (key) WHERE NOT EXISTS (SELECT 1 FROM rs_outcomes t"
        " WHERE t.key = v.key) ON CONFLICT (key) DO NOTHING RETURNING *),\n"
        "a AS (INSERT INTO rs_attempts (id, outcome_key, number, fence, state, holder_host,"
        " holder_pid, holder_started, lease_expires, context, started_at)"
        " SELECT o.current_attempt, o.key, 1, 1, ?, ?, ?, ?, o.created_at + ?, ?, o.created_at"
        " FROM o RETURNING lease_expires),\n"
        f"h AS (INSERT INTO rs_history ({moves.HISTORY_COLUMNS})"
        " SELECT o.id, '', o.created_at, 1, 1, '', v.kind, v.frm, v.too, v.reason"
        " FROM o, (VALUES (1, ?, ?, ?, NULL), (2, ?, ?, ?, '')) AS v (n, kind, frm, too, reason)"
        " ORDER BY v.n" + (" RETURNING id)" if intent is not None else ")") + step
        + (f",\nz AS ({lazy})\n" if lazy else "\n")
        + ("SELECT " + "NULL, " * STEP_WIDTH if read else "SELECT ")
        + f"{outcome}, a.lease_expires FROM o, a{', z' if lazy else ''}"
        + ("\nUNION ALL\nSELECT " + ", ".join(f"s.{c}" for c in STEP_COLUMNS) + ", "
           + ", ".join(f"k.{c}" for c in OUTCOME_COLUMNS) + ", NULL FROM rs_outcomes k"
           " LEFT JOIN rs_steps s ON s.outcome_key = k.key"
           " WHERE k.key = ? AND NOT EXISTS (SELECT 1 FROM o)" if read else ""))


_END_ATTEMPT = "UPDATE rs_attempts SET state = ?, result = ?, ended_at = ? WHERE id = ?"
"""An attempt ended: its state, result, end time and id."""

_FINISH_CLEAR_HISTORY = (
    f"INSERT INTO rs_history ({moves.HISTORY_COLUMNS})"
    " SELECT o.id, '', ?, ?, ?, '', v.kind,"
    f" CASE v.n WHEN 1 THEN v.frm ELSE {moves.word('o.state')} END, v.too, v.reason"
    " FROM rs_outcomes o, (SELECT 1 AS n, ? AS kind, ? AS frm, ? AS too, ? AS reason"
    " UNION ALL SELECT 2, ?, NULL, ?, '') AS v"
    " WHERE o.key = ? AND o.fence = ? AND o.current_attempt = ?"
    f" AND o.state IN ({', '.join('?' * len(_TO_DONE))})"
    " AND EXISTS (SELECT 1 FROM rs_steps WHERE outcome_key = o.key)"
    " AND NOT EXISTS (SELECT 1 FROM rs_steps WHERE outcome_key = o.key"
    " AND (state <> ? OR COALESCE(artifact, '') <> '')) ORDER BY v.n")
"""Close-out's shortcut on SQLite (:meth:`LedgerCore.finish_clear`): the two history
rows of a finish as ``done`` (the attempt's, then the outcome's from its state now),
written only while the attempt holds the outcome's fence, the outcome may be ``done``,
some step is recorded and every step is ``done`` without an artifact. Parameters: the
time, the attempt's number and fence; the attempt row's kind, from, to and reason; the
outcome row's kind and to; the key, fence and attempt id; the states it may be done
from; the ``done`` step state."""


@functools.lru_cache(maxsize=8)
def _finish_done_sql(now: str, unread: bool = False) -> str:
    """An attempt's finish as ``done`` and accepted, as one statement (a server's
    one-trip finish, :meth:`LedgerCore.finish`): only while the attempt holds the
    outcome's fence, the outcome may be ``done`` and none of its steps is open, the
    outcome row locked; the attempt finished, the outcome done, the history rows (the
    attempt's; the outcome's when its state or reason changes). Parameters: the key,
    fence and attempt id; the states it may be done from; the key again and the
    ``done`` step state; the attempt's new state and result, its id; the outcome's new
    state, reason and accepted attempt; the attempt's number and fence; the attempt
    row's kind, from, to and reason; the outcome row's kind and to, its reason; then the
    outcome's new state and reason again. The result: the outcome's
    :data:`OUTCOME_COLUMNS` as written, or no row. ``unread``: close-out has not read
    the steps, so a step with an accepted artifact (whose file close-out checks) stands
    in the way too."""
    outcome = ", ".join(f"fo.{c}" for c in OUTCOME_COLUMNS)
    marks = ", ".join("?" * len(_TO_DONE))
    artifact = " OR COALESCE(artifact, '') <> ''" if unread else ""
    return (
        "WITH f AS (SELECT id, key, state, reason FROM rs_outcomes WHERE key = ? AND fence = ?"
        f" AND current_attempt = ? AND state IN ({marks}) AND NOT EXISTS (SELECT 1 FROM rs_steps"
        f" WHERE outcome_key = ? AND (state <> ?{artifact})) FOR UPDATE),\n"
        + ",\n".join(moves.finish_writes(now, "f"))
        + f"\nSELECT {outcome} FROM fo")


def _step_changes(to: str, attempt_id: str, fence: int, reason: str, cause: str,
                  runner: Holder, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The columns a step move to ``to`` writes (:meth:`LedgerCore.move_step`): its state,
    attempt, fence, reason and cause, the runner when it moves to ``running``, then
    ``fields`` (evidence as its column holds it)."""
    changes: dict[str, Any] = {"state": to, "attempt_id": attempt_id, "fence": fence,
                               "reason": reason, "cause": cause}
    if to == _RUNNING:
        changes["runner_host"], changes["runner_pid"], changes["runner_started"] = runner
    changes.update(fields)
    if "evidence" in changes:  # named fields ride along as JSON (evidence.py)
        changes["evidence"] = to_column(changes["evidence"])
    return changes


class Intent(NamedTuple):
    """A step's intent written with the claim of a new outcome
    (:meth:`LedgerCore.claim_or_read`): its key, name, item, kind and the fields
    :meth:`LedgerCore.move_step` would record with it (its class, check, connector,
    fingerprint)."""

    step_key: str
    name: str
    item: str
    kind: str
    fields: Mapping[str, Any]


def _finish_params(attempt: AttemptRecord, reason: str) -> tuple[Any, ...]:
    """The parameters of :func:`moves.finish_writes <retrysafe.ledger.moves.finish_writes>`
    for ``attempt`` finished ``done`` with ``reason``."""
    code, done = moves.CODES, _O.DONE.value
    active, finished = AttemptState.ACTIVE.value, AttemptState.FINISHED.value
    return (finished, done, attempt.id,
            done, reason, attempt.id,
            attempt.number, attempt.fence,
            code["attempt"], code[active], code[finished], f"result {done}",
            code["outcome"], code[done], reason,
            done, reason)


class LedgerCore:
    """Outcomes, attempts, steps and history as attempts change them; the human
    decisions are in :class:`retrysafe.ledger.decisions.Ledger`."""

    def __init__(self, backend: Backend, *, auto_migrate: bool = True) -> None:
        self.backend = backend
        # a read first: most opens find the schema current and write nothing
        if self.check_schema() < SCHEMA_VERSION and auto_migrate:
            self.migrate()

    # --- lifecycle ------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.backend.display_url()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> LedgerCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        with self.backend.transaction(write=False) as tx:
            if not self.backend.has_table(tx, "rs_schema"):
                return 0
            return self._version(tx)

    def _version(self, tx: Tx) -> int:
        row = tx.one("SELECT MAX(version) AS v FROM rs_schema")
        return int(row["v"]) if row and row["v"] is not None else 0

    def check_schema(self) -> int:
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"ledger {self.url} has schema version {version}, this retrysafe knows "
                f"up to {SCHEMA_VERSION}: upgrade retrysafe; the ledger was not touched"
            )
        return version

    def migrate(self) -> list[int]:
        """Apply pending migrations; returns the versions applied."""
        applied: list[int] = []
        with self.backend.migration_lock() as tx:
            tx.run(render(self.backend, SCHEMA_TABLE))
            current = self._version(tx)
            if current > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"ledger {self.url} has schema version {current}, this retrysafe knows "
                    f"up to {SCHEMA_VERSION}: upgrade retrysafe; the ledger was not touched"
                )
            for version, name, script in MIGRATIONS:
                if version <= current:
                    continue
                for stmt in statements(self.backend, script):
                    tx.run(stmt)
                tx.run(
                    "INSERT INTO rs_schema (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, tx.now),
                )
                applied.append(version)
        return applied

    # --- history --------------------------------------------------------------

    def _log(
        self,
        tx: Tx,
        key: str,
        *,
        kind: str,
        to: str,
        frm: str = "",
        step_key: str = "",
        attempt: AttemptRecord | None = None,
        actor: str = "",
        reason: str = "",
    ) -> None:
        self._write_events(tx, [_event(tx, key, kind=kind, to=to, frm=frm, step_key=step_key,
                                       attempt=attempt, actor=actor, reason=reason)])

    @staticmethod
    def _write_events(tx: Tx, events: list[tuple[Any, ...]]) -> None:
        """History rows, in order, in one statement."""
        if events:
            # the kind and states by their codes (a word this version does not write
            # gets a code of its own)
            code = moves.CODES
            if not moves.KNOWN_WORDS.issuperset(w for e in events for w in e[6:9]):
                code = moves.add_words(tx, (w for e in events for w in e[6:9]))
            values = ", ".join([moves.HISTORY_CODES] * len(events))
            tx.run(f"INSERT INTO rs_history ({moves.HISTORY_COLUMNS}) VALUES {values}",
                   tuple(v for e in events for v in (*e[:6], code[e[6]], code[e[7]],
                                                      code[e[8]], e[9])))

    # --- claims and leases ---------------------------------------------------

    def _lock_outcome(self, tx: Tx, key: str) -> OutcomeRecord | None:
        row = tx.one(f"SELECT * FROM rs_outcomes WHERE key = ?{self.backend.lock_clause}", (key,))
        return outcome_from_row(row) if row else None

    def _set_outcome(
        self,
        tx: Tx,
        out: OutcomeRecord,
        state: str,
        reason: str,
        *,
        cause: str = "",
        attempt: AttemptRecord | None = None,
        actor: str = "",
        extra: Mapping[str, Any] | None = None,
        events: list[tuple[Any, ...]] | None = None,
        written: bool = False,
    ) -> OutcomeRecord:
        """Move the outcome (a legal transition only) and log it; ``cause`` is why
        it is blocked (empty for any other state). Returns ``out`` as the update left
        it: ``out`` must be the row as this transaction holds it (no trigger writes
        ``rs_outcomes``), so it need not be read again. With ``events`` the history
        row is appended there for the caller to write with its others; ``written``:
        the row already holds the move (a new outcome inserted in it), only log it."""
        if not can_move(OUTCOME_TRANSITIONS, out.state, state):
            raise InvalidInput(
                f"outcome {out.key}: cannot move from {out.state} to {state}",
                key=out.key,
                state=out.state,
            )
        sets = {"state": state, "reason": reason, "cause": cause, "updated_at": tx.now,
                **(extra or {})}
        if not written:
            cols = ", ".join(f"{c} = ?" for c in sets)
            tx.run(f"UPDATE rs_outcomes SET {cols} WHERE key = ?", (*sets.values(), out.key))
        if state != out.state or reason != out.reason:
            event = _event(tx, out.key, kind="outcome", frm=out.state, to=state, attempt=attempt,
                           actor=actor, reason=reason)
            if events is None:
                self._write_events(tx, [event])
            else:
                events.append(event)
        return out._replace(**{**sets, "state": str(state), "reason": str(reason),
                               "cause": str(cause)})

    def claim(
        self,
        key: str,
        *,
        job: str,
        params: Mapping[str, str],
        holder: Holder,
        lease_seconds: float,
        max_attempts: int,
        liveness: Liveness = lease_only,
        context: Mapping[str, str] | None = None,
        taken: bool = False,
        attempt_id: str | None = None,
    ) -> Claim:
        """Start attempt N+1 at ``key`` unless it is done, blocked, or held by a live attempt.

        The current attempt is superseded (its fencing token stops being current,
        its ``running`` steps become ``unknown``) when ``liveness`` knows nothing
        of it runs any more, or, when ``liveness`` cannot tell (another host, an
        agent's lease), when its lease expired by the database's clock. An
        attempt ``liveness`` sees running is never taken over, whatever the
        clocks say; a human can still break its lease (:meth:`break_lease`).

        The claim commits without a sync of its own: the attempt's first intent
        (synced, before any effect) makes it durable, and a claim a power cut
        loses started nothing outside the ledger.

        ``attempt_id``: the id the next attempt gets (the caller's own, so that it can
        say its process holds that attempt before the claim commits); a new one if None.
        """
        attempt_id = attempt_id or new_attempt_id()
        # a one-trip claim found the key taken (``taken``: the caller's already did,
        # :meth:`claim_or_read`)
        if max_attempts >= 1 and self.backend.single_statement_moves and not taken:
            started = self._claim_new(key, job, params, holder, lease_seconds, context,
                                      attempt_id)
            if started is not None:
                return started
            taken = True
        with self.backend.transaction(durable=False) as tx:
            # A new outcome is inserted already claimed by attempt 1 (its history says
            # planned -> running, as for any claim); an existing one is read and locked.
            if taken:
                made = None
            elif max_attempts >= 1:
                # the clock as SQL where the database has one: this statement needs no
                # value of tx.now, so a server's BEGIN goes out with it (one round trip)
                now_sql = self.backend.now_sql
                made = tx.one(
                    "INSERT INTO rs_outcomes (key, job, params, state, fence, attempts,"
                    " current_attempt, created_at, updated_at) VALUES (?, ?, ?, ?, 1, 1, ?,"
                    f" {now_sql or '?'}, {now_sql or '?'}) ON CONFLICT (key) DO NOTHING"
                    " RETURNING *",
                    (key, job, dumps(dict(params)), _O.RUNNING.value, attempt_id,
                     *(() if now_sql else (tx.now, tx.now))))
                if made:
                    planned = outcome_from_row({**made, "state": _O.PLANNED.value, "fence": 0,
                                                "attempts": 0, "current_attempt": None})
                    with tx.final_writes():  # written, not read: one round trip on a server
                        attempt, claimed = self._start_attempt(
                            tx, planned, holder, lease_seconds, context, attempt_id=attempt_id,
                            written=True)
                    return Claim(ClaimStatus.STARTED, claimed, attempt=attempt)
            else:  # a budget of none blocks even a new outcome: it is inserted planned
                made = tx.one(
                    "INSERT INTO rs_outcomes (key, job, params, state, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING *",
                    (key, job, dumps(dict(params)), _O.PLANNED.value, tx.now, tx.now))
            out = outcome_from_row(made) if made else self._lock_outcome(tx, key)
            assert out is not None
            if out.job != job:
                raise InvalidInput(
                    f"outcome {key} belongs to job {out.job!r}, not {job!r}", key=key, state=out.state
                )
            if out.state == _O.DONE:
                return Claim(ClaimStatus.DONE, out)
            superseded = None
            if out.current_attempt:
                cur = self._attempt_row(tx, out.current_attempt)
                if cur and cur.state == AttemptState.ACTIVE:
                    alive, why = liveness(cur, self._runners(tx, cur))
                    expired = cur.lease_expires <= tx.now
                    if alive or (alive is None and not expired):
                        return Claim(ClaimStatus.BUSY, out, attempt=cur, reason=why)
                    self._supersede(tx, out, cur, why if alive is False else "lease expired")
                    superseded = cur
                    out = self._lock_outcome(tx, key)
                    assert out is not None
            if out.state == _O.BLOCKED:
                return Claim(ClaimStatus.BLOCKED, out, reason=out.reason, superseded=superseded)
            used = out.attempts - out.budget_base
            if used >= max_attempts:
                out = self._exhaust(tx, out, used, max_attempts)
                return Claim(ClaimStatus.BLOCKED, out, reason=out.reason, superseded=superseded)
            with tx.final_writes():  # written, not read: one round trip on a server
                attempt, out = self._start_attempt(tx, out, holder, lease_seconds, context,
                                                   attempt_id=attempt_id)
            return Claim(ClaimStatus.STARTED, out, attempt=attempt, superseded=superseded)

    def _claim_new(self, key: str, job: str, params: Mapping[str, str], holder: Holder,
                   lease_seconds: float, context: Mapping[str, str] | None,
                   attempt_id: str) -> Claim | None:
        """A server's claim of a new outcome in one round trip (one statement, committed
        on its own without waiting for the disk, planned once per connection): what
        :meth:`claim`'s insert and :meth:`_start_attempt` write, in the same rows.
        ``None``: the key is taken, and nothing was written."""
        rows = self._claim_new_rows(key, job, params, holder, lease_seconds, context,
                                    attempt_id, read=False)
        if not rows:
            return None
        return self._claimed(rows[0], key, holder, context, attempt_id)

    def _claim_new_rows(self, key: str, job: str, params: Mapping[str, str], holder: Holder,
                        lease_seconds: float, context: Mapping[str, str] | None,
                        attempt_id: str, *, read: bool,
                        intent: Intent | None = None) -> Sequence[Sequence[Any]]:
        code, active = moves.CODES, AttemptState.ACTIVE.value
        backend = self.backend
        step: tuple[Any, ...] = ()
        columns = None
        if intent is not None:
            changes = _step_changes(_RUNNING, attempt_id, 1, "attempt 1 started it", "",
                                    holder, intent.fields)
            columns = tuple(changes)
            step = (intent.step_key, intent.name, intent.item, intent.kind, *changes.values(),
                    code["step"], code[""], code[_RUNNING])
        return backend.execute_rows(
            _claim_new_sql(backend.now_sql, "" if intent else backend.lazy_commit_sql, read,
                           columns), (
                key, job, dumps(dict(params)), _O.RUNNING.value, attempt_id,
                active, holder.host, holder.pid, holder.started, lease_seconds,
                dumps(dict(context or {})), code["attempt"], code[""], code[active],
                code["outcome"], code[_O.PLANNED.value], code[_O.RUNNING.value],
                *step, *((key,) if read else ())))

    @staticmethod
    def _claimed(values: Sequence[Any], key: str, holder: Holder,
                 context: Mapping[str, str] | None, attempt_id: str) -> Claim:
        out = outcome_from_values(values[:len(OUTCOME_COLUMNS)])
        attempt = _active_attempt(attempt_id, key, 1, 1, holder, values[len(OUTCOME_COLUMNS)],
                                  context, out.created_at)
        return Claim(ClaimStatus.STARTED, out, attempt=attempt)

    def claim_or_read(
        self, key: str, *, job: str, params: Mapping[str, str], holder: Holder,
        lease_seconds: float, context: Mapping[str, str] | None = None,
        attempt_id: str | None = None, intent: Intent | None = None,
    ) -> tuple[Claim | None, OutcomeRecord | None, list[StepRecord]]:
        """A server's first look at an outcome, in one round trip: a new outcome claimed
        by attempt 1 (as :meth:`claim` claims it), else the outcome and its steps as
        :meth:`outcome_and_steps` reads them, nothing written. ``(claim, None, [])``,
        ``(None, outcome, steps)``, or ``(None, None, [])`` when another claim inserted
        the key as this one ran (read it again). Only where
        :attr:`~retrysafe.ledger.backend.Backend.single_statement_moves`; the caller
        does what it does before a claim first, and with what was read, what it does
        before :meth:`claim` (``taken=True``).

        ``intent``: a new outcome's claim writes this step's intent too, by ``holder``
        (:meth:`Engine.once <retrysafe.engine.Engine.once>`, whose first write after the
        claim it is): one round trip and one durable commit for both, which a claim alone
        does not wait for. A known outcome is read and nothing of it is written."""
        attempt_id = attempt_id or new_attempt_id()
        rows = self._claim_new_rows(key, job, params, holder, lease_seconds, context,
                                    attempt_id, read=True, intent=intent)
        if not rows:
            return None, None, []
        if rows[0][-1] is not None:  # the lease's end: claimed
            return self._claimed(rows[0][STEP_WIDTH:], key, holder, context, attempt_id), None, []
        return None, *_outcome_and_steps([r[:-1] for r in rows])

    def finish_clear(self, attempt: AttemptRecord) -> OutcomeRecord | None:
        """Close-out's shortcut: finish ``attempt`` as ``done`` and accepted when every
        step of the outcome is ``done`` and none holds an artifact to check, without
        close-out reading the steps first. On a server, durably in one round trip; on
        SQLite, in a transaction whose first statement writes only when the outcome is
        clear, not synced (as :meth:`finish` with ``durable=False``: the steps' synced
        records say what happened), and only when some step is recorded. ``None``:
        something stands in the way (then nothing was written, and close-out reads the
        steps and judges as always)."""
        if self.backend.single_statement_moves:
            return self._finish_done(attempt, "", unread=True)
        done, finished = _O.DONE.value, AttemptState.FINISHED.value
        code = moves.CODES
        with self.backend.transaction(durable=False) as tx:
            # the history rows first, from the outcome row as it stands: written only
            # while it is clear, so a count of none leaves the transaction empty
            if not tx.run(_FINISH_CLEAR_HISTORY, (
                    tx.now, attempt.number, attempt.fence,
                    code["attempt"], code[AttemptState.ACTIVE.value], code[finished],
                    f"result {done}", code["outcome"], code[done],
                    attempt.outcome_key, attempt.fence, attempt.id, *_TO_DONE, _S.DONE.value)):
                return None
            tx.run(_END_ATTEMPT,
                   (finished, done, tx.now, attempt.id))
            row = tx.one("UPDATE rs_outcomes SET state = ?, reason = '', cause = '',"
                         " updated_at = ?, current_attempt = NULL, accepted_attempt = ?"
                         " WHERE key = ? RETURNING *",
                         (done, tx.now, attempt.id, attempt.outcome_key))
            assert row is not None  # (locked since the history rows were written from it)
            return outcome_from_row(row)

    def _finish_done(self, attempt: AttemptRecord, reason: str, *,
                     unread: bool = False) -> OutcomeRecord | None:
        """A server's finish of an attempt as ``done`` in one round trip (one statement,
        committed on its own and durably, planned once per connection), when nothing
        stands in its way: the same rows :meth:`finish` writes. ``None``: something does
        (a stale attempt, an open step), and nothing was written; :meth:`finish` then
        says what."""
        rows = self.backend.execute_rows(_finish_done_sql(self.backend.now_sql, unread), (
            attempt.outcome_key, attempt.fence, attempt.id, *_TO_DONE,
            attempt.outcome_key, _S.DONE.value, *_finish_params(attempt, reason)))
        return outcome_from_values(rows[0]) if rows else None

    def record_and_finish(self, attempt: AttemptRecord, step_key: str,
                          evidence: Any) -> tuple[bool, OutcomeRecord | None]:
        """A server's record of an effect (its step ``running`` -> ``done`` with the
        evidence, fenced, as :meth:`move_step` records it, without a progress mark) and,
        in the same statement, the attempt's finish as ``done`` and accepted when nothing
        else stands in its way (as :meth:`finish_clear`): one round trip, one durable
        commit (:meth:`Engine.once <retrysafe.engine.Engine.once>`, whose effect is the
        attempt's last work). ``(False, None)``: not recorded and nothing written (a
        :meth:`move_step` says why); ``(True, None)``: recorded, not finished (close-out
        judges the steps); ``(True, outcome)``: both."""
        done = _S.DONE.value
        changes = _step_changes(done, attempt.id, attempt.fence, "", "", attempt.holder,
                                {"evidence": evidence})
        sql = moves.single_statement(self.backend.now_sql, None, (*changes, "updated_at"), 1,
                                     False, 0, len(_TO_DONE))
        rows = self.backend.execute_rows(sql, (
            attempt.outcome_key, attempt.fence, attempt.id,
            *changes.values(), step_key, _RUNNING,
            attempt.number, "", moves.CODES[done], attempt.number,
            *_TO_DONE, step_key, done, *_finish_params(attempt, "")))
        if not rows:
            return False, None
        values = rows[0][1:]
        return True, outcome_from_values(values) if values[0] is not None else None

    def _runners(self, tx: Tx, attempt: AttemptRecord) -> list[Holder]:
        """The processes running ``attempt``'s running steps."""
        return [Holder(r["runner_host"], r["runner_pid"], r["runner_started"]) for r in tx.rows(
            "SELECT runner_host, runner_pid, runner_started FROM rs_steps"
            " WHERE outcome_key = ? AND state = ? AND attempt_id = ? AND runner_host IS NOT NULL",
            (attempt.outcome_key, _S.RUNNING.value, attempt.id))]

    def _exhaust(self, tx: Tx, out: OutcomeRecord, used: int, max_attempts: int) -> OutcomeRecord:
        """Block the outcome: its attempt budget is spent; a human grants more."""
        # each command as it pastes (quoted once, by command_line), ended by ';' or the line
        reason = (f"attempts exhausted ({used} of {max_attempts}); see what failed: "
                  f"{command_line('status', out.key, kept=True)}; then grant a fresh attempt "
                  f"budget: {unblock_command(BlockCause.EXHAUSTED, out.key, kept=True)}")
        self._set_outcome(tx, out, _O.BLOCKED, reason, cause=BlockCause.EXHAUSTED)
        got = self._lock_outcome(tx, out.key)
        assert got is not None
        return got

    def _start_attempt(self, tx: Tx, out: OutcomeRecord, holder: Holder, lease_seconds: float,
                       context: Mapping[str, str] | None, *, attempt_id: str | None = None,
                       written: bool = False) -> tuple[AttemptRecord, OutcomeRecord]:
        """Attempt N+1 with the next fencing token; the outcome now points to it
        (``written``: the outcome row, just inserted, already does)."""
        number, fence = out.attempts + 1, out.fence + 1
        attempt = _active_attempt(attempt_id or new_attempt_id(), out.key, number, fence,
                                  holder, tx.now + lease_seconds, context, tx.now)
        tx.run(
            "INSERT INTO rs_attempts (id, outcome_key, number, fence, state, holder_host,"
            " holder_pid, holder_started, lease_expires, context, started_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (attempt.id, out.key, number, fence, attempt.state, holder.host, holder.pid,
             holder.started, attempt.lease_expires, dumps(attempt.context), tx.now),
        )
        # the reason, "attempt N started: <holder>", is read back from the attempt's row
        # (rs_events, migration 12): stored as NULL
        events = [_event(tx, out.key, kind="attempt", to=AttemptState.ACTIVE, attempt=attempt,
                         reason=None)]
        # generated/delivered are progress marks a new attempt resumes from.
        state = out.state if out.state in PROGRESS_MARKS else _O.RUNNING
        out = self._set_outcome(
            tx, out, state, "", attempt=attempt, events=events, written=written,
            extra={"fence": fence, "attempts": number, "current_attempt": attempt.id})
        self._write_events(tx, events)
        return attempt, out

    def _supersede(self, tx: Tx, out: OutcomeRecord, cur: AttemptRecord, why: str,
                   actor: str = "retrysafe") -> None:
        tx.run(
            _END_ATTEMPT,
            (AttemptState.SUPERSEDED.value, why, tx.now, cur.id),
        )
        self._log(tx, out.key, kind="attempt", frm=AttemptState.ACTIVE, to=AttemptState.SUPERSEDED,
                  attempt=cur, actor=actor, reason=why)
        for row in tx.rows(
            "SELECT * FROM rs_steps WHERE outcome_key = ? AND state = ? AND attempt_id = ?",
            (out.key, _S.RUNNING.value, cur.id),
        ):
            reason = f"attempt {cur.number} ended ({why}) while this step was running"
            tx.run(
                "UPDATE rs_steps SET state = ?, reason = ?, updated_at = ? WHERE step_key = ?",
                (_S.UNKNOWN.value, reason, tx.now, row["step_key"]),
            )
            self._log(tx, out.key, kind="step", step_key=row["step_key"], frm=_S.RUNNING,
                      to=_S.UNKNOWN, attempt=cur, actor=actor, reason=reason)
        tx.run("UPDATE rs_outcomes SET current_attempt = NULL WHERE key = ?", (out.key,))
        if out.state == _O.RUNNING:
            self._set_outcome(tx, out, _O.UNKNOWN, f"attempt {cur.number} ended: {why}",
                              actor=actor)

    def _attempt_row(self, tx: Tx, attempt_id: str) -> AttemptRecord | None:
        row = tx.one("SELECT * FROM rs_attempts WHERE id = ?", (attempt_id,))
        return attempt_from_row(row) if row else None

    def _fenced(self, tx: Tx, attempt: AttemptRecord,
                open_step: bool = False) -> tuple[OutcomeRecord, dict[str, Any] | None]:
        """Lock the outcome and refuse unless ``attempt`` still holds the current fence;
        with ``open_step``, also one of its steps that is not ``done`` (its name and
        state), read by the same statement."""
        if open_step:
            row = tx.one(
                "SELECT o.*, s.name AS open_name, s.state AS open_state FROM rs_outcomes o"
                " LEFT JOIN (SELECT outcome_key, name, state FROM rs_steps WHERE outcome_key = ?"
                " AND state <> ? LIMIT 1) s ON s.outcome_key = o.key"
                f" WHERE o.key = ?{self.backend.lock_clause.replace('FOR UPDATE', 'FOR UPDATE OF o')}",
                (attempt.outcome_key, _S.DONE.value, attempt.outcome_key))
            found = None
            if row is not None:
                name, state = row.pop("open_name"), row.pop("open_state")
                found = {"name": name, "state": state} if name is not None else None
            out = outcome_from_row(row) if row else None
        else:
            out, found = self._lock_outcome(tx, attempt.outcome_key), None
        if out is None:
            raise UnknownOutcome(f"no outcome {attempt.outcome_key}", key=attempt.outcome_key)
        if out.fence == attempt.fence and out.current_attempt is None:
            raise AttemptNotActive(
                f"attempt {attempt.number} of {out.key} has already finished",
                key=out.key,
                state=out.state,
            )
        if out.fence != attempt.fence or out.current_attempt != attempt.id:
            raise StaleAttempt(
                f"attempt {attempt.number} of {out.key} is stale (fencing token {attempt.fence}, "
                f"current {out.fence}): another attempt took over; this write was refused",
                key=out.key,
                state=out.state,
            )
        # No need to read the attempt row: finishing or superseding an attempt clears
        # current_attempt in the same transaction, so a match means it is active.
        return out, found

    def renew(self, attempt: AttemptRecord, lease_seconds: float) -> float:
        """Extend the lease (heartbeat); refused once the attempt is stale.

        On a server, one statement in autocommit while the attempt holds the fence
        (the outcome row locked for it): the server commits it whatever its client
        does next, so a holder frozen (SIGSTOP) or killed mid-renewal leaves no
        transaction holding the outcome row. Nothing renewed: the fenced
        transaction below says why."""
        if self.backend.single_statement_moves:
            rows = self.backend.execute_rows(
                "WITH o AS (SELECT 1 FROM rs_outcomes WHERE key = ? AND fence = ?"
                " AND current_attempt = ? FOR UPDATE)"
                f" UPDATE rs_attempts SET lease_expires = {self.backend.now_sql} + ?"
                " WHERE id = ? AND EXISTS (SELECT 1 FROM o) RETURNING lease_expires",
                (attempt.outcome_key, attempt.fence, attempt.id, lease_seconds, attempt.id))
            if rows:
                return float(rows[0][0])
        with self.backend.transaction() as tx:
            self._fenced(tx, attempt)
            expires = tx.now + lease_seconds
            tx.run("UPDATE rs_attempts SET lease_expires = ? WHERE id = ?", (expires, attempt.id))
            return expires

    def finish(
        self,
        attempt: AttemptRecord,
        state: str,
        reason: str = "",
        *,
        cause: str = "",
        accepted: bool = False,
        durable: bool = True,
    ) -> OutcomeRecord:
        """End the attempt and set the outcome's state, fenced.

        ``done`` is refused unless every step of the outcome is ``done``;
        ``cause`` says why a ``blocked`` outcome waits for a human.
        ``durable=False`` when the steps' own synced records already say what
        happened: a finish a power cut loses leaves the attempt open, and the
        next run supersedes it and closes the outcome without repeating a step.
        Not on a database that crashes alone (a server): there the holder lives
        on after the finish was lost, and while it lives no other process takes
        its attempt over, so the outcome would wait for it to exit.
        """
        durable = durable or self.backend.crashes_alone
        if (state == _O.DONE and accepted and not cause and durable
                and self.backend.single_statement_moves):
            done = self._finish_done(attempt, reason)
            if done is not None:
                return done
        with self.backend.transaction(durable=durable) as tx:
            out, s = self._fenced(tx, attempt, open_step=state == _O.DONE)
            running: list[dict[str, Any]] = []
            if state == _O.DONE:
                if s is not None:
                    raise InvalidInput(
                        f"outcome {out.key} cannot be done: step {s['name']} is {s['state']}",
                        key=out.key, step=s["name"], state=s["state"],
                    )
            else:  # done: no step is open, so none is running (read just above)
                running = tx.rows(
                    "SELECT step_key FROM rs_steps"
                    " WHERE outcome_key = ? AND state = ? AND attempt_id = ?",
                    (out.key, _S.RUNNING.value, attempt.id))
            extra: dict[str, Any] = {"current_attempt": None}
            if accepted:
                extra["accepted_attempt"] = attempt.id
            with tx.final_writes():  # written, not read: one round trip on a server
                # a step still running when its attempt ends can only be unknown now
                for row in running:
                    why = f"attempt {attempt.number} finished while this step was running"
                    tx.run("UPDATE rs_steps SET state = ?, reason = ?, updated_at = ?"
                           " WHERE step_key = ?", (_S.UNKNOWN.value, why, tx.now, row["step_key"]))
                    self._log(tx, out.key, kind="step", step_key=row["step_key"], frm=_S.RUNNING,
                              to=_S.UNKNOWN, attempt=attempt, reason=why)
                tx.run(
                    _END_ATTEMPT,
                    (AttemptState.FINISHED.value, state, tx.now, attempt.id),
                )
                events = [_event(tx, out.key, kind="attempt", frm=AttemptState.ACTIVE,
                                 to=AttemptState.FINISHED, attempt=attempt,
                                 reason=f"result {state}")]
                out = self._set_outcome(tx, out, state, reason, cause=cause, attempt=attempt,
                                        extra=extra, events=events)
                self._write_events(tx, events)
                return out

    # --- steps ------------------------------------------------------------------

    def _lock_step(self, tx: Tx, step_key: str) -> StepRecord | None:
        row = tx.one(f"SELECT * FROM rs_steps WHERE step_key = ?{self.backend.lock_clause}",
                     (step_key,))
        return step_from_row(row) if row else None

    def move_step(
        self,
        attempt: AttemptRecord,
        step_key: str,
        to: str,
        *,
        name: str,
        item: str = "",
        kind: str = "effect",
        expect: Iterable[str | None] | None = None,
        runner: Holder | None = None,
        reason: str = "",
        cause: str = "",
        outcome_state: str | None = None,
        explain: bool = True,
        **fields: Any,
    ) -> bool:
        """Move a step to ``to`` on behalf of ``attempt``, fenced, all or nothing.

        ``expect`` lists the states the step may be in now (``None`` for a step
        that does not exist yet); any other state is refused, so two processes
        racing on one step cannot both win. Moving to ``running`` records the
        ``runner`` and counts a try. ``outcome_state`` moves the outcome's
        progress mark forward (``generated``/``delivered``) in the same write.
        ``cause`` is why a ``blocked`` step waits for a human; any move clears it.

        The write is conditional on the fence and the expected state and never
        reads first; returns ``True`` when the step moved. When it changes nothing,
        the refusal says why (:class:`StaleAttempt`, :class:`Busy`,
        :class:`InvalidInput`), or, with ``explain=False``, it returns ``False``.
        """
        if fields and not _STEP_FIELDS.issuperset(fields):
            raise TypeError(f"unknown step fields {sorted(set(fields) - _STEP_FIELDS)}")
        allowed = None if expect is None else tuple(expect)
        changes = _step_changes(to, attempt.id, attempt.fence, reason, cause,
                                runner or attempt.holder, fields)
        may_insert = allowed is None or None in allowed
        sources = _sources(to, allowed)
        if not (may_insert or sources):
            written = False
        elif self.backend.single_statement_moves:
            written = self._move_in_one_statement(
                attempt, step_key, changes, name=name, item=item, kind=kind,
                may_insert=may_insert, sources=sources, outcome_state=outcome_state)
        elif outcome_state:
            written = self._move_and_mark(attempt, step_key, changes, name, item, kind,
                                          may_insert, sources, outcome_state)
        else:
            # the common case: one statement, committed on its own
            written = self._write_step(self.backend.execute, attempt, step_key, changes, name,
                                       item, kind, may_insert, sources, time.time())
        if not written and explain:
            with self.backend.transaction(write=False) as tx:
                raise self._refusal(tx, attempt, step_key, to, name, allowed)
        return written

    def _move_and_mark(self, attempt: AttemptRecord, step_key: str, changes: dict[str, Any],
                       name: str, item: str, kind: str, may_insert: bool,
                       sources: tuple[str, ...], outcome_state: str) -> bool:
        """The step write and the outcome's progress mark (its history row, then the
        move): three statements, one transaction; did the step move?"""
        progress = _progress_sources(outcome_state)
        key = attempt.outcome_key
        with self.backend.transaction() as tx:
            written = self._write_step(tx.run, attempt, step_key, changes, name, item, kind,
                                       may_insert, sources, tx.now)
            if written and progress:
                log_mark, move_mark = moves.progress(len(progress))
                tx.run(log_mark, (tx.now, attempt.number, attempt.fence, "",
                                  moves.CODES[outcome_state], key, *progress))
                tx.run(move_mark, (outcome_state, tx.now, key, *progress))
        return written

    @staticmethod
    def _write_step(run: Callable[[str, tuple[Any, ...]], int], attempt: AttemptRecord,
                    step_key: str, changes: dict[str, Any], name: str, item: str, kind: str,
                    may_insert: bool, sources: tuple[str, ...], now: float) -> bool:
        """The step write of :meth:`move_step` (its history row comes from the
        ledger's triggers); did it write?"""
        fence = (attempt.outcome_key, attempt.fence, attempt.id)
        if may_insert and run(
                moves.step_insert((*_INSERT_FIXED, *changes)),
                (step_key, attempt.outcome_key, name, item, kind,
                 1 if changes["state"] == _RUNNING else 0, now, now, *changes.values(), *fence)):
            return True
        return bool(sources) and run(
            moves.step_update((*changes, "updated_at"), len(sources),
                              changes["state"] == _RUNNING),
            (*changes.values(), now, step_key, *sources, *fence)) > 0

    def _move_in_one_statement(
        self, attempt: AttemptRecord, step_key: str, changes: dict[str, Any], *, name: str,
        item: str, kind: str, may_insert: bool, sources: tuple[str, ...],
        outcome_state: str | None,
    ) -> bool:
        """:meth:`move_step` as one statement (see :mod:`retrysafe.ledger.moves`);
        did it write?"""
        params: list[Any] = [attempt.outcome_key, attempt.fence, attempt.id]
        insert = update = None
        if may_insert:
            # created_at and updated_at are the server's clock, in the SQL: no parameters
            insert = (*_INSERT_FIXED, *changes)
            params += (step_key, attempt.outcome_key, name, item, kind,
                       1 if changes["state"] == _RUNNING else 0, *changes.values())
        if sources:
            update = (*changes, "updated_at")
            params += [*changes.values(), step_key, *sources]
        # the history row's attempt, actor (the attempt), new state and the attempt again
        # (its reason)
        params += [attempt.number, "", moves.CODES[changes["state"]], attempt.number]
        progress = _progress_sources(outcome_state)
        if progress and outcome_state:
            params += [outcome_state, *progress, attempt.number, "", moves.CODES[outcome_state]]
        sql = moves.single_statement(self.backend.now_sql, insert, update, len(sources),
                                     changes["state"] == _RUNNING, len(progress))
        return self.backend.execute(sql, tuple(params)) > 0

    def _refusal(self, tx: Tx, attempt: AttemptRecord, step_key: str, to: str, name: str,
                 allowed: tuple[str | None, ...] | None) -> Exception:
        """Why a step move wrote nothing: a stale attempt, or a step in another state."""
        out, _ = self._fenced(tx, attempt)  # raises when the attempt lost its fence
        step = self._lock_step(tx, step_key)
        now_state = step.state if step else None
        if allowed is not None and now_state not in allowed:
            return Busy(
                f"step {name} of {out.key} is {now_state or 'not started'}, expected "
                f"{' or '.join(sorted(s or 'not started' for s in allowed))}: "
                "another process changed it",
                key=out.key, step=name, state=now_state,
            )
        if now_state is not None and can_move(STEP_TRANSITIONS, now_state, to) and (
                allowed is None or now_state in allowed):
            return Busy(f"step {name} of {out.key} changed while it was being moved; try again",
                        key=out.key, step=name, state=now_state)
        return InvalidInput(
            f"step {name} of {out.key}: cannot move from {now_state or 'not started'} to {to}",
            key=out.key, step=name, state=now_state,
        )

    # --- reading ------------------------------------------------------------------

    def outcome(self, key: str) -> OutcomeRecord | None:
        with self.backend.transaction(write=False) as tx:
            rows = tx.records("SELECT * FROM rs_outcomes WHERE key = ?", (key,))
            return outcome_from_row(rows[0]) if rows else None

    def outcome_and_steps(self, key: str) -> tuple[OutcomeRecord | None, list[StepRecord]]:
        """The outcome and its steps, in no particular order (no sort), in one statement:
        a re-run of a done outcome answers every step from this one read, by key."""
        with self.backend.transaction(write=False) as tx:
            rows = tx.tuples(_OUTCOME_AND_STEPS, (key,))
            if not rows:
                return None, []
            return _outcome_and_steps(rows)

    def step_answer(self, key: str, step_key: str) -> StepAnswer | None:
        """One narrow read, by key, for a re-run of one effect (:meth:`Engine.once
        <retrysafe.engine.Engine.once>`): what it answers a done outcome with, without
        the outcome's and every step's whole rows. ``None``: no such outcome."""
        with self.backend.transaction(write=False) as tx:
            rows = tx.tuples(_STEP_ANSWER, (step_key, key))
        if not rows:
            return None
        state, job, params, kind, evidence, fp = rows[0]
        return StepAnswer(state, job, loads_map(params), kind, from_column(evidence), fp)

    def require_outcome(self, key: str) -> OutcomeRecord:
        out = self.outcome(key)
        if out is None:
            raise UnknownOutcome(f"no outcome {key!r} in the ledger {self.url}", key=key)
        return out

    def attempt(self, attempt_id: str) -> AttemptRecord | None:
        with self.backend.transaction(write=False) as tx:
            return self._attempt_row(tx, attempt_id)

    def attempts(self, key: str) -> list[AttemptRecord]:
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows("SELECT * FROM rs_attempts WHERE outcome_key = ? ORDER BY number", (key,))
            return [attempt_from_row(r) for r in rows]

    def step(self, step_key: str) -> StepRecord | None:
        with self.backend.transaction(write=False) as tx:
            rows = tx.records("SELECT * FROM rs_steps WHERE step_key = ?", (step_key,))
            return step_from_row(rows[0]) if rows else None

    def steps(self, key: str) -> list[StepRecord]:
        with self.backend.transaction(write=False) as tx:
            rows = tx.records(
                "SELECT * FROM rs_steps WHERE outcome_key = ? ORDER BY created_at, step_key", (key,)
            )
            return [step_from_row(r) for r in rows]

    def history(self, key: str) -> list[Event]:
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows("SELECT * FROM rs_events WHERE outcome_key = ? ORDER BY id", (key,))
            return [event_from_row(r) for r in rows]

    def outcomes(
        self, *, job: str | None = None, state: str | None = None, limit: int = 1000,
        drills: bool = True,
    ) -> list[OutcomeRecord]:
        """Outcomes, newest first; drill trials (``KEY~TRIAL``) only with ``drills``."""
        where, params = [], []
        if job:
            where.append("job = ?")
            params.append(job)
        if state:
            where.append("state = ?")
            params.append(state)
        if not drills:
            from ..keys import DRILL_MARK

            where.append("key NOT LIKE ?")
            params.append(f"%{DRILL_MARK}%")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self.backend.transaction(write=False) as tx:
            rows = tx.rows(
                f"SELECT * FROM rs_outcomes{clause} ORDER BY updated_at DESC, id DESC LIMIT ?",
                (*params, limit),
            )
            return [outcome_from_row(r) for r in rows]
