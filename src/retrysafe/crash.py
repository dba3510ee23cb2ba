"""Crash injection for drills and tests.

``RETRYSAFE_CRASH_AT=STEP:POINT[,STEP:POINT...]`` makes the process kill
itself with SIGKILL when it reaches one of the named points, exactly as a
power cut or an OOM kill would: no ``finally`` blocks, no cleanup.

Step points: ``before-intent``, ``after-intent``, ``after-execute``,
``after-record`` (generate steps too). Run points: ``run:after-begin``,
``run:before-closeout``. ``*`` as STEP matches every step. Prune points (a
batch of ``retrysafe prune``): ``prune:before-commit`` (its folders set aside,
its removal not yet committed) and ``prune:after-commit`` (its rows removed, its
folders not yet).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from . import envvars

__all__ = ["RUN_POINTS", "STEP_POINTS", "check_targets", "crash_point", "injector", "never"]

STEP_POINTS = ("before-intent", "after-intent", "after-execute", "after-record")
RUN_POINTS = ("after-begin", "before-closeout")


def _targets() -> set[tuple[str, str]]:
    raw = os.environ.get(envvars.CRASH_AT, "")
    out: set[tuple[str, str]] = set()
    for part in raw.split(","):
        name, sep, point = part.strip().rpartition(":")
        if sep and name and point:
            out.add((name, point))
    return out


def check_targets() -> None:
    """Refuse a ``RETRYSAFE_CRASH_AT`` that names no point a run reaches (a typo would
    let a crash drill pass without crashing): called before an attempt is claimed."""
    from .errors import InvalidInput

    raw = os.environ.get(envvars.CRASH_AT, "")
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, sep, point = part.rpartition(":")
        points = RUN_POINTS + STEP_POINTS if name == "run" else STEP_POINTS  # (a step may be "run")
        if not (sep and name) or point not in points:
            raise InvalidInput(
                f"{envvars.CRASH_AT}: {part!r} is not STEP:POINT (step points: "
                f"{', '.join(STEP_POINTS)}; run points: run:{', run:'.join(RUN_POINTS)})")


def crash_point(step: str, point: str) -> None:
    """Die here with SIGKILL if ``RETRYSAFE_CRASH_AT`` names ``step:point``."""
    if envvars.CRASH_AT not in os.environ:
        return
    targets = _targets()
    if (step, point) in targets or (("*", point) in targets and step != "run"):
        os.kill(os.getpid(), signal.SIGKILL)


def never(step: str, point: str) -> None:
    """No crash points are armed."""


def injector() -> Callable[[str, str], None]:
    """:func:`crash_point` if ``RETRYSAFE_CRASH_AT`` is set now, else a no-op.

    A run takes this once when it starts, so the hot path of every step does
    not consult the environment.
    """
    return crash_point if envvars.CRASH_AT in os.environ else never
