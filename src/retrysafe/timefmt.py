"""Times as people read them in retrysafe's output: UTC, to the second."""

from __future__ import annotations

import datetime as dt

__all__ = ["when"]


def when(ts: float | None) -> str:
    """``2026-08-10 07:00:02Z``, or ``-`` for no time."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
