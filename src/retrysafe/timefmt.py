"""Times as retrysafe prints them: for people, UTC to the second; in JSON, ISO 8601.

The ledger keeps times as seconds since the epoch (the database's clock). Every
``--json`` output passes through :func:`iso_times`, so a script reads the same
ISO 8601 form (``2026-08-10T07:00:02.250000Z``) from every command.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

__all__ = ["TIME_FIELDS", "iso", "iso_times", "when"]

TIME_FIELDS = frozenset({"at", "created_at", "updated_at", "started_at", "ended_at",
                         "lease_expires", "since", "decided_at", "sent_at"})
"""Keys whose number is a time, wherever they appear in a command's JSON."""


def when(ts: float | None) -> str:
    """``2026-08-10 07:00:02Z``, or ``-`` for no time."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso(ts: float | None) -> str | None:
    """``2026-08-10T07:00:02.250000Z`` (ISO 8601, UTC), or ``None`` for no time."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def iso_times(obj: Any) -> Any:
    """``obj`` with every number under a :data:`TIME_FIELDS` key as :func:`iso`
    text, in nested mappings and lists too; everything else as it was.

    >>> iso_times({"key": "k", "created_at": 0, "steps": [{"at": 1.5}]})
    {'key': 'k', 'created_at': '1970-01-01T00:00:00Z', 'steps': [{'at': '1970-01-01T00:00:01.500000Z'}]}
    """
    if isinstance(obj, Mapping):
        return {k: (iso(v) if k in TIME_FIELDS and _is_number(v) else iso_times(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [iso_times(v) for v in obj]
    return obj


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
