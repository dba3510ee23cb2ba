"""``retrysafe export`` / ``import``: a ledger moved SQLite -> PostgreSQL -> SQLite, every row kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pgtest import empty_ledger_tables
from support import Home

RS = f"{sys.executable} -m retrysafe"
CONFIG = """
[notify]
timeout = 1

[notify.channels.ops]
type = "webhook"
url = "http://127.0.0.1:9/nobody-listens"

[jobs.pay]
key = "pay:{n}"
params = { n = "int" }
max_attempts = 2
"""


def rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of every ledger table at ``url``."""
    from retrysafe.ledger import open_ledger
    from retrysafe.ledger.transfer import TABLES, rows_of

    with open_ledger(url) as ledger, ledger.backend.transaction(write=False) as tx:
        return {t: rows_of(tx, t) for t in TABLES}


def filled(home: Home) -> Home:
    """A ledger with a done outcome, a blocked one (approval), a per-item step, a failed retry,
    and the notifications of the blocked and failed ones (pending: nobody listens)."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    script = (f"{RS} step post --class message -- echo post-1 && "
              f"{RS} step mail --item a-b --class message -- echo m-1 && "
              f"{RS} step charge --class payment -- echo ch-1")
    assert home.run("run", "pay", "-p", "n=1", "--", "sh", "-c", script).returncode == 3
    assert home.run("run", "pay", "-p", "n=2", "--", "true").returncode == 0
    assert home.run("run", "pay", "-p", "n=3", "--", "false").returncode == 1
    assert home.run("approve", "pay:1", "charge").returncode == 0
    return home


@pytest.fixture
def pg_url(pg_dsn: str) -> str:
    from retrysafe.ledger import open_ledger

    with open_ledger(pg_dsn):
        pass  # migrated
    empty_ledger_tables(pg_dsn)
    return pg_dsn


@pytest.mark.postgres
def test_round_trip_sqlite_postgres_sqlite_keeps_every_row(tmp_path: Path, pg_url: str) -> None:
    """SQLite -> export -> import into PostgreSQL -> export -> import into a new SQLite: every row
    of every table is equal at each stop (history ids included), and both copies keep working."""
    src = filled(Home(tmp_path / "src"))
    src_url = f"sqlite:///{src.path / 'ledger.sqlite3'}"
    first = tmp_path / "a.jsonl"
    out = src.run("export", str(first))
    assert out.returncode == 0, out.stderr
    assert first.stat().st_mode & 0o777 == 0o600
    pg = Home(tmp_path / "pg", ledger=pg_url)
    pg.path.mkdir()
    pg.config(CONFIG)
    assert pg.run("import", str(first)).returncode == 0
    before = rows(src_url)
    assert all(before[t] for t in before)
    assert rows(pg_url) == before
    second = tmp_path / "b.jsonl"
    assert pg.run("export", str(second)).returncode == 0
    back = Home(tmp_path / "back")
    back.path.mkdir()
    back.config(CONFIG)
    done = back.run("import", str(second), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["history"] == len(before["rs_events"])
    assert rows(f"sqlite:///{back.path / 'ledger.sqlite3'}") == before
    # the copies are live ledgers: the approved payment runs on; new history rows get new ids
    for home in (pg, back):
        again = home.run("run", "pay", "-p", "n=1", "--", "sh", "-c",
                         f"{RS} step post --class message -- echo post-2 && "
                         f"{RS} step charge --class payment -- echo ch-1")
        assert again.returncode == 0, again.stderr
        status = json.loads(home.run("status", "pay:1", "--json").stdout)
        assert {s["name"]: s["evidence"] for s in status["steps"]}["post"] == "post-1"


@pytest.mark.postgres
def test_a_home_moves_its_own_ledger_to_postgresql_as_the_docs_show(
        tmp_path: Path, pg_url: str) -> None:
    """docs/cli.md: ``retrysafe export all.jsonl && RETRYSAFE_LEDGER=... retrysafe import
    all.jsonl``, pasted in the home that wrote the SQLite ledger: the new ledger takes the
    home's ledger's identity, so its runs go on there (a done outcome stays done). A file
    from another home's ledger is still refused there."""
    home = filled(Home(tmp_path / "home"))
    moved = home.run("export", "all.jsonl", cwd=home.path)
    assert moved.returncode == 0, moved.stderr
    into = home.run("import", "all.jsonl", cwd=home.path, env={"RETRYSAFE_LEDGER": pg_url})
    assert into.returncode == 0, into.stdout + into.stderr
    again = home.run("run", "pay", "-p", "n=2", "--", "false", env={"RETRYSAFE_LEDGER": pg_url})
    assert again.returncode == 0 and "already done" in again.stdout, again.stdout + again.stderr
    empty_ledger_tables(pg_url)
    other = filled(Home(tmp_path / "other"))
    assert other.run("export", str(tmp_path / "other.jsonl")).returncode == 0
    foreign = home.run("import", str(tmp_path / "other.jsonl"), env={"RETRYSAFE_LEDGER": pg_url})
    assert foreign.returncode == 2 and "another ledger" in foreign.stderr, foreign.stderr


