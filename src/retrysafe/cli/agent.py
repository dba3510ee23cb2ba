"""The agent protocol: the effect algorithm driven one phase per command.

An agent turn (an OpenClaw automation, a chat task) is not one long-lived
process, so it cannot sit inside ``retrysafe run``. It drives the same phases
the library runs in :meth:`Run.effect`, one shell call at a time::

    retrysafe begin JOB -p NAME=VALUE --json        # claim an attempt (lease only)
    retrysafe check KEY STEP --class C --attempt A   # execute | skip | lookup | blocked
    retrysafe intent KEY STEP --class C --attempt A  # write-ahead 'running'
    ...the one tool call that acts...
    retrysafe record KEY STEP --evidence ID --attempt A
    retrysafe close KEY --attempt A

``begin`` holds the outcome by a lease, not by a process: every later command
of the attempt renews it, and when the agent goes away the lease runs out and
the next run takes over (its writes are then fenced off).

Exit codes: 0 fine; 2 protocol or input error, nothing changed (``record``
of a step never intended, ``intent`` on a step that must be looked up first);
3 blocked, a human must act; 75 busy, or this attempt was superseded.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..attempt import Decision, Run
from ..engine import Engine, unblock_hint
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    Busy,
    InvalidInput,
    StaleAttempt,
    StepBlocked,
)
from ..keys import parse_assignments, step_key
from ..ledger import Holder
from ..process import host_id
from ._common import emit_json, json_option, state
from .missed import missed

__all__ = [
    "AGENT_COMMANDS",
    "begin",
    "block",
    "check",
    "close",
    "intent",
    "missed",
    "record",
    "unknown",
]

_LEASE_FIELD = "agent_lease_seconds"
_STATE_EXIT = {"done": EXIT_DONE, "blocked": EXIT_BLOCKED}


def _attempt_option(f: Any) -> Any:
    return click.option(
        "--attempt",
        "attempt_id",
        envvar="RETRYSAFE_ATTEMPT_ID",
        metavar="ID",
        help="Attempt id printed by 'retrysafe begin' (default: $RETRYSAFE_ATTEMPT_ID).",
    )(f)


def _class_option(f: Any) -> Any:
    return click.option(
        "--class",
        "effect_class",
        required=True,
        metavar="CLASS",
        help="Effect class: read, local_write, git_commit, message, publish, payment, delete.",
    )(f)


def _item_option(f: Any) -> Any:
    return click.option("--item", metavar="ID", help="Per-item work: the step key gets /ID.")(f)


def _attach(engine: Engine, key: str, attempt_id: str | None) -> Run:
    """The caller's attempt at ``key``, its lease renewed (the agent is alive)."""
    run = engine.attach(attempt_id)
    assert run.attempt is not None
    if run.key != key:
        raise InvalidInput(
            f"attempt {run.attempt.id} belongs to {run.key}, not {key}: "
            "use the key 'retrysafe begin' printed",
            key=key,
        )
    lease = float(run.attempt.context.get(_LEASE_FIELD, run.job.lease_seconds))
    engine.ledger.renew(run.attempt, lease)
    return run


def _reader(engine: Engine, key: str) -> Run:
    """A read-only view of ``key`` for ``check`` without an attempt."""
    out = engine.ledger.require_outcome(key)
    return Run.finished(engine, engine.config.job(out.job), out)


def _persist_block(
    run: Run, step: str, item: str | None, decision: Decision, effect_class: str
) -> StepBlocked:
    """Make a policy block visible in the ledger (status shows it), then report it."""
    record = run.ledger.step(decision.step_key)
    if run.attempt is None or (record is not None and record.state == "blocked"):
        return StepBlocked(
            f"step {step} of {run.key} is blocked: {decision.reason}; to unblock: {decision.unblock}",
            key=run.key,
            step=step,
            unblock=decision.unblock,
        )
    return run.block(  # the phase the library's effect() uses for the same case
        step,
        item,
        record,
        decision.reason,
        decision.unblock,
        approval=decision.reason.startswith("awaiting approval"),
        effect_class=effect_class,
    )


# --- begin -----------------------------------------------------------------------------


