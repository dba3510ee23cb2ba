"""HTTP APIs and webhooks: one request per step key, with the key in a header.

The step key travels as ``Idempotency-Key`` (name configurable), and where the
config says so in the URL and the body (``{key}``). An API that honours the
header turns a repeated request into the original resource; an API that offers
a lookup by key (``lookup_url``, or a search with ``lookup_results``) lets
retrysafe look before sending again. Without either, retrysafe cannot know
whether a lost answer means a lost request, so the lookup says so and a human
decides.

Status handling: 2xx is done; 4xx is a definite failure (the server refused,
nothing happened) except 408, 409, 425 and 429, which like 5xx, timeouts and
dropped connections leave the step ``unknown`` for the lookup to settle. A 2xx
whose ``ok_field`` is not true, or whose ``error_field`` is set, is a refusal
too (``{"ok": false, "error": "channel_not_found"}``).

Example config::

    [connectors.crm]
    type = "http"
    url = "https://crm.example/api/notes"
    token_env = "CRM_TOKEN"
    evidence_field = "data.id"
    lookup_url = "https://crm.example/api/notes/by-key/{key}"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import (
    config_bool,
    env_secret,
    integer,
    number,
    one_of,
    optional_str,
    reject_unknown,
    required_str,
    string,
    sub_table,
)
from ._web import JsonApi, check_url, dig, excerpt, header_value, one_match
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["HttpConnector", "header_value"]

_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE", "GET"})
_FORMATS = ("json", "form")
_FIELDS = frozenset(
    {
        "type",
        "url",
        "method",
        "headers",
        "body",
        "body_format",
        "idempotency_header",
        "idempotent",
        "evidence_field",
        "evidence_header",
        "evidence_fields",
        "done_without_id",
        "ok_field",
        "error_field",
        "lookup_url",
        "lookup_results",
        "lookup_evidence_field",
        "token_env",
        "auth_header",
        "auth_scheme",
        "timeout",
        "lookup_attempts",
        "lookup_max_wait",
        "effect_class",
    }
)


def _with_key(value: Any, step_key: str) -> Any:
    """``{key}`` in the strings of a config ``body`` becomes the step key."""
    if isinstance(value, str):
        return value.replace("{key}", step_key)
    if isinstance(value, Mapping):
        return {k: _with_key(v, step_key) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_key(v, step_key) for v in value]
    return value


def _form_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TypeError(f"field {name!r} is {type(value).__name__}; a form body takes only text and numbers")


class HttpConnector(ConnectorBase):
    """Sends one HTTP request per step key; evidence from a JSON field or a header."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        body_format: str = "json",
        idempotency_header: str = "Idempotency-Key",
        idempotent: bool = False,
        evidence_field: str = "id",
        evidence_header: str | None = None,
        done_without_id: bool = False,
        ok_field: str | None = None,
        error_field: str | None = None,
        lookup_url: str | None = None,
        lookup_results: str | None = None,
        lookup_evidence_field: str | None = None,
        evidence_fields: Mapping[str, str] | None = None,
        token: str | None = None,
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        timeout: float = 30.0,
        lookup_attempts: int = 4,
        lookup_max_wait: float = 5.0,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        self.url = check_url(url, f"connector {name!r}: url")
        self.method = method.upper()
        if self.method not in _METHODS:
            raise ConfigError(f"connector {name!r}: method {method!r} is not one of {sorted(_METHODS)}")
        if body_format not in _FORMATS:
            raise ConfigError(
                f"connector {name!r}: body_format {body_format!r} is not one of {list(_FORMATS)}"
            )
        if lookup_results is not None and lookup_url is None:
            raise ConfigError(f"connector {name!r}: lookup_results needs a lookup_url (the search)")
        self.headers = dict(headers or {})
        self.body = dict(body or {})
        self.body_format = body_format
        self.idempotency_header = idempotency_header
        self.idempotent = idempotent
        self.evidence_field = evidence_field
        self.evidence_header = evidence_header
        self.done_without_id = done_without_id
        self.ok_field = ok_field
        self.error_field = error_field
        self.lookup_url = check_url(lookup_url, f"connector {name!r}: lookup_url") if lookup_url else None
        self.lookup_results = lookup_results
        self.lookup_evidence_field = lookup_evidence_field or evidence_field
        self.evidence_fields = dict(evidence_fields or {})
        self._token = token
        self.auth_header = auth_header
        self.auth_scheme = auth_scheme
        self.timeout = timeout
        self.lookup_attempts = max(1, lookup_attempts)
        self.lookup_max_wait = lookup_max_wait
        self.effect_class = effect_class
        # Absent from lookup is proof only with a lookup URL; with an API that
        # dedups on the key, "send again" is itself safe, so it counts too.
        self.authoritative = self.lookup_url is not None or self.idempotent

    def __repr__(self) -> str:  # never show the token
        return f"HttpConnector({self.name!r}, {self.method} {self.url})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> HttpConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        token_env = optional_str(where, table, "token_env")
        token = env_secret(where, token_env, allow_empty=False) if token_env else None
        headers = sub_table(where, table, "headers") or {}
        # Both may be set to "" on purpose: no key header, or a bare token.
        key_header = optional_str(where, table, "idempotency_header")
        auth_scheme = optional_str(where, table, "auth_scheme")
        return cls(
            name,
            required_str(where, table, "url"),
            method=string(where, table, "method", "POST"),
            headers={str(k): str(v) for k, v in headers.items()},
            body=sub_table(where, table, "body"),
            body_format=one_of(where, table, "body_format", _FORMATS),
            idempotency_header="Idempotency-Key" if key_header is None else key_header,
            idempotent=config_bool(where, table, "idempotent"),
            evidence_field=string(where, table, "evidence_field", "id"),
            evidence_header=optional_str(where, table, "evidence_header"),
            done_without_id=config_bool(where, table, "done_without_id"),
            ok_field=optional_str(where, table, "ok_field") or None,
            error_field=optional_str(where, table, "error_field") or None,
            lookup_url=optional_str(where, table, "lookup_url"),
            lookup_results=optional_str(where, table, "lookup_results") or None,
            lookup_evidence_field=optional_str(where, table, "lookup_evidence_field"),
            evidence_fields={str(k): str(v)
                             for k, v in (sub_table(where, table, "evidence_fields") or {}).items()},
            token=token,
            auth_header=string(where, table, "auth_header", "Authorization"),
            auth_scheme="Bearer" if auth_scheme is None else auth_scheme,
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
            lookup_attempts=integer(where, table, "lookup_attempts", 4),
            lookup_max_wait=number(where, table, "lookup_max_wait", 5.0, unit="seconds"),
            effect_class=string(where, table, "effect_class", "publish"),
        )

    # --- requests -----------------------------------------------------------

    def _url(self, template: str, step_key: str) -> str:
        # The provider knows the key as the header carried it, so look it up so.
        return template.replace("{key}", quote(header_value(step_key), safe=""))

    def _headers(self, step_key: str | None) -> dict[str, str]:
        headers = dict(self.headers)
        if step_key is not None and self.idempotency_header:
            headers[self.idempotency_header] = header_value(step_key)
        if self._token:
            scheme = f"{self.auth_scheme} " if self.auth_scheme else ""
            headers[self.auth_header] = scheme + self._token
        return headers

    def _api(self) -> JsonApi:
        return JsonApi(
            "",
            self._headers(None),
            timeout=self.timeout,
            read_attempts=self.lookup_attempts,
            read_max_wait=self.lookup_max_wait,
        )

    def _request_body(self, step_key: str, payload: Payload) -> dict[str, Any]:
        """What goes on the wire: ``json=`` or ``data=`` for httpx (nothing for GET)."""
        body = {**_with_key(self.body, step_key), **payload}
        if self.method == "GET":
            return {}
        if self.body_format == "form":
            return {"data": {k: _form_value(k, v) for k, v in body.items()}}
        return {"json": body}

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        body = {**self.body, **payload}
        try:
            json.dumps(body)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"connector {self.name!r}: payload is not JSON-serialisable: {exc}") from None
        if self.body_format == "form":
            try:
                for k, v in body.items():
                    _form_value(k, v)
            except TypeError as exc:
                raise InvalidInput(
                    f"connector {self.name!r}: payload cannot be sent as a form: {exc}"
                ) from None

    def execute(self, step_key: str, payload: Payload) -> str:
        url = self._url(self.url, step_key)
        resp = self._api().effect(
            self.method, url, headers=self._headers(step_key), **self._request_body(step_key, payload)
        )
        self._check_ok(resp, url)
        return self._evidence(resp, url)

    def _answer_error(self, resp: httpx.Response) -> str | None:
        """What a 2xx answer says went wrong (``ok_field`` not true, ``error_field`` set), if anything."""
        if self.ok_field is None and self.error_field is None:
            return None
        data = JsonApi.json(resp)
        error = dig(data, self.error_field) if self.error_field else None
        if error not in (None, "", False):
            return f"{self.error_field} = {json.dumps(error)}"
        if self.ok_field and dig(data, self.ok_field) is not True:
            return f"{self.ok_field} is not true"
        return None

    def _check_ok(self, resp: httpx.Response, url: str) -> None:
        error = self._answer_error(resp)
        if error is not None:
            raise EffectFailed(
                f"{self.method} {url} answered {resp.status_code} with an error ({error}): {excerpt(resp)}"
            )

    def _evidence(self, resp: httpx.Response, url: str) -> str:
        if self.evidence_header:
            header = resp.headers.get(self.evidence_header)
            if header:
                return str(header)
            missing = f"header {self.evidence_header!r}"
        else:
            answer = JsonApi.json(resp)
            value = dig(answer, self.evidence_field)
            if value is not None and value != "":
                return self._named(str(value), answer)
            missing = f"JSON field {self.evidence_field!r}"
        if self.done_without_id:
            # Declared: this endpoint answers nothing to find it by (a webhook).
            lookup = "" if self.lookup_url else "; no lookup possible"
            return Evidence(f"{resp.status_code} from {httpx.URL(url).host} (no id in the answer{lookup})",
                            http_status=resp.status_code)
        # The request succeeded but left no evidence: the lookup must find it.
        raise ConnectorError(f"{url} answered {resp.status_code} without the {missing}")

    # --- lookup -------------------------------------------------------------

    @property
    def can_look_up(self) -> bool:
        """Without ``lookup_url`` (and not idempotent) the lookup can only ask a
        human, so it is not asked before a first send: a webhook is sent, not
        blocked before it ever was."""
        return self.lookup_url is not None or self.idempotent

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """GET ``lookup_url``: 200 is Found, 404 Absent (a search: 0, 1 or more results);
        transient answers are retried."""
        if self.lookup_url is None:
            if self.idempotent:
                # The API dedups on the key: sending again returns the original.
                return ABSENT
            return Ambiguous(
                f"connector {self.name!r} has no lookup_url and the API is not declared "
                f"idempotent: check at {httpx.URL(self.url).host} whether a request with "
                f"{self.idempotency_header} {step_key!r} created something"
            )
        url = self._url(self.lookup_url, step_key)
        resp = self._api().read(url)
        if resp.status_code == 404 and self.lookup_results is None:
            return ABSENT
        if resp.status_code == 200:
            error = self._answer_error(resp)
            if error is not None:
                return Ambiguous(f"lookup GET {url} answered 200 with an error ({error}): {excerpt(resp)}")
            if self.lookup_results is not None:
                return self._search_result(resp, url)
            answer = JsonApi.json(resp)
            value = dig(answer, self.lookup_evidence_field)
            if value is not None and value != "":
                return Found(self._named(str(value), answer))
            return Ambiguous(
                f"lookup GET {url} answered 200 without the JSON field "
                f"{self.lookup_evidence_field!r}; open it and check what it found"
            )
        return Ambiguous(
            f"lookup GET {url} answered {resp.status_code} ({excerpt(resp)}); "
            f"check by hand whether {step_key!r} was sent"
        )

    def _search_result(self, resp: httpx.Response, url: str) -> LookupResult:
        """A search answer: the list at ``lookup_results``; 0 absent, 1 found, more ambiguous."""
        assert self.lookup_results is not None
        results = dig(JsonApi.json(resp), self.lookup_results)
        if not isinstance(results, list):
            return Ambiguous(
                f"lookup GET {url} answered 200 without a list at {self.lookup_results!r}; "
                "open it and check what it found"
            )
        found = [dig(item, self.lookup_evidence_field) for item in results]
        if any(value is None or value == "" for value in found):
            return Ambiguous(
                f"lookup GET {url} found results without the JSON field "
                f"{self.lookup_evidence_field!r}; open it and check what it found"
            )
        return one_match([self._named(str(value), item) for value, item in zip(found, results, strict=True)],
                         searched=f"the search GET {url}")

    def _named(self, value: str, answer: Any) -> Evidence:
        """The evidence ``value`` with the fields ``evidence_fields`` names (name = JSON path)
        read from the answer; ``id`` is the value unless declared otherwise."""
        fields: dict[str, Any] = {"id": value}
        for name, path in self.evidence_fields.items():
            found = dig(answer, path)
            fields[name] = found if isinstance(found, (str, int, float, bool)) else None
        return Evidence(value, fields)

    def verify(self, step_key: str, evidence: str) -> bool:
        """A fresh lookup finds the evidence; a declared id-less send without lookup
        has nothing to re-check and holds by its recorded answer."""
        if self.lookup_url is None and self.done_without_id and evidence.endswith("no lookup possible)"):
            return True
        return super().verify(step_key, evidence)

    def count(self, step_key: str) -> int:
        """How many effects a search finds (0 or 1 for a by-key lookup)."""
        if self.lookup_url is not None and self.lookup_results is not None:
            results = dig(
                JsonApi.json(self._api().read(self._url(self.lookup_url, step_key))), self.lookup_results
            )
            return len(results) if isinstance(results, list) else 0
        return super().count(step_key)
