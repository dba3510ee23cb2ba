"""The agent protocol: the effect algorithm driven one phase per command.

An agent turn (an OpenClaw automation, a chat task) is not one long-lived
process, so it cannot sit inside ``retrysafe run``. It drives the same phases
the library runs in :meth:`Run.effect`, one shell call at a time::

    retrysafe begin JOB -p NAME=VALUE --json        # claim an attempt (lease only)
    retrysafe check KEY STEP --class C --attempt A   # execute | skip | lookup | blocked
    retrysafe intent KEY STEP --class C --attempt A  # write-ahead 'running'
    ...the one tool call that acts...
    retrysafe record KEY STEP --attempt A --evidence <EVIDENCE>
    retrysafe close KEY --attempt A

``intent`` prints the ``record`` line to run after the action (``--json``: ``next``)
with ``<EVIDENCE>`` standing for the evidence: as printed, the shell refuses it, and
``record`` refuses a placeholder (``ID``, ``EVIDENCE``, ``PROVIDER_ID``, bare or in
``<...>``) as evidence, so a line pasted unedited records nothing.

``begin`` holds the outcome by a lease, not by a process: every later command
of the attempt renews it, and when the agent goes away the lease runs out and
the next run takes over (its writes are then fenced off).

Exit codes: 0 fine; 2 protocol or input error, nothing changed (``record``
of a step never intended, ``intent`` on a step that must be looked up first);
3 blocked, a human must act; 75 busy, or this attempt was superseded.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click

from .. import envvars
from ..attempt import Decision, Run
from ..effects import parse_class
from ..engine import unblock_hint
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    AttemptNotActive,
    InvalidInput,
    StaleAttempt,
    not_text,
)
from ..keys import parse_assignments, step_key, step_ref
from ..ledger import Holder, OutcomeRecord
from ..process import host_id
from ..states import Action, ClaimStatus
from ._common import (
    emit_json,
    json_option,
    key_and_step,
    key_argument,
    params_option,
    refuse_placeholder,
    state,
)

__all__ = ["begin", "block", "check", "close", "intent", "record", "unknown"]

_STATE_EXIT = {"done": EXIT_DONE, "blocked": EXIT_BLOCKED}
_ACTION_EXIT = {Action.BLOCKED: EXIT_BLOCKED, Action.BUSY: EXIT_BUSY}


def _attempt_option(f: Any) -> Any:
    return click.option(
        "--attempt",
        "attempt_id",
        envvar=envvars.ATTEMPT_ID,
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


def _valid(key: str, step_name: str, item: str | None, effect_class: str | None = None) -> str:
    """Refuse bad input before anything is written (renewing the lease is a
    write: a refused command must leave the attempt as it was); returns the
    step key."""
    if effect_class is not None:
        parse_class(effect_class)
    return step_key(key, step_name, item)


_CC = "\x00-\x1f\x7f-\x9f\u2028\u2029"  # control characters and line breaks
_CONTROL = re.compile(f" *[{_CC}][ {_CC}]*")


def _text(value: str, option: str) -> str:
    """A free-text option (``--evidence``, ``--reason``, ``--absent``, ``--failed``) as one
    line: each run of line breaks and other control characters becomes one space, as
    every line that shows it (``status``, an error, ``needs-attention``) is one line.
    Bytes that are not UTF-8 are refused here, before the lease is renewed."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{option}: {not_text(exc).message}") from None
    return _CONTROL.sub(" ", value).strip()


def _resume(key: str, attempt_id: str | None) -> Run:
    """The agent's attempt at ``key``, its lease renewed (:meth:`Engine.resume`). An
    attempt of another outcome is refused as such (exit 2) even when it has ended: an
    id kept from an earlier turn names an attempt long finished, and exit 75 would
    tell the agent its own attempt was taken over."""
    engine = state().engine
    engine.existing_ledger()
    try:
        return engine.resume(key, attempt_id)
    except StaleAttempt as exc:
        if exc.key is None or exc.key == key:
            raise
        raise InvalidInput(f"attempt {attempt_id} belongs to {exc.key}, not {key}: use the "
                           "key and attempt id 'retrysafe begin' printed", key=key) from None


