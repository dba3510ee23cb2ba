"""The ledger's state machine under random operations (hypothesis stateful testing).

Whatever sequence of claims, step moves, finishes and human decisions runs,
the invariants hold: one live attempt at most, fences only grow, a done
outcome never changes and has only done steps, stale attempts never write,
and every step transition in the history is a legal one.

The model runs once per backend through the ``ledger_url`` fixture (SQLite,
PostgreSQL). Every example starts on a fresh, empty ledger: a new SQLite file,
or on PostgreSQL the run's database with every ledger table truncated (the
schema and its migrations are kept; identities restart, so an example replays
with the same ids when hypothesis shrinks it).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from pgtest import empty_ledger_tables

from retrysafe.errors import RetrysafeError, StaleAttempt
from retrysafe.ledger import AttemptRecord, Holder, Ledger, open_ledger
from retrysafe.states import STEP_TRANSITIONS, can_move

KEY = "job:1"
STEPS = ("a", "b")
TARGETS = ("running", "done", "failed", "unknown", "blocked")

FreshLedger = Callable[[], contextlib.AbstractContextManager[Ledger]]

#: Hypothesis settings per backend. Both legs run the same number of examples
#: and steps. A PostgreSQL example costs about five SQLite ones (network round
#: trips, the truncation, a connection pool per example), so its leg takes
#: seconds rather than one; raise its budget here, not the SQLite one, if it
#: should explore more.
SETTINGS = {
    "sqlite": settings(max_examples=60, stateful_step_count=25, deadline=None),
    "postgres": settings(max_examples=60, stateful_step_count=25, deadline=None),
}


def fresh_sqlite(folder: Path) -> FreshLedger:
    """Each example on its own new SQLite file under ``folder``, deleted afterwards."""

    @contextlib.contextmanager
    def fresh() -> Iterator[Ledger]:
        with tempfile.TemporaryDirectory(dir=folder) as tmp, \
                open_ledger(f"sqlite:///{Path(tmp) / 'l.db'}", sqlite_synchronous="normal") as led:
            yield led

    return fresh


def fresh_postgres(dsn: str) -> FreshLedger:
    """Each example on the run's database with every ledger table emptied first.

    ``TRUNCATE ... RESTART IDENTITY`` of the ``rs_`` tables found in the
    schema (all but ``rs_schema``, the migration record): cheaper than a
    database or schema per example, and as empty as a fresh ledger, including
    tables added by later migrations.
    """

    @contextlib.contextmanager
    def fresh() -> Iterator[Ledger]:
        empty_ledger_tables(dsn)
        with open_ledger(dsn) as led:
            yield led

    return fresh


class LedgerMachine(RuleBasedStateMachine):
    """One example: random operations on one outcome of a fresh ledger from ``fresh``."""

    def __init__(self, fresh: FreshLedger) -> None:
        super().__init__()
        self._closing = contextlib.ExitStack()
        self.ledger = self._closing.enter_context(fresh())
        try:  # isolation: nothing an earlier example did may be visible
            assert self.ledger.outcome(KEY) is None and self.ledger.history(KEY) == []
        except BaseException:
            self._closing.close()
            raise
        self.attempts: list[AttemptRecord] = []
        self.done_snapshot: tuple[object, ...] | None = None
        self.max_fence = 0

    def teardown(self) -> None:
        self._closing.close()

    @rule(gone=st.booleans())
    def claim(self, gone: bool) -> None:
        c = self.ledger.claim(KEY, job="job", params={}, holder=Holder("h", 1), lease_seconds=3600,
                              max_attempts=4, liveness=lambda _a, _r: (False, "holder process is gone") if gone else (None, ""))
        if c.status == "started":
            assert c.attempt is not None
            assert c.attempt.fence > self.max_fence
            self.max_fence = c.attempt.fence
            self.attempts.append(c.attempt)
        elif c.status == "busy":
            assert not gone

    @rule(step=st.sampled_from(STEPS), to=st.sampled_from(TARGETS), which=st.integers(0, 5))
    def move(self, step: str, to: str, which: int) -> None:
        if not self.attempts:
            return
        attempt = self.attempts[min(which, len(self.attempts) - 1)]
        before = self.ledger.step(f"{KEY}/{step}")
        current = self.ledger.outcome(KEY)
        stale = current is None or current.fence != attempt.fence or current.current_attempt != attempt.id
        try:
            self.ledger.move_step(attempt, f"{KEY}/{step}", to, name=step, evidence="ev")
        except StaleAttempt:
            assert stale
            assert self.ledger.step(f"{KEY}/{step}") == before
            return
        except RetrysafeError:
            assert self.ledger.step(f"{KEY}/{step}") == before
            return
        assert not stale, "a stale attempt wrote"

    @rule(state=st.sampled_from(("done", "failed", "unknown", "blocked")))
    def finish(self, state: str) -> None:
        if not self.attempts:
            return
        try:
            self.ledger.finish(self.attempts[-1], state, "r", accepted=state == "done")
        except RetrysafeError:
            return
        if state == "done":
            steps = self.ledger.steps(KEY)
            assert all(s.state == "done" for s in steps)

    @rule(step=st.sampled_from(STEPS), found=st.booleans())
    def resolve(self, step: str, found: bool) -> None:
        with contextlib.suppress(RetrysafeError):
            self.ledger.resolve(KEY, step, found="x" if found else None, actor="human")

    @rule()
    def retry(self) -> None:
        with contextlib.suppress(RetrysafeError):
            self.ledger.retry(KEY, actor="human")

    @invariant()
    def one_live_attempt_and_done_is_final(self) -> None:
        out = self.ledger.outcome(KEY)
        if out is None:
            return
        active = [a for a in self.ledger.attempts(KEY) if a.state == "active"]
        assert len(active) <= 1
        if active:
            assert out.current_attempt == active[0].id and out.fence == active[0].fence
        if out.state == "done":
            snap = (out.fence, out.attempts, tuple((s.step_key, s.state, s.evidence)
                                                  for s in self.ledger.steps(KEY)))
            if self.done_snapshot is not None:
                assert snap == self.done_snapshot
            self.done_snapshot = snap
            assert not active

    @invariant()
    def history_has_only_legal_step_transitions(self) -> None:
        for e in self.ledger.history(KEY):
            if e.kind == "step" and e.from_state:
                assert can_move(STEP_TRANSITIONS, e.from_state, e.to_state), e


def test_ledger_state_machine(ledger_url: str, tmp_path: Path) -> None:
    """The invariants above hold for random sequences of operations, on each backend."""
    if ledger_url.startswith("sqlite"):
        backend, fresh = "sqlite", fresh_sqlite(tmp_path)
    else:
        backend, fresh = "postgres", fresh_postgres(ledger_url)
    run_state_machine_as_test(lambda: LedgerMachine(fresh), settings=SETTINGS[backend])
