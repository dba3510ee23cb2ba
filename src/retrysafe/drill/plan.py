"""What a drill tries: the job's steps, learned from a clean run, and the trials.

``all`` crashes every step at every crash point, plus the run's own points.
``seed`` runs the named scenarios of the timeout stories: an interruption
between generation and the first delivery, one after each delivery, a definite
failure fixed before the re-run, and a network cut after the effect landed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from .. import envvars
from ..crash import RUN_POINTS, STEP_POINTS
from ..ledger import Event, StepRecord

__all__ = ["CLEAN", "CLEAN_AGAIN", "POINT_SETS", "StepInfo", "TrialPlan", "all_trials",
           "learn_steps", "may_match", "seed_trials"]

POINT_SETS = ("all", "seed")
SEED_POINTS = ("before-intent", "after-record", "failed", "cut")


@dataclass(frozen=True)
class StepInfo:
    """One step of the job as the clean run recorded it."""

    name: str
    item: str
    kind: str
    effect_class: str
    check: str | None
    connector: str | None

    @property
    def is_effect(self) -> bool:
        return self.kind != "generate"

    @property
    def label(self) -> str:
        return self.name + (f"/{self.item}" if self.item else "")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "item": self.item, "kind": self.kind,
                "effect_class": self.effect_class, "check": self.check,
                "connector": self.connector}


@dataclass(frozen=True)
class TrialPlan:
    """One trial: what to break in the first run, and what to expect of it.

    ``crash`` is a ``RETRYSAFE_CRASH_AT`` value; ``env`` holds other faults
    (``RETRYSAFE_DRILL_FAIL``/``_CUT``). ``fault`` says which fault it is
    (``none``, ``crash``, ``fail``, ``cut``) so the checks know what the first
    run must have left behind.
    """

    step: str
    point: str
    scenario: str
    fault: str = "crash"
    crash: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.step}:{self.point}"


CLEAN = TrialPlan("-", "clean", "the normal end-to-end run", fault="none")
CLEAN_AGAIN = TrialPlan("-", "clean-again", "the normal run as a second outcome: "
                        "its effects must not meet the first one's", fault="none")


def learn_steps(steps: list[StepRecord], history: list[Event]) -> list[StepInfo]:
    """The clean run's steps in the order they first ran."""
    first: dict[str, int] = {}
    for event in history:
        if event.step_key and event.step_key not in first:
            first[event.step_key] = event.id
    ordered = sorted(steps, key=lambda s: first.get(s.step_key, 1 << 62))
    return [StepInfo(s.name, s.item, s.kind, s.effect_class or s.kind, s.check, s.connector)
            for s in ordered]


def _names(steps: list[StepInfo], *, effects: bool | None = None) -> list[str]:
    out: list[str] = []
    for s in steps:
        if (effects is None or s.is_effect == effects) and s.name not in out:
            out.append(s.name)
    return out


def all_trials(steps: list[StepInfo]) -> list[TrialPlan]:
    """Every step at every crash point, then the run's own points."""
    trials = [TrialPlan(name, point, f"killed at {point} of {name}", crash=f"{name}:{point}")
              for name in _names(steps) for point in STEP_POINTS]
    trials += [TrialPlan("run", point, f"the run killed at {point}", crash=f"run:{point}")
               for point in RUN_POINTS]
    return trials


def seed_trials(steps: list[StepInfo]) -> list[TrialPlan]:
    """The named scenarios of the timeout stories."""
    effects = _names(steps, effects=True)
    trials: list[TrialPlan] = []  # the normal end-to-end run is the drill's clean trial
    if effects:
        trials.append(TrialPlan(
            effects[0], "before-intent",
            "interrupted after generation, before the first delivery",
            crash=f"{effects[0]}:before-intent"))
    for i, name in enumerate(effects):
        after = f"before {effects[i + 1]}" if i + 1 < len(effects) else "before close-out"
        trials.append(TrialPlan(name, "after-record", f"interrupted after {name}, {after}",
                                crash=f"{name}:after-record"))
    for name in effects:
        trials.append(TrialPlan(
            name, "failed", f"{name} fails definitely (permission error), fixed, re-run",
            fault="fail", env={envvars.DRILL_FAIL: name}))
    for name in effects:
        trials.append(TrialPlan(
            name, "cut", f"network cut after {name} landed: the answer is lost",
            fault="cut", env={envvars.DRILL_CUT: name}))
    return trials


def may_match(pattern: str, points: str) -> bool:
    """Whether ``pattern`` (an ``--only`` pattern) can match a trial of ``points``, told
    before the steps are known: a label is ``STEP:POINT`` (a name holds no ``:``), so a
    pattern with one ``:`` matches only through its POINT part, and one with no ``:`` and
    no wildcard matches nothing. ``True`` when only the steps can tell."""
    if "[" in pattern:
        return True
    if ":" not in pattern:
        return "*" in pattern or "?" in pattern
    if pattern.count(":") > 1:
        return False
    step, point = pattern.split(":")
    step_points, run_points = (STEP_POINTS, RUN_POINTS) if points == "all" else (SEED_POINTS, ())
    return (any(fnmatchcase(p, point) for p in step_points)
            or (fnmatchcase("run", step) and any(fnmatchcase(p, point) for p in run_points)))


def point_names(points: str) -> str:
    """The POINTs of ``points``' trials, for a message."""
    if points == "all":
        return f"{', '.join(STEP_POINTS)} (run:{', run:'.join(RUN_POINTS)})"
    return ", ".join(SEED_POINTS)
