"""States of outcomes and steps, and which transitions are allowed.

The tables here are the whole state machine: the ledger refuses any
transition they do not list, so a bug elsewhere cannot, say, turn a ``done``
step back into ``running``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "OUTCOME_TRANSITIONS",
    "PROGRESS_MARKS",
    "STEP_TRANSITIONS",
    "AttemptState",
    "OutcomeState",
    "StepState",
    "can_move",
]


class OutcomeState(StrEnum):
    PLANNED = "planned"
    RUNNING = "running"
    GENERATED = "generated"
    DELIVERED = "delivered"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"
    BLOCKED = "blocked"

    @property
    def terminal(self) -> bool:
        """Only ``done`` is final; everything else may be retried or resolved."""
        return self is OutcomeState.DONE


class StepState(StrEnum):
    PLANNED = "planned"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"
    BLOCKED = "blocked"


class AttemptState(StrEnum):
    ACTIVE = "active"
    FINISHED = "finished"
    SUPERSEDED = "superseded"


_O = OutcomeState
_S = StepState

#: an attempt's progress marks, in the order they are reached; they only move forward
#: (a new attempt resumes from ``generated`` or ``delivered``)
PROGRESS_MARKS = (OutcomeState.RUNNING, OutcomeState.GENERATED, OutcomeState.DELIVERED)

OUTCOME_TRANSITIONS: dict[OutcomeState, frozenset[OutcomeState]] = {
    _O.PLANNED: frozenset({_O.RUNNING, _O.BLOCKED}),
    _O.RUNNING: frozenset({_O.GENERATED, _O.DELIVERED, _O.DONE, _O.FAILED, _O.UNKNOWN, _O.BLOCKED}),
    _O.GENERATED: frozenset({_O.RUNNING, _O.DELIVERED, _O.DONE, _O.FAILED, _O.UNKNOWN, _O.BLOCKED}),
    _O.DELIVERED: frozenset({_O.RUNNING, _O.DELIVERED, _O.DONE, _O.FAILED, _O.UNKNOWN, _O.BLOCKED}),
    _O.FAILED: frozenset({_O.RUNNING, _O.BLOCKED}),
    _O.UNKNOWN: frozenset({_O.RUNNING, _O.BLOCKED, _O.FAILED}),
    _O.BLOCKED: frozenset({_O.RUNNING, _O.FAILED, _O.UNKNOWN}),
    _O.DONE: frozenset(),
}

STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    # planned -> done/failed: a lookup or a human settles a step that never ran here.
    _S.PLANNED: frozenset({_S.RUNNING, _S.BLOCKED, _S.DONE}),
    _S.RUNNING: frozenset({_S.DONE, _S.FAILED, _S.UNKNOWN, _S.BLOCKED}),
    _S.FAILED: frozenset({_S.RUNNING, _S.BLOCKED, _S.PLANNED}),
    _S.UNKNOWN: frozenset({_S.DONE, _S.BLOCKED, _S.PLANNED, _S.RUNNING}),
    _S.BLOCKED: frozenset({_S.DONE, _S.PLANNED, _S.RUNNING}),
    _S.DONE: frozenset(),
}


def can_move(table: dict[_O, frozenset[_O]] | dict[_S, frozenset[_S]], src: str, dst: str) -> bool:
    """Is ``src -> dst`` a legal transition in ``table``? Staying put is always legal."""
    if src == dst:
        return True
    allowed: frozenset[str] = table.get(src, frozenset())  # type: ignore[call-overload]
    return dst in allowed
