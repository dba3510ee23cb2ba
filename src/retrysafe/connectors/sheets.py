"""Google Sheets: one appended row per step key, through ``gspread``.

The worksheet's first row names its columns; one of them (``key_column``,
default ``retrysafe_key``) holds the step key of each row the connector
appends. ``execute`` reads the header row (``values:batchGet``) and appends one
row (``values.append``, ``RAW``, ``INSERT_ROWS``) with the payload's fields
under their columns and the key in the key column; the lookup reads the key
column (``values.get``): no row is Absent, one row Found, more Ambiguous.
Sheets reads are consistent with writes, so Absent is proof.

Credentials are handled as ``gspread`` does: a service-account key file or an
authorized-user file (``credentials_file``), with google-auth fetching and
refreshing the access token at the file's ``token_uri``.

Evidence: ``Log!5:5 https://docs.google.com/spreadsheets/d/ID/edit#gid=0&range=5:5``.

Example config::

    [connectors.pipeline-log]
    type = "sheets"
    spreadsheet_id = "1AbC..."
    worksheet = "Log"
    credentials_file = "/etc/retrysafe/sheets-service-account.json"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import number, optional_str, reject_unknown, required_str, string
from ._web import check_url, one_match, refused
from .base import ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

try:
    import gspread
    import requests
    from google.auth.credentials import Credentials
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account
except ImportError as exc:  # an optional dependency
    raise ConfigError(f"the sheets connector needs {exc.name}: pip install 'retrysafe[sheets]'") from None

__all__ = ["SheetsConnector"]

API_BASE = "https://sheets.googleapis.com"
SCOPES = ["https://www.googleapis.com/auth/spreadsheets"]
_FIELDS = frozenset(
    {
        "type",
        "spreadsheet_id",
        "worksheet",
        "key_column",
        "credentials_file",
        "token_uri",
        "api_base",
        "timeout",
    }
)
_ROW = re.compile(r"![A-Z]*([0-9]+)")


class _Session(AuthorizedSession):
    """google-auth's session, sending Sheets requests to ``api_base`` when it is not Google's."""

    def __init__(self, creds: Credentials, api_base: str) -> None:
        super().__init__(creds)  # type: ignore[no-untyped-call]
        self._api_base = api_base

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if url.startswith(API_BASE):
            url = self._api_base + url[len(API_BASE) :]
        return super().request(method, url, *args, **kwargs)  # type: ignore[no-untyped-call,no-any-return]


def load_credentials(path: Path, where: str, token_uri: str | None = None) -> Credentials:
    """A service-account key or an authorized-user file, as gspread reads them.

    ``token_uri`` replaces the token endpoint (google-auth always sends an
    authorized user's refresh to Google's own endpoint otherwise)."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read credentials_file {str(path)!r}: {exc}") from None
    kind = info.get("type") if isinstance(info, dict) else None
    creds: Any = None
    try:
        if kind == "service_account":
            creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)  # type: ignore[no-untyped-call]
        elif kind == "authorized_user":
            creds = user_credentials.Credentials.from_authorized_user_info(info, scopes=SCOPES)  # type: ignore[no-untyped-call]
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: credentials_file {str(path)!r} is incomplete: {exc}") from None
    if creds is not None:
        return creds.with_token_uri(token_uri) if token_uri else creds  # type: ignore[no-any-return]
    raise ConfigError(
        f"{where}: credentials_file {str(path)!r} is neither a service_account nor an authorized_user file"
    )


