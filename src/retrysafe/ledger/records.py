"""What the ledger stores, as plain immutable records.

Named tuples rather than dataclasses: they are as immutable and typed, and
creating them costs no import of ``dataclasses``/``inspect``, which matters
for a command-line tool started once per step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

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


class OutcomeRecord(NamedTuple):
    key: str
    job: str
    params: Mapping[str, str]
    state: str
    reason: str
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
    approved_by: str | None
    runner: Holder | None
    tries: int
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        out = self._asdict()
        out["runner"] = self.runner._asdict() if self.runner else None
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
    ``busy`` (``attempt`` is the live holder) or ``blocked`` (``reason`` says why).
    """

    status: str
    outcome: OutcomeRecord
    attempt: AttemptRecord | None = None
    reason: str = ""
    superseded: AttemptRecord | None = None


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def loads_map(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    value = json.loads(text)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
