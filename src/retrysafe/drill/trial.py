"""One trial: break the first run, re-run until the outcome settles, then check.

The checks are the promise retrysafe makes, asked of the external systems and
the ledger rather than of the runs' own words: every effect exists exactly
once, every generate step produced its artifact once, ``verify`` passes, and
nothing is left ``running``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import envvars
from ..engine import Engine
from ..errors import RetrysafeError
from ..keys import step_key
from ..verify import verify_outcome
from .count import CountError, EffectCounter
from .launch import RunResult, launch_run
from .plan import StepInfo, TrialPlan

__all__ = ["TrialContext", "TrialResult", "already_there", "run_trial", "settle_interrupted"]

_FAULT_ENVS = (envvars.CRASH_AT, envvars.DRILL_FAIL, envvars.DRILL_CUT)


@dataclass
class TrialResult:
    """What one trial did and found; ``ok`` when no check failed."""

    number: int
    trial_id: str
    plan: TrialPlan
    key: str
    runs: list[RunResult] = field(default_factory=list)
    state: str = ""
    reason: str = ""
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        if self.failures:
            return "FAIL: " + "; ".join(self.failures)
        return "pass" + (f" ({'; '.join(self.notes)})" if self.notes else "")

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "trial": self.trial_id, "step": self.plan.step,
                "point": self.plan.point, "scenario": self.plan.scenario,
                "fault": self.plan.fault, "crash_at": self.plan.crash,
                "fault_env": dict(self.plan.env), "outcome_key": self.key,
                "runs": [r.to_json() for r in self.runs], "state": self.state,
                "reason": self.reason, "ok": self.ok, "failures": list(self.failures),
                "notes": list(self.notes)}


@dataclass
class TrialContext:
    """What every trial of a drill shares."""

    engine: Engine
    job: str
    params: Mapping[str, str]
    cmd: Sequence[str]
    env: Mapping[str, str]
    base_key: str
    drill_id: str
    steps: list[StepInfo]
    counter: EffectCounter
    max_reruns: int
    timeout: float

    def trial_key(self, trial_id: str) -> str:
        return f"{self.base_key}~{trial_id}"

    def step_key(self, key: str, step: StepInfo) -> str:
        return step_key(key, step.name, step.item or None)

    def run_env(self, trial_id: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in _FAULT_ENVS}
        env[envvars.DRILL_TRIAL] = trial_id
        env.update(extra or {})
        return env


def _fault_env(plan: TrialPlan) -> dict[str, str]:
    env = dict(plan.env)
    if plan.crash:
        env[envvars.CRASH_AT] = plan.crash
    return env


def _state(ctx: TrialContext, key: str) -> tuple[str, str]:
    out = ctx.engine.ledger.outcome(key)
    return (out.state, out.reason) if out else ("absent", "no outcome was recorded")


def _resolve_absent(ctx: TrialContext, key: str, name: str) -> None:
    """What the human does once the permission is fixed: nothing happened, run it again."""
    ctx.engine.ledger.resolve(key, name, found=None, actor="retrysafe-drill",
                              note="drill: the definite failure was fixed")


def run_trial(ctx: TrialContext, number: int, plan: TrialPlan) -> TrialResult:
    """Run one trial to the end and check it."""
    trial_id = f"{ctx.drill_id}-{number}"
    key = ctx.trial_key(trial_id)
    result = TrialResult(number, trial_id, plan, key)
    first = launch_run(ctx.job, ctx.params, ctx.cmd, ctx.run_env(trial_id, _fault_env(plan)),
                       timeout=ctx.timeout)
    result.runs.append(first)
    state, _ = _state(ctx, key)
    if plan.fault == "crash" and state == "done":
        result.notes.append("crash point not reached")
    if plan.fault in ("fail", "cut"):
        _check_first_fault(ctx, plan, key, result)
    resolved = False
    # a clean run stopped at the timeout is not run again: the drill stops there
    reruns = 0 if plan.fault == "none" and first.timed_out else ctx.max_reruns
    for _ in range(reruns):
        state, _ = _state(ctx, key)
        if state == "done":
            break
        if state == "blocked":
            step = _blocked_failed_step(ctx, key, plan)
            if step is None or resolved:
                break
            _resolve_absent(ctx, key, step)
            resolved = True
            result.notes.append(f"{step} resolved --absent after the fix")
        result.runs.append(launch_run(ctx.job, ctx.params, ctx.cmd, ctx.run_env(trial_id),
                                      timeout=ctx.timeout))
    result.state, result.reason = _state(ctx, key)
    check_outcome(ctx, key, result, plan)
    stopped = [str(n) for n, run in enumerate(result.runs, start=1) if run.timed_out]
    if stopped:  # said first: the failures that follow are what a stopped run leaves
        said = (f"run{'s' if len(stopped) > 1 else ''} {', '.join(stopped)} of "
                f"{len(result.runs)} timed out after {ctx.timeout:g} s")
        (result.failures if result.failures else result.notes).insert(0, said)
    return result


def already_there(ctx: TrialContext, key: str) -> list[str]:
    """The steps whose effect a lookup finds under ``key`` before any run of it (none,
    unless an earlier drill of the same id left them in the targets)."""
    there: list[str] = []
    for step in ctx.steps:
        if not step.is_effect:
            continue
        try:
            if ctx.counter.seen(step, ctx.step_key(key, step), key).count:
                there.append(step.label)
        except CountError:
            continue  # the checks after the trial report it
    return there


def _blocked_failed_step(ctx: TrialContext, key: str, plan: TrialPlan) -> str | None:
    if plan.fault != "fail":
        return None
    for step in ctx.engine.ledger.steps(key):
        if step.name == plan.step and step.state == "blocked":
            return step.name
    return None


def _check_first_fault(ctx: TrialContext, plan: TrialPlan, key: str,
                       result: TrialResult) -> None:
    """After the first run of a fault trial: the step says what really happened."""
    targets = [s for s in ctx.steps if s.name == plan.step]
    for step in targets:
        skey = ctx.step_key(key, step)
        rec = ctx.engine.ledger.step(skey)
        got = rec.state if rec else "not started"
        want = "failed" if plan.fault == "fail" else "unknown"
        if got != want:
            result.failures.append(f"after the {plan.fault}: {step.label} is {got}, not {want}")
        try:
            seen = ctx.counter.seen(step, skey, key).count
        except CountError as exc:
            result.failures.append(f"after the {plan.fault}: {step.label}: {exc}")
            continue
        landed = 0 if plan.fault == "fail" else 1
        if seen != landed:
            result.failures.append(f"after the {plan.fault}: {step.label} has {seen} "
                                   f"effect(s), expected {landed}")


def check_outcome(ctx: TrialContext, key: str, result: TrialResult,
                  plan: TrialPlan | None = None) -> None:
    """The promise: one effect each, artifacts made once, verify passes, nothing running."""
    ledger = ctx.engine.ledger
    if result.state != "done":
        runs = len(result.runs)
        result.failures.append(f"ended {result.state} after {runs} run(s)"
                               + (f": {result.reason}" if result.reason else ""))
    history = ledger.history(key) if ledger.outcome(key) else []
    for step in ctx.steps:
        skey = ctx.step_key(key, step)
        if step.is_effect:
            try:
                count = ctx.counter.seen(step, skey, key).count
            except CountError as exc:
                result.failures.append(f"{step.label}: {exc}")
                continue
            if count != 1:
                result.failures.append(f"{step.label}: {count} effects, expected exactly 1")
        else:
            rec = ledger.step(skey)
            done = sum(1 for e in history if e.step_key == skey and e.to_state == "done")
            if rec is None or (rec.tries != 1 and done != 1):
                result.failures.append(f"{step.label}: artifact accepted {done} times "
                                       f"({rec.tries if rec else 0} tries), expected once")
    if plan is not None and plan.fault == "cut":
        for step in ctx.steps:
            rec = ledger.step(ctx.step_key(key, step)) if step.name == plan.step else None
            if rec is not None and rec.state == "done" and not rec.reason.startswith("found by"):
                result.failures.append(f"{step.label}: settled by {rec.reason or 'a re-run'}, "
                                       "not by the lookup")
    if result.state == "done":
        for check in verify_outcome(ctx.engine, key):
            if not check.ok:
                result.failures.append(f"verify: {check.subject}: {check.detail}")
    if ledger.outcome(key):
        running = [s.name for s in ledger.steps(key) if s.state == "running"]
        if running:
            result.failures.append(f"left running: {', '.join(running)}")
        active = [a.number for a in ledger.attempts(key) if a.state == "active"]
        if active:
            result.failures.append(f"attempt {active[0]} left active")


def settle_interrupted(engine: Engine, key: str) -> list[str]:
    """After Ctrl-C: close any attempt still active at ``key`` so nothing stays ``running``.

    Its running steps become ``unknown`` (the next run looks them up); the
    outcome is closed as the steps say. Returns what was closed.
    """
    closed: list[str] = []
    ledger = engine.ledger
    out = ledger.outcome(key)
    if out is None:
        return closed
    for attempt in ledger.attempts(key):
        if attempt.state != "active":
            continue
        try:
            engine.run_for(engine.config.job(out.job), attempt).close(
                success=False, reason="the drill was interrupted")
            closed.append(f"attempt {attempt.number}")
        except RetrysafeError:
            continue
    return closed
