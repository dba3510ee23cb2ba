"""Webhooks that misbehave: one that redirects, one that answers with a body that
never ends, one that trickles its answer. A notification is recorded as sent only
when the receiver took the message, and a try never outlasts the channel's
timeout (a run's close-out waits for it)."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from notifyjobs import configure
from support import Home


class Hostile:
    """An HTTP server on loopback that answers by path: ``/redirect`` (302 to ``/hook``),
    ``/endless`` (200 with a body that never ends), ``/trickle`` (its status line a
    byte every half second), anything else 200. It records each request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hostile.requests.append((self.command, self.path, body))
                with contextlib.suppress(OSError):  # the client hung up
                    self.answer()

            do_GET = do_POST  # noqa: N815

            def answer(self) -> None:
                if self.path.startswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", "/hook")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/endless":
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 40))
                    self.end_headers()
                    chunk = b"x" * (1 << 20)
                    while not hostile.stopping.is_set():
                        self.wfile.write(chunk)
                elif self.path == "/trickle":
                    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 200:
                        if hostile.stopping.is_set():
                            return
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.5)
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    yield server
    server.stop()


def hook(url: str, timeout: int = 3) -> str:
    return f'[notify]\ntimeout = {timeout}\n[notify.channels.hook]\ntype = "webhook"\nurl = "{url}"\n'


def blocked_run(home: Home, timeout: float = 120) -> tuple[int, str]:
    proc = home.run("run", "pay", "-p", "n=1", "--",
                    *home.cmd("step", "charge", "--class", "payment", "--", "true"), timeout=timeout)
    return proc.returncode, proc.stderr


def listed(home: Home) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(home.run("notify", "ls", "--json").stdout)
    return rows


def test_a_redirected_webhook_is_not_recorded_as_sent(home: Home, hostile: Hostile) -> None:
    """Following a 302 turns the POST into a GET without the message, which the
    receiver answers 200: the message would be lost and recorded as sent. The
    redirect is refused instead, saying so, and the notification stays pending."""
    configure(home, hook(f"{hostile.url}/redirect?token=s3cret"))
    code, err = blocked_run(home)
    assert code == 3, err
    assert [(m, p) for m, p, _ in hostile.requests] == [("POST", "/redirect?token=s3cret")]
    [row] = listed(home)
    assert row["state"] == "pending"
    assert "HTTP 302" in row["last_error"] and "redirects" in row["last_error"]
    assert "s3cret" not in row["last_error"] and "s3cret" not in err
    test = home.run("notify", "test")
    assert test.returncode == 1 and "HTTP 302" in test.stdout, test.stdout + test.stderr
    assert all(m == "POST" for m, _, _ in hostile.requests)


def _address_space_limit() -> None:
    limit = 2 << 30  # the old client read the whole body into memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_body_that_never_ends_is_not_read(home: Home, hostile: Hostile) -> None:
    """The receiver said 200 and then sends a body without end: the message was taken,
    the body is not read (not into memory, not until a timeout)."""
    configure(home, hook(f"{hostile.url}/endless"))
    proc = subprocess.run(home.cmd("notify", "test"), env=home.env, capture_output=True,
                          text=True, timeout=60, check=False, preexec_fn=_address_space_limit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok ")


def test_a_webhook_that_trickles_its_answer_does_not_hold_the_run(home: Home,
                                                                  hostile: Hostile) -> None:
    """Each byte of the answer comes before the read timeout, but the whole would take
    minutes: the try ends at the channel's timeout, the run exits 3 at once, and the
    notification stays pending (tried again later, within its claim)."""
    configure(home, hook(f"{hostile.url}/trickle", timeout=2))
    code, err = blocked_run(home, timeout=60)
    assert code == 3, err
    [row] = listed(home)
    assert row["state"] == "pending" and "no answer within 2s" in row["last_error"], row
    assert "no answer within 2s" in err
