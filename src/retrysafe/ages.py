"""Ages as people write them in options and the config: ``90d``, ``12h``, ``2w``."""

from __future__ import annotations

import re

from .errors import InvalidInput

__all__ = ["parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"([0-9]{1,9})([smhdw])")


def parse_age(text: str, what: str = "age") -> float:
    """Seconds in ``text``: a whole number and a unit (``s``, ``m``, ``h``, ``d``, ``w``)."""
    found = _AGE.fullmatch(text.strip()) if isinstance(text, str) else None
    if found is None:
        raise InvalidInput(f"{what} {text!r} is not an age like 90d, 12h, 30m or 2w")
    return float(int(found.group(1)) * _UNITS[found.group(2)])
