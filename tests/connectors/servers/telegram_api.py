"""A contract stand-in for the Telegram Bot API, and for a channel log a user may keep.

The Bot API part speaks what Telegram documents:

* ``POST /bot<token>/sendMessage`` (JSON or form: ``chat_id``, ``text``,
  ``parse_mode``...): ``{"ok": true, "result": Message}``; errors
  ``{"ok": false, "error_code": N, "description": "..."}`` with that HTTP status
  (400 ``Bad Request: chat not found``, 401 ``Unauthorized``, 429 with
  ``parameters.retry_after``).
* ``GET /bot<token>/getMe``.

The Bot API has no call that reads a chat's messages back. The second part,
``GET /log/<chat_id>/messages``, stands for what a user can set up to read a
channel (for instance a bot that is a channel admin and stores the
``channel_post`` updates it receives): it answers ``{"messages": [Message...]}``,
newest first.
"""

from __future__ import annotations

import time
from typing import Any

from standin import App, Reply, Request

TOKEN = "123456:standin-never-printed"
BOT = {"id": 123456, "is_bot": True, "first_name": "Reports", "username": "reports_bot"}
CHAT = {"id": -1001234567890, "type": "channel", "title": "Reports", "username": "reports_channel"}


class TelegramApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []
        self._next = 100

    def messages(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(m) for m in self.sent]

    def handle(self, request: Request) -> Reply:
        if request.path.startswith("/log/"):
            parts = request.path.split("/")
            if len(parts) == 4 and parts[2] == str(CHAT["id"]) and parts[3] == "messages":
                with self.lock:
                    return Reply(200, {"messages": list(reversed(self.sent))})
            return Reply(404, {"error": "no such log"})
        prefix = f"/bot{TOKEN}/"
        if not request.path.startswith(prefix):
            return Reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        method = request.path.removeprefix(prefix)
        params: dict[str, Any] = {k: v[-1] for k, v in request.query.items()}
        if isinstance(request.body, dict):
            params.update(request.body)
        if method == "getMe":
            return Reply(200, {"ok": True, "result": BOT})
        if method == "sendMessage":
            return self._send(params)
        return Reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    def _send(self, params: dict[str, Any]) -> Reply:
        if str(params.get("chat_id")) not in (str(CHAT["id"]), "@" + str(CHAT["username"])):
            return Reply(400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"})
        text = params.get("text")
        if not text:
            return Reply(
                400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
            )
        with self.lock:
            self._next += 1
            message = {
                "message_id": self._next,
                "sender_chat": CHAT,
                "chat": CHAT,
                "date": int(time.time()),
                "text": text,
            }
            self.sent.append(message)
        return Reply(200, {"ok": True, "result": message})
