"""``retrysafe break-lease``: a human ends an attempt that is stuck."""

from __future__ import annotations

import click

from ._common import actor, emit_json, json_option, key_argument, state


@click.command("break-lease")
@key_argument
@click.option("--note", default="", help="Why (kept in the history).")
@json_option
def break_lease(key: str, note: str, as_json: bool) -> None:
    """End the attempt holding KEY, even though its processes still run.

    A live attempt on this host is never taken over automatically (not even
    when its lease ran out): its command may still be acting. When you know it
    is stuck (a frozen process, a hung command), break its lease: its later
    writes are refused, its running steps become unknown, and the next run
    looks them up before acting. Stop its processes yourself if they can still
    act (the busy message lists them).

    \b
    Example:
      retrysafe break-lease weekly-ops-report:2026-W32 --note "pid 4121 hung on SMTP"
    """
    got = state().engine.break_lease(key, actor=actor(), note=note)
    if as_json:
        emit_json(got.to_json())
    else:
        click.echo(f"broken: attempt {got.number} of {key} ({got.result}); run the job again "
                   "to continue")
