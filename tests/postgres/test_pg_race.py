"""Many workers, one PostgreSQL ledger: every effect exactly once."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import psycopg
import pytest
from pgrace import (
    assert_exactly_once_and_intact,
    fast_folder,
    race_home,
    worker_cmd,
    worker_env,
)

from retrysafe.ledger import open_ledger

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# the default run races 8 workers over 200 outcomes; 32 over 1,000 is the heavy tier's
RACES = [pytest.param(8, 200, id="8-workers"),
         pytest.param(32, 1000, id="32-workers", marks=pytest.mark.heavy)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("workers", "outcomes"), RACES)
def test_workers_racing_over_the_same_outcomes_do_each_effect_exactly_once(
        pg_db: str, workers: int, outcomes: int) -> None:
    """Many processes (32 over 1,000 outcomes in the heavy tier), each with its own
    connections, go through the same outcomes in their own shuffled order; busy outcomes
    are skipped and retried. Every outcome ends done, with exactly one row in the effects
    table as its evidence."""
    dbname = pg_db.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(pg_db, autocommit=True) as conn:
        # commit durability is the restart test's subject; here, locking and fencing
        conn.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    open_ledger(pg_db).close()
    folder = fast_folder()
    try:
        home = race_home(folder / "home", lease_seconds=10)
        began = time.monotonic()
        procs = [subprocess.Popen(worker_cmd(home, pg_db, pg_db, outcomes, seed),
                                  env=worker_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for seed in range(workers)]
        outs = [p.communicate(timeout=540) for p in procs]
        elapsed = time.monotonic() - began
        failed = [(p.returncode, err[-3000:]) for p, (_o, err) in zip(procs, outs, strict=True)
                  if p.returncode != 0]
        assert not failed, failed
        stats = [json.loads(out.strip().splitlines()[-1]) for out, _e in outs]
        with open_ledger(pg_db) as ledger:
            assert_exactly_once_and_intact(ledger, pg_db, outcomes)
        # the workers' own count agrees with the table: nobody executed twice
        assert sum(s["effects"] for s in stats) == outcomes
        print(f"{workers} workers, {outcomes} outcomes: {elapsed:.1f}s, "
              f"busy {sum(s['busy'] for s in stats)}, stale {sum(s['stale'] for s in stats)}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
