"""Reading commands: status, ls, history, verify."""

from __future__ import annotations

import sys

import click

from ..engine import Engine, unblock_hint
from ..errors import EXIT_DONE, EXIT_FAILED, InvalidInput, UnknownOutcome
from ..folders import outcome_dir
from ..ledger import OutcomeRecord
from ..readout import history_lines, status_lines
from ..states import OutcomeState
from ..timefmt import when
from ._common import emit_json, json_option, key_argument, state, table

_RECENT_KEYS = 5


def require_outcome(engine: Engine, key: str) -> OutcomeRecord:
    """The outcome ``key`` in the existing ledger (a reading command creates
    nothing); a job's name given where a key is expected says so and lists
    the job's recent keys."""
    ledger = engine.existing_ledger()
    out = ledger.outcome(key)
    if out is not None:
        return out
    if key in engine.config.jobs:
        recent = [o.key for o in ledger.outcomes(job=key, limit=_RECENT_KEYS)]
        raise UnknownOutcome(
            f"{key!r} is a job, not an outcome key: "
            + (f"its recent keys: {', '.join(recent)}" if recent
               else "it has no outcomes yet"), key=key)
    return ledger.require_outcome(key)


@click.command()
@key_argument
@json_option
def status(key: str, as_json: bool) -> None:
    """Show an outcome: state, attempts, steps and their evidence.

    \b
    Example:
      retrysafe status weekly-ops-report:2026-W32 --json
    """
    engine = state().engine
    out = require_outcome(engine, key)
    ledger = engine.ledger
    attempts = ledger.attempts(key)
    steps = ledger.steps(key)
    hint = unblock_hint(ledger, out) if out.state == "blocked" else ""
    if as_json:
        emit_json({"outcome": out.to_json(), "attempts": [a.to_json() for a in attempts],
                   "steps": [s.to_json() for s in steps],
                   "folder": str(outcome_dir(engine.home, out.job, key)), "unblock": hint})
        return
    for line in status_lines(engine.home, out, attempts, steps, hint):
        click.echo(line)


@click.command()
@click.option("--job", "job_name", metavar="JOB", help="Only this job's outcomes.")
@click.option("--state", "state_name", metavar="STATE", help="Only outcomes in this state.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10**9),
              help="At most this many.")
@click.option("--drills", is_flag=True, help="Include drill trials (keys with ~), hidden by default.")
@click.option("--attention", is_flag=True,
              help="Only what waits for a human, oldest first (as 'retrysafe needs-attention').")
@json_option
def ls(job_name: str | None, state_name: str | None, limit: int, drills: bool, attention: bool,
       as_json: bool) -> None:
    """List outcomes, newest first.

    \b
    Example:
      retrysafe ls --state blocked
    """
    if state_name is not None and state_name not in tuple(OutcomeState):
        raise InvalidInput(f"unknown state {state_name!r} (states: "
                           f"{', '.join(s.value for s in OutcomeState)})")
    if attention:
        if job_name is not None or state_name is not None:
            raise InvalidInput("--attention lists what waits for a human in every job, in "
                               "any waiting state; it takes no --job or --state")
        from .attention import show_waiting

        show_waiting(drills=drills, limit=limit, as_json=as_json)
        return
    outs = state().engine.existing_ledger().outcomes(job=job_name, state=state_name, limit=limit,
                                                   drills=drills)
    if as_json:
        emit_json([o.to_json() for o in outs])
        return
    table(["key", "state", "attempts", "updated", "reason"],
          [[o.key, o.state, o.attempts, when(o.updated_at), o.reason[:60]] for o in outs])


@click.command()
@key_argument
@json_option
def history(key: str, as_json: bool) -> None:
    """Every transition of an outcome: time, attempt, fencing token, actor, reason.

    \b
    Example:
      retrysafe history weekly-ops-report:2026-W32
    """
    engine = state().engine
    require_outcome(engine, key)
    events = engine.ledger.history(key)
    if as_json:
        emit_json([e.to_json() for e in events])
        return
    for line in history_lines(key, events):
        click.echo(line)


@click.command()
@key_argument
@json_option
def verify(key: str, as_json: bool) -> None:
    """Re-check a done outcome independently: artifacts, stored checks, acceptance.

    Exits 0 when every check passes, 1 otherwise.

    \b
    Example:
      retrysafe verify weekly-ops-report:2026-W32
    """
    from ..verify import verify_outcome

    engine = state().engine
    engine.existing_ledger()
    checks = verify_outcome(engine, key)
    ok = all(c.ok for c in checks)
    if as_json:
        emit_json({"key": key, "ok": ok, "checks": [c.to_json() for c in checks]})
    else:
        table(["check", "result", "detail"], [[c.subject, "ok" if c.ok else "FAIL", c.detail]
                                              for c in checks])
        click.echo(f"verified: {key}" if ok else f"NOT verified: {key}")
    sys.exit(EXIT_DONE if ok else EXIT_FAILED)
