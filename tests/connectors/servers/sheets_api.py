"""A contract stand-in for the Google Sheets v4 values API and Google's OAuth token endpoint.

Speaks what Google documents, so ``gspread`` (with ``google-auth``) can be
pointed at it:

* ``POST /token``: a service account's signed JWT
  (``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer``, ``assertion``;
  the signature is checked against the account's public key) or an authorized
  user's ``grant_type=refresh_token``; answers ``access_token``,
  ``expires_in``; errors ``{"error": "invalid_grant"}``.
* Every API call needs ``Authorization: Bearer <a live token>``; an unknown or
  expired token is 401 ``UNAUTHENTICATED`` (google-auth then refreshes and
  sends again).
* ``GET /v4/spreadsheets/{id}``: the spreadsheet's metadata (sheets,
  grid properties).
* ``GET /v4/spreadsheets/{id}/values/{range}`` (``majorDimension``),
  ``GET /v4/spreadsheets/{id}/values:batchGet?ranges=...``.
* ``POST /v4/spreadsheets/{id}/values/{range}:append`` (``valueInputOption``,
  ``insertDataOption``; body ``{"values": [[...]]}``): appends after the last row
  of the table and answers ``tableRange`` and ``updates.updatedRange``.

Errors are ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from google.auth import jwt
from standin import App, Reply, Request

SPREADSHEET_ID = "1StandinSpreadsheetId0000000000000000000000"
SHEET = {"sheetId": 0, "title": "Log", "index": 0}
CLIENT = {"client_id": "standin-client.apps.example", "client_secret": "standin-client-secret"}
REFRESH_TOKEN = "1//standin-refresh-token"
_CELL = re.compile(r"^([A-Z]*)(\d*)$")


def _gerror(code: int, status: str, message: str) -> Reply:
    return Reply(code, {"error": {"code": code, "message": message, "status": status}})


def _col(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n


def _letters(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


class SheetsApp(App):
    def __init__(self, public_key_pem: str, service_email: str) -> None:
        super().__init__()
        self.public_key_pem = public_key_pem
        self.service_email = service_email
        self.rows: list[list[str]] = []
        self.tokens: dict[str, float] = {}  # access token -> expiry (monotonic)
        self.token_lifetime = 3600
        self.token_requests = 0

    def expire_tokens(self) -> None:
        """Every issued access token stops working (as after an hour)."""
        with self.lock:
            self.tokens = {t: 0.0 for t in self.tokens}

    def handle(self, request: Request) -> Reply:
        if request.path == "/token" and request.method == "POST":
            return self._token(request.body if isinstance(request.body, dict) else {})
        token = request.bearer()
        with self.lock:
            live = token is not None and self.tokens.get(token, 0.0) > time.monotonic()
        if not live:
            return _gerror(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        prefix = f"/v4/spreadsheets/{SPREADSHEET_ID}"
        if not request.path.startswith(prefix):
            return _gerror(404, "NOT_FOUND", "Requested entity was not found.")
        rest = request.path.removeprefix(prefix)
        with self.lock:
            if rest == "" and request.method == "GET":
                return Reply(200, self._metadata())
            if rest == "/values:batchGet" and request.method == "GET":
                ranges = request.query.get("ranges", [])
                dim = request.arg("majorDimension", "ROWS") or "ROWS"
                return Reply(
                    200,
                    {"spreadsheetId": SPREADSHEET_ID, "valueRanges": [self._values(r, dim) for r in ranges]},
                )
            if rest.startswith("/values/") and rest.endswith(":append") and request.method == "POST":
                return self._append(rest.removeprefix("/values/").removesuffix(":append"), request)
            if rest.startswith("/values/") and request.method == "GET":
                return Reply(
                    200,
                    self._values(
                        rest.removeprefix("/values/"), request.arg("majorDimension", "ROWS") or "ROWS"
                    ),
                )
        return _gerror(404, "NOT_FOUND", "Requested entity was not found.")

    def _token(self, form: dict[str, Any]) -> Reply:
        grant = form.get("grant_type")
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            try:
                claims = jwt.decode(str(form.get("assertion")), certs=self.public_key_pem, audience=None)
            except ValueError as exc:
                return Reply(
                    400, {"error": "invalid_grant", "error_description": f"Invalid JWT Signature: {exc}"}
                )
            if claims.get("iss") != self.service_email or "spreadsheets" not in str(claims.get("scope")):
                return Reply(400, {"error": "invalid_scope", "error_description": "wrong issuer or scope"})
        elif grant == "refresh_token":
            if (form.get("refresh_token"), form.get("client_id"), form.get("client_secret")) != (
                REFRESH_TOKEN,
                CLIENT["client_id"],
                CLIENT["client_secret"],
            ):
                return Reply(400, {"error": "invalid_grant", "error_description": "Bad Request"})
        else:
            return Reply(400, {"error": "unsupported_grant_type"})
        token = "ya29.standin-" + secrets.token_hex(8)
        with self.lock:
            self.token_requests += 1
            self.tokens[token] = time.monotonic() + self.token_lifetime
        return Reply(200, {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"})

    def _metadata(self) -> dict[str, Any]:
        grid = {"rowCount": max(1000, len(self.rows)), "columnCount": 26}
        return {
            "spreadsheetId": SPREADSHEET_ID,
            "properties": {"title": "Pipeline log", "locale": "en_US", "timeZone": "Etc/GMT"},
            "sheets": [{"properties": {**SHEET, "sheetType": "GRID", "gridProperties": grid}}],
            "spreadsheetUrl": f"https://docs.google.com/spreadsheets/d/{SPREADSHEET_ID}/edit",
        }

    def _bounds(self, a1: str) -> tuple[int, int, int, int]:
        """(first row, last row, first col, last col), 1-based and inclusive, of a range on the sheet."""
        sheet, _, cells = a1.rpartition("!")
        if sheet.strip("'") not in ("", SHEET["title"]):
            raise KeyError(sheet)
        if not cells or cells == SHEET["title"]:
            cells = "A1:Z"
        start, _, end = cells.partition(":")
        end = end or start
        (c1, r1), (c2, r2) = (_CELL.match(start).groups(), _CELL.match(end).groups())  # type: ignore[union-attr]
        return int(r1 or 1), int(r2 or 10**6), _col(c1) if c1 else 1, _col(c2) if c2 else 26

    def _values(self, a1: str, dim: str) -> dict[str, Any]:
        r1, r2, c1, c2 = self._bounds(a1)
        grid = [row[c1 - 1 : c2] for row in self.rows[r1 - 1 : r2]]
        while grid and not any(grid[-1]):
            grid.pop()
        width = max((len(row) for row in grid), default=0)
        rows = [list(row) for row in grid]
        for row in rows:
            while row and row[-1] == "":
                row.pop()
        out: dict[str, Any] = {
            "range": f"{SHEET['title']}!{_letters(c1)}{r1}:{_letters(c2)}{min(r2, 1000)}",
            "majorDimension": dim,
        }
        if dim == "COLUMNS":
            cols = [[row[i] if i < len(row) else "" for row in rows] for i in range(width)]
            for col in cols:
                while col and col[-1] == "":
                    col.pop()
            rows = cols
        if rows:
            out["values"] = rows
        return out

    def _append(self, a1: str, request: Request) -> Reply:
        if request.arg("valueInputOption") not in ("RAW", "USER_ENTERED"):
            return _gerror(400, "INVALID_ARGUMENT", "Invalid valueInputOption")
        values = (request.body or {}).get("values")
        if not isinstance(values, list) or not all(isinstance(r, list) for r in values):
            return _gerror(400, "INVALID_ARGUMENT", "Invalid values")
        try:
            self._bounds(a1)
        except KeyError:
            return _gerror(400, "INVALID_ARGUMENT", f"Unable to parse range: {a1}")
        last = len(self.rows)
        while last and not any(self.rows[last - 1]):
            last -= 1
        del self.rows[last:]
        first = last + 1
        width = 0
        for row in values:
            cells = ["" if v is None else str(v) for v in row]
            width = max(width, len(cells))
            self.rows.append(cells)
        end = last + len(values)
        updated = f"{SHEET['title']}!A{first}:{_letters(max(width, 1))}{end}"
        return Reply(
            200,
            {
                "spreadsheetId": SPREADSHEET_ID,
                "tableRange": f"{SHEET['title']}!A1:{_letters(max(width, 1))}{last}" if last else None,
                "updates": {
                    "spreadsheetId": SPREADSHEET_ID,
                    "updatedRange": updated,
                    "updatedRows": len(values),
                    "updatedColumns": width,
                    "updatedCells": sum(len(r) for r in values),
                },
            },
        )
