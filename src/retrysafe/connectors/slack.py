"""Slack: a message per step key, through the official ``slack_sdk`` client.

With a bot token (``token_env``) and a ``channel`` ID the message goes out by
``chat.postMessage`` carrying the step key in its message ``metadata``
(``event_type`` ``retrysafe_step``, ``event_payload.retrysafe_key``); the
lookup reads ``conversations.history`` with ``include_all_metadata`` and
finds the message by that metadata. Slack has no idempotency key, so after an
unclear result this lookup is what keeps the message single.

With an incoming webhook (``webhook_url_env``) there is no id in the answer and
nothing to read back: a 2xx is done with evidence that says so, and only an
unclear result (no answer, 5xx) needs a human.

``{"ok": false, "error": ...}`` is a definite failure (nothing was posted),
except ``internal_error``, ``fatal_error`` and ``service_unavailable``, which
Slack documents as "some aspect may have succeeded": those leave the step
unknown for the lookup.

Example config::

    [connectors.team-chat]
    type = "slack"
    token_env = "SLACK_BOT_TOKEN"
    channel = "C0123456789"
"""

from __future__ import annotations

import urllib.error
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import integer, number, optional_secret, optional_str, reject_unknown, string
from ._web import one_line, one_match, refused
from .base import Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

try:
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError
    from slack_sdk.webhook import WebhookClient
except ImportError as exc:  # an optional dependency
    raise ConfigError(f"the slack connector needs {exc.name}: pip install 'retrysafe[slack]'") from None

__all__ = ["SlackConnector"]

_FIELDS = frozenset(
    {"type", "token_env", "channel", "webhook_url_env", "base_url", "event_type", "lookup_limit", "timeout",
     "workspace_url"}
)
_PAYLOAD = frozenset(
    {
        "text",
        "blocks",
        "attachments",
        "thread_ts",
        "mrkdwn",
        "unfurl_links",
        "unfurl_media",
        "reply_broadcast",
    }
)
# Slack's own words for these: "it's possible some aspect of the operation succeeded".
_UNCLEAR_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
_KEY_FIELD = "retrysafe_key"
_WEBHOOK_EVIDENCE = "incoming webhook answered {status} ok (no id; no lookup possible)"


def _unsent(exc: BaseException) -> bool:
    """urllib's way of saying no connection was made, so nothing was sent."""
    return isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, ConnectionRefusedError)