def test_import_refuses_a_non_empty_ledger_and_merge_refuses_a_shared_key(tmp_path: Path,
                                                                         any_home: Home) -> None:
    """Into a ledger that holds anything, import exits 2 unless --merge; --merge with a key the
    target has exits 2 and imports nothing; --merge of new keys adds them."""
    src = filled(Home(tmp_path / "src"))
    dump = tmp_path / "a.jsonl"
    assert src.run("export", str(dump)).returncode == 0
    assert src.run("export", str(dump)).returncode == 2  # exists: --force to overwrite
    target = any_home
    target.path.mkdir(parents=True, exist_ok=True)
    target.config(CONFIG)
    assert target.run("run", "pay", "-p", "n=2", "--", "true").returncode == 0
    plain = target.run("import", str(dump))
    assert plain.returncode == 2 and "not empty" in plain.stderr
    clash = target.run("import", "--merge", str(dump))
    assert clash.returncode == 2 and "pay:2" in clash.stderr
    assert [o["key"] for o in json.loads(target.run("ls", "--json").stdout)] == ["pay:2"]
    lines = [json.loads(ln) for ln in dump.read_text().splitlines()]
    others = [ln for ln in lines if "format" in ln
              or (ln["row"].get("outcome_key") or ln["row"].get("key")) != "pay:2"]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in others))
    merged = target.run("import", "--merge", str(tmp_path / "b.jsonl"))
    assert merged.returncode == 0, merged.stderr
    keys = sorted(o["key"] for o in json.loads(target.run("ls", "--json").stdout))
    assert keys == ["pay:1", "pay:2", "pay:3"]
    history = json.loads(target.run("history", "pay:1", "--json").stdout)
    assert [e["reason"] for e in history] == [
        e["row"]["reason"] for e in others if e.get("table") == "rs_events"
        and e["row"]["outcome_key"] == "pay:1"]

    # the notifications came along, each naming its transition's new history row
    theirs = {ln["row"]["id"]: ln["row"] for ln in others if ln.get("table") == "rs_events"}
    sent = [ln["row"] for ln in others if ln.get("table") == "rs_notifications"]
    assert "pay:1" in {n["outcome_key"] for n in sent}  # blocked: its notification is pending
    from retrysafe.ledger.transfer import rows_of

    with target.open_ledger() as ledger, ledger.backend.transaction(write=False) as tx:
        ours = {r["id"]: r for r in rows_of(tx, "rs_events")}
        notes = rows_of(tx, "rs_notifications")
    assert len(notes) == len(sent)
    for before, after in zip(sorted(sent, key=lambda n: n["id"]),
                             sorted(notes, key=lambda n: n["id"]), strict=True):
        assert {k: v for k, v in after.items() if k not in ("id", "event_id")} == \
            {k: v for k, v in before.items() if k not in ("id", "event_id")}
        old, new = theirs[before["event_id"]], ours[after["event_id"]]
        assert (new["outcome_key"], new["kind"], new["to_state"], new["at"]) == \
            (old["outcome_key"], old["kind"], old["to_state"], old["at"])


