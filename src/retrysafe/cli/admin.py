"""Operating the ledger: migrate, doctor; and the demo."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import EXIT_FAILED, ConfigError
from ..ledger import display_url, open_ledger
from ..ledger.migrations import SCHEMA_VERSION
from ._common import emit_json, json_option, state

if TYPE_CHECKING:
    from ..engine import Engine


@click.command()
@json_option
def migrate(as_json: bool) -> None:
    """Apply pending schema migrations to the ledger.

    \b
    Example:
      RETRYSAFE_LEDGER=postgresql://retrysafe@db/ops retrysafe migrate
    """
    settings = state().engine.config.settings
    if settings.ledger_url.startswith("sqlite:///"):
        from ..identity import refuse_missing_file

        refuse_missing_file(settings.home, Path(settings.ledger_url.removeprefix("sqlite:///")))
    with open_ledger(settings.ledger_url, auto_migrate=False,
                     sqlite_synchronous=settings.sqlite_synchronous) as ledger:
        applied = ledger.migrate()
        version = ledger.schema_version()
        url = ledger.url
    if as_json:
        emit_json({"ledger": url, "applied": applied, "schema_version": version})
    elif applied:
        click.echo(f"migrated {url} to schema {version} (applied {', '.join(map(str, applied))})")
    else:
        click.echo(f"{url} is at schema {version}; nothing to do")


def _scrubbed(text: str, url: str) -> str:
    """``text`` without the URL's passwords (the ledger's own errors are masked
    already; this covers anything else that echoed the URL)."""
    from ..ledger.conninfo import MASK, secrets

    text = text.replace(url, display_url(url))
    for secret in sorted(secrets(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


@click.command()
@json_option
def doctor(as_json: bool) -> None:
    """Check the home, the config and the ledger, and say what is wrong.

    \b
    Example:
      retrysafe doctor
    """
    st = state()
    try:
        engine = st.engine
    except ConfigError as exc:
        # a config that cannot be read is a finding, not a misuse of doctor: exit 1
        from ..location import config_file, resolve_home

        home = resolve_home(st.home)
        broken = {"home": str(home), "config": str(config_file(home, st.config)),
                  "config_error": exc.message, "ok": False}
        if as_json:
            emit_json(broken)
        else:
            for k, v in broken.items():
                click.echo(f"{k:20} {v}")
        sys.exit(EXIT_FAILED)
    settings = engine.config.settings
    report: dict[str, object] = {
        "home": str(settings.home),
        "config": str(settings.config_path),
        "config_exists": settings.config_path.is_file(),
        "jobs": sorted(engine.config.jobs),
    }
    ok = True
    report["ledger"] = display_url(settings.ledger_url)
    # doctor reads: a mistyped home is reported, never created
    report["home_exists"] = settings.home.is_dir()
    sqlite_file = (Path(settings.ledger_url.removeprefix("sqlite:///"))
                   if settings.ledger_url.startswith("sqlite:///") else None)
    if not report["home_exists"]:
        report["home_state"] = "does not exist yet: the first run creates it (is --home right?)"
    lost = _lost_ledger(settings.home)
    if sqlite_file is not None and not sqlite_file.exists():
        report["ledger_state"] = "missing" if lost else "not created yet: the first run creates it"
        if lost:
            ok = False
            report["problems"] = [f"the ledger file {sqlite_file} is missing, but {lost}"]
    elif sqlite_file is not None and sqlite_file.is_file() and sqlite_file.stat().st_size == 0:
        # not opened: opening would write SQLite's header into it
        report["ledger_state"] = ("a file of no bytes" if lost
                                  else "a file of no bytes: the first run makes it a ledger")
        if lost:
            ok = False
            report["problems"] = [f"the ledger file {sqlite_file} is empty, but {lost}"]
    else:
        try:
            _check_ledger(engine, report)
            ok = not report.get("problems")
        except Exception as exc:  # noqa: BLE001 - doctor reports, it does not crash
            ok = False
            report["ledger_error"] = _scrubbed(str(exc), settings.ledger_url)
    report["ok"] = ok
    if as_json:
        emit_json(report)
    else:
        for k, v in report.items():
            for line in v if isinstance(v, list) and k == "problems" else [v]:
                click.echo(f"{'problem' if k == 'problems' else k:20} {line}")
    sys.exit(0 if ok else EXIT_FAILED)


def _lost_ledger(home: Path) -> str:
    """What a home without a ledger still holds, as the rest of a problem line (empty:
    nothing, a new home): every command refuses such a ledger (identity.py)."""
    from ..identity import MARK, has_outcome_folders

    runs = home / "runs"
    if not (runs / MARK).is_file() and not has_outcome_folders(runs):
        return ""
    return (f"{runs} was written with one: every command refuses to run until it is put "
            "back, or rebuilt from the attempt folders with 'retrysafe recover'")


def _check_ledger(engine: Engine, report: dict[str, object]) -> None:
    """The ledger's schema and health, read without migrating it: a database with no
    retrysafe tables (a mistyped URL, a file of no bytes) is reported, not filled."""
    from ..identity import check_home

    settings = engine.config.settings
    ledger = open_ledger(settings.ledger_url, sqlite_synchronous=settings.sqlite_synchronous,
                         must_exist=True, auto_migrate=False)
    try:
        version = ledger.schema_version()
        report.update({"ledger": ledger.url, "schema_version": version,
                       "code_schema_version": SCHEMA_VERSION, **ledger.backend.health()})
        if version == 0:
            lost = _lost_ledger(engine.home)
            report["ledger_state"] = ("no retrysafe tables" if lost else
                                      "no retrysafe tables yet: the first run creates them "
                                      "(is the ledger URL right?)")
            if lost:
                report["problems"] = [f"the ledger has no retrysafe tables, but {lost}"]
            return
        if version < SCHEMA_VERSION:
            report["ledger_state"] = (f"schema {version} of {SCHEMA_VERSION}: the next run, or "
                                      "'retrysafe migrate', applies the rest")
            return
        check_home(engine.home, ledger, settings.ledger_url, write=False)
    finally:
        ledger.close()


@click.command()
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Use this folder as the demo home and keep it.")
def demo(keep: Path | None) -> None:
    """Run a small content pipeline, crash it once, re-run it, and show one outcome.

    Uses a temporary home; touches nothing else.
    """
    from ..demo import run_demo

    sys.exit(run_demo(keep))
