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

import contextlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from . import envvars
from .attempt import Execute, Lookup, Run, check_callables, check_fields, intent_fields
from .config import Config, Job, ensure_home, load_config
from .errors import (
    NAMED,
    AttemptNotActive,
    AttemptsExhausted,
    Busy,
    InvalidInput,
    InvalidParameter,
    LedgerError,
    NotInAttempt,
    OutcomeBlocked,
    RetrysafeError,
    StaleAttempt,
    command_line,
    unblock_command,
)
from .folders import AttemptFolder, outcome_dir
from .fsio import check_writable
from .identity import LedgerMismatch, lost_work, refuse_missing_file
from .keys import DRILL_MARK, check_key, check_name, slug, step_key, step_ref
from .ledger import AttemptRecord, Claim, Holder, Ledger, OutcomeRecord, StepRecord, open_ledger
from .ledger.core import Intent, new_attempt_id
from .process import attempt_liveness, collect_if_held, hold, release, this_holder
from .states import BlockCause, ClaimStatus, OutcomeState, StepState

if TYPE_CHECKING:
    from .connectors.base import ConnectorBase
    from .effects import EffectClass

__all__ = ["LEASE_FIELD", "Engine", "Start", "close_all", "once", "settle_hint", "start",
           "unblock_hint"]

LEASE_FIELD = "agent_lease_seconds"
"""Context field of an attempt begun by an agent: the lease each later command renews."""


class Start(NamedTuple):
    """What :meth:`Engine.begin` found: a started :class:`Run`, or why not (a named
    tuple: made once per outcome, it costs a fraction of a frozen dataclass)."""

    status: ClaimStatus
    key: str
    outcome: OutcomeRecord
    run: Run | None
    claim: Claim
    unblock: str = ""
    """for ``blocked``: the command that moves the outcome"""
    steps: tuple[StepRecord, ...] | None = None
    """for ``done``: the outcome's steps, read with it (``None``: not read; a claim that
    found the outcome done as it ran, after another run finished it)"""

    @property
    def reason(self) -> str:
        return self.claim.reason

    def refusal(self) -> RetrysafeError | None:
        """Why no attempt started, as the error to raise (``None``: started or done)."""
        if self.status is ClaimStatus.BUSY:
            holder = self.claim.attempt
            if holder is None:
                return Busy.held(self.key, self.outcome.state, None)
            return Busy.held(self.key, self.outcome.state, holder.number, holder.holder.pid,
                             holder.holder.host, holder.lease_expires, running=self.reason)
        if self.status is ClaimStatus.BLOCKED:
            if self.outcome.cause == BlockCause.EXHAUSTED:
                return AttemptsExhausted(self.key, self.reason)
            return OutcomeBlocked(self.key, self.reason, cause=self.outcome.cause or BlockCause.AGENT,
                                  unblock=self.unblock)
        return None


def unblock_hint(ledger: Ledger, out: OutcomeRecord) -> str:
    """The command a human runs to move a blocked outcome: its blocked step's
    (by the step's cause), or ``retry`` for an outcome out of attempts."""
    return _blocked_hint(out, ledger.steps(out.key) if out.cause != BlockCause.EXHAUSTED else ())


def _blocked_hint(out: OutcomeRecord, steps: Iterable[StepRecord]) -> str:
    if out.cause != BlockCause.EXHAUSTED:
        for step in steps:
            if step.state == StepState.BLOCKED:
                return unblock_command(step.cause or BlockCause.AGENT, out.key,
                                       step_ref(out.key, step.name, step.item))
    return unblock_command(BlockCause.EXHAUSTED, out.key)


def settle_hint(out: OutcomeRecord, steps: Iterable[StepRecord]) -> str:
    """The command a human runs about ``out``, given its steps in the ledger's order
    (its waiting ones are enough): blocked, as :func:`unblock_hint`; failed, ``retry``;
    unknown, settling its first step that may have acted (or ``status``); otherwise
    nothing. ``needs-attention``, the dashboard and notifications all say this."""
    if out.state == OutcomeState.BLOCKED:
        return _blocked_hint(out, steps)
    if out.state == OutcomeState.FAILED:
        return unblock_command(BlockCause.EXHAUSTED, out.key)
    if out.state == OutcomeState.UNKNOWN:
        for step in steps:
            if step.state in (StepState.UNKNOWN, StepState.RUNNING):
                return unblock_command(BlockCause.AMBIGUOUS, out.key,
                                       step_ref(out.key, step.name, step.item))
        return command_line("status", out.key)
    return ""


KEYS_KEPT = 4096
"""outcome keys an engine keeps rendered (:meth:`Engine.outcome_key`)"""


