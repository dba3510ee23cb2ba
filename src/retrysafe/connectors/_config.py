"""Reading a ``[connectors.NAME]`` table: the checks every connector shares.

Each function takes ``where`` (``"connector 'mail'"``, or a sub-table such as
``"connector 'mail' [smtp]"``), the table and a key, and either returns the
value or raises a one-line :class:`~retrysafe.errors.ConfigError` naming both.
:func:`parse_bool` is also used for payload values (``--with overwrite=true``),
where a bad value is the caller's :class:`~retrysafe.errors.InvalidInput`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import ConfigError, InvalidInput, RetrysafeError

__all__ = [
    "config_bool",
    "env_secret",
    "integer",
    "number",
    "one_of",
    "optional_secret",
    "optional_str",
    "parse_bool",
    "reject_unknown",
    "required_secret",
    "required_str",
    "string",
    "sub_table",
]

N = TypeVar("N", int, float)

_TRUE = ("true", "yes", "1", "on")
_FALSE = ("false", "no", "0", "off", "")


def reject_unknown(
    where: str,
    table: Mapping[str, Any],
    known: Iterable[str],
    *,
    noun: str = "field",
    error: type[RetrysafeError] = ConfigError,
    list_known: bool = False,
) -> None:
    """Refuse keys the connector does not know: a typo must not be silently ignored.

    ``error`` is :class:`InvalidInput` for a payload; ``list_known`` adds the
    accepted names to the message.
    """
    allowed = set(known)
    unknown = sorted(set(table) - allowed)
    if unknown:
        hint = f" (known: {', '.join(sorted(allowed))})" if list_known else ""
        raise error(f"{where}: unknown {noun}(s) {', '.join(unknown)}{hint}")


def required_str(where: str, table: Mapping[str, Any], key: str, hint: str = "") -> str:
    """A non-empty string; ``hint`` says what it is (``'path' (the CSV file) is required``)."""
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: '{key}'{f' ({hint})' if hint else ''} is required")
    return value


def optional_str(where: str, table: Mapping[str, Any], key: str) -> str | None:
    """A string when given, else ``None``."""
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}: '{key}' must be a string")
    return value


def string(where: str, table: Mapping[str, Any], key: str, default: str) -> str:
    """A non-empty string, ``default`` when not given."""
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return value


def one_of(where: str, table: Mapping[str, Any], key: str, choices: Sequence[str]) -> str:
    """One of ``choices``; the first is the default."""
    value = table.get(key, choices[0])
    if value not in choices:
        raise ConfigError(f"{where}: '{key}' must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def parse_bool(value: Any, what: str) -> bool:
    """Booleans arrive as TOML booleans from the config and as strings from ``--with``.

    A bad value raises :class:`InvalidInput` ``"<what> must be true or false"``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE:
        return True
    if isinstance(value, str) and value.lower() in _FALSE:
        return False
    raise InvalidInput(f"{what} must be true or false, not {value!r}")


def config_bool(where: str, table: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A yes/no setting (``true``, or a string such as ``"yes"``)."""
    try:
        return parse_bool(table.get(key, default), f"{where}: {key}")
    except InvalidInput as exc:
        raise ConfigError(exc.message) from None


def number(where: str, table: Mapping[str, Any], key: str, default: float, *, unit: str = "") -> float:
    """A number from 0 up (a TOML number, or a string holding one); ``unit`` names it."""
    what = f"a number of {unit}" if unit else "a number"
    return _non_negative(where, table, key, default, float, what)


def integer(where: str, table: Mapping[str, Any], key: str, default: int) -> int:
    """A whole number from 0 up (a TOML number, or a string holding one)."""
    return _non_negative(where, table, key, default, int, "a whole number")


def _non_negative(
    where: str, table: Mapping[str, Any], key: str, default: N, kind: type[N], what: str
) -> N:
    value = table.get(key, default)
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        result = kind(value)
    except ValueError:
        result = kind(-1)
    if not result >= 0:  # also refuses nan
        raise ConfigError(f"{where}: '{key}' must be {what}, not {value!r}")
    return result


def sub_table(where: str, table: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """A nested table (``[connectors.NAME.smtp]``, ``headers = {...}``), or ``None``."""
    value = table.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{where}: '{key}' must be a table")
    return value


def env_secret(where: str, variable: str, purpose: str = "", *, allow_empty: bool = True) -> str:
    """The secret in environment variable ``variable`` (the config names it, ``*_env``).

    The config never holds the secret itself; a variable that is not set is a
    :class:`ConfigError` that names the variable and never a value.
    """
    value = os.environ.get(variable)
    if value is None or (not value and not allow_empty):
        what = f"{variable} ({purpose})" if purpose else variable
        raise ConfigError(f"{where}: environment variable {what} is not set")
    return value


def required_secret(where: str, table: Mapping[str, Any], key: str, purpose: str) -> str:
    """The secret in the environment variable that ``key`` (``token_env``) names; both required."""
    return env_secret(
        where, required_str(where, table, key, f"the variable holding {purpose}"), purpose, allow_empty=False
    )


def optional_secret(where: str, table: Mapping[str, Any], key: str, purpose: str) -> str | None:
    """The secret in the variable ``key`` names when ``key`` is given (else ``None``).

    For connectors with two ways in (a bot token or a webhook URL): the caller
    checks that exactly one was given."""
    variable = optional_str(where, table, key)
    return env_secret(where, variable, purpose, allow_empty=False) if variable else None