@click.command()
@click.argument("job_name", metavar="JOB")
@click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A job parameter (repeat for each).",
)
@click.option(
    "--lease",
    type=click.IntRange(min=1),
    metavar="SECONDS",
    help="How long the attempt survives without a command (default: the job's lease).",
)
@json_option
def begin(job_name: str, params: tuple[str, ...], lease: int | None, as_json: bool) -> None:
    """Start an attempt at JOB's outcome for an agent that runs step by step.

    Prints the outcome key, the attempt id to pass as --attempt, and the
    attempt folder to work in. Already done: exit 0, nothing to do.
    Busy: exit 75. Blocked: exit 3 with the command that unblocks it.

    \b
    Example:
      retrysafe begin weekly-ops-report --json
    """
    from ..openclaw.context import detect_context

    engine = state().engine
    spec = engine.config.job(job_name)
    lease_seconds = lease or spec.lease_seconds
    context = {**detect_context(), _LEASE_FIELD: str(lease_seconds)}
    # No pid: an agent's shell calls come and go; the lease alone says it is alive.
    begun = engine.begin(
        job_name,
        parse_assignments(params),
        holder=Holder(host=host_id(), pid=None),
        context=context,
    )
    info: dict[str, Any] = {
        "status": begun.status,
        "key": begun.key,
        "job": job_name,
        "state": begun.outcome.state,
    }
    if begun.status == "started":
        run = begun.run
        assert run is not None and run.attempt is not None
        engine.ledger.renew(run.attempt, lease_seconds)
        info.update(
            attempt_id=run.attempt.id,
            attempt=run.number,
            folder=str(run.dir),
            lease_seconds=lease_seconds,
        )
        code = EXIT_DONE
        line = f"started: {begun.key} attempt {run.number} (id {run.attempt.id}); work in {run.dir}"
    elif begun.status == "done":
        code, line = EXIT_DONE, f"done: {begun.key} is already done; nothing to do"
    elif begun.status == "busy":
        holder = begun.claim.attempt
        info["holder_attempt"] = holder.number if holder else None
        code = EXIT_BUSY
        line = f"busy: {begun.key} is held by attempt {holder.number if holder else '?'}; try later"
    else:
        info["reason"] = begun.reason
        info["unblock"] = unblock_hint(engine.ledger, begun.outcome)
        code = EXIT_BLOCKED
        line = f"blocked: {begun.key}: {begun.reason}; to unblock: {info['unblock']}"
    if as_json:
        emit_json(info)
    else:
        click.echo(line)
    sys.exit(code)


# --- check -----------------------------------------------------------------------------


@click.command()
@click.argument("key")
@click.argument("step_name", metavar="STEP")
@_class_option
@_item_option
@_attempt_option
@json_option
def check(
    key: str,
    step_name: str,
    effect_class: str,
    item: str | None,
    attempt_id: str | None,
    as_json: bool,
) -> None:
    """Decide what to do about one effect step before acting.

    \b
    execute  nothing recorded: go on with 'retrysafe intent'      exit 0
    skip     already done; the evidence is printed                exit 0
    lookup   an earlier try may have acted: look for the step key exit 0
    blocked  a human must act; the command to run is printed      exit 3
    busy     the step is running elsewhere                        exit 75

    \b
    Example:
      retrysafe check weekly-ops-report:2026-W32 send --class message --json
    """
    engine = state().engine
    run = _attach(engine, key, attempt_id) if attempt_id else _reader(engine, key)
    # The agent itself can search the external system, so it always has a lookup.
    decision = run.decide(step_name, effect_class, item=item, has_lookup=True)
    if decision.action == "blocked" and run.attempt is not None:
        blocked = _persist_block(run, step_name, item, decision, effect_class)
        decision = Decision(
            "blocked",
            decision.step_key,
            "blocked",
            reason=decision.reason,
            unblock=blocked.unblock or decision.unblock,
        )
    if as_json:
        emit_json({"key": key, **decision.to_json()})
    else:
        click.echo(_decision_line(decision))
    sys.exit({"blocked": EXIT_BLOCKED, "busy": EXIT_BUSY}.get(decision.action, EXIT_DONE))


def _decision_line(d: Decision) -> str:
    if d.action == "execute":
        return f"execute: {d.step_key} has no record; intend, act once, record"
    if d.action == "skip":
        return f"skip: {d.step_key} is done; evidence: {d.evidence}"
    if d.action == "lookup":
        return f"lookup: {d.reason}"
    if d.action == "blocked":
        return f"blocked: {d.step_key}: {d.reason}; to unblock: {d.unblock}"
    return f"{d.action}: {d.step_key}: {d.reason}"


