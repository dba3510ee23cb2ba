"""Discord: a message per step key, by bot token or by webhook.

With a bot token (``token_env``) and a ``channel_id``, the message is created
with ``nonce`` (a 25-character digest of the step key, the longest Discord
takes) and ``enforce_nonce: true``: Discord answers a repeated create with the
same nonce from the same author within a few minutes with the original message
and creates nothing. Past those minutes the lookup reads the channel's recent
messages and finds the bot's message by its nonce. Discord documents the nonce
as an optional field of a message read back; a message of the bot with the
same text but no nonce is therefore reported Ambiguous, never taken as absent.

With a webhook (``webhook_url_env``) the request is sent with ``?wait=true`` so
the answer carries the message id (the evidence). Webhooks take no nonce, so
after an unclear result a person checks the channel.

Example config::

    [connectors.ops-discord]
    type = "discord"
    token_env = "DISCORD_BOT_TOKEN"
    channel_id = "1200000000000000001"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import integer, number, optional_secret, optional_str, reject_unknown, string
from ._web import JsonApi, check_url, key_digest, one_match
from .base import Ambiguous, ConnectorBase, Evidence, LookupResult, Payload

__all__ = ["DiscordConnector"]

API_BASE = "https://discord.com/api/v10"
_FIELDS = frozenset(
    {"type", "token_env", "channel_id", "webhook_url_env", "api_base", "lookup_limit", "timeout"}
)
_MESSAGE = frozenset({"content", "embeds", "allowed_mentions", "tts", "flags", "components"})
_WEBHOOK = _MESSAGE | {"username", "avatar_url", "thread_name"}
NONCE_LENGTH = 25  # the longest nonce Discord accepts


def nonce_of(step_key: str) -> str:
    """The nonce a step key is sent with."""
    return key_digest(step_key, NONCE_LENGTH)


class DiscordConnector(ConnectorBase):
    """Creates a Discord message with the step key's nonce, or posts to a webhook."""

    effect_class = "message"

    def __init__(
        self,
        name: str,
        *,
        token: str | None = None,
        channel_id: str | None = None,
        webhook_url: str | None = None,
        api_base: str = API_BASE,
        lookup_limit: int = 500,
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.where = f"connector {name!r}"
        if (token is None) == (webhook_url is None):
            raise ConfigError(f"{self.where}: give either token_env (with channel_id) or webhook_url_env")
        if token is not None and not (channel_id or "").isdigit():
            raise ConfigError(f"{self.where}: 'channel_id' (the channel's numeric id) is required")
        self.api_base = check_url(api_base, f"{self.where}: api_base").rstrip("/")
        self._webhook_url = check_url(webhook_url, f"{self.where}: webhook URL") if webhook_url else None
        self.channel_id = channel_id or ""
        self.lookup_limit = max(1, lookup_limit)
        headers = {"Authorization": f"Bot {token}"} if token else {}
        self._api = JsonApi(self.where, headers, timeout=timeout)
        self.authoritative = webhook_url is None

    def __repr__(self) -> str:  # never show the token or the webhook URL
        return f"DiscordConnector({self.name!r}, {'webhook' if self._webhook_url else self.channel_id})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> DiscordConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        return cls(
            name,
            token=optional_secret(where, table, "token_env", "the bot token"),
            channel_id=optional_str(where, table, "channel_id"),
            webhook_url=optional_secret(where, table, "webhook_url_env", "the webhook URL"),
            api_base=string(where, table, "api_base", API_BASE),
            lookup_limit=integer(where, table, "lookup_limit", 500),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
        )

    def validate(self, payload: Payload) -> None:
        known = _WEBHOOK if self._webhook_url else _MESSAGE
        reject_unknown(self.where, payload, known, error=InvalidInput, list_known=True)
        if not payload.get("content") and not payload.get("embeds"):
            raise InvalidInput(f"{self.where}: the message needs 'content' (or 'embeds')")
        if len(str(payload.get("content", ""))) > 2000:
            raise InvalidInput(f"{self.where}: 'content' is longer than Discord's 2000 characters")

    def _messages_url(self, message_id: str = "") -> str:
        return f"{self.api_base}/channels/{self.channel_id}/messages" + (
            f"/{message_id}" if message_id else ""
        )

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        if self._webhook_url is not None:
            url = str(httpx.URL(self._webhook_url).copy_merge_params({"wait": "true"}))
            resp = self._api.effect("POST", url, shown="the webhook", json=dict(payload))
        else:
            body = {**payload, "nonce": nonce_of(step_key), "enforce_nonce": True}
            resp = self._api.effect("POST", self._messages_url(), json=body)
        answer = JsonApi.json(resp) or {}
        message_id = answer.get("id")
        if not message_id:
            raise ConnectorError(f"{self.where}: Discord answered {resp.status_code} without a message id")
        return self._evidence(str(message_id), answer.get("channel_id"), answer.get("guild_id"))

    def _evidence(self, message_id: str, channel_id: Any = None, guild_id: Any = None) -> Evidence:
        """The message id; the fields name the channel and, with a server, the message's link."""
        channel = str(channel_id or self.channel_id or "")
        link = (f"https://discord.com/channels/{guild_id}/{channel}/{message_id}"
                if guild_id and channel else None)
        return Evidence(message_id, id=message_id, channel_id=channel, url=link)

    # --- lookup -------------------------------------------------------------

    @property
    def can_look_up(self) -> bool:
        return self._webhook_url is None

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """The bot's recent messages in the channel, matched by nonce."""
        if self._webhook_url is not None:
            return Ambiguous(
                f"{self.where} posts through a webhook, which takes no nonce: look in the webhook's "
                f"channel for the message of {step_key!r}"
            )
        nonce, content = nonce_of(step_key), payload.get("content")
        found: list[str] = []
        unmarked: list[str] = []
        messages, complete = self._recent()
        bot = self._bot_id()
        for message in messages:
            if (message.get("author") or {}).get("id") != bot:
                continue
            if message.get("nonce") == nonce:
                found.append(self._evidence(str(message["id"]), message.get("channel_id"),
                                            message.get("guild_id")))
            elif "nonce" not in message and content and message.get("content") == content:
                unmarked.append(str(message["id"]))
        if not found and unmarked:
            return Ambiguous(
                f"{self.where}: Discord returned message(s) {', '.join(unmarked)} of the bot with the same "
                f"text but without their nonce: check channel {self.channel_id} whether one is {step_key!r}"
            )
        searched = f"the last {self.lookup_limit} messages of channel {self.channel_id}"
        return one_match(found, searched=searched, complete=complete)

    def _bot_id(self) -> str:
        resp = self._api.read(f"{self.api_base}/users/@me")
        user_id = (JsonApi.json(resp) or {}).get("id") if resp.status_code == 200 else None
        if not user_id:
            raise ConnectorError(
                f"{self.where}: GET /users/@me answered {resp.status_code}; cannot tell the bot"
            )
        return str(user_id)

    def _recent(self) -> tuple[list[dict[str, Any]], bool]:
        """Newest first, 100 a page, until the channel ends or ``lookup_limit`` were read."""
        messages: list[dict[str, Any]] = []
        before: str | None = None
        while len(messages) < self.lookup_limit:
            params = {"limit": "100", **({"before": before} if before else {})}
            resp = self._api.read(self._messages_url(), params=params)
            page = JsonApi.json(resp)
            if resp.status_code != 200 or not isinstance(page, list):
                raise ConnectorError(
                    f"{self.where}: reading channel {self.channel_id} answered {resp.status_code}; "
                    "check the bot can read message history there"
                )
            messages.extend(page)
            if len(page) < 100:
                return messages, True
            before = str(page[-1]["id"])
        return messages, False

    def verify(self, step_key: str, evidence: str) -> bool:
        """The message with the recorded id still exists."""
        if self._webhook_url is not None:
            url, shown = f"{self._webhook_url}/messages/{evidence}", "the webhook's message"
        else:
            url, shown = self._messages_url(evidence), None
        status = self._api.read(url, shown=shown).status_code
        if status in (200, 404):
            return status == 200
        raise ConnectorError(f"{self.where}: reading message {evidence} answered {status}")

    def count(self, step_key: str) -> int:
        if self._webhook_url is not None:
            raise ConnectorError(f"{self.where}: messages sent through a webhook cannot be counted by key")
        nonce, bot = nonce_of(step_key), self._bot_id()
        return sum(
            1
            for m in self._recent()[0]
            if m.get("nonce") == nonce and (m.get("author") or {}).get("id") == bot
        )
