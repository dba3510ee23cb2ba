"""The ``retrysafe`` command line. Every command maps to one library call.

Exit codes: 0 done or skipped; 1 the work failed (state recorded); 2 usage,
config or input error (nothing changed); 3 blocked, a human must act;
75 busy or stale lease, try later.

The click group and :func:`main` live in :mod:`retrysafe.cli._app` and are
imported on first use (PEP 562), so the parts of a command that need no click
(:mod:`retrysafe.cli.run`, which the executable calls for a plain ``retrysafe
run``) are imported without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["cli", "main"]

if TYPE_CHECKING:
    from ._app import cli as cli
    from ._app import main as main


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _app

    value = getattr(_app, name)
    globals()[name] = value
    return value
