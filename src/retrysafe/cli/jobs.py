"""``retrysafe jobs`` and ``retrysafe job add``: the declared jobs."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
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
    # a linked config (kept with dotfiles, say) is written where it lives; the link stays
    target = Path(os.path.realpath(path))
    with _locked(path, target.parent):  # two 'job add' at once: each sees the other's job
        try:
            text = target.read_text("utf-8")
            if not os.stat(target).st_mode & 0o222:
                raise HomeNotWritable(f"config {path} is read-only; make it writable "
                                      "(chmod u+w) to add a job to it")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config {path}: {getattr(exc, 'strerror', None) or exc}") from None
        import tomllib

        try:
            before = tomllib.loads(text, parse_float=str)  # compared as written: nan is nan
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {path}: {exc}") from None
        jobs_before = before.get("jobs", {})
        if not isinstance(jobs_before, dict):
            raise ConfigError(f"config {path}: [jobs] must hold tables")
        old = jobs_before.get(name)
        if old is not None and not replace:
            raise InvalidInput(f"job {name!r} already exists in {path}; pass --replace to "
                               "overwrite it")
        data = _with_job(text, name, table_, {**before, "jobs": {**jobs_before, name: table_}})
        if data is None:
            raise ConfigError(f"config {path}: its [jobs] is written inline or with dotted keys, "
                              f"which 'job add' cannot extend without changing them; add "
                              f"[jobs.{name}] by hand")
        try:
            atomic_write_bytes(target, data)
        except OSError as exc:
            raise HomeNotWritable(f"config {path} cannot be written: {exc.strerror or exc}"
                                  ) from None
    dropped = sorted(set(old or ()) - set(table_))
    if old is None:
        click.echo(f"added job {name} to {path}")
    else:
        click.echo(f"replaced job {name} in {path}"
                   + (f" (dropped, not given: {', '.join(dropped)})" if dropped else ""))


@contextlib.contextmanager
def _locked(path: Path, folder: Path) -> Iterator[None]:
    """The config's folder, locked (``flock``) while its file is read, changed and
    replaced: the file itself is replaced, so a lock on it would protect nothing."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise HomeNotWritable(f"config {path} cannot be written: {exc.strerror or exc}") from None
    try:
        import fcntl  # POSIX only: imported where the lock is taken

        with contextlib.suppress(OSError):  # a file system without locks: unlocked, as before
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _with_job(text: str, name: str, table_: dict[str, Any],
              expected: dict[str, Any]) -> bytes | None:
    """``text`` with ``[jobs.NAME]`` set to ``table_``, comments and formatting kept;
    ``None`` when neither way of writing it reads back as ``expected`` (every other
    entry unchanged)."""
    import tomllib

    import tomlkit  # only 'job add' edits TOML; keep it off every other command's start-up

    def entry() -> Any:
        out = tomlkit.table()
        for field, value in table_.items():
            if field == "params":
                inline = tomlkit.inline_table()
                inline.update(value)
                out[field] = inline
            else:
                out[field] = value
        return out

    def edited() -> str:  # into the document, after the jobs already there
        doc = tomlkit.parse(text)
        doc.setdefault("jobs", tomlkit.table(is_super_table=True))[name] = entry()
        return tomlkit.dumps(doc)

    def appended() -> str:  # a new table at the end (jobs written with dotted keys)
        jobs_ = tomlkit.table(is_super_table=True)
        jobs_[name] = entry()
        tail = tomlkit.document()
        tail["jobs"] = jobs_
        return text + ("\n" if text.endswith("\n") else "\n\n" if text else "") + tomlkit.dumps(tail)

    for write in (edited, appended):
        try:
            out = write()
            data = out.encode("utf-8")
        except UnicodeEncodeError as exc:  # an argument holding bytes that are not UTF-8
            raise InvalidInput(f"job {name!r}: {not_text(exc).message}") from None
        except Exception:  # noqa: BLE001 - tomlkit refuses some layouts (an inline [jobs])
            continue
        try:
            if tomllib.loads(out, parse_float=str) == expected:
                return data
        except tomllib.TOMLDecodeError:
            continue
    return None
