"""A real HTTP API process on loopback (``servers/http_api.py``) per test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SERVERS = Path(__file__).resolve().parents[1] / "servers"
TOKEN = "tok-3f9a1c-never-printed"


@dataclass
class Api:
    """The running API: its base URL and what it really holds."""

    base: str
    state_path: Path

    def knob(self, api: str, action: str, **fields: Any) -> None:
        """Queue one misbehaviour for the next matching request."""
        httpx.post(f"{self.base}/_control", json={"api": api, "action": action, **fields})

    def resources(self, api: str, key: str | None = None) -> list[dict[str, Any]]:
        data = json.loads(self.state_path.read_text())
        return [r for r in data["resources"] if r["api"] == api and (key is None or r["key"] == key)]

    def config(self, api: str, **extra: Any) -> dict[str, Any]:
        """A connector table for one of the two collections, with the token from the env."""
        table: dict[str, Any] = {
            "url": f"{self.base}/{api}/items",
            "token_env": "RS_TEST_API_TOKEN",
            "lookup_url": f"{self.base}/{api}/items/by-key/{{key}}",
            "lookup_max_wait": 0.05,
        }
        table.update(extra)
        return {k: v for k, v in table.items() if v is not None}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setenv("RS_TEST_API_TOKEN", TOKEN)
    state, port_file = tmp_path / "api-state.json", tmp_path / "api.port"
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS / "http_api.py"), str(state), str(port_file)],
        env={**os.environ, "API_TOKEN": TOKEN},
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the test API server did not start")
            time.sleep(0.02)
        yield Api(f"http://127.0.0.1:{port_file.read_text()}", state)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


