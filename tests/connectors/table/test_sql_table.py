"""The SQL table connector on real SQLite and PostgreSQL databases."""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.table import SqlTableConnector
from retrysafe.errors import ConfigError, ConnectorError, InvalidInput

KEY = "weekly-report:2026-W32/row"


def sql(target: Any, **extra: Any) -> SqlTableConnector:
    config = {"type": "sql", "url": target.url, "table": target.table, "id_column": "id", **extra}
    conn = build_connector("db", config)
    assert isinstance(conn, SqlTableConnector)
    return conn


def test_insert_stores_the_key_and_returns_the_primary_key(sql_target: Any) -> None:
    """The normal effect: one INSERT, evidence <table>#<id>, lookup and count by key."""
    conn = sql(sql_target)
    assert conn.effect_class == "publish" and conn.authoritative
    assert conn.lookup(KEY, {}) == ABSENT
    evidence = conn.execute(KEY, {"title": "Week 32", "amount": 7})
    [(row_id, key, title, amount, note)] = sql_target.rows()
    assert evidence == f"{sql_target.table}#{row_id}"
    assert (key, title, amount, note) == (KEY, "Week 32", 7, None)
    assert conn.lookup(KEY, {}) == Found(evidence)
    assert conn.count(KEY) == 1 and conn.count(KEY + "-other") == 0


def test_a_repeated_insert_returns_the_existing_row(sql_target: Any) -> None:
    """The UNIQUE key turns a second execute into the first row's evidence, not a new row."""
    conn = sql(sql_target)
    first = conn.execute(KEY, {"title": "Week 32"})
    assert conn.execute(KEY, {"title": "Week 32 again"}) == first
    assert [r[2] for r in sql_target.rows()] == ["Week 32"]


def test_constraint_violation_is_a_definite_failure_then_the_fix_succeeds(
    sql_target: Any,
) -> None:
    """A NOT NULL violation rolls back: EffectFailed with the database's reason, no row."""
    conn = sql(sql_target)
    with pytest.raises(EffectFailed) as info:
        conn.execute(KEY, {"note": "title forgotten"})
    assert "nothing was written" in str(info.value)
    assert "title" in str(info.value).lower() and "null" in str(info.value).lower()
    assert sql_target.rows() == []
    assert conn.lookup(KEY, {}) == ABSENT

    conn.execute(KEY, {"title": "Week 32", "note": "fixed"})
    assert len(sql_target.rows()) == 1


def test_a_key_column_without_unique_constraint_is_refused(sql_target: Any) -> None:
    """Without a UNIQUE key the database could hold duplicates: execute refuses and says why."""
    sql_target.execute("CREATE TABLE items_loose (title TEXT, k TEXT)")
    table = sql_target.table.replace("items", "items_loose")
    conn = sql(sql_target, table=table, key_column="k", id_column=None)
    with pytest.raises(EffectFailed, match="must be UNIQUE"):
        conn.execute(KEY, {"title": "Week 32"})


def test_a_missing_table_makes_lookup_ambiguous_with_what_to_check(sql_target: Any) -> None:
    """Lookup on a table that is not there cannot tell; the reason names table and key."""
    table = sql_target.table.replace("items", "items_renamed")
    result = sql(sql_target, table=table).lookup(KEY, {})
    assert isinstance(result, Ambiguous)
    assert "items_renamed" in result.reason and KEY in result.reason


def test_update_in_place_only_when_updatable(sql_target: Any) -> None:
    """update() changes the key's row and keeps its id; refused unless updatable."""
    conn = sql(sql_target)
    evidence = conn.execute(KEY, {"title": "Week 32", "note": "draft"})
    with pytest.raises(EffectFailed, match="not updatable"):
        conn.update(KEY, {"note": "published"})
    editable = sql(sql_target, updatable=True)
    assert editable.update(KEY, {"note": "published"}) == evidence
    assert [r[4] for r in sql_target.rows()] == ["published"]
    with pytest.raises(EffectFailed, match="no row"):
        editable.update(KEY + "-missing", {"note": "x"})


