"""``retrysafe run``: one attempt at a job's outcome around any command.

Claim, run, close out, print the result, exit with its code (:func:`run_job`,
also used by ``resume``, ``each`` and ``openclaw run``). The attempt records
the command it runs and the folder it runs in (its context: ``command``,
``cwd``), so ``retrysafe resume KEY`` can run it again exactly as this command
would.

Nothing here imports click at import time; the command's options are parsed
in :mod:`retrysafe.cli.run_command`. The executable (:mod:`retrysafe._entry`)
runs a plain ``retrysafe run JOB [-p NAME=VALUE]... -- CMD...`` through
:func:`run_plain`, which does what the command does with the same arguments
and reports an error as click's ``main`` and :func:`retrysafe.cli.main` would.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .. import envvars
from ..crash import crash_point
from ..donestep import startable
from ..engine import Engine, unblock_hint
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    InvalidInput,
    NoStoredCommand,
    OutcomeBlocked,
    RetrysafeError,
    StaleAttempt,
)
from ..keys import parse_assignments
from ..ledger import AttemptRecord
from ..states import ClaimStatus
from ..supervise import CommandNotStarted, run_command
from ._output import echo, exit_plain

if TYPE_CHECKING:
    from ..catchup import Plan, Window

__all__ = ["CATCH_UP_FIELD", "COMMAND_FIELD", "CWD_FIELD", "attempt_once", "catch_up_window",
           "check_occurrence_due", "finish", "run_context", "run_job", "run_plain",
           "stored_command"]

COMMAND_FIELD = "command"
"""The attempt's context field holding the command it ran (a JSON list of words)."""
CWD_FIELD = "cwd"
"""The attempt's context field holding the folder the command ran in."""
CATCH_UP_FIELD = "catch_up_for"
"""The context field of an attempt a catch-up started: the current occurrence's key."""
EXIT_INTERRUPTED = 130
"""A stop signal ended a catch-up before the current occurrence started."""


def run_context(openclaw_run_id: str | None) -> dict[str, str]:
    """What the scheduler tells us about this run, recorded with the attempt."""
    context: dict[str, str] = {}
    if any(name in os.environ for name in envvars.OPENCLAW_MARKS):  # else OpenClaw said nothing
        try:
            from ..openclaw.context import detect_context
        except ImportError:
            pass
        else:
            context.update(detect_context(os.environ))
    if openclaw_run_id:
        context["openclaw_run_id"] = openclaw_run_id
    return context


def stored_command(key: str, attempts: Sequence[AttemptRecord]) -> tuple[list[str], str]:
    """The command (and its folder) the latest of ``attempts`` that recorded one
    ran; :class:`NoStoredCommand` when none did."""
    for attempt in sorted(attempts, key=lambda a: a.number, reverse=True):
        raw = attempt.context.get(COMMAND_FIELD)
        if not raw:
            continue
        try:
            words = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(words, list) and words and all(isinstance(w, str) for w in words):
            return words, attempt.context.get(CWD_FIELD) or os.getcwd()
    raise NoStoredCommand(
        f"no attempt of {key} recorded a command to re-run (it was started by 'retrysafe "
        "begin', or by an older version); run it with 'retrysafe run JOB -p ... -- CMD'",
        key=key)


def check_occurrence_due(engine: Engine, job_name: str, params: Mapping[str, str]) -> None:
    """An occurrence named with ``-p`` must be due: one in the future is refused (exit 2)
    before anything is recorded, or caught up, by the check every claim makes
    (:func:`retrysafe.missed.check_given_due`). Without ``-p`` the occurrence is the one
    the run serves, so always due."""
    job = engine.config.job(job_name)
    if job.schedule:
        from ..missed import check_given_due

        check_given_due(job, params, job.resolve_params(params))


def _check_startable(argv0: str, cwd: str) -> None:
    """A command that cannot start is refused (exit 2) before anything is recorded."""
    if not startable(argv0, cwd):
        raise InvalidInput(f"command not found: {argv0}")


def finish(result: dict[str, Any], lines: list[str], code: int, as_json: bool) -> NoReturn:
    """Print a run's result (its lines, or with ``as_json`` its fields and exit code as
    JSON) and exit with ``code``."""
    if as_json:
        from ._common import emit_json  # click: --json is parsed by the full command

        emit_json({**result, "exit_code": code})
    else:
        for line in lines:
            if not line.isprintable():  # a reason with a line break or an escape sequence
                from ..readout import one_line

                line = one_line(line)
            echo(line)
    sys.exit(code)


