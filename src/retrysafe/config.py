"""The home folder, the config file and the jobs it declares.

Where the home, config file and ledger are is decided in :mod:`retrysafe.location`
(flag, then environment, then the config file, then the default).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from . import keys
from .effects import EffectClass, Policy, parse_overrides
from .errors import ConfigError, HomeNotWritable, InvalidInput, InvalidParameter, UnknownJob
from .location import CONFIG_NAME, config_file, ledger_settings, read_toml, resolve_home

if TYPE_CHECKING:
    from .catchup import Window
    from .checks import UrlCheck
    from .notify.config import NotifyPlan

__all__ = ["CONFIG_NAME", "Config", "Job", "Settings", "load_config", "resolve_home"]

_TABLES = frozenset({"jobs", "ledger", "connectors", "notify"})
_LEDGER_FIELDS = frozenset({"url", "sqlite_synchronous"})
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LEASE_SECONDS = 900
_JOB_FIELDS = frozenset(
    {
        "key",
        "params",
        "max_attempts",
        "lease_seconds",
        "classes",
        "expected_artifacts",
        "accept",
        "schedule",
        "tz",
        "description",
        "step_timeout",
        "check_timeout",
        "keep",
        "notify",
        "catch_up",
    }
)


def ensure_home(home: Path) -> Path:
    """Create the home (and ``runs/``) or fail with one clear line.

    A new home and its ``runs/`` are private (``0700``, less what the umask
    takes away); an existing home keeps its mode. The home may be a symbolic
    link; ``runs/`` may not (:class:`~retrysafe.errors.UnsafePath`).
    """
    from .fsio import FOLDER_MODE, private_dirs

    try:
        home.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        private_dirs(home, ("runs",))
    except OSError as exc:
        where = exc.filename or home / "runs"
        raise HomeNotWritable(f"home {home} cannot be created ({where}: {exc.strerror or exc})") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise HomeNotWritable(f"home {home} is not writable")
    return home


class Job(NamedTuple):
    """A declared automation: a key template and typed parameters (a named tuple: no
    ``dataclasses`` import on the command line's path)."""

    name: str
    key: str
    params: Mapping[str, str] = MappingProxyType({})
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    classes: Mapping[EffectClass, Policy] = MappingProxyType({})
    expected_artifacts: tuple[str, ...] = ()
    accept: tuple[str | UrlCheck, ...] = ()
    """shell commands, and URL checks (``checks.py``), that must pass before ``done``"""
    schedule: str | None = None
    tz: str | None = None
    description: str = ""
    step_timeout: float | None = None
    """seconds a step's (or generator's) command may run before its process group is killed"""
    check_timeout: float | None = None
    """seconds a step's ``--check`` (or ``--validate``) command may run"""
    keep: float | None = None
    """seconds an outcome is kept after its last change before ``retrysafe prune`` removes it"""
    notify: NotifyPlan | None = None
    """where this job's notifications go (``[notify]``); ``None``: nowhere"""
    catch_up: Window | None = None
    """``retrysafe run`` of the current occurrence first finishes earlier unfinished ones
    inside this window (``catch_up = true``, ``"7d"`` or a number of occurrences)"""

    @property
    def clock_params(self) -> bool:
        """Does the clock fill in a parameter left out (an ``occurrence``)?"""
        return any(t in keys.SCHEDULE_TYPES for t in self.params.values())

    def resolve_params(
        self, given: Mapping[str, str], now: datetime | None = None
    ) -> dict[str, str]:
        """Validate ``given`` against the declared types; returns canonical values.

        An ``occurrence`` parameter may be omitted: it is then the occurrence a run
        started at ``now`` serves (the latest one, which a retry belongs to, or one due
        within seconds: :meth:`~retrysafe.schedule.Schedule.current_at`).
        """
        extra = sorted(set(given) - set(self.params))
        if extra:
            raise InvalidParameter(
                f"job {self.name!r}: unknown parameter {extra[0]!r} "
                f"(declared: {', '.join(self.params) or 'none'})"
            )
        out: dict[str, str] = {}
        for name, type_name in self.params.items():
            value = given.get(name)
            if type_name in keys.SCHEDULE_TYPES:
                from .schedule import resolve_occurrence

                if value is not None and len(value) > keys.MAX_VALUE_LENGTH:
                    raise InvalidParameter(f"parameter {name!r}: value is too long")
                out[name] = resolve_occurrence(self.schedule, self.tz, value, now)
                continue
            if value is None:
                raise InvalidParameter(
                    f"job {self.name!r}: missing parameter {name!r} ({type_name}); "
                    f"pass -p {name}=VALUE (from Python: params={{{name!r}: VALUE}})"
                )
            out[name] = keys.validate_param(name, type_name, value)
        return out

    def outcome_key(
        self, given: Mapping[str, str], now: datetime | None = None
    ) -> tuple[str, dict[str, str]]:
        params = self.resolve_params(given, now)
        return keys.render_key(self.key, params), params


def _job_params(name: str, params_table: object, template: str) -> dict[str, str]:
    """A job's typed parameters; each is used by the key template and each it uses is declared."""
    if not isinstance(params_table, Mapping):
        raise ConfigError(f"job {name!r}: 'params' must be a table of NAME = TYPE")
    params: dict[str, str] = {}
    for pname, ptype in params_table.items():
        if not isinstance(ptype, str) or ptype not in keys.known_types():
            raise ConfigError(
                f"job {name!r}: parameter {pname!r} has unknown type {ptype!r} "
                f"(known: {', '.join(keys.known_types())})"
            )
        params[pname] = ptype
    fields = keys.template_fields(template)
    missing = sorted(set(fields) - set(params))
    if missing:
        raise ConfigError(f"job {name!r}: key uses {{{missing[0]}}} but no such parameter is declared")
    unused = sorted(set(params) - set(fields))
    if unused:
        raise ConfigError(f"job {name!r}: parameter {unused[0]!r} is not used in the key")
    return params


def parse_job(name: str, table: Mapping[str, Any]) -> Job:
    keys.check_name("job", name)
    unknown = sorted(set(table) - _JOB_FIELDS)
    if unknown:
        raise ConfigError(f"job {name!r}: unknown field {unknown[0]!r}")
    template = table.get("key")
    if not isinstance(template, str) or not template:
        raise ConfigError(f"job {name!r}: 'key' must be a non-empty template string")
    params = _job_params(name, table.get("params", {}), template)

    def positive_int(fname: str, default: int) -> int:
        value = table.get(fname, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 10**9:
            raise ConfigError(f"job {name!r}: {fname!r} must be a whole number from 1 "
                              "to 999999999")
        return value

    def seconds(fname: str) -> float | None:
        value = table.get(fname)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1e9:
            raise ConfigError(f"job {name!r}: {fname!r} must be a positive number of seconds")
        return float(value)

    def str_list(fname: str) -> tuple[str, ...]:
        value = table.get(fname, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"job {name!r}: {fname!r} must be a list of strings")
        return tuple(value)

    artifacts = str_list("expected_artifacts")
    for rel in artifacts:
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise ConfigError(f"job {name!r}: expected artifact {rel!r} must stay inside the attempt folder")
    classes = table.get("classes", {})
    if not isinstance(classes, Mapping):
        raise ConfigError(f"job {name!r}: 'classes' must be a table")
    schedule, tz = table.get("schedule"), table.get("tz")
    for fname, value in (("schedule", schedule), ("tz", tz), ("description", table.get("description"))):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"job {name!r}: {fname!r} must be a string")
    if schedule is not None or tz is not None:
        from .schedule import check_schedule, check_zone

        try:  # a zone is checked without a schedule too: an empty or mistyped one is refused
            check_zone(tz)
        except ConfigError as exc:
            raise ConfigError(f"job {name!r}: 'tz': {exc.message}") from None
        if schedule is not None:
            try:
                check_schedule(schedule, tz)
            except ConfigError as exc:
                raise ConfigError(f"job {name!r}: 'schedule': {exc.message}") from None
    return Job(
        name=name,
        key=template,
        params=params,
        max_attempts=positive_int("max_attempts", DEFAULT_MAX_ATTEMPTS),
        lease_seconds=positive_int("lease_seconds", DEFAULT_LEASE_SECONDS),
        classes=parse_overrides(name, classes),
        expected_artifacts=artifacts,
        accept=_accept(name, table),
        schedule=schedule,
        tz=tz,
        description=str(table.get("description") or ""),
        step_timeout=seconds("step_timeout"),
        check_timeout=seconds("check_timeout"),
        keep=_keep(name, table.get("keep")),
        catch_up=_catch_up(name, table.get("catch_up"), schedule, tz, params),
    )


def _accept(name: str, table: Mapping[str, Any]) -> tuple[str | UrlCheck, ...]:
    """A job's ``accept`` checks (``checks.py``, imported only for a job that has some)."""
    if "accept" not in table:
        return ()
    from .checks import parse_accept

    return parse_accept(name, table["accept"])


def _catch_up(name: str, value: object, schedule: str | None, tz: str | None,
              params: Mapping[str, str]) -> Window | None:
    """A job's ``catch_up``: ``true`` (the default window), an age (``"7d"``) or a number
    of occurrences; only for a job whose key comes from its schedule."""
    if value is None or value is False:
        return None
    from .catchup import DEFAULT_WINDOW, parse_window
    from .errors import InvalidInput

    if not schedule or "occurrence" not in params.values():
        raise ConfigError(f"job {name!r}: 'catch_up' needs a schedule and an occurrence "
                          "parameter (earlier occurrences are the schedule's)")
    try:
        window = parse_window(DEFAULT_WINDOW if value is True else value, "'catch_up'")
    except InvalidInput as exc:
        raise ConfigError(f"job {name!r}: {exc.message} (or true for {DEFAULT_WINDOW})") from None
    from .catchup import check_window
    from .schedule import Schedule

    try:  # a window every run would refuse is refused now, once
        check_window(Schedule.parse(schedule, tz), window)
    except InvalidInput as exc:
        raise ConfigError(f"job {name!r}: 'catch_up' {exc.message}") from None
    return window


def _keep(name: str, value: object) -> float | None:
    """A job's ``keep`` (``"90d"``): how long ``retrysafe prune`` keeps its outcomes."""
    if value is None:
        return None
    from .ages import parse_age
    from .errors import InvalidInput

    try:
        if not isinstance(value, str):
            raise InvalidInput("")
        seconds = parse_age(value)
    except InvalidInput:
        raise ConfigError(f"job {name!r}: 'keep' must be an age like \"90d\" (units s, m, h, d, w)"
                          ) from None
    if seconds <= 0:
        # keeping nothing would let 'retrysafe prune' forget an outcome as soon as it is
        # done, and a retry of it would then do its work again
        raise ConfigError(f"job {name!r}: 'keep' {value!r} must be longer than zero (leave keep "
                          "out to keep the job's outcomes until you prune them)")
    return seconds


class Settings(NamedTuple):
    """Where things are, after applying flag > environment > config > default."""

    home: Path
    config_path: Path
    ledger_url: str
    sqlite_synchronous: str = "full"


class Config(NamedTuple):
    settings: Settings
    jobs: Mapping[str, Job]
    connectors: Mapping[str, Mapping[str, Any]]
    raw: Mapping[str, Any]

    @property
    def home(self) -> Path:
        return self.settings.home

    def job(self, name: str) -> Job:
        try:
            return self.jobs[name]
        except KeyError:
            known = ", ".join(sorted(self.jobs)) or "none declared"
            raise UnknownJob(
                f"unknown job {name!r} (known: {known}); declare it with "
                f"'retrysafe job add {name} --key TEMPLATE --param NAME=TYPE'"
            ) from None

    def connector_table(self, name: str) -> Mapping[str, Any]:
        try:
            return self.connectors[name]
        except KeyError:
            known = ", ".join(sorted(self.connectors)) or "none declared"
            raise ConfigError(f"unknown connector {name!r} (declared: {known})") from None


def _read_config(path: Path) -> dict[str, Any]:
    """The config file's tables, each table and ``[ledger]`` field a known one: a
    mistyped ``[ledgr]`` or ``urll`` would otherwise be ignored, and the ledger silently
    another one."""
    try:
        raw = read_toml(path)
    except RecursionError:
        raise ConfigError(f"config {path}: nested too deeply") from None
    except ConfigError:
        with contextlib.suppress(OSError), path.open("rb") as fh:
            if fh.read(3) == b"\xef\xbb\xbf":
                raise ConfigError(f"config {path}: starts with a byte order mark (BOM); "
                                  "save it as UTF-8 without one") from None
        raise
    for what, table, known in (("table [{}]", raw, _TABLES),
                               ("field ledger.{}", raw.get("ledger"), _LEDGER_FIELDS)):
        unknown = sorted(set(table) - known) if isinstance(table, Mapping) else []
        if unknown:
            raise ConfigError(f"config {path}: unknown {what.format(unknown[0])} "
                              f"(known: {', '.join(sorted(known))})")
    return raw


def load_config(
    home: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    ledger: str | None = None,
) -> Config:
    """Load the config with the documented precedence. A missing file means no jobs."""
    home_path = resolve_home(home)
    config_path = config_file(home_path, config)
    raw = _read_config(config_path)
    url, sync = ledger_settings(raw, config_path, home_path, ledger)
    settings = Settings(home=home_path, config_path=config_path, ledger_url=url,
                        sqlite_synchronous=sync)
    jobs_table = raw.get("jobs", {})
    if not isinstance(jobs_table, Mapping):
        raise ConfigError(f"config {config_path}: [jobs] must hold tables")
    jobs: dict[str, Job] = {}
    for name, table in jobs_table.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"config {config_path}: jobs.{name} must be a table")
        try:
            jobs[name] = parse_job(name, table)
        except InvalidInput as exc:  # a bad field, parameter or job name
            raise ConfigError(f"config {config_path}: {exc}") from None
    connectors = raw.get("connectors", {})
    if not isinstance(connectors, Mapping) or not all(isinstance(v, Mapping) for v in connectors.values()):
        raise ConfigError(f"config {config_path}: [connectors.NAME] entries must be tables")
    if "notify" in raw or any("notify" in t for t in jobs_table.values()):
        from .notify.config import attach_plans  # only when something is configured

        jobs = attach_plans(raw, jobs, config_path)
    return Config(settings=settings, jobs=jobs, connectors=connectors, raw=raw)
