"""The Matrix connector on a real Synapse homeserver.

What Synapse really does, and what the connector makes of it: a repeated
``PUT .../send/m.room.message/{txnId}`` from the same device returns the first
event (per device, not per access token: a new device sends again); the key in
the event content lets a lookup find the message after the server forgot the
transaction; only this account's messages count.
"""

from __future__ import annotations

import signal
import sys
import uuid
from typing import Any

import pytest
from live_systems import SERVERS
from synapseserver import KEY_FIELD, PASSWORD_ENV, TOKEN_ENV, Synapse

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.matrix import LABELS_FIELD, MatrixConnector
from retrysafe.errors import ConfigError


@pytest.fixture
def key() -> str:
    """A step key no other test uses."""
    return f"notify:2026-W32/{uuid.uuid4().hex[:8]}/chat"


def connector(server: Synapse, room: str, **extra: Any) -> MatrixConnector:
    table: dict[str, Any] = {"type": "matrix", "homeserver": server.base, "room": room, **extra}
    if "user" not in extra:
        table["access_token_env"] = TOKEN_ENV
    conn = build_connector("team", table)
    assert isinstance(conn, MatrixConnector)
    return conn


def test_the_same_put_twice_gives_one_event(synapse: Synapse, key: str) -> None:
    """The step key is the transaction id: sending again returns the first event, and
    the room holds one message, carrying the key in its content and as a label."""
    room = synapse.new_room()
    conn = connector(synapse, room)
    first = conn.execute(key, {"body": "Week 32 is out"})
    assert conn.execute(key, {"body": "Week 32 is out"}) == first
    [event] = synapse.keyed(room, key)
    assert event["event_id"] == first
    assert event["content"][KEY_FIELD] == key and event["content"][LABELS_FIELD] == [key]
    assert conn.lookup(key, {}) == Found(first, {"room": room})


def test_logins_on_one_fixed_device_deduplicate_and_a_new_device_does_not(synapse: Synapse, key: str) -> None:
    """Two password logins with the same device_id (two access tokens) share the
    transaction ids: one event. A login on another device sends a second message,
    which is why the connector insists on a fixed device; the lookup then says two."""
    room = synapse.new_room()
    login = {"user": synapse.bot.user_id, "password_env": PASSWORD_ENV, "device_id": "RETRYSAFE1"}
    first = connector(synapse, room, **login).execute(key, {"body": "hello"})
    assert connector(synapse, room, **login).execute(key, {"body": "hello"}) == first
    assert len(synapse.keyed(room, key)) == 1
    other = connector(synapse, room, **{**login, "device_id": "ANOTHER"}).execute(key, {"body": "hello"})
    assert other != first and len(synapse.keyed(room, key)) == 2
    result = connector(synapse, room).lookup(key, {})
    assert isinstance(result, Ambiguous) and first in result.reason and other in result.reason


def test_sigkill_after_the_send_then_a_blind_resend_returns_the_same_event(synapse: Synapse, key: str,
                                                                            tmp_path: Any) -> None:
    """A process is SIGKILLed the moment the send returns; a re-run that does not even look
    first sends with the same transaction id and gets the same event back."""
    sys.path.insert(0, str(SERVERS))
    try:
        import effect_child
    finally:
        sys.path.remove(str(SERVERS))
    room = synapse.new_room()
    spec = {"type": "matrix", "config": {"homeserver": synapse.base, "room": room, "access_token_env": TOKEN_ENV},
            "step_key": key, "payload": {"body": "Week 32 is out"}}
    code, out = effect_child.spawn({**spec, "kill_after_execute": True}, tmp_path)
    assert code == -signal.SIGKILL and out is None
    [event] = synapse.keyed(room, key)
    code, out = effect_child.spawn({**spec, "look_first": False}, tmp_path)
    assert (code, out) == (0, {"executed": event["event_id"]})
    assert len(synapse.keyed(room, key)) == 1


def test_a_message_of_another_account_carrying_the_key_is_not_this_steps(synapse: Synapse, key: str) -> None:
    """Anyone in the room can write the key into a message; only the connector's own
    account's messages are its effects."""
    room = synapse.new_room()
    synapse.send(room, {"msgtype": "m.text", "body": "quoting", KEY_FIELD: key, LABELS_FIELD: [key]},
                 token=synapse.other.access_token)
    conn = connector(synapse, room)
    assert conn.lookup(key, {}) == ABSENT and conn.count(key) == 0


def test_lookup_reads_past_other_messages_and_a_redacted_message_is_gone(synapse: Synapse, key: str) -> None:
    """Newer chatter does not hide the message; once a person redacts it, its content
    (key included) is gone: lookup says Absent and verify no longer holds."""
    room = synapse.new_room()
    conn = connector(synapse, room)
    event_id = conn.execute(key, {"body": "Week 32 is out", "formatted_body": "<b>Week 32</b> is out"})
    for n in range(5):
        synapse.send(room, {"msgtype": "m.text", "body": f"chatter {n}"}, token=synapse.other.access_token)
    assert conn.lookup(key, {}) == Found(event_id, {"room": room}) and conn.verify(key, event_id)
    synapse.redact(room, event_id)
    assert conn.lookup(key, {}) == ABSENT and not conn.verify(key, event_id)


def test_a_room_the_account_is_not_in_refuses_the_message_definitely(synapse: Synapse, key: str) -> None:
    """The server refuses before it persists anything (403): a failure, not unknown."""
    resp = synapse.client("POST", "/createRoom", token=synapse.other.access_token, json={"preset": "private_chat"})
    room = resp.json()["room_id"]
    with pytest.raises(EffectFailed, match="403"):
        connector(synapse, room).execute(key, {"body": "hello"})


def test_config_needs_a_room_id_and_one_way_to_authenticate() -> None:
    """An alias, or no credentials, or both kinds, are one-line config errors."""
    with pytest.raises(ConfigError, match="room id"):
        MatrixConnector("team", "http://127.0.0.1:8008", "#ops:example", access_token="t")
    with pytest.raises(ConfigError, match="give access_token_env, or user"):
        MatrixConnector("team", "http://127.0.0.1:8008", "!abc:example")
    with pytest.raises(ConfigError, match="not both"):
        MatrixConnector("team", "http://127.0.0.1:8008", "!abc:example", access_token="t", user="u",
                        password="p", device_id="D")
