"""Counting effects in the external system, by step key.

A connector step is counted by the connector's ``count(step_key)``. A command
step is counted by its stored ``--check`` command, run with
``RETRYSAFE_STEP_KEY`` set: exit 1 means none; exit 0 means found, one
non-empty stdout line per match (a check that prints a single line counts as
one); any other exit is an error the drill reports (a check that refuses to
answer when it sees duplicates says so this way).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from .. import envvars
from ..connectors import ConnectorBase, build_connector
from ..connectors.base import Ambiguous, Found
from ..engine import Engine
from .plan import StepInfo

__all__ = ["CountError", "EffectCounter"]


class CountError(Exception):
    """The external system could not be asked, or gave no usable answer."""


@dataclass(frozen=True)
class Seen:
    """What a lookup for one step key finds: how many, and the first evidence."""

    count: int
    evidence: str | None


class EffectCounter:
    """Counts effects for the steps of a job, one connector instance per name."""

    def __init__(self, engine: Engine, env: Mapping[str, str]) -> None:
        self.engine = engine
        self.env = dict(env)
        self._connectors: dict[str, ConnectorBase] = {}

    def countable(self, step: StepInfo) -> bool:
        return bool(step.check) or bool(step.connector)

    def _connector(self, name: str) -> ConnectorBase:
        if name not in self._connectors:
            table = self.engine.config.connector_table(name)
            self._connectors[name] = build_connector(name, table)
        return self._connectors[name]

    def seen(self, step: StepInfo, step_key: str, outcome_key: str) -> Seen:
        """How many effects carry ``step_key``, and the evidence a lookup returns."""
        if step.connector:
            conn = self._connector(step.connector)
            try:
                count = conn.count(step_key)
                found = conn.lookup(step_key, {})
            except Exception as exc:  # any failure to ask is reported as the trial's failure
                raise CountError(
                    f"connector {step.connector}: {type(exc).__name__}: {exc}") from exc
            if isinstance(found, Ambiguous):
                # e.g. several effects under one key: say so rather than count it as none
                raise CountError(f"connector {step.connector}: {found.reason}")
            return Seen(count, found.evidence if isinstance(found, Found) else None)
        if step.check:
            return self._by_check(step.check, step_key, outcome_key)
        raise CountError(f"step {step.label} has no --check command and no connector: "
                         "nothing can count its effects")

    def _by_check(self, check: str, step_key: str, outcome_key: str) -> Seen:
        env = {**os.environ, **self.env, envvars.STEP_KEY: step_key,
               envvars.OUTCOME_KEY: outcome_key}
        try:
            proc = subprocess.run(["/bin/sh", "-c", check], env=env, capture_output=True,
                                  text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            raise CountError(f"check {check!r} did not answer within 120 s") from None
        lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
        if proc.returncode == 1:
            return Seen(0, None)
        if proc.returncode == 0:
            return Seen(max(1, len(lines)), lines[0] if lines else None)
        tail = ([ln for ln in proc.stderr.splitlines() if ln.strip()] or [""])[-1]
        raise CountError(f"check exited {proc.returncode}" + (f": {tail.strip()}" if tail else ""))
