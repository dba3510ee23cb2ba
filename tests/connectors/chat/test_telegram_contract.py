"""Contract tests: the Telegram connector against the Bot API stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cases_services import TELEGRAM_ENV, Running, running, telegram_api

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.telegram import tag_of
from retrysafe.errors import ConfigError, ConnectorError

KEY = "weekly-report:2026-W32/notify"
TEXT = {"text": "Week 32 is out"}
LINK = f"https://t.me/{telegram_api.CHAT['username']}/"


@pytest.fixture
def telegram(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("telegram", monkeypatch) as run:
        yield run


def bot(run: Running, **extra: Any) -> Any:
    config = {
        "type": "telegram",
        "token_env": TELEGRAM_ENV,
        "chat_id": "@reports_channel",
        "api_base": run.base,
    }
    return build_connector("ops-telegram", {**config, **extra})


def test_contract_send_message_without_a_lookup_is_ambiguous_after_an_unclear_result(
    telegram: Running,
) -> None:
    """sendMessage gives the message link as evidence and the text is sent as written;
    the Bot API cannot read messages back, so the lookup is Ambiguous and says so."""
    conn = bot(telegram)
    evidence = conn.execute(KEY, TEXT)
    [message] = telegram.app.messages()
    assert evidence == LINK + str(message["message_id"]) and message["text"] == TEXT["text"]
    result = conn.lookup(KEY, TEXT)
    assert isinstance(result, Ambiguous) and "cannot read sent messages back" in result.reason
    assert not conn.authoritative


def test_contract_ok_false_4xx_is_a_definite_failure_and_5xx_or_a_lost_answer_is_unknown(
    telegram: Running,
) -> None:
    """400 chat not found and 429 flood control (nothing sent) fail; 502 and a dropped
    answer leave the step unknown; the token, part of every URL, never shows."""
    with pytest.raises(EffectFailed, match="chat not found"):
        bot(telegram, chat_id="@elsewhere").execute(KEY, TEXT)
    telegram.app.knob(
        "sendMessage",
        "fail",
        status=429,
        body={
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 7",
            "parameters": {"retry_after": 7},
        },
    )
    with pytest.raises(EffectFailed, match="retry after 7 s"):
        bot(telegram).execute(KEY, TEXT)
    messages = []
    for action in ("fail", "drop"):
        telegram.app.knob(
            "sendMessage",
            action,
            status=502,
            body={"ok": False, "error_code": 502, "description": "Bad Gateway"},
        )
        with pytest.raises(ConnectorError) as raised:
            bot(telegram).execute(KEY, TEXT)
        assert not isinstance(raised.value, EffectFailed)
        messages.append(str(raised.value))
    assert telegram_api.TOKEN not in " ".join(messages) + repr(bot(telegram))


def test_contract_a_configured_lookup_finds_the_message_by_its_key_tag(telegram: Running) -> None:
    """With a lookup URL the message ends in the key's hashtag; after a lost answer the
    lookup finds it there; two tagged messages are Ambiguous."""
    conn = bot(telegram, lookup_url=f"{telegram.base}/log/{telegram_api.CHAT['id']}/messages")
    assert conn.lookup(KEY, TEXT) == ABSENT
    telegram.app.knob("sendMessage", "drop")
    with pytest.raises(ConnectorError):
        conn.execute(KEY, TEXT)
    [message] = telegram.app.messages()
    assert message["text"] == f"{TEXT['text']}\n\n{tag_of(KEY)}"
    assert conn.lookup(KEY, TEXT) == Found(LINK + str(message["message_id"]))
    conn.execute(KEY, TEXT)
    assert isinstance(conn.lookup(KEY, TEXT), Ambiguous)
    with pytest.raises(ConfigError, match="key_tag cannot be false"):
        bot(telegram, lookup_url=f"{telegram.base}/log/1/messages", key_tag=False)
