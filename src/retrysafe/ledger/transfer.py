"""A ledger as JSON lines: every row of every table, to move it between backends.

The file (``retrysafe export``) starts with a header line naming the schema
version, then one line per row, each ``{"table": NAME, "row": {COLUMN: VALUE}}``:
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
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from ..errors import InvalidInput
from .backend import Tx
from .core import LedgerCore
from .listing import note_unlogged
from .migrations import SCHEMA_VERSION

__all__ = ["FORMAT", "TABLES", "Loaded", "dump", "header", "load", "read_file", "rows_of",
           "write_lines"]

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
_OUTCOME_COLUMN = {"rs_outcomes": "key", "rs_attempts": "outcome_key", "rs_steps": "outcome_key",
                   "rs_events": "outcome_key", "rs_notifications": "outcome_key"}


class Loaded(NamedTuple):
    """What :func:`load` wrote: rows per table."""

    counts: dict[str, int]


_IDENTITY = "SELECT value FROM rs_meta WHERE name = 'identity'"


def header(ledger: LedgerCore) -> dict[str, Any]:
    """The first line: what the file is, and the ledger's identity (identity.py), which
    a ledger imported whole takes over, so the homes that used the source accept it."""
    with ledger.backend.transaction(write=False) as tx:
        row = tx.one(_IDENTITY)
    return {"format": FORMAT, "schema_version": ledger.schema_version(),
            **({"identity": row["value"]} if row else {})}


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
    yield header(ledger)
    with ledger.backend.transaction(write=False) as tx:
        tables = {t: rows_of(tx, t) for t in TABLES}
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


def read_file(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON lines file, each checked to be an object."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        for n, line in enumerate(fh, 1):
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
        if version != target_version:
            raise InvalidInput(
                f"the export has schema version {version}, the target ledger {target_version}: "
                f"export and import with the same retrysafe, both ledgers migrated "
                f"(this retrysafe knows up to {SCHEMA_VERSION})")
        return None
    table, row = rec.get("table"), rec.get("row")
    if table not in TABLES or not isinstance(row, dict):
        raise InvalidInput(f"record {n}: expected a header or {{\"table\", \"row\"}} with a "
                           f"ledger table, got {sorted(rec)}")
    columns = TABLES[table][0]
    if set(row) != set(columns):
        odd = sorted(set(row) ^ set(columns))
        raise InvalidInput(f"record {n} ({table}): columns differ from this schema's ({odd})")
    return table, row


def load(ledger: LedgerCore, records: Iterable[Mapping[str, Any]], *, merge: bool = False) -> Loaded:
    """Write ``records`` (as :func:`dump` gives them) into ``ledger``, in one transaction.

    Refused when the ledger holds anything, unless ``merge``; with ``merge``,
    refused when any outcome, attempt or step key is already there. History
    ids are kept on an empty ledger and renumbered (in order) when merging.
    """
    target_version = ledger.schema_version()
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    batch_of: dict[int, int] = {}  # id(row) -> its batch (a prune --export file has several)
    batch = 0
    seen_header = False
    identity = None
    for n, rec in enumerate(records, 1):
        if not seen_header and "format" not in rec:
            raise InvalidInput(f"record {n}: the file does not start with a retrysafe header line")
        got = _check(rec, n, target_version)
        if got is None:
            if not seen_header and isinstance(rec.get("identity"), str):
                identity = rec["identity"]
            seen_header = True
            batch += 1
            continue
        rows[got[0]].append(got[1])
        batch_of[id(got[1])] = batch
    if not seen_header:
        raise InvalidInput("nothing to import: the file has no retrysafe header line")
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
        columns = TABLES["rs_events"][0]
        keep_ids = not merge
        event_cols = columns if keep_ids else tuple(c for c in columns if c != "id")
        sql = (f"INSERT INTO rs_events ({', '.join(event_cols)})"
               f" VALUES ({', '.join('?' * len(event_cols))})")
        # merging: (batch, the file's history id) -> the ledger's; ids repeat across the
        # batches of a prune --export file appended to from more than one ledger
        renumbered: dict[tuple[int, int], int] = {}
        for row in sorted(rows["rs_events"], key=lambda r: (0 if keep_ids else batch_of[id(r)],
                                                            int(r["id"]))):
            values = tuple(row[c] for c in event_cols)
            if keep_ids:
                tx.run(sql, values)
            else:
                added = tx.one(sql + " RETURNING id", values)
                assert added is not None
                renumbered[(batch_of[id(row)], int(row["id"]))] = int(added["id"])
        if keep_ids and rows["rs_events"] and backend.name == "postgresql":
            tx.rows("SELECT setval(pg_get_serial_sequence('rs_events', 'id'),"
                    " (SELECT MAX(id) FROM rs_events))")
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
