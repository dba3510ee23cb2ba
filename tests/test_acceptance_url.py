"""A URL as an acceptance check (seed 000: "see the production URL"), in a job's `accept`
and in `verify`, against a real HTTP server on loopback."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support import Home


class Site(ThreadingHTTPServer):
    """Pages by path; POST /posts makes a post whose page is at its link (a tiny CMS)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages: dict[str, tuple[int, str]] = {}
        self.posts: dict[str, dict[str, Any]] = {}

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: Site

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: str, kind: str = "text/html") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/posts/by-key/"):
            key = self.path.removeprefix("/posts/by-key/")
            found = [p for p in self.server.posts.values() if p["key"] == key]
            return self._answer(200 if found else 404, json.dumps(found[0] if found else {}), "application/json")
        status, body = self.server.pages.get(self.path, (404, "not here"))
        self._answer(status, body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        pid = str(len(self.server.posts) + 1)
        post = {"id": pid, "key": self.headers.get("Idempotency-Key"),
                "link": f"{self.server.base}/p/{pid}"}
        self.server.posts[pid] = post
        self.server.pages[f"/p/{pid}"] = (200, f"<h1>{body['title']}</h1>")
        self._answer(201, json.dumps(post), "application/json")


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def job(home: Home, accept: str, extra: str = "") -> None:
    home.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.config(f"""
        [jobs.deploy]
        key = "deploy:{{rev}}"
        params = {{ rev = "slug" }}
        accept = [{accept}]
        {extra}
    """)


def run(home: Home, *cmd: str) -> Any:
    return home.run("run", "deploy", "-p", "rev=abc1234", "--", *(cmd or ("true",)))


def test_a_deploy_is_done_only_when_the_url_answers_the_status_and_text(home: Home, site: Site) -> None:
    """Before the page is live the outcome is not done; once it answers 200 with the text it is,
    and verify passes; when the page later loses the text, verify fails and says why."""
    job(home, f'{{ url = "{site.base}/health", status = 200, contains = "rev abc1234" }}')
    site.pages["/health"] = (503, "starting")
    first = run(home)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "answered 503, not 200" in first.stdout
    site.pages["/health"] = (200, "ok: rev abc1234")
    second = run(home)
    assert second.returncode == 0, second.stdout + second.stderr
    verified = home.run("verify", "deploy:abc1234")
    assert verified.returncode == 0, verified.stdout
    site.pages["/health"] = (200, "ok: rev 0000000")
    after = home.run("verify", "deploy:abc1234", "--json")
    assert after.returncode == 1
    checks = json.loads(after.stdout)["checks"]
    assert any(not c["ok"] and "without the text 'rev abc1234'" in c["detail"] for c in checks), checks


def test_a_regex_and_the_expected_status_are_checked(home: Home, site: Site) -> None:
    """`match` searches the body with a regular expression; `status` may be any status (a 410 for
    a page that must be gone); a redirect is followed to the final answer."""
    job(home, f'{{ url = "{site.base}/version", match = "v[0-9]+\\\\.[0-9]+" }}, '
              f'{{ url = "{site.base}/old", status = 404 }}')
    site.pages["/version"] = (200, "running vX")
    assert run(home).returncode == 1
    site.pages["/version"] = (200, "running v2.14")
    proc = run(home)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_url_can_name_a_field_of_a_step_evidence(home: Home, site: Site, tmp_path: Path) -> None:
    """`{publish.url}`: the link the publish step recorded is the page that must answer."""
    job(home, '{ url = "{publish.url}", contains = "Week 32" }', extra=f"""
        [connectors.cms]
        type = "http"
        url = "{site.base}/posts"
        lookup_url = "{site.base}/posts/by-key/{{key}}"
        evidence_fields = {{ url = "link" }}
        lookup_max_wait = 0.05
    """)
    payload = tmp_path / "post.json"
    payload.write_text(json.dumps({"title": "Week 32"}))
    proc = run(home, sys.executable, "-m", "retrysafe", "step", "publish", "--connector", "cms", "--payload", str(payload))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site.pages["/p/1"] = (200, "<h1>Week 31</h1>")  # someone edited the live post
    after = home.run("verify", "deploy:abc1234")
    assert after.returncode == 1 and f"{site.base}/p/1" in after.stdout


def test_a_placeholder_with_nothing_recorded_fails_the_check_and_says_so(home: Home) -> None:
    job(home, '{ url = "{publish.url}" }')
    proc = run(home)
    assert proc.returncode == 1
    assert "nothing recorded for {publish.url}" in proc.stdout


@pytest.mark.parametrize(("accept", "said"), [
    ('{ url = "ftp://example.org/x" }', "'url' must be an http:// or https:// URL"),
    ('{ url = "http://127.0.0.1:9/", match = "(" }', "'match' is not a regular expression"),
    ('{ url = "http://127.0.0.1:9/", contians = "x" }', "unknown field(s) contians"),
    ('{ url = "http://127.0.0.1:9/", status = 999 }', "'status' must be an HTTP status"),
    ("3", "each 'accept' entry is a command"),
])
def test_a_bad_url_check_is_a_config_error_and_nothing_runs(home: Home, accept: str, said: str) -> None:
    """Exit 2, one line naming the job, and no ledger written."""
    job(home, accept)
    proc = run(home)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("retrysafe: config ") and "job 'deploy': " in proc.stderr
    assert said in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not (home.path / "ledger.sqlite3").exists()
