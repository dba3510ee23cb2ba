"""retrysafe: one intended outcome, however often a job is retried, killed or run twice.

The public surface::

    import retrysafe

    with retrysafe.start("weekly-ops-report", {"week": "2026-W32"}) as run:
        report = run.generate("render", lambda out: out.write_text("..."))
        msg_id = run.effect("send", "message", execute=send, lookup=find_sent)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .attempt import Decision, Run
    from .config import Config, Job, load_config
    from .connectors.base import ABSENT, Absent, Ambiguous, ConnectorBase, EffectFailed, Found
    from .effects import DEFAULT_POLICIES, EffectClass, Policy
    from .engine import Engine, Start, start
    from .ledger import Ledger, open_ledger
    from .states import OutcomeState, StepState

# Imported on first use (PEP 562): the command line imports only what a command needs.
_LAZY = {
    "Decision": "attempt", "Run": "attempt",
    "Config": "config", "Job": "config", "load_config": "config",
    "ABSENT": "connectors.base", "Absent": "connectors.base", "Ambiguous": "connectors.base",
    "ConnectorBase": "connectors.base", "EffectFailed": "connectors.base", "Found": "connectors.base",
    "DEFAULT_POLICIES": "effects", "EffectClass": "effects", "Policy": "effects",
    "Engine": "engine", "Start": "engine", "start": "engine",
    "Ledger": "ledger", "open_ledger": "ledger",
    "OutcomeState": "states", "StepState": "states",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'retrysafe' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ABSENT",
    "DEFAULT_POLICIES",
    "Absent",
    "Ambiguous",
    "Config",
    "ConnectorBase",
    "Decision",
    "EffectClass",
    "EffectFailed",
    "Engine",
    "Found",
    "Job",
    "Ledger",
    "OutcomeState",
    "Policy",
    "Run",
    "Start",
    "StepState",
    "load_config",
    "open_ledger",
    "start",
]

__version__ = "0.1.0"
