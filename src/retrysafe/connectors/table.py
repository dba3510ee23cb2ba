"""Rows in a table: a CSV file or a SQL table, one row per step key.

The row itself carries the step key in a key column (``retrysafe_key`` by
default), so the table answers "was this row written?" on its own: lookup
reads the key column, and ``execute`` refuses to add a second row with the
same key (a unique constraint in SQL, a check under the file lock in CSV).

A row in a table other people read is shared state, so both connectors
default to the ``publish`` effect class: after a crash retrysafe looks before
writing again. The lookup is authoritative, so that costs one read.

Examples::

    [connectors.sheet]
    type = "csv"
    path = "/srv/shared/report-log.csv"

    [connectors.db]
    type = "sql"
    url = "postgresql://app@db.internal/ops"
    password_env = "OPS_DB_PASSWORD"
    table = "report_log"
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, ConnectorError, InvalidInput
from ..fsio import atomic_write
from ._config import config_bool, env_secret, optional_str, reject_unknown, required_str, string
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["CsvTableConnector", "SqlTableConnector"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMON_FIELDS = {"type", "key_column", "updatable", "effect_class"}


class _SchemaProblem(Exception):
    """The table or a column is missing."""


def _cell(value: Any) -> str:
    """A payload value as cell text: scalars as themselves, structures as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _sql_value(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# --- CSV --------------------------------------------------------------------------


class CsvTableConnector(ConnectorBase):
    """Appends one row per step key to a CSV file; evidence ``<path>#<row>``.

    The row number is the one a spreadsheet shows (the header is row 1). The
    file is locked (``flock`` on ``<path>.lock``) for every read and write and
    replaced atomically, so concurrent writers neither lose nor tear rows.
    """

    effect_class = "publish"
    authoritative = True

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        key_column: str = "retrysafe_key",
        columns: Sequence[str] = (),
        updatable: bool = False,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        self.path = path
        self.key_column = key_column
        self.columns = list(columns)
        self.updatable = updatable
        self.effect_class = effect_class

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> CsvTableConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, {*_COMMON_FIELDS, "path", "columns"})
        raw = required_str(where, table, "path", "the CSV file")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            raise ConfigError(f"{where}: path {raw!r} must be absolute")
        columns = table.get("columns", [])
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise ConfigError(f"{where}: columns must be a list of names")
        return cls(
            name,
            path,
            key_column=string(where, table, "key_column", "retrysafe_key"),
            columns=columns,
            updatable=config_bool(where, table, "updatable"),
            effect_class=string(where, table, "effect_class", "publish"),
        )

    @contextlib.contextmanager
    def _locked(self, kind: Literal["shared", "exclusive"]) -> Iterator[None]:
        # The lock lives in its own file because the CSV itself is replaced by
        # rename on every write: a lock on the old inode would protect nothing.
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise EffectFailed(f"cannot open lock file {lock_path}: {exc.strerror}") from exc
        try:
            import fcntl  # POSIX only: imported where the lock is taken, not with the package

            fcntl.flock(fd, fcntl.LOCK_SH if kind == "shared" else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> tuple[list[str], list[list[str]]]:
        try:
            with self.path.open(encoding="utf-8", newline="") as fh:
                text = fh.read()
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise EffectFailed(f"cannot read {self.path}: {exc.strerror}") from exc
        rows = list(csv.reader(io.StringIO(text)))
        if not rows:
            return [], []
        return rows[0], rows[1:]

    def _write(self, header: list[str], rows: list[list[str]]) -> None:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        data = buf.getvalue().encode("utf-8")
        mode = None
        with contextlib.suppress(FileNotFoundError):
            mode = self.path.stat().st_mode & 0o7777
        try:
            atomic_write(self.path, lambda fh: fh.write(data), exclusive=False, mode=mode)
        except OSError as exc:
            raise EffectFailed(f"cannot write {self.path}: {exc.strerror}; no row was added") from exc

    def _key_index(self, header: list[str]) -> int:
        try:
            return header.index(self.key_column)
        except ValueError:
            raise InvalidInput(
                f"{self.path} has no key column {self.key_column!r} "
                f"(columns: {', '.join(header)}); add the column or set key_column"
            ) from None

    def _matches(self, step_key: str) -> tuple[list[str], list[int]]:
        header, rows = self._read()
        if not header:
            return header, []
        k = self._key_index(header)
        return header, [i for i, row in enumerate(rows) if len(row) > k and row[k] == step_key]

    def _evidence(self, index: int) -> Evidence:
        row = index + 2  # +1 for the header, +1 because rows count from 1
        return Evidence(f"{self.path}#{row}", path=str(self.path), row=row)

    def _check_payload(self, header: list[str], payload: Payload) -> None:
        if self.key_column in payload:
            raise InvalidInput(f"payload must not set the key column {self.key_column!r}")
        unknown = [c for c in payload if c not in header]
        if unknown:
            raise InvalidInput(
                f"{self.path} has no column(s) {', '.join(unknown)} (columns: {', '.join(header)})"
            )

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        if not self.path.parent.is_dir():
            raise InvalidInput(f"folder {self.path.parent} of {self.path} does not exist")
        if self.key_column in payload:
            raise InvalidInput(f"payload must not set the key column {self.key_column!r}")
        with contextlib.suppress(EffectFailed), self._locked("shared"):
            header, _ = self._read()
            if header:
                self._key_index(header)
                self._check_payload(header, payload)

    def execute(self, step_key: str, payload: Payload) -> str:
        """Append the row; a row already holding this key is the effect, returned as is."""
        if not self.path.parent.is_dir():
            raise InvalidInput(f"folder {self.path.parent} of {self.path} does not exist")
        with self._locked("exclusive"):
            header, rows = self._read()
            if not header:
                header = self.columns or [c for c in payload if c != self.key_column]
                if self.key_column not in header:
                    header = [*header, self.key_column]
            k = self._key_index(header)
            for i, row in enumerate(rows):
                if len(row) > k and row[k] == step_key:
                    return self._evidence(i)
            self._check_payload(header, payload)
            row = [step_key if c == self.key_column else _cell(payload.get(c)) for c in header]
            rows.append(row)
            self._write(header, rows)
            return self._evidence(len(rows) - 1)

    def update(self, step_key: str, payload: Payload) -> str:
        """Rewrite the given columns of the row holding this key (``updatable`` only)."""
        if not self.updatable:
            raise EffectFailed(f"connector {self.name!r} is not updatable (set updatable = true)")
        with self._locked("exclusive"):
            header, rows = self._read()
            matches = self._matches(step_key)[1] if header else []
            if not matches:
                raise EffectFailed(f"{self.path} has no row with {self.key_column} = {step_key!r}")
            self._check_payload(header, payload)
            row = rows[matches[0]]
            row.extend([""] * (len(header) - len(row)))
            for column, value in payload.items():
                row[header.index(column)] = _cell(value)
            self._write(header, rows)
            return self._evidence(matches[0])

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        try:
            with self._locked("shared"):
                _, matches = self._matches(step_key)
        except InvalidInput as exc:
            # Someone renamed or dropped the key column: the file cannot say.
            return Ambiguous(
                f"{exc.message}. Without it retrysafe cannot tell whether the row for "
                f"{step_key!r} was written: look for it by its other columns"
            )
        if not matches:
            return ABSENT
        return Found(self._evidence(matches[0]), {"rows": [i + 2 for i in matches]})

    def count(self, step_key: str) -> int:
        with self._locked("shared"):
            return len(self._matches(step_key)[1])


# --- SQL ----------------------------------------------------------------------------


def _ident_path(raw: str, what: str) -> list[str]:
    parts = raw.split(".")
    if not 1 <= len(parts) <= 2 or not all(_IDENT.match(p) for p in parts):
        raise ConfigError(f"{what} {raw!r} is not a plain identifier (letters, digits, _)")
    return parts


class SqlTableConnector(ConnectorBase):
    """Inserts one row per step key into a SQL table; evidence ``<table>#<id>``.

    ``url`` selects the database: ``sqlite:///absolute/path.db`` or
    ``postgresql://user@host/db`` (password from ``password_env``). The key
    column must be UNIQUE (or the primary key): the insert uses
    ``ON CONFLICT DO NOTHING``, so the database itself refuses a second row.
    ``id_column`` names the column returned as evidence (default: the key).
    """

    effect_class = "publish"
    authoritative = True

    def __init__(
        self,
        name: str,
        url: str,
        table: str,
        *,
        key_column: str = "retrysafe_key",
        id_column: str | None = None,
        password_env: str | None = None,
        updatable: bool = False,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        self.url = url
        self.table_parts = _ident_path(table, f"connector {name!r}: table")
        self.table = table
        self.key_column = _ident_path(key_column, f"connector {name!r}: key_column")[-1]
        self.id_column = _ident_path(id_column, f"connector {name!r}: id_column")[-1] if id_column else None
        self.password_env = password_env
        self.updatable = updatable
        self.effect_class = effect_class
        if url.startswith("sqlite:///"):
            self.backend: Literal["sqlite", "postgresql"] = "sqlite"
            self.sqlite_path = Path(url.removeprefix("sqlite://"))
        elif url.startswith(("postgresql://", "postgres://")):
            self.backend = "postgresql"
        else:
            raise ConfigError(
                f"connector {name!r}: url must start with sqlite:/// or postgresql:// "
                f"(got {url.split('://')[0]!r})"
            )

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> SqlTableConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, {*_COMMON_FIELDS, "url", "table", "id_column", "password_env"})
        return cls(
            name,
            required_str(where, table, "url", "sqlite:///... or postgresql://..."),
            required_str(where, table, "table"),
            key_column=string(where, table, "key_column", "retrysafe_key"),
            id_column=optional_str(where, table, "id_column") or None,
            password_env=optional_str(where, table, "password_env") or None,
            updatable=config_bool(where, table, "updatable"),
            effect_class=string(where, table, "effect_class", "publish"),
        )

    # --- statements, written once with a placeholder style per backend ---------

    def _q(self, ident: str) -> str:
        # Every identifier passed the _IDENT check, so quoting cannot be escaped.
        return f'"{ident}"'

    def _table_sql(self) -> str:
        return ".".join(self._q(p) for p in self.table_parts)

    def _columns(self, payload: Payload) -> list[str]:
        cols = list(payload)
        for c in cols:
            if not _IDENT.match(c):
                raise InvalidInput(f"column name {c!r} is not a plain identifier (letters, digits, _)")
        if self.key_column in cols:
            raise InvalidInput(f"payload must not set the key column {self.key_column!r}")
        return cols

    def _id_sql(self) -> str:
        return self._q(self.id_column) if self.id_column else self._q(self.key_column)

    def _evidence(self, ident: Any) -> Evidence:
        return Evidence(f"{self.table}#{ident}", table=self.table, id=ident)

    def _select_sql(self, what: str) -> str:
        return f"SELECT {what} FROM {self._table_sql()} WHERE {self._q(self.key_column)} = ?"

    # --- connections -------------------------------------------------------------

    @contextlib.contextmanager
    def _connect(self, *, write: bool) -> Iterator[Any]:
        """One connection in one transaction; errors before commit mean nothing changed.

        A connection that cannot be opened is a definite failure for a write
        (nothing was sent) and "cannot tell now" for a read.
        """
        failure: type[ConnectorError] = EffectFailed if write else ConnectorError
        conn = self._sqlite_connect(write, failure) if self.backend == "sqlite" else self._pg_connect(failure)
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback() if self.backend == "postgresql" else conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _sqlite_connect(self, write: bool, failure: type[ConnectorError]) -> Any:
        if not self.sqlite_path.is_file():
            # sqlite3 would silently create an empty database, hiding a wrong path.
            raise InvalidInput(f"connector {self.name!r}: database file {self.sqlite_path} does not exist")
        try:
            conn = sqlite3.connect(self.sqlite_path, timeout=10, isolation_level=None)
            # IMMEDIATE takes the write lock up front, so a busy database fails
            # here (nothing written) instead of half-way through.
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise failure(f"connector {self.name!r}: cannot open {self.sqlite_path}: {exc}") from exc
        return conn

    def _pg_connect(self, failure: type[ConnectorError]) -> Any:
        import psycopg  # lazy: SQLite users need not install it

        kwargs: dict[str, Any] = {"connect_timeout": 10}
        if self.password_env:
            kwargs["password"] = env_secret(f"connector {self.name!r}", self.password_env)
        try:
            return psycopg.connect(self.url, **kwargs)
        except psycopg.Error as exc:
            # psycopg's message names host and database but never the password.
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise failure(f"connector {self.name!r}: cannot connect to the database: {first}") from exc

    def _run(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self.backend == "postgresql":
            sql = sql.replace("?", "%s")
        cur = conn.execute(sql, params)
        rows: list[tuple[Any, ...]] = cur.fetchall() if cur.description else []
        return rows

    def _db_errors(self) -> tuple[type[BaseException], ...]:
        if self.backend == "sqlite":
            return (sqlite3.DatabaseError,)
        import psycopg

        return (psycopg.DatabaseError,)

    def _commit(self, conn: Any) -> None:
        # A failure here may come after the server applied the commit (lost
        # connection): the row may exist, so it is not a definite failure.
        try:
            conn.commit() if self.backend == "postgresql" else conn.execute("COMMIT")
        except Exception as exc:
            raise ConnectorError(f"commit to {self.table} did not confirm: {exc}") from exc

    def _statement_failed(self, exc: BaseException, action: str) -> EffectFailed:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "ON CONFLICT" in text:
            text += f" (the key column {self.key_column!r} must be UNIQUE or the primary key)"
        return EffectFailed(f"{action} {self.table} failed, nothing was written: {text}")

    # --- protocol ---------------------------------------------------------------------

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        self._columns(payload)
        if self.backend == "sqlite" and not self.sqlite_path.is_file():
            raise InvalidInput(f"connector {self.name!r}: database file {self.sqlite_path} does not exist")

    def execute(self, step_key: str, payload: Payload) -> str:
        """INSERT the row; the unique key turns a repeat into the existing row's evidence."""
        cols = self._columns(payload)
        names = ", ".join(self._q(c) for c in [*cols, self.key_column])
        marks = ", ".join("?" for _ in range(len(cols) + 1))
        values = [_sql_value(payload[c]) for c in cols] + [step_key]
        insert = (
            f"INSERT INTO {self._table_sql()} ({names}) VALUES ({marks}) "
            f"ON CONFLICT ({self._q(self.key_column)}) DO NOTHING RETURNING {self._id_sql()}"
        )
        select = self._select_sql(self._id_sql())
        with self._connect(write=True) as conn:
            try:
                rows = self._run(conn, insert, values)
                if not rows:
                    rows = self._run(conn, select, [step_key])
            except self._db_errors() as exc:
                raise self._statement_failed(exc, "insert into") from exc
            self._commit(conn)
        return self._evidence(rows[0][0])

    def update(self, step_key: str, payload: Payload) -> str:
        """UPDATE the row holding this key (``updatable`` only)."""
        if not self.updatable:
            raise EffectFailed(f"connector {self.name!r} is not updatable (set updatable = true)")
        cols = self._columns(payload)
        if not cols:
            raise InvalidInput("update needs at least one column value")
        sets = ", ".join(f"{self._q(c)} = ?" for c in cols)
        sql = (
            f"UPDATE {self._table_sql()} SET {sets} WHERE {self._q(self.key_column)} = ? "
            f"RETURNING {self._id_sql()}"
        )
        with self._connect(write=True) as conn:
            try:
                rows = self._run(conn, sql, [_sql_value(payload[c]) for c in cols] + [step_key])
            except self._db_errors() as exc:
                raise self._statement_failed(exc, "update of") from exc
            if not rows:
                raise EffectFailed(f"{self.table} has no row with {self.key_column} = {step_key!r}")
            self._commit(conn)
        return self._evidence(rows[0][0])

    def _select(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._connect(write=False) as conn:
            try:
                return self._run(conn, sql, params)
            except self._db_errors() as exc:
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if self._is_schema_problem(exc):
                    raise _SchemaProblem(text) from exc
                raise ConnectorError(f"cannot read {self.table}: {text}") from exc

    def _is_schema_problem(self, exc: BaseException) -> bool:
        """A missing table or column: asking again later will not help."""
        if self.backend == "sqlite":
            return "no such table" in str(exc) or "no such column" in str(exc)
        import psycopg

        return isinstance(exc, psycopg.ProgrammingError)

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        try:
            rows = self._select(self._select_sql(self._id_sql()), [step_key])
        except _SchemaProblem as exc:
            return Ambiguous(
                f"cannot read {self.table} ({exc}); check the connector's url and table, "
                f"and look for a row with {self.key_column} = {step_key!r} where it went"
            )
        if not rows:
            return ABSENT
        return Found(self._evidence(rows[0][0]))

    def count(self, step_key: str) -> int:
        rows = self._select(self._select_sql("count(*)"), [step_key])
        return int(rows[0][0])
