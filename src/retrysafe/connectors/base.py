"""The connector contract: how retrysafe looks at an external system before acting.

A connector talks to one external system. :class:`ConnectorBase` is the whole
contract; the engine calls, in this order:

* ``validate(payload)`` before it records anything: bad input is refused
  (:class:`~retrysafe.errors.InvalidInput`) and leaves no trace.
* ``lookup(step_key, payload)`` when a previous try may have happened (the step is
  ``unknown``, or ``running`` in an attempt that is gone). It answers
  :class:`Found` (with evidence), :class:`Absent` (safe to execute) or
  :class:`Ambiguous` (a human must check; the reason says what).
* ``execute(step_key, payload)`` performs the effect, handing ``step_key`` to the
  provider (idempotency header, Message-ID, commit trailer, key column...), and
  returns the evidence (provider ID, SHA, URL...): a string, or an
  :class:`Evidence` (the same string with named fields such as ``id`` and
  ``url``, shown by ``status``). It raises
  :class:`EffectFailed` when the effect definitely did not happen (HTTP 400,
  wrong password, permission denied). Any other exception (timeout, dropped
  connection, crash) means the effect may have happened: the step becomes
  ``unknown``.
* ``update(step_key, payload)`` replaces a done effect in place, only when the
  connector is ``updatable`` and the step allows it.
* ``verify(step_key, evidence)`` re-checks stored evidence for
  ``retrysafe verify``; ``count(step_key)`` counts matching effects, for drills.

A connector named in the config is built by ``from_config``; its type name
comes from the registry (``connectors/_registry.py``), where it is written once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError, ConnectorError
from ..evidence import Evidence
from ._registry import registered_name

__all__ = [
    "ABSENT",
    "Absent",
    "Ambiguous",
    "ConnectorBase",
    "EffectFailed",
    "Evidence",
    "Found",
    "LookupResult",
    "Payload",
]

Payload = Mapping[str, Any]


@dataclass(frozen=True)
class Found:
    """The effect exists; ``evidence`` proves it (provider ID, SHA, URL...), as
    :class:`~retrysafe.evidence.Evidence` when it carries named fields."""

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


class ConnectorBase(ABC):
    """The connector contract; subclass it and implement ``execute`` and ``lookup``.

    ``effect_class`` is the class of the effect (``message``, ``publish``...);
    ``authoritative`` says whether an ``Absent`` from ``lookup`` proves the
    effect never happened (a sent-mail search with a pending marker does; a
    search by title on a system that may lag does not). ``updatable`` says the
    connector can replace an effect in place when the payload changed and the
    step explicitly allows it. The other methods have working defaults.

    ``type_name`` (the ``type`` in ``[connectors.NAME]``) is set from the
    registry when the class is defined; a registered class must implement
    :meth:`from_config`. A connector used only from code (passed to
    ``Run.effect``) needs neither.
    """

    type_name: ClassVar[str] = ""
    effect_class: str = "publish"
    authoritative: bool = True
    updatable: bool = False

    @property
    def can_look_up(self) -> bool:
        """Can :meth:`lookup` ever find an effect? ``False`` for a system that cannot be
        read back (an incoming webhook): its lookup answers ``Ambiguous`` by design,
        so it is not asked before a first execution (``lookup_first``), only after
        an unclear result, where that answer rightly stops for a human."""
        return True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = registered_name(cls)
        if name is None:
            return  # a helper base or a connector used from code: inherits its name
        if cls.from_config.__func__ is ConnectorBase.from_config.__func__:  # type: ignore[attr-defined]
            raise TypeError(f"connector type {name!r} ({cls.__qualname__}) must define from_config")
        cls.type_name = name

    @abstractmethod
    def execute(self, step_key: str, payload: Payload) -> str:
        """Perform the effect for ``step_key`` and return its evidence.

        Raise :class:`EffectFailed` only when the effect definitely did not
        happen; any other exception leaves the step ``unknown``."""

    @abstractmethod
    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Does the effect for ``step_key`` exist? :class:`Found`, :data:`ABSENT` or
        :class:`Ambiguous`; raise when the system cannot be asked now."""

    def validate(self, payload: Payload) -> None:  # noqa: B027 - optional, accepts all by default
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
        environment variables the table names (``password_env = "VAR"``).

        Every registered type defines its own; this default only says that a
        connector made in code cannot be named in a config."""
        raise ConfigError(f"{cls.__qualname__} is not a connector type a config can name")
