"""Fixtures for the notification tests: real receivers on loopback and a home
whose ``[notify]`` points at them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from receivers import HttpReceiver

MAIL_HELPERS = Path(__file__).resolve().parent.parent / "connectors" / "email"


def pytest_configure(config: pytest.Config) -> None:
    # The plain test listener takes AUTH without TLS on purpose (loopback only).
    config.addinivalue_line("filterwarnings", "ignore:Requiring AUTH while not requiring TLS:UserWarning")


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    """An HTTP server on loopback recording every request (webhooks, pings, apprise)."""
    server = HttpReceiver().start()
    yield server
    server.stop()


@pytest.fixture
def mail_servers() -> Iterator[object]:
    """Dovecot and aiosmtpd on loopback (the email connector's test servers)."""
    if str(MAIL_HELPERS) not in sys.path:
        sys.path.insert(0, str(MAIL_HELPERS))
    from mailservers import MissingMailServer, start_mail_servers

    try:
        with start_mail_servers() as servers:
            yield servers
    except MissingMailServer as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{exc}: scripts/setup --test installs them")  # never skipped in CI
        pytest.skip(str(exc))
