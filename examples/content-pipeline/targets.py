#!/usr/bin/env python3
"""Local stand-ins for the pipeline's external systems, on loopback.

* a publishing "CMS": ``POST /cms/posts`` creates a post (a new one on every
  request, like most CMS APIs: it does not deduplicate), remembering the
  ``Idempotency-Key`` header it was sent with; ``GET /cms/posts/by-key/KEY``
  finds it (200), or not (404), or answers 300 when several posts carry the
  key (a duplicate: the thing retrysafe exists to prevent);
* a chat webhook: ``POST /chat/messages`` and ``GET /chat/messages/by-key/KEY``,
  the same way.

The sheet is a CSV file written by retrysafe's ``csv`` connector.

Everything is stored in ``TARGETS/state.json``, written atomically *before*
each answer, so what it holds is what really happened even when a client is
killed mid-request.

    python3 targets.py serve TARGETS     # runs until stopped; port in TARGETS/port
    python3 targets.py config TARGETS    # prints retrysafe.toml for these targets
    python3 targets.py count TARGETS     # effects per step key, as JSON
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

HERE = Path(__file__).resolve().parent
SYSTEMS = ("cms", "chat")
COLLECTION = {"cms": "posts", "chat": "messages"}


def load(targets: Path) -> dict[str, Any]:
    path = targets / "state.json"
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"cms": [], "chat": []}


def save(targets: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=targets, prefix=".state.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, targets / "state.json")


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, str] | None:
        parts = self.path.split("/")
        if len(parts) >= 3 and parts[1] in SYSTEMS and parts[2] == COLLECTION[parts[1]]:
            return parts[1], "/".join(parts[3:])
        return None

    def do_GET(self) -> None:
        route = self._route()
        if route is None or not route[1].startswith("by-key/"):
            return self._send(404, {"error": "no such path"})
        system, key = route[0], unquote(route[1][len("by-key/"):])
        with self.server.lock:
            found = [r for r in self.server.data[system] if r["key"] == key]
        if not found:
            return self._send(404, {"error": "nothing carries this key"})
        if len(found) > 1:
            return self._send(300, {"error": f"{len(found)} {COLLECTION[system]} carry this key",
                                    "ids": [r["id"] for r in found]})
        return self._send(200, found[0])

    def do_POST(self) -> None:
        route = self._route()
        if route is None or route[1]:
            return self._send(404, {"error": "no such path"})
        system = route[0]
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or not body.get("title"):
            return self._send(400, {"error": "a JSON body with a title is required"})
        record = {"id": f"{system}-{uuid.uuid4().hex[:10]}", "key": self.headers.get("Idempotency-Key"),
                  **{k: v for k, v in body.items() if k not in ("id", "key")}}
        if system == "cms":
            record["url"] = f"http://127.0.0.1:{self.server.server_port}/cms/{record['id']}"
        with self.server.lock:
            self.server.data[system].append(record)
            save(self.server.targets, self.server.data)
        return self._send(201, record)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # clients killed mid-request are this server's daily bread: no tracebacks
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def __init__(self, targets: Path) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.targets = targets
        self.lock = threading.Lock()
        self.data = load(targets)
        save(targets, self.data)


def serve(targets: Path) -> None:
    targets.mkdir(parents=True, exist_ok=True)
    server = Server(targets)
    port_file = targets / "port"
    port_file.write_text(str(server.server_port))
    try:
        server.serve_forever()
    finally:
        port_file.unlink(missing_ok=True)


def config(targets: Path) -> str:
    port = (targets / "port").read_text().strip()
    text = (HERE / "retrysafe.toml").read_text()
    return text.replace("@BASE@", f"http://127.0.0.1:{port}").replace(
        "@TARGETS@", str(targets.resolve()))


def count(targets: Path) -> dict[str, dict[str, int]]:
    """How many effects each step key has in each system (the sheet included)."""
    import csv

    data = load(targets)
    out: dict[str, dict[str, int]] = {s: {} for s in (*SYSTEMS, "sheet")}
    for system in SYSTEMS:
        for record in data[system]:
            out[system][record["key"]] = out[system].get(record["key"], 0) + 1
    sheet = targets / "sheet.csv"
    if sheet.exists():
        with sheet.open(newline="") as fh:
            for row in csv.DictReader(fh):
                key = row["retrysafe_key"]
                out["sheet"][key] = out["sheet"].get(key, 0) + 1
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("serve", "config", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    targets = Path(argv[2]).absolute()
    if argv[1] == "serve":
        serve(targets)
    elif argv[1] == "config":
        sys.stdout.write(config(targets))
    else:
        print(json.dumps(count(targets), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
