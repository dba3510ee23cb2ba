"""Fixtures shared by the connector tests.

The real systems (HTTP API, git repositories, SQL tables, mail servers) are
defined in ``live_systems.py`` and exposed here to every test below this folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from live_systems import SERVERS, api, mail, mail_servers, repos, sql_target  # noqa: F401  (fixtures)


def pytest_configure(config: pytest.Config) -> None:
    # The plain test listener takes AUTH without TLS on purpose (loopback only).
    config.addinivalue_line("filterwarnings", "ignore:Requiring AUTH while not requiring TLS:UserWarning")


@pytest.fixture
def spawn(tmp_path: Path) -> Any:
    """Run servers/effect_child.py: a job doing one effect, optionally SIGKILLed after it."""
    sys.path.insert(0, str(SERVERS))
    try:
        import effect_child
    finally:
        sys.path.remove(str(SERVERS))

    def run(
        type_name: str,
        config: dict[str, Any],
        step_key: str,
        payload: dict[str, Any],
        *,
        kill_after_execute: bool = False,
    ) -> tuple[int, Any]:
        spec = {
            "type": type_name,
            "config": config,
            "step_key": step_key,
            "payload": payload,
            "kill_after_execute": kill_after_execute,
        }
        return effect_child.spawn(spec, tmp_path)

    return run
