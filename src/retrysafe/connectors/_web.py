"""What the web-API connectors share: answers, keys on the wire, lookups that search.

The HTTP, Slack, Discord, Telegram, Stripe and Google Sheets connectors all talk
to an HTTP API. The rules that decide what an answer means are written here once:

* :func:`refused` says whether a status proves the request was refused (most
  4xx) or leaves it open (408, 409, 425, 429, 5xx, 3xx): the first is
  :class:`~.base.EffectFailed`, the second leaves the step ``unknown``.
* :func:`one_match` turns the matches of a search into a lookup answer: none is
  ``Absent`` (when the search saw everything it had to), one is ``Found``, more
  are ``Ambiguous``.
* :class:`JsonApi` sends one request with httpx and maps transport errors the
  same way (no connection: nothing was sent; anything later: unknown), and
  :meth:`JsonApi.read` retries a read with backoff.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from ..errors import ConfigError, ConnectorError
from .base import ABSENT, Ambiguous, EffectFailed, Found, LookupResult

__all__ = [
    "UNCLEAR_4XX",
    "JsonApi",
    "check_url",
    "dig",
    "excerpt",
    "header_value",
    "key_digest",
    "one_line",
    "one_match",
    "refused",
    "scan_pages",
]

# 4xx answers that do not prove the request was refused: the server may still
# be working on it (409: the key is in use), or asks to come back later.
UNCLEAR_4XX = frozenset({408, 409, 425, 429})


def refused(status: int) -> bool:
    """Does this status prove the server refused the request (so nothing happened)?"""
    return 400 <= status < 500 and status not in UNCLEAR_4XX


def check_url(template: str, what: str) -> str:
    """An http(s) URL with a host, ``{key}`` allowed anywhere; else a ConfigError."""
    probe = template.replace("{key}", "k")
    try:
        url = httpx.URL(probe)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError(f"{what} {template!r} is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{what} {template!r} must be an http:// or https:// URL with a host")
    return template


def dig(data: Any, path: str) -> Any:
    """``data.id`` style access into decoded JSON; ``None`` when any step is missing.

    The path ``"."`` is the answer itself (a search that answers a bare list).
    """
    if path == ".":
        return data
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


def key_digest(step_key: str, length: int) -> str:
    """A short stand-in for a step key where a system allows only a few characters
    (a Discord nonce: 25). Hex of SHA-256, so two keys collide only by accident."""
    return hashlib.sha256(step_key.encode()).hexdigest()[:length]


def one_line(text: str, limit: int = 200) -> str:
    """Whitespace folded, cut to ``limit`` characters: for messages and evidence."""
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")


def excerpt(resp: httpx.Response) -> str:
    """The start of an answer's body, on one line."""
    return one_line(resp.text)


def one_match(
    matches: Sequence[str], *, searched: str, complete: bool = True, check: str = ""
) -> LookupResult:
    """A search's matches as a lookup answer.

    ``searched`` names what was searched (for the reasons); ``complete`` says the
    search saw everything that could match (not only the newest page of a
    channel). Nothing found in an incomplete search proves nothing.
    """
    if len(matches) == 1:
        return Found(matches[0])
    if len(matches) > 1:
        return Ambiguous(
            f"{searched} holds {len(matches)} effects with this key ({', '.join(matches[:5])}); "
            f"keep one and resolve with its evidence{check}"
        )
    if complete:
        return ABSENT
    return Ambiguous(f"{searched} did not reach far enough back to prove the effect absent{check}")


class _Transient(Exception):
    """A read worth asking again (5xx, 429, no answer)."""


