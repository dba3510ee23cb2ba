"""Upgrading a ledger written by an earlier schema: it migrates and keeps working."""

from __future__ import annotations

from pathlib import Path

from retrysafe.ledger import Holder, open_ledger
from retrysafe.ledger.migrations import MIGRATIONS, SCHEMA_TABLE, SCHEMA_VERSION, render, statements
from retrysafe.ledger.sqlite import SqliteBackend


def _ledger_at(path: Path, version: int) -> None:
    """A SQLite ledger as a retrysafe knowing schema ``version`` left it."""
    backend = SqliteBackend(path)
    try:
        with backend.transaction() as tx:
            tx.run(render(backend, SCHEMA_TABLE))
            for number, name, script in MIGRATIONS[:version]:
                for stmt in statements(backend, script):
                    tx.run(stmt)
                tx.run("INSERT INTO rs_schema (version, name, applied_at) VALUES (?, ?, 0)",
                       (number, name))
    finally:
        backend.close()


def test_a_version_2_ledger_is_upgraded_and_its_step_moves_keep_their_history(
        tmp_path: Path) -> None:
    """Schema 3 moved SQLite's step history into triggers; an older ledger gets them on open."""
    path = tmp_path / "ledger.sqlite3"
    _ledger_at(path, 2)
    with open_ledger(f"sqlite:///{path}") as led:
        assert led.schema_version() == SCHEMA_VERSION
        claim = led.claim("job:1", job="job", params={}, holder=Holder("h", None),
                          lease_seconds=60, max_attempts=3)
        assert claim.attempt is not None
        led.move_step(claim.attempt, "job:1/send", "running", name="send", expect=[None])
        led.move_step(claim.attempt, "job:1/send", "done", name="send", expect=["running"],
                      evidence="id-1", outcome_state="delivered")
        steps = [(e.from_state, e.to_state, e.actor) for e in led.history("job:1")
                 if e.kind == "step"]
        assert steps == [("", "running", "attempt-1"), ("running", "done", "attempt-1")]
        marks = [(e.from_state, e.to_state) for e in led.history("job:1") if e.kind == "outcome"]
        assert marks[-1] == ("running", "delivered")
