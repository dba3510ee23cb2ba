"""Where the home, the config file and the ledger are: one precedence, one place.

Command-line flag, then environment variable, then the config file, then the
default. The home never depends on the working directory, so running from
another ``cwd`` never means another ledger. :func:`retrysafe.config.load_config`
and the done-step answer (:mod:`retrysafe.donestep`) both use this module, which
stays cheap to import (no job parsing, no policy table).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import envvars
from .errors import ConfigError

__all__ = ["CONFIG_NAME", "SYNC_MODES", "anchored", "config_file", "ledger_settings", "name_given",
           "read_toml", "resolve_home"]

CONFIG_NAME = "retrysafe.toml"
SYNC_MODES = ("full", "normal", "extra")


def resolve_home(flag: str | os.PathLike[str] | None = None) -> Path:
    """``--home``, then ``RETRYSAFE_HOME``, then the per-user state folder."""
    if flag:
        return Path(flag).expanduser().absolute()
    env = os.environ.get(envvars.HOME)
    if env:
        return Path(env).expanduser().absolute()
    import platformdirs  # only when no home is given

    return Path(platformdirs.user_state_dir("retrysafe", appauthor=False))


def config_file(home: Path, flag: str | os.PathLike[str] | None = None) -> Path:
    """``--config``, then ``RETRYSAFE_CONFIG``, then ``HOME/retrysafe.toml``."""
    given = flag or os.environ.get(envvars.CONFIG)
    return Path(given).expanduser().absolute() if given else home / CONFIG_NAME


def named_ledger(flag: str | None = None) -> str | None:
    """The ledger URL named without the config file: ``--ledger``, then ``RETRYSAFE_LEDGER``
    (a relative SQLite path taken from the current folder)."""
    url = flag or os.environ.get(envvars.LEDGER) or None
    return anchored(url, Path.cwd()) if url else None


def name_given(home: str | None, config: str | None, ledger: str | None) -> None:
    """Have every command this process prints (``errors.command_line``) name the home,
    config and ledger it was given as options, absolute, so a printed line pasted in
    another shell or folder acts on the same home. Only options: a variable is not
    repeated, the shell the line is pasted in has it. A ledger URL holding a password
    is left out (printed, it would leak)."""
    from .errors import name_the_home

    name_the_home(given_options(home, config, ledger))


def given_options(home: str | os.PathLike[str] | None, config: str | os.PathLike[str] | None,
                  ledger: str | None) -> tuple[str, ...]:
    """The global options naming ``home``, ``config`` and ``ledger`` (those given),
    absolute, as a printed command repeats them (:func:`name_given`)."""
    options: list[str] = []
    if home:
        options += ["--home", str(Path(home).expanduser().absolute())]
    if config:
        options += ["--config", str(Path(config).expanduser().absolute())]
    if ledger:
        from .ledger.conninfo import mask

        url = anchored(ledger, Path.cwd())
        if mask(url) == url:
            options += ["--ledger", url]
    return tuple(options)


def anchored(url: str, base: Path) -> str:
    """``url``, a relative SQLite path in it made absolute against ``base``: the ledger
    is one file from any working folder, also for the commands a run starts, which may
    change folder (a relative path there opened, or created, another ledger)."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if path and not os.path.isabs(path):
            return f"sqlite:///{base.absolute() / path}"
    return url


def read_toml(path: Path) -> dict[str, Any]:
    """The config file's tables; a missing file is an empty config."""
    import tomllib

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path}: not UTF-8 text (byte {exc.start}); "
                          "save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"config {path}: {exc.strerror or exc}") from None


def ledger_settings(raw: Mapping[str, Any], config_path: Path, home: Path,
                    flag: str | None = None) -> tuple[str, str]:
    """The ledger URL (flag, environment, ``[ledger] url``, the home's SQLite file)
    and SQLite's ``synchronous`` mode."""
    table = raw.get("ledger", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"config {config_path}: [ledger] must be a table")
    url = named_ledger(flag) or table.get("url")
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"config {config_path}: ledger.url must be a string")
    if url is not None:  # the config's own relative path: from the config file's folder
        url = anchored(url, config_path.absolute().parent)
    sync = table.get("sqlite_synchronous", "full")
    if sync not in SYNC_MODES:
        raise ConfigError(
            f"config {config_path}: ledger.sqlite_synchronous must be 'full', 'extra' or 'normal'"
        )
    return url or f"sqlite:///{home / 'ledger.sqlite3'}", sync
