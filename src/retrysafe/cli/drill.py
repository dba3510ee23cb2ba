"""``retrysafe drill``: crash a job at every point on purpose and check the promise."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..drill import POINT_SETS, Drill, render_table
from ..fsio import atomic_write_json
from ..keys import parse_assignments
from ._common import SECONDS, params_option, state


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option("--points", type=click.Choice(POINT_SETS), default="all", show_default=True,
              help="all: every step at every crash point; seed: the named scenarios.")
@click.option("--only", multiple=True, metavar="STEP:POINT",
              help="Only trials matching this pattern (e.g. 'publish:*'); repeatable. "
                   "A pattern that matches no trial is refused.")
@click.option("--max-reruns", default=5, show_default=True, metavar="N",
              help="Re-runs after the fault before a trial gives up.")
@click.option("--timeout", type=SECONDS, default=600.0,
              show_default=True, metavar="SECONDS", help="Longest one run may take.")
@click.option("--json", "json_file", metavar="FILE", help="Write the full report as JSON.")
@click.option("--id", "drill_id", metavar="ID", help="Drill id (default: random).")
@click.option("--cleanup", is_flag=True,
              help="Remove JOB's drill trials (outcomes, history, folders) instead; no CMD.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def drill(job_name: str, params: tuple[str, ...], points: str, only: tuple[str, ...],
          max_reruns: int, timeout: float, json_file: str | None, drill_id: str | None,
          cleanup: bool, cmd: tuple[str, ...]) -> None:
    """Crash JOB at every crash point and check each effect happened exactly once.

    \b
    A clean run learns the steps; then each trial (its own outcome,
    KEY~ID-N) kills the run at one point (or, with --points seed, plays
    a named scenario), re-runs it until it is done or blocked, and checks:
    every effect exists exactly once in the external system, generate
    steps ran once, 'retrysafe verify' passes, nothing is left running.
    Exit 0: every trial passed; 1: a trial failed; 2: bad input (the job's
    effects or lookups ignore RETRYSAFE_STEP_KEY, no lookup to count with,
    a clean run stopped at --timeout, an --id whose trials exist, an --only
    pattern that matches no trial).

    \b
    Drills perform REAL effects: point the job at test targets.
    Trials are hidden from 'retrysafe ls' (--drills shows them);
    'retrysafe drill JOB --cleanup' removes them.

    \b
    Example:
      retrysafe drill content -p week=2026-W32 --points seed --json drill.json -- ./pipeline.sh
    """
    engine = state().engine
    if cleanup:
        if cmd:
            raise click.UsageError("--cleanup takes no CMD")
        from ..housekeeping import prune

        pruned = prune(engine, older_than=None, job=job_name, drills=True)
        click.echo(f"removed {pruned.outcomes} drill trials of {job_name} ({pruned.attempts} "
                   f"attempts, {pruned.steps} steps, {pruned.events} history rows, "
                   f"{pruned.folders} folders)")
        return
    if not cmd:
        raise click.UsageError("Missing argument 'CMD...'.")

    def progress(line: str) -> None:
        click.echo(f"drill: {line}", err=True)

    runner = Drill(engine, job_name, parse_assignments(params), cmd, points=points,
                   max_reruns=max_reruns, timeout=timeout, only=only, drill_id=drill_id,
                   progress=progress)
    report = runner.run()
    for line in render_table(report):
        click.echo(line)
    if json_file:
        atomic_write_json(Path(json_file).absolute(), report.to_json())
    sys.exit(report.exit_code)
