"""``retrysafe needs-attention``: every outcome that waits for a human, and what settles it."""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_FAILED
from ..housekeeping import Attention
from ..housekeeping import needs_attention as find
from ..readout import one_line
from ..timefmt import when
from ._common import emit_json, json_option, state

__all__ = ["needs_attention", "show"]


def show(items: list[Attention], as_json: bool, total: int | None = None) -> None:
    """The waiting outcomes, oldest first: one block each, or JSON. ``total``: how
    many wait in all, when ``items`` are only the oldest of them."""
    if as_json:
        emit_json([i.to_json() for i in items])
        return
    if not items:
        click.echo("nothing needs attention")
        return
    for i in items:
        click.echo(f"{i.key}  {i.state}{f' ({i.cause})' if i.cause else ''}  since {when(i.since)}"
                   f"  job {i.job}")
        if i.reason:
            click.echo(f"  reason  {one_line(i.reason)}")
        for s in i.steps:
            click.echo(f"  step    {s['step']} {s['state']}"
                       + (f" ({s['cause']})" if s["cause"] else "")
                       + (f": {one_line(s['reason'])}" if s["reason"] else ""))
        click.echo(f"  settle  {i.unblock}")
    n = len(items) if total is None else max(total, len(items))
    click.echo(f"{n} outcome{'s' if n != 1 else ''} need{'s' if n == 1 else ''} attention"
               + (f" (the oldest {len(items)} shown)" if n > len(items) else ""))


def show_waiting(*, drills: bool, limit: int | None, as_json: bool) -> list[Attention]:
    """Show what waits (the oldest ``limit``, and then how many wait in all); returns it."""
    engine = state().engine
    items = find(engine, drills=drills, limit=limit)
    total = None
    if limit is not None and len(items) == limit and not as_json:
        total = sum(engine.existing_ledger().retention.attention_counts(drills=drills).values())
    show(items, as_json, total)
    return items


@click.command("needs-attention")
@click.option("--fail-if-any", is_flag=True,
              help="Exit 1 when anything waits (for monitoring); default: exit 0.")
@click.option("--drills", is_flag=True, help="Include drill trials (keys with ~).")
@click.option("--limit", type=click.IntRange(1, 10**9), default=None,
              help="Only the oldest N (the count printed is still of all).")
@json_option
def needs_attention(fail_if_any: bool, drills: bool, limit: int | None, as_json: bool) -> None:
    """List every outcome that waits for a human, oldest first, with the command that settles it.

    Blocked outcomes (an approval, an ambiguous lookup, the attempt limit...)
    and unknown ones no live attempt is settling. Exit 0, or with
    --fail-if-any exit 1 when the list is not empty.

    \b
    Example:
      retrysafe needs-attention --fail-if-any || notify-me
    """
    items = show_waiting(drills=drills, limit=limit, as_json=as_json)
    if fail_if_any and items:
        sys.exit(EXIT_FAILED)