class Engine:
    """The config, the ledger and the home, opened together.

    A child forked from a process with an engine open may use that engine: its
    ledger leaves the parent's connections to the parent and opens the child's own
    (``ledger/sqlite.py``, ``ledger/postgres.py``)."""

    def __init__(self, config: Config, ledger: Ledger | None = None) -> None:
        self.config = config
        self._ledger = ledger
        # threads sharing an engine open its ledger once: each opening its own would
        # leave all but one open, and one thread's transaction on another's connection
        self._opening = threading.Lock()
        self._home_made = False  # ensure_home once per engine, not per outcome
        # on a server, claim a new outcome before reading it (begin): until a done one is
        # met, and again once a new one is met by a read
        self._look_first = True
        self.named: tuple[str, ...] = ()
        """the global options naming the home, config and ledger :meth:`open` was given,
        which the commands printed inside :meth:`start` repeat (``errors.NAMED``)"""
        # (job, its parameters as given) -> the outcome key and the canonical parameters,
        # for jobs whose parameters do not depend on the clock (outcome_key)
        self._keys: dict[tuple[object, ...], tuple[str, dict[str, str]]] = {}

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        ledger: str | None = None,
    ) -> Engine:
        engine = cls(load_config(home, config, ledger))
        if home is not None or config is not None or ledger is not None:
            from .location import given_options

            engine.named = given_options(home, config, ledger)
        return engine

    @property
    def home(self) -> Path:
        return self.config.home

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            with self._opening:
                if self._ledger is None:
                    self._open_ledger()
        assert self._ledger is not None
        return self._ledger

    def _open_ledger(self) -> None:
        url = self.config.settings.ledger_url
        if url.startswith("sqlite:///"):
            refuse_missing_file(self.home, Path(url.removeprefix("sqlite:///")))
        if url.startswith("sqlite:"):
            ensure_home(self.home)
        self._ledger = open_ledger(
            self.config.settings.ledger_url,
            sqlite_synchronous=self.config.settings.sqlite_synchronous,
        )
        self._check_home(write=True)

    def existing_ledger(self) -> Ledger:
        """The ledger, opened only if it exists (a SQLite file that is not there is
        refused, exit 2): reading and deciding commands never create a home or a
        ledger. Later uses of :attr:`ledger` get the same one."""
        if self._ledger is None:
            self._ledger = open_ledger(
                self.config.settings.ledger_url,
                sqlite_synchronous=self.config.settings.sqlite_synchronous,
                must_exist=True,
            )
            self._check_home(write=False)
        return self._ledger

    def _check_home(self, *, write: bool) -> None:
        """The ledger is the one this home's folders were written with (identity.py)."""
        from .identity import check_home

        assert self._ledger is not None
        try:
            check_home(self.home, self._ledger, self.config.settings.ledger_url, write=write)
        except BaseException:
            self._ledger.close()
            self._ledger = None
            raise

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
        if not isinstance(params, Mapping):
            raise InvalidParameter(f"job {spec.name!r}: give the parameters as a mapping of "
                                   f"names to text values, not {type(params).__name__}")
        # the same parameters render the same key: validated and rendered once (a worker
        # re-running its outcomes asks again and again), unless the clock fills one in
        memo: tuple[object, ...] | None = (job, *params.items()) if now is None else None
        try:
            found = self._keys.get(memo) if memo is not None else None
        except TypeError:  # a value that cannot be hashed is refused below
            found, memo = None, None
        if found is not None:
            key, canonical = found[0], dict(found[1])
        else:
            for name, value in params.items():
                if value is not None and not isinstance(value, str):
                    raise InvalidParameter(
                        f"job {spec.name!r}: parameter {name!r} is {type(value).__name__}, "
                        "not text; give its value as a str (as on the command line)")
            key, canonical = spec.outcome_key(params, now)
            if memo is not None and not spec.clock_params:
                if len(self._keys) >= KEYS_KEPT:
                    self._keys.clear()
                self._keys[memo] = (key, dict(canonical))
        trial = os.environ.get(envvars.DRILL_TRIAL)
        if trial:
            # drill trials get outcomes of their own, so their effects never meet
            key = check_key(f"{key}{DRILL_MARK}{check_name('drill trial', trial)}")
        return spec, key, canonical

    def run_for(self, job: Job, attempt: AttemptRecord | None,
                outcome: OutcomeRecord | None = None, *, folder_on_demand: bool = False,
                steps: Sequence[StepRecord] | None = None) -> Run:
        """A :class:`Run` of ``attempt`` (``None``: a read-only view of ``outcome``,
        answered from ``steps`` when they were read with it)."""
        return Run(self.ledger, self.config.settings, job, attempt, outcome,
                   folder_on_demand=folder_on_demand, steps=steps)

    def _take_back_restored(self, out: OutcomeRecord, steps: Sequence[StepRecord]) -> None:
        """A generate step blocked because its accepted artifact was missing or changed
        (attempt.py) is settled as found, with its accepted checksum, once the file is
        back as it was accepted: restoring it is the way out the block names, and the
        claim that follows then finds the outcome settled, not blocked."""
        from .fsio import artifact_problem

        for step in steps:
            if step.state != StepState.BLOCKED or step.cause != BlockCause.ARTIFACT \
                    or not step.artifact or not step.checksum:
                continue
            path = Path(step.artifact)
            if not artifact_problem(path, step.checksum):
                # (another run settling it first, or a person, leaves it moved: the claim
                # that follows reads what stands)
                with contextlib.suppress(InvalidInput, Busy):
                    self.ledger.resolve(out.key, step.step_key,
                                        found=step.evidence or step.checksum, actor="retrysafe",
                                        note=f"accepted artifact {path} restored")

    def begin(
        self,
        job: str,
        params: Mapping[str, str],
        *,
        holder: Holder | None = None,
        context: Mapping[str, str] | None = None,
        now: datetime | None = None,
        lease_seconds: float | None = None,
        folder: bool = True,
        share: bool = False,
        keyed: tuple[Job, str, dict[str, str]] | None = None,
        intent: Intent | None = None,
    ) -> Start:
        """Claim the next attempt of the outcome ``job`` + ``params`` names.

        ``lease_seconds`` (default: the job's) is how long the attempt lives
        without a renewal; an agent's attempt records it, so each later
        command renews the same lease (:meth:`resume`). ``folder=False``: the
        attempt folder is made on demand (folders.py), as :meth:`start` does.
        ``share``: a claim this makes opens a shared commit first (:meth:`once`), which
        the caller closes. ``keyed``: what :meth:`outcome_key` gave the caller for
        ``job`` and ``params`` (it validated them first). ``intent``: a server's first
        look that claims a new outcome writes this step's intent with the claim
        (:meth:`once`), and the run knows it (:meth:`Run.effect` goes on to execute).
        """
        spec, key, canonical = keyed or self.outcome_key(job, params, now)
        ledger = self.ledger
        claim: Claim | None = None
        known: OutcomeRecord | None = None
        steps: list[StepRecord] = []
        intended = False
        first_look = (self._look_first and not folder and spec.max_attempts >= 1
                      and ledger.backend.single_statement_moves
                      and envvars.CRASH_AT not in os.environ  # (checked only before a claim)
                      and _due_as_given(spec, params, canonical, now))
        if first_look:
            # a server's first look claims a new outcome or reads a known one, in one
            # round trip: nothing this method checks before a claim needs the outcome
            # when there is none (no folder to make first, no occurrence ahead of its
            # time; a SQLite ledger's lost-work check is not made on a server). A done
            # outcome's read costs more this way than alone (the statement's inserts are
            # made ready, and write nothing), so an engine that meets one reads first
            # from then on, until a read finds a new outcome.
            self._before_claim()
            claimant, claim_context = _claimant(holder, context, lease_seconds)
            attempt_id = _claiming()
            try:
                claim, known, steps = ledger.claim_or_read(
                    key, job=spec.name, params=canonical, holder=claimant,
                    lease_seconds=lease_seconds or spec.lease_seconds, context=claim_context,
                    attempt_id=attempt_id, intent=intent)
            finally:
                if claim is None:
                    release(attempt_id)
            intended = claim is not None and intent is not None
            if known is not None and known.state == OutcomeState.DONE:
                self._look_first = False
        if claim is None:
            known_claim = self._claim_known(spec, key, params, canonical, known, steps,
                                            holder, context, lease_seconds, now, folder,
                                            share)
            if isinstance(known_claim, Start):  # done
                return known_claim
            claim = known_claim
        run = None
        unblock = ""
        if claim.status is ClaimStatus.STARTED:
            assert claim.attempt is not None
            run = self.run_for(spec, claim.attempt, claim.outcome, folder_on_demand=not folder)
            if intended:  # (by the first look's claim)
                assert intent is not None
                run._intended = intent.step_key
            if folder:
                from .identity import remove_temp_leftovers, set_aside_stale_folder

                set_aside_stale_folder(run.folder.path, claim.attempt.id)
                run.folder.create()
                if claim.attempt.number > 1:  # only an earlier attempt's writer left any
                    remove_temp_leftovers(run.folder.outcome_dir)
            run.folder.write_status(claim.attempt.id, "running", context=claim.attempt.context)
            # a claim inside a shared commit (once()) is told of once that commits
            run._share_open = share
            run._log(key, "begin", "started",
                     superseded=claim.superseded.id if claim.superseded else None)
            if claim.attempt.number > 1:
                self._repair_folders(spec.name, key, claim.attempt.number)
        elif claim.status is ClaimStatus.BLOCKED:
            unblock = unblock_hint(self.ledger, claim.outcome)
        if claim.superseded is not None:
            self._mark_superseded(spec.name, claim.superseded)
        return Start(claim.status, key, claim.outcome, run, claim, unblock)

    def _claim_known(self, spec: Job, key: str, params: Mapping[str, str],
                     canonical: dict[str, str], known: OutcomeRecord | None,
                     steps: list[StepRecord], holder: Holder | None,
                     context: Mapping[str, str] | None, lease_seconds: float | None,
                     now: datetime | None, folder: bool, share: bool = False) -> Claim | Start:
        """:meth:`begin` from what is known of the outcome (``known``: read by the first
        look, :meth:`~retrysafe.ledger.core.LedgerCore.claim_or_read`; None: read now):
        a done one answers at once (its :class:`Start`), the rest is checked and then
        claimed."""
        taken = known is not None  # (so the claim need not try to insert it)
        if not taken:
            # a done outcome stays done: one read (the outcome and its steps) answers a
            # re-run, no write transaction
            known, steps = self.ledger.outcome_and_steps(key)
            if known is None:
                self._look_first = True
        if known is not None and known.params != canonical:
            _same_params(key, known.params, canonical)
        if known is not None and known.state == OutcomeState.DONE and known.job == spec.name:
            return Start(ClaimStatus.DONE, key, known, None, Claim(ClaimStatus.DONE, known),
                         steps=tuple(steps))
        if known is not None and known.state == OutcomeState.BLOCKED:
            self._take_back_restored(known, steps)
        if known is not None and known.current_attempt:
            # a Run of this process on it that is garbage is collected now, not inside the
            # claim's transaction (process.held)
            collect_if_held(known.current_attempt)
        if spec.schedule:  # an occurrence named ahead of its time is refused (missed.py)
            from .missed import check_given_due

            check_given_due(spec, params, canonical, now)
        # (the outcome's folder as outcome_dir() names it, joined as a string: every new
        # outcome pays for this look, which is one failed stat when there is no folder)
        # Only for a SQLite ledger, the home's own file, which an older copy or a deleted
        # -wal can set back; a server's ledger is shared by homes whose folders it does not
        # follow (a prune in one home leaves another's folders), so there a stale folder is
        # set aside as before.
        folder_path = os.path.join(self.home, "runs", spec.name, slug(key))
        lost = None
        if self.config.settings.ledger_url.startswith("sqlite:"):
            lost = lost_work(folder_path, known.attempts if known is not None else 0)
        if lost is not None:
            # another worker may have claimed the outcome and worked since `known` was read:
            # its claim committed before its folder showed work, so a fresh read knows it
            fresh = self.ledger.outcome(key)
            lost = lost_work(folder_path, fresh.attempts if fresh is not None else 0)
        if lost is not None:
            where = outcome_dir(self.home, spec.name, key) / lost
            raise LedgerMismatch(
                f"{where} shows work on outcome {key} that the ledger "
                f"{self.ledger.url} does not record (it was put back from an older copy, or "
                "its -wal file was deleted): nothing was run. Put the newer ledger back, or "
                "move the ledger file (with its -wal file) aside and rebuild it from the "
                "attempt folders with 'retrysafe recover'; if the ledger is right (the outcome "
                "was pruned, or this ledger was adopted), remove that folder", key=key)
        self._before_claim()
        if folder:  # a folder that cannot be made is refused before the claim, not after
            check_writable(self.home, ("runs", spec.name, slug(key)), ("summary.json",))
        claimant, claim_context = _claimant(holder, context, lease_seconds)
        if share:
            self.ledger.backend.open_shared()
        attempt_id = _claiming()
        claim = None
        try:
            claim = self.ledger.claim(
                key,
                job=spec.name,
                params=canonical,
                holder=claimant,
                lease_seconds=lease_seconds or spec.lease_seconds,
                max_attempts=spec.max_attempts,
                liveness=attempt_liveness,
                context=claim_context,
                taken=taken,
                attempt_id=attempt_id,
            )
        finally:
            if claim is None or claim.status is not ClaimStatus.STARTED:
                release(attempt_id)
        return claim

    def _before_claim(self) -> None:
        """What every claim is preceded by: a crash drill's points checked, the home made."""
        if envvars.CRASH_AT in os.environ:
            from .crash import check_targets

            check_targets()
        if not self._home_made:
            ensure_home(self.home)
            self._home_made = True

    def note_answer(self, begun: Start, context: Mapping[str, str]) -> None:
        """Put a run that started no attempt (``done`` or ``busy``) into the outcome's
        history: an ``answer`` event, its actor the runner that asked (``openclaw:command``,
        else ``run``), its reason the answer with the asking process and any scheduler run
        id, so a scheduler's run history joins ours. One write transaction; the ``step``
        fast path never comes here."""
        holder = this_holder()
        who = f"pid {holder.pid} on {holder.host}"
        if context.get("openclaw_run_id"):
            who += f", openclaw run {context['openclaw_run_id']}"
        if begun.status is ClaimStatus.DONE:
            answer, said = "done", "already done; nothing ran"
        else:
            held = begun.claim.attempt
            answer = "busy"
            said = f"held by attempt {held.number}; nothing ran" if held else "busy; nothing ran"
        ledger = self.ledger
        with ledger.backend.transaction(durable=False) as tx:  # history only
            ledger._log(tx, begun.key, kind="answer", frm=begun.outcome.state, to=answer,
                        actor=context.get("runner") or "run", reason=f"{said} ({who})")

    def _repair_folders(self, job: str, key: str, current: int) -> None:
        """Rewrite the earlier attempts' ``status.json`` from the ledger where a crash
        left it torn or stale.

        The folder's files are derived from the ledger and written without syncs
        of their own (:mod:`retrysafe.folders`): after a power cut one may be
        empty or show an older state. The next attempt of the outcome (there is
        one after any crash that matters) puts them right. A file naming another
        attempt is left alone: it is not this ledger's (identity.py).
        """
        for rec in self.ledger.attempts(key):
            if rec.number >= current:
                continue
            folder = AttemptFolder(self.home, job, key, rec.number)
            state = {"active": "running", "superseded": "superseded"}.get(rec.state, rec.result)
            with contextlib.suppress(RetrysafeError, OSError):
                if folder.stale_status(rec.id, state or rec.state):
                    folder.write_status(rec.id, state or rec.state,
                                        **({"reason": rec.result} if rec.state == "superseded"
                                           else {}))

    def _mark_superseded(self, job: str, attempt: AttemptRecord) -> None:
        """A superseded attempt's ``status.json`` says so: its own process may never
        write again. A nicety (the ledger is the record), so a failure is ignored."""
        record = self.ledger.attempt(attempt.id)
        folder = AttemptFolder(self.home, job, attempt.outcome_key, attempt.number)
        with contextlib.suppress(RetrysafeError, OSError):
            if folder.path.is_dir():
                folder.write_status(attempt.id, "superseded",
                                    reason=record.result if record else "superseded")

    def break_lease(self, key: str, *, actor: str, note: str = "") -> AttemptRecord:
        """A human ends the attempt holding ``key`` (:meth:`Ledger.break_lease`);
        its folder's status says so."""
        broken = self.existing_ledger().break_lease(key, actor=actor, note=note)
        out = self.ledger.require_outcome(key)
        self._mark_superseded(out.job, broken)
        return broken

    def attach(self, attempt_id: str | None = None) -> Run:
        """The current attempt, for a step command running inside ``retrysafe run``."""
        attempt_id = attempt_id or os.environ.get(envvars.ATTEMPT_ID)
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
        run = self.run_for(self.config.job(out.job), record, out)
        run.folder.open_log()  # a planted link is refused before any step records anything
        return run

    def resume(self, key: str, attempt_id: str | None) -> Run:
        """An agent's attempt at ``key``, its lease renewed: the agent is alive.

        An agent holds its attempt by a lease, not a process; every command of
        the attempt renews the lease ``begin`` chose.
        """
        run = self.attach(attempt_id)
        assert run.attempt is not None
        if run.key != key:
            raise InvalidInput(
                f"attempt {run.attempt.id} belongs to {run.key}, not {key}: "
                "use the key 'retrysafe begin' printed",
                key=key,
            )
        lease = float(run.attempt.context.get(LEASE_FIELD, run.job.lease_seconds))
        self.ledger.renew(run.attempt, lease)
        return run

    def reader(self, key: str) -> Run:
        """A read-only view of the outcome ``key``: decides, never writes."""
        out = self.ledger.require_outcome(key)
        return self.run_for(self.config.job(out.job), None, out)

    def start(self, job: str, params: Mapping[str, str] | None = None, *,
              heartbeat: bool = True) -> AbstractContextManager[Run]:
        """:func:`start` on this engine: the config and ledger stay open for the next
        outcome, so a process handling many outcomes opens them once."""
        return _Started(self, job, params or {}, heartbeat)

    def once(self, job: str, params: Mapping[str, str] | None, step: str,
             effect_class: str | EffectClass | None = None, *, execute: Execute | None = None,
             lookup: Lookup | None = None, connector: ConnectorBase | None = None,
             connector_name: str | None = None, payload: Mapping[str, Any] | None = None,
             item: str | None = None, check: str | None = None, allow_update: bool = False,
             heartbeat: bool = True) -> str:
        """:func:`once` on this engine."""
        # a bad step name, item, effect class, execute or lookup is refused before anything
        # is written (under start() the block would have claimed an attempt first)
        from .effects import parse_class

        keyed = self.outcome_key(job, params or {})
        spec, key, _ = keyed
        skey = step_key(key, step, item)
        fp = check_fields(step, check, connector_name, payload)
        cls = None
        if connector is None:
            check_callables(step, effect_class, execute, lookup)
            assert effect_class is not None
            cls = parse_class(effect_class)
        backend = self.ledger.backend
        if not (backend.single_statement_moves and self._look_first):
            # where begin would read first anyway (SQLite; a server's engine that met a done
            # outcome last): one narrow read answers a re-run of a done outcome whose step
            # simply stands, as effect() would answer it; anything else goes the whole way
            # (a server's new outcome is then claimed by the first look)
            if connector is not None:  # (what effect() refuses first, on a done outcome too)
                connector.validate(payload or {})
                parse_class(effect_class or connector.effect_class)
            seen = self.ledger.step_answer(key, skey)
            if seen is None:
                self._look_first = True
            elif (seen.state == OutcomeState.DONE and seen.job == spec.name
                  and seen.params == keyed[2] and seen.kind not in (None, "generate")
                  and not (fp and seen.fingerprint and seen.fingerprint != fp)):
                return seen.evidence or ""
        # close-out that judges nothing beyond the steps runs no command, so its finish
        # may share the record's commit
        clear = not spec.expected_artifacts and not spec.accept
        share = backend.shares_commits and clear
        intent = None
        if backend.single_statement_moves and cls is not None:  # (a connector validates first)
            intent = _first_intent(spec, cls, skey, step, item, lookup is not None,
                                   intent_fields(cls, check, connector_name, fp))
        started = _Started(self, job, params or {}, heartbeat and not share, share, keyed,
                           intent)
        try:
            run = started.__enter__()
        except BaseException:
            backend.close_shared()  # (what the claim wrote before it refused)
            raise
        run._once = clear
        # (begin opened a shared commit for the claim, and the run knows it holds it open)
        shared = share and not run.read_only
        if shared:
            run._beat_wanted = heartbeat
        try:
            evidence = run.effect(step, effect_class, execute=execute, lookup=lookup,
                                  connector=connector, connector_name=connector_name,
                                  payload=payload, item=item, check=check,
                                  allow_update=allow_update)
        except BaseException as exc:
            try:
                run._end_shared()  # (what was written before the error stands)
            finally:
                if shared and not run._landed:
                    started.forget()  # the claim never committed: no attempt to close
                else:
                    started.__exit__(type(exc), exc, exc.__traceback__)
            raise
        try:
            started.__exit__(None, None, None)
        except BaseException as exc:
            if not run.read_only and run._closed is None:
                # the finish did not land (with it, the record it shared a commit with): the
                # attempt ends as a block that raised after its effect would end it
                with contextlib.suppress(Exception):
                    run.close(success=False, reason=f"{type(exc).__name__}: {exc}")
            raise
        return evidence