# --- intent ----------------------------------------------------------------------------


@click.command()
@click.argument("key")
@click.argument("step_name", metavar="STEP")
@_class_option
@_item_option
@click.option(
    "--absent",
    metavar="WHERE",
    help="After 'lookup': you searched WHERE and the step key is not there.",
)
@_attempt_option
def intent(
    key: str,
    step_name: str,
    effect_class: str,
    item: str | None,
    absent: str | None,
    attempt_id: str | None,
) -> None:
    """Record write-ahead 'running' just before the one action.

    Refused (exit 2, nothing changed) when the step is done, or when an
    earlier try may have acted and no --absent lookup was given.

    \b
    Example:
      retrysafe intent weekly-ops-report:2026-W32 send --class message --attempt ID
    """
    engine = state().engine
    run = _attach(engine, key, attempt_id)
    decision = run.decide(step_name, effect_class, item=item, has_lookup=True, looked_up=absent is not None)
    skey = decision.step_key
    if decision.action == "skip":
        raise InvalidInput(
            f"step {step_name} of {key} is already done (evidence: {decision.evidence}); do not act again",
            key=key,
            step=step_name,
            state="done",
        )
    if decision.action == "lookup":
        raise InvalidInput(
            f"look first: {decision.reason}. Found: 'retrysafe record {key} {step_name} "
            f"--evidence ID'. Certainly absent: add --absent WHERE",
            key=key,
            step=step_name,
            state=decision.state,
        )
    if decision.action == "blocked":
        raise _persist_block(run, step_name, item, decision, effect_class)
    if decision.action == "busy":
        raise Busy(decision.reason, key=key, step=step_name, state=decision.state)
    assert run.attempt is not None
    if absent is not None:
        run.folder.log(run.attempt.id, skey, "lookup", "absent", where=absent)
    run.intent(step_name, effect_class, item=item)
    click.echo(f"running: {skey}; act once now, then 'retrysafe record {key} {step_name} --evidence ID'")


# --- record / unknown / block ------------------------------------------------------------


@click.command()
@click.argument("key")
@click.argument("step_name", metavar="STEP")
@click.option(
    "--evidence",
    required=True,
    metavar="TEXT",
    help="What proves the effect: provider message id, post id and URL, commit SHA...",
)
@_item_option
@_attempt_option
def record(key: str, step_name: str, evidence: str, item: str | None, attempt_id: str | None) -> None:
    """Record the evidence of an action, right after it happened.

    Also settles a step a lookup found. A step never intended is refused
    (exit 2); a superseded attempt gets exit 75 and the evidence echoed so a
    human can record it with 'retrysafe resolve'.

    \b
    Example:
      retrysafe record weekly-ops-report:2026-W32 send --evidence '<id@mail>' --attempt ID
    """
    evidence = evidence.strip()
    if not evidence:
        raise InvalidInput("--evidence is empty: give the provider's id for the effect")
    engine = state().engine
    try:
        run = _attach(engine, key, attempt_id)
    except StaleAttempt as exc:
        raise _unrecorded(exc, key, step_name, evidence) from None
    assert run.attempt is not None
    skey = step_key(key, step_name, item)
    step = run.ledger.step(skey)
    if step is None:
        raise InvalidInput(
            f"step {step_name} of {key} was never intended: run 'retrysafe check' and "
            "'retrysafe intent' before acting",
            key=key,
            step=step_name,
        )
    try:
        if step.state == "done":
            if step.evidence == evidence:
                click.echo(f"done: {skey} (already recorded)")
                return
            raise InvalidInput(
                f"step {step_name} of {key} is already done with evidence {step.evidence}; "
                f"refusing to record {evidence}",
                key=key,
                step=step_name,
                state="done",
            )
        if step.state == "blocked":
            raise StepBlocked(
                f"step {step_name} of {key} is blocked ({step.reason}); to unblock: "
                f"retrysafe resolve {key} {step_name} --found {evidence}",
                key=key,
                step=step_name,
                unblock=f"retrysafe resolve {key} {step_name} --found {evidence}",
            )
        if step.state == "running" and step.attempt_id == run.attempt.id:
            run.record(step_name, evidence, item=item)
        else:
            # unknown, failed, or running under an attempt that is gone: a lookup found it
            run.settle_found(step_name, evidence, item=item, how="agent lookup")
    except StaleAttempt as exc:
        raise _unrecorded(exc, key, step_name, evidence) from None
    click.echo(f"done: {skey}; evidence: {evidence}")