class SlackConnector(ConnectorBase):
    """chat.postMessage with the key in metadata, or an incoming webhook."""

    effect_class = "message"

    def __init__(
        self,
        name: str,
        *,
        token: str | None = None,
        channel: str | None = None,
        webhook_url: str | None = None,
        base_url: str = WebClient.BASE_URL,
        event_type: str = "retrysafe_step",
        lookup_limit: int = 1000,
        timeout: float = 30.0,
        workspace_url: str | None = None,
    ) -> None:
        self.name = name
        self.workspace_url = (workspace_url or "").rstrip("/")
        self.where = f"connector {name!r}"
        if (token is None) == (webhook_url is None):
            raise ConfigError(f"{self.where}: give either token_env (with channel) or webhook_url_env")
        if token is not None and not channel:
            raise ConfigError(f"{self.where}: 'channel' (a channel ID such as C0123456789) is required")
        self._token = token
        self._webhook_url = webhook_url
        self.channel = channel or ""
        self.base_url = base_url
        self.event_type = event_type
        self.lookup_limit = max(1, lookup_limit)
        self.timeout = timeout
        # A webhook leaves nothing to find: its lookup never says Absent.
        self.authoritative = webhook_url is None

    def __repr__(self) -> str:  # never show the token or the webhook URL
        return f"SlackConnector({self.name!r}, {'webhook' if self._webhook_url else self.channel})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> SlackConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        return cls(
            name,
            token=optional_secret(where, table, "token_env", "the bot token"),
            channel=optional_str(where, table, "channel"),
            webhook_url=optional_secret(where, table, "webhook_url_env", "the webhook URL"),
            base_url=string(where, table, "base_url", WebClient.BASE_URL),
            event_type=string(where, table, "event_type", "retrysafe_step"),
            lookup_limit=integer(where, table, "lookup_limit", 1000),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
            workspace_url=optional_str(where, table, "workspace_url"),
        )

    def _client(self) -> WebClient:
        # No retry handlers: a resent postMessage would be a second message.
        return WebClient(
            token=self._token, base_url=self.base_url, timeout=int(self.timeout) or 1, retry_handlers=[]
        )

    def validate(self, payload: Payload) -> None:
        reject_unknown(self.where, payload, _PAYLOAD, error=InvalidInput, list_known=True)
        if not payload.get("text") and not payload.get("blocks") and not payload.get("attachments"):
            raise InvalidInput(f"{self.where}: the message needs 'text' (or 'blocks')")

    # --- execute ------------------------------------------------------------

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        if self._webhook_url is not None:
            return self._send_webhook(payload)
        metadata = {"event_type": self.event_type, "event_payload": {_KEY_FIELD: step_key}}
        try:
            resp = self._client().chat_postMessage(channel=self.channel, metadata=metadata, **payload)
        except SlackApiError as exc:
            raise self._api_error("chat.postMessage", exc) from exc
        except Exception as exc:
            raise self._transport_error("chat.postMessage", exc) from exc
        return self._evidence(str(resp.get("channel") or self.channel), str(resp.get("ts")))

    def _evidence(self, channel: str, ts: str) -> Evidence:
        """``channel/ts``; the fields name both, and the permalink when ``workspace_url``
        is set (Slack's documented form ``/archives/CHANNEL/pTS``)."""
        link = (f"{self.workspace_url}/archives/{channel}/p{ts.replace('.', '')}"
                if self.workspace_url else None)
        return Evidence(f"{channel}/{ts}", channel=channel, ts=ts, url=link)

    def _api_error(self, method: str, exc: SlackApiError) -> ConnectorError:
        status = exc.response.status_code
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
        said = f"{method} answered {status} {error or one_line(str(exc.response.data))}"
        if (status == 200 or refused(status)) and error and error not in _UNCLEAR_ERRORS:
            return EffectFailed(f"{self.where}: {said}; nothing was posted")
        return ConnectorError(f"{self.where}: {said}; the message may have been posted (lookup decides)")

    def _transport_error(self, what: str, exc: Exception) -> ConnectorError:
        if _unsent(exc):
            return EffectFailed(f"{self.where}: cannot reach Slack ({exc}); nothing was sent")
        return ConnectorError(
            f"{self.where}: {what} got no answer ({type(exc).__name__}); the message may have been posted"
        )

    def _send_webhook(self, payload: Payload) -> str:
        assert self._webhook_url is not None
        client = WebhookClient(self._webhook_url, timeout=int(self.timeout) or 1, retry_handlers=[])
        try:
            resp = client.send(**payload)
        except Exception as exc:
            raise self._transport_error("the incoming webhook", exc) from exc
        said = f"the incoming webhook answered {resp.status_code} {one_line(resp.body or '')}"
        if 200 <= resp.status_code < 300:
            return Evidence(_WEBHOOK_EVIDENCE.format(status=resp.status_code), http_status=resp.status_code,
                            lookup="none possible")
        if refused(resp.status_code):
            raise EffectFailed(f"{self.where}: {said}; nothing was posted")
        raise ConnectorError(f"{self.where}: {said}; the message may have been posted")

    # --- lookup -------------------------------------------------------------

    @property
    def can_look_up(self) -> bool:
        return self._webhook_url is None

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Find the message by its metadata in the channel's recent history."""
        if self._webhook_url is not None:
            return Ambiguous(
                f"{self.where} posts through an incoming webhook, which answers no id and cannot be "
                f"read back: look in the webhook's channel for the message of {step_key!r}"
            )
        try:
            found, complete = self._matches(step_key)
        except SlackApiError as exc:
            if exc.response.status_code == 200:  # missing_scope, not_in_channel...: a person must fix it
                return Ambiguous(
                    f"{self.where}: conversations.history answered {exc.response.get('error')}; "
                    f"check channel {self.channel} for a message with metadata {_KEY_FIELD} = {step_key!r}"
                )
            raise self._lookup_error(exc) from exc
        except Exception as exc:
            raise self._lookup_error(exc) from exc
        return one_match(
            found, searched=f"the last {self.lookup_limit} messages of {self.channel}", complete=complete
        )

    def _lookup_error(self, exc: Exception) -> ConnectorError:
        return ConnectorError(
            f"{self.where}: conversations.history did not answer ({type(exc).__name__}): try later"
        )

    def _matches(self, step_key: str) -> tuple[list[Evidence], bool]:
        client = self._client()
        found: list[Evidence] = []
        seen = 0
        cursor: str | None = None
        while True:
            resp = client.conversations_history(
                channel=self.channel,
                limit=min(200, self.lookup_limit),
                cursor=cursor,
                include_all_metadata=True,
            )
            messages = resp.get("messages") or []
            seen += len(messages)
            for message in messages:
                metadata = message.get("metadata") or {}
                if (
                    metadata.get("event_type") == self.event_type
                    and (metadata.get("event_payload") or {}).get(_KEY_FIELD) == step_key
                ):
                    found.append(self._evidence(self.channel, str(message.get("ts"))))
            cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
            if not resp.get("has_more") or cursor is None:
                return found, True
            if seen >= self.lookup_limit:
                return found, False

    def verify(self, step_key: str, evidence: str) -> bool:
        """The message is still in the channel; a webhook send holds by its recorded answer."""
        if self._webhook_url is not None:
            return True
        result = self.lookup(step_key, {})
        return isinstance(result, Found) and result.evidence == evidence

    def count(self, step_key: str) -> int:
        if self._webhook_url is not None:
            raise ConnectorError(f"{self.where}: messages sent through an incoming webhook cannot be counted")
        return len(self._matches(step_key)[0])
