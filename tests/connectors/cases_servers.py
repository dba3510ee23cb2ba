"""Conformance cases for the connectors that need a real server of their own: WordPress, Matrix.

The servers (``wpserver.py``: WordPress on PHP and MariaDB; ``synapseserver.py``:
Synapse) start at most once per test session, on first use, whichever module
asks first, and stop when the session ends. Under ``CI=true`` a missing
server is a failure; elsewhere the tests that need it are skipped, saying why.

``test_conformance.py`` takes these cases in with :func:`with_server_cases`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import synapseserver
import wpserver
from synapseserver import MissingSynapse, Synapse
from wpserver import MissingWordPress, WordPressSite

from retrysafe.connectors import ConnectorBase, build_connector

__all__ = ["SERVER_CASES", "MatrixCase", "WordPressCase", "synapse", "with_server_cases", "wordpress"]

T = TypeVar("T")

_running: dict[str, Any] = {}
_stack = contextlib.ExitStack()
atexit.register(_stack.close)


def _shared(name: str, start: Callable[[], contextlib.AbstractContextManager[T]],
            missing: type[Exception]) -> T:
    """The server ``name``, started on first use and kept for the whole session."""
    if name not in _running:
        try:
            _running[name] = _stack.enter_context(start())
        except missing as exc:
            _running[name] = exc
    value = _running[name]
    if isinstance(value, Exception):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{value}: scripts/setup --test installs it")  # never skipped in CI
        pytest.skip(str(value))
    return value  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def wordpress_site() -> WordPressSite:
    """The WordPress site of this test session."""
    return _shared("wordpress", wpserver.start_wordpress, MissingWordPress)


@pytest.fixture
def wordpress(wordpress_site: WordPressSite, monkeypatch: pytest.MonkeyPatch) -> WordPressSite:
    """The site, with its application password in the environment as the config names it."""
    monkeypatch.setenv(wpserver.PASSWORD_ENV, wordpress_site.password)
    return wordpress_site


@pytest.fixture(scope="session")
def synapse_server() -> Synapse:
    """The Synapse homeserver of this test session."""
    return _shared("synapse", synapseserver.start_synapse, MissingSynapse)


@pytest.fixture
def synapse(synapse_server: Synapse, monkeypatch: pytest.MonkeyPatch) -> Synapse:
    """The homeserver, with the bot's access token in the environment as the config names it."""
    monkeypatch.setenv(synapseserver.TOKEN_ENV, synapse_server.bot.access_token)
    monkeypatch.setenv(synapseserver.PASSWORD_ENV, synapse_server.bot.password)
    return synapse_server


class ServerCase:
    """What the conformance suite asks of a case (see ``Case`` in test_conformance.py)."""

    type_name = ""
    verify_skip: str | None = None
    config: dict[str, Any]

    def connector(self) -> ConnectorBase:
        return build_connector("under-test", {"type": self.type_name, **self.config})


class WordPressCase(ServerCase):
    """A post per step key on the session's WordPress, read back with SQL from its database."""

    type_name = "wordpress"

    def __init__(self, site: WordPressSite) -> None:
        self.site = site
        self.config = site.config()
        self.bad: list[tuple[dict[str, Any], str]] = [
            ({}, "needs a non-empty 'title'"),
            ({"title": "Week 32", "colour": "red"}, "unknown field(s) colour"),
            ({"title": "Week 32", "status": "perhaps"}, "is not one of"),
            ({"title": "Week 32", "slug": "Not A Slug"}, "must be lowercase letters"),
            ({"title": "Week 32", "tags": "news,7"}, "must be a list of term ids"),
        ]

    def payload(self) -> dict[str, Any]:
        return {"title": "Week 32", "content": "<p>All green.</p>"}

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        posts = self.site.posts_with_key(key)
        return self.site.evidence(posts[0][0]) if posts else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self.site.posts_with_key(key))

    def state(self) -> Any:
        return self.site.state()

    def before_rerun(self) -> None:
        """Nothing to prepare: a repeated create would simply make a second post."""

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        # Someone deletes the post (straight from the database, as a cleanup script might).
        for post_id, _, _ in self.site.posts_with_key(key):
            self.site.db.query(f"DELETE FROM wp_postmeta WHERE post_id = {post_id}; "
                               f"DELETE FROM wp_posts WHERE ID = {post_id}")


class MatrixCase(ServerCase):
    """A message per step key in a room of its own, read back through the client API."""

    type_name = "matrix"

    def __init__(self, server: Synapse) -> None:
        self.server = server
        self.room = server.new_room()
        self.config = {"homeserver": server.base, "room": self.room, "access_token_env": synapseserver.TOKEN_ENV}
        self.bad: list[tuple[dict[str, Any], str]] = [
            ({}, "needs a non-empty 'body'"),
            ({"body": "Week 32 is out", "colour": "red"}, "unknown field(s) colour"),
            ({"body": "Week 32 is out", "msgtype": "m.image"}, "is not one of"),
            ({"body": "Week 32 is out", "formatted_body": 7}, "must be HTML text"),
        ]

    def payload(self) -> dict[str, Any]:
        return {"body": "Week 32 is out"}

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        events = self.server.keyed(self.room, key)
        return str(events[0]["event_id"]) if events else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self.server.keyed(self.room, key))

    def state(self) -> Any:
        return [(e["event_id"], e.get("content")) for e in self.server.messages(self.room)]

    def before_rerun(self) -> None:
        """Nothing to prepare: a repeated send would show as a second event."""

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        # Someone removes the message: a redaction strips its content, key included.
        for event in self.server.keyed(self.room, key):
            self.server.redact(self.room, event["event_id"])


SERVER_CASES = ["wordpress", "matrix"]


def server_case(kind: str, request: pytest.FixtureRequest) -> WordPressCase | MatrixCase:
    """The case ``kind`` on its session server, the secret in the environment."""
    if kind == "wordpress":
        return WordPressCase(request.getfixturevalue("wordpress"))
    return MatrixCase(request.getfixturevalue("synapse"))


def with_server_cases(previous: Any, cases: list[Any]) -> Any:
    """The ``case`` fixture ``previous`` with the server cases added to its parameters.

    ``cases`` (the conformance suite's list) is extended in place, so the check
    that every registered type is in the suite sees them too; the other
    parameters are still served by ``previous``.
    """
    earlier = list(cases)
    cases.extend(SERVER_CASES)
    make_earlier = previous.__wrapped__

    @pytest.fixture(params=[*earlier, *SERVER_CASES])
    def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        """Each connector type on its real system (the server cases included)."""
        if request.param in SERVER_CASES:
            yield server_case(request.param, request)
        else:
            yield from make_earlier(request, tmp_path)

    return case
