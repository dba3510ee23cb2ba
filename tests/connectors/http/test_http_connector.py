"""The HTTP connector against a real API process on loopback."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.http import HttpConnector
from retrysafe.errors import ConfigError, ConnectorError, InvalidInput

KEY = "weekly-report:2026-W32/notify"
BODY = {"title": "Weekly report"}


def http(config: dict[str, Any]) -> HttpConnector:
    conn = build_connector("crm", {"type": "http", **config})
    assert isinstance(conn, HttpConnector)
    return conn


def test_post_carries_the_step_key_and_returns_the_provider_id(api: Any) -> None:
    """The normal effect: one POST with Idempotency-Key = step key; evidence is the new id."""
    conn = http(api.config("plain"))
    evidence = conn.execute(KEY, BODY)
    [created] = api.resources("plain")
    assert evidence == created["id"]
    assert created["key"] == KEY
    assert created["body"] == BODY
    assert conn.lookup(KEY, BODY) == Found(evidence)
    assert conn.lookup("weekly-report:2026-W33/notify", BODY) == ABSENT
    assert conn.effect_class == "publish" and conn.authoritative


def test_evidence_from_a_dotted_json_field_or_a_header(api: Any) -> None:
    """evidence_field walks into nested JSON; evidence_header reads a response header."""
    nested = http(api.config("plain", evidence_field="data.id"))
    assert nested.execute(KEY + "-a", BODY) == api.resources("plain", KEY + "-a")[0]["id"]
    located = http(api.config("plain", evidence_header="Location"))
    evidence = located.execute(KEY + "-b", BODY)
    assert evidence == f"/plain/items/{api.resources('plain', KEY + '-b')[0]['id']}"


def test_idempotent_api_without_lookup_resends_and_gets_the_same_resource(api: Any, spawn: Any) -> None:
    """With idempotent = true and no lookup URL, re-sending the same key is the lookup."""
    config = api.config("idem", lookup_url=None, idempotent=True)
    code, _ = spawn("http", config, KEY, BODY, kill_after_execute=True)
    assert code == -signal.SIGKILL
    [first] = api.resources("idem")

    code, out = spawn("http", config, KEY, BODY)
    assert out == {"executed": first["id"]}
    assert len(api.resources("idem")) == 1
    assert http(config).authoritative


def test_dropped_connection_after_create_is_unknown_then_found(api: Any) -> None:
    """A connection cut after the server acted is not a failure: lookup settles it."""
    conn = http(api.config("plain"))
    api.knob("plain", "drop_after_create")
    with pytest.raises(ConnectorError) as info:
        conn.execute(KEY, BODY)
    assert not isinstance(info.value, EffectFailed)
    assert "may have been applied" in str(info.value)
    assert conn.lookup(KEY, BODY) == Found(api.resources("plain", KEY)[0]["id"])
    assert len(api.resources("plain")) == 1


def test_timeout_after_create_is_unknown_then_found(api: Any) -> None:
    """A read timeout leaves the step unknown; the lookup proves the resource exists."""
    conn = http(api.config("plain", timeout=0.3))
    api.knob("plain", "sleep_after_create", seconds=1.0)
    with pytest.raises(ConnectorError) as info:
        conn.execute(KEY, BODY)
    assert not isinstance(info.value, EffectFailed)
    assert isinstance(conn.lookup(KEY, BODY), Found)


@pytest.mark.parametrize("status", [409, 429, 500, 503])
def test_conflict_throttle_and_server_errors_are_unknown(api: Any, status: int) -> None:
    """409/429/5xx do not prove nothing happened: execute raises 'unknown', never 'failed'."""
    conn = http(api.config("plain"))
    api.knob("plain", "status_after_create", status=status)
    with pytest.raises(ConnectorError) as info:
        conn.execute(KEY, BODY)
    assert not isinstance(info.value, EffectFailed)
    assert str(status) in str(info.value)
    assert isinstance(conn.lookup(KEY, BODY), Found)


def test_400_is_a_definite_failure_and_the_fixed_request_succeeds(api: Any) -> None:
    """A 400 means the server refused: EffectFailed with its reason, nothing created."""
    conn = http(api.config("plain"))
    with pytest.raises(EffectFailed) as info:
        conn.execute(KEY, {"summary": "no title"})
    assert "400" in str(info.value) and "title is required" in str(info.value)
    assert api.resources("plain") == []
    assert conn.lookup(KEY, {}) == ABSENT

    evidence = conn.execute(KEY, BODY)
    assert [r["id"] for r in api.resources("plain")] == [evidence]


def test_without_lookup_url_a_plain_api_is_ambiguous_with_what_to_check(api: Any) -> None:
    """No lookup and no idempotency: the connector says it cannot know, and where to look."""
    conn = http(api.config("plain", lookup_url=None))
    assert not conn.authoritative
    result = conn.lookup(KEY, BODY)
    assert isinstance(result, Ambiguous)
    assert "no lookup_url" in result.reason
    assert "127.0.0.1" in result.reason and KEY in result.reason
    assert "Idempotency-Key" in result.reason


def test_lookup_answer_without_the_evidence_field_is_ambiguous(api: Any) -> None:
    """A 200 lookup that lacks the configured field is not treated as proof."""
    conn = http(api.config("plain", lookup_evidence_field="meta.url"))
    conn.execute(KEY, BODY)
    result = conn.lookup(KEY, BODY)
    assert isinstance(result, Ambiguous) and "meta.url" in result.reason


def test_lookup_retries_transient_answers_with_backoff_then_gives_up(api: Any) -> None:
    """Lookup GETs retry 5xx/429 a bounded number of times, then report 'cannot tell now'."""
    conn = http(api.config("plain", lookup_attempts=3))
    evidence = conn.execute(KEY, BODY)
    api.knob("plain", "lookup_status", status=503)
    api.knob("plain", "lookup_status", status=429)
    assert conn.lookup(KEY, BODY) == Found(evidence)

    for _ in range(3):
        api.knob("plain", "lookup_status", status=502)
    started = time.monotonic()
    with pytest.raises(ConnectorError) as info:
        conn.lookup(KEY, BODY)
    assert "502" in str(info.value) and "3 tries" in str(info.value)
    assert time.monotonic() - started < 5


def test_lookup_answering_401_is_ambiguous(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected lookup status (here 401, wrong token) blocks with a reason, not Absent."""
    monkeypatch.setenv("RS_TEST_API_TOKEN", "wrong")
    result = http(api.config("plain")).lookup(KEY, BODY)
    assert isinstance(result, Ambiguous) and "401" in result.reason


