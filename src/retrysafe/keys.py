"""Outcome keys: rendered from a job's template and validated parameters only.

A key never contains the clock or the attempt: ``weekly-ops-report:{week}``
with ``week = "isoweek"`` gives ``weekly-ops-report:2026-W32`` on every retry.
Keys also become folder names under ``runs/``, through :func:`slug`, a
reversible encoding that can never leave that folder.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping

from .errors import ConfigError, InvalidInput, InvalidParameter

__all__ = [
    "DRILL_MARK",
    "MAX_KEY_LENGTH",
    "PARAM_TYPES",
    "check_name",
    "check_template",
    "render_key",
    "slug",
    "split_step_key",
    "step_key",
    "step_ref",
    "step_suffix",
    "template_fields",
    "unslug",
    "validate_param",
]

DRILL_MARK = "~"
"""A drill trial's outcome key is ``KEY~TRIAL`` (:meth:`retrysafe.engine.Engine.outcome_key`)."""
MAX_KEY_LENGTH = 255
MAX_VALUE_LENGTH = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SLUG_VALUE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_INT = re.compile(r"^-?[0-9]{1,18}$")
_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
_MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")
_ISOWEEK = re.compile(r"^([0-9]{4})-W([0-9]{2})$")


def _no_controls(label: str, value: str) -> None:
    """Refuse control and invisible format characters (bidirectional overrides,
    zero-width spaces and joiners, soft hyphens): they make two keys that look
    the same, or a printed command that reads differently from what it does."""
    if value.isascii() and value.isprintable():
        return
    import unicodedata

    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cs":  # a lone surrogate: bytes that are not UTF-8, as argv keeps them
            raise InvalidParameter(f"{label}: the value is not UTF-8 text")
        if category in ("Cc", "Cf", "Zl", "Zp"):
            kind = {"Cc": "control", "Cf": "invisible"}.get(category, "line break")
            raise InvalidParameter(f"{label}: {kind} character U+{ord(ch):04X} is not allowed")


def _str(name: str, value: str) -> str:
    if value == "":
        raise InvalidParameter(f"parameter {name!r}: must not be empty")
    if value != value.strip():
        raise InvalidParameter(f"parameter {name!r}: leading or trailing whitespace")
    _no_controls(f"parameter {name!r}", value)
    if value.isascii():
        return value
    import unicodedata

    # one spelling per text: "Café" typed precomposed or decomposed is one outcome
    return unicodedata.normalize("NFC", value)


def _slug(name: str, value: str) -> str:
    if not _SLUG_VALUE.match(value):
        raise InvalidParameter(
            f"parameter {name!r}: {value!r} is not a slug (lowercase letters, digits, single dashes)"
        )
    return value


def _int(name: str, value: str) -> str:
    if not _INT.match(value):
        raise InvalidParameter(f"parameter {name!r}: {value!r} is not an integer")
    return str(int(value))


def _date(name: str, value: str) -> str:
    m = _DATE.match(value)
    try:
        if not m:
            raise ValueError
        import datetime as dt  # on use: most commands validate no dates

        return dt.date(int(m[1]), int(m[2]), int(m[3])).isoformat()
    except ValueError:
        raise InvalidParameter(f"parameter {name!r}: {value!r} is not a date (YYYY-MM-DD)") from None


def _month(name: str, value: str) -> str:
    m = _MONTH.match(value)
    if not m or not 1 <= int(m[2]) <= 12 or int(m[1]) < 1:
        raise InvalidParameter(f"parameter {name!r}: {value!r} is not a month (YYYY-MM)")
    return value


def _isoweek(name: str, value: str) -> str:
    m = _ISOWEEK.match(value)
    try:
        if not m:
            raise ValueError
        # fromisocalendar rejects week 53 in 52-week years, and week 0.
        import datetime as dt

        dt.date.fromisocalendar(int(m[1]), int(m[2]), 1)
    except ValueError:
        raise InvalidParameter(
            f"parameter {name!r}: {value!r} is not an ISO week (YYYY-Www, a week that exists)"
        ) from None
    return value


ParamType = Callable[[str, str], str]

PARAM_TYPES: dict[str, ParamType] = {
    "str": _str,
    "slug": _slug,
    "int": _int,
    "date": _date,
    "month": _month,
    "isoweek": _isoweek,
}
"""Parameter types a job may declare. ``occurrence`` is handled separately: it
needs the job's schedule (see :mod:`retrysafe.schedule`)."""

SCHEDULE_TYPES = frozenset({"occurrence"})


def known_types() -> list[str]:
    return sorted([*PARAM_TYPES, *SCHEDULE_TYPES])


def validate_param(name: str, type_name: str, value: str) -> str:
    """Validate ``value`` for ``type_name`` and return its canonical form."""
    if len(value) > MAX_VALUE_LENGTH:
        raise InvalidParameter(
            f"parameter {name!r}: value is {len(value)} characters, at most {MAX_VALUE_LENGTH}"
        )
    try:
        checker = PARAM_TYPES[type_name]
    except KeyError:
        raise ConfigError(f"parameter {name!r}: unknown type {type_name!r}") from None
    return checker(name, value)


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names of a key template; rejects format specs and positional fields."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"key template {template!r}: {exc}") from None
    fields: list[str] = []
    for _literal, field, spec, conv in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conv:
            raise ConfigError(f"key template {template!r}: use plain {{name}} fields only")
        fields.append(field)
    return fields


