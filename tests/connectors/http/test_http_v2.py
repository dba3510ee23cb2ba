"""The HTTP connector's second set of features, contract-tested against the provider stand-ins:
search lookups (Stripe's search API), form bodies and the key in the body (Stripe's form
encoding), ok:false detection (Slack's Web API), and 2xx-without-id endpoints (Slack webhooks)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cases_services import SLACK_ENV, STRIPE_ENV, Running, running, slack_api

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.errors import ConfigError, ConnectorError, InvalidInput

KEY = "invoice:2026-07/charge"


@pytest.fixture
def stripe_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("stripe", monkeypatch) as run:
        yield run


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("slack", monkeypatch) as run:
        yield run


def http(**config: Any) -> Any:
    return build_connector("api", {"type": "http", **config})


def stripe_search(run: Running, **extra: Any) -> Any:
    config = {
        "url": f"{run.base}/v1/payment_intents",
        "token_env": STRIPE_ENV,
        "body_format": "form",
        "body": {"metadata[retrysafe_key]": "{key}", "payment_method": "pm_card_visa", "confirm": True},
        "lookup_url": f"{run.base}/v1/payment_intents/search?query=metadata['retrysafe_key']:'{{key}}'",
        "lookup_results": "data",
        "lookup_max_wait": 0.05,
    }
    return http(**{**config, **extra})


def test_contract_form_body_with_the_key_templated_and_a_search_lookup_of_0_1_or_more(
    stripe_api: Running,
) -> None:
    """The body goes form-encoded with {key} replaced in the config body; the search lookup
    answers 0 results Absent, 1 Found, 2 Ambiguous."""
    conn = stripe_search(stripe_api)
    assert conn.lookup(KEY, {}) == ABSENT
    evidence = conn.execute(KEY, {"amount": 1500, "currency": "eur"})
    [request] = [r for r in stripe_api.app.requests if r.method == "POST"]
    assert (
        request.form
        and request.body["metadata"] == {"retrysafe_key": KEY}
        and request.body["confirm"] == "true"
    )
    assert conn.lookup(KEY, {}) == Found(evidence) and conn.count(KEY) == 1
    conn.execute(KEY + "-again", {"amount": 1500, "currency": "eur"})
    stripe_api.app.intents[evidence + "-copy"] = {
        **stripe_api.app.intents[evidence],
        "id": evidence + "-copy",
    }
    result = conn.lookup(KEY, {})
    assert isinstance(result, Ambiguous) and "2 effects" in result.reason and conn.count(KEY) == 2


def test_contract_a_search_answering_404_or_no_list_is_ambiguous_not_absent(stripe_api: Running) -> None:
    """Only an answered search proves absence; a 404 (a wrong URL) or a body without the list does not."""
    missing = stripe_search(stripe_api, lookup_url=f"{stripe_api.base}/v1/nowhere/{{key}}")
    assert isinstance(missing.lookup(KEY, {}), Ambiguous)
    no_list = stripe_search(stripe_api, lookup_results="items")
    result = no_list.lookup(KEY, {})
    assert isinstance(result, Ambiguous) and "without a list at 'items'" in result.reason


def test_form_bodies_refuse_nested_values_and_v2_settings_are_checked() -> None:
    """A nested value cannot be form-encoded (InvalidInput before anything is sent); a search
    needs a lookup URL; body_format has two values."""
    conn = http(url="https://api.example/x", body_format="form")
    with pytest.raises(InvalidInput, match="cannot be sent as a form"):
        conn.validate({"meta": {"a": 1}})
    with pytest.raises(ConfigError, match="lookup_results needs a lookup_url"):
        http(url="https://api.example/x", lookup_results="data")
    with pytest.raises(ConfigError, match="must be one of json, form"):
        http(url="https://api.example/x", body_format="xml")


def test_contract_ok_false_in_a_2xx_answer_is_a_definite_failure_naming_the_error(slack: Running) -> None:
    """Slack answers 200 {"ok": false, "error": ...}: with ok_field/error_field that is
    EffectFailed with the error; ok: true gives evidence, and the key reaches the body."""
    conn = http(
        url=f"{slack.base}/api/chat.postMessage",
        token_env=SLACK_ENV,
        idempotency_header="",
        ok_field="ok",
        error_field="error",
        evidence_field="ts",
        body={
            "channel": slack_api.CHANNEL,
            "metadata": {"event_type": "retrysafe_step", "event_payload": {"retrysafe_key": "{key}"}},
        },
    )
    with pytest.raises(EffectFailed, match='error = "no_text"'):
        conn.execute(KEY, {})
    evidence = conn.execute(KEY, {"text": "Week 32 is out"})
    [message] = slack.app.messages()
    assert evidence == message["ts"] and message["metadata"]["event_payload"] == {"retrysafe_key": KEY}


def test_contract_a_declared_2xx_without_id_is_done_and_undeclared_stays_unknown(slack: Running) -> None:
    """A Slack webhook answers "ok": with done_without_id the send is done with evidence that
    says no lookup is possible (verify holds by it); without it, unknown as before."""
    url = slack.base + slack_api.WEBHOOK_PATH
    conn = http(url=url, done_without_id=True)
    evidence = conn.execute(KEY, {"text": "Week 32 is out"})
    assert evidence == "200 from 127.0.0.1 (no id in the answer; no lookup possible)"
    assert conn.verify(KEY, evidence) and isinstance(conn.lookup(KEY, {}), Ambiguous)
    with pytest.raises(ConnectorError, match="without the JSON field 'id'") as raised:
        http(url=url).execute(KEY, {"text": "again"})
    assert not isinstance(raised.value, EffectFailed)
    assert len(slack.app.webhook_posts) == 2