def _first_intent(spec: Job, cls: EffectClass, skey: str, step: str, item: str | None,
                  asks_lookup: bool, fields: dict[str, Any]) -> Intent | None:
    """The intent :meth:`Engine.once` writes with a new outcome's claim on a server: the
    one :meth:`Run.effect` would write first thing (the same rule, the same fields), or
    None where effect() would do anything else first."""
    from .effects import policy_for

    if not policy_for(cls, spec.classes).intent_first(asks_lookup):
        return None
    return Intent(skey, step, item or "", "effect", fields)


class _Started:
    """The context of :meth:`Engine.start` (a class, not a generator: it runs once per
    outcome). Entering claims the outcome (or reads it, when it is done); leaving
    closes the attempt out: ``done`` as its steps say, or, after an exception, what
    they say then. A stale attempt closes its files and writes nothing."""

    __slots__ = ("engine", "heartbeat", "intent", "job", "keyed", "named", "params", "run",
                 "share")

    def __init__(self, engine: Engine, job: str, params: Mapping[str, str],
                 heartbeat: bool, share: bool = False,
                 keyed: tuple[Job, str, dict[str, str]] | None = None,
                 intent: Intent | None = None) -> None:
        self.engine, self.job, self.params, self.heartbeat = engine, job, params, heartbeat
        self.share = share  # a claim opens a shared commit (Engine.once)
        self.keyed = keyed  # the outcome's key, worked out already (Engine.once)
        self.intent = intent  # written with a server's claim of a new outcome (Engine.once)
        self.run: Run | None = None
        self.named: Token[tuple[str, ...] | None] | None = None

    def __enter__(self) -> Run:
        if self.engine.named:  # the commands printed inside name the home the caller named
            self.named = NAMED.set(self.engine.named)
        try:
            return self._enter()
        except BaseException:
            self._unname()
            raise

    def _unname(self) -> None:
        token, self.named = self.named, None
        if token is not None:
            with contextlib.suppress(ValueError):  # (left in another context)
                NAMED.reset(token)

    def _enter(self) -> Run:
        engine = self.engine
        begun = engine.begin(self.job, self.params, folder=False, share=self.share,
                             keyed=self.keyed, intent=self.intent)
        if self.share and begun.status is not ClaimStatus.STARTED:
            engine.ledger.backend.close_shared()  # (what the claim wrote: a supersede)
        if begun.status is ClaimStatus.DONE:
            return engine.run_for(engine.config.job(self.job), None, begun.outcome,
                                  steps=begun.steps)
        refusal = begun.refusal()
        if refusal is not None:
            raise refusal
        run = begun.run
        assert run is not None
        if self.heartbeat:
            run.start_heartbeat()
        self.run = run
        return run

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        try:
            self._exit(kind, exc)
        finally:
            self._unname()

    def forget(self) -> None:
        """Leave without closing: the attempt's claim never committed (Engine.once)."""
        run, self.run = self.run, None
        try:
            if run is not None:
                run._forget()
        finally:
            self._unname()

    def _exit(self, kind: type[BaseException] | None, exc: BaseException | None) -> None:
        run, self.run = self.run, None
        if run is None:  # a done outcome's read-only run: nothing to close
            return
        run.stop_heartbeat()
        if kind is None:
            run.close(success=True)
        elif issubclass(kind, StaleAttempt):
            run.folder.close()
        else:
            try:
                run.close(success=False, reason=f"{kind.__name__}: {exc}")
            except LedgerError:
                if not isinstance(exc, LedgerError):
                    raise
                # (the ledger went away: the block's own error says what was not done)


