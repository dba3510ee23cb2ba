"""The model's decision table is the code's: every combination of the inputs of
decide in model/decide.pml, printed by SPIN itself (model/decide_table.pml), is
compared with the real Run.decide on a real SQLite ledger and a real attempt.

Holder liveness is what Run.decide sees: a running step's runner is a live
child process of this test, a child that has exited, a holder on another host,
or the step belongs to another attempt.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrysafe.attempt import Run
from retrysafe.config import Job, Settings
from retrysafe.effects import EffectClass, OnUnknown, Policy
from retrysafe.ledger import StepRecord, open_ledger
from retrysafe.ledger.records import Holder
from retrysafe.process import this_holder
from retrysafe.states import Action, BlockCause

MODEL = Path(__file__).parent.parent / "model"

STATES = [None, "planned", "running", "done", "failed", "unknown", "blocked"]
ACTIONS = [Action.EXECUTE, Action.SKIP, Action.LOOKUP, Action.BLOCKED, Action.BUSY]
ON_UNKNOWN = [OnUnknown.REEXECUTE, OnUnknown.LOOKUP, OnUnknown.BLOCK]
STEP_CAUSE = BlockCause.AGENT  # a blocked step's own cause (C_STEP in the model)
CAUSES = [None, STEP_CAUSE, BlockCause.APPROVAL, BlockCause.AMBIGUOUS, BlockCause.NO_LOOKUP,
          BlockCause.NEVER_BLIND, BlockCause.NOT_RETRIED, BlockCause.EXHAUSTED]
ALIVE, DEAD, REMOTE, OTHER = range(4)

Row = tuple[int, ...]


def model_table() -> dict[Row, tuple[int, int]]:
    """Inputs -> (action, cause), as the Promela decide answers them."""
    assert shutil.which("spin"), "spin is not installed: run scripts/setup --test"
    out = subprocess.run(["spin", "decide_table.pml"], cwd=MODEL, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    table: dict[Row, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["ROW"]:
            nums = tuple(int(p) for p in parts[1:])
            table[nums[:10]] = (nums[10], nums[11])
    return table


@pytest.fixture(scope="module")
def holders() -> Iterator[dict[int, Holder]]:
    live = subprocess.Popen(["sleep", "300"])
    gone = subprocess.Popen(["true"])
    gone_holder = this_holder(gone.pid)
    gone.wait()
    try:
        yield {ALIVE: this_holder(live.pid), DEAD: gone_holder,
               REMOTE: Holder("another-host#0000", 4242, None), OTHER: this_holder(live.pid)}
    finally:
        live.kill()
        live.wait()


def code_table(tmp_path: Path, holders: dict[int, Holder],
               rows: list[Row]) -> dict[Row, tuple[int, int]]:
    """The same inputs -> (action, cause), as Run.decide answers them."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    ledger = open_ledger(url)
    claim = ledger.claim("job:1", job="job", params={}, holder=this_holder(), lease_seconds=900,
                         max_attempts=5)
    attempt = claim.attempt
    assert attempt is not None
    settings = Settings(home=tmp_path, config_path=tmp_path / "retrysafe.toml", ledger_url=url)
    runs: dict[tuple[int, int, int, int], Run] = {}
    out: dict[Row, tuple[int, int]] = {}
    try:
        for row in rows:
            st, tp, lv, hl, lu, ap, rf, ou, apr, lf = row
            policy = (rf, ou, apr, lf)
            if policy not in runs:
                job = Job(name="job", key="job:{n}", classes={EffectClass.MESSAGE: Policy(
                    retry_failed=bool(rf), on_unknown=ON_UNKNOWN[ou], approval=bool(apr),
                    lookup_first=bool(lf))})
                runs[policy] = Run(ledger, settings, job, attempt)
            state = STATES[st]
            step = None if state is None else StepRecord(
                step_key="job:1/send", outcome_key="job:1", name="send", item="", kind="effect",
                effect_class="message", state=state,
                attempt_id="another-attempt" if lv == OTHER else attempt.id, fence=attempt.fence,
                evidence="ev-1" if state == "done" else None, artifact=None, checksum=None,
                check=None, connector=None, fingerprint=None, reason="the last try",
                cause=STEP_CAUSE.value if state == "blocked" else "",
                approved_by="someone" if ap else None, runner=holders[lv], tries=1 if tp else 0,
                updated_at=0.0)
            got = runs[policy].decide("send", EffectClass.MESSAGE, has_lookup=bool(hl),
                                      looked_up=bool(lu), step=step)
            out[row] = (ACTIONS.index(got.action), CAUSES.index(got.cause))
    finally:
        ledger.close()
    return out


def test_decision_table_covers_every_combination() -> None:
    """The Promela table has one row per input combination (a step that does not
    exist has no tries and no approval)."""
    table = model_table()
    ranges = [range(7), range(2), range(4), range(2), range(2), range(2), range(2), range(3),
              range(2), range(2)]
    every = {r for r in itertools.product(*ranges) if not (r[0] == 0 and (r[1] or r[5]))}
    assert set(table) == every
    assert len(table) == 9600


def test_model_decides_like_run_decide(tmp_path: Path, holders: dict[int, Holder]) -> None:
    """For every combination, model/decide.pml and Run.decide give the same action and cause."""
    model = model_table()
    code = code_table(tmp_path, holders, sorted(model))
    names = ["state", "tried", "holder", "has_lookup", "looked_up", "approved", "retry_failed",
             "on_unknown", "approval", "lookup_first"]
    differ = [
        f"{dict(zip(names, row, strict=True))}: model {ACTIONS[model[row][0]]}/"
        f"{CAUSES[model[row][1]]}, code {ACTIONS[code[row][0]]}/{CAUSES[code[row][1]]}"
        for row in sorted(model) if model[row] != code[row]]
    assert not differ, f"{len(differ)} combinations differ, e.g.\n" + "\n".join(differ[:20])
