"""``[notify]`` in ``retrysafe.toml``: which events go to which channels.

Read once with the config (:func:`attach_plans`), so close-out only looks at
``job.notify``: ``None`` when nothing is configured for the job. This module
imports nothing that sends (no httpx, no apprise)::

    [notify]
    events = ["blocked", "unknown", "failed", "missed"]   # the default; add "done"

    [notify.channels.ops]
    type = "webhook"
    url = "https://hooks.example.com/retrysafe"

    [jobs.nightly.notify]
    use = ["ops"]                 # the global channels this job uses (default: all)
    [jobs.nightly.notify.channels.hc]
    type = "ping"
    url = "https://hc-ping.com/UUID"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import Job

__all__ = ["CHANNEL_TYPES", "EVENTS", "Channel", "NotifyPlan", "attach_plans", "global_plan"]

EVENTS = ("blocked", "unknown", "failed", "missed", "done")
"""What can be notified: an outcome blocked for a human, unknown left for a human,
failed with no attempt left, a scheduled occurrence missed, and done."""
DEFAULT_EVENTS = frozenset({"blocked", "unknown", "failed", "missed"})
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_TRIES = 10

# type -> (required fields, optional fields)
CHANNEL_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "webhook": (frozenset({"url"}), frozenset({"headers"})),
    "ping": (frozenset({"url"}), frozenset()),
    "email": (frozenset({"connector", "to"}), frozenset({"subject"})),
    "openclaw": (frozenset({"target"}), frozenset({"channel", "account", "command"})),
    "apprise": (frozenset({"urls"}), frozenset()),
}
_COMMON = frozenset({"type", "events"})
_PLAN_FIELDS = frozenset({"events", "channels", "timeout", "max_tries"})
_JOB_FIELDS = frozenset({"events", "channels", "use"})


@dataclass(frozen=True)
class Channel:
    """One configured receiver."""

    name: str
    type: str
    options: Mapping[str, Any]
    events: frozenset[str] | None = None
    """this channel's own events (``None``: the plan's; a ping channel: every event)"""

    def wants(self, event: str, plan_events: frozenset[str]) -> bool:
        if self.events is not None:
            return event in self.events
        if self.type == "ping":
            return True  # a ping check expects a success ping as well as failures
        return event in plan_events

    def describe(self) -> str:
        return f"{self.name} ({self.type})"


@dataclass(frozen=True)
class NotifyPlan:
    """What a job notifies, where, and how hard to try."""

    events: frozenset[str] = DEFAULT_EVENTS
    channels: tuple[Channel, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    max_tries: int = DEFAULT_MAX_TRIES

    def channels_for(self, event: str) -> list[Channel]:
        return [c for c in self.channels if c.wants(event, self.events)]

    def channel(self, name: str) -> Channel | None:
        return next((c for c in self.channels if c.name == name), None)


def _events(where: str, value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: 'events' must be a list of {', '.join(EVENTS)}")
    unknown = sorted(set(value) - set(EVENTS))
    if unknown:
        raise ConfigError(f"{where}: unknown event {unknown[0]!r} (known: {', '.join(EVENTS)})")
    return frozenset(value)


def _url(where: str, value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: 'url' must be an http:// or https:// URL")
    return value


def _strings(where: str, fname: str, value: object) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {fname!r} must be a non-empty list of strings")
    return list(value)


def _channel(where: str, name: str, table: object, connectors: Mapping[str, Any]) -> Channel:
    from ..keys import check_name

    check_name("channel", name)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table with a 'type'")
    ctype = table.get("type")
    if ctype not in CHANNEL_TYPES:
        raise ConfigError(f"{where}: 'type' must be one of {', '.join(CHANNEL_TYPES)}, not {ctype!r}")
    required, optional = CHANNEL_TYPES[ctype]
    unknown = sorted(set(table) - required - optional - _COMMON)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    missing = sorted(required - set(table))
    if missing:
        raise ConfigError(f"{where}: '{missing[0]}' is required for a {ctype} channel")
    options: dict[str, Any] = {k: v for k, v in table.items() if k not in _COMMON}
    if ctype in ("webhook", "ping"):
        options["url"] = _url(where, table["url"])
    if ctype == "webhook":
        headers = table.get("headers", {})
        if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
            raise ConfigError(f"{where}: 'headers' must be a table of NAME = \"VALUE\"")
        options["headers"] = dict(headers)
    elif ctype == "email":
        conn = table["connector"]
        found = connectors.get(conn) if isinstance(conn, str) else None
        if not isinstance(found, Mapping) or found.get("type") != "email":
            raise ConfigError(f"{where}: 'connector' must name an email connector declared as "
                              f"[connectors.NAME] with type = \"email\", not {conn!r}")
        # its servers, ports and security checked now, not at the first send
        from ..connectors.email._settings import parse_settings

        try:
            settings = parse_settings(conn, found)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if settings.sender is None:  # a notification's message names no sender of its own
            raise ConfigError(f"{where}: connector {conn!r} has no 'from': a notification "
                              "is sent from the connector's address")
        options["connector_table"] = dict(found)
        options["to"] = _strings(where, "to", table["to"])
        if not isinstance(table.get("subject", ""), str):
            raise ConfigError(f"{where}: 'subject' must be a string (a prefix of the subject)")
    elif ctype == "openclaw":
        for fname in ("target", "channel", "account", "command"):
            if fname in table and (not isinstance(table[fname], str) or not table[fname]):
                raise ConfigError(f"{where}: {fname!r} must be a non-empty string")
    elif ctype == "apprise":
        options["urls"] = _strings(where, "urls", table["urls"])
    events = _events(where, table["events"]) if "events" in table else None
    return Channel(name=name, type=ctype, options=options, events=events)


def _channels(where: str, table: object, connectors: Mapping[str, Any]) -> tuple[Channel, ...]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [channels.NAME] entries must be tables")
    return tuple(_channel(f"{where}.channels.{n}", n, t, connectors) for n, t in table.items())


def global_plan(raw: Mapping[str, Any], config_path: Path | str = "") -> NotifyPlan:
    """The ``[notify]`` table: the default events and the channels every job may use."""
    where = f"config {config_path}: [notify]" if config_path else "[notify]"
    table = raw.get("notify", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - _PLAN_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    connectors = raw.get("connectors", {})
    connectors = connectors if isinstance(connectors, Mapping) else {}
    timeout = table.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
        raise ConfigError(f"{where}: 'timeout' must be a number of seconds from 0 to 600")
    tries = table.get("max_tries", DEFAULT_MAX_TRIES)
    if not isinstance(tries, int) or isinstance(tries, bool) or tries < 1:
        raise ConfigError(f"{where}: 'max_tries' must be a positive integer")
    return NotifyPlan(
        events=_events(where, table["events"]) if "events" in table else DEFAULT_EVENTS,
        channels=_channels(f"config {config_path}: notify" if config_path else "notify",
                           table.get("channels", {}), connectors),
        timeout=float(timeout),
        max_tries=tries,
    )


def job_plan(base: NotifyPlan, name: str, table: object, raw: Mapping[str, Any],
             config_path: Path | str = "") -> NotifyPlan | None:
    """A job's plan: its own events and channels over the global ones (``None``: no channel)."""
    if table is None:
        return base if base.channels else None
    where = f"config {config_path}: jobs.{name}.notify"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - _JOB_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    names = [c.name for c in base.channels]
    use = table.get("use", names)
    if not isinstance(use, list) or not all(isinstance(u, str) for u in use):
        raise ConfigError(f"{where}: 'use' must be a list of channel names from [notify.channels]")
    missing = sorted(set(use) - set(names))
    if missing:
        raise ConfigError(f"{where}: 'use' names {missing[0]!r}, which is not a "
                          f"[notify.channels.NAME] (declared: {', '.join(names) or 'none'})")
    connectors = raw.get("connectors", {})
    own = _channels(where, table.get("channels", {}), connectors if isinstance(connectors, Mapping) else {})
    clash = sorted({c.name for c in own} & set(use))
    if clash:
        raise ConfigError(f"{where}: channel {clash[0]!r} is declared here and in [notify.channels]")
    channels = tuple(c for c in base.channels if c.name in use) + own
    if not channels:
        return None
    events = _events(where, table["events"]) if "events" in table else base.events
    return replace(base, events=events, channels=channels)