def once(
    job: str,
    params: Mapping[str, str] | None,
    step: str,
    effect_class: str | EffectClass | None = None,
    *,
    execute: Execute | None = None,
    lookup: Lookup | None = None,
    connector: ConnectorBase | None = None,
    connector_name: str | None = None,
    payload: Mapping[str, Any] | None = None,
    item: str | None = None,
    check: str | None = None,
    allow_update: bool = False,
    home: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    ledger: str | None = None,
    heartbeat: bool = True,
) -> str:
    """One outcome whose work is one effect: its evidence, the effect performed at most
    once however often this is called. The same as::

        with retrysafe.start(job, params) as run:
            return run.effect(step, effect_class, execute=..., ...)

    and the same answers and errors, in two commits instead of four on a SQLite ledger:
    the outcome's claim shares the intent's commit (no code of the caller's runs between
    them), and the effect's record shares close-out's finish (nothing runs between them
    either). Both commits are synced, as the intent and the record are on their own; a
    crash between two writes leaves what a crash between the same writes leaves in
    :func:`start`, or less (a claim with no intent is not written at all). A job with
    ``expected_artifacts`` or ``accept`` commands closes out as :func:`start` does.
    """
    return _cached_engine(home, config, ledger).once(
        job, params, step, effect_class, execute=execute, lookup=lookup, connector=connector,
        connector_name=connector_name, payload=payload, item=item, check=check,
        allow_update=allow_update, heartbeat=heartbeat)


