"""``retrysafe metrics``: the ledger's health in the Prometheus text format."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import InvalidInput
from ._common import state

__all__ = ["metrics"]


@click.command()
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write to FILE (atomically, for node-exporter's textfile collector) "
                   "instead of printing.")
def metrics(textfile: Path | None) -> None:
    """Print the ledger's metrics (outcomes by job and state, executions, lookups,
    skips, blocks, the oldest outcome waiting for a human), as /metrics of
    'retrysafe ui' serves them. Needs the ui extra.

    \b
    Example:
      retrysafe metrics --textfile /var/lib/node_exporter/textfile/retrysafe.prom
    """
    from ..ui import require_extra

    require_extra()
    from ..metrics import render_kept, write_textfile

    engine = state().engine
    ledger = engine.existing_ledger()
    if textfile is None:
        click.echo(render_kept(ledger, engine.config.settings.home).decode("utf-8"), nl=False)
        return
    try:
        warning = write_textfile(ledger, textfile)
    except OSError as exc:
        raise InvalidInput(f"cannot write {textfile}: {exc.strerror or exc}") from None
    if warning:
        click.echo(f"retrysafe: warning: {warning}", err=True)