def test_wrong_token_is_a_definite_failure_that_never_shows_the_token(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """401 is definite; the message names the status, never the secret sent."""
    monkeypatch.setenv("RS_TEST_API_TOKEN", "wrong-secret-value")
    conn = http(api.config("plain"))
    with pytest.raises(EffectFailed) as info:
        conn.execute(KEY, BODY)
    assert "401" in str(info.value)
    assert "wrong-secret-value" not in str(info.value) and "wrong-secret-value" not in repr(conn)
    assert api.resources("plain") == []


def test_bad_configuration_is_rejected_before_any_request(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing or malformed URL, unknown fields, or an unset token variable: ConfigError."""
    with pytest.raises(ConfigError, match="'url' is required"):
        http({})
    with pytest.raises(ConfigError, match="http:// or https://"):
        http({"url": "ftp://127.0.0.1/items"})
    with pytest.raises(ConfigError, match=r"not a valid URL|with a host"):
        http({"url": "http://[::1"})
    with pytest.raises(ConfigError, match="unknown field"):
        http({"url": "http://127.0.0.1/x", "evidence_feild": "id"})
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        http(api.config("plain")).validate({"when": object()})
    http(api.config("plain")).validate(BODY)
    monkeypatch.delenv("RS_TEST_API_TOKEN")
    with pytest.raises(ConfigError, match="RS_TEST_API_TOKEN is not set"):
        http(api.config("plain"))


def test_unreachable_server_is_a_definite_failure(api: Any) -> None:
    """Connection refused means no request left: EffectFailed naming the host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = http({"url": f"http://127.0.0.1:{port}/plain/items", "timeout": 2})
    with pytest.raises(EffectFailed, match=r"cannot reach 127\.0\.0\.1.*nothing was sent"):
        conn.execute(KEY, BODY)


def test_keys_with_slashes_and_non_ascii_reach_the_api_and_its_lookup(api: Any) -> None:
    """The key is URL-encoded in the lookup path; non-ASCII keys are %-encoded in the header."""
    conn = http(api.config("plain"))
    key = "rapport:2026-W32/publier/élan"
    evidence = conn.execute(key, BODY)
    [created] = api.resources("plain")
    assert created["key"] == "rapport:2026-W32/publier/%C3%A9lan"
    assert conn.lookup(key, BODY) == Found(evidence)

    spaced = "report:2026-W32/notify/item 7?x=1"
    assert conn.lookup(spaced, BODY) == ABSENT
    other = conn.execute(spaced, BODY)
    assert conn.lookup(spaced, BODY) == Found(other)
    assert api.resources("plain", spaced)[0]["id"] == other


def test_cli_run_killed_after_the_post_then_rerun_finds_it(api: Any, home: Any) -> None:
    """End to end, API ignoring keys: SIGKILL after the POST; the re-run looks; one resource."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.crm]
        type = "http"
        url = "{api.base}/plain/items"
        lookup_url = "{api.base}/plain/items/by-key/{{key}}"
        token_env = "RS_TEST_API_TOKEN"
        """
    )
    inner = (
        f"{shlex.quote(sys.executable)} -m retrysafe step notify --connector crm "
        "--with title='Week 32 is out'"
    )
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    env = {"RS_TEST_API_TOKEN": os.environ["RS_TEST_API_TOKEN"]}
    first = home.run(*run, env={**env, "RETRYSAFE_CRASH_AT": "notify:after-execute"})
    assert first.returncode != 0, first.stdout + first.stderr
    [created] = api.resources("plain")
    assert created["key"] == "weekly:2026-W32/notify"
    assert created["body"] == {"title": "Week 32 is out"}

    second = home.run(*run, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert created["id"] in second.stdout
    assert api.resources("plain") == [created]
    assert os.environ["RS_TEST_API_TOKEN"] not in first.stdout + first.stderr + second.stdout
