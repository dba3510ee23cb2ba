"""A ledger as JSON lines: every row of every table, to move it between backends.

The file (``retrysafe export``) starts with a header line naming the schema
version (and how many rows of each table follow, so a file cut short is noticed),
then one line per row, each ``{"table": NAME, "row": {COLUMN: VALUE}}``:
outcomes, attempts, steps, history, notifications, in that order. Rows are the tables' own
columns, so nothing is lost or reinterpreted on the way. ``retrysafe prune
--export`` appends the rows it removes in the same form (a header per batch),
so a pruned outcome can be imported back.

Loading (:func:`load`) is one transaction: all of it or nothing. It refuses a
target that holds anything, unless ``merge``, and then refuses any row whose
key the target already has.
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from ..errors import InvalidInput
from . import moves
from .backend import Tx
from .core import LedgerCore
from .listing import note_unlogged
from .migrations import SCHEMA_VERSION

__all__ = ["FORMAT", "TABLES", "Loaded", "dump", "header", "load", "read_file",
           "refuse_ledger_file", "rows_of", "write_lines"]

FORMAT = "retrysafe-ledger"
"""The header's ``format``: what a file of ledger rows says it is."""

#: table -> (the columns of the current schema, the column rows are ordered by, the unique key)
TABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "rs_outcomes": (
        ("key", "job", "params", "state", "reason", "cause", "fence", "attempts", "budget_base",
         "current_attempt", "accepted_attempt", "created_at", "updated_at"),
        "key", "key"),
    "rs_attempts": (
        ("id", "outcome_key", "number", "fence", "state", "result", "holder_host", "holder_pid",
         "holder_started", "lease_expires", "context", "started_at", "ended_at"),
        "outcome_key, number", "id"),
    "rs_steps": (
        ("step_key", "outcome_key", "name", "item", "kind", "effect_class", "state", "attempt_id",
         "fence", "evidence", "artifact", "checksum", "check_cmd", "connector", "fingerprint",
         "reason", "cause", "approved_by", "runner_host", "runner_pid", "runner_started", "tries",
         "created_at", "updated_at", "previous_state"),
        "outcome_key, step_key", "step_key"),
    "rs_events": (
        ("id", "outcome_key", "step_key", "at", "attempt_id", "fence", "actor", "kind",
         "from_state", "to_state", "reason"),
        "id", "id"),
    "rs_notifications": (
        ("id", "outcome_key", "job", "event_id", "event", "channel", "state", "tries",
         "last_error", "body", "claimed_until", "created_at", "updated_at", "sent_at"),
        "id", "id"),
}
SAME_ROWS_SINCE = 10
"""Exports of ledgers of this schema version and later have the same rows (migrations
11 and 12 changed how the history is stored, not the rows it exports): one imports into
another."""
_INTEGER = frozenset({"fence", "attempts", "budget_base", "number", "holder_pid", "runner_pid",
                      "tries", "event_id"})
_REAL = frozenset({"created_at", "updated_at", "lease_expires", "started_at", "ended_at", "at",
                   "claimed_until", "sent_at"})
_SERIAL = ("rs_events", "rs_notifications")
"""Tables whose ``id`` is a number the ledger draws (the others' keys are text)."""
_IDENTITY_TEXT = re.compile(r"^[0-9a-f]{1,64}$")
_OUTCOME_COLUMN = {"rs_outcomes": "key", "rs_attempts": "outcome_key", "rs_steps": "outcome_key",
                   "rs_events": "outcome_key", "rs_notifications": "outcome_key"}


class Loaded(NamedTuple):
    """What :func:`load` wrote: rows per table."""

    counts: dict[str, int]


_IDENTITY = "SELECT value FROM rs_meta WHERE name = 'identity'"


