"""Contract tests: the Stripe connector through the official stripe library against the stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cases_services import STRIPE_ENV, Running, running

import retrysafe
from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.stripe import search_query
from retrysafe.errors import ApprovalRequired, ConnectorError

KEY = "invoice:2026-07/charge"
CHARGE = {
    "amount": 1500,
    "currency": "EUR",
    "payment_method": "pm_card_visa",
    "metadata": {"invoice": "2026-07"},
}


@pytest.fixture
def stripe_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("stripe", monkeypatch) as run:
        yield run


def billing(run: Running, **extra: Any) -> Any:
    return build_connector(
        "billing", {"type": "stripe", "api_key_env": STRIPE_ENV, "api_base": run.base, **extra}
    )


def test_contract_create_is_form_encoded_with_the_key_as_idempotency_key_and_in_metadata(
    stripe_api: Running,
) -> None:
    """One POST /v1/payment_intents, form-encoded, Idempotency-Key = step key, metadata
    carrying the key beside the payload's own; evidence is the intent id."""
    conn = billing(stripe_api)
    evidence = conn.execute(KEY, CHARGE)
    [request] = stripe_api.app.requests
    assert request.form and request.headers["idempotency-key"] == KEY
    assert request.body["metadata"] == {"invoice": "2026-07", "retrysafe_key": KEY}
    assert request.body["currency"] == "eur" and request.body["confirm"] == "true"
    assert stripe_api.app.intents[evidence]["status"] == "succeeded"
    assert conn.lookup(KEY, CHARGE) == Found(evidence) and conn.effect_class == "payment"


def test_contract_search_lag_is_covered_by_the_idempotency_key(stripe_api: Running) -> None:
    """Search may not show a new intent yet (Absent), but the re-send carries the same key
    and Stripe answers the original: still one payment."""
    stripe_api.app.search_lag = 60
    conn = billing(stripe_api)
    stripe_api.app.knob("/v1/payment_intents", "drop")
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, CHARGE)
    assert not isinstance(raised.value, EffectFailed)
    assert conn.lookup(KEY, CHARGE) == ABSENT
    evidence = conn.execute(KEY, CHARGE)
    assert list(stripe_api.app.intents) == [evidence]
    assert stripe_api.app.requests[-1].path == "/v1/payment_intents"


def test_contract_a_declined_card_is_a_failure_and_no_effect_for_the_lookup(stripe_api: Running) -> None:
    """402 card_declined is EffectFailed; the intent left behind moved no money, so the
    lookup says Absent and count says 0."""
    conn = billing(stripe_api)
    with pytest.raises(EffectFailed, match="declined"):
        conn.execute(KEY, {**CHARGE, "payment_method": "pm_card_chargeDeclined"})
    assert conn.lookup(KEY, CHARGE) == ABSENT and conn.count(KEY) == 0


def test_contract_idempotency_conflicts_5xx_and_unconfirmed_intents_are_never_failures(
    stripe_api: Running,
) -> None:
    """The same key with other parameters may hide an earlier charge: unknown, not failed; a
    500 is unknown; an intent awaiting confirmation is Ambiguous for the lookup."""
    conn = billing(stripe_api)
    conn.execute(KEY, CHARGE)
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, {**CHARGE, "amount": 9900})
    assert not isinstance(raised.value, EffectFailed) and "may have charged" in str(raised.value)
    stripe_api.app.knob(
        "/v1/payment_intents", "fail", status=500, body={"error": {"type": "api_error", "message": "boom"}}
    )
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY + "-2", CHARGE)
    assert not isinstance(raised.value, EffectFailed)
    billing(stripe_api, confirm=False).execute(KEY + "-3", CHARGE)
    result = conn.lookup(KEY + "-3", CHARGE)
    assert isinstance(result, Ambiguous) and "awaits confirmation" in result.reason


def test_search_query_escapes_quotes_in_keys() -> None:
    """A key with a quote cannot end the search string early."""
    assert search_query("a'b\\c") == "metadata['retrysafe_key']:'a\\'b\\\\c'"


def test_a_payment_step_waits_for_approval_and_charges_nothing(stripe_api: Running, tmp_path: Path) -> None:
    """The payment class needs an approval record before the first charge."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        '[jobs.invoice]\nkey = "invoice:{month}"\nparams = { month = "month" }\n'
    )
    with pytest.raises(ApprovalRequired), retrysafe.start("invoice", {"month": "2026-07"}, home=home) as run:
        run.effect("charge", connector=billing(stripe_api), payload=CHARGE)
    assert stripe_api.app.intents == {}
