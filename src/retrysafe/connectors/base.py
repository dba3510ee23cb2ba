"""The connector protocol: how retrysafe looks at an external system before acting.

A connector talks to one external system. The engine calls, in this order:

* ``lookup(step_key, payload)`` when a previous try may have happened (the step is
  ``unknown``, or ``running`` in an attempt that is gone). It answers
  :class:`Found` (with evidence), :class:`Absent` (safe to execute) or
  :class:`Ambiguous` (a human must check; the reason says what).
* ``execute(step_key, payload)`` performs the effect, handing ``step_key`` to the
  provider (idempotency header, Message-ID, commit trailer, key column...), and
  returns the evidence (provider ID, SHA, URL...). It raises
  :class:`EffectFailed` when the effect definitely did not happen (HTTP 400,
  wrong password, permission denied). Any other exception (timeout, dropped
  connection, crash) means the effect may have happened: the step becomes
  ``unknown``.
* ``verify(step_key, evidence)`` (optional) re-checks stored evidence for
  ``retrysafe verify``.
* ``count(step_key)`` (optional) counts matching effects, for drills.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import ConnectorError

__all__ = [
    "ABSENT",
    "Absent",
    "Ambiguous",
    "Connector",
    "EffectFailed",
    "Found",
    "LookupResult",
    "Payload",
]

Payload = Mapping[str, Any]


@dataclass(frozen=True)
class Found:
    """The effect exists; ``evidence`` proves it (provider ID, SHA, URL...)."""

    evidence: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Absent:
    """The effect does not exist: executing is safe."""


@dataclass(frozen=True)
class Ambiguous:
    """The system cannot tell; ``reason`` says exactly what a human must check."""

    reason: str


ABSENT = Absent()

LookupResult = Found | Absent | Ambiguous


class EffectFailed(ConnectorError):
    """Raised by ``execute`` when the effect definitely did not happen."""


@runtime_checkable
class Connector(Protocol):
    """What the engine needs from a connector.

    ``effect_class`` is the class of the effect (``message``, ``publish``...);
    ``authoritative`` says whether an ``Absent`` from ``lookup`` proves the
    effect never happened (a sent-mail search with a pending marker does; a
    search by title on a system that may lag does not). ``updatable`` says the
    connector can replace an effect in place when the payload changed and the
    step explicitly allows it.
    """

    effect_class: str
    authoritative: bool

    def execute(self, step_key: str, payload: Payload) -> str: ...

    def lookup(self, step_key: str, payload: Payload) -> LookupResult: ...


class ConnectorBase:
    """Convenience base: optional methods with their defaults.

    Subclasses set ``type_name`` (the ``type`` in ``[connectors.NAME]``),
    ``effect_class`` and ``authoritative``, and implement ``execute`` and
    ``lookup``; ``from_config`` builds one from its config table.
    """

    type_name: ClassVar[str] = ""
    effect_class: str = "publish"
    authoritative: bool = True
    updatable: bool = False

    def execute(self, step_key: str, payload: Payload) -> str:
        raise NotImplementedError

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        raise NotImplementedError

    def validate(self, payload: Payload) -> None:
        """Check the payload without touching the external system; raise
        :class:`~retrysafe.errors.InvalidInput` when it cannot be sent. The engine
        calls this before recording any intent, so bad input changes nothing."""

    def verify(self, step_key: str, evidence: str) -> bool:
        """Does the stored evidence still hold? Default: a fresh lookup finds it."""
        result = self.lookup(step_key, {})
        return isinstance(result, Found)

    def count(self, step_key: str) -> int:
        """How many effects carry this step key (for drills). Default: 0 or 1 by lookup."""
        return 1 if isinstance(self.lookup(step_key, {}), Found) else 0

    def update(self, step_key: str, payload: Payload) -> str:
        """Replace the effect in place (only when ``updatable``)."""
        raise EffectFailed(f"{self.type_name or type(self).__name__} cannot update in place")

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> ConnectorBase:
        """Build from a ``[connectors.NAME]`` table. Secrets are read from the
        environment variables the table names (``password_env = "VAR"``)."""
        raise NotImplementedError