def header(ledger: LedgerCore, counts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The first line: what the file is, and the ledger's identity (identity.py), which
    a ledger imported whole takes over, so the homes that used the source accept it;
    with ``counts``, how many rows of each table follow (:func:`load` checks them)."""
    with ledger.backend.transaction(write=False) as tx:
        row = tx.one(_IDENTITY)
    return {"format": FORMAT, "schema_version": ledger.schema_version(),
            **({"identity": row["value"]} if row else {}),
            **({"rows": dict(counts)} if counts is not None else {})}


def rows_of(tx: Tx, table: str, keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows of ``table`` (only those of the outcomes ``keys``), in a stable order."""
    columns, order, _ = TABLES[table]
    sql = f"SELECT {', '.join(columns)} FROM {table}"
    if keys is not None:
        if not keys:
            return []
        sql += f" WHERE {_OUTCOME_COLUMN[table]} IN ({', '.join('?' * len(keys))})"
    return tx.rows(f"{sql} ORDER BY {order}", tuple(keys or ()))


def dump(ledger: LedgerCore) -> Iterator[dict[str, Any]]:
    """Every row of the ledger, header first, read in one transaction (a consistent copy)."""
    with ledger.backend.transaction(write=False) as tx:
        tables = {t: rows_of(tx, t) for t in TABLES}
    yield header(ledger, {t: len(rows) for t, rows in tables.items()})
    for table, rows in tables.items():
        for row in rows:
            yield {"table": table, "row": row}


def write_lines(fh: IO[str], records: Iterable[Mapping[str, Any]]) -> int:
    """Write ``records`` as JSON lines; returns how many."""
    n = 0
    for rec in records:
        fh.write(json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
        n += 1
    return n


def open_private(path: Path, *, append: bool) -> IO[str]:
    """``path`` for writing, created ``0600`` (a ledger holds evidence and reasons)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
    return os.fdopen(fd, "w", encoding="utf-8")


def refuse_ledger_file(path: Path, url: str) -> None:
    """Refuse to write ``path`` when it is the SQLite ledger at ``url`` (or one of its
    ``-wal``, ``-shm``, ``-journal`` files): writing rows over it would destroy it."""
    if not url.startswith("sqlite:///"):
        return
    db = Path(url.removeprefix("sqlite:///"))
    for suffix in ("", "-wal", "-shm", "-journal"):
        ledger_file = db.with_name(db.name + suffix)
        try:
            same = (os.path.realpath(path) == os.path.realpath(ledger_file)
                    or (path.exists() and ledger_file.exists()
                        and os.path.samefile(path, ledger_file)))
        except (OSError, ValueError):
            continue
        if same:
            raise InvalidInput(f"{path} is the ledger's own file {ledger_file}: writing the rows "
                               "over it would destroy the ledger; give another FILE")


def read_file(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON lines file, each checked to be an object."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"{path} line {n}: not UTF-8 text (byte {exc.start + 1})"
                                   ) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise InvalidInput(f"{path} line {n}: not JSON ({exc})") from None
            if not isinstance(rec, dict):
                raise InvalidInput(f"{path} line {n}: not a JSON object")
            yield rec


def _check(rec: Mapping[str, Any], n: int, target_version: int) -> tuple[str, dict[str, Any]] | None:
    """A row to load (table, row), or ``None`` for a valid header line."""
    if "format" in rec:
        if rec.get("format") != FORMAT:
            raise InvalidInput(f"record {n}: not a retrysafe ledger export ({rec.get('format')!r})")
        version = rec.get("schema_version")
        if version != target_version and not (
                type(version) is int and min(version, target_version) >= SAME_ROWS_SINCE
                and max(version, target_version) <= SCHEMA_VERSION):
            raise InvalidInput(
                f"the export has schema version {version}, the target ledger {target_version}: "
                f"export and import with the same retrysafe, both ledgers migrated "
                f"(this retrysafe knows up to {SCHEMA_VERSION})")
        identity = rec.get("identity")
        if identity is not None and not (isinstance(identity, str)
                                         and _IDENTITY_TEXT.match(identity)):
            raise InvalidInput(f"record {n}: the header's identity {reprlib.repr(identity)} is not one a "
                               "ledger draws (the file was edited); nothing was imported")
        counts = rec.get("rows")
        if counts is not None and not (isinstance(counts, dict) and set(counts) == set(TABLES)
                                       and all(type(v) is int for v in counts.values())):
            raise InvalidInput(f"record {n}: the header's rows {reprlib.repr(counts)} are not a count per "
                               "ledger table (the file was edited); nothing was imported")
        return None
    table, row = rec.get("table"), rec.get("row")
    if table not in TABLES or not isinstance(row, dict):
        raise InvalidInput(f"record {n}: expected a header or {{\"table\", \"row\"}} with a "
                           f"ledger table, got {sorted(rec)}")
    columns = TABLES[table][0]
    if set(row) != set(columns):
        odd = sorted(set(row) ^ set(columns))
        raise InvalidInput(f"record {n} ({table}): columns differ from this schema's ({odd})")
    for column, value in row.items():
        if not _fits(table, column, value):
            raise InvalidInput(f"record {n} ({table}): {column} {reprlib.repr(value)} is not a "
                               "value of that column (the file was edited); nothing was imported")
    return table, row


def _fits(table: str, column: str, value: object) -> bool:
    """Whether ``value`` (from JSON) is one the ledger could have written in ``column``."""
    if (column == "id" and table in _SERIAL) or column == "event_id":
        return type(value) is int
    if value is None:
        return True  # the column's NOT NULL, if any, refuses it
    if column in _INTEGER:
        return type(value) is int
    if column in _REAL:
        return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False  # a lone surrogate (\udc80) in the JSON
    return True


def load(ledger: LedgerCore, records: Iterable[Mapping[str, Any]], *, merge: bool = False) -> Loaded:
    """Write ``records`` (as :func:`dump` gives them) into ``ledger``, in one transaction.

    Refused when the ledger holds anything, unless ``merge``; with ``merge``,
    refused when any outcome, attempt or step key is already there. History
    ids are kept on an empty ledger and renumbered (in order) when merging.
    """
    target_version = ledger.schema_version()
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    batch_of: dict[int, int] = {}  # id(row) -> its batch (a prune --export file has several)
    heads: list[tuple[int, Mapping[str, Any]]] = []  # each batch's header, with its number
    counted = dict.fromkeys(TABLES, 0)
    unique: set[tuple[str, Any]] = set()  # the batch's (table, key)s
    latest: dict[str, int] = {}  # outcome key -> the last batch that holds it
    superseded: set[tuple[int, str]] = set()  # (batch, outcome key) a later batch holds again
    for n, rec in enumerate(records, 1):
        if not heads and "format" not in rec:
            raise InvalidInput(f"record {n}: the file does not start with a retrysafe header line")
        got = _check(rec, n, target_version)
        if got is None:
            if heads:
                _count(heads[-1], counted)
            heads.append((n, rec))
            counted = dict.fromkeys(TABLES, 0)
            unique = set()
            continue
        table, row = got
        key = row[TABLES[table][2]]
        if (table, key) in unique:
            raise InvalidInput(f"record {n}: {table} {key} is in its part of the file twice "
                               "(the file was edited); nothing was imported")
        unique.add((table, key))
        if table == "rs_outcomes":
            if key in latest:
                _supersede(heads, latest[key], key, n)
                superseded.add((latest[key], key))
            latest[key] = len(heads)
        counted[table] += 1
        rows[table].append(row)
        batch_of[id(row)] = len(heads)
    if not heads:
        raise InvalidInput("nothing to import: the file has no retrysafe header line")
    _count(heads[-1], counted)
    identity = heads[0][1].get("identity")
    # an outcome a prune exported again (killed after its export, before its delete, then
    # run again): the last batch's rows are the ledger's last word on it
    for table, column in _OUTCOME_COLUMN.items():
        rows[table] = [r for r in rows[table] if (batch_of[id(r)], r[column]) not in superseded]
    backend = ledger.backend
    with backend.transaction() as tx:
        if not merge:
            held = [t for t in TABLES if tx.one(f"SELECT 1 AS x FROM {t} LIMIT 1")]
            if held:
                raise InvalidInput(f"the target ledger {ledger.url} is not empty ({', '.join(held)}); "
                                   "import into an empty ledger, or add --merge")
        else:
            _refuse_conflicts(tx, rows)
        # rows whose history may be elsewhere (a prune --export file); a whole ledger
        note_unlogged(tx, whole=not merge)
        for table in ("rs_outcomes", "rs_attempts", "rs_steps"):
            columns = TABLES[table][0]
            # SQLite's triggers write a history row for a step inserted with an
            # attempt: insert without it, then set it (the history is imported as it is)
            insert_cols = (tuple(c for c in columns if c != "attempt_id") if table == "rs_steps"
                           else columns)
            sql = (f"INSERT INTO {table} ({', '.join(insert_cols)})"
                   f" VALUES ({', '.join('?' * len(insert_cols))})")
            for row in rows[table]:
                tx.run(sql, tuple(row[c] for c in insert_cols))
                if table == "rs_steps" and row["attempt_id"] is not None:
                    tx.run("UPDATE rs_steps SET attempt_id = ? WHERE step_key = ?",
                           (row["attempt_id"], row["step_key"]))
        keep_ids = not merge
        # the history as rs_history holds it (migration 11): the outcome by its id, the
        # step by what its key adds, the attempt by its number, the attempt's own actor empty
        numbers = {(a["outcome_key"], a["id"]): a["number"] for a in rows["rs_attempts"]}
        outcomes = {o["key"] for o in rows["rs_outcomes"]}
        cols = ("id, " if keep_ids else "") + moves.HISTORY_COLUMNS
        marks = "(?, " + moves.HISTORY_VALUES[1:] if keep_ids else moves.HISTORY_VALUES
        sql = f"INSERT INTO rs_history ({cols}) VALUES {marks}"
        # a kind or state this version does not write (an older file, an edit) gets a code
        # of its own (migration 12)
        moves.add_words(tx, (str(r[c]) for r in rows["rs_events"]
                                           for c in ("kind", "from_state", "to_state")))
        # merging: (batch, the file's history id) -> the ledger's; ids repeat across the
        # batches of a prune --export file appended to from more than one ledger
        renumbered: dict[tuple[int, int], int] = {}
        for row in sorted(rows["rs_events"], key=lambda r: (0 if keep_ids else batch_of[id(r)],
                                                            int(r["id"]))):
            values = (*((row["id"],) if keep_ids else ()), *_history_values(row, outcomes, numbers))
            if keep_ids:
                tx.run(sql, values)
            else:
                added = tx.one(sql + " RETURNING id", values)
                assert added is not None
                renumbered[(batch_of[id(row)], int(row["id"]))] = int(added["id"])
        if keep_ids and rows["rs_events"] and backend.name == "postgresql":
            tx.rows("SELECT setval(pg_get_serial_sequence('rs_history', 'id'),"
                    " (SELECT MAX(id) FROM rs_history))")
        # notifications name the history row of their transition (0: a missed
        # occurrence, which has none): merged, they name the row's new id and take ids
        # of the ledger's own; one the ledger already holds (the same transition and
        # channel: a missed occurrence noted again since) is kept as it is there
        columns = TABLES["rs_notifications"][0]
        note_cols = columns if keep_ids else tuple(c for c in columns if c != "id")
        sql = (f"INSERT INTO rs_notifications ({', '.join(note_cols)})"
               f" VALUES ({', '.join('?' * len(note_cols))})"
               + ("" if keep_ids else
                  " ON CONFLICT (outcome_key, event_id, event, channel) DO NOTHING"))
        for row in sorted(rows["rs_notifications"], key=lambda r: int(r["id"])):
            event = int(row["event_id"])
            if not keep_ids and event:
                found = renumbered.get((batch_of[id(row)], event))
                if found is None:
                    raise InvalidInput(
                        f"cannot merge: notification {row['id']} of {row['outcome_key']} names "
                        f"history row {event}, which its part of the file does not hold; "
                        "nothing was imported")
                event = found
            tx.run(sql, tuple(event if c == "event_id" else row[c] for c in note_cols))
        if keep_ids and rows["rs_notifications"] and backend.name == "postgresql":
            tx.rows("SELECT setval(pg_get_serial_sequence('rs_notifications', 'id'),"
                    " (SELECT MAX(id) FROM rs_notifications))")
        if not merge and identity is not None:
            tx.run("DELETE FROM rs_meta WHERE name = 'identity'")
            tx.run("INSERT INTO rs_meta (name, value) VALUES ('identity', ?)", (identity,))
    return Loaded({t: len(r) for t, r in rows.items()})


def _history_values(row: Mapping[str, Any], outcomes: set[str],
                    numbers: Mapping[tuple[str, str], int]) -> tuple[Any, ...]:
    """An exported history row as :data:`moves.HISTORY_COLUMNS` values (the outcome by
    its key, which the insert turns into its id); refused when it names an outcome,
    step or attempt the file does not hold, which only an edit makes."""
    key, attempt_id = row["outcome_key"], row["attempt_id"]
    if key not in outcomes:
        raise InvalidInput(f"history row {row['id']} is about outcome {key}, which the file does "
                           "not hold (the file was edited); nothing was imported")
    try:
        step = moves.step_suffix(key, row["step_key"])
    except ValueError:
        raise InvalidInput(f"history row {row['id']} names step {row['step_key']}, which is not "
                           f"one of outcome {key} (the file was edited); nothing was imported"
                           ) from None
    number = None
    if attempt_id is not None:
        number = numbers.get((key, attempt_id))
        if number is None:
            raise InvalidInput(f"history row {row['id']} names attempt {attempt_id}, which the "
                               f"file does not hold for outcome {key} (the file was edited); "
                               "nothing was imported")
    actor = "" if number is not None and row["actor"] == f"attempt-{number}" else row["actor"]
    return (key, step, row["at"], number, row["fence"], actor, row["kind"], row["from_state"],
            row["to_state"], row["reason"])


def _count(head: tuple[int, Mapping[str, Any]], counted: Mapping[str, int]) -> None:
    """Refuse a batch that stops short of the rows its header counts, as a file cut
    at a line's end does: every table whole up to one that is short, none after it.
    (Rows taken out of an export on purpose, an outcome's from every table, pass.)"""
    n, rec = head
    want = rec.get("rows")
    if want is None:
        return
    tables = list(TABLES)
    short = next((i for i, t in enumerate(tables) if counted[t] < want[t]), None)
    if short is None or any(counted[t] != want[t] for t in tables[:short]) \
            or any(counted[t] for t in tables[short + 1:]):
        return
    table = tables[short]
    raise InvalidInput(f"the file is cut short: the header on record {n} counts {want[table]} "
                       f"{table} rows, {counted[table]} follow it and nothing after; nothing was "
                       "imported (export the ledger again, or copy the whole file)")


def _supersede(heads: Sequence[tuple[int, Mapping[str, Any]]], earlier: int, key: str,
               n: int) -> None:
    """An outcome already in an earlier batch: taken from this one when both batches
    come from the same ledger (a prune that exported it again), else refused."""
    were, now = heads[earlier - 1][1].get("identity"), heads[-1][1].get("identity")
    if were is None or were != now:
        raise InvalidInput(f"record {n}: outcome {key} is in the file twice, from different "
                           "ledgers (or ones that do not say which); nothing was imported")


def _refuse_conflicts(tx: Tx, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    for table in ("rs_outcomes", "rs_attempts", "rs_steps"):
        unique = TABLES[table][2]
        wanted = [r[unique] for r in rows[table]]
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            found = tx.rows(f"SELECT {unique} AS k FROM {table} WHERE {unique} IN"
                            f" ({', '.join('?' * len(chunk))}) ORDER BY {unique} LIMIT 3", tuple(chunk))
            if found:
                keys = ", ".join(str(f["k"]) for f in found)
                raise InvalidInput(f"cannot merge: the target ledger already has {table} {keys}; "
                                   "nothing was imported")
