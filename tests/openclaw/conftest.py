"""The OpenClaw tier's shared gateway, and its rule: in a run that must not skip (``scripts/e2e-openclaw``
sets RETRYSAFE_E2E_NO_SKIP=1), a skipped test is a failure, so a tier that could not
run (no gateway, no Node, no libfaketime where the test needs it) never passes silently."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from test_agent_e2e import AgentWorld
    from test_gateway_e2e import Gateway


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and os.environ.get("RETRYSAFE_E2E_NO_SKIP") == "1":
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped in a run that must not skip: {reason}"
    return report


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentWorld]:
    """The session's gateway, with the scripted model and the retrysafe plugin."""
    from test_agent_e2e import open_world

    with open_world(tmp_path_factory) as opened:
        yield opened


@pytest.fixture(scope="session")
def gateway(world: AgentWorld) -> Gateway:
    """The session's gateway (a module may start its own, as test_scheduled_e2e does)."""
    return world.gateway