def attach_plans(raw: Mapping[str, Any], jobs: Mapping[str, Job],
                 config_path: Path | str = "") -> dict[str, Job]:
    """``jobs`` with each one's :class:`NotifyPlan` (the config loader calls this
    only when the file has a ``notify`` table somewhere)."""
    base = global_plan(raw, config_path)
    tables = raw.get("jobs", {})
    out: dict[str, Job] = {}
    for name, job in jobs.items():
        table = tables.get(name, {}) if isinstance(tables, Mapping) else {}
        plan = job_plan(base, name, table.get("notify") if isinstance(table, Mapping) else None,
                        raw, config_path)
        out[name] = job._replace(notify=plan)
    return out


def all_channels(raw: Mapping[str, Any], jobs: Mapping[str, Job],
                 config_path: Path | str = "") -> list[tuple[str, Channel, NotifyPlan]]:
    """Every channel once, as ``(where, channel, plan)``: the global ones, then each
    job's own (``where`` is ``notify`` or ``jobs.NAME``): what ``notify test`` tries."""
    base = global_plan(raw, config_path)
    found: list[tuple[str, Channel, NotifyPlan]] = [("notify", c, base) for c in base.channels]
    for name, job in sorted(jobs.items()):
        plan = job.notify
        if plan is None:
            continue
        found += [(f"jobs.{name}", c, plan) for c in plan.channels if c not in base.channels]
    return found
