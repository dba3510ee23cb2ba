"""HTTP APIs and webhooks: one request per step key, with the key in a header.

The step key travels as ``Idempotency-Key`` (name configurable). An API that
honours the header turns a repeated request into the original resource; an
API that offers a lookup by key (``lookup_url``) lets retrysafe look before
sending again. Without either, retrysafe cannot know whether a lost answer
means a lost request, so the lookup says so and a human decides.

Status handling: 2xx is done; 4xx is a definite failure (the server refused,
nothing happened) except 408, 409, 425 and 429, which like 5xx, timeouts and
dropped connections leave the step ``unknown`` for the lookup to settle.

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
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import (
    config_bool,
    env_secret,
    integer,
    number,
    optional_str,
    reject_unknown,
    required_str,
    string,
    sub_table,
)
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Found, LookupResult, Payload

__all__ = ["HttpConnector", "header_value"]

# 4xx answers that do not prove the request was refused: the server may still
# be working on it (409: the key is in use), or asks to come back later.
_UNCLEAR_4XX = frozenset({408, 409, 425, 429})
_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE", "GET"})
_FIELDS = frozenset(
    {
        "type",
        "url",
        "method",
        "headers",
        "body",
        "idempotency_header",
        "idempotent",
        "evidence_field",
        "evidence_header",
        "lookup_url",
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


class _Transient(Exception):
    """A lookup answer worth asking again (5xx, 429, no answer)."""


def _check_url(template: str, what: str) -> str:
    probe = template.replace("{key}", "k")
    try:
        url = httpx.URL(probe)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError(f"{what} {template!r} is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{what} {template!r} must be an http:// or https:// URL with a host")
    return template


def _dig(data: Any, path: str) -> Any:
    """``data.id`` style access into decoded JSON; ``None`` when any step is missing."""
    for part in path.split("."):
        if isinstance(data, Mapping) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def header_value(step_key: str) -> str:
    """The step key as a header value: itself when printable ASCII, else %-encoded UTF-8.

    HTTP header values are bytes in practice limited to ASCII; encoding only
    the rare non-ASCII key keeps ordinary keys readable in the provider's logs.
    """
    if step_key.isascii() and step_key.isprintable():
        return step_key
    return quote(step_key, safe="".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%"))


def _excerpt(resp: httpx.Response) -> str:
    text = " ".join(resp.text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


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
        idempotency_header: str = "Idempotency-Key",
        idempotent: bool = False,
        evidence_field: str = "id",
        evidence_header: str | None = None,
        lookup_url: str | None = None,
        lookup_evidence_field: str | None = None,
        token: str | None = None,
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        timeout: float = 30.0,
        lookup_attempts: int = 4,
        lookup_max_wait: float = 5.0,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        self.url = _check_url(url, f"connector {name!r}: url")
        self.method = method.upper()
        if self.method not in _METHODS:
            raise ConfigError(f"connector {name!r}: method {method!r} is not one of {sorted(_METHODS)}")
        self.headers = dict(headers or {})
        self.body = dict(body or {})
        self.idempotency_header = idempotency_header
        self.idempotent = idempotent
        self.evidence_field = evidence_field
        self.evidence_header = evidence_header
        self.lookup_url = _check_url(lookup_url, f"connector {name!r}: lookup_url") if lookup_url else None
        self.lookup_evidence_field = lookup_evidence_field or evidence_field
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
            idempotency_header="Idempotency-Key" if key_header is None else key_header,
            idempotent=config_bool(where, table, "idempotent"),
            evidence_field=string(where, table, "evidence_field", "id"),
            evidence_header=optional_str(where, table, "evidence_header"),
            lookup_url=optional_str(where, table, "lookup_url"),
            lookup_evidence_field=optional_str(where, table, "lookup_evidence_field"),
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

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout, follow_redirects=False)

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        try:
            json.dumps({**self.body, **payload})
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"connector {self.name!r}: payload is not JSON-serialisable: {exc}") from None

    def execute(self, step_key: str, payload: Payload) -> str:
        url = self._url(self.url, step_key)
        body = {**self.body, **payload}
        request_json = body if self.method != "GET" else None
        try:
            with self._client() as client:
                resp = client.request(self.method, url, json=request_json, headers=self._headers(step_key))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # No connection was made, so no request was sent.
            raise EffectFailed(f"cannot reach {httpx.URL(url).host}: {exc}; nothing was sent") from exc
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"{self.method} {url} got no answer ({type(exc).__name__}); the request may have been applied"
            ) from exc
        status = resp.status_code
        if 200 <= status < 300:
            return self._evidence(resp, url)
        if 400 <= status < 500 and status not in _UNCLEAR_4XX:
            raise EffectFailed(f"{self.method} {url} was refused with {status}: {_excerpt(resp)}")
        raise ConnectorError(
            f"{self.method} {url} answered {status}; the request may have been applied "
            f"(lookup decides): {_excerpt(resp)}"
        )

    def _evidence(self, resp: httpx.Response, url: str) -> str:
        if self.evidence_header:
            header = resp.headers.get(self.evidence_header)
            if header:
                return str(header)
            missing = f"header {self.evidence_header!r}"
        else:
            try:
                value = _dig(resp.json(), self.evidence_field)
            except (json.JSONDecodeError, UnicodeDecodeError):
                value = None
            if value is not None and value != "":
                return str(value)
            missing = f"JSON field {self.evidence_field!r}"
        # The request succeeded but left no evidence: the lookup must find it.
        raise ConnectorError(f"{url} answered {resp.status_code} without the {missing}")

    # --- lookup -------------------------------------------------------------

    def _lookup_once(self, client: httpx.Client, url: str) -> httpx.Response:
        try:
            resp = client.get(url, headers=self._headers(None))
        except httpx.HTTPError as exc:
            raise _Transient(f"no answer ({type(exc).__name__})") from exc
        if resp.status_code >= 500 or resp.status_code in _UNCLEAR_4XX:
            raise _Transient(f"answered {resp.status_code}")
        return resp

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """GET ``lookup_url``: 200 is Found, 404 Absent; transient answers are retried."""
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
        retrying = Retrying(
            stop=stop_after_attempt(self.lookup_attempts),
            # Exponential from 0.1 s up to lookup_max_wait, plus up to 0.1 s of
            # jitter so many waiting jobs do not knock in step.
            wait=wait_exponential(multiplier=0.1, max=self.lookup_max_wait)
            + wait_random(0, min(0.1, self.lookup_max_wait)),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            with self._client() as client:
                resp = retrying(self._lookup_once, client, url)
        except _Transient as exc:
            # Cannot tell now; the step stays unknown and a later run looks again.
            raise ConnectorError(f"lookup GET {url} {exc} after {self.lookup_attempts} tries") from exc
        if resp.status_code == 404:
            return ABSENT
        if resp.status_code == 200:
            try:
                value = _dig(resp.json(), self.lookup_evidence_field)
            except (json.JSONDecodeError, UnicodeDecodeError):
                value = None
            if value is not None and value != "":
                return Found(str(value))
            return Ambiguous(
                f"lookup GET {url} answered 200 without the JSON field "
                f"{self.lookup_evidence_field!r}; open it and check what it found"
            )
        return Ambiguous(
            f"lookup GET {url} answered {resp.status_code} ({_excerpt(resp)}); "
            f"check by hand whether {step_key!r} was sent"
        )
