"""Contract tests: the Slack connector through slack_sdk against the Slack stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cases_services import SLACK_ENV, Running, running, slack_api

import retrysafe
from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.errors import ConnectorError

KEY = "weekly-report:2026-W32/notify"
HOOK_ENV = "RS_TEST_SLACK_HOOK"


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("slack", monkeypatch) as run:
        monkeypatch.setenv(HOOK_ENV, run.base + slack_api.WEBHOOK_PATH)
        yield run


def api(run: Running, **extra: Any) -> Any:
    config = {
        "type": "slack",
        "token_env": SLACK_ENV,
        "channel": slack_api.CHANNEL,
        "base_url": f"{run.base}/api/",
    }
    return build_connector("team-chat", {**config, **extra})


def hook(run: Running) -> Any:
    return build_connector("team-hook", {"type": "slack", "webhook_url_env": HOOK_ENV})


def test_contract_post_message_carries_the_key_in_metadata_and_lookup_finds_it_there(slack: Running) -> None:
    """chat.postMessage (Bearer token) stores event_type/event_payload metadata with the step
    key; conversations.history with include_all_metadata finds exactly that message."""
    conn = api(slack)
    evidence = conn.execute(KEY, {"text": "Week 32 is out"})
    [message] = slack.app.messages()
    assert message["metadata"] == {"event_type": "retrysafe_step", "event_payload": {"retrysafe_key": KEY}}
    assert evidence == f"{slack_api.CHANNEL}/{message['ts']}"
    assert conn.lookup(KEY, {}) == Found(evidence)
    assert conn.lookup(KEY + "-other", {}) == ABSENT
    assert conn.effect_class == "message" and conn.authoritative
    assert [r.path for r in slack.app.requests] == [
        "/api/chat.postMessage",
        "/api/conversations.history",
        "/api/conversations.history",
    ]


def test_contract_ok_false_answers_are_definite_failures_except_slacks_unclear_errors(slack: Running) -> None:
    """{"ok": false, "error": "channel_not_found"} is EffectFailed (nothing posted);
    internal_error, which Slack says may have partly succeeded, leaves the step unknown."""
    with pytest.raises(EffectFailed, match="channel_not_found"):
        api(slack, channel="C0NOWHERE").execute(KEY, {"text": "hi"})
    slack.app.knob("chat.postMessage", "fail", status=200, body={"ok": False, "error": "internal_error"})
    with pytest.raises(ConnectorError) as raised:
        api(slack).execute(KEY, {"text": "hi"})
    assert not isinstance(raised.value, EffectFailed) and "lookup decides" in str(raised.value)
    assert slack.app.messages() == []


def test_contract_dropped_answer_is_unknown_then_found_and_never_resent(slack: Running) -> None:
    """A connection cut after Slack posted: unknown (slack_sdk does not resend), and the
    lookup finds the one message."""
    conn = api(slack)
    slack.app.knob("chat.postMessage", "drop")
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, {"text": "Week 32 is out"})
    assert not isinstance(raised.value, EffectFailed)
    [message] = slack.app.messages()
    assert conn.lookup(KEY, {}) == Found(f"{slack_api.CHANNEL}/{message['ts']}")


def test_contract_lookup_past_its_window_is_ambiguous_and_two_keyed_messages_are_ambiguous(
    slack: Running,
) -> None:
    """Not found in the newest lookup_limit messages of a longer channel proves nothing;
    two messages with the key need a person."""
    conn = api(slack, lookup_limit=2)
    for n in range(3):
        slack.app.post_directly(f"chatter {n}")
    assert isinstance(conn.lookup(KEY, {}), Ambiguous)
    conn.execute(KEY, {"text": "Week 32 is out"})
    assert isinstance(conn.lookup(KEY, {}), Found)
    slack.app.post_directly("copy", {"event_type": "retrysafe_step", "event_payload": {"retrysafe_key": KEY}})
    result = conn.lookup(KEY, {})
    assert isinstance(result, Ambiguous) and "2 effects" in result.reason


def test_contract_incoming_webhook_is_done_on_2xx_with_no_lookup_evidence(
    slack: Running, tmp_path: Path
) -> None:
    """A webhook answers "ok" and no id: done at once with evidence saying no lookup is
    possible; the lookup (used only after an unclear result) is Ambiguous; the secret URL
    never appears in messages or repr."""
    conn = hook(slack)
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        '[jobs.notify]\nkey = "notify:{week}"\nparams = { week = "isoweek" }\n'
    )
    with retrysafe.start("notify", {"week": "2026-W32"}, home=home) as run:
        evidence = run.effect("slack", connector=conn, payload={"text": "Week 32 is out"})
    assert evidence == "incoming webhook answered 200 ok (no id; no lookup possible)"
    assert slack.app.webhook_posts == [{"text": "Week 32 is out"}]
    result = conn.lookup(KEY, {})
    assert isinstance(result, Ambiguous) and "cannot be read back" in result.reason
    assert not conn.authoritative and conn.verify(KEY, evidence)
    with pytest.raises(ConnectorError, match="cannot be counted"):
        conn.count(KEY)
    slack.app.knob("/services/", "fail", status=500, text="rollup_error")
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, {"text": "again"})
    assert not isinstance(raised.value, EffectFailed)
    slack.app.knob("/services/", "fail", status=404, text="no_service")
    with pytest.raises(EffectFailed, match="no_service") as failed:
        conn.execute(KEY, {"text": "again"})
    assert slack_api.WEBHOOK_PATH not in str(failed.value) + str(raised.value) + repr(conn)


def test_unreachable_slack_is_a_definite_failure_and_bad_payloads_are_refused() -> None:
    """No connection means nothing was sent; metadata is ours and text is required."""
    import os

    os.environ.setdefault(SLACK_ENV, slack_api.TOKEN)
    conn = build_connector(
        "team-chat",
        {"type": "slack", "token_env": SLACK_ENV, "channel": "C1", "base_url": "http://127.0.0.1:9/api/"},
    )
    with pytest.raises(EffectFailed, match="nothing was sent"):
        conn.execute(KEY, {"text": "hi"})
    from retrysafe.errors import ConfigError, InvalidInput

    with pytest.raises(InvalidInput, match="unknown field"):
        conn.validate({"text": "hi", "channel": "C2"})
    with pytest.raises(ConfigError, match="either token_env"):
        build_connector("x", {"type": "slack", "channel": "C1"})
