"""WordPress: one post (a draft by default) per step key, through the REST API.

The step key is written into the post as the meta field ``retrysafe_key``,
in the request that creates it, and the post gets a slug derived from the key
(or the payload's ``slug``). A lookup asks for posts carrying the key (every
status but trash, which needs authentication and ``status=any``), then for
posts with the slug that carry no key: 0 is absent, 1 found, more ambiguous.

WordPress core ignores ``meta_key``/``meta_value`` on ``/wp/v2/posts`` and
does not expose unregistered meta, so the site needs the small must-use
plugin shipped with retrysafe (``wordpress_plugin/retrysafe-keys.php``, see
:data:`PLUGIN_PATH`). It registers the field and adds the ``retrysafe_key``
query parameter.

Authentication is an application password (Basic auth). WordPress offers
application passwords only over https, or over http when the site's
``WP_ENVIRONMENT_TYPE`` is ``local``.

Example config::

    [connectors.blog]
    type = "wordpress"
    url = "https://blog.example"
    user = "automation"
    password_env = "WP_APP_PASSWORD"
    status = "draft"
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import (
    env_secret,
    number,
    reject_unknown,
    required_str,
    string,
)
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["KEY_META", "PLUGIN_PATH", "WordPressConnector", "slug_for_key"]

KEY_META = "retrysafe_key"
"""The post meta field that carries the step key (registered by the plugin)."""
PLUGIN_PATH = Path(__file__).resolve().parent / "wordpress_plugin" / "retrysafe-keys.php"
"""The must-use plugin to copy into the site's ``wp-content/mu-plugins/``."""

_FIELDS = frozenset({"type", "url", "user", "password_env", "status", "post_type", "timeout", "effect_class"})
_PAYLOAD = frozenset({"title", "content", "excerpt", "status", "slug", "categories", "tags"})
_STATUSES = frozenset({"draft", "pending", "private", "publish"})
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_POST_TYPE = re.compile(r"^[a-z0-9_-]+$")
# Answers WordPress gives before it creates anything: argument validation in the
# REST server, then the permission check of the route. Any other error may come
# after the post was inserted (a term or meta failure, a fatal error): unknown.
_BEFORE_CREATE = frozenset({"rest_invalid_param", "rest_missing_callback_param"})
_SLUG_SUFFIXES = 9  # WordPress makes a taken published slug unique as slug-2, slug-3...
_PAGE = 100  # the REST API's largest page


def slug_for_key(step_key: str) -> str:
    """The post slug for a step key: readable, lowercase, and ending in a hash of the key.

    Equal keys give equal slugs; the hash keeps keys that read alike apart."""
    readable = re.sub(r"[^a-z0-9]+", "-", step_key.lower()).strip("-")[:80].strip("-")
    digest = hashlib.sha256(step_key.encode()).hexdigest()[:10]
    return f"{readable}-{digest}" if readable else f"rs-{digest}"


