"""A contract stand-in for the Discord HTTP API (v10): messages and webhooks.

Speaks what Discord documents:

* ``POST /api/v10/channels/{id}/messages`` (``Authorization: Bot TOKEN``, JSON):
  the message object; ``nonce`` (string of at most 25 characters, else 400
  ``Invalid Form Body`` code 50035) with ``enforce_nonce: true``: a message by
  the same author with the same nonce within ``nonce_window`` seconds is
  answered again and nothing new is created.
* ``GET /api/v10/channels/{id}/messages?limit&before``: newest first. The
  message object documents ``nonce`` as optional; ``omit_nonces`` makes the
  stand-in leave it out of read-back, to test a connector that must not
  depend on it.
* ``GET /api/v10/users/@me``: the bot user.
* ``POST /api/v10/webhooks/{id}/{token}?wait=true``: the message object
  (``204`` without ``wait``); ``GET .../webhooks/{id}/{token}/messages/{mid}``.
* ``DELETE /api/v10/channels/{id}/messages/{mid}``: 204.

Errors: ``{"message": "...", "code": N}`` with 401, 403, 404; 429 with
``retry_after``.
"""

from __future__ import annotations

import time
from typing import Any

from standin import App, Reply, Request

TOKEN = "bot-standin-token-never-printed"
BOT = {"id": "1100000000000000001", "username": "reports-bot", "bot": True}
CHANNEL = "1200000000000000001"
WEBHOOK_ID, WEBHOOK_TOKEN = "1300000000000000001", "hookToken-s3cr3t"


class DiscordApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.channels: dict[str, list[dict[str, Any]]] = {CHANNEL: []}
        self.nonce_window = 300.0
        self.omit_nonces = False
        self._next = 1400000000000000000

    def messages(self, channel: str = CHANNEL) -> list[dict[str, Any]]:
        """The channel as Discord holds it, oldest first (with nonces)."""
        with self.lock:
            return [dict(m) for m in self.channels[channel]]

    def _message(self, channel: str, author: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        message = {
            "id": str(self._next),
            "type": 0,
            "channel_id": channel,
            "author": author,
            "content": body.get("content", ""),
            "embeds": body.get("embeds", []),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "_created": time.monotonic(),
        }
        if "nonce" in body:
            message["nonce"] = body["nonce"]
        self.channels[channel].append(message)
        return message

    @staticmethod
    def _public(message: dict[str, Any], nonce: bool = True) -> dict[str, Any]:
        return {k: v for k, v in message.items() if not k.startswith("_") and (nonce or k != "nonce")}

    def handle(self, request: Request) -> Reply:
        parts = request.path.removeprefix("/api/v10/").split("/")
        if parts[0] == "webhooks":
            return self._webhook(request, parts)
        if request.headers.get("authorization") != f"Bot {TOKEN}":
            return Reply(401, {"message": "401: Unauthorized", "code": 0})
        if parts == ["users", "@me"]:
            return Reply(200, BOT)
        if len(parts) >= 3 and parts[0] == "channels" and parts[2] == "messages":
            channel = parts[1]
            if channel not in self.channels:
                return Reply(404, {"message": "Unknown Channel", "code": 10003})
            if request.method == "POST" and len(parts) == 3:
                return self._create(channel, request.body)
            if request.method == "GET" and len(parts) == 3:
                return self._list(channel, request)
            if request.method == "GET" and len(parts) == 4:
                with self.lock:
                    for message in self.channels[channel]:
                        if message["id"] == parts[3]:
                            return Reply(200, self._public(message, nonce=not self.omit_nonces))
                return Reply(404, {"message": "Unknown Message", "code": 10008})
            if request.method == "DELETE" and len(parts) == 4:
                with self.lock:
                    kept = [m for m in self.channels[channel] if m["id"] != parts[3]]
                    if len(kept) == len(self.channels[channel]):
                        return Reply(404, {"message": "Unknown Message", "code": 10008})
                    self.channels[channel] = kept
                return Reply(204)
        return Reply(404, {"message": "404: Not Found", "code": 0})

    def _create(self, channel: str, body: Any) -> Reply:
        if not isinstance(body, dict) or not (body.get("content") or body.get("embeds")):
            return Reply(400, {"message": "Cannot send an empty message", "code": 50006})
        nonce = body.get("nonce")
        if nonce is not None and (not isinstance(nonce, str | int) or len(str(nonce)) > 25):
            return Reply(
                400,
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "nonce": {
                            "_errors": [
                                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 25 or fewer in length."}
                            ]
                        }
                    },
                },
            )
        with self.lock:
            if nonce is not None and body.get("enforce_nonce"):
                for message in self.channels[channel]:
                    if (
                        message.get("nonce") == nonce
                        and message["author"]["id"] == BOT["id"]
                        and time.monotonic() - message["_created"] < self.nonce_window
                    ):
                        return Reply(200, self._public(message))
            message = self._message(channel, BOT, body)
        return Reply(200, self._public(message))

    def _list(self, channel: str, request: Request) -> Reply:
        limit = min(int(request.arg("limit") or 50), 100)
        before = request.arg("before")
        with self.lock:
            newest_first = list(reversed(self.channels[channel]))
        if before:
            newest_first = [m for m in newest_first if int(m["id"]) < int(before)]
        return Reply(200, [self._public(m, nonce=not self.omit_nonces) for m in newest_first[:limit]])

    def _webhook(self, request: Request, parts: list[str]) -> Reply:
        if parts[1:3] != [WEBHOOK_ID, WEBHOOK_TOKEN]:
            return Reply(401, {"message": "Invalid Webhook Token", "code": 50027})
        author = {"id": WEBHOOK_ID, "username": "reports-hook", "bot": True}
        if request.method == "POST" and len(parts) == 3:
            if not isinstance(request.body, dict) or not (
                request.body.get("content") or request.body.get("embeds")
            ):
                return Reply(400, {"message": "Cannot send an empty message", "code": 50006})
            with self.lock:
                message = self._message(
                    CHANNEL, author, {k: v for k, v in request.body.items() if k != "nonce"}
                )
                message["webhook_id"] = WEBHOOK_ID
            if request.arg("wait") == "true":
                return Reply(200, self._public(message))
            return Reply(204)
        if request.method == "GET" and len(parts) == 5 and parts[3] == "messages":
            with self.lock:
                for message in self.channels[CHANNEL]:
                    if message["id"] == parts[4] and message.get("webhook_id") == WEBHOOK_ID:
                        return Reply(200, self._public(message))
            return Reply(404, {"message": "Unknown Message", "code": 10008})
        return Reply(405, {"message": "405: Method Not Allowed", "code": 0})
