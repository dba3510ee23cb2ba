"""retrysafe: one intended outcome, however often a job is retried, killed or run twice.

The public surface::

    import retrysafe

    with retrysafe.start("weekly-ops-report", {"week": "2026-W32"}) as run:
        report = run.generate("render", lambda out: out.write_text("..."))
        msg_id = run.effect("send", "message", execute=send, lookup=find_sent)

A ``lookup`` answers :class:`Found` (with the evidence), :data:`ABSENT` (safe to
execute) or :class:`Ambiguous` (a human must check; the reason says what).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The public names, each with the module that defines it: the one list of exports.
# Each is imported on first use (PEP 562), so the command line imports only what a
# command needs. The imports below only tell type checkers the same; a test keeps
# them equal to this table (``X as X``: an explicit re-export).
_EXPORTS = {
    "ABSENT": "connectors.base", "Absent": "connectors.base", "Ambiguous": "connectors.base",
    "ConnectorBase": "connectors.base", "EffectFailed": "connectors.base", "Found": "connectors.base",
    "Config": "config", "Job": "config", "load_config": "config",
    "DEFAULT_POLICIES": "effects", "EffectClass": "effects", "Policy": "effects",
    "Engine": "engine", "close_all": "engine", "once": "engine", "start": "engine",
    "Busy": "errors", "ConfigError": "errors", "InvalidInput": "errors",
    "InvalidParameter": "errors", "LedgerError": "errors", "OutcomeBlocked": "errors",
    "RetrysafeError": "errors", "StaleAttempt": "errors", "StepBlocked": "errors",
    "StepFailed": "errors", "StepUnknown": "errors",
    "Ledger": "ledger", "open_ledger": "ledger",
    "OutcomeState": "states", "StepState": "states",
    "Run": "attempt",
}

if TYPE_CHECKING:
    from .attempt import Run as Run
    from .config import Config as Config
    from .config import Job as Job
    from .config import load_config as load_config
    from .connectors.base import ABSENT as ABSENT
    from .connectors.base import Absent as Absent
    from .connectors.base import Ambiguous as Ambiguous
    from .connectors.base import ConnectorBase as ConnectorBase
    from .connectors.base import EffectFailed as EffectFailed
    from .connectors.base import Found as Found
    from .effects import DEFAULT_POLICIES as DEFAULT_POLICIES
    from .effects import EffectClass as EffectClass
    from .effects import Policy as Policy
    from .engine import Engine as Engine
    from .engine import close_all as close_all
    from .engine import once as once
    from .engine import start as start
    from .errors import Busy as Busy
    from .errors import ConfigError as ConfigError
    from .errors import InvalidInput as InvalidInput
    from .errors import InvalidParameter as InvalidParameter
    from .errors import LedgerError as LedgerError
    from .errors import OutcomeBlocked as OutcomeBlocked
    from .errors import RetrysafeError as RetrysafeError
    from .errors import StaleAttempt as StaleAttempt
    from .errors import StepBlocked as StepBlocked
    from .errors import StepFailed as StepFailed
    from .errors import StepUnknown as StepUnknown
    from .ledger import Ledger as Ledger
    from .ledger import open_ledger as open_ledger
    from .states import OutcomeState as OutcomeState
    from .states import StepState as StepState

    __version__: str

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        value: Any = version(__name__)
    else:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'retrysafe' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
