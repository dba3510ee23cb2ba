"""Fixtures for the email connector tests: real servers from ``mailservers.py``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from mailservers import PASSWORD, PASSWORD_ENV, MailServers, MissingMailServer, start_mail_servers


def pytest_configure(config: pytest.Config) -> None:
    # The plain test listener takes AUTH without TLS on purpose (loopback only).
    config.addinivalue_line("filterwarnings", "ignore:Requiring AUTH while not requiring TLS:UserWarning")


@pytest.fixture(scope="session")
def mail_servers() -> Iterator[MailServers]:
    try:
        with start_mail_servers() as servers:
            yield servers
    except MissingMailServer as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{exc}: scripts/setup --test installs them")  # never skipped in CI
        pytest.skip(str(exc))


@pytest.fixture
def mail(mail_servers: MailServers, monkeypatch: pytest.MonkeyPatch) -> MailServers:
    """The servers, with the password in the environment as the config names it."""
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    return mail_servers


@pytest.fixture
def step_key(request: pytest.FixtureRequest) -> str:
    """A step key no other test uses."""
    return f"mail-test:{request.node.name}-{uuid.uuid4().hex[:8]}/send"
