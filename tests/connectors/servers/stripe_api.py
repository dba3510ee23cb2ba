"""A contract stand-in for the Stripe API: PaymentIntents, search, refunds, idempotency.

Speaks what Stripe documents, so the official ``stripe`` library can be
pointed at it (``StripeClient(base_addresses={"api": BASE})``):

* Requests are form-encoded (``metadata[k]=v``, ``expand[0]=x``), with
  ``Authorization: Bearer sk_...``; errors are ``{"error": {"type", "code",
  "message", ...}}`` with 400, 401, 402 (``card_error``), 404.
* ``Idempotency-Key`` on POST: the first answer is stored with the request's
  parameters; the same key with the same parameters answers it again
  (``Idempotent-Replayed: true``), with other parameters 400
  ``idempotency_error``.
* ``POST /v1/payment_intents`` (``amount``, ``currency``, ``payment_method``,
  ``confirm``, ``metadata``...): ``pm_card_visa`` succeeds,
  ``pm_card_chargeDeclined`` answers 402 and leaves the intent in
  ``requires_payment_method``.
* ``GET /v1/payment_intents/{id}`` (``expand[]=latest_charge``),
  ``GET /v1/payment_intents/search?query=metadata['k']:'v'`` (a search result
  list), ``POST /v1/refunds`` (``payment_intent``).

Search in real Stripe lags writes by up to about a minute; ``search_lag`` makes
the stand-in hide intents younger than that many seconds.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from standin import App, Reply, Request

API_KEY = "sk_test_standin_never_printed"
_QUERY = re.compile(r"^metadata\['((?:[^'\\]|\\.)*)'\]:'((?:[^'\\]|\\.)*)'$")


def _error(status: int, type_: str, message: str, **extra: Any) -> Reply:
    return Reply(status, {"error": {"type": type_, "message": message, **extra}})


class StripeApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.intents: dict[str, dict[str, Any]] = {}
        self.charges: dict[str, dict[str, Any]] = {}
        self.idempotent: dict[str, tuple[str, Reply]] = {}
        self.search_lag = 0.0
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_3Standin{self._n:08d}"

    def handle(self, request: Request) -> Reply:
        if request.bearer() != API_KEY:
            return _error(401, "invalid_request_error", "Invalid API Key provided: sk_****")
        body = request.body if isinstance(request.body, dict) else {}
        key = request.headers.get("idempotency-key")
        if request.method == "POST" and key:
            fingerprint = json.dumps([request.path, body], sort_keys=True)
            with self.lock:
                if key in self.idempotent:
                    seen, reply = self.idempotent[key]
                    if seen != fingerprint:
                        return _error(
                            400,
                            "idempotency_error",
                            "Keys for idempotent requests can only be used with the same parameters they "
                            "were first used with.",
                        )
                    return Reply(reply.status, reply.body, headers={"Idempotent-Replayed": "true"})
                reply = self._route(request, body)
                if reply.status < 500:
                    self.idempotent[key] = (fingerprint, reply)
                return reply
        with self.lock:
            return self._route(request, body)

    def _route(self, request: Request, body: dict[str, Any]) -> Reply:
        path, method = request.path, request.method
        if path == "/v1/payment_intents" and method == "POST":
            return self._create(body)
        if path == "/v1/payment_intents/search" and method == "GET":
            return self._search(request.arg("query") or "")
        if path.startswith("/v1/payment_intents/") and method == "GET":
            expand = [v for k, vs in request.query.items() if k.startswith("expand") for v in vs]
            return self._retrieve(path.rsplit("/", 1)[1], expand)
        if path == "/v1/refunds" and method == "POST":
            return self._refund(body)
        return _error(404, "invalid_request_error", f"Unrecognized request URL ({method}: {path}).")

    def _create(self, body: dict[str, Any]) -> Reply:
        try:
            amount = int(body.get("amount", ""))
        except ValueError:
            return _error(400, "invalid_request_error", "Missing required param: amount.", param="amount")
        if amount < 1 or not re.fullmatch(r"[a-z]{3}", str(body.get("currency", ""))):
            return _error(400, "invalid_request_error", "Invalid amount or currency.", param="currency")
        metadata = body.get("metadata") or {}
        intent: dict[str, Any] = {
            "id": self._id("pi"),
            "object": "payment_intent",
            "amount": amount,
            "currency": body["currency"],
            "customer": body.get("customer"),
            "description": body.get("description"),
            "metadata": metadata,
            "payment_method": body.get("payment_method"),
            "status": "requires_payment_method",
            "latest_charge": None,
            "created": int(time.time()),
            "_created": time.monotonic(),
        }
        self.intents[intent["id"]] = intent
        if body.get("payment_method") and body.get("confirm") == "true":
            if body["payment_method"] == "pm_card_chargeDeclined":
                return _error(
                    402,
                    "card_error",
                    "Your card was declined.",
                    code="card_declined",
                    decline_code="generic_decline",
                    payment_intent=self._public(intent),
                )
            charge = {
                "id": self._id("ch"),
                "object": "charge",
                "amount": amount,
                "refunded": False,
                "amount_refunded": 0,
            }
            self.charges[charge["id"]] = charge
            intent.update(status="succeeded", latest_charge=charge["id"])
        elif body.get("payment_method"):
            intent["status"] = "requires_confirmation"
        return Reply(200, self._public(intent))

    def _public(self, intent: dict[str, Any], expand: list[str] | None = None) -> dict[str, Any]:
        out = {k: v for k, v in intent.items() if not k.startswith("_")}
        if expand and "latest_charge" in expand and out["latest_charge"]:
            out["latest_charge"] = dict(self.charges[out["latest_charge"]])
        return out

    def _retrieve(self, intent_id: str, expand: list[str]) -> Reply:
        intent = self.intents.get(intent_id)
        if intent is None:
            return _error(
                404,
                "invalid_request_error",
                f"No such payment_intent: '{intent_id}'",
                code="resource_missing",
            )
        return Reply(200, self._public(intent, expand))

    def _search(self, query: str) -> Reply:
        match = _QUERY.match(query.strip())
        if not match:
            return _error(400, "invalid_request_error", f"Invalid search query: {query}", param="query")
        name, value = (re.sub(r"\\(.)", r"\1", g) for g in match.groups())
        now = time.monotonic()
        data = [
            self._public(pi)
            for pi in reversed(self.intents.values())
            if pi["metadata"].get(name) == value and now - pi["_created"] >= self.search_lag
        ]
        return Reply(
            200,
            {
                "object": "search_result",
                "url": "/v1/payment_intents/search",
                "has_more": False,
                "next_page": None,
                "data": data,
            },
        )

    def _refund(self, body: dict[str, Any]) -> Reply:
        intent = self.intents.get(str(body.get("payment_intent")))
        if intent is None or not intent["latest_charge"]:
            return _error(400, "invalid_request_error", "This PaymentIntent has no charge to refund.")
        charge = self.charges[intent["latest_charge"]]
        charge.update(refunded=True, amount_refunded=charge["amount"])
        return Reply(
            200, {"id": self._id("re"), "object": "refund", "charge": charge["id"], "status": "succeeded"}
        )
