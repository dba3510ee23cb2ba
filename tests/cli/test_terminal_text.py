"""Text a human or an agent wrote (a reason, evidence, a note) is shown as one line on a
terminal: line breaks cannot split a table row or an error line, and an escape sequence or
a bidirectional override is shown escaped, never sent to the terminal."""

from __future__ import annotations

import json

import pytest
from support import Home

from retrysafe import Ambiguous
from retrysafe.engine import Engine
from retrysafe.errors import StepBlocked

KEY = "rep:1"
# a line break, an ANSI colour, a cursor move and a right-to-left override
NASTY = "line one\nline two \x1b[31mred\x1b[2J cleared \u202eevil"


def blocked(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config('[jobs.rep]\nkey = "rep:{n}"\nparams = { n = "int" }\n')
    with Engine.open(home.path) as engine:
        first = engine.begin("rep", {"n": "1"})
        assert first.run is not None
        first.run.intend("send", "message")  # then the answer is lost
        first.run.close(success=False, reason=NASTY)
        second = engine.begin("rep", {"n": "1"})
        assert second.run is not None
        with pytest.raises(StepBlocked):  # the lookup cannot tell: a person must
            second.run.effect("send", "message", execute=lambda _k: "never",
                              lookup=lambda _k: Ambiguous(NASTY))
        second.run.close(success=False, reason="blocked")
    return home


def assert_shown_safely(text: str, whole: bool = True) -> None:
    assert "\x1b" not in text and "\u202e" not in text, repr(text)
    if whole:  # (ls cuts its reason column short)
        assert "\\x1b[31mred" in text and "\\u202eevil" in text, text


def test_reasons_are_one_line_in_every_listing_and_error(home: Home) -> None:
    blocked(home)
    for args in (("status", KEY), ("history", KEY), ("ls",), ("needs-attention",)):
        shown = home.run(*args)
        assert shown.returncode == 0, shown.stderr
        assert_shown_safely(shown.stdout, whole=args[0] != "ls")
        # no row was split: every line that holds the reason holds both of its lines
        assert all("line two" in ln for ln in shown.stdout.splitlines() if "line one" in ln)
        assert not any(ln.startswith("line two") for ln in shown.stdout.splitlines())
    again = home.run("run", "rep", "-p", "n=1", "--", "true")
    assert again.returncode == 3, again.stdout + again.stderr
    said = again.stdout + again.stderr
    assert_shown_safely(said)
    assert not any(ln.startswith("line two") for ln in said.splitlines()), said


def test_json_keeps_the_text_as_it_was_written(home: Home) -> None:
    """Only the terminal view is escaped: --json gives the reason exactly."""
    blocked(home)
    status = json.loads(home.run("status", KEY, "--json").stdout)
    assert [s["reason"] for s in status["steps"]] == [f"lookup is ambiguous: {NASTY}"]