def run_job(engine: Engine, job_name: str, params: Mapping[str, str], cmd: Sequence[str], *,
            context: Mapping[str, str], cwd: str | None = None, as_json: bool = False,
            extra: Mapping[str, Any] | None = None, catch_up: Window | None = None) -> NoReturn:
    """One attempt at ``job_name``'s outcome around ``cmd``: claim, run, close out,
    print the result (as JSON with ``as_json``, ``extra`` fields added) and exit
    with its code. With ``catch_up``, the earlier unfinished occurrences inside
    that window are finished first (:mod:`retrysafe.catchup`)."""
    folder = cwd or os.getcwd()
    if cwd is not None and not Path(cwd).is_dir():
        raise InvalidInput(f"the folder the command ran in is gone: {cwd}")
    _check_startable(cmd[0], folder)
    check_occurrence_due(engine, job_name, params)
    if catch_up is None:
        finish(*attempt_once(engine, job_name, params, cmd, context=context, cwd=cwd,
                             as_json=as_json, extra=extra), as_json)
    from ..catchup import exit_code, plan

    caught = plan(engine, job_name, params, catch_up)
    current_key = engine.outcome_key(job_name, caught.params)[1]
    earlier, interrupted = _finish_earlier(engine, caught, cmd, current_key, context=context,
                                           cwd=cwd, as_json=as_json)
    if interrupted:
        why = f"stopped by a signal while catching up; {current_key} was not started"
        result = {**(extra or {}), "key": current_key, "job": job_name, "status": "interrupted",
                  "state": None, "attempt": None, "reason": why, "unblock": "",
                  "command_exit": None, "catch_up": earlier}
        finish(result, [f"interrupted: {why}"], EXIT_INTERRUPTED, as_json)
    result, lines, code = attempt_once(engine, job_name, caught.params, cmd, context=context,
                                       cwd=cwd, as_json=as_json, extra=extra)
    result["catch_up"] = earlier
    code = exit_code(code, [e["exit_code"] for e in earlier if e["action"] == "run"])
    finish(result, lines, code, as_json)


def _finish_earlier(engine: Engine, caught: Plan, cmd: Sequence[str], current_key: str, *,
                    context: Mapping[str, str], cwd: str | None,
                    as_json: bool) -> tuple[list[dict[str, Any]], bool]:
    """Each earlier occurrence of ``caught``, oldest first: run under its own key and
    attempt, or (blocked) reported; one line each. What happened to each, and whether
    a stop signal ended the catch-up (the later ones and the current one not started)."""
    from .each import Batch, _stop_between_items

    done: list[dict[str, Any]] = []
    stop = Batch()
    with _stop_between_items(stop) as check_signals:
        for earlier in caught.earlier:
            base = {"occurrence": earlier.occurrence, "key": earlier.key, "before": earlier.state}
            if not earlier.runnable:
                out = engine.ledger.outcome(earlier.key)
                hint = unblock_hint(engine.ledger, out) if out is not None else ""
                entry = {**base, "job": caught.job, "action": "skip", "status": "blocked",
                         "state": earlier.state, "attempt": None, "reason": earlier.reason,
                         "unblock": hint, "exit_code": EXIT_BLOCKED}
                lines = [f"blocked: {earlier.key} waits for a person: {earlier.reason}",
                         f"to unblock: {hint}"]
            else:
                echo(f"catch-up: {earlier.key} ({earlier.state}) before {current_key}", err=True)
                params = {**caught.params, caught.param: earlier.occurrence}
                try:
                    result, lines, code = attempt_once(
                        engine, caught.job, params, cmd, cwd=cwd, as_json=as_json,
                        context={**context, CATCH_UP_FIELD: current_key})
                except RetrysafeError as exc:
                    result, lines, code = ({"job": caught.job, "status": "error",
                                            "reason": exc.message}, [exc.message], exc.exit_code)
                entry = {**result, **base, "action": "run", "exit_code": code}
            done.append(entry)
            if not as_json:
                echo("catch-up: " + "; ".join(lines))
            sys.stdout.flush()
            check_signals()
            if stop.interrupted:
                return done, True
    return done, stop.interrupted


