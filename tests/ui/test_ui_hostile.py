"""The dashboard given what a careless or hostile client sends: bytes that are not
ASCII in a cookie or a form, a token the printed address must carry, a name no
decision can be recorded under. Each is refused as such (never a 500), and the
server keeps answering."""

from __future__ import annotations

import os
import re
import subprocess

import httpx
import pytest
from dashsite import KEY, Server, Site, make_site, start_server, stop_server
from support import Home, can_map_an_unknown_uid


def test_non_ascii_cookie_or_csrf_token_is_refused_not_a_server_error(
        site: Site, server: Server) -> None:
    """A session cookie or a form's CSRF token with bytes that are not ASCII is not
    the right one: 401 and 403, the ledger unchanged, and the next request served."""
    before = site.home.snapshot()
    anonymous = server.client(token=None)
    got = anonymous.get("/", headers={"Cookie": b"retrysafe_session=\xc3\xa9t\xe9"})
    assert got.status_code == 401
    client = server.client()
    for path, form in (("/act/retry", {"key": KEY, "csrf": "été"}),
                       ("/act/resolve", {"key": KEY, "step": "send", "verdict": "absent",
                                         "csrf": "\u00e9" * 64}),
                       ("/verify", {"key": KEY, "csrf": "\u2603"})):
        assert client.post(path, data=form).status_code == 403, path
        assert client.get("/").status_code == 200
    assert site.home.snapshot() == before
    stop_server(server)
    assert "Traceback" not in (server.proc.stderr.read() if server.proc.stderr else "")


def test_the_printed_address_signs_in_whatever_the_token_holds(site: Site) -> None:
    """A token with '#', '&', '+' and '%' is carried by the printed address as it
    is: pasted into a client, it signs in (the '#' would otherwise cut it short)."""
    token = "abcdefgh#ijkl&mnop+q%z"
    proc = site.home.popen("ui", "--bind", "127.0.0.1:0", "--token", token)
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(3))
        address = re.search(r"open (http://\S+)", banner)
        assert address, banner
        with httpx.Client(timeout=30) as client:
            signed = client.get(address.group(1), follow_redirects=True)
            assert signed.status_code == 200, signed.text
            assert "retrysafe_session" in client.cookies
            assert client.get(address.group(1).split("?")[0] + "outcomes").status_code == 200
        wrong = httpx.get(address.group(1).split("%23")[0], timeout=30)
        assert wrong.status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize(("args", "env", "error"), [
    (["--token", "abcdefghijkl mnop"], {}, "--token must be"),
    (["--token", "abcdefghijklmnop\u00e9"], {}, "--token must be"),
    ([b"--token", b"abcdefghijklmnop\xff"], {}, "--token must be"),
    (["--allow-actions", "--name", "alice smith"], {}, "--name 'alice smith'"),
    (["--name", "alice\n"], {}, "--name 'alice\\n'"),
    (["--allow-actions"], {"USER": "bob smith", "LOGNAME": "bob smith"}, "give --name NAME"),
])
def test_a_token_or_name_that_cannot_work_is_one_line_exit_2(
        site: Site, args: list[str | bytes], env: dict[str, str], error: str) -> None:
    """A token a browser or header would not carry unchanged, or a name no decision
    can be recorded under (every form would be refused): one line, exit 2, no server."""
    argv = [os.fsencode(a) for a in [*site.home.cmd("ui", "--bind", "127.0.0.1:0"), *args]]
    proc = subprocess.run(argv, env={**site.home.env, **env}, capture_output=True, timeout=60,
                          check=False)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, stderr
    assert error in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert b"listening" not in proc.stdout


@pytest.mark.skipif(not can_map_an_unknown_uid(), reason="needs unshare -U --map-user")
def test_a_uid_with_no_user_name_still_serves(site: Site) -> None:
    """A container's arbitrary uid (no passwd entry, no USER): the dashboard starts,
    decisions recorded as ui:uidN, instead of an internal error."""
    env = {k: v for k, v in site.home.env.items()
           if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    proc = subprocess.Popen(["unshare", "-U", "--map-user=4242", "--map-group=4242",
                             *site.home.cmd("ui", "--bind", "127.0.0.1:0", "--allow-actions")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline() + proc.stdout.readline()
        assert "as ui:uid4242" in line, line + (proc.stderr.read() if proc.poll() is not None
                                               and proc.stderr else "")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_nul_in_the_address_is_refused_on_either_ledger(any_home: Home) -> None:
    """A NUL in a key, a job or a cursor: 400 with one line, on SQLite and on
    PostgreSQL (which cannot even be asked about it), and the server keeps serving."""
    make_site(any_home)
    server = start_server(any_home)
    try:
        client = server.client()
        for path in ("/outcome?key=report%00", "/outcomes?job=%00", "/outcomes?after=1%3A%00",
                     "/?after=1%3Ax%00"):
            got = client.get(path)
            assert got.status_code == 400 and "NUL" in got.text, (path, got.text[:300])
        assert client.get("/outcome", params={"key": KEY}).status_code == 200
    finally:
        stop_server(server)
    assert "Traceback" not in (server.proc.stderr.read() if server.proc.stderr else "")


def test_a_cursor_no_page_can_have_opens_the_first_page(any_home: Home) -> None:
    """A page cursor is ``TIME:ID`` (schema 12). One naming an id no database integer
    holds, a time that is not a number, or a key (a link saved from an older version)
    opens the first page: 200, on SQLite and PostgreSQL, and the server keeps serving."""
    make_site(any_home)
    server = start_server(any_home)
    try:
        client = server.client()
        first = client.get("/outcomes").text
        for after in ("1:99999999999999999999999", "1:-99999999999999999999999", "nan:1",
                      "inf:1", "1796400000.5:report:2026-W32", "x:y", "1e999:1"):
            for page in ("/outcomes", "/"):
                got = client.get(page, params={"after": after})
                assert got.status_code == 200, (page, after, got.text[:300])
            # the same outcomes as the first page (only its link back to the newest differs)
            shown = client.get("/outcomes", params={"after": after}).text
            assert shown.split('<nav class="pages">')[0] == first.split('<nav class="pages">')[0]
    finally:
        stop_server(server)
    assert "Traceback" not in (server.proc.stderr.read() if server.proc.stderr else "")
