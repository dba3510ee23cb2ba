"""The text of ``retrysafe status`` and ``retrysafe history``: one rendering.

The full commands (:mod:`retrysafe.cli.read`) and the console script's fast
path (:mod:`retrysafe._entry`, through :mod:`retrysafe.donestep`) print these
lines, so both give the same bytes. This module stays cheap to import: no
click, no engine, no config parsing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .evidence import fields_of
from .folders import JOURNAL, outcome_dir
from .keys import step_suffix
from .ledger import AttemptRecord, Event, OutcomeRecord, StepRecord
from .timefmt import when

__all__ = ["history_lines", "one_line", "status_lines", "table_lines"]

# control characters (a line break would split a row; an escape sequence would move the
# cursor or recolour the terminal) and the bidirectional overrides that reorder what follows
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in "\t\n\r":
        return " "
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def one_line(text: str) -> str:
    """``text`` as one line a terminal shows as it is: tabs and line breaks become spaces,
    other control characters and bidirectional overrides their escapes (``\\x1b``); a
    reason, evidence or note can hold any of them (a human's note, an agent's error text)."""
    return _UNSAFE.sub(_shown, text) if _UNSAFE.search(text) else text


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A left-aligned table: upper-case headers, columns as wide as their widest cell,
    each cell one line (:func:`one_line`)."""
    cells = [[one_line(str(c)) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [[h.upper() for h in headers], *cells]]


def status_lines(home: Path, out: OutcomeRecord, attempts: Sequence[AttemptRecord],
                 steps: Sequence[StepRecord], hint: str = "") -> list[str]:
    """``retrysafe status KEY``: the outcome, its attempts, its steps and their evidence."""
    key = out.key
    lines = [f"outcome   {key}", f"job       {out.job}",
             f"state     {out.state}" + (f": {one_line(out.reason)}" if out.reason else "")]
    if hint:
        lines.append(f"unblock   {hint}")
    accepted = next((a.number for a in attempts if a.id == out.accepted_attempt), None)
    lines.append(f"attempts  {out.attempts}" + (f" (accepted: {accepted})" if accepted else ""))
    folder = outcome_dir(home, out.job, key)
    if folder.is_dir():
        lines.append(f"folder    {folder}")
    else:  # its attempts made no folder (folders.py): their lines are in the journal
        lines.append(f"journal   {folder.parent / JOURNAL}")
    for a in attempts:
        ctx = ", ".join(f"{k}={v}" for k, v in sorted(a.context.items()))
        lines.append(f"  attempt {a.number}: {a.state} {a.result} started {when(a.started_at)} "
                     f"{a.holder.shown()}" + (f" [{ctx}]" if ctx else ""))
    if steps:
        lines.append("")
        lines += table_lines(
            ["step", "class", "state", "evidence / reason"],
            [[s.name + (f"/{s.item}" if s.item else ""), s.effect_class or s.kind, s.state,
              (s.evidence or "") if s.state == "done" else s.reason] for s in steps])
        named = [(s, fields_of(s.evidence)) for s in steps if s.state == "done"]
        if any(fields for _, fields in named):
            lines += ["", "evidence"]
            for s, fields in named:
                for field, value in fields.items():
                    lines.append(f"  {s.name + (f'/{s.item}' if s.item else '')}.{field} = "
                                 f"{one_line(str(value))}")
    return lines


def history_lines(key: str, events: Sequence[Event]) -> list[str]:
    """``retrysafe history KEY``: every transition, oldest first."""
    return table_lines(
        ["time", "fence", "actor", "what", "from", "to", "reason"],
        [[when(e.at), e.fence, e.actor,
          e.kind + (f" {step_suffix(key, e.step_key)}" if e.step_key else ""),
          e.from_state or "-", e.to_state, e.reason] for e in events])
