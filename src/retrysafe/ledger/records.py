"""What the ledger stores, as plain immutable records.

Named tuples rather than dataclasses: they are as immutable and typed, and
creating them costs no import of ``dataclasses``/``inspect``, which matters
for a command-line tool started once per step.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..evidence import fields_of, from_column
from ..states import ClaimStatus

__all__ = ["AttemptRecord", "Claim", "Event", "Holder", "OutcomeRecord", "StepRecord"]


class Holder(NamedTuple):
    """Who holds a lease: enough to tell, on the same host, whether it still lives.

    ``pid`` is ``None`` for holders that are not one long-lived process (an
    agent driving the CLI step by step): their lease only ends by expiry.
    ``started`` is the process start time, so a recycled pid is not mistaken
    for the holder.
    """

    host: str
    pid: int | None
    started: str | None = None

    def shown(self) -> str:
        """``pid N on HOST``, or for an agent's lease ``an agent on HOST (no process)``.

        The history's view (``rs_events``, migration 12) builds the same text for an
        attempt's start row: change both or neither."""
        if self.pid is None:
            return f"an agent on {self.host} (no process)"
        return f"pid {self.pid} on {self.host}"


class OutcomeRecord(NamedTuple):
    key: str
    job: str
    params: Mapping[str, str]
    state: str
    reason: str
    cause: str
    fence: int
    attempts: int
    budget_base: int
    current_attempt: str | None
    accepted_attempt: str | None
    created_at: float
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "params": dict(self.params)}


class AttemptRecord(NamedTuple):
    id: str
    outcome_key: str
    number: int
    fence: int
    state: str
    result: str
    holder: Holder
    lease_expires: float
    context: Mapping[str, str]
    started_at: float
    ended_at: float | None

    def to_json(self) -> dict[str, Any]:
        out = self._asdict()
        out["holder"] = self.holder._asdict()
        out["context"] = dict(self.context)
        return out


class StepRecord(NamedTuple):
    step_key: str
    outcome_key: str
    name: str
    item: str
    kind: str
    effect_class: str
    state: str
    attempt_id: str | None
    fence: int
    evidence: str | None
    artifact: str | None
    checksum: str | None
    check: str | None
    connector: str | None
    fingerprint: str | None
    reason: str
    cause: str
    approved_by: str | None
    runner: Holder | None
    tries: int
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        out = self._asdict()
        out["runner"] = self.runner._asdict() if self.runner else None
        out["evidence_fields"] = fields_of(self.evidence)
        return out


class Event(NamedTuple):
    """One line of the history: every transition, who made it and why."""

    id: int
    outcome_key: str
    step_key: str
    at: float
    attempt_id: str | None
    fence: int
    actor: str
    kind: str
    from_state: str
    to_state: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class Claim(NamedTuple):
    """The answer to "may I start an attempt at this outcome?".

    ``status`` is ``started`` (``attempt`` is yours), ``done`` (nothing to do),
    ``busy`` (``attempt`` is the live holder) or ``blocked`` (``reason`` says why,
    ``outcome.cause`` what settles it).
    """

    status: ClaimStatus
    outcome: OutcomeRecord
    attempt: AttemptRecord | None = None
    reason: str = ""
    superseded: AttemptRecord | None = None


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def loads_map(text: str | None) -> dict[str, str]:
    """A stored map of text (an outcome's parameters, an attempt's context), as a dict
    of its own (a caller may change it)."""
    return dict(_pairs(text)) if text else {}


@functools.lru_cache(maxsize=4096)
def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    # parsed once per text: a re-run reads its outcome's parameters again and again
    value = json.loads(text)
    return tuple((str(k), str(v)) for k, v in value.items()) if isinstance(value, dict) else ()


# --- rows to records (column names are the same on every backend) ---


#: the rs_outcomes columns outcome_from_row reads
OUTCOME_COLUMNS = ("key", "job", "params", "state", "reason", "cause", "fence", "attempts",
                   "budget_base", "current_attempt", "accepted_attempt", "created_at",
                   "updated_at")


def outcome_from_row(row: Mapping[str, Any]) -> OutcomeRecord:
    return outcome_from_values([row[c] for c in OUTCOME_COLUMNS])


def outcome_from_values(v: Sequence[Any]) -> OutcomeRecord:
    """An outcome from its :data:`OUTCOME_COLUMNS` values, in that order (the record's
    own field order: built as the tuple it is, without keyword matching)."""
    (key, job, params, state, reason, cause, fence, attempts, budget_base, current,
     accepted, created_at, updated_at) = v
    return tuple.__new__(OutcomeRecord, (
        key, job, loads_map(params), state, reason, cause, int(fence), int(attempts),
        int(budget_base), current, accepted, float(created_at), float(updated_at)))


def attempt_from_row(row: Mapping[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        id=row["id"],
        outcome_key=row["outcome_key"],
        number=int(row["number"]),
        fence=int(row["fence"]),
        state=row["state"],
        result=row["result"],
        holder=Holder(row["holder_host"], row["holder_pid"], row["holder_started"]),
        lease_expires=float(row["lease_expires"]),
        context=loads_map(row["context"]),
        started_at=float(row["started_at"]),
        ended_at=None if row["ended_at"] is None else float(row["ended_at"]),
    )


#: the rs_steps columns step_from_row reads
STEP_COLUMNS = ("step_key", "outcome_key", "name", "item", "kind", "effect_class", "state",
                "attempt_id", "fence", "evidence", "artifact", "checksum", "check_cmd",
                "connector", "fingerprint", "reason", "cause", "approved_by", "runner_host",
                "runner_pid", "runner_started", "tries", "updated_at")
#: how many values of a row :func:`step_from_values` reads (a wider row holds more after)
STEP_WIDTH = len(STEP_COLUMNS)


def step_from_row(row: Mapping[str, Any]) -> StepRecord:
    return step_from_values([row[c] for c in STEP_COLUMNS])


def step_from_values(v: Sequence[Any]) -> StepRecord:
    """A step from its :data:`STEP_COLUMNS` values, in that order (a hot read builds
    records from the driver's tuples, without a lookup by name per column, and as the
    tuples they are, without keyword matching)."""
    (step_key, outcome_key, name, item, kind, effect_class, state, attempt_id, fence,
     evidence, artifact, checksum, check_cmd, connector, fingerprint, reason, cause,
     approved_by, runner_host, runner_pid, runner_started, tries, updated_at) = v[:STEP_WIDTH]
    runner = (tuple.__new__(Holder, (runner_host, runner_pid, runner_started))
              if runner_host else None)
    return tuple.__new__(StepRecord, (
        step_key, outcome_key, name, item, kind, effect_class, state, attempt_id, int(fence),
        from_column(evidence), artifact, checksum, check_cmd, connector, fingerprint, reason,
        cause, approved_by, runner, int(tries), float(updated_at)))


def event_from_row(row: Mapping[str, Any]) -> Event:
    return Event(
        id=int(row["id"]),
        outcome_key=row["outcome_key"],
        step_key=row["step_key"],
        at=float(row["at"]),
        attempt_id=row["attempt_id"],
        fence=int(row["fence"]),
        actor=row["actor"],
        kind=row["kind"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        reason=row["reason"],
    )