def _excerpt(resp: httpx.Response) -> str:
    text = " ".join(resp.text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _error_code(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    return str(data.get("code", "")) if isinstance(data, Mapping) else ""


def _ids(value: Any, what: str) -> list[int]:
    """Term ids: a list of whole numbers, or a comma-separated string of them (``--with``)."""
    items: Sequence[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise InvalidInput(f"{what} must be a list of term ids, not {value!r}")
    out: list[int] = []
    for item in items:
        digits = isinstance(item, str) and item.isdigit()
        number = item if isinstance(item, int) else int(item) if digits else 0
        if isinstance(item, bool) or number <= 0:
            raise InvalidInput(f"{what} must be a list of term ids, not {value!r}")
        out.append(number)
    return out


def _key_of(post: Mapping[str, Any]) -> Any:
    """The step key a post carries in its meta, or ``None``."""
    meta = post.get("meta")
    return meta.get(KEY_META) if isinstance(meta, Mapping) else None


class WordPressConnector(ConnectorBase):
    """Creates one post per step key; finds it again by the key in its meta, then by slug."""

    effect_class = "publish"
    updatable = True

    def __init__(
        self,
        name: str,
        url: str,
        user: str,
        password: str,
        *,
        status: str = "draft",
        post_type: str = "posts",
        timeout: float = 30.0,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigError(f"connector {name!r}: url {url!r} is not a valid URL: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host or parsed.query:
            raise ConfigError(f"connector {name!r}: url {url!r} must be the site's http(s) address")
        self.url = url.rstrip("/")
        self.user = user
        self._password = password
        if status not in _STATUSES:
            raise ConfigError(f"connector {name!r}: status {status!r} is not one of {sorted(_STATUSES)}")
        self.status = status
        if not _POST_TYPE.match(post_type):
            raise ConfigError(f"connector {name!r}: post_type {post_type!r} is not a REST route name")
        self.post_type = post_type
        self.timeout = timeout
        self.effect_class = effect_class

    def __repr__(self) -> str:  # never show the password
        return f"WordPressConnector({self.name!r}, {self.url}, user={self.user!r})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> WordPressConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        password_env = required_str(where, table, "password_env", "the application password's variable")
        return cls(
            name,
            required_str(where, table, "url", "the site's address"),
            required_str(where, table, "user", "the WordPress user name"),
            env_secret(where, password_env, "the application password", allow_empty=False),
            status=string(where, table, "status", "draft"),
            post_type=string(where, table, "post_type", "posts"),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
            effect_class=string(where, table, "effect_class", "publish"),
        )

    # --- requests -----------------------------------------------------------

    def _request(self, method: str, route: str, *, params: Mapping[str, Any] | None = None,
                 body: Mapping[str, Any] | None = None) -> httpx.Response:
        # ?rest_route= works whatever the site's permalink settings are.
        query = {"rest_route": route, **(params or {})}
        with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
            return client.request(method, f"{self.url}/", params=query, json=body,
                                  auth=(self.user, self._password))

    def _route(self, post_id: int | None = None) -> str:
        base = f"/wp/v2/{self.post_type}"
        return base if post_id is None else f"{base}/{post_id}"

    def _body(self, step_key: str | None, payload: Payload) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for field in ("title", "content", "excerpt"):
            if field in payload:
                body[field] = str(payload[field])
        for field in ("categories", "tags"):
            if field in payload:
                body[field] = _ids(payload[field], field)
        body["status"] = str(payload.get("status", self.status))
        if step_key is not None:
            body["slug"] = str(payload.get("slug") or slug_for_key(step_key))
            body["meta"] = {KEY_META: step_key}
        return body

    @staticmethod
    def _evidence(post: Mapping[str, Any]) -> Evidence:
        """One line: the post id and its link; the fields name them (and slug, status)."""
        return Evidence(f"{post['id']} {post.get('link') or ''}".rstrip(), id=post["id"],
                        url=post.get("link"), slug=post.get("slug"), status=post.get("status"))

    def validate(self, payload: Payload) -> None:
        """A post needs a title; known fields only; status, slug and term ids well-formed."""
        where = f"connector {self.name!r}"
        reject_unknown(where, payload, _PAYLOAD, error=InvalidInput, list_known=True)
        title = payload.get("title")
        if not isinstance(title, str) or not title.strip():
            raise InvalidInput(f"{where}: payload needs a non-empty 'title'")
        for field in ("content", "excerpt"):
            if field in payload and not isinstance(payload[field], str):
                raise InvalidInput(f"{where}: '{field}' must be text")
        status = payload.get("status", self.status)
        if status not in _STATUSES:
            raise InvalidInput(f"{where}: status {status!r} is not one of {', '.join(sorted(_STATUSES))}")
        slug = payload.get("slug")
        if slug is not None and not (isinstance(slug, str) and _SLUG.match(slug) and len(slug) <= 190):
            raise InvalidInput(f"{where}: slug {slug!r} must be lowercase letters, digits and single dashes")
        for field in ("categories", "tags"):
            if field in payload:
                _ids(payload[field], f"{where}: '{field}'")

    # --- execute and update ---------------------------------------------------

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        route = self._route()
        try:
            resp = self._request("POST", route, body=self._body(step_key, payload))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EffectFailed(f"cannot reach {self.url}: {exc}; nothing was sent") from exc
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"POST {route} on {self.url} got no answer ({type(exc).__name__}); the post may exist"
            ) from exc
        if resp.status_code in (401, 403) or (
            resp.status_code == 400 and _error_code(resp) in _BEFORE_CREATE
        ):
            # Refused by WordPress's argument or permission checks, which run before the post exists.
            raise EffectFailed(f"{self.url} refused the post ({resp.status_code}): {_excerpt(resp)}")
        if not 200 <= resp.status_code < 300:
            # A post may be inserted before an error (a term, a meta field, a fatal error).
            raise ConnectorError(
                f"POST {route} on {self.url} answered {resp.status_code}; the post may exist "
                f"(lookup decides): {_excerpt(resp)}"
            )
        post = self._json(resp)
        if not isinstance(post.get("id"), int):
            raise ConnectorError(f"POST {route} on {self.url} answered {resp.status_code} without a post id")
        meta = post.get("meta")
        if not (isinstance(meta, Mapping) and meta.get(KEY_META) == step_key):
            raise ConnectorError(
                f"{self.url} created post {post['id']} but did not keep its retrysafe key: "
                f"install the must-use plugin retrysafe-keys.php (see docs/connectors/wordpress.md)"
            )
        return self._evidence(post)

    def update(self, step_key: str, payload: Payload) -> str:
        """Replace the title, content, excerpt, status and terms of the post for ``step_key``."""
        self.validate(payload)
        found = self._by_key(step_key)
        if isinstance(found, str):
            raise ConnectorError(f"cannot update in place: {found}")
        if len(found) != 1:
            ids = ", ".join(str(p["id"]) for p in found)
            what = f"{len(found)} posts ({ids})" if found else "no post"
            raise EffectFailed(f"cannot update in place: {what} on {self.url} carry the key {step_key!r}")
        post_id = int(found[0]["id"])
        body = self._body(None, payload)
        if "slug" in payload:
            body["slug"] = str(payload["slug"])
        route = self._route(post_id)
        try:
            resp = self._request("POST", route, body=body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EffectFailed(f"cannot reach {self.url}: {exc}; nothing was sent") from exc
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"POST {route} got no answer ({type(exc).__name__}); it may be updated") from exc
        if not 200 <= resp.status_code < 300:
            raise ConnectorError(f"POST {route} on {self.url} answered {resp.status_code}: {_excerpt(resp)}")
        return self._evidence(self._json(resp))

    def _json(self, resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict):
            raise ConnectorError(f"{self.url} answered {resp.status_code} without JSON: {_excerpt(resp)}")
        return data

    # --- lookup -----------------------------------------------------------------

    def _list(self, params: Mapping[str, Any]) -> list[dict[str, Any]] | str:
        """Posts of every status, trash included, as the editor sees them; a string says why not."""
        query = {"status": "any,trash", "context": "edit", "per_page": _PAGE, "orderby": "id",
                 "order": "asc", "_fields": "id,link,slug,status,meta", **params}
        try:
            resp = self._request("GET", self._route(), params=query)
        except httpx.HTTPError as exc:
            raise ConnectorError(f"lookup on {self.url} got no answer ({type(exc).__name__})") from exc
        if resp.status_code >= 500 or resp.status_code in (408, 429):
            raise ConnectorError(f"lookup on {self.url} answered {resp.status_code}; try again later")
        if resp.status_code != 200:
            return f"lookup on {self.url} answered {resp.status_code}: {_excerpt(resp)}"
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if not isinstance(data, list) or not all(isinstance(p, dict) and isinstance(p.get("id"), int)
                                                 for p in data):
            return f"lookup on {self.url} did not answer a list of posts: {_excerpt(resp)}"
        return data

    def _by_key(self, step_key: str) -> list[dict[str, Any]] | str:
        posts = self._list({KEY_META: step_key})
        if isinstance(posts, str):
            return posts
        for post in posts:
            meta = post.get("meta")
            if not isinstance(meta, Mapping) or KEY_META not in meta:
                # Core answered every post: the parameter and the field are unknown to it.
                return (f"{self.url} does not know the retrysafe_key field: install the must-use "
                        "plugin retrysafe-keys.php (see docs/connectors/wordpress.md), then look for "
                        "the post by hand")
        return [p for p in posts if _key_of(p) == step_key]

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """By key in the meta field; then, for a post created without its key, by slug."""
        found = self._by_key(step_key)
        if isinstance(found, str):
            return Ambiguous(found)
        live = [p for p in found if p.get("status") != "trash"]
        if len(found) > 1:
            ids = ", ".join(f"{p['id']} ({p.get('status')})" for p in found)
            return Ambiguous(f"{len(found)} posts on {self.url} carry the key {step_key!r}: {ids}; keep one")
        if found and not live:
            post = found[0]
            return Ambiguous(f"post {post['id']} on {self.url} carries the key {step_key!r} but is in the "
                             "trash: restore it, or resolve the step as absent to create a new one")
        if found:
            return Found(self._evidence(found[0]), {"post_id": found[0]["id"], "matched_by": "key"})
        return self._by_slug(step_key, payload)

    def _by_slug(self, step_key: str, payload: Payload) -> LookupResult:
        """A create can insert the post and fail before its meta is written. Such a post has
        our slug and no key; a post with another key is someone else's."""
        slug = str(payload.get("slug") or slug_for_key(step_key))
        candidates = [slug, *(f"{slug}-{n}" for n in range(2, _SLUG_SUFFIXES + 2))]
        posts = self._list({"slug": ",".join(candidates)})
        if isinstance(posts, str):
            return Ambiguous(posts)
        keyless = [p for p in posts if p.get("status") != "trash" and not _key_of(p)]
        if not keyless:
            return ABSENT
        if len(keyless) > 1:
            ids = ", ".join(f"{p['id']} ({p.get('slug')})" for p in keyless)
            return Ambiguous(f"no post on {self.url} carries the key {step_key!r}, and {len(keyless)} posts "
                             f"without a key have its slug: {ids}; check which one this step made")
        return Found(self._evidence(keyless[0]), {"post_id": keyless[0]["id"], "matched_by": "slug"})

    def verify(self, step_key: str, evidence: str) -> bool:
        """The post in the evidence still exists, outside the trash, with this step's key."""
        head = evidence.split(" ", 1)[0]
        if not head.isdigit():
            return False
        resp = self._request("GET", self._route(int(head)), params={"context": "edit",
                                                                     "_fields": "id,status,meta"})
        if resp.status_code in (404, 410):
            return False
        if resp.status_code != 200:
            raise ConnectorError(f"verify on {self.url} answered {resp.status_code}: {_excerpt(resp)}")
        post = self._json(resp)
        meta = post.get("meta")
        return post.get("status") != "trash" and isinstance(meta, Mapping) and meta.get(KEY_META) == step_key

    def count(self, step_key: str) -> int:
        """Posts carrying the key, trash included."""
        found = self._by_key(step_key)
        if isinstance(found, str):
            raise ConnectorError(found)
        return len(found)
