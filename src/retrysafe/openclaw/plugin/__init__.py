"""The OpenClaw plugin shipped with retrysafe (JavaScript, loaded by OpenClaw).

``openclaw.plugin.json`` is its manifest, ``index.js`` its entry and
``guard.js`` its logic; :func:`plugin_dir` is the folder to hand to
``openclaw plugins install``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["plugin_dir"]


def plugin_dir() -> Path:
    """The plugin's folder inside the installed package."""
    return Path(__file__).resolve().parent
