"""retrysafe: one intended outcome, however often a job is retried, killed or run twice.

The public surface::

    import retrysafe

    with retrysafe.start("weekly-ops-report", {"week": "2026-W32"}) as run:
        report = run.generate("render", lambda out: out.write_text("..."))
        msg_id = run.effect("send", "message", execute=send, lookup=find_sent)
"""

from __future__ import annotations

from .attempt import Decision, Run
from .config import Config, Job, load_config
from .connectors.base import ABSENT, Absent, Ambiguous, ConnectorBase, EffectFailed, Found
from .effects import DEFAULT_POLICIES, EffectClass, Policy
from .engine import Engine, Start, start
from .ledger import Ledger, open_ledger
from .states import OutcomeState, StepState

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
