"""Real receivers on loopback for the notification tests.

* :class:`HttpReceiver`: an HTTP server (a thread of the test process) that
  records every request it gets (webhooks and pings) and answers with the
  status the test sets (200, or 500 while it is "down").
* :func:`openclaw_stub`: an ``openclaw`` executable that records its argv as
  one JSON line per call, for a ``PATH`` that finds it first.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    body: bytes
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """What the server got, and how it answers next."""

    port: int = 0
    status: int = 200
    delay: float = 0.0
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def delivered(self, path: str | None = None) -> list[Request]:
        """The requests answered 2xx (to ``path`` when given)."""
        return [r for r in self.requests if 200 <= r.status < 300 and (path is None or r.path == path)]

    def start(self) -> HttpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if receiver.delay:
                    time.sleep(receiver.delay)
                status = receiver.status
                receiver.requests.append(Request("POST", self.path, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


OPENCLAW_STUB = """#!{python}
import json, os, sys
with open({log!r}, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(int(os.environ.get("OPENCLAW_STUB_EXIT", "0")))
"""


def openclaw_stub(folder: Path) -> tuple[Path, Path]:
    """An ``openclaw`` in ``folder`` that appends its arguments to a log; returns
    (the folder, for ``PATH``, and the log)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "openclaw-calls.jsonl"
    exe = folder / "openclaw"
    exe.write_text(OPENCLAW_STUB.format(python=sys.executable, log=str(log)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder, log


def openclaw_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def path_with(folder: Path) -> str:
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
