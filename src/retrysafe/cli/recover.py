"""``retrysafe recover``: rebuild a lost ledger from the attempt folders, or adopt a ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import InvalidInput
from ._common import emit_json, json_option, state

if TYPE_CHECKING:
    from ..recover import Recovered


@click.command()
@click.option("--dry-run", is_flag=True, help="Show what would be rebuilt; change nothing.")
@click.option("--adopt", is_flag=True,
              help="Keep the ledger as it is and make it this home's ledger (after a move or an "
                   "import); nothing is rebuilt.")
@json_option
def recover(dry_run: bool, adopt: bool, as_json: bool) -> None:
    """Rebuild an empty ledger from the home's attempt folders.

    What the folders prove (recorded evidence, artifacts with their checksums,
    a done summary) is kept; every other step and outcome becomes 'unknown',
    so the next run checks before it acts. Refused when the ledger already
    records outcomes. Folders a killed prune set aside are named, not recovered:
    move one back to runs/JOB/ first to recover it.

    \b
    Example:
      retrysafe recover --dry-run
      retrysafe recover
    """
    from ..config import ensure_home
    from ..identity import ledger_identity, record_identity
    from ..ledger import open_ledger
    from ..recover import read_home, write

    engine = state().engine
    settings = engine.config.settings
    if not adopt and not (engine.home / "runs").is_dir():
        raise InvalidInput(f"nothing to recover: {engine.home / 'runs'} does not exist "
                           "(is --home right?)")
    if settings.ledger_url.startswith("sqlite:") and not dry_run:
        ensure_home(engine.home)
    recovered = None if adopt else read_home(engine.home)
    if dry_run:
        counts = recovered.counts() if recovered else {}
        if as_json:
            emit_json({"dry_run": True, "adopt": adopt, **counts,
                       "skipped": recovered.skipped if recovered else [],
                       "set_aside": _set_aside(recovered)})
        else:
            _tell_set_aside(recovered)
            click.echo("would adopt the ledger" if adopt else _describe(counts, "would rebuild"))
        return
    wrote = True
    with open_ledger(settings.ledger_url, sqlite_synchronous=settings.sqlite_synchronous) as ledger:
        if recovered is not None:
            wrote = write(ledger, recovered)
        identity = ledger_identity(ledger)
        assert identity is not None
        record_identity(engine.home, identity)
    counts = recovered.counts() if recovered else {}
    if as_json:
        emit_json({"dry_run": False, "adopt": adopt, **counts,
                   "skipped": recovered.skipped if recovered else [],
                   "set_aside": _set_aside(recovered)})
        return
    for why in recovered.skipped if recovered else []:
        click.echo(f"skipped: {why}", err=True)
    _tell_set_aside(recovered)
    click.echo("adopted: this home now uses the ledger as it is" if adopt
               else _describe(counts, "rebuilt" if wrote else "an earlier recover rebuilt"))


def _set_aside(recovered: Recovered | None) -> list[dict[str, str | None]]:
    return [a.to_json() for a in recovered.set_aside] if recovered else []


def _tell_set_aside(recovered: Recovered | None) -> None:
    """Each folder a killed prune set aside: its outcome was pruned, or was about to be
    (killed before the commit), and nothing left tells which."""
    from ..readout import one_line

    for aside in recovered.set_aside if recovered else []:
        whose = f" (outcome {aside.key})" if aside.key else ""
        line = (f"not recovered: {aside.folder}{whose} was set aside by a prune that was "
                "killed, before or after it removed the outcome (nothing tells which); to "
                f"recover it, move it back into runs/{aside.job}/ first")
        click.echo(one_line(line.encode("utf-8", "backslashreplace").decode()), err=True)


def _describe(counts: dict[str, int], verb: str) -> str:
    return (f"{verb} {counts['outcomes']} outcomes ({counts['done']} done, {counts['unknown']} "
            f"unknown: their next run checks before acting), {counts['steps_done']} steps with "
            f"evidence, {counts['steps_unknown']} unknown")
