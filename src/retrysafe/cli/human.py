"""Human decisions: resolve, approve, retry, forget (each recorded with who and why), and
resume: run an outcome's recorded command again."""

from __future__ import annotations

from typing import Any, NoReturn

import click

from ..errors import InvalidInput
from ..keys import parse_assignments
from ._common import (
    actor,
    emit_json,
    json_option,
    key_and_step,
    key_argument,
    params_option,
    refuse_placeholder,
    state,
)


@click.command()
@key_and_step
@click.option("--found", metavar="EVIDENCE", help="The effect exists; this proves it.")
@click.option("--absent", is_flag=True, help="The effect does not exist; it may be executed.")
@click.option("--note", default="", help="Why (kept in the history).")
@click.option("--rerun", is_flag=True,
              help="Then run the outcome's recorded command again (as 'retrysafe resume').")
@json_option
def resolve(key: str, step_name: str, found: str | None, absent: bool, note: str, rerun: bool,
            as_json: bool) -> None:
    """Settle an unknown or blocked step after checking the external system.

    Once nothing else blocks it, the outcome is 'settled': it awaits its
    re-run (the next 'retrysafe run', or --rerun here, or 'retrysafe resume').

    \b
    Examples:
      retrysafe resolve content:2026-W32 publish --found post-4711 --note "seen in WP admin"
      retrysafe resolve content:2026-W32 publish --absent --rerun
    """
    if (found is None) == (not absent):
        raise InvalidInput("give exactly one of --found EVIDENCE or --absent")
    if found is not None and not found.strip():
        raise InvalidInput("--found needs the evidence (provider id, URL, SHA...)")
    if found is not None:
        refuse_placeholder("--found", found)
    from ..process import attempt_liveness

    engine = state().engine
    ledger = engine.existing_ledger()
    if rerun:
        from .run import stored_command

        stored_command(key, ledger.attempts(key))  # nothing to re-run: refuse before settling
    got = ledger.resolve(key, step_name, found=found, actor=actor(), note=note,
                         liveness=attempt_liveness)
    if rerun:
        if not as_json:
            click.echo(f"{got.state}: step {got.name} of {key} ({got.reason})")
        _rerun(key, as_json, extra={"resolved": got.to_json()})
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"{got.state}: step {got.name} of {key} ({got.reason})")


@click.command()
@key_and_step
@click.option("--note", default="", help="Why (kept in the history).")
@click.option("--new", is_flag=True,
              help="The outcome has not recorded this step yet: approve it ahead of its first run.")
@click.option("--job", "job_name", metavar="JOB",
              help="With --new, before the outcome's first run: the job whose parameters (-p) "
                   "name KEY.")
@params_option()
@json_option
def approve(key: str, step_name: str, note: str, new: bool, job_name: str | None,
            params: tuple[str, ...], as_json: bool) -> None:
    """Record authority for a step whose class needs approval (payment, delete).

    \b
    Example:
      retrysafe approve invoice:2026-11 charge --note "checked amount with finance"
      retrysafe approve invoice:2026-12 charge --new --job invoice -p month=2026-12
    """
    engine = state().engine
    if job_name is None:
        if params:
            raise InvalidInput("-p names the parameters of --job; give --job too")
        got = engine.existing_ledger().approve(key, step_name, actor=actor(), note=note, new=new)
    else:
        if not new:
            raise InvalidInput("--job approves a step ahead of the outcome's first run: add --new")
        _, rendered, canonical = engine.outcome_key(job_name, parse_assignments(params))
        if rendered != key:
            raise InvalidInput(f"job {job_name} with these parameters names outcome {rendered}, "
                               f"not {key}")
        got = engine.ledger.approve(key, step_name, actor=actor(), note=note, new=True,
                                    job=job_name, params=canonical)
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"approved: step {got.name} of {key}; run the job again to continue")


@click.command()
@key_argument
@click.option("--note", default="", help="Why (kept in the history).")
@json_option
def retry(key: str, note: str, as_json: bool) -> None:
    """Give an outcome a fresh attempt budget (after the limit blocked it).

    \b
    Example:
      retrysafe retry weekly-ops-report:2026-W32
    """
    out = state().engine.existing_ledger().retry(key, actor=actor(), note=note)
    if as_json:
        emit_json(out.to_json())
    else:
        click.echo(f"{out.state}: {key}: {out.reason}")


@click.command()
@key_and_step
@click.option("--note", default="", help="Why (kept in the history).")
@json_option
def forget(key: str, step_name: str, note: str, as_json: bool) -> None:
    """Withdraw a planned step that never ran (approved ahead, or by mistake).

    \b
    Example:
      retrysafe forget invoice:2026-11 chrage --note "typo in approve"
    """
    got = state().engine.existing_ledger().forget(key, step_name, actor=actor(), note=note)
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"forgotten: step {got.name} of {key}")


def _rerun(key: str, as_json: bool, extra: dict[str, Any] | None = None) -> NoReturn:
    """Run ``key``'s recorded command again, as ``retrysafe run`` ran it: the same
    job and parameters, the same words, in the same folder."""
    from .run import run_job, stored_command

    engine = state().engine
    ledger = engine.existing_ledger()
    out = ledger.require_outcome(key)
    cmd, cwd = stored_command(key, ledger.attempts(key))
    _, derived, _ = engine.outcome_key(out.job, out.params)
    if derived != key:
        raise InvalidInput(f"job {out.job} now names this outcome {derived!r}, not {key!r} (its "
                           "key changed in the config); run it with 'retrysafe run'", key=key)
    run_job(engine, out.job, out.params, cmd, context={"resumed_by": actor()}, cwd=cwd,
            as_json=as_json, extra=extra)


@click.command()
@key_argument
@json_option
def resume(key: str, as_json: bool) -> None:
    """Run an outcome's recorded command again, exactly as 'retrysafe run' did.

    The same job, parameters, command and folder as the latest attempt that
    'retrysafe run' started; the outcome's state decides as for any run
    (done: nothing to do; blocked: exit 3 with the command that unblocks it).
    An outcome only ever driven by 'retrysafe begin' has no command: exit 2.

    \b
    Example:
      retrysafe resume weekly-ops-report:2026-W32
    """
    _rerun(key, as_json)
