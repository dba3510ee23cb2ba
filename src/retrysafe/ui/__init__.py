"""The web dashboard (``retrysafe ui``): what needs a human first, every outcome's
whole story, and the human decisions, behind a token.

Built on Starlette, Jinja2 and uvicorn, with a vendored htmx (``static/``) and
no JavaScript build. These come with the ``ui`` extra; :func:`require_extra`
says in one line what to install when they are missing. The pages read the
ledger as the reading commands do and act through the same library calls as
the deciding commands (``resolve``, ``approve``, ``retry``, ``break-lease``).
"""

from __future__ import annotations

import importlib.util

from ..errors import ConfigError

__all__ = ["EXTRA_MODULES", "require_extra"]

EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "prometheus_client", "python_multipart")
"""What ``retrysafe[ui]`` installs, as imported."""


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False


def require_extra() -> None:
    """Raise :class:`~retrysafe.errors.ConfigError` (exit 2) naming the extra to
    install when one of its packages is missing."""
    missing = [m for m in EXTRA_MODULES if not _importable(m)]
    if missing:
        raise ConfigError(f"the dashboard and metrics need the ui extra: pip install "
                          f"'retrysafe[ui]' (missing: {', '.join(missing)})")