class JsonApi:
    """One web API: a base URL, fixed headers, a timeout; requests through httpx.

    ``where`` starts every message (``"connector 'team-chat'"``; ``""`` for none); secrets live
    only in ``headers`` and never appear in a message.
    """

    def __init__(
        self,
        where: str,
        headers: Mapping[str, str],
        *,
        timeout: float = 30.0,
        read_attempts: int = 4,
        read_max_wait: float = 5.0,
    ) -> None:
        self.where = where
        self._at = f"{where}: " if where else ""
        self.headers = dict(headers)
        self.timeout = timeout
        self.read_attempts = max(1, read_attempts)
        self.read_max_wait = read_max_wait

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout, follow_redirects=False)

    def send(self, method: str, url: str, *, shown: str | None = None, **kwargs: Any) -> httpx.Response:
        """Send the effect request once; ``shown`` is the URL as messages may show it.

        No connection means nothing was sent (:class:`EffectFailed`); a lost or
        late answer means it may have been applied (:class:`ConnectorError`).
        """
        shown = shown or url
        headers = {**self.headers, **kwargs.pop("headers", {})}
        try:
            with self.client() as client:
                return self.request(client, method, url, headers=headers, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EffectFailed(
                f"{self._at}cannot reach {httpx.URL(url).host}: {exc}; nothing was sent"
            ) from exc
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"{self._at}{method} {shown} got no answer ({type(exc).__name__}); "
                "the request may have been applied"
            ) from exc

    def request(self, client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One request whose whole answer must arrive within ``timeout``.

        httpx bounds each read, not the answer: a server sending a byte at a time
        would hold the step for ever. Past the deadline this raises
        :class:`httpx.ReadTimeout`, a lost answer like any other."""
        deadline = time.monotonic() + self.timeout
        with client.stream(method, url, **kwargs) as resp:
            raw = bytearray()
            for chunk in resp.iter_raw():
                raw += chunk
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(
                        f"the answer did not arrive within {self.timeout:g}s", request=resp.request
                    )
        # the raw bytes, so the answer is decoded (gzip...) as httpx always does
        return httpx.Response(resp.status_code, headers=resp.headers, content=bytes(raw),
                              request=resp.request)

    def effect(self, method: str, url: str, *, shown: str | None = None, **kwargs: Any) -> httpx.Response:
        """Send the effect request once and judge the answer: a 2xx is returned; a
        refusal is :class:`EffectFailed`; anything else leaves the effect open."""
        shown = shown or url
        resp = self.send(method, url, shown=shown, **kwargs)
        if 200 <= resp.status_code < 300:
            return resp
        if refused(resp.status_code):
            raise EffectFailed(
                f"{self._at}{method} {shown} was refused with {resp.status_code}: {excerpt(resp)}"
            )
        raise self.unclear(method, shown, resp)

    def unclear(self, method: str, shown: str, resp: httpx.Response) -> ConnectorError:
        """The error for an answer that leaves the effect open: the lookup decides."""
        return ConnectorError(
            f"{self._at}{method} {shown} answered {resp.status_code}; the request may have "
            f"been applied (lookup decides): {excerpt(resp)}"
        )

    def _read_once(self, client: httpx.Client, url: str, kwargs: Mapping[str, Any]) -> httpx.Response:
        try:
            resp = self.request(client, "GET", url, headers=self.headers, **kwargs)
        except httpx.HTTPError as exc:
            raise _Transient(f"no answer ({type(exc).__name__})") from exc
        if resp.status_code >= 500 or resp.status_code in UNCLEAR_4XX:
            raise _Transient(f"answered {resp.status_code}")
        return resp

    def read(self, url: str, *, shown: str | None = None, **kwargs: Any) -> httpx.Response:
        """GET for a lookup: transient answers are asked again with backoff; if the API
        still does not answer, raise (the step stays unknown, a later run looks again)."""
        retrying = Retrying(
            stop=stop_after_attempt(self.read_attempts),
            # Exponential from 0.1 s up to read_max_wait, plus up to 0.1 s of
            # jitter so many waiting jobs do not knock in step.
            wait=wait_exponential(multiplier=0.1, max=self.read_max_wait)
            + wait_random(0, min(0.1, self.read_max_wait)),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            with self.client() as client:
                return retrying(self._read_once, client, url, kwargs)
        except _Transient as exc:
            raise ConnectorError(
                f"{self._at}lookup GET {shown or url} {exc} after {self.read_attempts} tries"
            ) from exc

    @staticmethod
    def json(resp: httpx.Response) -> Any:
        """The decoded JSON answer, or ``None`` when it is not JSON."""
        try:
            return resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None


def scan_pages(
    fetch: Callable[[str | None], tuple[Sequence[Any], str | None]], limit: int
) -> tuple[list[Any], bool]:
    """Read a newest-first listing page by page until it ends or ``limit`` items were read.

    ``fetch(cursor)`` returns a page and the cursor of the next one (``None`` at
    the end). Returns the items and whether the listing was read to its end.
    """
    items: list[Any] = []
    cursor: str | None = None
    while True:
        page, cursor = fetch(cursor)
        items.extend(page)
        if cursor is None or not page:
            return items, True
        if len(items) >= limit:
            return items, False
