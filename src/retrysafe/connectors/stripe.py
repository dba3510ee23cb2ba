"""Stripe: one PaymentIntent per step key, through the official ``stripe`` library.

Class ``payment``: the engine asks for an approval before the first charge.
Every create carries the step key twice: as the ``Idempotency-Key`` header
(Stripe answers a repeated request with the original result for about 24 hours)
and in ``metadata[retrysafe_key]``. The lookup searches PaymentIntents by that
metadata (``/v1/payment_intents/search``). Search lags writes by up to about a
minute, but in that minute the idempotency key still holds, so "not found"
followed by a re-send with the same key never charges twice; past 24 hours
the search has long caught up, and the ledger never re-sends a step it
recorded done.

A card decline (402) or a refused request (400, 401, 403, 404) is a definite
failure; an ``idempotency_error`` (the key was used with other parameters), a
429, a 5xx or a lost answer leave the step unknown for the lookup.

Example config::

    [connectors.billing]
    type = "stripe"
    api_key_env = "STRIPE_SECRET_KEY"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import config_bool, env_secret, number, reject_unknown, required_str, string
from ._web import check_url, header_value, key_digest, one_match, refused
from .base import Ambiguous, ConnectorBase, EffectFailed, Evidence, LookupResult, Payload

try:
    import stripe
except ImportError as exc:  # an optional dependency
    raise ConfigError(f"the stripe connector needs {exc.name}: pip install 'retrysafe[stripe]'") from None

__all__ = ["StripeConnector", "search_query"]

API_BASE = "https://api.stripe.com"
KEY_FIELD = "retrysafe_key"
_FIELDS = frozenset({"type", "api_key_env", "api_base", "confirm", "timeout"})
_PAYLOAD = frozenset(
    {
        "amount",
        "currency",
        "customer",
        "payment_method",
        "description",
        "receipt_email",
        "metadata",
        "confirm",
        "off_session",
        "capture_method",
        "statement_descriptor_suffix",
    }
)
# Money moved (or is moving): the effect happened.
_CHARGED = frozenset({"succeeded", "processing", "requires_capture"})
# No money moved: a declined or abandoned intent is no effect.
_NOT_CHARGED = frozenset({"requires_payment_method", "canceled"})


def idempotency_key(step_key: str) -> str:
    """The step key as Stripe takes it (at most 255 characters, else a digest)."""
    value = header_value(step_key)
    return value if len(value) <= 255 else f"retrysafe-{key_digest(step_key, 64)}"


def search_query(step_key: str) -> str:
    """Stripe's search syntax for the intent carrying ``step_key`` in its metadata."""
    escaped = step_key.replace("\\", "\\\\").replace("'", "\\'")
    return f"metadata['{KEY_FIELD}']:'{escaped}'"


