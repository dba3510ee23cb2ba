"""A scripted OpenAI-compatible model server on loopback, owned by a test.

OpenClaw talks to it as to any custom provider (``api: openai-completions``,
``POST {baseUrl}/chat/completions``, streamed or not). Which tool calls the
"model" makes is a script chosen by a marker in the conversation,
``[script:NAME]``: the script is a list of tool calls; the model makes call
*n* when the conversation already holds *n* tool results, then answers with
text that quotes the last tool result. A call's arguments may be a function of
the tool results so far (a model reading what its last command printed); when
it returns None, the model stops there. Every request is kept for assertions.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = re.compile(r"\[script:([A-Za-z0-9_-]+)\]")


@dataclass(frozen=True)
class Call:
    """One tool call the scripted model makes."""

    tool: str
    arguments: dict[str, Any] | Callable[[list[str]], dict[str, Any] | None]

    def arguments_after(self, results: list[str]) -> dict[str, Any] | None:
        """The call's arguments given the tool results so far (None: make no call)."""
        return self.arguments(results) if callable(self.arguments) else self.arguments


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


@dataclass
class ScriptedModel:
    """The server's state: scripts by name and the requests it answered."""

    scripts: dict[str, list[Call]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for one chat-completions request."""
        messages = body.get("messages", [])
        with self.lock:
            self.requests.append(body)
        text = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("user", "system"))
        names = MARKER.findall(text)
        script = self.scripts.get(names[-1], []) if names else []
        results = [m for m in messages if m.get("role") == "tool"]
        call = script[len(results)] if len(results) < len(script) and body.get("tools") else None
        arguments = call.arguments_after([_text(m.get("content")) for m in results]) if call else None
        if call is not None and arguments is not None:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(results) + 1}_{int(time.time() * 1000) % 100000}",
                        "type": "function",
                        "function": {"name": call.tool, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        last = _text(results[-1].get("content")) if results else ""
        return {"role": "assistant", "content": f"Finished. Last tool result: {last[:500]}"}

    def tool_results(self, script: str) -> list[str]:
        """The tool results OpenClaw sent back in the last request of a script's turns."""
        with self.lock:
            mine = [r for r in self.requests if f"[script:{script}]" in json.dumps(r)]
        if not mine:
            return []
        return [_text(m.get("content")) for m in mine[-1].get("messages", []) if m.get("role") == "tool"]


def _chunks(message: dict[str, Any], model: str) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    if message.get("tool_calls"):
        calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": calls}, "finish_reason": None}]}
        finish = "tool_calls"
    else:
        yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"]}, "finish_reason": None}]}
        finish = "stop"
    yield {
        **base,
        "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, b"{}")
            return
        message = self.server.model.answer(body)
        model = str(body.get("model", "scripted"))
        if body.get("stream"):
            data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in _chunks(message, model))
            self._send(200, data + b"data: [DONE]\n\n", "text/event-stream")
            return
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        reply = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }
        self._send(200, json.dumps(reply).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    model: ScriptedModel


def serve(model: ScriptedModel) -> tuple[_Server, int]:
    """Start the server on a free loopback port in a daemon thread."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.model = model
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])
