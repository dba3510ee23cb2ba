"""Fixtures for the email connector tests; the servers are in ``live_systems.py``."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def step_key(request: pytest.FixtureRequest) -> str:
    """A step key no other test uses."""
    return f"mail-test:{request.node.name}-{uuid.uuid4().hex[:8]}/send"