def start(
    job: str,
    params: Mapping[str, str] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    ledger: str | None = None,
    heartbeat: bool = True,
) -> AbstractContextManager[Run]:
    """Start (or resume) an attempt at the outcome, and close it out on exit.

    ``params`` maps the job's parameter names to text values, as on the command
    line (another type is refused: :class:`~retrysafe.errors.InvalidParameter`).

    If the outcome is already ``done`` the yielded run is read-only: ``generate``
    and ``effect`` return the recorded artifact and evidence and execute
    nothing. Raises :class:`~retrysafe.errors.Busy` when another live attempt
    holds the outcome and :class:`~retrysafe.errors.OutcomeBlocked` when a
    human must act first. An exception inside the block ends the attempt as
    ``failed``, ``unknown`` or ``blocked``, as its steps say, and propagates.
    """
    # the engine's own context manager, not one wrapped around it (one generator
    # fewer per outcome); the engine is found when start() is called
    return _cached_engine(home, config, ledger).start(job, params, heartbeat=heartbeat)


# --- the engine start() reuses -----------------------------------------------------
# A process that calls start() once per outcome (an item loop, a worker) would open
# the config and the ledger, and close them, per outcome: on SQLite each close
# checkpoints the WAL (one more sync). One engine per home/config/ledger is kept
# for the life of the process instead, and closed at exit. It is opened again when
# its config file or SQLite ledger file is not the one it opened (edited, replaced,
# deleted), and in a child after fork (connections are never shared across fork).

