"""The CSV table connector on real files, with real concurrent and SIGKILLed writers."""

from __future__ import annotations

import csv
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.table import CsvTableConnector
from retrysafe.errors import ConfigError, InvalidInput

KEY = "weekly-report:2026-W32/sheet"


def sheet(config: dict[str, Any]) -> CsvTableConnector:
    conn = build_connector("sheet", {"type": "csv", **config})
    assert isinstance(conn, CsvTableConnector)
    return conn


def read(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


def test_append_writes_the_key_column_and_lookup_finds_the_row(tmp_path: Path) -> None:
    """The normal effect: one row per key, evidence path#row (header is row 1)."""
    path = tmp_path / "log.csv"
    conn = sheet({"path": str(path), "columns": ["title", "url"]})
    assert conn.effect_class == "publish" and conn.authoritative and not conn.updatable
    assert conn.lookup(KEY, {}) == ABSENT

    first = conn.execute(KEY, {"title": "Week 32", "url": "https://example.org/w32"})
    second = conn.execute(KEY + "-b", {"title": "Week 32, b"})
    assert (first, second) == (f"{path}#2", f"{path}#3")
    assert read(path) == [
        ["title", "url", "retrysafe_key"],
        ["Week 32", "https://example.org/w32", KEY],
        ["Week 32, b", "", KEY + "-b"],
    ]
    assert conn.lookup(KEY, {}) == Found(first, {"rows": [2]})
    assert conn.count(KEY) == 1
    # Executing a key that already has its row is the same effect, not a second row.
    assert conn.execute(KEY, {"title": "again"}) == first
    assert len(read(path)) == 3
    assert not list(tmp_path.glob(".log.csv.*"))  # no temporary file left behind


def test_concurrent_writers_lose_no_row_and_never_duplicate_a_key(tmp_path: Path, spawn: Any) -> None:
    """Separate processes appending at once: the lock keeps every row, one per key."""
    config = {"path": str(tmp_path / "log.csv"), "columns": ["title"]}
    jobs = [(f"{KEY}/{i % 4}", {"title": f"item {i}"}) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: spawn("csv", config, *job), jobs))
    assert all(code == 0 for code, _ in results)
    rows = read(tmp_path / "log.csv")[1:]
    assert sorted(row[1] for row in rows) == sorted(f"{KEY}/{i}" for i in range(4))


def test_a_missing_key_column_makes_lookup_ambiguous_with_what_to_check(tmp_path: Path) -> None:
    """If someone removed the key column, lookup cannot tell and says how to check."""
    path = tmp_path / "log.csv"
    path.write_text("title,week\nWeek 32,2026-W32\n")
    result = sheet({"path": str(path)}).lookup(KEY, {})
    assert isinstance(result, Ambiguous)
    assert "no key column 'retrysafe_key'" in result.reason
    assert KEY in result.reason and "other columns" in result.reason
    with pytest.raises(InvalidInput, match="no key column"):
        sheet({"path": str(path)}).execute(KEY, {"title": "x"})
    assert path.read_text() == "title,week\nWeek 32,2026-W32\n"


def test_unreadable_table_is_a_definite_failure_then_succeeds_after_the_fix(
    tmp_path: Path,
) -> None:
    """A folder where the CSV should be fails with the reason, writes nothing, then recovers."""
    path = tmp_path / "log.csv"
    path.mkdir()
    conn = sheet({"path": str(path)})
    with pytest.raises(EffectFailed, match=r"cannot read .*log\.csv: Is a directory"):
        conn.execute(KEY, {"title": "Week 32"})
    path.rmdir()
    assert conn.execute(KEY, {"title": "Week 32"}) == f"{path}#2"


def test_update_in_place_only_when_updatable(tmp_path: Path) -> None:
    """update() rewrites the key's row (same row number) and is refused unless allowed."""
    path = tmp_path / "log.csv"
    fixed = sheet({"path": str(path)})
    fixed.execute(KEY, {"title": "Week 32", "status": "draft"})
    with pytest.raises(EffectFailed, match="not updatable"):
        fixed.update(KEY, {"status": "published"})

    editable = sheet({"path": str(path), "updatable": True})
    assert editable.update(KEY, {"status": "published"}) == f"{path}#2"
    assert read(path)[1] == ["Week 32", "published", KEY]
    with pytest.raises(EffectFailed, match="no row"):
        editable.update(KEY + "-missing", {"status": "x"})


def test_bad_input_is_rejected_with_a_clear_error(tmp_path: Path) -> None:
    """Missing or relative path, unknown columns, a payload setting the key: clear errors."""
    with pytest.raises(ConfigError, match="'path'"):
        sheet({})
    with pytest.raises(ConfigError, match="must be absolute"):
        sheet({"path": "log.csv"})
    with pytest.raises(ConfigError, match="unknown field"):
        sheet({"path": str(tmp_path / "x.csv"), "colums": ["a"]})
    path = tmp_path / "log.csv"
    conn = sheet({"path": str(path), "columns": ["title"]})
    conn.execute(KEY, {"title": "Week 32"})
    with pytest.raises(InvalidInput, match=r"no column\(s\) colour"):
        conn.execute(KEY + "-b", {"title": "x", "colour": "red"})
    with pytest.raises(InvalidInput, match="must not set the key column"):
        conn.execute(KEY + "-c", {"retrysafe_key": "forged"})
    # validate() says the same before anything is recorded or written.
    with pytest.raises(InvalidInput, match=r"no column\(s\) colour"):
        conn.validate({"title": "x", "colour": "red"})
    conn.validate({"title": "x"})
    with pytest.raises(InvalidInput, match="does not exist"):
        sheet({"path": str(tmp_path / "missing" / "log.csv")}).execute(KEY, {"title": "x"})
    assert len(read(path)) == 2


def test_cli_run_killed_after_the_append_then_rerun_finds_the_row(tmp_path: Path, home: Any) -> None:
    """End to end: SIGKILL after the row is written; the re-run's lookup finds it; one row."""
    path = tmp_path / "log.csv"
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.sheet]
        type = "csv"
        path = "{path}"
        columns = ["week", "title"]
        """
    )
    inner = (
        f"{shlex.quote(sys.executable)} -m retrysafe step log --connector sheet "
        "--with week=2026-W32 --with 'title=Week 32 report'"
    )
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    first = home.run(*run, env={"RETRYSAFE_CRASH_AT": "log:after-execute"})
    assert first.returncode != 0, first.stdout + first.stderr
    second = home.run(*run)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{path}#2" in second.stdout
    assert read(path) == [
        ["week", "title", "retrysafe_key"],
        ["2026-W32", "Week 32 report", "weekly:2026-W32/log"],
    ]