def attempt_once(engine: Engine, job_name: str, params: Mapping[str, str], cmd: Sequence[str],
                 *, context: Mapping[str, str], cwd: str | None = None, as_json: bool = False,
                 extra: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str], int]:
    """One attempt at ``job_name``'s outcome around ``cmd`` (claim, run, close out):
    its result (``run --json``'s fields), its lines of text and its exit code."""
    folder = cwd or os.getcwd()
    recorded = {**context, COMMAND_FIELD: json.dumps(list(cmd)), CWD_FIELD: folder}
    begun = engine.begin(job_name, params, context=recorded)
    key = begun.key
    result: dict[str, Any] = {**(extra or {}), "key": key, "job": job_name,
                              "status": begun.status.value,
                              "state": begun.outcome.state, "attempt": None, "reason": "",
                              "unblock": "", "command_exit": None}  # (None: CMD did not run)
    if begun.status is ClaimStatus.DONE:
        if context.get("runner") or context.get("openclaw_run_id"):
            # a scheduler's re-run: its history and ours join on this event (one write);
            # a re-run from a shell keeps the one-read answer
            engine.note_answer(begun, recorded)
        return result, [f"done: {key} is already done; nothing to do"], EXIT_DONE
    refusal = begun.refusal()
    if isinstance(refusal, OutcomeBlocked):
        result.update(reason=refusal.reason, unblock=refusal.unblock)
        return (result, [f"blocked: {key}: {refusal.reason}", f"to unblock: {refusal.unblock}"],
                EXIT_BLOCKED)
    if refusal is not None:
        if begun.status is ClaimStatus.BUSY:
            engine.note_answer(begun, recorded)
        result["reason"] = refusal.message
        return result, [f"busy: {refusal.message}"], refusal.exit_code
    attempt_run = begun.run
    assert attempt_run is not None and attempt_run.attempt is not None
    result["attempt"] = attempt_run.number
    crash_point("run", "after-begin")
    rc: int | None
    # with --json, stdout carries the result alone: the command's output goes to stderr
    try:
        rc = run_command(attempt_run, cmd, cwd=cwd, stdout=sys.stderr if as_json else None)
        why = f"command exited {rc}" if rc >= 0 else f"command killed by signal {-rc}"
    except CommandNotStarted as exc:  # it passed the check, yet cannot be executed
        rc, why = None, str(exc)
    result["command_exit"] = rc
    if attempt_run.lost.is_set():
        why = (f"attempt {attempt_run.number} of {key} lost its lease to another attempt; "
               "nothing more was recorded")
        result.update(status="stale", reason=why)
        return result, [f"stale: {why}"], EXIT_BUSY
    crash_point("run", "before-closeout")
    try:
        out = attempt_run.close(success=rc == 0, reason=why)
    except StaleAttempt as exc:
        result.update(status="stale", reason=str(exc))
        return result, [f"stale: {exc}"], EXIT_BUSY
    result.update(state=out.state, reason=out.reason)
    line = f"{out.state}: {key} (attempt {attempt_run.number})"
    if out.reason:
        line += f": {out.reason}"
    if out.state == "done":
        return result, [line], EXIT_DONE
    if out.state == "blocked":
        result["unblock"] = unblock_hint(engine.ledger, out)
        return result, [line, f"to unblock: {result['unblock']}"], EXIT_BLOCKED
    return result, [line], EXIT_FAILED


def catch_up_window(engine: Engine, job_name: str, given: Mapping[str, str],
                    catch_up: bool | None, window: str | None) -> Window | None:
    """The catch-up window this run uses, or ``None``: ``--catch-up[-window]``, else the
    job's ``catch_up`` for the run of the current occurrence (not for a backfill naming
    its occurrence with ``-p``, nor inside a drill trial, whose runs are counted)."""
    if catch_up is False:
        if window is not None:
            import click  # only the run command's options can conflict

            raise click.UsageError("--catch-up-window and --no-catch-up cannot be combined")
        return None
    if window is not None:
        from ..catchup import parse_window

        return parse_window(window, "--catch-up-window")
    job = engine.config.job(job_name)
    if catch_up:
        from ..catchup import DEFAULT_WINDOW, parse_window

        return job.catch_up or parse_window(DEFAULT_WINDOW)
    if job.catch_up is None or os.environ.get(envvars.DRILL_TRIAL):
        return None
    named = any(job.params.get(name) == "occurrence" for name in given)
    return None if named else job.catch_up


def run_plain(job_name: str, params: list[str], cmd: Sequence[str], *, home: str | None = None,
              config: str | None = None, ledger: str | None = None) -> None:
    """``retrysafe [--home H] [--config F] [--ledger URL] run JOB [-p NAME=VALUE]... -- CMD...``
    without click: what the ``run`` command does with these arguments, call for call,
    the engine closed before an error is reported, as the command's context closes it.

    Exits, except for a job that first catches up earlier occurrences: then it
    returns, having read only the config, and the ``run`` command does it all.
    """
    try:
        engine: Engine | None = None
        try:
            engine = Engine.open(home, config, ledger)
            given = parse_assignments(params)
            if catch_up_window(engine, job_name, given, None, None) is not None:
                return
            run_job(engine, job_name, given, cmd, context=run_context(None))
        finally:
            if engine is not None:
                engine.close()
    except (Exception, KeyboardInterrupt) as exc:
        exit_plain(exc)