def _claimant(holder: Holder | None, context: Mapping[str, str] | None,
              lease_seconds: float | None) -> tuple[Holder, dict[str, str]]:
    """Who claims (this process unless given), and the context its attempt records, with
    the lease a caller chose (:meth:`Engine.resume` renews that one): built only where a
    claim is made, not for a done outcome's re-run."""
    claim_context = dict(context or {})
    if lease_seconds is not None:
        claim_context[LEASE_FIELD] = str(lease_seconds)
    return holder or this_holder(), claim_context


def _claiming() -> str:
    """The id of the attempt this thread is about to claim, held by this process from now
    on (process.hold): between the claim's commit and its Run, another thread's claim
    must not take the new attempt for one this process abandoned. Released by the
    caller unless the claim started it (its Run then holds it)."""
    attempt_id = new_attempt_id()
    hold(attempt_id, threading.current_thread())
    return attempt_id


def _due_as_given(spec: Job, given: Mapping[str, str], canonical: Mapping[str, str],
                  now: datetime | None) -> bool:
    """Is no occurrence the parameters name ahead of its time (missed.py)? Only then may
    a claim come before the outcome is read: a done outcome answers done even when the
    clock was set back behind its occurrence, which the read finds first."""
    if not spec.schedule:
        return True
    from .missed import check_given_due

    try:
        check_given_due(spec, given, canonical, now)
    except RetrysafeError:
        return False
    return True


