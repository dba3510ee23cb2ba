"""The dashboard end to end in headless Chromium (Debian's, driven by Playwright):
an operator signs in with the token, finds the outcome a real crash blocked,
resolves it on its page, and a re-run finishes it without sending again."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest
from dashsite import KEY, TOKEN, Server, Site

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

# Every check of what a page shows goes through expect(...), which retries until it
# holds (or WAIT runs out): a click that navigates returns once the new document has
# committed, often before its body has arrived and been parsed, so an immediate
# count()/inner_text() can read a page that is still loading.
WAIT = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium for the module."""
    if not shutil.which("chromium"):
        pytest.skip("no chromium on PATH")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


def test_operator_resolves_a_crash_blocked_outcome_in_the_browser_and_a_rerun_finishes_it(
        browser: object, site: Site, server: Server) -> None:
    """Sign in with the token; the landing page lists the blocked outcome with its reason
    and settle command; resolving it found (with evidence) on its page is recorded as
    ui:NAME; the re-run is done and the message was sent once."""
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        page.goto(server.url + "/")
        assert "Sign in" in page.content()  # nothing is shown without the token
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        card = page.locator("li.card", has_text=KEY)
        expect(card).to_have_count(1, timeout=WAIT)
        expect(card).to_contain_text("no lookup to tell", timeout=WAIT)
        expect(card).to_contain_text(f"retrysafe resolve {KEY} send", timeout=WAIT)
        page.wait_for_load_state("load")  # the whole list, before saying what is not on it
        assert "report:2026-W31" not in page.content()  # done: not waiting for anyone

        card.locator("a.button").click()
        page.wait_for_url("**/outcome?key=*")
        expect(page.locator("h1")).to_contain_text("blocked", timeout=WAIT)
        form = page.locator("form.resolve")
        form.locator("input[value=found]").check()
        form.locator("input[name=evidence]").fill("msg-4711")
        form.locator("input[name=note]").fill("seen in the sent folder")
        form.locator("input[name=who]").fill("alice")
        form.locator("button[type=submit]").click()
        expect(page.locator("p.flash")).to_contain_text("done: step send", timeout=WAIT)
        expect(page.locator("ol.timeline")).to_contain_text("ui:alice", timeout=WAIT)

        page.goto(server.url + "/")
        # the landing page rendered (not a blank or half-loaded one), and nothing on it waits
        expect(page.locator("p.calm")).to_have_text("Nothing waits for a human.", timeout=WAIT)
        expect(page.locator("li.card")).to_have_count(0, timeout=WAIT)
    finally:
        page.close()

    history = json.loads(site.home.run("history", KEY, "--json").stdout)
    assert any(e["actor"] == "ui:alice" and e["to_state"] == "done" for e in history)
    rerun = site.run("2026-W32")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    status = json.loads(site.home.run("status", KEY, "--json").stdout)
    assert status["outcome"]["state"] == "done"
    assert status["steps"][0]["evidence"] == "msg-4711"
    assert site.sends() == 1  # the crash's send was the only one


def test_verify_button_shows_the_result_in_place(browser: object, site: Site, server: Server) -> None:
    """On a done outcome's page, Verify (htmx) fills in the checks without leaving the page."""
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        page.goto(f"{server.url}/outcome?key=report%3A2026-W31&token={TOKEN}")
        assert "token=" not in page.url  # the token leaves the address bar at once
        page.click("text=Verify now")
        # exactly "verified": "NOT verified" must not pass
        expect(page.locator("#verify-result .verify b")).to_have_text("verified", timeout=WAIT)
        assert page.url.endswith("/outcome?key=report%3A2026-W31")
    finally:
        page.close()