def _step_json(key: str, step_name: str, item: str | None, skey: str, step_state: str,
               **fields: Any) -> dict[str, Any]:
    """What an agent command reports about one step, as ``--json`` prints it."""
    return {"key": key, "step": step_name, "item": item, "step_key": skey, "state": step_state,
            **fields}


# --- begin -----------------------------------------------------------------------------

_CONTEXT_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def _context_fields(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--context NAME=VALUE`` pairs: short lowercase names, one-line printable values
    (at most 200 characters); the fields retrysafe sets itself cannot be given."""
    from ..engine import LEASE_FIELD
    from .run import COMMAND_FIELD, CWD_FIELD

    fields = parse_assignments(pairs, "--context")
    for name, value in fields.items():
        if not _CONTEXT_NAME.fullmatch(name) or name in (LEASE_FIELD, COMMAND_FIELD, CWD_FIELD):
            raise InvalidInput(f"--context {name!r}: a name is lowercase letters, digits and _ "
                               "(at most 40), and not one retrysafe records itself")
        if len(value) > 200 or not value.isprintable():
            raise InvalidInput(f"--context {name}: the value must be one printable line of at "
                               "most 200 characters")
    return fields


@click.command()
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option(
    "--lease",
    type=click.IntRange(1, 10**9 - 1),
    metavar="SECONDS",
    help="How long the attempt survives without a command (default: the job's lease).",
)
@click.option(
    "--context", "contexts", multiple=True, metavar="NAME=VALUE",
    help="Recorded with the attempt (repeatable): who started it, e.g. a scheduler's run id "
         "(openclaw_run_id=...), so its history joins the ledger's.",
)
@json_option
def begin(job_name: str, params: tuple[str, ...], lease: int | None, contexts: tuple[str, ...],
          as_json: bool) -> None:
    """Start an attempt at JOB's outcome for an agent that runs step by step.

    Prints the outcome key, the attempt id to pass as --attempt, and the
    attempt folder to work in. Already done: exit 0, nothing to do.
    Busy: exit 75. Blocked: exit 3 with the command that unblocks it.
    An occurrence named with -p that is not due yet: exit 2, nothing recorded.
    A done or busy answer given to a run that names itself (--context
    runner=... or openclaw_run_id=...) is put in the outcome's history.

    \b
    Example:
      retrysafe begin weekly-ops-report --json
      retrysafe begin weekly-ops-report --context openclaw_run_id=r-123 --json
    """
    from ..openclaw.context import detect_context

    given = _context_fields(contexts)
    engine = state().engine
    lease_seconds = lease or engine.config.job(job_name).lease_seconds
    context = {**detect_context(), **given}
    # No pid: an agent's shell calls come and go; the lease alone says it is alive.
    begun = engine.begin(job_name, parse_assignments(params), holder=Holder(host=host_id(), pid=None),
                         context=context, lease_seconds=lease_seconds)
    if begun.run is None and begun.status in (ClaimStatus.DONE, ClaimStatus.BUSY) and given:
        engine.note_answer(begun, context)
    info: dict[str, Any] = {"status": begun.status.value, "key": begun.key, "job": job_name,
                            "state": begun.outcome.state}
    refusal = begun.refusal()
    run = begun.run
    if run is not None and run.attempt is not None:
        attempt = run.attempt
        info.update(attempt_id=attempt.id, attempt=attempt.number, folder=str(run.dir),
                    lease_seconds=lease_seconds, lease_expires=attempt.lease_expires)
        code = EXIT_DONE
        line = f"started: {begun.key} attempt {attempt.number} (id {attempt.id}); work in {run.dir}"
    elif begun.status is ClaimStatus.DONE:
        code, line = EXIT_DONE, f"done: {begun.key} is already done; nothing to do"
    elif begun.status is ClaimStatus.BUSY:
        assert refusal is not None
        holder = begun.claim.attempt
        info["holder_attempt"] = holder.number if holder else None
        code, line = EXIT_BUSY, f"busy: {refusal.message}"
    else:
        info["reason"] = begun.reason
        info["unblock"] = begun.unblock
        code = EXIT_BLOCKED
        line = f"blocked: {begun.key}: {begun.reason}; to unblock: {begun.unblock}"
    if as_json:
        emit_json(info)
    else:
        click.echo(line)
    sys.exit(code)


# --- check -----------------------------------------------------------------------------


@click.command()
@key_and_step
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
    _valid(key, step_name, item, effect_class)
    engine = state().engine
    engine.existing_ledger()
    run = _resume(key, attempt_id) if attempt_id else engine.reader(key)
    decision = run.check(step_name, effect_class, item=item)
    if as_json:
        emit_json({"key": key, **decision.to_json()})
    else:
        click.echo(_decision_line(decision))
    sys.exit(_ACTION_EXIT.get(decision.action, EXIT_DONE))


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
@key_and_step
@_class_option
@_item_option
@click.option(
    "--absent",
    metavar="WHERE",
    help="After 'lookup': you searched WHERE and the step key is not there.",
)
@_attempt_option
@json_option
def intent(
    key: str,
    step_name: str,
    effect_class: str,
    item: str | None,
    absent: str | None,
    attempt_id: str | None,
    as_json: bool,
) -> None:
    """Record write-ahead 'running' just before the one action.

    Refused (exit 2, nothing changed) when the step is done, or when an
    earlier try may have acted and no --absent lookup was given.

    Prints the 'record' line to run after the action (--json: 'next'), with
    <EVIDENCE> standing for the provider's id: replace it before running the line.

    \b
    Example:
      retrysafe intent weekly-ops-report:2026-W32 send --class message --attempt ID
    """
    _valid(key, step_name, item, effect_class)
    if absent is not None:
        absent = _text(absent, "--absent")
    run = _resume(key, attempt_id)
    skey = run.intend(step_name, effect_class, item=item, absent=absent)
    record = run.record_command(step_name, item)
    if as_json:
        emit_json(_step_json(key, step_name, item, skey, "running", next=record))
    else:
        click.echo(f"running: {skey}; act once now, then '{record}'")


# --- record / unknown / block ------------------------------------------------------------


@click.command()
@key_and_step
@click.option(
    "--evidence",
    required=True,
    metavar="TEXT",
    help="What proves the effect: provider message id, post id and URL, commit SHA...",
)
@_item_option
@_attempt_option
@json_option
def record(key: str, step_name: str, evidence: str, item: str | None, attempt_id: str | None,
           as_json: bool) -> None:
    """Record the evidence of an action, right after it happened.

    Also settles a step a lookup found. A step never intended is refused
    (exit 2), and so is a placeholder as the evidence (ID, EVIDENCE or
    PROVIDER_ID, bare or in <...>); a superseded attempt gets exit 75 and the
    evidence echoed so a human can record it with 'retrysafe resolve'.

    \b
    Example:
      retrysafe record weekly-ops-report:2026-W32 send --evidence '<id@mail>' --attempt ID
    """
    evidence = _text(evidence, "--evidence")
    if not evidence:
        raise InvalidInput("--evidence is empty: give the provider's id for the effect")
    refuse_placeholder("--evidence", evidence)
    skey = _valid(key, step_name, item)
    try:
        run = _resume(key, attempt_id)
    except StaleAttempt as exc:
        # a record repeated after its answer was lost (the attempt closed or was taken
        # over since): done with exactly this evidence is recorded, whoever recorded it
        done = state().engine.ledger.step(skey)
        if done is None or done.state != "done" or done.evidence != evidence:
            raise StaleAttempt.unrecorded(exc, key, step_ref(key, step_name, item),
                                          evidence) from None
        recorded = False
    else:
        recorded = run.record_evidence(step_name, evidence, item=item)
    if as_json:
        emit_json(_step_json(key, step_name, item, skey, "done", evidence=evidence,
                             recorded=recorded))
    elif recorded:
        click.echo(f"done: {skey}; evidence: {evidence}")
    else:
        click.echo(f"done: {skey} (already recorded)")


@click.command()
@key_and_step
@click.option("--reason", required=True, metavar="TEXT", help="What happened (timeout, no answer...).")
@_item_option
@_attempt_option
@json_option
def unknown(key: str, step_name: str, reason: str, item: str | None, attempt_id: str | None,
            as_json: bool) -> None:
    """Mark an intended step 'unknown': it may or may not have happened.

    The next run is told to look it up before acting.

    \b
    Example:
      retrysafe unknown weekly-ops-report:2026-W32 send --reason 'SMTP timeout' --attempt ID
    """
    skey = _valid(key, step_name, item)
    reason = _text(reason, "--reason")
    _resume(key, attempt_id).declare_unknown(step_name, reason, item=item)
    if as_json:
        emit_json(_step_json(key, step_name, item, skey, "unknown", reason=reason))
    else:
        click.echo(f"unknown: {skey}; the next run looks it up before acting")


@click.command()
@key_and_step
@click.option("--reason", required=True, metavar="TEXT", help="Exactly what a human must check to settle it.")
@_item_option
@_attempt_option
@json_option
def block(key: str, step_name: str, reason: str, item: str | None, attempt_id: str | None,
          as_json: bool) -> None:
    """Stop a step for a human: the lookup was ambiguous. Exits 3.

    \b
    Example:
      retrysafe block KEY publish --reason 'two drafts titled X: ids 41, 42' --attempt ID
    """
    skey = _valid(key, step_name, item)
    reason = _text(reason, "--reason")
    stopped = _resume(key, attempt_id).declare_blocked(step_name, reason, item=item)
    if not as_json:
        raise stopped
    emit_json(_step_json(key, step_name, item, skey, "blocked", reason=stopped.reason,
                         cause=stopped.cause.value, unblock=stopped.unblock))
    sys.exit(stopped.exit_code)


# --- close -------------------------------------------------------------------------------


def _closed(key: str, attempt_id: str | None) -> tuple[OutcomeRecord, int] | None:
    """The outcome ``key`` as attempt ``attempt_id`` closed it, with the attempt's number:
    when that attempt finished and was the outcome's last (none after it, none running)."""
    ledger = state().engine.ledger
    attempt = ledger.attempt(attempt_id) if attempt_id else None
    out = ledger.outcome(key)
    if attempt is None or attempt.state != "finished" or out is None \
            or out.current_attempt is not None or out.attempts != attempt.number:
        return None
    return out, attempt.number


@click.command()
@key_argument
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
    if failed_reason is not None:
        failed_reason = _text(failed_reason, "--failed")
    engine = state().engine
    try:
        run = _resume(key, attempt_id)
    except AttemptNotActive:
        closed = _closed(key, attempt_id)  # a close repeated after its answer was lost
        if closed is None:
            raise
        (out, number), again = closed, ", closed already"
    else:
        out = run.close(success=failed_reason is None, reason=failed_reason or "")
        number, again = run.number, ""
    unblock = unblock_hint(engine.ledger, out) if out.state == "blocked" else ""
    if as_json:
        emit_json(
            {
                "key": key,
                "state": out.state,
                "reason": out.reason,
                "unblock": unblock,
                "attempt": number,
            }
        )
    else:
        line = f"{out.state}: {key} (attempt {number}{again})"
        click.echo(line + (f": {out.reason}" if out.reason else ""))
        if unblock:
            click.echo(f"to unblock: {unblock}")
    sys.exit(_STATE_EXIT.get(out.state, EXIT_FAILED))
