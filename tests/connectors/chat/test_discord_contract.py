"""Contract tests: the Discord connector against the Discord HTTP API stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cases_services import DISCORD_ENV, Running, discord_api, running

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.discord import nonce_of
from retrysafe.errors import ConnectorError

KEY = "weekly-report:2026-W32/notify"
HOOK_ENV = "RS_TEST_DISCORD_HOOK"
TEXT = {"content": "Week 32 is out"}


@pytest.fixture
def discord(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("discord", monkeypatch) as run:
        monkeypatch.setenv(
            HOOK_ENV, f"{run.base}/api/v10/webhooks/{discord_api.WEBHOOK_ID}/{discord_api.WEBHOOK_TOKEN}"
        )
        yield run


def bot(run: Running, **extra: Any) -> Any:
    config = {
        "type": "discord",
        "token_env": DISCORD_ENV,
        "channel_id": discord_api.CHANNEL,
        "api_base": f"{run.base}/api/v10",
    }
    return build_connector("ops-discord", {**config, **extra})


def test_contract_create_sends_a_25_character_nonce_with_enforce_nonce_and_a_resend_is_deduplicated(
    discord: Running,
) -> None:
    """The create carries nonce (a digest of the key, 25 characters) and enforce_nonce; a
    second create with the same key within Discord's window returns the same message."""
    conn = bot(discord)
    first = conn.execute(KEY, TEXT)
    body = discord.app.requests[0].body
    assert body["nonce"] == nonce_of(KEY) and len(body["nonce"]) == 25 and body["enforce_nonce"] is True
    assert discord.app.requests[0].headers["authorization"] == f"Bot {discord_api.TOKEN}"
    assert conn.execute(KEY, TEXT) == first
    assert [m["id"] for m in discord.app.messages()] == [first]


def test_contract_lookup_finds_the_bots_message_by_nonce_after_the_dedup_window(discord: Running) -> None:
    """Past enforce_nonce's minutes only the lookup protects: it scans the channel's recent
    messages for the bot's message with the key's nonce."""
    discord.app.nonce_window = 0
    conn = bot(discord)
    discord.app.knob("/messages", "drop")
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, TEXT)
    assert not isinstance(raised.value, EffectFailed)
    [message] = discord.app.messages()
    assert conn.lookup(KEY, TEXT) == Found(message["id"])
    assert conn.lookup(KEY + "-other", TEXT) == ABSENT
    assert conn.count(KEY) == 1


def test_contract_without_nonces_in_read_back_a_same_text_message_is_ambiguous_never_absent(
    discord: Running,
) -> None:
    """Discord documents the nonce as optional on messages read back: when it is missing, a
    message of the bot with the same text needs a person; a different text is absent."""
    conn = bot(discord)
    conn.execute(KEY, TEXT)
    discord.app.omit_nonces = True
    result = conn.lookup(KEY, TEXT)
    assert isinstance(result, Ambiguous) and "without their nonce" in result.reason
    assert conn.lookup(KEY + "-b", {"content": "Something else"}) == ABSENT


def test_contract_refusals_fail_and_rate_limits_or_5xx_stay_unknown(discord: Running) -> None:
    """404 Unknown Channel is EffectFailed; 429 and 502 leave the step unknown; nothing created."""
    with pytest.raises(EffectFailed, match="Unknown Channel"):
        bot(discord, channel_id="1999999999999999999").execute(KEY, TEXT)
    for status in (429, 502):
        discord.app.knob("/messages", "fail", status=status, body={"message": "later", "code": 0})
        with pytest.raises(ConnectorError) as raised:
            bot(discord).execute(KEY, TEXT)
        assert not isinstance(raised.value, EffectFailed)
    assert discord.app.messages() == []


def test_contract_webhook_waits_for_the_message_id_and_verifies_by_it(discord: Running) -> None:
    """?wait=true gives the message id as evidence; webhooks take no nonce, so the lookup is
    Ambiguous; verify reads the message through the webhook; the token never shows."""
    conn = build_connector("ops-hook", {"type": "discord", "webhook_url_env": HOOK_ENV})
    evidence = conn.execute(KEY, {"content": "Week 32 is out", "username": "Reports"})
    assert discord.app.requests[0].query["wait"] == ["true"]
    assert [m["id"] for m in discord.app.messages()] == [evidence]
    assert isinstance(conn.lookup(KEY, TEXT), Ambiguous) and not conn.authoritative
    assert conn.verify(KEY, evidence)
    with discord.app.lock:
        discord.app.channels[discord_api.CHANNEL].clear()
    assert not conn.verify(KEY, evidence)
    discord.app.knob("/webhooks/", "fail", status=400, body={"message": "Invalid Form Body", "code": 50035})
    with pytest.raises(EffectFailed) as failed:
        conn.execute(KEY, TEXT)
    assert discord_api.WEBHOOK_TOKEN not in str(failed.value) + repr(conn)
