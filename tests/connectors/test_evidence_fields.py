"""Evidence with named fields, end to end: a connector's fields reach the ledger, ``status``
and ``status --json``; ``step`` still prints the one-line value; evidence stored as plain
text before fields existed reads back exactly as before."""

from __future__ import annotations

import json
import os

import pytest
from live_systems import TOKEN_ENV, Api
from support import Home

from retrysafe.evidence import MARKER, Evidence, fields_of, from_column, to_column

KEY = "pub:2026-W32"


def _config(home: Home, api: Api) -> None:
    url = f"{api.base}/plain/items"
    home.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.config(f"""
        [jobs.pub]
        key = "pub:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.api]
        type = "http"
        url = "{url}"
        token_env = "{TOKEN_ENV}"
        lookup_url = "{url}/by-key/{{key}}"
        lookup_max_wait = 0.05
        evidence_fields = {{ stored_key = "data.key" }}
    """)


def _run_one_effect(home: Home, api: Api) -> str:
    _config(home, api)
    (home.path / "post.json").write_text(json.dumps({"title": "hello"}))
    script = home.path / "job.sh"
    script.write_text(f"#!/bin/sh\nretrysafe step publish --connector api --payload {home.path}/post.json\n")
    script.chmod(0o755)
    env = {"PATH": f"{os.path.dirname(home.cmd()[0])}:{home.env['PATH']}", TOKEN_ENV: os.environ[TOKEN_ENV]}
    proc = home.run("run", "pub", "-p", "week=2026-W32", "--", str(script), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_fields_are_shown_by_status_and_listed_in_its_json(home: Home, api: Api) -> None:
    """The HTTP connector's declared fields (and its id) are in status and status --json;
    the job's own output (the step's stdout) is the plain value, as before."""
    out = _run_one_effect(home, api)
    [resource] = api.resources("plain")
    assert resource["id"] in out and "{" not in out  # the printed evidence is the bare value
    data = json.loads(home.run("status", KEY, "--json").stdout)
    [step] = data["steps"]
    assert step["evidence"] == resource["id"]
    assert step["evidence_fields"] == {"id": resource["id"], "stored_key": f"{KEY}/publish"}
    text = home.run("status", KEY).stdout
    assert f"publish.id = {resource['id']}" in text
    assert f"publish.stored_key = {KEY}/publish" in text


def test_plain_evidence_written_before_fields_existed_reads_as_before(home: Home, api: Api) -> None:
    """A step whose column holds plain text (as every ledger did) shows it unchanged and no fields."""
    _run_one_effect(home, api)
    with home.open_ledger() as book:
        book.backend.execute("UPDATE rs_steps SET evidence = ? WHERE outcome_key = ?",
                             ('{"id": "legacy-7"}', KEY))
    data = json.loads(home.run("status", KEY, "--json").stdout)
    assert data["steps"][0]["evidence"] == '{"id": "legacy-7"}'
    assert data["steps"][0]["evidence_fields"] == {}
    assert "publish." not in home.run("status", KEY).stdout


@pytest.mark.parametrize("value", ["plain", "", '{"id": 1}', MARKER + '"x","fields":{}}', "ünï 🚀"])
def test_the_column_reads_back_every_value_unchanged(value: str) -> None:
    """Plain values are stored as they are; one that looks like stored fields is wrapped,
    so nothing reads back differently from what was written."""
    assert from_column(to_column(value)) == value
    assert fields_of(from_column(to_column(value))) == {}
    if not value.startswith(MARKER):
        assert to_column(value) == value


def test_fields_survive_the_column_and_empty_ones_are_left_out() -> None:
    """Named fields round-trip through the text column; None and '' fields are dropped."""
    e = Evidence("42 https://blog.example/?p=42", id=42, url="https://blog.example/?p=42", slug=None, x="")
    back = from_column(to_column(e))
    assert back == e and fields_of(back) == {"id": 42, "url": "https://blog.example/?p=42"}
