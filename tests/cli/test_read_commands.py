"""Reading, deciding and agent commands as real processes: bad input is refused
before anything is written, and a mistyped home is never created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import Home

CONFIG = """
    [jobs.report]
    key = "report:{week}"
    params = { week = "isoweek" }
"""


@pytest.fixture
def ready(home: Home) -> Home:
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    for week in ("2026-W01", "2026-W02"):
        proc = home.run("run", "report", "-p", f"week={week}", "--", "true")
        assert proc.returncode == 0, proc.stderr
    return home


def one_line_error(proc, match: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retrysafe: "), proc.stderr
    assert match in lines[0], lines[0]


@pytest.mark.parametrize(("args", "match"), [
    (["--state", "bogus"], "unknown state 'bogus' (states: planned, running"),
    (["--limit", "-1"], "--limit"),
    (["--limit", "0"], "--limit"),
])
def test_ls_refuses_a_bad_state_or_limit(ready: Home, args: list[str], match: str) -> None:
    """ls with a state that does not exist or a limit below 1: exit 2 and one
    line, not an empty listing that looks like an answer."""
    one_line_error(ready.run("ls", *args), match)


def test_ls_still_filters_by_a_real_state(ready: Home) -> None:
    """A real state is accepted and filters."""
    proc = ready.run("ls", "--state", "done", "--limit", "1", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 1


READERS = [
    ["status", "report:2026-W01"],
    ["history", "report:2026-W01"],
    ["ls"],
    ["verify", "report:2026-W01"],
    ["resolve", "report:2026-W01", "send", "--absent"],
    ["approve", "report:2026-W01", "send"],
    ["retry", "report:2026-W01"],
    ["check", "report:2026-W01", "send", "--class", "message"],
    ["intent", "report:2026-W01", "send", "--class", "message", "--attempt", "x"],
    ["record", "report:2026-W01", "send", "--evidence", "e", "--attempt", "x"],
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_a_mistyped_home_is_never_created(tmp_path: Path, args: list[str]) -> None:
    """Reading and deciding commands against a home that does not exist: exit 2,
    "no ledger at PATH", and no home, folder or ledger appears."""
    home = Home(tmp_path / "typo")
    proc = home.run(*args)
    one_line_error(proc, f"no ledger at {home.path / 'ledger.sqlite3'} (is --home right?)")
    assert not home.path.exists()


def test_a_home_without_a_ledger_stays_without_one(home: Home) -> None:
    """A home holding only its config: status creates no ledger in it."""
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    before = sorted(p.name for p in home.path.iterdir())
    one_line_error(home.run("status", "report:2026-W01"), "no ledger at")
    assert sorted(p.name for p in home.path.iterdir()) == before


def test_status_of_a_job_name_lists_its_recent_keys(ready: Home) -> None:
    """A job's name where a key is expected: said so, with the job's recent keys."""
    proc = ready.run("status", "report")
    one_line_error(proc, "'report' is a job, not an outcome key")
    assert "report:2026-W01" in proc.stderr and "report:2026-W02" in proc.stderr
    one_line_error(ready.run("history", "report"), "is a job")


def _lease(home: Home, attempt_id: str) -> float:
    with home.open_ledger() as ledger:
        record = ledger.attempt(attempt_id)
        assert record is not None
        return float(record.lease_expires)


@pytest.mark.parametrize("args", [
    ["intent", "report:2026-W03", "send", "--class", "teleport"],
    ["intent", "report:2026-W03", "a/b", "--class", "message"],
    ["intent", "report:2026-W03", "send", "--class", "message", "--item", "../x"],
    ["record", "report:2026-W03", "send", "--evidence", "e", "--item", "a/b"],
    ["record", "report:2026-W03", "send", "--evidence", "  "],
    ["check", "report:2026-W03", "send", "--class", "teleport"],
    ["unknown", "report:2026-W03", "a/b", "--reason", "r"],
    ["block", "report:2026-W03", "..", "--reason", "r"],
], ids=lambda a: " ".join(a[2:4]))
def test_bad_agent_input_leaves_the_lease_unchanged(ready: Home, args: list[str]) -> None:
    """intent/record/check/unknown/block with bad input: exit 2 and the attempt's
    lease_expires exactly as it was (input is checked before the lease renewal)."""
    begun = ready.run("begin", "report", "-p", "week=2026-W03", "--lease", "600", "--json")
    attempt = json.loads(begun.stdout)["attempt_id"]
    lease = _lease(ready, attempt)
    before = ready.snapshot()
    proc = ready.run(*args, "--attempt", attempt)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _lease(ready, attempt) == lease
    assert ready.snapshot() == before


def test_good_agent_input_still_renews_the_lease(ready: Home) -> None:
    """The same commands with good input renew the lease, as before."""
    import time

    begun = ready.run("begin", "report", "-p", "week=2026-W03", "--lease", "600", "--json")
    attempt = json.loads(begun.stdout)["attempt_id"]
    lease = _lease(ready, attempt)
    time.sleep(0.05)
    proc = ready.run("intent", "report:2026-W03", "send", "--class", "message", "--attempt", attempt)
    assert proc.returncode == 0, proc.stderr
    assert _lease(ready, attempt) > lease


def test_doctor_reports_a_broken_config_with_exit_1(home: Home) -> None:
    """doctor on a config that cannot be read says what is wrong and exits 1, as
    docs/cli.md says ("Exit 1 when something is wrong")."""
    home.path.mkdir(parents=True)
    (home.path / "retrysafe.toml").write_text("[jobs.report\n")
    proc = home.run("doctor", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False and "config_error" in report
    assert report["config"] == str(home.path / "retrysafe.toml")
    text = home.run("doctor")
    assert text.returncode == 1 and "config_error" in text.stdout


def test_doctor_on_a_mistyped_home_reports_it_and_creates_nothing(tmp_path: Path) -> None:
    """doctor reads: a home that does not exist is reported (is --home right?), never
    created; an existing home whose first run has not happened yet is fine."""
    from support import Home

    missing = Home(tmp_path / "typo")
    proc = missing.run("doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["home_exists"] is False and "is --home right?" in report["home_state"]
    assert not missing.path.exists()
    fresh = Home(tmp_path / "fresh")
    fresh.path.mkdir()
    ok = fresh.run("doctor", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True
    assert sorted(p.name for p in fresh.path.iterdir()) == []


def test_doctor_fails_on_a_damaged_ledger_and_its_advice_works(ready: Home) -> None:
    """A ledger file whose pages SQLite's quick_check finds damaged (here its header
    counts free pages that do not exist, which every command still opens) is a
    failed check, exit 1, with what to do; doing it (export, then move the file
    aside and recover) gets the outcomes back into a ledger doctor passes."""
    import sqlite3

    db = ready.path / "ledger.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with db.open("r+b") as f:
        f.seek(36)  # the header's count of free pages
        f.write((5).to_bytes(4, "big"))
    proc = ready.run("doctor", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["integrity"] == "damaged"
    (problem,) = report["problems"]
    assert "freelist" in problem and "retrysafe recover" in problem
    text = ready.run("doctor")
    assert text.returncode == 1
    assert [ln for ln in text.stdout.splitlines() if ln.startswith("problem ")] == [
        f"{'problem':20} {problem}"]

    assert ready.run("export", str(ready.path.parent / "saved.jsonl")).returncode == 0
    aside = ready.path.parent / "aside"
    aside.mkdir()
    for f in ready.path.glob("ledger.sqlite3*"):
        f.rename(aside / f.name)
    assert ready.run("recover").returncode == 0
    after = ready.run("doctor", "--json")
    assert after.returncode == 0 and json.loads(after.stdout)["integrity"] == "ok"
    status = ready.run("status", "report:2026-W02", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["outcome"]["state"] == "done"


def test_doctor_reports_damage_that_stops_the_check_itself(ready: Home) -> None:
    """A damaged b-tree root makes SQLite's quick_check raise rather than list what it
    found: that is damage too, reported as such, with what to do (exit 1)."""
    import sqlite3

    db = ready.path / "ledger.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'rs_history'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with db.open("r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\0\0\0\0")  # the page's type and header: no b-tree page any more
    proc = ready.run("doctor", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["integrity"] == "damaged" and "malformed" in report["problems"][0]
    assert "retrysafe recover" in report["problems"][0]


def test_doctor_reports_a_ledger_without_tables_and_writes_none(home: Home) -> None:
    """doctor only reads: a ledger file of no bytes (or any database without retrysafe's
    tables: a mistyped URL) is reported as such, never given the tables."""
    import sqlite3

    home.path.mkdir(parents=True)
    home.config(CONFIG)
    db = home.path / "ledger.sqlite3"
    db.touch()
    proc = home.run("doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert "no bytes" in report["ledger_state"]
    assert db.stat().st_size == 0  # not even SQLite's header was written
    other = home.path / "other.sqlite3"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    proc = home.run("doctor", "--json", env={"RETRYSAFE_LEDGER": f"sqlite:///{other}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["schema_version"] == 0 and "no retrysafe tables" in report["ledger_state"]
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [
        ("t",)]


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_doctor_fails_for_a_home_whose_ledger_was_deleted_or_emptied(home: Home, how: str) -> None:
    """Every command refuses a home whose runs/ were written with a ledger that is now
    gone or empty; doctor says so (exit 1, a problem naming recover) instead of "the
    first run creates it", and changes nothing."""
    home.path.mkdir(parents=True)
    home.config(CONFIG)
    assert home.run("run", "report", "-p", "week=2026-W10", "--", "true").returncode == 0
    db = home.path / "ledger.sqlite3"
    for suffix in ("-wal", "-shm", ""):
        (home.path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    if how == "emptied":
        db.touch()
    proc = home.run("doctor", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False and "retrysafe recover" in report["problems"][0]
    assert db.exists() == (how == "emptied") and (not db.exists() or db.stat().st_size == 0)
    for refused in (home.run("run", "report", "-p", "week=2026-W10", "--", "true"),
                    home.run("migrate")):
        assert refused.returncode == 2 and "retrysafe recover" in refused.stderr, refused.stderr
        # refused before the ledger was opened: it is not made again behind the refusal
        assert db.exists() == (how == "emptied") and (not db.exists() or db.stat().st_size == 0)


@pytest.mark.parametrize(("made", "typed"), [("NFC", "NFD"), ("NFD", "NFC")])
def test_a_key_typed_in_the_other_unicode_form_finds_its_outcome(
        home: Home, made: str, typed: str) -> None:
    """'café' composed (NFC) and decomposed (NFD) look the same on a terminal: a KEY
    typed in the other form than the one the ledger holds names the same outcome, for
    reading and deciding commands alike; a key the ledger holds in neither form is still
    unknown, and an ASCII key is looked up as typed."""
    import unicodedata

    home.path.mkdir(parents=True, exist_ok=True)
    # a parameter's value is stored composed (NFC); the template's own text as written
    word = unicodedata.normalize(made, "crème")
    home.config(f'[jobs.menu]\nkey = "{word}:{{dish}}"\nparams = {{ dish = "slug" }}\n'
                'max_attempts = 1\n')
    dish = "brulee"
    key, other = f"{word}:{dish}", unicodedata.normalize(typed, f"{word}:{dish}")
    assert key != other
    ran = home.run("run", "menu", "-p", f"dish={dish}", "--", "false")
    assert ran.returncode == 1, ran.stderr
    spent = home.run("run", "menu", "-p", f"dish={dish}", "--", "false")
    assert spent.returncode == 3, spent.stderr  # blocked: its one attempt is spent
    shown = home.run("status", other, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["outcome"]["key"] == key
    assert home.run("history", other).returncode == 0
    retried = home.run("retry", other)
    assert retried.returncode == 0, retried.stderr
    status = json.loads(home.run("status", key, "--json").stdout)
    assert status["outcome"]["state"] == "settled"
    missing = home.run("status", unicodedata.normalize(typed, f"{word}:caramel"))
    assert missing.returncode == 2
    assert "no outcome" in missing.stderr
