"""Moving and trimming ledgers with hostile input: ``export``, ``import``, ``prune --export``
and ``recover`` given files that are cut short, edited, not UTF-8, repeated by a killed run,
or left half done. Each is refused with one line (exit 2) or completes; no ledger is left
unusable."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import Home

from retrysafe.ledger.migrations import SCHEMA_VERSION

RS = f"{sys.executable} -m retrysafe"
CONFIG = """
[jobs.pay]
key = "pay:{n}"
params = { n = "int" }
"""


def _filled(home: Home) -> Home:
    """Three outcomes: one done with a recorded step, one done, one failed."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    step = f"{RS} step post --class message -- echo post-1"
    assert home.run("run", "pay", "-p", "n=1", "--", "sh", "-c", step).returncode == 0
    assert home.run("run", "pay", "-p", "n=2", "--", "true").returncode == 0
    assert home.run("run", "pay", "-p", "n=3", "--", "false").returncode == 1
    return home


def _fresh(path: Path) -> Home:
    home = Home(path)
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    return home


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _one_line_refusal(proc: Any) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr


def _keys(home: Home) -> list[str]:
    proc = home.run("ls", "--json")
    assert proc.returncode == 0, proc.stderr
    return sorted(o["key"] for o in json.loads(proc.stdout))


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    src = _filled(Home(tmp_path / "src"))
    file = tmp_path / "all.jsonl"
    assert src.run("export", str(file)).returncode == 0
    return file


def test_a_file_of_bytes_that_are_not_utf8_is_refused(tmp_path: Path, exported: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(exported.read_bytes().splitlines(keepends=True)[0] + b'{"x": "\xff\xfe"}\n')
    target = _fresh(tmp_path / "target")
    proc = target.run("import", str(bad))
    _one_line_refusal(proc)
    assert "line 2" in proc.stderr and "UTF-8" in proc.stderr
    assert _keys(target) == []


@pytest.mark.parametrize(("table", "column", "value"), [
    ("rs_outcomes", "fence", "abc"),
    ("rs_outcomes", "reason", {"a": 1}),
    ("rs_outcomes", "created_at", True),
    ("rs_attempts", "number", 1.5),
    ("rs_events", "id", "x"),
    ("rs_events", "id", None),
    ("rs_steps", "evidence", "\udc80"),
])
@pytest.mark.parametrize("merge", [False, True])
def test_a_row_of_the_wrong_type_is_refused_and_the_ledger_keeps_working(
        tmp_path: Path, exported: Path, table: str, column: str, value: Any, merge: bool) -> None:
    """An edited export is refused as a whole before anything is written: a value of the
    wrong type imported would make every later command fail on that row."""
    records = _records(exported)
    next(r for r in records if r.get("table") == table)["row"][column] = value
    bad = _write(tmp_path / "bad.jsonl", records)
    target = _fresh(tmp_path / "target")
    proc = target.run("import", *(["--merge"] if merge else []), str(bad))
    _one_line_refusal(proc)
    assert column in proc.stderr, proc.stderr
    assert _keys(target) == []
    assert target.run("run", "pay", "-p", "n=1", "--", "true").returncode == 0


def test_an_export_cut_short_at_a_line_end_is_refused(tmp_path: Path, exported: Path) -> None:
    """A copy that stopped after a whole line parses line by line: the header's counts
    show that rows are missing, and nothing is imported."""
    lines = exported.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:5]))
    target = _fresh(tmp_path / "target")
    proc = target.run("import", str(cut))
    _one_line_refusal(proc)
    assert "cut short" in proc.stderr and "nothing was imported" in proc.stderr, proc.stderr
    assert _keys(target) == []
    whole = target.run("import", str(exported))
    assert whole.returncode == 0, whole.stderr
    assert _keys(target) == ["pay:1", "pay:2", "pay:3"]


def test_a_prune_export_repeated_by_a_killed_prune_imports_back(tmp_path: Path) -> None:
    """A prune killed after it appended a batch to its --export file but before it removed
    the rows leaves them in the ledger; run again, it appends them again. The file still
    imports: the repeated outcome is taken once, from its last batch."""
    first = _filled(Home(tmp_path / "first"))
    again = Home(tmp_path / "again")
    shutil.copytree(first.path, again.path)  # the ledger as the killed prune left it
    file = tmp_path / "pruned.jsonl"
    time.sleep(1.1)  # older than 1s ("0m" is refused: it would keep nothing)
    for home in (first, again):
        proc = home.run("prune", "--older-than", "1s", "--export", str(file))
        assert proc.returncode == 0, proc.stderr
    assert sum("format" in r for r in _records(file)) == 2
    for merge in ([], ["--merge"]):
        target = _fresh(tmp_path / f"target{len(merge)}")
        back = target.run("import", *merge, str(file), "--json")
        assert back.returncode == 0, back.stderr
        assert json.loads(back.stdout)["outcomes"] == 3
        assert _keys(target) == ["pay:1", "pay:2", "pay:3"]
        status = json.loads(target.run("status", "pay:1", "--json").stdout)
        assert [s["evidence"] for s in status["steps"]] == ["post-1"]
        history = json.loads(target.run("history", "pay:1", "--json").stdout)
        assert len(history) == sum(r.get("table") == "rs_events"
                                   and r["row"]["outcome_key"] == "pay:1"
                                   for r in _records(file)) // 2


