"""Fixtures shared by the connector tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

SERVERS = Path(__file__).resolve().parent / "servers"


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
