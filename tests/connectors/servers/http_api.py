"""A small real HTTP API on loopback, for the HTTP connector tests.

Two collections behave like the two kinds of API found in the wild:

* ``/idem/items`` honours ``Idempotency-Key``: a second POST with a known key
  answers the resource the first one created, and creates nothing.
* ``/plain/items`` ignores the header: every POST creates a new resource.

Both record the key they were sent with and answer ``GET
/<api>/items/by-key/<key>`` (200 with the resource, 404 when absent) and
``DELETE /<api>/items/<id>`` (204, or 404 when absent). A POST needs a JSON
body with a ``title`` (else 400). State is written to a JSON
file (atomically) *before* the answer, so a test that kills a client right
after the request can count the resources that really exist.

Knobs, queued with ``POST /_control {"api": "idem", "action": ..., ...}`` and
used once each by the next matching request:

* ``status`` (with ``status``): answer that status, create nothing;
* ``status_after_create``: create, then answer ``status``;
* ``sleep_after_create`` (with ``seconds``): create, then wait before answering;
* ``drop_after_create``: create, then close the connection without an answer;
* ``lookup_status``: the next by-key GET answers ``status``.

With ``API_TOKEN`` in the environment every request must carry
``Authorization: Bearer <token>``.

Run: ``python http_api.py STATE.json PORT_FILE``; it binds 127.0.0.1 on a free
port and writes the port number to PORT_FILE once it accepts connections.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

APIS = ("idem", "plain")


class State:
    """Resources and queued knobs, persisted to a JSON file after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, Any] = {"resources": [], "next": 1, "knobs": []}
        if path.exists():
            self.data = json.loads(path.read_text())
        self.save()

    def save(self) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state.")
        with os.fdopen(fd, "w") as fh:
            json.dump(self.data, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def take_knob(self, api: str, actions: tuple[str, ...]) -> dict[str, Any] | None:
        for i, knob in enumerate(self.data["knobs"]):
            if knob.get("api") == api and knob.get("action") in actions:
                del self.data["knobs"][i]
                self.save()
                return dict(knob)
        return None

    def by_key(self, api: str, key: str) -> dict[str, Any] | None:
        for res in self.data["resources"]:
            if res["api"] == api and res["key"] == key:
                return dict(res)
        return None

    def create(self, api: str, key: str | None, body: Any) -> dict[str, Any]:
        res = {"id": f"{api}-{self.data['next']}", "api": api, "key": key, "body": body}
        self.data["next"] += 1
        self.data["resources"].append(res)
        self.save()
        return res


class Handler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token = os.environ.get("API_TOKEN")
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            self._send(401, {"error": "missing or wrong token"})
            return False
        return True

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return None

    def _resource(self, res: dict[str, Any]) -> dict[str, Any]:
        return {"id": res["id"], "data": {"id": res["id"], "key": res["key"]}, "body": res["body"]}

    def do_GET(self) -> None:
        state = self.server.state
        parts = self.path.split("/")
        if self.path == "/_state":
            with state.lock:
                return self._send(200, state.data)
        if not self._authorized():
            return None
        # /<api>/items/by-key/<key>
        if len(parts) == 5 and parts[1] in APIS and parts[2:4] == ["items", "by-key"]:
            api, key = parts[1], unquote(parts[4])
            with state.lock:
                knob = state.take_knob(api, ("lookup_status",))
                res = state.by_key(api, key)
            if knob:
                return self._send(int(knob["status"]), {"error": "knob"})
            if res is None:
                return self._send(404, {"error": "no resource with this key"})
            return self._send(200, self._resource(res))
        return self._send(404, {"error": "no such path"})

    def do_POST(self) -> None:
        state = self.server.state
        parts = self.path.split("/")
        body = self._body()
        if self.path == "/_control":
            with state.lock:
                state.data["knobs"].append(body)
                state.save()
            return self._send(200, {"ok": True})
        if not self._authorized():
            return None
        if len(parts) != 3 or parts[1] not in APIS or parts[2] != "items":
            return self._send(404, {"error": "no such path"})
        api = parts[1]
        key = self.headers.get("Idempotency-Key")
        with state.lock:
            knob = state.take_knob(
                api, ("status", "status_after_create", "sleep_after_create", "drop_after_create")
            )
            if knob and knob["action"] == "status":
                return self._send(int(knob["status"]), {"error": f"knob {knob['status']}"})
            if not isinstance(body, dict) or not body.get("title"):
                return self._send(400, {"error": "title is required"})
            existing = state.by_key(api, key) if api == "idem" and key else None
            if existing is not None:
                return self._send(200, self._resource(existing))
            res = state.create(api, key, body)
        action = knob["action"] if knob else None
        if action == "drop_after_create":
            # Cut the connection without a byte of answer: the client cannot know.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return None
        if action == "sleep_after_create":
            time.sleep(float(knob["seconds"]) if knob else 0)
        status = int(knob["status"]) if knob and action == "status_after_create" else 201
        self._send(status, self._resource(res), {"Location": f"/{api}/items/{res['id']}"})
        return None


    def do_DELETE(self) -> None:
        state = self.server.state
        parts = self.path.split("/")
        if not self._authorized():
            return None
        # /<api>/items/<id>
        if len(parts) == 4 and parts[1] in APIS and parts[2] == "items":
            with state.lock:
                kept = [r for r in state.data["resources"] if not (r["api"] == parts[1] and r["id"] == parts[3])]
                if len(kept) == len(state.data["resources"]):
                    return self._send(404, {"error": "no such resource"})
                state.data["resources"] = kept
                state.save()
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self._send(404, {"error": "no such path"})


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: State) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = state


def main() -> None:
    state_path, port_file = Path(sys.argv[1]), Path(sys.argv[2])
    server = ApiServer(State(state_path))
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    os.replace(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