def test_import_refuses_a_file_that_is_not_an_export(home: Home, tmp_path: Path) -> None:
    """A file without the header, or with another schema version, is refused with one line."""
    home.path.mkdir(parents=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"table": "rs_outcomes", "row": {}}\n')
    proc = home.run("import", str(bad))
    assert proc.returncode == 2 and "header" in proc.stderr
    bad.write_text('{"format": "retrysafe-ledger", "schema_version": 999}\n')
    proc = home.run("import", str(bad))
    assert proc.returncode == 2 and "schema version 999" in proc.stderr


def _batches(records: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """A prune --export file of one batch per key (a header each), its history ids and
    notification ids counted from 1 in every batch, as batches written by different
    ledgers would be."""
    header = next(r for r in records if "format" in r)
    out: list[dict[str, Any]] = []
    for key in keys:
        mine = [json.loads(json.dumps(r)) for r in records if "table" in r
                and (r["row"].get("outcome_key") or r["row"].get("key")) == key]
        ids = {r["row"]["id"]: i for i, r in enumerate(
            (r for r in mine if r["table"] == "rs_events"), 1)}
        for n, r in enumerate((r for r in mine if r["table"] == "rs_notifications"), 1):
            r["row"]["id"], r["row"]["event_id"] = n, ids.get(r["row"]["event_id"], 0)
        for r in mine:
            if r["table"] == "rs_events":
                r["row"]["id"] = ids[r["row"]["id"]]
        out += [{k: v for k, v in header.items() if k != "identity"}, *mine]
    return out


def test_merge_renumbers_each_batch_and_keeps_a_notification_the_ledger_has(
        tmp_path: Path) -> None:
    """History ids repeat across the batches of one file: each notification names its
    own batch's row. A missed-occurrence notification the ledger already holds (noted
    again since) is kept as it is, not a reason to refuse the file. A notification
    naming a row its batch does not hold is refused, and nothing is imported."""
    from retrysafe.ledger import open_ledger
    from retrysafe.ledger.transfer import dump, load, rows_of

    src = filled(Home(tmp_path / "src"))
    with src.open_ledger() as ledger:
        records = list(dump(ledger))
        with ledger.backend.transaction(write=False) as tx:
            noted = {r["outcome_key"] for r in rows_of(tx, "rs_notifications")}
    keys = sorted(noted)
    assert len(keys) >= 1
    missed = {"outcome_key": "pay:missed", "job": "pay", "event_id": 0, "event": "missed",
              "channel": "ops", "state": "sent", "tries": 1, "last_error": "", "body": "{}",
              "claimed_until": None, "created_at": 1.0, "updated_at": 1.0, "sent_at": 1.0}
    target = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    with open_ledger(target) as ledger:
        with ledger.backend.transaction() as tx:
            cols = [c for c in missed]
            tx.run(f"INSERT INTO rs_notifications ({', '.join(cols)}) VALUES"
                   f" ({', '.join('?' * len(cols))})", tuple(missed[c] for c in cols))
        file = _batches(records, [*keys, "pay:2"])
        file.append({"table": "rs_notifications", "row": {**missed, "id": 99, "state": "pending"}})
        bad = [*file, {"table": "rs_notifications", "row": {**missed, "id": 98,
                                                          "outcome_key": keys[0],
                                                          "event": "blocked", "event_id": 77}}]
        with pytest.raises(Exception, match="names history row 77"):
            load(ledger, bad, merge=True)
        with ledger.backend.transaction(write=False) as tx:
            assert [r["outcome_key"] for r in rows_of(tx, "rs_notifications")] == ["pay:missed"]
            assert rows_of(tx, "rs_outcomes") == []
        load(ledger, file, merge=True)
        with ledger.backend.transaction(write=False) as tx:
            events = {r["id"]: r for r in rows_of(tx, "rs_events")}
            notes = rows_of(tx, "rs_notifications")
    assert [n["state"] for n in notes if n["outcome_key"] == "pay:missed"] == ["sent"]
    for n in notes:
        if n["event_id"]:
            assert events[n["event_id"]]["outcome_key"] == n["outcome_key"], n
    assert {n["outcome_key"] for n in notes} >= set(keys)
