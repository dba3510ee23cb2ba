"""Close-out: the phase that decides whether an attempt made its outcome ``done``.

``done`` means every step is done, every accepted artifact is still the one
that was accepted, and the job's own acceptance passes (``expected_artifacts``
exist, ``accept`` commands exit 0), not merely that a command exited 0.
Otherwise the outcome ends as its steps say: ``blocked`` (a human must act,
with the blocked step's cause), ``unknown`` (an effect may have happened) or
``failed``. The terminal status is written before the summary.

:class:`~retrysafe.attempt.Run` calls these functions; they see a run through
:class:`ClosingRun`, so this module does not depend on ``attempt.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .errors import Busy, LedgerError
from .fsio import artifact_problem
from .ledger import AttemptRecord, Ledger, OutcomeRecord, StepRecord
from .process import release
from .states import BlockCause, OutcomeState, StepState

if TYPE_CHECKING:
    from .config import Job
    from .folders import AttemptFolder

__all__ = ["ClosingRun", "acceptance_problems", "close", "closeout_problems", "cut_short"]

_S, _O = StepState, OutcomeState

#: attempts of this process whose work was cut short after their command ended, and how
_CUT: dict[str, str] = {}


def cut_short(attempt_id: str, why: str) -> None:
    """What the attempt's command left running was stopped before it ended
    (:mod:`retrysafe.supervise`): its close-out in this process does not make the
    outcome ``done``, whatever the command's status, and its reason says ``why``."""
    _CUT[attempt_id] = why


class ClosingRun(Protocol):
    """What close-out needs of a run."""

    ledger: Ledger
    job: Job
    key: str
    attempt: AttemptRecord | None
    #: the attempt as its effect's record finished it (Engine.once on a server), if it did
    _prefinished: OutcomeRecord | None

    @property
    def folder(self) -> AttemptFolder: ...

    @property
    def dir(self) -> Path: ...

    def env(self) -> dict[str, str]: ...

    def _attempt(self) -> AttemptRecord: ...

    def _log(self, skey: str, action: str, result: str, **extra: Any) -> None: ...

    def _end_shared(self) -> None: ...


def _not_done(step: StepRecord) -> str:
    """How close-out names a step that is not done."""
    return f"step {step.name} is {step.state}" + (f" ({step.reason})" if step.reason else "")


def _step_problems(steps: list[StepRecord]) -> tuple[list[str], list[str]]:
    """Steps that are not done, and accepted artifacts that are missing or changed."""
    open_steps: list[str] = []
    artifacts: list[str] = []
    for step in steps:
        if step.state != _S.DONE:
            open_steps.append(_not_done(step))
        elif step.kind == "generate" and step.artifact:
            path = Path(step.artifact)
            problem = artifact_problem(path, step.checksum)
            if problem:
                artifacts.append(f"artifact {path} of step {step.name} {problem}")
    return open_steps, artifacts


def closeout_problems(run: ClosingRun, attempt_dir: Path | None = None) -> list[str]:
    """Why the outcome is not done yet: open steps, changed artifacts, failed checks."""
    steps = run.ledger.steps(run.key)
    open_steps, artifacts = _step_problems(steps)
    return open_steps + artifacts + acceptance_problems(run, steps, attempt_dir)


def acceptance_problems(run: ClosingRun, steps: list[StepRecord],
                        attempt_dir: Path | None = None) -> list[str]:
    """The job's own acceptance: ``expected_artifacts`` exist (in the attempt
    folder, or beside an accepted artifact) and every ``accept`` command passes."""
    problems: list[str] = []
    if not run.job.expected_artifacts and not run.job.accept:
        return problems  # nothing to check (and no attempt folder to make for it)
    artifact_dirs: list[Path] = [attempt_dir or run.dir]
    artifact_dirs += [Path(s.artifact).parent for s in steps
                      if s.kind == "generate" and s.artifact and s.state == _S.DONE]
    for rel in run.job.expected_artifacts:
        if not any((d / rel).is_file() for d in artifact_dirs):
            problems.append(f"expected artifact {rel} does not exist")
    from .checks import DEFAULT_CHECK_TIMEOUT, run_shell_check

    for cmd in run.job.accept:
        if not isinstance(cmd, str):  # a URL check (checks.py)
            problems += filter(None, [cmd.problem(run.key, steps)])
            continue
        env = {**os.environ, **run.env()} if run.attempt else dict(os.environ)
        got = run_shell_check(cmd, env, cwd=attempt_dir or run.dir, timeout=run.job.check_timeout)
        if got.returncode is None:
            problems.append(f"acceptance check {cmd!r} did not finish within "
                            f"{run.job.check_timeout or DEFAULT_CHECK_TIMEOUT:g} s")
        elif got.returncode != 0:
            problems.append(f"acceptance check {cmd!r} exited {got.returncode}"
                            + (f": {got.tail}" if got.tail else ""))
    return problems


def _abandon_own_running(run: ClosingRun, attempt: AttemptRecord,
                         steps: list[StepRecord]) -> bool:
    """This attempt's steps still ``running`` ended without a result: ``unknown``.
    Whether there were any (``steps`` is then read again)."""
    own = [s for s in steps if s.state == _S.RUNNING and s.attempt_id == attempt.id]
    for step in own:
        try:
            run.ledger.move_step(
                attempt, step.step_key, _S.UNKNOWN, name=step.name, item=step.item,
                expect=[_S.RUNNING], reason="its process ended before recording a result")
        except Busy:
            continue
    return bool(own)


