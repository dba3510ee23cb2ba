"""Random SIGKILLs of whole run process groups, on SQLite and PostgreSQL ledgers.

The default test run does a few trials, every kind of harm among them (the
first trials of a run do each kind once); the full counts (200 on SQLite, 100
on PostgreSQL, 20 ledger deletions) run through ``scripts/reliability-report``,
which sets ``RETRYSAFE_CHAOS_TRIALS`` / ``RETRYSAFE_CHAOS_PG_TRIALS`` /
``RETRYSAFE_CHAOS_LOSS_TRIALS``.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from example_targets import ContentTargets
from kill_trials import Chaos, Figures, write_figures

SQLITE_TRIALS = int(os.environ.get("RETRYSAFE_CHAOS_TRIALS", "6"))
PG_TRIALS = int(os.environ.get("RETRYSAFE_CHAOS_PG_TRIALS", "5"))


def _assert_clean(fig: Figures, trials: int, kinds: list[str] | None = None) -> None:
    assert fig.trials == trials
    if kinds is not None and trials >= len(kinds):
        assert sorted(fig.by_kind) == sorted(kinds), "a kind of harm was left out"
    assert fig.problems == [], "\n".join(fig.problems[:20])
    assert (fig.duplicates, fig.missing_effects, fig.outcomes_lost, fig.outcomes_stuck,
            fig.torn_json, fig.verify_failed, fig.wrong_draft) == (0, 0, 0, 0, 0, 0, 0)
    assert fig.kills > 0, "the delays never caught a run alive: the chaos proved nothing"


@pytest.mark.chaos
@pytest.mark.timeout(7200)
def test_random_kills_on_sqlite(content_targets: ContentTargets, tmp_path: Path) -> None:
    """SIGKILL at random moments (and concurrent runs): no duplicate, no lost outcome."""
    home = content_targets.home(tmp_path / "home")
    seed = int(os.environ.get("RETRYSAFE_CHAOS_SEED", random.randrange(1 << 30)))
    chaos = Chaos(content_targets, home, "sqlite", seed)
    fig = chaos.run(SQLITE_TRIALS)
    write_figures(fig)
    _assert_clean(fig, SQLITE_TRIALS, chaos.kinds())


@pytest.mark.chaos
@pytest.mark.postgres
@pytest.mark.timeout(7200)
def test_random_kills_on_postgres(content_targets: ContentTargets, tmp_path: Path,
                                  pg_dsn: str) -> None:
    """The same chaos with the ledger on PostgreSQL."""
    from retrysafe.errors import ConfigError
    from retrysafe.ledger import open_ledger

    try:
        open_ledger(pg_dsn).close()
    except ConfigError as exc:
        pytest.skip(f"no PostgreSQL ledger backend yet: {exc}")
    with own_database(pg_dsn) as dsn:
        home = content_targets.home(tmp_path / "home", ledger=dsn)
        seed = int(os.environ.get("RETRYSAFE_CHAOS_SEED", random.randrange(1 << 30)))
        chaos = Chaos(content_targets, home, "postgres", seed)
        fig = chaos.run(PG_TRIALS)
    write_figures(fig)
    _assert_clean(fig, PG_TRIALS, chaos.kinds())


LEDGER_LOSS_TRIALS = int(os.environ.get("RETRYSAFE_CHAOS_LOSS_TRIALS", "3"))


@pytest.mark.chaos
@pytest.mark.timeout(3600)
def test_kills_then_the_ledger_deleted(content_targets: ContentTargets, tmp_path: Path) -> None:
    """A kill, then the ledger deleted, over and over: refused, recovered, no duplicate."""
    home = content_targets.home(tmp_path / "home")
    seed = int(os.environ.get("RETRYSAFE_CHAOS_SEED", random.randrange(1 << 30)))
    fig = Chaos(content_targets, home, "sqlite-ledger-loss", seed).ledger_loss(LEDGER_LOSS_TRIALS)
    write_figures(fig)
    _assert_clean(fig, LEDGER_LOSS_TRIALS)


@contextmanager
def own_database(dsn: str) -> Iterator[str]:
    """A database of the chaos run's own on the test server, dropped afterwards.

    Other suites share the server's test database and clear its tables; a
    chaos run that lasts minutes must not have its ledger wiped under it.
    """
    import psycopg

    name = f"retrysafe_chaos_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        yield dsn  # no right to create databases: share the given one
        return
    try:
        yield urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
