"""``retrysafe prune``: remove old outcomes, their history and their folders."""

from __future__ import annotations

from pathlib import Path

import click

from ..housekeeping import prune as prune_home
from ..readout import one_line
from ._common import emit_json, json_option, state

__all__ = ["prune"]


@click.command()
@click.option("--older-than", metavar="AGE",
              help="Last changed more than AGE ago (90d, 12h, 2w); default: each job's keep.")
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only outcomes in this state (repeatable); never blocked or unknown.")
@click.option("--job", "job_name", metavar="JOB", help="Only this job's outcomes.")
@click.option("--drills", is_flag=True,
              help="Prune drill trials (keys with ~) instead: all of them, or those older than AGE.")
@click.option("--dry-run", is_flag=True, help="Count what would go; remove nothing.")
@click.option("--export", "export", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE.jsonl", help="First append the removed rows to FILE (importable).")
@json_option
def prune(older_than: str | None, states: tuple[str, ...], job_name: str | None, drills: bool,
          dry_run: bool, export: Path | None, as_json: bool) -> None:
    """Remove old outcomes with their attempts, steps, history and runs/ folders.

    Never an outcome that waits for a human (blocked, unknown) or one an
    attempt holds. Without --older-than, each job's `keep` decides (jobs
    without one are kept). A pruned key is forgotten: a run of it starts
    afresh, so prune only keys that will not be run again. A prune killed
    part-way is finished by the next one (--dry-run says how).

    \b
    Example:
      retrysafe prune --older-than 90d --state done --dry-run
    """
    engine = state().engine
    if export is not None:
        from ..ledger.transfer import refuse_ledger_file

        refuse_ledger_file(export, engine.config.settings.ledger_url)
    pruned = prune_home(engine, older_than=older_than, states=states, job=job_name,
                        drills=drills, dry_run=dry_run, export=export)
    if as_json:
        emit_json({"dry_run": dry_run, **pruned.to_json()})
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb}: {pruned.outcomes} outcomes, {pruned.attempts} attempts, {pruned.steps} "
               f"steps, {pruned.events} history rows, {pruned.folders} folders")
    removed, back = pruned.set_aside_removed, pruned.set_aside_put_back
    if removed or back:
        click.echo(f"a killed prune left folders set aside: "
                   f"{'would first remove' if dry_run else 'removed'} {len(removed)} (their "
                   f"outcomes are gone from the ledger) and put back {len(back)} (their outcomes "
                   "are still in it)")
    if dry_run:  # each one, for a person deciding whether to prune
        for path in removed:
            click.echo(f"would remove set-aside folder: {_shown(path)}")
        for path in back:
            click.echo(f"would put back set-aside folder: {_shown(path)}")
    for path in pruned.kept_folders:
        click.echo(f"kept folder (a link or not removable): {path}", err=True)


def _shown(path: str) -> str:
    """A path as one line of text (a name of bytes that are not UTF-8 escaped)."""
    return one_line(path.encode("utf-8", "backslashreplace").decode())
