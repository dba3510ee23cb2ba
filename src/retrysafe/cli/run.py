"""``retrysafe run``: one attempt at a job's outcome around any command."""

from __future__ import annotations

import os
import shutil
import sys

import click

from ..crash import crash_point
from ..engine import unblock_hint
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    InvalidInput,
    OutcomeBlocked,
    StaleAttempt,
)
from ..keys import parse_assignments
from ..states import ClaimStatus
from ..supervise import run_command
from ._common import params_option, state


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


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option("--openclaw-run-id", metavar="ID", help="Record OpenClaw's run id with the attempt.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(job_name: str, params: tuple[str, ...], openclaw_run_id: str | None,
        cmd: tuple[str, ...]) -> None:
    """Run CMD as the next attempt at JOB's outcome, unless it is already done.

    \b
    Done: says so, exits 0, does not run CMD.   Busy: exits 75.
    Blocked: exits 3 with the reason and the command that unblocks it.
    Otherwise CMD runs with RETRYSAFE_OUTCOME_KEY, RETRYSAFE_ATTEMPT_ID,
    RETRYSAFE_ATTEMPT_DIR... set; exit 0 leads to close-out.

    \b
    Example:
      retrysafe run weekly-ops-report -p week=2026-W32 -- ./send-report.sh
    """
    st = state()
    engine = st.engine
    if shutil.which(cmd[0]) is None:
        raise InvalidInput(f"command not found: {cmd[0]}")
    begun = engine.begin(job_name, parse_assignments(params), context=run_context(openclaw_run_id))
    key = begun.key
    if begun.status is ClaimStatus.DONE:
        click.echo(f"done: {key} is already done; nothing to do")
        sys.exit(EXIT_DONE)
    refusal = begun.refusal()
    if isinstance(refusal, OutcomeBlocked):
        click.echo(f"blocked: {key}: {refusal.reason}")
        click.echo(f"to unblock: {refusal.unblock}")
        sys.exit(EXIT_BLOCKED)
    if refusal is not None:
        click.echo(f"busy: {refusal.message}")
        sys.exit(refusal.exit_code)
    attempt_run = begun.run
    assert attempt_run is not None and attempt_run.attempt is not None
    crash_point("run", "after-begin")
    rc = run_command(attempt_run, cmd)
    if attempt_run.lost.is_set():
        click.echo(f"stale: attempt {attempt_run.number} of {key} lost its lease to another "
                   "attempt; nothing more was recorded")
        sys.exit(EXIT_BUSY)
    crash_point("run", "before-closeout")
    why = f"command exited {rc}" if rc >= 0 else f"command killed by signal {-rc}"
    try:
        out = attempt_run.close(success=rc == 0, reason=why)
    except StaleAttempt as exc:
        click.echo(f"stale: {exc}")
        sys.exit(EXIT_BUSY)
    line = f"{out.state}: {key} (attempt {attempt_run.number})"
    if out.reason:
        line += f": {out.reason}"
    click.echo(line)
    if out.state == "done":
        sys.exit(EXIT_DONE)
    if out.state == "blocked":
        click.echo(f"to unblock: {unblock_hint(engine.ledger, out)}")
        sys.exit(EXIT_BLOCKED)
    sys.exit(EXIT_FAILED)
