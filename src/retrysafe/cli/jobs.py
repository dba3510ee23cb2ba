"""``retrysafe jobs`` and ``retrysafe job add``: the declared jobs."""

from __future__ import annotations

import re
from typing import Any

import click

from ..config import CONFIG_NAME, ensure_home, parse_job
from ..errors import ConfigError, HomeNotWritable, InvalidInput, not_text
from ..fsio import atomic_write_bytes
from ..keys import check_template, parse_assignments
from ._common import emit_json, json_option, state, table


@click.command()
@json_option
def jobs(as_json: bool) -> None:
    """List the jobs declared in the config.

    \b
    Example:
      retrysafe jobs --json
    """
    config = state().engine.config
    if as_json:
        emit_json({name: {"key": j.key, "params": dict(j.params), "max_attempts": j.max_attempts,
                          "lease_seconds": j.lease_seconds, "schedule": j.schedule, "tz": j.tz,
                          "catch_up": j.catch_up.text if j.catch_up else None, "keep": j.keep}
                   for name, j in config.jobs.items()})
        return
    if not config.jobs:
        click.echo(f"no jobs declared in {config.settings.config_path}")
        return
    table(["job", "key", "params", "attempts", "lease"],
          [[j.name, j.key, ", ".join(f"{k}={v}" for k, v in j.params.items()), j.max_attempts,
            f"{j.lease_seconds}s"] for j in config.jobs.values()])


@click.group()
def job() -> None:
    """Declare jobs."""


@job.command("add")
@click.argument("name")
@click.option("--key", "template", required=True, metavar="TEMPLATE",
              help="Outcome key template, e.g. 'weekly-ops-report:{week}'.")
@click.option("--param", "params", multiple=True, metavar="NAME=TYPE",
              help="A parameter and its type (str, slug, int, date, month, isoweek, occurrence).")
@click.option("--max-attempts", type=int, default=None, help="Attempt limit (default 5).")
@click.option("--lease-seconds", type=int, default=None, help="Lease length (default 900).")
@click.option("--schedule", default=None, metavar="CRON", help="Cron schedule, for occurrence parameters.")
@click.option("--tz", default=None, metavar="ZONE", help="Time zone of the schedule, e.g. Europe/Warsaw.")
@click.option("--catch-up", "catch_up", is_flag=False, flag_value="true", default=None,
              metavar="[WINDOW]",
              help="Each run first finishes the earlier unfinished occurrences inside WINDOW "
                   "(an age like 7d, or a number of occurrences; alone: 7d). Needs --schedule "
                   "and an occurrence parameter.")
@click.option("--keep", default=None, metavar="AGE",
              help="How long 'retrysafe prune' keeps this job's outcomes, e.g. 90d.")
@click.option("--replace", is_flag=True, help="Replace a job of the same name.")
def add(name: str, template: str, params: tuple[str, ...], max_attempts: int | None,
        lease_seconds: int | None, schedule: str | None, tz: str | None,
        catch_up: str | None, keep: str | None, replace: bool) -> None:
    """Write a job into the config (validated first; the file is replaced atomically).

    \b
    Example:
      retrysafe job add weekly-ops-report --key 'weekly-ops-report:{week}' --param week=isoweek
      retrysafe job add nightly --key 'nightly:{at}' --param at=occurrence \\
        --schedule '0 3 * * *' --tz Europe/Warsaw --catch-up 3 --keep 90d
    """
    st = state()
    config = st.engine.config
    table_: dict[str, Any] = {"key": template, "params": parse_assignments(params, "--param")}
    window: str | int | bool | None = catch_up
    if catch_up is not None:  # as the config spells it: true, a count or an age
        window = (True if catch_up == "true" else
                  int(catch_up) if re.fullmatch(r"[0-9]{1,9}", catch_up) else catch_up)
    for field, value in (("max_attempts", max_attempts), ("lease_seconds", lease_seconds),
                         ("schedule", schedule), ("tz", tz), ("catch_up", window), ("keep", keep)):
        if value is not None:
            table_[field] = value
    check_template(template)
    parse_job(name, table_)  # refuses before anything is written
    path = config.settings.config_path
    if path.parent == config.home and path.name == CONFIG_NAME:
        ensure_home(config.home)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise ConfigError(f"config {path}: {exc.strerror or exc}") from None
    import tomlkit  # only 'job add' edits TOML; keep it off every other command's start-up

    try:
        doc = tomlkit.parse(text)
    except Exception as exc:  # noqa: BLE001 - tomlkit raises several parse error types
        raise ConfigError(f"config {path}: {exc}") from None
    jobs_table = doc.setdefault("jobs", tomlkit.table(is_super_table=True))
    if name in jobs_table and not replace:
        raise InvalidInput(f"job {name!r} already exists in {path}; pass --replace to overwrite it")
    entry = tomlkit.table()
    for field, value in table_.items():
        if field == "params":
            inline = tomlkit.inline_table()
            inline.update(value)
            entry[field] = inline
        else:
            entry[field] = value
    jobs_table[name] = entry
    try:
        data = tomlkit.dumps(doc).encode("utf-8")
    except UnicodeEncodeError as exc:  # an argument holding bytes that are not UTF-8
        raise InvalidInput(f"job {name!r}: {not_text(exc).message}") from None
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise HomeNotWritable(f"config {path} cannot be written: {exc.strerror or exc}") from None
    click.echo(f"added job {name} to {path}")