def _same_params(key: str, stored: Mapping[str, str], given: Mapping[str, str]) -> None:
    """Refuse a run whose parameters render the key of an outcome made by other values
    of the same parameters (``{user}:{topic}`` with ``bob:billing`` + ``overdue`` and
    ``bob`` + ``billing:overdue``): it would be answered as that outcome and its own
    work skipped. A parameter renamed in the config (other names) is not a collision."""
    if set(stored) == set(given) and any(str(stored[n]) != given[n] for n in given):
        shown = ", ".join(f"{n}={stored[n]}" for n in sorted(stored))
        raise InvalidInput(
            f"outcome {key} was made by other parameters ({shown}): the job's key template "
            "renders both as one key; put a separator in the key template that the values "
            "cannot hold, or choose other values", key=key)


class _Kept(NamedTuple):
    engine: Engine
    config: str  # the config file's path, and the SQLite ledger file's ('' for a server)
    ledger: str
    seen: tuple[object, ...]  # what _identity found when the engine was opened


_ENGINES: dict[tuple[object, ...], _Kept] = {}
_ENGINES_LOCK = threading.Lock()
_OPENING = threading.Lock()
"""held while an engine for :func:`start` is opened (:func:`_cached_engine`)"""


def _fresh_locks() -> None:
    """In a forked child: locks another thread of the parent may have held at the fork
    would never be released there."""
    global _ENGINES_LOCK, _OPENING
    _ENGINES_LOCK, _OPENING = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks)
