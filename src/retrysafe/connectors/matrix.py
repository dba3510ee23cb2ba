"""Matrix: one room message per step key, with the key as the transaction id.

A message is ``PUT /_matrix/client/v3/rooms/{room}/send/m.room.message/{txnId}``
with the step key as ``txnId``. The homeserver answers a repeated PUT with
the same transaction id from the same *device* with the event it already
made, so a retry within the server's memory of transaction ids (about 24
hours on Synapse) cannot post twice. Two things break that: a new device (a
password login without a fixed ``device_id`` creates one each time) and time.
So the connector uses one device only (a configured access token, or a login
with a fixed ``device_id``), and it also writes the key into the event
content (``retrysafe.step_key``, and as an ``org.matrix.labels`` label), so a
lookup can find the message after the server forgot the transaction.

The lookup pages back through the room's messages sent by this account
(``/messages``), asking the server to filter by the label (Synapse honours
it; a server that ignores it just returns more to read) and checks each
event's content for the key. Reaching the room's first message without a
match is ``Absent``; stopping at ``scan_limit`` events first is
``Ambiguous``.

Example config::

    [connectors.team]
    type = "matrix"
    homeserver = "https://matrix.example"
    room = "!AbCdEf:example"
    access_token_env = "MATRIX_TOKEN"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import (
    env_secret,
    integer,
    number,
    optional_str,
    reject_unknown,
    required_str,
    string,
)
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["KEY_FIELD", "LABELS_FIELD", "MatrixConnector"]

KEY_FIELD = "retrysafe.step_key"
"""The event content field that carries the step key."""
LABELS_FIELD = "org.matrix.labels"
"""MSC2326 labels: the key is also a label, which ``/messages`` can filter on exactly."""

_FIELDS = frozenset({
    "type", "homeserver", "room", "access_token_env", "user", "password_env", "device_id",
    "msgtype", "timeout", "scan_limit", "effect_class",
})
_PAYLOAD = frozenset({"body", "msgtype", "formatted_body"})
_MSGTYPES = frozenset({"m.text", "m.notice", "m.emote"})
_ROOM_ID = re.compile(r"^![^\s/]+$")  # room version 12 ids have no ":server"
_UNCLEAR_4XX = frozenset({408, 409, 425, 429})
_PAGE = 100


def _excerpt(resp: httpx.Response) -> str:
    text = " ".join(resp.text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


class MatrixConnector(ConnectorBase):
    """Sends one message per step key into one room; finds it again by the key in its content."""

    effect_class = "message"

    def __init__(
        self,
        name: str,
        homeserver: str,
        room: str,
        *,
        access_token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        device_id: str | None = None,
        msgtype: str = "m.text",
        timeout: float = 30.0,
        scan_limit: int = 1000,
        effect_class: str = "message",
    ) -> None:
        self.name = name
        where = f"connector {name!r}"
        try:
            url = httpx.URL(homeserver)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigError(f"{where}: homeserver {homeserver!r} is not a valid URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"{where}: homeserver {homeserver!r} must be an http:// or https:// URL")
        self.homeserver = homeserver.rstrip("/")
        if not _ROOM_ID.match(room):
            raise ConfigError(f"{where}: room {room!r} must be a room id (starting with !), not an alias")
        self.room = room
        if access_token is None and not (user and password and device_id):
            raise ConfigError(f"{where}: give access_token_env, or user, password_env and device_id")
        if access_token is not None and (user or password):
            raise ConfigError(f"{where}: give access_token_env or a user login, not both")
        self._token = access_token
        self.user = user
        self._password = password
        self.device_id = device_id
        if msgtype not in _MSGTYPES:
            raise ConfigError(f"{where}: msgtype {msgtype!r} is not one of {sorted(_MSGTYPES)}")
        self.msgtype = msgtype
        self.timeout = timeout
        self.scan_limit = max(1, scan_limit)
        self.effect_class = effect_class
        self._user_id: str | None = None

    def __repr__(self) -> str:  # never show the token or password
        return f"MatrixConnector({self.name!r}, {self.homeserver}, {self.room})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> MatrixConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        token_env = optional_str(where, table, "access_token_env")
        password_env = optional_str(where, table, "password_env")
        token = env_secret(where, token_env, "the access token", allow_empty=False) if token_env else None
        password = env_secret(where, password_env, "the password", allow_empty=False) \
            if password_env else None
        return cls(
            name,
            required_str(where, table, "homeserver", "the homeserver's address"),
            required_str(where, table, "room", "the room id"),
            access_token=token,
            user=optional_str(where, table, "user"),
            password=password,
            device_id=optional_str(where, table, "device_id"),
            msgtype=string(where, table, "msgtype", "m.text"),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
            scan_limit=integer(where, table, "scan_limit", 1000),
            effect_class=string(where, table, "effect_class", "message"),
        )

    # --- requests -----------------------------------------------------------

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout, follow_redirects=False)

    def _access_token(self, client: httpx.Client) -> str:
        """The configured token, or one from a login on the fixed device (once per instance)."""
        if self._token is None:
            resp = client.post(f"{self.homeserver}/_matrix/client/v3/login", json={
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": self.user},
                "password": self._password,
                # The same device every time: transaction ids are remembered per device.
                "device_id": self.device_id,
                "initial_device_display_name": "retrysafe",
            })
            if resp.status_code != 200:
                raise EffectFailed(f"login as {self.user} on {self.homeserver} failed "
                                   f"({resp.status_code}): {_excerpt(resp)}")
            token = resp.json().get("access_token")
            if not isinstance(token, str):
                raise EffectFailed(f"login as {self.user} on {self.homeserver} gave no access token")
            self._token = token
        return self._token

    def _call(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
        token = self._access_token(client)
        return client.request(method, f"{self.homeserver}/_matrix/client/v3{path}",
                              headers={"Authorization": f"Bearer {token}"}, **kwargs)

    def _room_path(self) -> str:
        return f"/rooms/{quote(self.room, safe='')}"

    def validate(self, payload: Payload) -> None:
        """A message needs a text ``body``; known fields only."""
        where = f"connector {self.name!r}"
        reject_unknown(where, payload, _PAYLOAD, error=InvalidInput, list_known=True)
        body = payload.get("body")
        if not isinstance(body, str) or not body.strip():
            raise InvalidInput(f"{where}: payload needs a non-empty 'body'")
        if "formatted_body" in payload and not isinstance(payload["formatted_body"], str):
            raise InvalidInput(f"{where}: 'formatted_body' must be HTML text")
        msgtype = payload.get("msgtype", self.msgtype)
        if msgtype not in _MSGTYPES:
            raise InvalidInput(f"{where}: msgtype {msgtype!r} is not one of {', '.join(sorted(_MSGTYPES))}")

    def _content(self, step_key: str, payload: Payload) -> dict[str, Any]:
        content: dict[str, Any] = {"msgtype": payload.get("msgtype", self.msgtype), "body": payload["body"]}
        if payload.get("formatted_body"):
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = payload["formatted_body"]
        content[KEY_FIELD] = step_key
        content[LABELS_FIELD] = [step_key]
        return content

    # --- execute ------------------------------------------------------------------

    def _evidence(self, event_id: str) -> Evidence:
        """The event id; its fields name the room and a matrix.to link to the event."""
        link = f"https://matrix.to/#/{quote(self.room, safe='!:')}/{quote(event_id, safe='$:')}"
        return Evidence(event_id, event_id=event_id, room=self.room, url=link)

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        # The step key is the transaction id: a repeat from this device returns the first event.
        path = f"{self._room_path()}/send/m.room.message/{quote(step_key, safe='')}"
        try:
            with self._client() as client:
                resp = self._call(client, "PUT", path, json=self._content(step_key, payload))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EffectFailed(f"cannot reach {self.homeserver}: {exc}; nothing was sent") from exc
        except httpx.HTTPError as exc:
            raise ConnectorError(
                f"PUT to {self.room} on {self.homeserver} got no answer ({type(exc).__name__}); "
                "the message may have been sent"
            ) from exc
        if resp.status_code == 200:
            try:
                event_id = resp.json().get("event_id")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                event_id = None
            if isinstance(event_id, str) and event_id:
                return self._evidence(event_id)
            raise ConnectorError(f"{self.homeserver} answered 200 without an event_id: {_excerpt(resp)}")
        if 400 <= resp.status_code < 500 and resp.status_code not in _UNCLEAR_4XX:
            # Refused (not in the room, bad token, bad content): the server persisted nothing.
            raise EffectFailed(f"{self.homeserver} refused the message to {self.room} "
                               f"({resp.status_code}): {_excerpt(resp)}")
        raise ConnectorError(f"{self.homeserver} answered {resp.status_code} to the message to {self.room}; "
                             f"it may have been sent (lookup decides): {_excerpt(resp)}")

    # --- lookup ---------------------------------------------------------------------

    def _scan(self, step_key: str) -> tuple[list[dict[str, Any]], bool, int] | str:
        """This account's messages carrying the key, whether the scan reached the room's
        first message, and how many events it read; a string says why it could not look."""
        with self._client() as client:
            if self._user_id is None:
                who = self._call(client, "GET", "/account/whoami")
                if who.status_code != 200:
                    return self._cannot(who, "whoami")
                self._user_id = str(who.json().get("user_id"))
            room_filter = {"types": ["m.room.message"], "senders": [self._user_id], LABELS_FIELD: [step_key]}
            params: dict[str, Any] = {"dir": "b", "limit": _PAGE, "filter": json.dumps(room_filter)}
            found: list[dict[str, Any]] = []
            read = 0
            while read < self.scan_limit:
                resp = self._call(client, "GET", f"{self._room_path()}/messages", params=params)
                if resp.status_code != 200:
                    return self._cannot(resp, "/messages")
                data = resp.json()
                chunk = data.get("chunk") or []
                read += len(chunk)
                found += [
                    e for e in chunk
                    if isinstance(e, dict) and e.get("sender") == self._user_id
                    and isinstance(e.get("content"), dict) and e["content"].get(KEY_FIELD) == step_key
                ]
                if not chunk or not data.get("end"):
                    return found, True, read
                params["from"] = data["end"]
            return found, False, read

    def _cannot(self, resp: httpx.Response, what: str) -> str:
        if resp.status_code >= 500 or resp.status_code in _UNCLEAR_4XX:
            raise ConnectorError(
                f"lookup {what} on {self.homeserver} answered {resp.status_code}; try again later")
        return f"lookup {what} on {self.homeserver} answered {resp.status_code}: {_excerpt(resp)}"

    def _scan_or_raise(self, step_key: str) -> tuple[list[dict[str, Any]], bool, int] | str:
        try:
            return self._scan(step_key)
        except httpx.HTTPError as exc:
            raise ConnectorError(f"lookup on {self.homeserver} got no answer ({type(exc).__name__})") from exc

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Found: the one message of this account in the room carrying the key."""
        scanned = self._scan_or_raise(step_key)
        if isinstance(scanned, str):
            return Ambiguous(scanned)
        found, complete, read = scanned
        if len(found) > 1:
            ids = ", ".join(str(e.get("event_id")) for e in found)
            return Ambiguous(f"{len(found)} messages in {self.room} carry the key {step_key!r}: {ids}")
        if found:
            return Found(self._evidence(str(found[0]["event_id"])), {"room": self.room})
        if complete:
            return ABSENT
        return Ambiguous(f"none of the last {read} messages in {self.room} carries the key {step_key!r}, "
                         f"and older ones were not read (scan_limit {self.scan_limit}): check the room")

    def verify(self, step_key: str, evidence: str) -> bool:
        """The event still exists, unredacted, with this step's key."""
        try:
            with self._client() as client:
                resp = self._call(client, "GET", f"{self._room_path()}/event/{quote(evidence, safe='')}")
        except httpx.HTTPError as exc:
            raise ConnectorError(f"verify on {self.homeserver} got no answer ({type(exc).__name__})") from exc
        if resp.status_code == 404:
            return False
        if resp.status_code != 200:
            raise ConnectorError(f"verify on {self.homeserver} answered {resp.status_code}: {_excerpt(resp)}")
        content = resp.json().get("content")
        return isinstance(content, dict) and content.get(KEY_FIELD) == step_key

    def count(self, step_key: str) -> int:
        scanned = self._scan_or_raise(step_key)
        if isinstance(scanned, str):
            raise ConnectorError(scanned)
        return len(scanned[0])
