"""Who may see the dashboard and who may act: one token, a session cookie, and a
CSRF token per form.

The token is given with ``--token`` or generated at start and printed. A
browser opens the printed address once (``/?token=...``) or types the token on
the login page; it then holds a session cookie (``HttpOnly``,
``SameSite=Strict``) that is an HMAC of the token, never the token itself.
Scrapers send ``Authorization: Bearer TOKEN``. Every form that changes
something carries a CSRF token bound to the session and to that form's action,
outcome and step, so a token taken from one form cannot post another.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable

__all__ = ["COOKIE", "Guard"]

COOKIE = "retrysafe_session"


class Guard:
    """The token's checks, with a secret of this server's own (new at each start)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self._secret = secrets.token_bytes(32)

    @staticmethod
    def generate() -> str:
        return secrets.token_urlsafe(24)

    def _mac(self, *parts: str) -> str:
        msg = "\0".join(parts).encode("utf-8")
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        return _same(given, self.token)

    def session(self) -> str:
        """The cookie a browser holds once it gave the token."""
        return self._mac("session", self.token)

    def session_ok(self, cookie: str | None) -> bool:
        return _same(cookie, self.session())

    def csrf(self, action: str, fields: Iterable[str]) -> str:
        """The CSRF token of one form: ``action`` on the outcome/step ``fields``."""
        return self._mac("csrf", self.session(), action, *fields)

    def csrf_ok(self, given: str | None, action: str, fields: Iterable[str]) -> bool:
        return _same(given, self.csrf(action, fields))


def _same(given: str | None, expected: str) -> bool:
    """``given`` is ``expected``, in constant time; anything a client sends (a cookie
    or a form field with non-ASCII characters, lone surrogates) is just not it."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))