_ENGINES_KEPT = 8


def _paths(engine: Engine) -> tuple[str, str]:
    """The files whose identity a cached engine is checked against, as strings."""
    settings = engine.config.settings
    ledger = ""
    if settings.ledger_url.startswith("sqlite:") and engine._ledger is not None:
        path = getattr(engine._ledger.backend, "path", None)
        if isinstance(path, Path):
            ledger = str(path)
    return str(settings.config_path), ledger


def _identity(config: str, ledger: str) -> tuple[object, ...]:
    """What must stay the same for a cached engine to be reused: the config file
    (edited or replaced) and the SQLite ledger file (replaced or deleted)."""
    try:
        st = os.stat(config)
        stamp: object = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    found: object = None
    if ledger:
        try:
            st = os.stat(ledger)
            found = (st.st_dev, st.st_ino)
        except OSError:
            found = "gone"
    return (stamp, found)


def _cached_engine(home: str | os.PathLike[str] | None, config: str | os.PathLike[str] | None,
                   ledger: str | None) -> Engine:
    get = os.environ.get
    # (an argument given wins over its variable, which is then not read: location.py)
    key = (os.getpid(), None if home is None else os.fspath(home),
           None if config is None else os.fspath(config), ledger,
           None if home else get(envvars.HOME),
           None if config else get(envvars.CONFIG),
           None if ledger else get(envvars.LEDGER))
    kept = _ENGINES.get(key)  # (one dictionary read: atomic; the lock guards the changes)
    if kept is not None:
        if kept.engine._ledger is not None and _identity(kept.config, kept.ledger) == kept.seen:
            return kept.engine
        with _ENGINES_LOCK:
            if _ENGINES.get(key) is kept:
                del _ENGINES[key]
        kept.engine.close()
    # one engine opened at a time: threads starting at once on a fresh home would each
    # open one, all creating its ledger together (the first may find it locked), and
    # all but one would be left open; the others wait and take the one opened
    with _OPENING:
        kept = _ENGINES.get(key)
        if kept is not None and kept.engine._ledger is not None:
            return kept.engine
        engine = Engine.open(home, config, ledger)
        engine.ledger  # noqa: B018 - opened now, so its identity is known
        paths = _paths(engine)
        with _ENGINES_LOCK:
            if not _ENGINES:
                import atexit

                atexit.register(close_all)
            _ENGINES[key] = _Kept(engine, *paths, _identity(*paths))
            evicted = [_ENGINES.pop(k).engine for k in list(_ENGINES)[:-_ENGINES_KEPT]]
    for old in evicted:  # the first opened: a process rarely has more homes
        with contextlib.suppress(Exception):
            old.close()
    return engine


def close_all() -> None:
    """Close the engines :func:`start` keeps open (done at exit; call it before
    removing a home a process used)."""
    with _ENGINES_LOCK:
        engines = [kept.engine for pid_key, kept in _ENGINES.items() if pid_key[0] == os.getpid()]
        _ENGINES.clear()
    for engine in engines:
        with contextlib.suppress(Exception):
            engine.close()
    from .folders import close_journals

    close_journals()
