"""Who may look and who may act: the token, the CSRF token of each form, --allow-actions.
Each refused request leaves the ledger and the home exactly as they were."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from dashsite import KEY, TOKEN, Server, Site, start_server, stop_server
from support import Home


def csrf_of(server: Server, action: str) -> str:
    page = server.client().get("/outcome", params={"key": KEY}).text
    found = re.search(rf'action="/act/{action}".*?name="csrf" value="([0-9a-f]+)"', page, re.S)
    assert found, page
    return found.group(1)


def test_requests_without_the_token_or_with_a_wrong_csrf_token_change_nothing(
        site: Site, server: Server) -> None:
    """No token: 401 (pages and actions); a wrong, missing or other form's CSRF token: 403.
    The ledger and the home are byte for byte what they were."""
    good = csrf_of(server, "resolve")
    form = {"key": KEY, "step": "send", "verdict": "absent", "csrf": good}
    before = site.home.snapshot()
    anonymous = server.client(token=None)
    assert anonymous.get("/").status_code == 401
    assert anonymous.get("/metrics").status_code == 401
    assert anonymous.post("/act/resolve", data=form).status_code == 401
    assert server.client(token="wrong-token-0123456789").post("/act/resolve", data=form).status_code == 401
    client = server.client()
    assert client.post("/act/resolve", data={**form, "csrf": "0" * 64}).status_code == 403
    assert client.post("/act/resolve", data={k: v for k, v in form.items() if k != "csrf"}).status_code == 403
    # a CSRF token is bound to its form: the resolve form's cannot retry, nor resolve another step
    assert client.post("/act/retry", data={"key": KEY, "csrf": good}).status_code == 403
    assert client.post("/act/resolve", data={**form, "step": "other"}).status_code == 403
    assert site.home.snapshot() == before
    assert json.loads(site.home.run("status", KEY, "--json").stdout)["outcome"]["state"] == "blocked"


def test_a_read_only_dashboard_refuses_every_action_even_with_token_and_csrf(site: Site) -> None:
    """Without --allow-actions the pages show no forms and /act answers 403 whatever it is given."""
    server = start_server(site.home)
    try:
        assert "read-only" in server.banner[1]
        page = server.client().get("/outcome", params={"key": KEY}).text
        assert "/act/" not in page and "--allow-actions" in page
        before = site.home.snapshot()
        for action in ("resolve", "approve", "retry", "break-lease"):
            got = server.client().post(f"/act/{action}", data={"key": KEY, "step": "send",
                                                                 "verdict": "absent", "csrf": "x"})
            assert got.status_code == 403 and "--allow-actions" in got.text
        assert site.home.snapshot() == before
    finally:
        stop_server(server)


def test_a_refused_decision_is_shown_on_the_page_and_changes_nothing(site: Site, server: Server) -> None:
    """'found' without evidence is refused by the same rule as the CLI, as one line."""
    before = site.home.snapshot()
    got = server.client().post("/act/resolve", data={"key": KEY, "step": "send", "verdict": "found",
                                                    "evidence": " ", "csrf": csrf_of(server, "resolve")})
    assert got.status_code == 400 and "found needs the evidence" in got.text
    assert site.home.snapshot() == before


def test_resolve_absent_through_the_form_lets_the_rerun_send(site: Site, server: Server) -> None:
    """'absent' (a human checked: it was not sent) through the page, recorded with the
    server's --name; the re-run executes the step once more."""
    got = server.client().post("/act/resolve", data={"key": KEY, "step": "send", "verdict": "absent",
                                                    "csrf": csrf_of(server, "resolve")})
    assert got.status_code == 303
    events = json.loads(site.home.run("history", KEY, "--json").stdout)
    assert any(e["actor"] == "ui:tester" and e["to_state"] == "planned" for e in events)
    assert site.run("2026-W32").returncode == 0
    assert site.sends() == 2


def test_the_banner_says_where_it_listens_and_warns_off_loopback(site: Site) -> None:
    """Loopback by default; a bind to every address prints a warning."""
    server = start_server(site.home)
    stop_server(server)
    assert server.url.startswith("http://127.0.0.1:")
    proc = site.home.popen("ui", "--bind", "0.0.0.0:0", "--token", TOKEN)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "warning: 0.0.0.0 is not loopback" in line
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("args", [["--bind", "nowhere"], ["--bind", "127.0.0.1:99999"],
                                  ["--token", "short"]])
def test_bad_options_are_one_line_and_exit_2(home: Home, args: list[str]) -> None:
    """A bad --bind or a short --token: one line, exit 2, nothing started."""
    home.path.mkdir()
    home.config("")
    got = home.run("ui", *args)
    assert got.returncode == 2 and got.stderr.startswith("retrysafe: ") and got.stderr.count("\n") == 1


def test_without_the_ui_extra_ui_and_metrics_say_what_to_install(home: Home) -> None:
    """With the extra's packages unavailable: one line naming retrysafe[ui], exit 2."""
    hide = ("import sys; sys.modules['starlette'] = None; sys.argv[0] = 'retrysafe';"
            " from retrysafe.cli import main; main(sys.argv[1:])")
    for command in ("ui", "metrics"):
        got = subprocess.run([sys.executable, "-c", hide, command], env=home.env, capture_output=True,
                             text=True, timeout=60, check=False)
        assert got.returncode == 2
        assert got.stderr.strip().count("\n") == 0 and "retrysafe[ui]" in got.stderr
