"""Contract tests: the Google Sheets connector through gspread against the Sheets v4 stand-in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cases_services import Running, running, service_account_file, sheets_api

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.errors import ConnectorError

KEY = "pipeline:2026-W32/log"
ROW = {"title": "Week 32", "amount": 7}


@pytest.fixture
def sheets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    with running("sheets", monkeypatch) as run:
        run.app.rows = [["title", "amount", "retrysafe_key", "note"]]
        yield run


def log(run: Running, creds: Path, **extra: Any) -> Any:
    return build_connector(
        "pipeline-log",
        {
            "type": "sheets",
            "spreadsheet_id": sheets_api.SPREADSHEET_ID,
            "worksheet": "Log",
            "credentials_file": str(creds),
            "api_base": run.base,
            **extra,
        },
    )


def test_contract_append_puts_the_key_in_its_column_and_lookup_reads_that_column(
    sheets: Running, tmp_path: Path
) -> None:
    """A service account gets a token (signed JWT), the header is read with values:batchGet,
    one row is appended RAW with the key under retrysafe_key; values.get finds it."""
    conn = log(sheets, service_account_file(tmp_path, sheets.base))
    evidence = conn.execute(KEY, ROW)
    assert sheets.app.rows[1] == ["Week 32", "7", KEY, ""]
    assert evidence.startswith("Log!2:2 https://docs.google.com/spreadsheets/d/")
    assert conn.lookup(KEY, {}) == Found(evidence) and conn.lookup(KEY + "-x", {}) == ABSENT
    paths = [r.path.rsplit("/", 1)[-1] for r in sheets.app.requests]
    assert paths[0] == "token" and "values:batchGet" in paths and "'Log'!A1:append" in paths
    append = next(r for r in sheets.app.requests if r.path.endswith(":append"))
    assert append.query["valueInputOption"] == ["RAW"] and append.query["insertDataOption"] == ["INSERT_ROWS"]


def test_contract_an_expired_token_is_refreshed_and_the_append_goes_through_once(
    sheets: Running, tmp_path: Path
) -> None:
    """A 401 for an expired token makes google-auth refresh at token_uri and send again."""
    conn = log(sheets, service_account_file(tmp_path, sheets.base))
    conn.execute(KEY, ROW)
    sheets.app.expire_tokens()
    conn.execute(KEY + "-2", ROW)
    assert sheets.app.token_requests == 2 and len(sheets.app.rows) == 3


def test_contract_authorized_user_credentials_refresh_with_their_refresh_token(
    sheets: Running, tmp_path: Path
) -> None:
    """An authorized-user file (as gspread's OAuth flow writes it) works through the refresh
    grant; token_uri points it at the stand-in's endpoint."""
    creds = tmp_path / "authorized_user.json"
    creds.write_text(
        json.dumps(
            {"type": "authorized_user", "refresh_token": sheets_api.REFRESH_TOKEN, **sheets_api.CLIENT}
        )
    )
    assert log(sheets, creds, token_uri=f"{sheets.base}/token").lookup(KEY, {}) == ABSENT
    assert sheets.app.token_requests == 1


def test_contract_lost_append_answers_are_unknown_refusals_and_bad_credentials_fail(
    sheets: Running, tmp_path: Path
) -> None:
    """A dropped append or a 503 is unknown (the lookup then finds the row); a 400 or a
    token that cannot be had is EffectFailed with nothing appended."""
    conn = log(sheets, service_account_file(tmp_path, sheets.base))
    sheets.app.knob(":append", "drop")
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY, ROW)
    assert not isinstance(raised.value, EffectFailed)
    assert isinstance(conn.lookup(KEY, {}), Found)
    sheets.app.knob(
        ":append",
        "fail",
        status=503,
        body={"error": {"code": 503, "message": "unavailable", "status": "UNAVAILABLE"}},
    )
    with pytest.raises(ConnectorError) as raised:
        conn.execute(KEY + "-2", ROW)
    assert not isinstance(raised.value, EffectFailed)
    sheets.app.knob(
        ":append",
        "fail",
        status=400,
        body={"error": {"code": 400, "message": "bad range", "status": "INVALID_ARGUMENT"}},
    )
    with pytest.raises(EffectFailed, match="bad range"):
        conn.execute(KEY + "-3", ROW)
    other = tmp_path / "other"
    other.mkdir()
    wrong = service_account_file(other, sheets.base)
    wrong.write_text(
        wrong.read_text().replace(sheets_api.SHEET["title"], "x").replace("pipeline@", "intruder@")
    )
    with pytest.raises(EffectFailed, match="nothing was appended"):
        log(sheets, wrong).execute(KEY + "-4", ROW)
    assert [row[2] for row in sheets.app.rows[1:]] == [KEY]


def test_contract_missing_columns_fail_and_two_rows_with_one_key_are_ambiguous(
    sheets: Running, tmp_path: Path
) -> None:
    """A payload field without a column fails before anything is sent; duplicated rows need a person."""
    conn = log(sheets, service_account_file(tmp_path, sheets.base))
    with pytest.raises(EffectFailed, match="no column"):
        conn.execute(KEY, {"colour": "red"})
    conn.execute(KEY, ROW)
    sheets.app.rows.append(["copy", "", KEY, ""])
    result = conn.lookup(KEY, {})
    assert isinstance(result, Ambiguous) and "2 effects" in result.reason and conn.count(KEY) == 2
