"""A contract stand-in for the Slack Web API and incoming webhooks.

Speaks what Slack documents, so ``slack_sdk`` can be pointed at it
(``WebClient(base_url=BASE + "/api/")``):

* ``POST /api/chat.postMessage`` (JSON or form; ``Authorization: Bearer``):
  ``{"ok": true, "channel", "ts", "message"}``; errors are HTTP 200 with
  ``{"ok": false, "error": "channel_not_found" | "invalid_auth" | "no_text" |
  "invalid_metadata_format"}``. ``metadata`` (``event_type`` +
  ``event_payload``) is stored with the message.
* ``GET /api/conversations.history?channel&limit&cursor&include_all_metadata``:
  newest first, ``has_more`` and ``response_metadata.next_cursor``; message
  ``metadata`` only with ``include_all_metadata=true``, as Slack does.
* ``POST /services/T.../B.../SECRET`` (an incoming webhook): 200 ``ok`` as
  plain text and no id; 400 ``invalid_payload`` / ``no_text``, 404 ``no_service``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from standin import App, Reply, Request

TOKEN = "xoxb-standin-1-never-printed"
BOT_USER = "U0BOT"
CHANNEL = "C0REPORTS"
WEBHOOK_PATH = "/services/T0TEAM/B0HOOK/s3cr3tHookPath"


class SlackApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.channels: dict[str, list[dict[str, Any]]] = {CHANNEL: []}
        self.webhook_posts: list[dict[str, Any]] = []
        self._clock = 1_700_000_000
        self._seq = threading.Lock()

    def _ts(self) -> str:
        with self._seq:
            self._clock += 1
            return f"{self._clock}.000100"

    def messages(self, channel: str = CHANNEL) -> list[dict[str, Any]]:
        """The channel as Slack holds it, oldest first."""
        with self.lock:
            return [dict(m) for m in self.channels[channel]]

    def post_directly(self, text: str, metadata: dict[str, Any] | None = None) -> None:
        """A message someone else posted (a person, or another run)."""
        with self.lock:
            message = {"type": "message", "user": "U0PERSON", "text": text, "ts": self._ts()}
            if metadata:
                message["metadata"] = metadata
            self.channels[CHANNEL].append(message)

    def handle(self, request: Request) -> Reply:
        if request.path == WEBHOOK_PATH and request.method == "POST":
            return self._webhook(request)
        if request.path.startswith("/services/"):
            return Reply(404, text="no_service")
        method = request.path.removeprefix("/api/")
        params: dict[str, Any] = {k: v[-1] for k, v in request.query.items()}
        if isinstance(request.body, dict):
            params.update(request.body)
        if request.bearer() != TOKEN:
            return Reply(200, {"ok": False, "error": "invalid_auth"})
        if method == "chat.postMessage":
            return self._post(params)
        if method == "conversations.history":
            return self._history(params)
        return Reply(404, {"ok": False, "error": "unknown_method"})

    def _post(self, params: dict[str, Any]) -> Reply:
        channel = params.get("channel")
        if channel not in self.channels:
            return Reply(200, {"ok": False, "error": "channel_not_found"})
        if not params.get("text") and not params.get("blocks"):
            return Reply(200, {"ok": False, "error": "no_text"})
        metadata = params.get("metadata")
        if isinstance(metadata, str):  # form-encoded: a JSON string
            metadata = json.loads(metadata)
        if metadata is not None and not (
            isinstance(metadata, dict)
            and isinstance(metadata.get("event_type"), str)
            and isinstance(metadata.get("event_payload"), dict)
        ):
            return Reply(200, {"ok": False, "error": "invalid_metadata_format"})
        with self.lock:
            message = {"type": "message", "user": BOT_USER, "bot_id": "B0BOT", "text": params.get("text", "")}
            message["ts"] = self._ts()
            if metadata:
                message["metadata"] = metadata
            self.channels[channel].append(message)
        shown = {k: v for k, v in message.items() if k != "metadata"}
        return Reply(200, {"ok": True, "channel": channel, "ts": message["ts"], "message": shown})

    def _history(self, params: dict[str, Any]) -> Reply:
        channel = params.get("channel")
        if channel not in self.channels:
            return Reply(200, {"ok": False, "error": "channel_not_found"})
        limit = min(int(params.get("limit") or 100), 999)
        start = int(params.get("cursor") or 0)
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("true", "1")
        with self.lock:
            newest_first = list(reversed(self.channels[channel]))
        page = newest_first[start : start + limit]
        if not with_metadata:
            page = [{k: v for k, v in m.items() if k != "metadata"} for m in page]
        more = start + limit < len(newest_first)
        return Reply(
            200,
            {
                "ok": True,
                "messages": page,
                "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""},
            },
        )

    def _webhook(self, request: Request) -> Reply:
        body = request.body
        if not isinstance(body, dict):
            return Reply(400, text="invalid_payload")
        if not body.get("text") and not body.get("blocks"):
            return Reply(400, text="no_text")
        with self.lock:
            self.webhook_posts.append(dict(body))
        return Reply(200, text="ok")
