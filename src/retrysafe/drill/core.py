"""The drill: learn a job's steps from a clean run, then break it on purpose.

Every trial is an outcome of its own (``KEY~<drill id>-<n>``), so trials never
see each other's ledger state and a real run never shares theirs. Before any
crash, two clean trials check that the job's effects really are keyed by the
step key: otherwise a lookup could mistake one trial's effect for another's
and every "pass" after that would be worthless.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import envvars
from ..engine import Engine
from ..errors import InvalidInput
from ..keys import check_name
from ..ledger import child_env
from .count import CountError, EffectCounter
from .plan import (
    CLEAN,
    CLEAN_AGAIN,
    POINT_SETS,
    StepInfo,
    TrialPlan,
    all_trials,
    learn_steps,
    may_match,
    point_names,
    seed_trials,
)
from .trial import (
    TrialContext,
    TrialResult,
    already_there,
    check_outcome,
    run_trial,
    settle_interrupted,
)

__all__ = ["Drill", "DrillReport"]

# what a drill must not pass on from its own environment to the runs it starts
_ATTEMPT_ENV = (envvars.ATTEMPT, envvars.ATTEMPT_ID, envvars.ATTEMPT_DIR, envvars.OUTCOME_KEY,
                envvars.JOB, envvars.STEP_KEY, envvars.OUTPUT, envvars.DRILL_TRIAL)

Progress = Callable[[str], None]


@dataclass
class DrillReport:
    """Everything a drill found, for the table and the JSON report."""

    drill_id: str
    job: str
    params: Mapping[str, str]
    base_key: str
    points: str
    steps: list[StepInfo] = field(default_factory=list)
    trials: list[TrialResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def failed(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.ok]

    @property
    def ok(self) -> bool:
        return bool(self.trials) and not self.failed and not self.problems \
            and not self.interrupted

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.problems:
            return 2
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {"drill": self.drill_id, "job": self.job, "params": dict(self.params),
                "key": self.base_key, "points": self.points, "ok": self.ok,
                "interrupted": self.interrupted, "problems": list(self.problems),
                "steps": [s.to_json() for s in self.steps],
                "trials": [t.to_json() for t in self.trials],
                "summary": {"trials": len(self.trials),
                            "passed": len(self.trials) - len(self.failed),
                            "failed": len(self.failed)}}


class Drill:
    """A crash drill of one job.

    >>> drill = Drill(engine, "content", {"week": "2026-W32"}, ["./pipeline.sh"])
    >>> drill.run().exit_code  # doctest: +SKIP
    0
    """

    def __init__(self, engine: Engine, job: str, params: Mapping[str, str], cmd: Sequence[str],
                 *, points: str = "all", max_reruns: int = 5, timeout: float = 600.0,
                 only: Sequence[str] = (), drill_id: str | None = None,
                 progress: Progress | None = None) -> None:
        if points not in POINT_SETS:
            raise InvalidInput(f"--points must be one of {', '.join(POINT_SETS)}, not {points!r}")
        if not cmd:
            raise InvalidInput("give the job's command after --")
        if shutil.which(cmd[0]) is None:
            raise InvalidInput(f"command not found: {cmd[0]}")
        if max_reruns < 1:
            raise InvalidInput("--max-reruns must be at least 1")
        if not 0 < timeout <= 1e9:  # nan too
            raise InvalidInput("--timeout must be above 0 and at most 1e9 seconds")
        self.engine = engine
        self.job = job
        spec = engine.config.job(job)
        # resolved once, so every trial (and an occurrence taken from the clock) names
        # the same outcome
        self.base_key, self.params = spec.outcome_key(params)
        self.cmd = list(cmd)
        self.points = points
        self.max_reruns = max_reruns
        self.timeout = timeout
        self.only = list(only)
        for pattern in self.only:
            if not may_match(pattern, points):
                # refused before any run: the drill would pass having tested nothing
                raise InvalidInput(
                    f"--only {pattern!r} matches no trial: a trial is STEP:POINT, POINT one of "
                    f"{point_names(points)}")
        self.drill_id = check_name("drill id", drill_id or self._fresh_id())
        self.progress = progress or (lambda _line: None)
        used = f"{self.base_key}~{self.drill_id}-0"
        if engine.ledger.outcome(used) is not None:
            # its trials are done already: re-running them would test nothing
            raise InvalidInput(
                f"drill id {self.drill_id} was used before ({used} exists): give a new --id "
                "(its effects stay in the targets even after a cleanup, so a trial of the "
                "same id would find them there and test nothing)")

    def _fresh_id(self) -> str:
        while True:
            drill_id = f"d{uuid.uuid4().hex[:6]}"
            if self.engine.ledger.outcome(f"{self.base_key}~{drill_id}-0") is None:
                return drill_id

    def _env(self) -> dict[str, str]:
        settings = self.engine.config.settings
        env = {k: v for k, v in os.environ.items() if k not in _ATTEMPT_ENV}
        env.update({envvars.HOME: str(settings.home),
                    envvars.CONFIG: str(settings.config_path),
                    **child_env(settings.ledger_url)})
        return env

    def run(self) -> DrillReport:
        """Run every trial; Ctrl-C stops after cleaning up the current one. An ``only``
        pattern that matches no trial of the steps the clean run learned raises
        :class:`InvalidInput` before any other trial runs."""
        report = DrillReport(self.drill_id, self.job, self.params, self.base_key, self.points)
        env = self._env()
        ctx = TrialContext(self.engine, self.job, self.params, self.cmd, env, self.base_key,
                           self.drill_id, [], EffectCounter(self.engine, env), self.max_reruns,
                           self.timeout)
        current = ""
        try:
            current = ctx.trial_key(f"{self.drill_id}-0")
            if not self._clean(ctx, report):
                return report
            plans = self._plans(report.steps)
            total = len(plans) + 2
            for n, plan in enumerate(plans, start=2):
                current = ctx.trial_key(f"{self.drill_id}-{n}")
                there = already_there(ctx, current)
                if there:  # the trial would find its effects done and test nothing
                    report.problems.append(
                        f"{current}: the effect of {', '.join(f'step {s}' for s in there)} "
                        f"is in the target before the trial ran (drill id {self.drill_id} used "
                        "before, then cleaned up?): give a new --id")
                    break
                self.progress(f"[{n + 1}/{total}] {plan.label}: {plan.scenario} ...")
                result = run_trial(ctx, n, plan)
                report.trials.append(result)
                self.progress(f"[{n + 1}/{total}] {plan.label}: {result.verdict}")
        except KeyboardInterrupt:
            report.interrupted = True
            closed = settle_interrupted(self.engine, current) if current else []
            self.progress("interrupted" + (f"; closed {', '.join(closed)} of {current}"
                                           if closed else ""))
        return report

    def _every(self, steps: list[StepInfo]) -> list[TrialPlan]:
        return all_trials(steps) if self.points == "all" else seed_trials(steps)

    def _plans(self, steps: list[StepInfo]) -> list[TrialPlan]:
        plans = self._every(steps)
        if self.only:
            plans = [p for p in plans
                     if any(fnmatch.fnmatchcase(p.label, pat) for pat in self.only)]
        return plans

    def _clean(self, ctx: TrialContext, report: DrillReport) -> bool:
        """Two clean trials: learn the steps, and prove the effects are keyed apart."""
        self.progress(f"[1/?] clean run of {self.job} ({ctx.trial_key(self.drill_id + '-0')}) ...")
        first = run_trial(ctx, 0, CLEAN)
        report.trials.append(first)
        if self._timed_out(first, "the clean run", report):
            return False
        ledger = self.engine.ledger
        if ledger.outcome(first.key) is None:
            report.problems.append(f"the clean run recorded no outcome: {first.runs[-1].last_line}")
            return False
        ctx.steps[:] = learn_steps(ledger.steps(first.key), ledger.history(first.key))
        report.steps = list(ctx.steps)
        if not ctx.steps:
            report.problems.append("the clean run recorded no steps: the command must run its "
                                   "work through 'retrysafe step' and 'retrysafe generate'")
            return False
        blind = [s.label for s in ctx.steps if s.is_effect and not ctx.counter.countable(s)]
        if blind:
            report.problems.extend(
                f"step {label} has no --check command and no connector: the drill cannot "
                "count its effects" for label in blind)
            return False
        first.failures.clear()
        check_outcome(ctx, first.key, first)
        self.progress(f"[1/?] {CLEAN.label}: {first.verdict}")
        if not first.ok:
            return False
        every = [p.label for p in self._every(ctx.steps)]
        unmatched = [pat for pat in self.only
                     if not any(fnmatch.fnmatchcase(label, pat) for label in every)]
        if unmatched:
            # known once the steps are: refused before any trial, not skipped untested
            raise InvalidInput(
                f"--only {' '.join(repr(p) for p in unmatched)} matches no trial of "
                f"{self.job}, so none was run after the clean run; the trials are: "
                f"{', '.join(every)}")
        second = run_trial(ctx, 1, CLEAN_AGAIN)
        report.trials.append(second)
        self.progress(f"[2/?] {CLEAN_AGAIN.label}: {second.verdict}")
        if self._timed_out(second, "the second clean run", report):
            return False
        report.problems.extend(self._key_problems(ctx, first, second))
        return second.ok and not report.problems

    def _timed_out(self, trial: TrialResult, what: str, report: DrillReport) -> bool:
        """A clean run stopped at --timeout: it learns nothing, and every trial would be
        stopped the same way."""
        if not any(run.timed_out for run in trial.runs):
            return False
        report.problems.append(f"{what} timed out after {self.timeout:g} s: give the job "
                               "more time with a larger --timeout")
        return True

    def _key_problems(self, ctx: TrialContext, first: TrialResult,
                      second: TrialResult) -> list[str]:
        """Do the effects and their lookups use the step key? Two outcomes must not meet."""
        problems: list[str] = []
        probe = ctx.trial_key(f"{self.drill_id}-probe")
        ledger = self.engine.ledger
        for step in ctx.steps:
            if not step.is_effect:
                continue
            try:
                never = ctx.counter.seen(step, ctx.step_key(probe, step), probe)
                one = ctx.counter.seen(step, ctx.step_key(first.key, step), first.key)
                two = ctx.counter.seen(step, ctx.step_key(second.key, step), second.key)
            except CountError as exc:
                problems.append(f"step {step.label}: {exc}")
                continue
            if never.count:
                problems.append(
                    f"step {step.label}: the lookup for a step key that never ran finds "
                    f"{never.count} effect(s) ({never.evidence}): the check or the effect "
                    "ignores RETRYSAFE_STEP_KEY")
            elif one.count != 1 or two.count != 1:
                problems.append(
                    f"step {step.label}: after two clean outcomes the lookup counts "
                    f"{one.count} and {two.count} effects under their own step keys, "
                    "expected 1 and 1: the effect does not carry RETRYSAFE_STEP_KEY")
            rec_one = ledger.step(ctx.step_key(first.key, step))
            rec_two = ledger.step(ctx.step_key(second.key, step))
            if (rec_one and rec_two and two.evidence and rec_one.evidence != rec_two.evidence
                    and two.evidence == rec_one.evidence):
                problems.append(
                    f"step {step.label}: the second outcome's lookup finds the first "
                    f"outcome's effect ({two.evidence}): effects are not keyed by the step key")
        return problems
