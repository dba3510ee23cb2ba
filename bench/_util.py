"""What the benchmarks share: interleaved rounds, medians, the machine, result files.

Every benchmark compares retrysafe with a hand-written baseline measured in
the same run, alternating which goes first, and reports medians and the
ratio. Absolute numbers depend on the disk and the load of the day; the ratio
is what a benchmark is judged by.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def interleave(rounds: int, first: Callable[[], float], second: Callable[[], float]) -> tuple[list[float], list[float]]:
    """Run ``first`` and ``second`` ``rounds`` times each, alternating who goes first.

    Alternating spreads slow phases of a shared machine (another process's
    burst, a checkpoint, a cache flush) over both sides instead of one.
    """
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median of the per-round ratios ``a[i] / b[i]``.

    Each pair ran back to back, so a load swing between rounds cancels out of
    its ratio; the median then drops the rounds a burst landed in.
    """
    return median([x / y for x, y in zip(a, b, strict=True)])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "system": f"{platform.system()} {platform.release()}",
    }


def write_json(path: str | None, obj: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", "utf-8")


def verdict(ratio: float, target: float, higher_is_better: bool = True) -> str:
    ok = ratio >= target if higher_is_better else ratio <= target
    return "meets target" if ok else "BELOW TARGET" if higher_is_better else "OVER TARGET"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