class StripeConnector(ConnectorBase):
    """Creates (and by default confirms) a PaymentIntent per step key."""

    effect_class = "payment"

    def __init__(
        self,
        name: str,
        api_key: str,
        *,
        api_base: str = API_BASE,
        confirm: bool = True,
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.where = f"connector {name!r}"
        self.api_base = check_url(api_base, f"{self.where}: api_base").rstrip("/")
        self.confirm = confirm
        # The library sends each request once: a resend after an unclear result
        # goes through the lookup first, like every other connector.
        self._client = stripe.StripeClient(
            api_key,
            base_addresses={"api": self.api_base},
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=timeout),
        )

    def __repr__(self) -> str:  # never show the key
        return f"StripeConnector({self.name!r}, {self.api_base})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> StripeConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        return cls(
            name,
            env_secret(where, required_str(where, table, "api_key_env"), "the secret key", allow_empty=False),
            api_base=string(where, table, "api_base", API_BASE),
            confirm=config_bool(where, table, "confirm", True),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
        )

    # --- execute ------------------------------------------------------------

    def _params(self, payload: Payload) -> dict[str, Any]:
        """The create parameters, checked; raises InvalidInput."""
        reject_unknown(self.where, payload, _PAYLOAD, error=InvalidInput, list_known=True)
        amount = payload.get("amount")
        if isinstance(amount, str) and amount.isdigit():
            amount = int(amount)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise InvalidInput(
                f"{self.where}: 'amount' must be a whole number of the smallest unit (cents), at least 1"
            )
        currency = payload.get("currency")
        if not isinstance(currency, str) or not re.fullmatch(r"[A-Za-z]{3}", currency):
            raise InvalidInput(f"{self.where}: 'currency' must be a three-letter ISO code such as 'eur'")
        metadata = payload.get("metadata") or {}
        if not isinstance(metadata, Mapping) or not all(isinstance(v, str) for v in metadata.values()):
            raise InvalidInput(f"{self.where}: 'metadata' must be a table of strings")
        if KEY_FIELD in metadata:
            raise InvalidInput(f"{self.where}: metadata must not set {KEY_FIELD!r} (the connector writes it)")
        params: dict[str, Any] = {
            k: v for k, v in payload.items() if k not in ("amount", "currency", "metadata")
        }
        params.update(amount=amount, currency=currency.lower(), metadata=dict(metadata))
        params.setdefault("confirm", self.confirm)
        return params

    def validate(self, payload: Payload) -> None:
        self._params(payload)

    def execute(self, step_key: str, payload: Payload) -> str:
        params = self._params(payload)
        params["metadata"][KEY_FIELD] = step_key
        try:
            intent = self._client.v1.payment_intents.create(
                params=params,  # type: ignore[arg-type]
                options={"idempotency_key": idempotency_key(step_key)},
            )
        except stripe.StripeError as exc:
            raise self._error(exc) from exc
        return self._evidence(intent)

    @staticmethod
    def _evidence(intent: Any) -> Evidence:
        """The PaymentIntent id; the fields add its status, amount and currency."""
        def field(name: str) -> Any:
            return intent[name] if name in intent else None  # noqa: SIM401 - StripeObject has no .get

        return Evidence(str(intent["id"]), id=str(intent["id"]), status=field("status"),
                        amount=field("amount"), currency=field("currency"))

    def _error(self, exc: stripe.StripeError) -> ConnectorError:
        said = f"Stripe answered {exc.http_status or 'nothing'}: {exc.user_message or type(exc).__name__}"
        if isinstance(exc, stripe.IdempotencyError):
            # The key was used before with other parameters: that request may have charged.
            return ConnectorError(f"{self.where}: {said}; an earlier request with this key may have charged")
        if isinstance(exc, stripe.CardError):
            return EffectFailed(f"{self.where}: {said}; nothing was charged")
        if exc.http_status is not None and refused(exc.http_status):
            return EffectFailed(f"{self.where}: {said}; nothing was charged")
        return ConnectorError(f"{self.where}: {said}; the payment may have been made (lookup decides)")

    # --- lookup -------------------------------------------------------------

    def _search(self, step_key: str) -> list[Any]:
        try:
            result = self._client.v1.payment_intents.search(
                params={"query": search_query(step_key), "limit": 10}
            )
        except stripe.StripeError as exc:
            raise ConnectorError(
                f"{self.where}: the PaymentIntent search answered {exc.http_status or 'nothing'}: try later"
            ) from exc
        return [intent for intent in result.data]

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Search by metadata; declined or canceled intents moved no money and do not count."""
        intents = [pi for pi in self._search(step_key) if pi["status"] not in _NOT_CHARGED]
        pending = [pi["id"] for pi in intents if pi["status"] not in _CHARGED]
        if pending:
            return Ambiguous(
                f"{self.where}: PaymentIntent {', '.join(pending)} for {step_key!r} is neither paid nor "
                "abandoned (it awaits confirmation or action): settle it in the Stripe dashboard"
            )
        searched = f"the PaymentIntent search {search_query(step_key)}"
        return one_match([self._evidence(pi) for pi in intents], searched=searched)

    def verify(self, step_key: str, evidence: str) -> bool:
        """The intent still carries the key, is paid, and its charge was not refunded."""
        try:
            intent = self._client.v1.payment_intents.retrieve(evidence, params={"expand": ["latest_charge"]})
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404:
                return False
            raise ConnectorError(f"{self.where}: reading {evidence} answered {exc.http_status}") from exc
        charge = intent["latest_charge"]
        refunded = bool(charge and not isinstance(charge, str) and charge["refunded"])
        keyed = intent["metadata"].to_dict().get(KEY_FIELD) == step_key
        return keyed and intent["status"] in _CHARGED and not refunded

    def count(self, step_key: str) -> int:
        return sum(1 for pi in self._search(step_key) if pi["status"] in _CHARGED)
