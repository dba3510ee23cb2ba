"""The HTTP connector against a hostile loopback server: one that answers a byte at a time."""

from __future__ import annotations

import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from retrysafe.connectors import EffectFailed, build_connector
from retrysafe.connectors.http import HttpConnector
from retrysafe.errors import ConnectorError

BODY = b'{"id": "slow-1"}' + b" " * 60


@pytest.fixture
def trickle() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server that answers every request 200, one byte every 0.1 s (about 8 s)."""
    server = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            requests.append(data)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            conn.sendall(head % len(BODY))
            for byte in BODY:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.1)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", requests
    finally:
        stop.set()
        server.close()


def test_a_server_answering_a_byte_at_a_time_is_cut_off_at_the_timeout(
    trickle: tuple[str, list[bytes]],
) -> None:
    """timeout is for the whole answer: the effect is unknown after it, the lookup gives up."""
    base, requests = trickle
    conn = build_connector("crm", {"type": "http", "url": f"{base}/items", "timeout": 0.5,
                                   "lookup_url": f"{base}/by-key/{{key}}",
                                   "lookup_attempts": 2, "lookup_max_wait": 0.05})
    assert isinstance(conn, HttpConnector)
    started = time.monotonic()
    with pytest.raises(ConnectorError) as info:
        conn.execute("weekly:2026-W32/notify", {"title": "t"})
    assert not isinstance(info.value, EffectFailed)
    assert "may have been applied" in str(info.value)
    assert time.monotonic() - started < 3
    assert len(requests) == 1

    started = time.monotonic()
    with pytest.raises(ConnectorError, match="after 2 tries"):
        conn.lookup("weekly:2026-W32/notify", {})
    assert time.monotonic() - started < 4


def test_cli_a_plain_webhook_is_sent_then_a_slow_answer_is_unknown_and_never_resent(
    trickle: tuple[str, list[bytes]], home: Any
) -> None:
    """Without lookup_url the first run sends (it used to block before ever sending); the
    slow answer is cut at the timeout and leaves the step unknown; the next run asks a human."""
    base, requests = trickle
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.crm]
        type = "http"
        url = "{base}/items"
        timeout = 0.5
        """
    )
    inner = f"{shlex.quote(sys.executable)} -m retrysafe step notify --connector crm --with title=t"
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    started = time.monotonic()
    first = home.run(*run, timeout=60)
    assert time.monotonic() - started < 6, first.stdout + first.stderr
    assert first.returncode == 1, first.stdout + first.stderr
    assert first.stdout.startswith("unknown:") and "Traceback" not in first.stderr
    assert len(requests) == 1 and b"Idempotency-Key: weekly:2026-W32/notify" in requests[0]

    second = home.run(*run, timeout=60)
    assert second.returncode == 3, second.stdout + second.stderr
    assert "lookup is ambiguous" in second.stdout
    assert len(requests) == 1