def test_a_prune_export_cut_short_at_a_line_end_is_refused(tmp_path: Path) -> None:
    """Each batch a prune appends to its --export file counts its rows, as an export's
    header does: a copy that stops at a line end inside a batch is refused, nothing
    imported (it imported the rows before the cut and said nothing)."""
    home = _filled(Home(tmp_path / "home"))
    file = tmp_path / "pruned.jsonl"
    time.sleep(1.1)  # older than 1s ("0m" is refused: it would keep nothing)
    assert home.run("prune", "--older-than", "1s", "--export", str(file)).returncode == 0
    lines = file.read_text().splitlines(keepends=True)
    assert len(lines) > 6
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:-2]))
    target = _fresh(tmp_path / "target")
    proc = target.run("import", "--merge", str(cut))
    _one_line_refusal(proc)
    assert "cut short" in proc.stderr, proc.stderr
    assert _keys(target) == []
    whole = target.run("import", "--merge", str(file))
    assert whole.returncode == 0, whole.stderr
    assert _keys(target) == ["pay:1", "pay:2", "pay:3"]


def test_the_same_outcome_twice_in_one_export_is_refused(tmp_path: Path, exported: Path) -> None:
    records = _records(exported)
    records.insert(2, records[1])
    bad = _write(tmp_path / "bad.jsonl", records)
    target = _fresh(tmp_path / "target")
    proc = target.run("import", str(bad))
    _one_line_refusal(proc)
    assert "pay:1" in proc.stderr and "twice" in proc.stderr, proc.stderr
    assert _keys(target) == []


@pytest.mark.parametrize("identity", ["é\nx", "", 7])
def test_a_header_identity_no_ledger_draws_is_refused(tmp_path: Path, exported: Path,
                                                       identity: Any) -> None:
    """The identity of an imported ledger is written into the home: an edited one is
    refused before the import, and the home keeps working."""
    records = _records(exported)
    records[0]["identity"] = identity
    bad = _write(tmp_path / "bad.jsonl", records)
    target = _fresh(tmp_path / "target")
    assert target.run("run", "pay", "-p", "n=9", "--", "true").returncode == 0
    with target.open_ledger() as ledger, ledger.backend.transaction() as tx:
        for table in ("rs_notifications", "rs_history", "rs_steps", "rs_attempts", "rs_outcomes"):
            tx.run(f"DELETE FROM {table}")
    proc = target.run("import", str(bad))
    _one_line_refusal(proc)
    assert "identity" in proc.stderr, proc.stderr
    assert _keys(target) == []


def test_a_recover_interrupted_before_the_home_took_the_ledger_completes_when_run_again(
        tmp_path: Path) -> None:
    """recover rebuilds the ledger, then writes its identity into runs/: killed in
    between, every command refuses the rebuilt ledger and points at recover, which must
    then finish the job rather than refuse a ledger that records outcomes."""
    home = _filled(Home(tmp_path / "home"))
    mark = home.path / "runs" / ".ledger-id"
    old = mark.read_bytes()
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    assert home.run("recover").returncode == 0
    mark.write_bytes(old)  # what a kill right after the rebuild's commit leaves
    refused = home.run("ls")
    assert refused.returncode == 2 and "retrysafe recover" in refused.stderr
    again = home.run("recover")
    assert again.returncode == 0, again.stderr
    assert "an earlier recover rebuilt 3 outcomes" in again.stdout, again.stdout
    assert _keys(home) == ["pay:1", "pay:2", "pay:3"]
    done = home.run("run", "pay", "-p", "n=2", "--", "false")
    assert done.returncode == 0 and "already done" in done.stdout, done.stdout + done.stderr
    # a ledger that has been run on since is still refused
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    assert home.run("recover").returncode == 0
    assert home.run("run", "pay", "-p", "n=4", "--", "true").returncode == 0
    assert home.run("recover").returncode == 2