def _unrecorded(exc: StaleAttempt, key: str, step: str, evidence: str) -> StaleAttempt:
    return StaleAttempt(
        f"{exc.message}; evidence {evidence} was NOT recorded: if {key}/{step} is still "
        f"unknown, run 'retrysafe resolve {key} {step} --found {evidence}'",
        key=key,
        step=step,
    )


@click.command()
@click.argument("key")
@click.argument("step_name", metavar="STEP")
@click.option("--reason", required=True, metavar="TEXT", help="What happened (timeout, no answer...).")
@_item_option
@_attempt_option
def unknown(key: str, step_name: str, reason: str, item: str | None, attempt_id: str | None) -> None:
    """Mark an intended step 'unknown': it may or may not have happened.

    The next run is told to look it up before acting.

    \b
    Example:
      retrysafe unknown weekly-ops-report:2026-W32 send --reason 'SMTP timeout' --attempt ID
    """
    engine = state().engine
    run = _attach(engine, key, attempt_id)
    skey = step_key(key, step_name, item)
    step = run.ledger.step(skey)
    if step is None or step.state != "running":
        raise InvalidInput(
            f"step {step_name} of {key} is {step.state if step else 'not started'}, not running: "
            "only an intended step can become unknown",
            key=key,
            step=step_name,
            state=step.state if step else None,
        )
    run.mark_unknown(step_name, reason, item=item)
    click.echo(f"unknown: {skey}; the next run looks it up before acting")


@click.command()
@click.argument("key")
@click.argument("step_name", metavar="STEP")
@click.option("--reason", required=True, metavar="TEXT", help="Exactly what a human must check to settle it.")
@_item_option
@_attempt_option
def block(key: str, step_name: str, reason: str, item: str | None, attempt_id: str | None) -> None:
    """Stop a step for a human: the lookup was ambiguous. Exits 3.

    \b
    Example:
      retrysafe block KEY publish --reason 'two drafts titled X: ids 41, 42' --attempt ID
    """
    engine = state().engine
    run = _attach(engine, key, attempt_id)
    skey = step_key(key, step_name, item)
    step = run.ledger.step(skey)
    if step is not None and step.state in ("done", "blocked"):
        raise InvalidInput(
            f"step {step_name} of {key} is {step.state}; nothing to block",
            key=key,
            step=step_name,
            state=step.state,
        )
    raise run.block(
        step_name,
        item,
        step,
        reason,
        f"retrysafe resolve {key} {step_name} --found EVIDENCE | --absent",
    )


# --- close -------------------------------------------------------------------------------


@click.command()
@click.argument("key")
@click.option(
    "--failed",
    "failed_reason",
    metavar="REASON",
    help="The work did not succeed: close as failed (or unknown/blocked, as steps say).",
)
@_attempt_option
@json_option
def close(key: str, failed_reason: str | None, attempt_id: str | None, as_json: bool) -> None:
    """Close the attempt: 'done' only when every step and check passed.

    Exit 0 done, 3 blocked, 1 failed or unknown.

    \b
    Example:
      retrysafe close weekly-ops-report:2026-W32 --attempt ID
    """
    engine = state().engine
    run = _attach(engine, key, attempt_id)
    out = run.close(success=failed_reason is None, reason=failed_reason or "")
    unblock = unblock_hint(engine.ledger, out) if out.state == "blocked" else ""
    if as_json:
        emit_json(
            {
                "key": key,
                "state": out.state,
                "reason": out.reason,
                "unblock": unblock,
                "attempt": run.number,
            }
        )
    else:
        line = f"{out.state}: {key} (attempt {run.number})"
        click.echo(line + (f": {out.reason}" if out.reason else ""))
        if unblock:
            click.echo(f"to unblock: {unblock}")
    sys.exit(_STATE_EXIT.get(out.state, EXIT_FAILED))


AGENT_COMMANDS: list[click.Command] = [begin, check, intent, record, unknown, block, close, missed]
"""Registered by the main group: ``retrysafe begin/check/intent/record/unknown/block/close``,
and ``retrysafe missed`` (which occurrences an agent or a human still has to backfill)."""
