"""The config checks every connector shares (``connectors/_config.py``): one-line errors."""

from __future__ import annotations

from typing import Any

import pytest

from retrysafe.connectors._config import (
    config_bool,
    env_secret,
    integer,
    number,
    reject_unknown,
    required_str,
    string,
    sub_table,
)
from retrysafe.errors import ConfigError, InvalidInput

WHERE = "connector 'site'"


def test_unknown_fields_are_listed_sorted_and_the_error_type_fits_the_caller() -> None:
    """A typo in a config is a ConfigError; in a payload the caller's InvalidInput."""
    with pytest.raises(ConfigError) as raised:
        reject_unknown(WHERE, {"type": "file", "targte": 1, "mdoe": 2}, {"type", "target", "mode"})
    assert str(raised.value) == "connector 'site': unknown field(s) mdoe, targte"
    with pytest.raises(InvalidInput) as payload:
        reject_unknown("email payload", {"bcc": 1}, {"to"}, error=InvalidInput, list_known=True)
    assert not isinstance(payload.value, ConfigError)
    assert str(payload.value) == "email payload: unknown field(s) bcc (known: to)"
    reject_unknown(WHERE, {"type": "file"}, {"type"})


@pytest.mark.parametrize(("value", "expected"), [(True, True), ("yes", True), ("0", False), ("", False)])
def test_yes_no_settings_take_booleans_and_their_usual_words(value: Any, expected: bool) -> None:
    """TOML booleans and the strings people write for them are read the same way."""
    assert config_bool(WHERE, {"overwrite": value}, "overwrite") is expected


def test_bad_values_are_one_line_config_errors_naming_connector_and_field() -> None:
    """Each check names where and what, on one line, and shows the value given."""
    cases: list[tuple[Any, str]] = [
        (lambda: config_bool(WHERE, {"overwrite": "perhaps"}, "overwrite"),
         "connector 'site': overwrite must be true or false, not 'perhaps'"),
        (lambda: required_str(WHERE, {}, "path", "the CSV file"),
         "connector 'site': 'path' (the CSV file) is required"),
        (lambda: string(WHERE, {"method": ""}, "method", "POST"),
         "connector 'site': 'method' must be a non-empty string"),
        (lambda: number(WHERE, {"timeout": -1}, "timeout", 30.0, unit="seconds"),
         "connector 'site': 'timeout' must be a number of seconds, not -1"),
        (lambda: number(WHERE, {"timeout": True}, "timeout", 30.0),
         "connector 'site': 'timeout' must be a number, not True"),
        (lambda: integer(WHERE, {"lookup_attempts": "many"}, "lookup_attempts", 4),
         "connector 'site': 'lookup_attempts' must be a whole number, not 'many'"),
        (lambda: sub_table(WHERE, {"headers": "x"}, "headers"),
         "connector 'site': 'headers' must be a table"),
    ]  # fmt: skip
    for check, message in cases:
        with pytest.raises(ConfigError) as raised:
            check()
        assert str(raised.value) == message


def test_numbers_may_come_as_text_and_defaults_apply_when_absent() -> None:
    """A number written as text is read; an absent key gives the default."""
    assert number(WHERE, {"timeout": "2.5"}, "timeout", 30.0) == 2.5
    assert number(WHERE, {}, "timeout", 30.0) == 30.0
    assert integer(WHERE, {"lookup_attempts": "3"}, "lookup_attempts", 4) == 3
    assert string(WHERE, {}, "method", "POST") == "POST"
    assert sub_table(WHERE, {}, "headers") is None


def test_a_secret_comes_from_the_named_variable_and_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset variable is an error naming the variable; the value never appears."""
    monkeypatch.setenv("RS_TEST_SECRET", "s3cret-never-shown")
    assert env_secret(WHERE, "RS_TEST_SECRET") == "s3cret-never-shown"
    monkeypatch.setenv("RS_TEST_SECRET", "")
    assert env_secret(WHERE, "RS_TEST_SECRET") == ""
    with pytest.raises(ConfigError, match="RS_TEST_SECRET is not set"):
        env_secret(WHERE, "RS_TEST_SECRET", allow_empty=False)
    monkeypatch.delenv("RS_TEST_SECRET")
    with pytest.raises(ConfigError) as raised:
        env_secret(WHERE, "RS_TEST_SECRET", "password for the database")
    assert str(raised.value) == (
        "connector 'site': environment variable RS_TEST_SECRET (password for the database) is not set"
    )
