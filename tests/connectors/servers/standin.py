"""What the contract stand-ins share: a real HTTP server on loopback, request parsing, knobs.

A stand-in speaks one provider's documented wire format (paths, methods, auth
headers, JSON and form bodies, error shapes) so the official client library of
that provider can be pointed at it. Each stand-in module defines an
:class:`App` subclass whose ``handle`` answers one :class:`Request`; this module
runs it as a :class:`~http.server.ThreadingHTTPServer` on 127.0.0.1 in a thread
(:func:`serve`), reachable from child processes too.

Knobs make the next matching request misbehave, once each (:meth:`App.knob`):

* ``fail`` (``status``, ``body``): answer that, change nothing;
* ``drop``: do the work, then close the connection without an answer;
* ``sleep`` (``seconds``): do the work, then wait before answering.

A knob matches a request whose ``METHOD path`` contains its ``match`` string.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["App", "Reply", "Request", "form_to_nested", "serve"]


@dataclass
class Request:
    method: str
    path: str  # decoded
    raw_path: str  # as sent (percent-encoded)
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: Any  # decoded JSON, a nested dict from a form, raw text, or None
    form: bool = False

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None


@dataclass
class Reply:
    status: int
    body: Any = None  # JSON-encoded unless ``text``
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def form_to_nested(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``metadata[k]=v`` and ``expand[0]=x`` (as Stripe's clients encode them) into nested values."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        parts = re.findall(r"[^\[\]]+", name)
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return _lists(out)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value):
            return [_lists(value[k]) for k in sorted(value, key=int)]
        return {k: _lists(v) for k, v in value.items()}
    return value


class App:
    """One provider's API: subclass and implement :meth:`handle`."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.knobs: list[dict[str, Any]] = []
        self.requests: list[Request] = []

    def knob(self, match: str, action: str, **fields: Any) -> None:
        with self.lock:
            self.knobs.append({"match": match, "action": action, **fields})

    def take_knob(self, request: Request) -> dict[str, Any] | None:
        line = f"{request.method} {request.path}"
        with self.lock:
            for i, knob in enumerate(self.knobs):
                if knob["match"] in line:
                    return self.knobs.pop(i)
        return None

    def handle(self, request: Request) -> Reply:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _request(self) -> Request:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = self.headers.get("Content-Type", "")
        body: Any = None
        form = False
        if raw and "application/x-www-form-urlencoded" in ctype:
            body, form = form_to_nested(parse_qsl(raw.decode(), keep_blank_values=True)), True
        elif raw:
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                body = raw.decode(errors="replace")
        query: dict[str, list[str]] = {}
        for k, v in parse_qsl(parts.query, keep_blank_values=True):
            query.setdefault(k, []).append(v)
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Request(self.command, unquote(parts.path), parts.path, query, headers, body, form)

    def _serve(self) -> None:
        app = self.server.app
        request = self._request()
        with app.lock:
            app.requests.append(request)
        knob = app.take_knob(request)
        if knob and knob["action"] == "fail":
            reply = Reply(int(knob["status"]), knob.get("body"), knob.get("text"))
        else:
            reply = app.handle(request)
        if knob and knob["action"] == "drop":
            # The work is done; the client never learns it.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if knob and knob["action"] == "sleep":
            time.sleep(float(knob["seconds"]))
        if reply.text is not None:
            data, ctype = reply.text.encode(), "text/plain; charset=utf-8"
        elif reply.status == 204:
            data, ctype = b"", ""
        else:
            data, ctype = json.dumps(reply.body).encode(), "application/json; charset=utf-8"
        self.send_response(reply.status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, app: App) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.app = app


@contextlib.contextmanager
def serve(app: App) -> Iterator[str]:
    """Run ``app`` on a free loopback port; yields its base URL (``http://127.0.0.1:PORT``)."""
    server = _Server(app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