class SheetsConnector(ConnectorBase):
    """Appends a row carrying the step key; finds it by the key column."""

    effect_class = "publish"

    def __init__(
        self,
        name: str,
        spreadsheet_id: str,
        creds: Credentials,
        *,
        worksheet: str = "Sheet1",
        key_column: str = "retrysafe_key",
        api_base: str = API_BASE,
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.where = f"connector {name!r}"
        self.spreadsheet_id = spreadsheet_id
        self.worksheet_title = worksheet
        self.key_column = key_column
        self.api_base = check_url(api_base, f"{self.where}: api_base").rstrip("/")
        self.timeout = timeout
        self._creds = creds
        self._sheet: gspread.Worksheet | None = None

    def __repr__(self) -> str:
        return f"SheetsConnector({self.name!r}, {self.spreadsheet_id}/{self.worksheet_title})"

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> SheetsConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, _FIELDS)
        creds_file = optional_str(where, table, "credentials_file")
        path = Path(creds_file).expanduser() if creds_file else gspread.auth.DEFAULT_SERVICE_ACCOUNT_FILENAME
        return cls(
            name,
            required_str(where, table, "spreadsheet_id"),
            load_credentials(Path(path), where, optional_str(where, table, "token_uri")),
            worksheet=string(where, table, "worksheet", "Sheet1"),
            key_column=string(where, table, "key_column", "retrysafe_key"),
            api_base=string(where, table, "api_base", API_BASE),
            timeout=number(where, table, "timeout", 30.0, unit="seconds"),
        )

    def _worksheet(self) -> gspread.Worksheet:
        if self._sheet is None:
            client = gspread.Client(auth=self._creds, session=_Session(self._creds, self.api_base))
            client.set_timeout(self.timeout)
            self._sheet = client.open_by_key(self.spreadsheet_id).worksheet(self.worksheet_title)
        return self._sheet

    def _header(self, sheet: gspread.Worksheet) -> list[str]:
        [first] = sheet.batch_get(["1:1"])
        header = [str(c) for c in (first[0] if first else [])]
        if self.key_column not in header:
            raise EffectFailed(
                f"{self.where}: worksheet {self.worksheet_title!r} has no column {self.key_column!r} in its "
                "first row; add it there"
            )
        return header

    def _evidence(self, sheet: gspread.Worksheet, row: int) -> Evidence:
        url = f"https://docs.google.com/spreadsheets/d/{self.spreadsheet_id}/edit#gid={sheet.id}"
        return Evidence(f"{sheet.title}!{row}:{row} {url}&range={row}:{row}", row=row,
                        worksheet=sheet.title, url=f"{url}&range={row}:{row}")

    def validate(self, payload: Payload) -> None:
        if self.key_column in payload:
            raise InvalidInput(f"{self.where}: the payload must not set the key column {self.key_column!r}")
        for field, value in payload.items():
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise InvalidInput(f"{self.where}: field {field!r} must be text or a number")

    def execute(self, step_key: str, payload: Payload) -> str:
        self.validate(payload)
        try:
            sheet = self._worksheet()
            header = self._header(sheet)
        except (gspread.exceptions.GSpreadException, requests.RequestException, GoogleAuthError) as exc:
            # The row was not sent yet: whatever went wrong, nothing was appended.
            raise EffectFailed(f"{self.where}: {self._said(exc)}; nothing was appended") from exc
        missing = sorted(set(payload) - set(header))
        if missing:
            raise EffectFailed(
                f"{self.where}: worksheet {sheet.title!r} has no column(s) {', '.join(missing)}"
            )
        row: list[Any] = ["" for _ in header]
        for field, value in payload.items():
            row[header.index(field)] = value
        row[header.index(self.key_column)] = step_key
        try:
            answer = sheet.append_row(
                row,
                value_input_option=gspread.utils.ValueInputOption.raw,
                insert_data_option=gspread.utils.InsertDataOption.insert_rows,
                table_range="A1",
            )
        except GoogleAuthError as exc:  # no token: the append itself was never sent
            raise EffectFailed(f"{self.where}: {self._said(exc)}; nothing was appended") from exc
        except gspread.exceptions.APIError as exc:
            if refused(exc.response.status_code):
                raise EffectFailed(f"{self.where}: {self._said(exc)}; nothing was appended") from exc
            raise ConnectorError(f"{self.where}: {self._said(exc)}; the row may have been appended") from exc
        except requests.RequestException as exc:
            raise ConnectorError(f"{self.where}: {self._said(exc)}; the row may have been appended") from exc
        match = _ROW.search(str((answer.get("updates") or {}).get("updatedRange", "")))
        if match is None:
            raise ConnectorError(f"{self.where}: values.append answered without updates.updatedRange")
        return self._evidence(sheet, int(match.group(1)))

    @staticmethod
    def _said(exc: Exception) -> str:
        if isinstance(exc, gspread.exceptions.APIError):
            return f"Sheets answered {exc.response.status_code}: {exc.error.get('message', '')}"
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]

    # --- lookup -------------------------------------------------------------

    def _rows(self, step_key: str) -> tuple[gspread.Worksheet, list[int]]:
        try:
            sheet = self._worksheet()
            column = self._header(sheet).index(self.key_column) + 1
            keys = sheet.col_values(column)
        except EffectFailed as exc:
            raise ConnectorError(str(exc)) from None
        except (gspread.exceptions.GSpreadException, requests.RequestException, GoogleAuthError) as exc:
            raise ConnectorError(
                f"{self.where}: reading the key column: {self._said(exc)}; try later"
            ) from exc
        return sheet, [i for i, value in enumerate(keys, start=1) if i > 1 and value == step_key]

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """The rows whose key column holds the step key: none, one or (ambiguous) more."""
        sheet, rows = self._rows(step_key)
        searched = f"column {self.key_column!r} of worksheet {sheet.title!r}"
        return one_match([self._evidence(sheet, r) for r in rows], searched=searched)

    def verify(self, step_key: str, evidence: str) -> bool:
        """A row still carries the key (rows move when rows above them are deleted)."""
        return isinstance(self.lookup(step_key, {}), Found)

    def count(self, step_key: str) -> int:
        return len(self._rows(step_key)[1])
