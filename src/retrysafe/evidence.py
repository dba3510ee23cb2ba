"""Evidence with named fields: the one-line value plus what a person needs next.

A connector's evidence is a string (a post id and link, a message id, a SHA):
it is printed by ``retrysafe step``, compared, and handed back to the
connector's ``verify``. :class:`Evidence` is that same string, carrying named
fields besides (``id``, ``url``, ``room``, ``channel``...), which ``status``
shows and ``status --json`` lists under ``evidence_fields``.

The ledger's ``evidence`` column stays text. Evidence with fields is stored as
one JSON object that starts with :data:`MARKER`; everything else is stored as
it is, so evidence written before fields existed reads exactly as before::

    >>> e = Evidence("42 https://example.org/?p=42", id=42, url="https://example.org/?p=42")
    >>> stored = to_column(e)
    >>> from_column(stored) == e, from_column(stored).fields["id"]
    (True, 42)
    >>> from_column("plain old evidence"), fields_of("plain old evidence")
    ('plain old evidence', {})
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MARKER", "Evidence", "FieldValue", "fields_of", "from_column", "to_column"]

FieldValue = str | int | float | bool

#: how stored evidence with fields begins; a plain value that happens to begin
#: this way is stored wrapped, so the column never reads back differently
MARKER = '{"retrysafe.evidence":'


class Evidence(str):
    """Evidence: the value (a ``str``, unchanged for every reader) and named ``fields``.

    Fields whose value is ``None`` or empty are left out, so a connector can
    pass what the provider answered without checking each one.
    """

    fields: Mapping[str, FieldValue]

    def __new__(cls, value: str, fields: Mapping[str, Any] | None = None,
                **named: Any) -> Evidence:
        self = super().__new__(cls, value)
        merged = {**(fields or {}), **named}
        self.fields = {str(k): v if isinstance(v, (str, int, float, bool)) else str(v)
                       for k, v in merged.items() if v is not None and v != ""}
        return self

    def __repr__(self) -> str:
        return f"Evidence({str(self)!r}, {dict(self.fields)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Evidence, (str(self), dict(self.fields)))


def fields_of(evidence: str | None) -> dict[str, FieldValue]:
    """The named fields of ``evidence`` (none for plain strings)."""
    return dict(evidence.fields) if isinstance(evidence, Evidence) else {}


def to_column(evidence: str | None) -> str | None:
    """The text stored in the ledger's ``evidence`` column."""
    if evidence is None:
        return None
    fields = fields_of(evidence)
    if not fields and not evidence.startswith(MARKER):
        return str(evidence)
    return json.dumps({"retrysafe.evidence": str(evidence), "fields": fields},
                      ensure_ascii=False, separators=(",", ":"))


def from_column(text: str | None) -> str | None:
    """The evidence a column holds: :class:`Evidence` when it was stored with fields,
    else the text itself, exactly as stored."""
    if text is None or not text.startswith(MARKER):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if (not isinstance(data, dict) or set(data) != {"retrysafe.evidence", "fields"}
            or not isinstance(data["retrysafe.evidence"], str)
            or not isinstance(data["fields"], dict)):
        return text
    return Evidence(data["retrysafe.evidence"], data["fields"])
