"""The dashboard's fixtures (their helpers are in ``dashsite``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashsite import Server, Site, make_site, start_server, stop_server
from support import Home


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(Home(tmp_path / "home"))


@pytest.fixture
def server(site: Site) -> Iterator[Server]:
    """The dashboard over ``site``, actions allowed."""
    srv = start_server(site.home, "--allow-actions", "--name", "tester")
    yield srv
    stop_server(srv)
