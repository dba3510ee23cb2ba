"""Telegram: a message per step key through the Bot API's ``sendMessage``.

The Bot API has no idempotency key and no call that reads sent messages back.
So a lost answer cannot be settled by the API itself: after an unclear result
the step is Ambiguous (a person looks in the chat) unless the config names a
lookup, a URL that answers the chat's recent messages as Telegram Message
objects (for example a service of yours fed by a bot that is an admin of the
channel and receives its ``channel_post`` updates). With a lookup, every
message carries a last line ``#rs<digest of the step key>``, and the lookup
finds the message by that tag.

``{"ok": false, "error_code": 4xx}`` is a definite failure (including 429, a
flood-control refusal: nothing was sent); 5xx and lost answers are unclear.

Example config::

    [connectors.ops-telegram]
    type = "telegram"
    token_env = "TELEGRAM_BOT_TOKEN"
    chat_id = "@reports_channel"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, InvalidInput
from ._config import config_bool, env_secret, number, optional_str, reject_unknown, required_str, string
from ._web import JsonApi, check_url, dig, excerpt, key_digest, one_match
from .base import Ambiguous, ConnectorBase, EffectFailed, Evidence, LookupResult, Payload

__all__ = ["TelegramConnector"]

API_BASE = "https://api.telegram.org"
_FIELDS = frozenset(
    {
        "type",
        "token_env",
        "chat_id",
        "api_base",
        "parse_mode",
        "key_tag",
        "lookup_url",
        "lookup_results",
        "timeout",
    }
)
_PAYLOAD = frozenset(
    {"text", "parse_mode", "disable_notification", "protect_content", "link_preview_options"}
)
_TEXT_LIMIT = 4096


def tag_of(step_key: str) -> str:
    """The hashtag a step key's message ends with (Telegram clients can search it)."""
    return f"#rs{key_digest(step_key, 20)}"


def evidence_of(message: Mapping[str, Any]) -> Evidence:
    """The message's public link when the chat has a username, else ``chat_id/message_id``;
    the fields name the chat, the message id and the link."""
    chat = message.get("chat") or {}
    fields = {"chat_id": chat.get("id"), "message_id": message.get("message_id")}
    if chat.get("username"):
        link = f"https://t.me/{chat['username']}/{message.get('message_id')}"
        return Evidence(link, fields, url=link)
    return Evidence(f"{chat.get('id')}/{message.get('message_id')}", fields)


class TelegramConnector(ConnectorBase):
    """sendMessage; a lookup only where the config names a way to read the chat."""

    effect_class = "message"

    def __init__(
        self,
        name: str,
        token: str,
        chat_id: str,
        *,
        api_base: str = API_BASE,
        parse_mode: str | None = None,
        key_tag: bool | None = None,
        lookup_url: str | None = None,
        lookup_results: str = "messages",
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.where = f"connector {name!r}"
        self.api_base = check_url(api_base, f"{self.where}: api_base").rstrip("/")
        self._token = token
        self.chat_id = chat_id
        self.parse_mode = parse_mode
        self.lookup_url = check_url(lookup_url, f"{self.where}: lookup_url") if lookup_url else None
        self.lookup_results = lookup_results
        self.key_tag = self.lookup_url is not None if key_tag is None else key_tag
        if self.lookup_url and not self.key_tag:
            raise ConfigError(
                f"{self.where}: a lookup finds messages by their key tag: key_tag cannot be false"
            )
        self._api = JsonApi(self.where, {}, timeout=timeout)
        self.authoritative = self.lookup_url is not None

    def __repr__(self) -> str:  # never show the token (it is part of every URL)
        return f"TelegramConnector({self.name!r}, {self.chat_id})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> TelegramConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        chat_id = table.get("chat_id")
        return cls(
            name,
            env_secret(where, required_str(where, table, "token_env"), "the bot token", allow_empty=False),
            str(chat_id) if isinstance(chat_id, int) else required_str(where, table, "chat_id"),
            api_base=string(where, table, "api_base", API_BASE),
            parse_mode=optional_str(where, table, "parse_mode"),
            key_tag=config_bool(where, table, "key_tag") if "key_tag" in table else None,
            lookup_url=optional_str(where, table, "lookup_url"),
            lookup_results=string(where, table, "lookup_results", "messages"),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
        )

    def validate(self, payload: Payload) -> None:
        reject_unknown(self.where, payload, _PAYLOAD, error=InvalidInput, list_known=True)
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"{self.where}: the message needs 'text'")
        if len(text) + 25 > _TEXT_LIMIT:
            raise InvalidInput(f"{self.where}: 'text' is longer than Telegram's {_TEXT_LIMIT} characters")

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        body: dict[str, Any] = {"chat_id": self.chat_id, **payload}
        if self.parse_mode and "parse_mode" not in body:
            body["parse_mode"] = self.parse_mode
        if self.key_tag:
            body["text"] = f"{payload['text']}\n\n{tag_of(step_key)}"
        url, shown = f"{self.api_base}/bot{self._token}/sendMessage", "sendMessage"
        resp = self._api.send("POST", url, shown=shown, json=body)
        data = JsonApi.json(resp) or {}
        if resp.status_code == 200 and data.get("ok") is True and isinstance(data.get("result"), dict):
            return evidence_of(data["result"])
        code = data.get("error_code") if data.get("ok") is False else None
        if isinstance(code, int) and 400 <= code < 500:
            retry = dig(data, "parameters.retry_after")
            later = f" (retry after {retry} s)" if retry is not None else ""
            raise EffectFailed(f"{self.where}: sendMessage refused: {data.get('description')}{later}")
        raise self._api.unclear("POST", shown, resp)

    @property
    def can_look_up(self) -> bool:
        return self.lookup_url is not None

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Ambiguous without a configured lookup; else the message with the key's tag."""
        tag = tag_of(step_key)
        if self.lookup_url is None:
            tagged = f" ending in {tag}" if self.key_tag else ""
            return Ambiguous(
                f"{self.where}: the Telegram Bot API cannot read sent messages back: look in chat "
                f"{self.chat_id} for the message{tagged} of {step_key!r}"
            )
        resp = self._api.read(self.lookup_url)
        messages = dig(JsonApi.json(resp), self.lookup_results) if resp.status_code == 200 else None
        if not isinstance(messages, list):
            return Ambiguous(
                f"{self.where}: lookup GET {self.lookup_url} answered {resp.status_code} without a list at "
                f"{self.lookup_results!r} ({excerpt(resp)}): look in chat {self.chat_id} for {tag}"
            )
        found = [evidence_of(m) for m in messages if isinstance(m, dict) and tag in str(m.get("text", ""))]
        return one_match(found, searched=f"the messages of chat {self.chat_id} at the lookup URL")
