"""Human decisions: resolve, approve, retry. Each is recorded with who and why."""

from __future__ import annotations

import click

from ..errors import InvalidInput
from ._common import actor, emit_json, json_option, key_and_step, state


@click.command()
@key_and_step
@click.option("--found", metavar="EVIDENCE", help="The effect exists; this proves it.")
@click.option("--absent", is_flag=True, help="The effect does not exist; it may be executed.")
@click.option("--note", default="", help="Why (kept in the history).")
@json_option
def resolve(key: str, step_name: str, found: str | None, absent: bool, note: str,
            as_json: bool) -> None:
    """Settle an unknown or blocked step after checking the external system.

    \b
    Examples:
      retrysafe resolve content:2026-W32 publish --found post-4711 --note "seen in WP admin"
      retrysafe resolve content:2026-W32 publish --absent
    """
    if (found is None) == (not absent):
        raise InvalidInput("give exactly one of --found EVIDENCE or --absent")
    if found is not None and not found.strip():
        raise InvalidInput("--found needs the evidence (provider id, URL, SHA...)")
    from ..process import attempt_liveness

    got = state().engine.existing_ledger().resolve(key, step_name, found=found, actor=actor(),
                                                    note=note, liveness=attempt_liveness)
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"{got.state}: step {got.name} of {key} ({got.reason})")


@click.command()
@key_and_step
@click.option("--note", default="", help="Why (kept in the history).")
@click.option("--new", is_flag=True,
              help="The outcome has not recorded this step yet: approve it ahead of its first run.")
@json_option
def approve(key: str, step_name: str, note: str, new: bool, as_json: bool) -> None:
    """Record authority for a step whose class needs approval (payment, delete).

    \b
    Example:
      retrysafe approve invoice:2026-11 charge --note "checked amount with finance"
    """
    got = state().engine.existing_ledger().approve(key, step_name, actor=actor(), note=note,
                                                    new=new)
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"approved: step {got.name} of {key}; run the job again to continue")


@click.command()
@click.argument("key")
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