def _verdict(steps: list[StepRecord], success: bool, reason: str,
             problems: list[str]) -> tuple[OutcomeState, str, str]:
    """The outcome's state, reason and block cause, from its steps and problems."""
    states = {s.state for s in steps}
    if success and not problems:
        return _O.DONE, "", ""
    if _S.BLOCKED in states:
        blocked = next(s for s in steps if s.state == _S.BLOCKED)
        return (_O.BLOCKED, f"step {blocked.name}: {blocked.reason}",
                blocked.cause or BlockCause.AGENT)
    if states & {_S.UNKNOWN, _S.RUNNING}:
        unknown = next(s for s in steps if s.state in (_S.UNKNOWN, _S.RUNNING))
        return _O.UNKNOWN, f"step {unknown.name} may or may not have happened: {unknown.reason}", ""
    failed = [f"step {s.name} failed: {s.reason}" for s in steps if s.state == _S.FAILED]
    # (a failed step is named once, not again as a step that is not done)
    said = {_not_done(s) for s in steps if s.state == _S.FAILED}
    problems = [p for p in problems if p not in said]
    return _O.FAILED, "; ".join(failed + problems) or reason or "the command failed", ""


def close(run: ClosingRun, success: bool, reason: str = "") -> OutcomeRecord:
    """Close-out: ``done`` only when every check passes; otherwise what the steps say."""
    attempt = run._attempt()
    # A success with nothing for close-out to check beyond the steps (no acceptance of
    # the job's own, nothing stopped) is finished by a write that checks the steps itself
    # (on a server, in one round trip); anything in its way and the steps are read and
    # judged.
    out = run._prefinished  # (the record's statement finished it: nothing is left to write)
    if out is None and success and attempt.id not in _CUT and not run.job.expected_artifacts \
            and not run.job.accept:
        out = run.ledger.finish_clear(attempt)
    if out is not None:
        state, why = _O.DONE, ""
        steps = run.ledger.steps(run.key) if run.folder.summarized else []
    else:
        steps = run.ledger.steps(run.key)
        if _abandon_own_running(run, attempt, steps):
            steps = run.ledger.steps(run.key)
        open_steps, others = _step_problems(steps) if success else ([], [])
        if success:
            others += acceptance_problems(run, steps)
        cut = _CUT.pop(attempt.id, "")
        state, why, cause = _verdict(steps, success, "; ".join(filter(None, [reason, cut])),
                                     open_steps + others)
        if cut and state == _O.DONE:  # what was stopped may have had work left: not done
            state, why = _O.FAILED, cut
        if others and state != _O.FAILED:
            why = "; ".join([why, *others]).rstrip("; ")
        # the finish needs a sync of its own only when no step records what happened: an
        # outcome without steps (the command was the work) is done only by this commit
        out = run.ledger.finish(attempt, state, why, cause=cause, accepted=state == _O.DONE,
                                durable=not steps)
    # the finish shares its commit with the effect's record (Engine.once): committed now,
    # before the files that say how the attempt closed
    run._end_shared()
    _refuse_if_gone(run, attempt)
    # terminal status first; the summary is a nicety written after it. Both, and the
    # log, are derived from the ledger just committed: replaced whole, not synced
    # (folders.py), so close-out costs the ledger's one durable commit
    run.folder.write_status(attempt.id, state, reason=why)
    run._log(run.key, "closeout", state, reason=why)
    run.folder.write_summary(
        state,
        f"attempt-{attempt.number}" if state == _O.DONE else _accepted_name(run.ledger, out),
        why,
        {s.step_key: {"state": s.state, "evidence": s.evidence} for s in steps},
    )
    run.folder.close()
    release(attempt.id)
    if run.job.notify is not None:  # an effect of its own: never raises, never the run's result
        from .notify import notify_transition

        notify_transition(run.ledger, run.job, out)
    return out


def _refuse_if_gone(run: ClosingRun, attempt: AttemptRecord) -> None:
    """The ledger file was deleted or replaced while the attempt ran (a home removed,
    a copy put back): what it recorded, its close-out too, went to a file nobody will
    read, so the next run starts over there. Said loudly, naming what this attempt
    did (a step done here would be done again), instead of closing quietly."""
    gone = run.ledger.backend.gone()
    if gone is None:
        return
    done = [f"{s.name}{f' ({s.item})' if s.item else ''}: {s.evidence or 'done'}"
            for s in run.ledger.steps(run.key) if s.attempt_id == attempt.id
            and s.state == _S.DONE]
    run.folder.close()
    release(attempt.id)
    did = f"; it did {', '.join(done)}, which a new run does again" if done else ""
    raise LedgerError(f"{gone} while attempt {attempt.number} of {run.key} ran: what it "
                      f"recorded is lost with that file{did}", key=run.key)


def _accepted_name(ledger: Ledger, out: OutcomeRecord) -> str | None:
    if not out.accepted_attempt:
        return None
    rec = ledger.attempt(out.accepted_attempt)
    return f"attempt-{rec.number}" if rec else None