def test_evidence_defaults_to_the_key_without_id_column(sql_target: Any) -> None:
    """Without id_column the evidence names the row by its key."""
    conn = sql(sql_target, id_column=None)
    assert conn.execute(KEY, {"title": "Week 32"}) == f"{sql_target.table}#{KEY}"


def test_bad_configuration_and_payload_are_rejected(tmp_path: Path) -> None:
    """Unknown URL scheme, odd identifiers, a missing database file: clear errors."""
    with pytest.raises(ConfigError, match=r"sqlite:/// or postgresql://"):
        build_connector("db", {"type": "sql", "url": "mysql://x/y", "table": "t"})
    with pytest.raises(ConfigError, match="not a plain identifier"):
        build_connector("db", {"type": "sql", "url": "sqlite:///x.db", "table": "t; DROP"})
    with pytest.raises(ConfigError, match="'table' is required"):
        build_connector("db", {"type": "sql", "url": "sqlite:///x.db"})
    missing = build_connector("db", {"type": "sql", "url": f"sqlite:///{tmp_path}/no.db", "table": "t"})
    with pytest.raises(InvalidInput, match="does not exist"):
        missing.execute(KEY, {"title": "x"})
    assert not (tmp_path / "no.db").exists()
    db = tmp_path / "x.db"
    db.touch()
    conn = build_connector("db", {"type": "sql", "url": f"sqlite:///{db}", "table": "t"})
    with pytest.raises(InvalidInput, match="not a plain identifier"):
        conn.execute(KEY, {"title; DROP TABLE t": "x"})
    # validate() says the same before anything is recorded or written.
    with pytest.raises(InvalidInput, match="not a plain identifier"):
        conn.validate({"title; DROP TABLE t": "x"})
    with pytest.raises(InvalidInput, match="does not exist"):
        missing.validate({"title": "x"})
    conn.validate({"title": "x"})


@pytest.mark.postgres
def test_unreachable_postgres_fails_definitely_and_hides_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No server: execute is a definite failure, lookup 'cannot tell now'; no secret shown."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RS_TEST_DB_PASSWORD", "pw-77c1-never-shown")
    conn = build_connector(
        "db",
        {
            "type": "sql",
            "url": f"postgresql://app@127.0.0.1:{port}/ops",
            "password_env": "RS_TEST_DB_PASSWORD",
            "table": "items",
        },
    )
    with pytest.raises(EffectFailed, match="cannot connect") as failed:
        conn.execute(KEY, {"title": "x"})
    with pytest.raises(ConnectorError, match="cannot connect") as unknown:
        conn.lookup(KEY, {})
    for exc in (failed.value, unknown.value):
        assert "pw-77c1-never-shown" not in str(exc)
    monkeypatch.delenv("RS_TEST_DB_PASSWORD")
    with pytest.raises(ConfigError, match="RS_TEST_DB_PASSWORD is not set"):
        conn.execute(KEY, {"title": "x"})


def test_cli_run_killed_after_the_insert_then_rerun_finds_the_row(sql_target: Any, home: Any) -> None:
    """End to end on SQLite and PostgreSQL: SIGKILL after the commit; re-run finds the row."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.db]
        type = "sql"
        url = "{sql_target.url}"
        table = "{sql_target.table}"
        id_column = "id"
        """
    )
    inner = (
        f"{shlex.quote(sys.executable)} -m retrysafe step record --connector db --with 'title=Week 32 report'"
    )
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    first = home.run(*run, env={"RETRYSAFE_CRASH_AT": "record:after-execute"})
    assert first.returncode != 0, first.stdout + first.stderr
    [(row_id, key, title, *_)] = sql_target.rows()
    assert (key, title) == ("weekly:2026-W32/record", "Week 32 report")

    second = home.run(*run)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{sql_target.table}#{row_id}" in second.stdout
    assert len(sql_target.rows()) == 1
