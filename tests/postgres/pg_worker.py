"""A worker process racing others over the same outcomes on a PostgreSQL ledger.

Run as ``python pg_worker.py HOME LEDGER_URL EFFECTS_URL COUNT SEED [--exit-on-unavailable]``.
For every outcome ``race:<n>`` (n < COUNT, in an order shuffled by SEED) it
claims an attempt through the library and performs one effect: a row in the
``effects`` table (no unique constraint, so a duplicate would show). The
effect's lookup finds that row by step key, as a provider's lookup would.

Busy or superseded outcomes are skipped and retried on the next pass. When the
ledger is unavailable the worker either waits and retries, or (with
``--exit-on-unavailable``) prints one line and exits 75. Any other error is a
bug: it escapes with a traceback (exit 1). The last line of stdout is a JSON
summary. SIGUSR1 writes every thread's stack to stderr (a test that finds the
worker stuck says where).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import random
import signal
import sys
import time
from typing import Any

import psycopg

import retrysafe
from retrysafe.connectors.base import LookupResult
from retrysafe.engine import Engine
from retrysafe.errors import Busy, LedgerUnavailable, StaleAttempt, StepUnknown

JOB = "race"


class Effects:
    """The "external system": one row per effect, found again by step key."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection[Any] | None = None

    def _conn(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        return self.conn

    def _do(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            raise

    def execute(self, step_key: str) -> str:
        rows = self._do("INSERT INTO effects (step_key, pid) VALUES (%s, %s) RETURNING id",
                        (step_key, os.getpid()))
        return str(rows[0][0])

    def lookup(self, step_key: str) -> LookupResult:
        rows = self._do("SELECT id FROM effects WHERE step_key = %s ORDER BY id", (step_key,))
        if not rows:
            return retrysafe.ABSENT
        if len(rows) > 1:
            return retrysafe.Ambiguous(f"{len(rows)} effects for {step_key}")
        return retrysafe.Found(str(rows[0][0]))


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    home, ledger_url, effects_url, count, seed = argv[:5]
    exit_on_unavailable = "--exit-on-unavailable" in argv
    keys = list(range(int(count)))
    random.Random(int(seed)).shuffle(keys)
    effects = Effects(effects_url)
    engine = Engine.open(home=home, ledger=ledger_url)
    stats = {"effects": 0, "busy": 0, "stale": 0, "unavailable": 0, "unknown": 0, "passes": 0}
    done: set[str] = set()
    pending = keys
    try:
        while pending:
            stats["passes"] += 1
            later: list[int] = []
            for i, n in enumerate(pending):
                key = f"{JOB}:{n}"
                if i % 100 == 0:
                    # what the others finished: skip it without a claim
                    with contextlib.suppress(LedgerUnavailable):
                        done |= {o.key for o in engine.ledger.outcomes(job=JOB, state="done",
                                                                      limit=100_000)}
                if key in done:
                    continue
                try:
                    status = work(engine, effects, n, stats)
                except LedgerUnavailable as exc:
                    stats["unavailable"] += 1
                    if exit_on_unavailable:
                        print(json.dumps(stats))
                        print(f"retrysafe: {exc}", file=sys.stderr)
                        return exc.exit_code
                    time.sleep(0.5)
                    status = "retry"
                if status == "done":
                    done.add(key)
                else:
                    later.append(n)
            pending = later
            if pending:
                time.sleep(0.05)
    finally:
        engine.close()
    print(json.dumps(stats))
    return 0


def work(engine: Engine, effects: Effects, n: int, stats: dict[str, int]) -> str:
    """One try at outcome ``race:n``: ``done``, or ``retry`` (busy, superseded, unknown)."""
    begun = engine.begin(JOB, {"n": str(n)})
    if begun.status == "done":
        return "done"
    if begun.status == "busy":
        stats["busy"] += 1
        return "retry"
    if begun.status != "started":
        raise AssertionError(f"{begun.key}: unexpected claim {begun.status}: {begun.reason}")
    run = begun.run
    assert run is not None
    try:
        before = stats["effects"]

        def execute(step_key: str) -> str:
            evidence = effects.execute(step_key)
            stats["effects"] = before + 1
            return evidence

        run.effect("send", "message", execute=execute, lookup=effects.lookup)
        run.close(success=True)
        return "done"
    except (StaleAttempt, Busy):
        stats["stale"] += 1  # another worker took over; it (or a later pass) finishes
        return "retry"
    except StepUnknown:
        stats["unknown"] += 1
        with contextlib.suppress(StaleAttempt, Busy):
            run.close(success=False, reason="step unknown")
        return "retry"
    except LedgerUnavailable:
        raise
    except BaseException:
        with contextlib.suppress(Exception):  # the original error matters more
            run.close(success=False, reason="worker error")
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