def test_recover_passes_over_names_and_lines_that_are_not_utf8_text(tmp_path: Path) -> None:
    """A job folder named with bytes that are not UTF-8, a summary naming a key that is
    not text (the folder's name says the key), a log line with such evidence: each is
    passed over, not a reason to rebuild nothing."""
    home = _filled(Home(tmp_path / "home"))
    runs = home.path / "runs"
    os.makedirs(os.fsencode(runs) + b"/j\xfe/pay+9/attempt-1")
    (runs / "pay" / "pay+4" / "attempt-1").mkdir(parents=True)
    (runs / "pay" / "pay+4" / "summary.json").write_text(
        '{"outcome_key": "pay:\\ud800", "job": "pay", "state": "done"}')
    with (runs / "pay" / "pay+2" / "attempt-1" / "log.jsonl").open("a") as fh:
        fh.write('{"step_key": "pay:2/mail", "action": "record", "result": "done", '
                 '"evidence": "\\udc80", "attempt_id": "x"}\n')
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    proc = home.run("recover", "--json")
    assert proc.returncode == 0, proc.stderr
    assert any("not UTF-8" in why for why in json.loads(proc.stdout)["skipped"])
    assert _keys(home) == ["pay:1", "pay:2", "pay:3", "pay:4"]
    status = json.loads(home.run("status", "pay:1", "--json").stdout)
    assert [s["evidence"] for s in status["steps"]] == ["post-1"]
    assert json.loads(home.run("status", "pay:2", "--json").stdout)["steps"] == []


def test_export_to_an_empty_name_is_refused(home: Home) -> None:
    _filled(home)
    for args in (["export", ""], ["export", "", "--force"]):
        _one_line_refusal(home.run(*args))


def test_an_export_onto_the_ledger_itself_is_refused(home: Home, tmp_path: Path) -> None:
    """``export ledger.sqlite3 --force`` in the home, or ``prune --export`` onto it, would
    write rows over the database they are read from."""
    _filled(home)
    link = tmp_path / "link.jsonl"
    link.symlink_to(home.path / "ledger.sqlite3")
    for args, cwd in ((["export", "ledger.sqlite3", "--force"], home.path),
                      (["export", str(link), "--force"], None),
                      (["export", "ledger.sqlite3-wal", "--force"], home.path),
                      (["prune", "--older-than", "1s", "--export", "ledger.sqlite3"], home.path)):
        before = home.snapshot()
        proc = home.run(*args, cwd=cwd)
        _one_line_refusal(proc)
        assert "ledger" in proc.stderr, proc.stderr
        assert home.snapshot() == before
        assert _keys(home) == ["pay:1", "pay:2", "pay:3"]


@pytest.mark.parametrize(("column", "value", "said"), [
    ("outcome_key", "pay:99", "outcome pay:99"),
    ("step_key", "pay:2/post", "step pay:2/post"),
    ("attempt_id", "0123456789abcdef0123", "attempt 0123456789abcdef0123"),
])
@pytest.mark.parametrize("merge", [False, True])
def test_a_history_row_naming_what_the_file_lacks_is_refused(
        tmp_path: Path, exported: Path, column: str, value: str, said: str, merge: bool) -> None:
    """The ledger stores a history row by its outcome's id, its attempt's number and what
    its step key adds to the outcome key: a row edited to name an outcome or attempt the
    file does not hold, or a step of another outcome, cannot be stored so, and is refused
    with the whole file instead of being imported with its names lost."""
    records = _records(exported)
    row = next(r["row"] for r in records if r.get("table") == "rs_events"
               and r["row"]["outcome_key"] == "pay:1" and r["row"]["step_key"])
    row[column] = value
    bad = _write(tmp_path / "bad.jsonl", records)
    target = _fresh(tmp_path / "target")
    proc = target.run("import", *(["--merge"] if merge else []), str(bad))
    _one_line_refusal(proc)
    assert said in proc.stderr and "nothing was imported" in proc.stderr, proc.stderr
    assert _keys(target) == []


@pytest.mark.parametrize("older_version", [10, 11])
def test_an_export_of_schema_10_imports_and_reads_back_the_same(
        tmp_path: Path, exported: Path, older_version: int) -> None:
    """Schemas 11 and 12 changed how the history is stored, not the rows an export
    holds: a file written by a retrysafe of schema 10 or 11 imports, and exports again
    row for row."""
    records = _records(exported)
    assert records[0]["schema_version"] == SCHEMA_VERSION
    records[0]["schema_version"] = older_version
    older = _write(tmp_path / "older.jsonl", records)
    target = _fresh(tmp_path / "target")
    proc = target.run("import", str(older))
    assert proc.returncode == 0, proc.stderr
    again = tmp_path / "again.jsonl"
    assert target.run("export", str(again)).returncode == 0
    rows = [r for r in _records(again) if "table" in r]
    assert rows == [r for r in records if "table" in r]
    history = json.loads(target.run("history", "pay:1", "--json").stdout)
    assert [e["actor"] for e in history][:1] == ["attempt-1"]
    for version in (9, SCHEMA_VERSION + 1):
        records[0]["schema_version"] = version
        proc = target.run("import", "--merge", str(_write(tmp_path / f"v{version}.jsonl", records)))
        _one_line_refusal(proc)
        assert "schema version" in proc.stderr
