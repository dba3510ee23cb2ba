"""Shared by the PostgreSQL race, zombie and restart tests: the effects table,
the job, worker processes, and the checks that nothing happened twice and
nothing was lost."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import psycopg

from retrysafe.ledger import Ledger

WORKER = Path(__file__).with_name("pg_worker.py")
ZOMBIE = Path(__file__).with_name("zombie_child.py")

EFFECTS_TABLE = """
CREATE TABLE effects (
    id BIGSERIAL PRIMARY KEY,
    step_key TEXT NOT NULL,
    pid INTEGER NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
)
"""


def race_home(folder: Path, lease_seconds: int, max_attempts: int = 50) -> Path:
    """A home declaring job ``race`` with outcomes ``race:<n>``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "retrysafe.toml").write_text(textwrap.dedent(f"""\
        [jobs.race]
        key = "race:{{n}}"
        params = {{ n = "int" }}
        lease_seconds = {lease_seconds}
        max_attempts = {max_attempts}
    """))
    return folder


def fast_folder() -> Path:
    """A temporary folder for many attempt folders. Memory-backed when the system has
    one: the attempt files' fsyncs are not what these tests measure."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="rs-race-", dir=base))


def worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")
           or k.startswith("RETRYSAFE_TEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def worker_cmd(home: Path, ledger: str, effects: str, count: int, seed: int,
               *flags: str) -> list[str]:
    return [sys.executable, str(WORKER), str(home), ledger, effects, str(count), str(seed),
            *flags]


def effects_by_step(url: str) -> dict[str, list[int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT step_key, id FROM effects ORDER BY id").fetchall()
    out: dict[str, list[int]] = {}
    for step_key, ident in rows:
        out.setdefault(step_key, []).append(int(ident))
    return out


def assert_exactly_once_and_intact(ledger: Ledger, effects_url: str, count: int) -> None:
    """Every outcome ``race:<n>`` is done with its one effect as evidence, and its
    history is a complete record: every attempt started and ended on record, and
    every step and outcome transition continues from the state the previous left."""
    effects = effects_by_step(effects_url)
    dupes = {k: v for k, v in effects.items() if len(v) != 1}
    assert not dupes, f"effects happened more than once: {dict(list(dupes.items())[:5])}"
    assert len(effects) == count
    states = Counter(o.state for o in ledger.outcomes(job="race", limit=count + 10))
    assert states == {"done": count}, states
    for n in range(count):
        key = f"race:{n}"
        out = ledger.require_outcome(key)
        steps = ledger.steps(key)
        assert [(s.name, s.state) for s in steps] == [("send", "done")], (key, steps)
        assert steps[0].evidence == str(effects[f"{key}/send"][0]), key
        attempts = ledger.attempts(key)
        accepted = [a for a in attempts if a.id == out.accepted_attempt]
        assert len(accepted) == 1 and accepted[0].result == "done", (key, attempts)
        assert all(a.state in ("finished", "superseded") for a in attempts), (key, attempts)
        history = ledger.history(key)
        assert [e.id for e in history] == sorted(e.id for e in history)
        started = {e.attempt_id for e in history if e.kind == "attempt" and e.to_state == "active"}
        ended = {e.attempt_id for e in history if e.kind == "attempt" and e.from_state == "active"}
        assert started == ended == {a.id for a in attempts}, (key, history)
        for kind, skey in (("outcome", ""), ("step", f"{key}/send")):
            chain = [e for e in history if e.kind == kind and e.step_key == skey]
            for before, after in itertools.pairwise(chain):
                assert after.from_state == before.to_state, (key, kind, before, after)
        outcome_chain = [e for e in history if e.kind == "outcome"]
        assert outcome_chain and outcome_chain[-1].to_state == "done", (key, history)
