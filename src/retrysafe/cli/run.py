"""``retrysafe run``: one attempt at a job's outcome around any command.

The attempt records the command it runs and the folder it runs in (its
context: ``command``, ``cwd``), so ``retrysafe resume KEY`` can run it again
exactly as this command would.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from ..crash import crash_point
from ..engine import Engine, unblock_hint
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    InvalidInput,
    NoStoredCommand,
    OutcomeBlocked,
    StaleAttempt,
)
from ..keys import parse_assignments
from ..ledger import AttemptRecord
from ..states import ClaimStatus
from ..supervise import run_command
from ._common import emit_json, json_option, params_option, state

__all__ = ["COMMAND_FIELD", "CWD_FIELD", "run", "run_job", "stored_command"]

COMMAND_FIELD = "command"
"""The attempt's context field holding the command it ran (a JSON list of words)."""
CWD_FIELD = "cwd"
"""The attempt's context field holding the folder the command ran in."""


def run_context(openclaw_run_id: str | None) -> dict[str, str]:
    """What the scheduler tells us about this run, recorded with the attempt."""
    context: dict[str, str] = {}
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


def _check_startable(argv0: str, cwd: str) -> None:
    """A command that cannot start is refused (exit 2) before anything is recorded."""
    if os.sep in argv0:
        found = (Path(cwd) / argv0).is_file() and os.access(Path(cwd) / argv0, os.X_OK)
    else:
        found = shutil.which(argv0) is not None
    if not found:
        raise InvalidInput(f"command not found: {argv0}")


def _finish(result: dict[str, Any], lines: list[str], code: int, as_json: bool) -> NoReturn:
    if as_json:
        emit_json({**result, "exit_code": code})
    else:
        for line in lines:
            click.echo(line)
    sys.exit(code)


def run_job(engine: Engine, job_name: str, params: Mapping[str, str], cmd: Sequence[str], *,
            context: Mapping[str, str], cwd: str | None = None, as_json: bool = False,
            extra: Mapping[str, Any] | None = None) -> NoReturn:
    """One attempt at ``job_name``'s outcome around ``cmd``: claim, run, close out,
    print the result (as JSON with ``as_json``, ``extra`` fields added) and exit
    with its code."""
    folder = cwd or os.getcwd()
    if cwd is not None and not Path(cwd).is_dir():
        raise InvalidInput(f"the folder the command ran in is gone: {cwd}")
    _check_startable(cmd[0], folder)
    recorded = {**context, COMMAND_FIELD: json.dumps(list(cmd)), CWD_FIELD: folder}
    begun = engine.begin(job_name, params, context=recorded)
    key = begun.key
    result: dict[str, Any] = {**(extra or {}), "key": key, "job": job_name,
                              "status": begun.status.value,
                              "state": begun.outcome.state, "attempt": None, "reason": "",
                              "unblock": ""}
    if begun.status is ClaimStatus.DONE:
        if context.get("runner") or context.get("openclaw_run_id"):
            # a scheduler's re-run: its history and ours join on this event (one write);
            # a re-run from a shell keeps the one-read answer
            engine.note_answer(begun, recorded)
        _finish(result, [f"done: {key} is already done; nothing to do"], EXIT_DONE, as_json)
    refusal = begun.refusal()
    if isinstance(refusal, OutcomeBlocked):
        result.update(reason=refusal.reason, unblock=refusal.unblock)
        _finish(result, [f"blocked: {key}: {refusal.reason}", f"to unblock: {refusal.unblock}"],
                EXIT_BLOCKED, as_json)
    if refusal is not None:
        if begun.status is ClaimStatus.BUSY:
            engine.note_answer(begun, recorded)
        result["reason"] = refusal.message
        _finish(result, [f"busy: {refusal.message}"], refusal.exit_code, as_json)
    attempt_run = begun.run
    assert attempt_run is not None and attempt_run.attempt is not None
    result["attempt"] = attempt_run.number
    crash_point("run", "after-begin")
    # with --json, stdout carries the result alone: the command's output goes to stderr
    rc = run_command(attempt_run, cmd, cwd=cwd, stdout=sys.stderr if as_json else None)
    result["command_exit"] = rc
    if attempt_run.lost.is_set():
        why = (f"attempt {attempt_run.number} of {key} lost its lease to another attempt; "
               "nothing more was recorded")
        result.update(status="stale", reason=why)
        _finish(result, [f"stale: {why}"], EXIT_BUSY, as_json)
    crash_point("run", "before-closeout")
    why = f"command exited {rc}" if rc >= 0 else f"command killed by signal {-rc}"
    try:
        out = attempt_run.close(success=rc == 0, reason=why)
    except StaleAttempt as exc:
        result.update(status="stale", reason=str(exc))
        _finish(result, [f"stale: {exc}"], EXIT_BUSY, as_json)
    result.update(state=out.state, reason=out.reason)
    line = f"{out.state}: {key} (attempt {attempt_run.number})"
    if out.reason:
        line += f": {out.reason}"
    if out.state == "done":
        _finish(result, [line], EXIT_DONE, as_json)
    if out.state == "blocked":
        result["unblock"] = unblock_hint(engine.ledger, out)
        _finish(result, [line, f"to unblock: {result['unblock']}"], EXIT_BLOCKED, as_json)
    _finish(result, [line], EXIT_FAILED, as_json)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option("--openclaw-run-id", metavar="ID", help="Record OpenClaw's run id with the attempt.")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(job_name: str, params: tuple[str, ...], openclaw_run_id: str | None, as_json: bool,
        cmd: tuple[str, ...]) -> None:
    """Run CMD as the next attempt at JOB's outcome, unless it is already done.

    \b
    Done: says so, exits 0, does not run CMD.   Busy: exits 75.
    Blocked: exits 3 with the reason and the command that unblocks it.
    Otherwise CMD runs with RETRYSAFE_OUTCOME_KEY, RETRYSAFE_ATTEMPT_ID,
    RETRYSAFE_ATTEMPT_DIR... set; exit 0 leads to close-out. The attempt
    records CMD and the current folder, for 'retrysafe resume KEY'. With
    --json the result is one JSON object on stdout and CMD's output goes to
    stderr.

    \b
    Example:
      retrysafe run weekly-ops-report -p week=2026-W32 -- ./send-report.sh
    """
    run_job(state().engine, job_name, parse_assignments(params), cmd,
            context=run_context(openclaw_run_id), as_json=as_json)
