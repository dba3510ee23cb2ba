"""The ledger's state machine under random operations (hypothesis stateful testing).

Whatever sequence of claims, step moves, finishes and human decisions runs,
the invariants hold: one live attempt at most, fences only grow, a done
outcome never changes and has only done steps, stale attempts never write,
and every step transition in the history is a legal one.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from retrysafe.errors import RetrysafeError, StaleAttempt
from retrysafe.ledger import AttemptRecord, Holder, open_ledger
from retrysafe.states import STEP_TRANSITIONS, can_move

KEY = "job:1"
STEPS = ("a", "b")
TARGETS = ("running", "done", "failed", "unknown", "blocked")


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.ledger = open_ledger(f"sqlite:///{Path(self.dir.name) / 'l.db'}",
                                  sqlite_synchronous="normal")
        self.attempts: list[AttemptRecord] = []
        self.done_snapshot: tuple[object, ...] | None = None
        self.max_fence = 0

    def teardown(self) -> None:
        self.ledger.close()
        self.dir.cleanup()

    @rule(gone=st.booleans())
    def claim(self, gone: bool) -> None:
        c = self.ledger.claim(KEY, job="job", params={}, holder=Holder("h", 1), lease_seconds=3600,
                              max_attempts=4, holder_gone=lambda _h: gone)
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


LedgerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestLedgerStateMachine = LedgerMachine.TestCase
