"""Fixtures for CLI tests: the file-based pipeline of pipeline.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline import Pipeline, make_pipeline
from support import Home


@pytest.fixture
def pipeline(home: Home, tmp_path: Path) -> Iterator[Pipeline]:
    yield make_pipeline(home, tmp_path)


@pytest.fixture
def any_pipeline(any_home: Home, tmp_path: Path) -> Iterator[Pipeline]:
    yield make_pipeline(any_home, tmp_path)
