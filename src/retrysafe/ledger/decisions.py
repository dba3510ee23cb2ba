"""Human decisions on the ledger: resolve, approve, retry.

Each is one transaction, recorded in the history with who decided and why.
They take no fencing token: a human acts outside any attempt, so each checks
instead that no live attempt is working on what it changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Busy, InvalidInput, UnknownOutcome, UnknownStep, command_line
from ..states import STEP_TRANSITIONS, AttemptState, BlockCause, OutcomeState, StepState, can_move
from .backend import Tx
from .core import LedgerCore, Liveness, lease_only
from .records import AttemptRecord, OutcomeRecord, StepRecord, dumps, step_from_row

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .retention import Retention

__all__ = ["Ledger"]

_O, _S = OutcomeState, StepState


class Ledger(LedgerCore):
    """The durable record of outcomes. Open one with :func:`retrysafe.ledger.open_ledger`."""

    def __enter__(self) -> Ledger:
        return self

    @property
    def retention(self) -> Retention:
        """What waits for a human, and pruning (:mod:`retrysafe.ledger.retention`)."""
        from .retention import Retention

        return Retention(self.backend)

    def _require_locked(self, tx: Tx, key: str) -> OutcomeRecord:
        """The outcome at ``key``, locked for this transaction; it must exist."""
        out = self._lock_outcome(tx, key)
        if out is None:
            raise UnknownOutcome(f"no outcome {key!r} in the ledger", key=key)
        return out

    def _human_step(self, tx: Tx, key: str, step_name: str) -> tuple[OutcomeRecord, StepRecord]:
        out = self._require_locked(tx, key)
        rows = tx.rows(
            f"SELECT * FROM rs_steps WHERE outcome_key = ? AND (name = ? OR step_key = ?)"
            f" ORDER BY step_key{self.backend.lock_clause}",
            (key, step_name, step_name),
        )
        if not rows:
            raise UnknownStep(f"outcome {key} has no step {step_name!r}", key=key, step=step_name)
        if len(rows) > 1:
            keys = ", ".join(r["step_key"] for r in rows)
            raise InvalidInput(
                f"step {step_name!r} has several items ({keys}); name one by its full step key",
                key=key, step=step_name,
            )
        return out, step_from_row(rows[0])

    def _live_attempt(self, tx: Tx, out: OutcomeRecord) -> AttemptRecord | None:
        if not out.current_attempt:
            return None
        cur = self._attempt_row(tx, out.current_attempt)
        if cur and cur.state == AttemptState.ACTIVE and cur.lease_expires > tx.now:
            return cur
        return None

    def _reopen_if_unblocked(self, tx: Tx, out: OutcomeRecord, actor: str, why: str) -> None:
        if out.state != _O.BLOCKED:
            return
        still = tx.one(
            "SELECT name FROM rs_steps WHERE outcome_key = ? AND state = ?",
            (out.key, _S.BLOCKED.value),
        )
        if still is None and out.cause != BlockCause.EXHAUSTED:
            self._set_outcome(tx, out, _O.SETTLED, f"{why}; awaiting its re-run", actor=actor)

    def resolve(
        self, key: str, step_name: str, *, found: str | None, actor: str, note: str = "",
        liveness: Liveness = lease_only,
    ) -> StepRecord:
        """A human settles an unknown or blocked step: ``found`` evidence, or absent (``None``).

        A ``running`` step is settled only when its attempt can no longer act: by the
        same rule as a claim (``liveness``; the lease where it cannot tell), and that
        attempt is then superseded, so a holder that was frozen and resumes cannot
        call the provider after a human said "absent".
        """
        with self.backend.transaction() as tx:
            out, step = self._human_step(tx, key, step_name)
            if step.state == _S.DONE:
                raise InvalidInput(f"step {step.name} of {key} is already done (evidence "
                                   f"{step.evidence!r})", key=key, step=step.name, state=step.state)
            holder = (self._attempt_row(tx, step.attempt_id)
                      if step.state == _S.RUNNING and step.attempt_id else None)
            if holder is not None and holder.state == AttemptState.ACTIVE:
                alive, why = liveness(holder, self._runners(tx, holder))
                if alive or (alive is None and holder.lease_expires > tx.now):
                    raise Busy(f"step {step.name} of {key} is running in a live attempt"
                               f" ({why or 'its lease is current'}); wait for it, or stop it and "
                               f"run: {command_line('break-lease', key)}",
                               key=key, step=step.name, state=step.state)
                self._supersede(tx, out, holder, f"its step {step.name} was resolved by {actor}",
                                actor=actor)
                out, step = self._human_step(tx, key, step_name)
            to = _S.DONE if found is not None else _S.PLANNED
            frm = step.state
            if frm == _S.RUNNING:
                # its attempt is gone: the step is unknown before a human settles it
                self._log(tx, key, kind="step", step_key=step.step_key, frm=frm, to=_S.UNKNOWN,
                          actor=actor, reason="its attempt is gone")
                frm = _S.UNKNOWN
            if not can_move(STEP_TRANSITIONS, frm, to):
                raise InvalidInput(f"step {step.name} of {key} is {frm}; it cannot be resolved",
                                   key=key, step=step.name, state=frm)
            reason = f"resolved by {actor}: " + ("found" if found is not None else "absent")
            if note:
                reason += f" ({note})"
            tx.run(
                "UPDATE rs_steps SET state = ?, evidence = ?, reason = ?, cause = '', updated_at = ?"
                " WHERE step_key = ?",
                (to.value, found if found is not None else step.evidence, reason, tx.now,
                 step.step_key),
            )
            self._log(tx, key, kind="step", step_key=step.step_key, frm=frm, to=to,
                      actor=actor, reason=reason)
            self._reopen_if_unblocked(tx, out, actor, f"step {step.name} resolved")
            got = self._lock_step(tx, step.step_key)
            assert got is not None
            return got

    def approve(
        self, key: str, step_name: str, *, actor: str, note: str = "", new: bool = False,
        job: str | None = None, params: Mapping[str, str] | None = None,
    ) -> StepRecord:
        """Record authority for a step that needs approval (payment, delete).

        A step the outcome has never recorded is approved only with ``new``
        (ahead of its first run): a typo must not plant a step every later
        run then waits for. With ``new`` and the outcome's ``job`` (and
        ``params``), the outcome itself may not exist yet: it is created
        ``planned``, as its first run would create it.
        """
        with self.backend.transaction() as tx:
            if new and job is not None:
                tx.run(
                    "INSERT INTO rs_outcomes (key, job, params, state, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, job, dumps(dict(params or {})), _O.PLANNED.value, tx.now, tx.now),
                )
            out = self._require_locked(tx, key)
            if job is not None and out.job != job:
                raise InvalidInput(f"outcome {key} belongs to job {out.job!r}, not {job!r}",
                                   key=key, state=out.state)
            if out.state == _O.DONE:
                raise InvalidInput(f"outcome {key} is done; nothing to approve", key=key,
                                   state=out.state)
            from ..keys import check_name, step_key

            existing = tx.one(
                "SELECT step_key FROM rs_steps WHERE outcome_key = ? AND (name = ? OR step_key = ?)",
                (key, step_name, step_name),
            )
            if existing is None:
                if not new:
                    known = [r["name"] for r in tx.rows(
                        "SELECT DISTINCT name FROM rs_steps WHERE outcome_key = ? ORDER BY name",
                        (key,))]
                    raise UnknownStep(
                        f"outcome {key} has no step {step_name!r} (known: "
                        f"{', '.join(known) or 'none yet'}); to approve a step ahead of its first "
                        "run, add --new", key=key, step=step_name)
                # approving ahead of the first run: the step does not exist yet
                check_name("step", step_name)
                skey = step_key(key, step_name)
                tx.run(
                    "INSERT INTO rs_steps (step_key, outcome_key, name, kind, state, reason,"
                    " created_at, updated_at) VALUES (?, ?, ?, 'effect', ?, '', ?, ?)",
                    (skey, key, step_name, _S.PLANNED.value, tx.now, tx.now),
                )
            _, step = self._human_step(tx, key, step_name)
            if step.state == _S.DONE:
                raise InvalidInput(f"step {step.name} of {key} is already done", key=key,
                                   step=step.name, state=step.state)
            approval = actor + (f": {note}" if note else "")
            reopens = step.state == _S.BLOCKED and step.cause == BlockCause.APPROVAL
            to = _S.PLANNED if reopens else _S(step.state)
            reason = f"approved by {approval}"
            tx.run(
                "UPDATE rs_steps SET approved_by = ?, state = ?, reason = ?, cause = ?, updated_at = ?"
                " WHERE step_key = ?",
                (approval, to.value, reason, "" if reopens else step.cause, tx.now, step.step_key),
            )
            self._log(tx, key, kind="approval", step_key=step.step_key, frm=step.state, to=to,
                      actor=actor, reason=reason)
            self._reopen_if_unblocked(tx, out, actor, f"step {step.name} approved")
            got = self._lock_step(tx, step.step_key)
            assert got is not None
            return got

    def forget(self, key: str, step_name: str, *, actor: str, note: str = "") -> StepRecord:
        """Withdraw a ``planned`` step (one approved ahead of its first run, or by
        mistake): it never ran, so removing it loses nothing; the history keeps it."""
        with self.backend.transaction() as tx:
            _, step = self._human_step(tx, key, step_name)
            if step.state != _S.PLANNED or step.attempt_id is not None:
                raise InvalidInput(f"step {step.name} of {key} is {step.state}"
                                   + (" and was tried" if step.attempt_id else "")
                                   + ": only a planned step that never ran can be forgotten",
                                   key=key, step=step.name, state=step.state)
            tx.run("DELETE FROM rs_steps WHERE step_key = ?", (step.step_key,))
            reason = f"forgotten by {actor}" + (f": {note}" if note else "")
            self._log(tx, key, kind="forget", step_key=step.step_key, frm=step.state, to="forgotten",
                      actor=actor, reason=reason)
            return step

    def break_lease(self, key: str, *, actor: str, note: str = "") -> AttemptRecord:
        """A human ends the attempt holding ``key``, alive or not (a stuck or frozen
        process). Its fencing token stops being current, so its later writes are
        refused; its running steps become ``unknown``, so the next run looks them
        up before acting. Its processes are not stopped: that is the human's call."""
        with self.backend.transaction() as tx:
            out = self._require_locked(tx, key)
            cur = self._attempt_row(tx, out.current_attempt) if out.current_attempt else None
            if cur is None or cur.state != AttemptState.ACTIVE:
                raise InvalidInput(f"no attempt holds {key} (it is {out.state}); nothing to break",
                                   key=key, state=out.state)
            why = f"lease broken by {actor}" + (f": {note}" if note else "")
            self._supersede(tx, out, cur, why, actor=actor)
            got = self._attempt_row(tx, cur.id)
            assert got is not None
            return got

    def retry(self, key: str, *, actor: str, note: str = "") -> OutcomeRecord:
        """Give a blocked, failed or unknown outcome a fresh attempt budget."""
        with self.backend.transaction() as tx:
            out = self._require_locked(tx, key)
            if out.state == _O.DONE:
                raise InvalidInput(f"outcome {key} is done; outcomes never repeat", key=key,
                                   state=out.state)
            if self._live_attempt(tx, out):
                raise Busy(f"outcome {key} has a live attempt; wait for it", key=key,
                           state=out.state)
            blocked = tx.one(
                "SELECT name, reason FROM rs_steps WHERE outcome_key = ? AND state = ?",
                (key, _S.BLOCKED.value),
            )
            if blocked:
                raise InvalidInput(
                    f"step {blocked['name']} of {key} is blocked ({blocked['reason']}): "
                    f"settle it with 'retrysafe resolve' or 'retrysafe approve' first",
                    key=key, step=blocked["name"], state=_S.BLOCKED,
                )
            reason = f"retry granted by {actor}" + (f": {note}" if note else "")
            tx.run("UPDATE rs_outcomes SET budget_base = attempts WHERE key = ?", (key,))
            state = _O.SETTLED if out.state == _O.BLOCKED else _O(out.state)
            self._set_outcome(tx, out, state, reason, actor=actor)
            got = self._lock_outcome(tx, key)
            assert got is not None
            return got
