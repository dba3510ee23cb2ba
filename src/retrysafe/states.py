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
    "Action",
    "AttemptState",
    "BlockCause",
    "ClaimStatus",
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
    SETTLED = "settled"
    """a human settled what blocked it (``resolve``, ``retry``); it awaits its re-run"""


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


class ClaimStatus(StrEnum):
    """The answer to "may I start an attempt at this outcome?"."""

    STARTED = "started"
    """a new attempt holds the outcome"""
    DONE = "done"
    """the outcome is done: nothing to do"""
    BUSY = "busy"
    """another live attempt holds it"""
    BLOCKED = "blocked"
    """a human must act first"""


class Action(StrEnum):
    """What to do about one effect step, before acting (``retrysafe check``)."""

    EXECUTE = "execute"
    """nothing recorded: write the intent, act once, record"""
    SKIP = "skip"
    """done earlier: the evidence is known"""
    LOOKUP = "lookup"
    """an earlier try may have acted: look in the external system first"""
    BLOCKED = "blocked"
    """a human must act"""
    BUSY = "busy"
    """the step is running in a live process"""


class BlockCause(StrEnum):
    """Why a step or an outcome waits for a human; stored beside the reason.

    The reason is English for people; the cause decides (which command
    unblocks it, whether an approval reopens the step). One per condition.
    """

    APPROVAL = "approval"
    """the class needs an approval record (``retrysafe approve``)"""
    AMBIGUOUS = "ambiguous"
    """a lookup could not tell whether the effect happened"""
    NO_LOOKUP = "no_lookup"
    """the effect may have happened and there is no lookup to tell"""
    NOT_PROVABLE = "not_provable"
    """a lookup that cannot prove absence found nothing"""
    NEVER_BLIND = "never_blind"
    """the class is never re-executed blindly after an unclear result"""
    NOT_RETRIED = "not_retried"
    """the step failed and its class is not retried automatically"""
    ARTIFACT = "artifact"
    """an accepted artifact is missing or changed since it was accepted"""
    AGENT = "agent"
    """an agent stopped the step with its own reason (``retrysafe block``)"""
    EXHAUSTED = "exhausted"
    """(outcomes only) the job's attempt limit was reached (``retrysafe retry``)"""


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
    _O.BLOCKED: frozenset({_O.RUNNING, _O.FAILED, _O.UNKNOWN, _O.SETTLED}),
    _O.SETTLED: frozenset({_O.RUNNING, _O.BLOCKED}),
    _O.DONE: frozenset(),
}

STEP_TRANSITIONS: dict[StepState, frozenset[StepState]] = {
    # planned -> done/failed: a lookup or a human settles a step that never ran here.
    _S.PLANNED: frozenset({_S.RUNNING, _S.BLOCKED, _S.DONE}),
    _S.RUNNING: frozenset({_S.DONE, _S.FAILED, _S.UNKNOWN, _S.BLOCKED}),
    _S.FAILED: frozenset({_S.RUNNING, _S.BLOCKED, _S.PLANNED}),
    _S.UNKNOWN: frozenset({_S.DONE, _S.BLOCKED, _S.PLANNED, _S.RUNNING}),
    _S.BLOCKED: frozenset({_S.DONE, _S.PLANNED, _S.RUNNING}),
    # done -> blocked: only a generate step whose accepted artifact a later attempt finds
    # missing or changed (cause ``artifact``); every other done step is final
    _S.DONE: frozenset({_S.BLOCKED}),
}


def can_move(table: dict[_O, frozenset[_O]] | dict[_S, frozenset[_S]], src: str, dst: str) -> bool:
    """Is ``src -> dst`` a legal transition in ``table``? Staying put is always legal."""
    if src == dst:
        return True
    allowed: frozenset[str] = table.get(src, frozenset())  # type: ignore[call-overload]
    return dst in allowed
