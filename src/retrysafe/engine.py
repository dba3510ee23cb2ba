"""The engine: claiming attempts and running steps by the effect algorithm.

:class:`Engine` opens the config and ledger and claims attempts;
:class:`~retrysafe.attempt.Run` is one attempt at work (generate and effect
steps, close-out). Most callers use :func:`start`::

    import retrysafe

    with retrysafe.start("weekly-ops-report", {"week": "2026-W32"}) as run:
        report = run.generate("render", lambda out: out.write_text(render()))
        run.effect("send", "message", execute=send, lookup=find_in_sent)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .attempt import Run
from .config import Config, Job, ensure_home, load_config
from .errors import (
    AttemptNotActive,
    AttemptsExhausted,
    Busy,
    NotInAttempt,
    OutcomeBlocked,
    StaleAttempt,
)
from .keys import check_key, check_name
from .ledger import Claim, Holder, Ledger, OutcomeRecord, open_ledger
from .process import holder_gone, this_holder

__all__ = ["DRILL_ENV", "Engine", "Start", "start", "unblock_hint"]

DRILL_ENV = "RETRYSAFE_DRILL_TRIAL"
"""Set by ``retrysafe drill``: the trial id appended to the outcome key (``KEY~ID``)."""


@dataclass(frozen=True)
class Start:
    """What :meth:`Engine.begin` found: a started :class:`Run`, or why not."""

    status: str  # started | done | busy | blocked
    key: str
    outcome: OutcomeRecord
    run: Run | None
    claim: Claim

    @property
    def reason(self) -> str:
        return self.claim.reason


def unblock_hint(ledger: Ledger, out: OutcomeRecord) -> str:
    """The command a human runs to move a blocked outcome."""
    if out.reason.startswith("attempts exhausted"):
        return f"retrysafe retry {out.key}"
    for step in ledger.steps(out.key):
        if step.state == "blocked":
            if step.reason.startswith("awaiting approval"):
                return f"retrysafe approve {out.key} {step.name}"
            return f"retrysafe resolve {out.key} {step.name} --found EVIDENCE | --absent"
    return f"retrysafe retry {out.key}"


class Engine:
    """The config, the ledger and the home, opened together."""

    def __init__(self, config: Config, ledger: Ledger | None = None) -> None:
        self.config = config
        self._ledger = ledger

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        ledger: str | None = None,
    ) -> Engine:
        return cls(load_config(home, config, ledger))

    @property
    def home(self) -> Path:
        return self.config.home

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            if self.config.settings.ledger_url.startswith("sqlite:"):
                ensure_home(self.home)
            self._ledger = open_ledger(
                self.config.settings.ledger_url,
                sqlite_synchronous=self.config.settings.sqlite_synchronous,
            )
        return self._ledger

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def outcome_key(
        self, job: str, params: Mapping[str, str], now: datetime | None = None
    ) -> tuple[Job, str, dict[str, str]]:
        spec = self.config.job(job)
        key, canonical = spec.outcome_key(params, now)
        trial = os.environ.get(DRILL_ENV)
        if trial:
            # drill trials get outcomes of their own, so their effects never meet
            key = check_key(f"{key}~{check_name('drill trial', trial)}")
        return spec, key, canonical

    def begin(
        self,
        job: str,
        params: Mapping[str, str],
        *,
        holder: Holder | None = None,
        context: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> Start:
        """Claim the next attempt of the outcome ``job`` + ``params`` names."""
        spec, key, canonical = self.outcome_key(job, params, now)
        ensure_home(self.home)
        claim = self.ledger.claim(
            key,
            job=spec.name,
            params=canonical,
            holder=holder or this_holder(),
            lease_seconds=spec.lease_seconds,
            max_attempts=spec.max_attempts,
            holder_gone=holder_gone,
            context=context,
        )
        run = None
        if claim.status == "started":
            assert claim.attempt is not None
            run = Run(self, spec, claim.attempt, claim.outcome)
            run.folder.create()
            run.folder.write_status(claim.attempt.id, "running", context=dict(context or {}))
            run.folder.log(claim.attempt.id, key, "begin", "started",
                           superseded=claim.superseded.id if claim.superseded else None)
        return Start(claim.status, key, claim.outcome, run, claim)

    def attach(self, attempt_id: str | None = None) -> Run:
        """The current attempt, for a step command running inside ``retrysafe run``."""
        attempt_id = attempt_id or os.environ.get("RETRYSAFE_ATTEMPT_ID")
        if not attempt_id:
            raise NotInAttempt(
                "not inside an attempt: run this under 'retrysafe run JOB -- ...' "
                "or pass --attempt ID"
            )
        record = self.ledger.attempt(attempt_id)
        if record is None:
            raise NotInAttempt(f"no attempt {attempt_id!r} in the ledger {self.ledger.url}")
        if record.state != "active":
            raise AttemptNotActive(
                f"attempt {record.number} of {record.outcome_key} is {record.state}: "
                "its writes are refused",
                key=record.outcome_key,
            )
        out = self.ledger.require_outcome(record.outcome_key)
        return Run(self, self.config.job(out.job), record, out)


@contextmanager
def start(
    job: str,
    params: Mapping[str, str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    ledger: str | None = None,
    heartbeat: bool = True,
) -> Iterator[Run]:
    """Start (or resume) an attempt at the outcome, and close it out on exit.

    If the outcome is already ``done`` the yielded run is read-only: ``generate``
    and ``effect`` return the recorded artifact and evidence and execute
    nothing. Raises :class:`~retrysafe.errors.Busy` when another live attempt
    holds the outcome and :class:`~retrysafe.errors.OutcomeBlocked` when a
    human must act first. An exception inside the block ends the attempt as
    ``failed``, ``unknown`` or ``blocked``, as its steps say, and propagates.
    """
    engine = Engine.open(home, config, ledger)
    try:
        begun = engine.begin(job, params or {})
        if begun.status == "done":
            yield Run.finished(engine, engine.config.job(job), begun.outcome)
            return
        if begun.status == "busy":
            holder = begun.claim.attempt
            raise Busy(
                f"{begun.key} is held by attempt {holder.number if holder else '?'}; try later",
                key=begun.key, state=begun.outcome.state,
            )
        if begun.status == "blocked":
            cls = AttemptsExhausted if begun.reason.startswith("attempts exhausted") else OutcomeBlocked
            raise cls(f"{begun.key} is blocked: {begun.reason}", key=begun.key,
                      unblock=unblock_hint(engine.ledger, begun.outcome))
        run = begun.run
        assert run is not None
        if heartbeat:
            run.start_heartbeat()
        try:
            yield run
        except StaleAttempt:
            run.stop_heartbeat()
            run.folder.close()
            raise
        except BaseException as exc:
            run.stop_heartbeat()
            run.close(success=False, reason=f"{type(exc).__name__}: {exc}")
            raise
        else:
            run.stop_heartbeat()
            run.close(success=True)
    finally:
        engine.close()
