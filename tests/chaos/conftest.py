"""Chaos fixtures: the content pipeline's real targets, and a PostgreSQL ledger when there is one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "drills"))
sys.path.insert(0, str(Path(__file__).parent))

from example_targets import ContentTargets  # noqa: E402


@pytest.fixture
def content_targets(tmp_path: Path) -> Iterator[ContentTargets]:
    """The content pipeline's CMS + chat webhook (loopback HTTP) and its CSV sheet."""
    targets = ContentTargets(tmp_path / "targets").start()
    try:
        yield targets
    finally:
        targets.stop()
