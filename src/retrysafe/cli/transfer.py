"""``retrysafe export`` / ``retrysafe import``: a whole ledger as JSON lines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import InvalidInput
from ..ledger import Ledger, transfer
from ._common import emit_json, json_option, state

__all__ = ["export", "import_"]


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.jsonl")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@json_option
def export(file: Path, force: bool, as_json: bool) -> None:
    """Write every row of the ledger (outcomes, attempts, steps, history) to FILE.

    One consistent read; FILE is written beside itself and renamed into
    place, 0600. Load it with 'retrysafe import' into another ledger.

    \b
    Example:
      retrysafe export ledger.jsonl
      RETRYSAFE_LEDGER=postgresql://retrysafe@db/ops retrysafe import ledger.jsonl
    """
    if not file.name:
        raise InvalidInput(f"{str(file)!r} names no file to write: give FILE.jsonl")
    if file.exists() and not force:
        raise InvalidInput(f"{file} exists; add --force to overwrite it")
    ledger = state().engine.existing_ledger()
    transfer.refuse_ledger_file(file, ledger.url)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        with transfer.open_private(tmp, append=False) as fh:
            n = transfer.write_lines(fh, transfer.dump(ledger))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InvalidInput(f"cannot write {file}: {exc.strerror or exc}") from None
    if as_json:
        emit_json({"file": str(file), "rows": n - 1, "ledger": ledger.url})
    else:
        click.echo(f"exported {n - 1} rows from {ledger.url} to {file}")


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.jsonl")
@click.option("--merge", is_flag=True,
              help="Add to a ledger that already holds outcomes (refused on any shared key).")
@json_option
def import_(file: Path, merge: bool, as_json: bool) -> None:
    """Load FILE (from 'retrysafe export' or 'prune --export') into the ledger, all or nothing.

    Refused when the ledger holds anything, unless --merge; with --merge,
    refused when any outcome, attempt or step is already there.

    \b
    Example:
      RETRYSAFE_LEDGER=postgresql://retrysafe@db/ops retrysafe import ledger.jsonl
    """
    import itertools

    from ..identity import recorded_identity
    from ..ledger import open_ledger

    engine = state().engine
    records = transfer.read_file(file)
    header = next(records, None)
    if header is not None:
        records = itertools.chain([header], records)
    own = (not merge and header is not None and header.get("identity") is not None
           and header.get("identity") == recorded_identity(engine.home))
    if own:
        # the export of this home's own ledger, moved whole into a new (empty) one, as
        # 'export' + 'import' move a ledger to PostgreSQL: the new ledger is not yet the
        # home's, and becomes it by taking the file's identity (load refuses a
        # ledger that holds anything)
        settings = engine.config.settings
        with open_ledger(settings.ledger_url,
                         sqlite_synchronous=settings.sqlite_synchronous) as ledger:
            _import(engine.home, file, ledger, records, merge, as_json)
        return
    _import(engine.home, file, engine.ledger, records, merge, as_json)


def _import(home: Path, file: Path, ledger: Ledger, records: Iterator[dict[str, Any]],
            merge: bool, as_json: bool) -> None:
    from ..identity import ledger_identity, record_identity

    loaded = transfer.load(ledger, records, merge=merge)
    identity = ledger_identity(ledger)
    if identity is not None and (home / "runs").is_dir():
        record_identity(home, identity)  # a whole import took the source's identity
    c = loaded.counts
    if as_json:
        emit_json({"file": str(file), "ledger": ledger.url, "merge": merge,
                   "outcomes": c["rs_outcomes"], "attempts": c["rs_attempts"],
                   "steps": c["rs_steps"], "history": c["rs_events"]})
    else:
        click.echo(f"imported {c['rs_outcomes']} outcomes, {c['rs_attempts']} attempts, "
                   f"{c['rs_steps']} steps, {c['rs_events']} history rows into {ledger.url}")