def check_template(template: str) -> None:
    """What ``job add`` refuses in a new key template beyond :func:`template_fields`: the
    drill trials' mark and characters a key may not hold (a run of it would be refused).
    A config file that already holds such a template loads: only that job's runs are
    refused (:func:`render_key`), not every job's."""
    if DRILL_MARK in template:
        raise ConfigError(f"key template {template!r}: '{DRILL_MARK}' is reserved for drill "
                          "trials' keys (KEY~TRIAL); use another character")
    try:
        _no_controls(f"key template {template!r}", template)
    except InvalidParameter as exc:
        raise ConfigError(str(exc)) from None


def render_key(template: str, params: Mapping[str, str]) -> str:
    """Render ``template`` from already-validated ``params``. ``~`` is refused: it marks
    a drill trial's key (``KEY~TRIAL``), which listings leave out and drill clean-ups
    delete, so a real outcome must never carry it."""
    key = template.format_map(dict(params))
    if DRILL_MARK in key:
        name = next((n for n, v in params.items() if DRILL_MARK in v), None)
        where = f"parameter {name!r}" if name else f"key template {template!r}"
        raise InvalidParameter(f"{where}: '{DRILL_MARK}' is reserved for drill trials' keys "
                               "(KEY~TRIAL); use another character")
    check_key(key)
    return key


def check_key(key: str) -> str:
    if not key:
        raise InvalidInput("outcome key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"outcome key is {len(key)} characters, at most {MAX_KEY_LENGTH}")
    _no_controls("outcome key", key)
    return key


def check_name(kind: str, name: str) -> str:
    """Step, item and job names: short, printable, no path separators or dot-dot."""
    if not isinstance(name, str):  # run.effect(5, ...): the same error, not a TypeError
        raise InvalidInput(f"{kind} name {name!r:.60} is not valid: give it as text (a str of "
                           f"letters, digits, '_', '-', '.'), not {type(name).__name__}")
    if not _NAME.match(name) or ".." in name:
        raise InvalidInput(
            f"{kind} name {name!r} is not valid: use letters, digits, '_', '-', '.' "
            "(at most 64, starting with a letter or digit, no '/' or '..')"
        )
    return name


def step_key(outcome_key: str, step: str, item: str | None = None) -> str:
    """The step's key, handed to providers: ``<outcome key>/<step>[/<item>]``.

    Step and item names never contain ``/``, but outcome keys may
    (``rep:{dept}`` with ``dept = "eng/send"``). Without care, outcome
    ``rep:eng/send`` with step ``mail`` and outcome ``rep:eng`` with step ``send``
    and item ``mail`` would share one key, and one would be taken for the other.
    So an outcome key that contains ``/`` is followed by ``//``: keys without
    ``/`` read as they always did, and no two (outcome, step, item) triples
    render the same string (:func:`split_step_key` is its inverse).
    """
    check_name("step", step)
    sep = "//" if "/" in outcome_key else "/"
    if item is None:
        return f"{outcome_key}{sep}{step}"
    check_name("item", item)
    return f"{outcome_key}{sep}{step}/{item}"


def split_step_key(skey: str) -> tuple[str, str, str | None]:
    """``(outcome key, step, item)`` of a key made by :func:`step_key`."""
    cut = skey.rfind("//")
    if cut >= 0:
        outcome, rest = skey[:cut], skey[cut + 2 :]
    else:
        outcome, _, rest = skey.partition("/")
    step, _, item = rest.partition("/")
    if not outcome or not step or "/" in item:
        raise InvalidInput(f"{skey!r} is not a step key")
    return outcome, step, item or None


def step_ref(outcome_key: str, step: str, item: str | None = None) -> str:
    """How a command names a step of ``outcome_key`` (``retrysafe resolve KEY REF``):
    its name, or, for per-item work, its full step key."""
    return step_key(outcome_key, step, item) if item else step


def step_suffix(outcome_key: str, skey: str) -> str:
    """What follows the outcome in ``skey``: ``step`` or ``step/item``."""
    _, step, item = split_step_key(skey)
    return f"{step}/{item}" if item else step


_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
_MAX_SLUG = 180


def slug(key: str) -> str:
    """A folder name for ``key``: readable, reversible, and never a path.

    Letters, digits, ``-``, ``_`` and ``.`` stay; ``:`` becomes ``+``; every other
    byte becomes ``%XX``. A leading ``.`` is encoded too, so no slug is ``.``,
    ``..`` or hidden. Slugs longer than 180 bytes are cut and end in ``~`` and a
    hash (``summary.json`` keeps the full key).
    """
    out: list[str] = []
    for i, ch in enumerate(key):
        if ch in _SAFE and not (i == 0 and ch == "."):
            out.append(ch)
        elif ch == ":":
            out.append("+")
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    text = "".join(out)
    if len(text) > _MAX_SLUG:
        import hashlib

        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
        text = text[: _MAX_SLUG - 17].rstrip("%0123456789ABCDEF") + "~" + digest
    return text


def unslug(text: str) -> str:
    """Inverse of :func:`slug` for slugs that were not cut."""
    raw = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
            continue
        raw.extend(b":" if ch == "+" else ch.encode("ascii"))
        i += 1
    return raw.decode("utf-8")


def parse_assignments(pairs: tuple[str, ...] | list[str], what: str = "-p") -> dict[str, str]:
    """``NAME=VALUE`` pairs from the command line; a name given twice is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidInput(f"{what} {pair!r}: expected NAME=VALUE")
        if name in out:
            raise InvalidInput(f"{what} {name!r} given twice")
        out[name] = value
    return out
