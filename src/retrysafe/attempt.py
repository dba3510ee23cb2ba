"""One attempt at work: generate steps, effect steps, close-out.

The effect algorithm (docs/concepts.md) lives in :meth:`Run.effect`, built
from the phases an agent can also drive one by one (:meth:`Run.check`,
:meth:`Run.intend`, :meth:`Run.record_evidence`, :meth:`Run.declare_unknown`,
:meth:`Run.declare_blocked`), so the library, ``retrysafe step`` and the
agent protocol decide alike. A run knows its ledger, settings and job; it
never reaches back to the :class:`~retrysafe.engine.Engine` that made it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any, NamedTuple

from . import closeout, envvars, heartbeat
from .crash import injector, never
from .effects import EffectClass, OnUnknown, parse_class, policy_for
from .errors import (
    Busy,
    InvalidInput,
    LedgerError,
    PayloadMismatch,
    RetrysafeError,
    StaleAttempt,
    StepBlocked,
    StepFailed,
    StepUnknown,
    command_line,
    not_text,
)
from .evidence import Evidence, FieldValue
from .folders import AttemptFolder
from .fsio import artifact_problem, atomic_copy, sha256_file
from .keys import check_name, slug, step_key, step_ref
from .ledger import AttemptRecord, Ledger, OutcomeRecord, StepRecord
from .process import hold, holder_gone, release, this_holder
from .states import PROGRESS_MARKS, Action, BlockCause, OutcomeState, StepState

if TYPE_CHECKING:
    from .config import Job, Settings
    from .connectors.base import ConnectorBase, LookupResult

__all__ = ["Decision", "Run"]

_S, _O = StepState, OutcomeState
# Plain strings on the hot path: the sqlite3 driver binds an exact str directly,
# an enum member only through its adaptation protocol.
_RUNNING_V, _DONE_V = _S.RUNNING.value, _S.DONE.value
_FROM_RUNNING = (_RUNNING_V,)
_RANK: dict[str, int] = {mark: rank for rank, mark in enumerate(PROGRESS_MARKS)}
Execute = Callable[[str], str]
Lookup = Callable[[str], "LookupResult"]
Verify = Callable[[str, str], bool]


def check_callables(name: str, effect_class: object, execute: Execute | None,
                    lookup: Lookup | None) -> Execute:
    """``execute`` (with an effect class) and ``lookup`` as an effect without a connector
    needs them: functions of the step key; else :class:`InvalidInput`, before any
    intent (:meth:`Run.effect`) and before any claim (:meth:`Engine.once
    <retrysafe.engine.Engine.once>`)."""
    if execute is None or effect_class is None:
        raise InvalidInput(f"step {name}: give execute= and an effect class, or a connector")
    for what, given in (("execute", execute), ("lookup", lookup)):
        if given is not None and not callable(given):
            raise InvalidInput(f"step {name}: {what}= must be a function of the step key, "
                               f"not {type(given).__name__} {given!r:.60}")
    return execute


def check_fields(name: str, check: str | None, connector_name: str | None,
                 payload: Mapping[str, Any] | None) -> str | None:
    """What an effect's intent records besides its class, as given: ``check`` and
    ``connector_name`` text a ledger can store, and ``payload``'s fingerprint (None
    without one); else :class:`InvalidInput`, before any intent (:meth:`Run.effect`) and
    before any claim (:meth:`Engine.once <retrysafe.engine.Engine.once>`)."""
    for what, given in (("check", check), ("connector_name", connector_name)):
        if given is None:
            continue
        if not isinstance(given, str):
            raise InvalidInput(f"step {name}: {what}= must be text, not "
                               f"{type(given).__name__} {given!r:.60}")
        if "\x00" in given:
            raise InvalidInput(f"step {name}: {what}= holds a NUL character, which a ledger "
                               "cannot store")
        try:
            given.encode()
        except UnicodeEncodeError:
            raise InvalidInput(f"step {name}: {what}= is not UTF-8 text "
                               f"(near {given[:40]!r})") from None
    if payload is None:
        return None
    try:
        return fingerprint(payload)
    except (TypeError, ValueError) as exc:  # keys of mixed types, a circular payload
        raise InvalidInput(f"step {name}: the payload cannot be fingerprinted "
                           f"({type(exc).__name__}: {exc})") from None


def intent_fields(effect_class: object, check: str | None, connector: str | None,
                  fp: str | None) -> dict[str, Any]:
    """What an effect's intent records besides its state and runner: its class, and its
    check command, connector name and payload fingerprint where given (:meth:`Run.effect`,
    and the intent :meth:`Engine.once <retrysafe.engine.Engine.once>` writes with a
    claim)."""
    fields: dict[str, Any] = {"effect_class": str(effect_class)}
    if check is not None:
        fields["check_cmd"] = check
    if connector is not None:
        fields["connector"] = connector
    if fp is not None:
        fields["fingerprint"] = fp
    return fields


def fingerprint(payload: Mapping[str, Any]) -> str:
    import hashlib

    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def artifact_name(name: str, item: str | None = None) -> str:
    """A generate step's default artifact file name: ``NAME``, or ``NAME+ITEM`` for an
    item (slugged, as its ``step-NAME+ITEM.log``). Names never hold ``+``, so no two
    steps or items share one, nor one a ``--output`` name; a retry gets the same."""
    return f"{name}+{slug(item)}" if item else name


def _whose(name: str, item: str | None) -> str:
    return f"item {item} of step {name}" if item else f"step {name}"


def _unfit_evidence(evidence: object) -> str:
    """What is wrong with what an ``execute`` returned as evidence ('': nothing; ``None``
    is taken as no evidence): not text, or text no ledger can store."""
    if evidence is None:
        return ""
    if isinstance(evidence, str):
        if "\x00" in evidence:
            return "evidence with a NUL character, which a ledger cannot store"
        try:
            evidence.encode()
        except UnicodeEncodeError:
            return "evidence that is not UTF-8 text"
        return ""
    try:
        shown = repr(evidence)
    except Exception:  # noqa: BLE001 - a value that cannot even be shown
        shown = "?"
    return f"{type(evidence).__name__} {shown[:100]}, not the evidence as text"


def _never_called(exc: TypeError, execute: Callable[..., object], skey: str) -> bool:
    """Did Python refuse to call ``execute`` with the step key (a callable taking no
    argument, or two), so that none of it ran? Only when the error was raised at the call
    itself (no frame of the callable in its traceback) and the callable's signature does
    refuse one argument; one without a signature to read (a builtin) may have run."""
    if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
        return False
    import inspect

    try:
        inspect.signature(execute).bind(skey)
    except TypeError:
        return True
    except ValueError:  # no signature to read
        return False
    return False


def _said(exc: BaseException) -> str:
    """What ``exc`` says, as text every ledger stores: a message given as bytes, or as
    text holding bytes that are not UTF-8 (lone surrogates), is escaped (``\\xff``), as
    is a NUL; a message that cannot be read at all is named by its type. Recording
    a failure never fails on its message."""
    try:
        said: object = exc.message if isinstance(exc, RetrysafeError) else str(exc)
        if isinstance(said, bytes | bytearray):
            said = bytes(said).decode("utf-8", "backslashreplace")
        elif not isinstance(said, str):
            said = repr(said)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        return f"{type(exc).__name__} (its message could not be read)"
    assert isinstance(said, str)
    try:
        said.encode("utf-8")
    except UnicodeEncodeError:
        try:  # surrogates standing for bytes (surrogateescape): the bytes, escaped
            said = said.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            said = said.encode("utf-8", "backslashreplace").decode("utf-8")
    return said.replace("\x00", "\\x00")


class Decision(NamedTuple):
    """What to do about one effect step (``retrysafe check``).

    ``action`` says what (:class:`~retrysafe.states.Action`): ``skip`` has the
    proof in ``evidence``; ``lookup`` and ``busy`` say why in ``reason``;
    ``blocked`` has ``reason``, ``cause`` and the ``unblock`` command.
    """

    action: Action
    step_key: str
    state: str | None
    evidence: str | None = None
    reason: str = ""
    unblock: str = ""
    cause: BlockCause | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "step_key": self.step_key,
            "state": self.state,
            "evidence": self.evidence,
            "reason": self.reason,
            "unblock": self.unblock,
            "cause": self.cause.value if self.cause else None,
        }


class Run:
    """An attempt in progress. Get one from :func:`retrysafe.start`."""

    def __init__(self, ledger: Ledger, settings: Settings, job: Job,
                 attempt: AttemptRecord | None, outcome: OutcomeRecord | None = None, *,
                 folder_on_demand: bool = False, steps: Sequence[StepRecord] | None = None,
                 ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.job = job
        self.attempt = attempt
        self.key = attempt.outcome_key if attempt else (outcome.key if outcome else "")
        self.read_only = attempt is None
        self._on_demand = folder_on_demand and attempt is not None
        #: a read-only run's steps, read with its done outcome (None: read each when asked)
        self._known = ({s.step_key: s for s in steps}
                       if steps is not None and attempt is None else None)
        self._beat: heartbeat.Beat | None = None
        #: the step whose intent the claim wrote (a server's Engine.once), until effect()
        #: goes on from it
        self._intended: str | None = None
        self._closed: OutcomeRecord | None = None  # how close() ended the attempt
        self.on_lost: Callable[[], None] | None = None
        # drills and tests: RETRYSAFE_CRASH_AT (a read-only run writes nothing: no point)
        self._crash_point = never if attempt is None else injector()
        #: the furthest progress mark this run knows its outcome has reached
        self._mark = outcome.state if outcome is not None else ""
        #: Engine.once: the effect is the attempt's whole work, so its record shares the
        #: finish's commit (SQLite: a shared commit, as the claim shares the intent's;
        #: a server: one statement, LedgerCore.record_and_finish, and close-out finds the
        #: attempt finished, _prefinished); the heartbeat starts once the claim is in
        self._once = False
        self._share_open = False
        self._landed = False  # has a shared commit of this run committed (its claim with it)?
        self._beat_wanted = False
        self._held: list[tuple[str, str]] = []  # crash points reached inside a shared commit
        #: log lines of writes inside a shared commit, written once it commits (a journal
        #: never tells of a claim or an intent the ledger does not hold)
        self._lines: list[tuple[str, str, str, dict[str, Any]]] = []
        self._prefinished: OutcomeRecord | None = None
        if attempt is not None:
            hold(attempt.id, self)  # this process works on it: others must not take it over

    @classmethod
    def finished(cls, ledger: Ledger, settings: Settings, job: Job, outcome: OutcomeRecord) -> Run:
        """A read-only view of an outcome: steps return what was recorded."""
        return cls(ledger, settings, job, None, outcome)

    # --- basics ------------------------------------------------------------------
    # made when first used: a re-run of a done outcome (read-only) needs none of them

    @functools.cached_property
    def folder(self) -> AttemptFolder:
        """This attempt's folder (:mod:`retrysafe.folders`)."""
        return AttemptFolder(self.settings.home, self.job.name, self.key, self.number,
                             on_demand=self._on_demand)

    @functools.cached_property
    def lost(self) -> threading.Event:
        """Set when the heartbeat found the lease taken over."""
        return threading.Event()

    @property
    def dir(self) -> Path:
        """This attempt's own folder (made now if it was left to be made on demand).
        A read-only run has none: :class:`InvalidInput`, naming the outcome's folder
        (a path to an attempt that never was would be written into)."""
        if self.attempt is None:
            raise InvalidInput(f"outcome {self.key} is done; this run only reads and has no "
                               f"attempt folder (the outcome's folder is "
                               f"{self.folder.outcome_dir})", key=self.key)
        return self.folder.ensure()

    @property
    def number(self) -> int:
        return self.attempt.number if self.attempt else 0

    def _attempt(self) -> AttemptRecord:
        if self.attempt is None:
            raise InvalidInput(f"outcome {self.key} is done; this run only reads", key=self.key)
        return self.attempt

    def env(self) -> dict[str, str]:
        """The environment a command of this attempt gets."""
        from .ledger import child_env  # the ledger URL without its password, PGPASSWORD

        attempt = self._attempt()
        return {
            envvars.HOME: str(self.settings.home),
            envvars.CONFIG: str(self.settings.config_path),
            **child_env(self.settings.ledger_url),
            envvars.JOB: self.job.name,
            envvars.OUTCOME_KEY: self.key,
            envvars.ATTEMPT: str(attempt.number),
            envvars.ATTEMPT_ID: attempt.id,
            envvars.ATTEMPT_DIR: str(self.dir),
            envvars.FENCE: str(attempt.fence),
        }

    def _log(self, skey: str, action: str, result: str, **extra: Any) -> None:
        if self.attempt is not None:
            if self._share_open:
                self._lines.append((skey, action, result, extra))
            else:
                self.folder.log(self.attempt.id, skey, action, result, **extra)

    # --- heartbeat ---------------------------------------------------------------

    def start_heartbeat(self, interval: float | None = None) -> None:
        """Renew the lease in the background until :meth:`stop_heartbeat`.

        When a renewal is refused (another attempt took over) ``lost`` is set
        and ``on_lost`` is called, so the caller can stop its work.
        """
        attempt = self._attempt()
        every = interval or max(0.5, min(self.job.lease_seconds / 3, 60.0))

        def renew() -> bool:
            try:
                self.ledger.renew(attempt, self.job.lease_seconds)
            except StaleAttempt:
                if self._beat is not beat:
                    return False  # stopped while this renewal was slow: nobody to tell
                self.lost.set()
                if self.on_lost:
                    with contextlib.suppress(Exception):  # told once, whatever it does
                        self.on_lost()
                return False
            return True

        self.stop_heartbeat()
        beat = self._beat = heartbeat.Beat(every, renew)
        heartbeat.add(beat)

    def stop_heartbeat(self) -> None:
        """Stop renewing the lease; no renewal is running once this returns."""
        if self._beat is not None:
            heartbeat.remove(self._beat)
            self._beat = None

    # --- shared commits (Engine.once) ------------------------------------------

    def _end_shared(self) -> None:
        """Commit the shared commit this run holds open, then reach the crash points
        passed inside it (a drill's "after-intent" means the intent is in the ledger)."""
        if not self._share_open:
            return
        self._share_open = False
        held, self._held = self._held, []  # (a commit that fails reached none of them)
        lines, self._lines = self._lines, []  # (nor wrote any of these)
        self.ledger.backend.close_shared()
        self._landed = True
        for skey, action, result, extra in lines:
            self._log(skey, action, result, **extra)
        for name, where in held:
            self._crash_point(name, where)

    def _forget(self) -> None:
        """An attempt whose claim never committed (its shared commit failed): nothing of
        it is in the ledger to close; this process lets go of it."""
        self.stop_heartbeat()
        if self.attempt is not None:
            release(self.attempt.id)
        if "folder" in self.__dict__:
            self.folder.close()

    def _leave_shared(self) -> None:
        """Before anything leaves this process (an effect, a lookup): the claim and the
        intent committed, and the heartbeat :meth:`Engine.once` wants started."""
        self._end_shared()
        if self._beat_wanted:
            self._beat_wanted = False
            self.start_heartbeat()

    def _point(self, name: str, where: str) -> None:
        """A crash point just after a write: inside a shared commit, reached once it
        commits."""
        if self._share_open:
            self._held.append((name, where))
        else:
            self._crash_point(name, where)

    # --- the effect algorithm, phase by phase --------------------------------

    def _step_key(self, name: str, item: str | None) -> str:
        return step_key(self.key, name, item)

    def _runner_gone(self, step: StepRecord) -> bool:
        """Is a ``running`` step orphaned (its attempt or its process is gone)?"""
        if self.attempt is None or step.attempt_id != self.attempt.id:
            return True  # running under another attempt: claim() superseded it or will
        if step.runner is None:
            return True
        return step.runner.pid != os.getpid() and holder_gone(step.runner)

    def decide(
        self,
        name: str,
        effect_class: str | EffectClass,
        *,
        item: str | None = None,
        has_lookup: bool = False,
        looked_up: bool = False,
        step: StepRecord | EllipsisType | None = ...,
        lookup_first: bool = True,
    ) -> Decision:
        """Steps 1-4 of the effect algorithm, without acting.

        ``looked_up`` says a lookup already answered "absent" for an unknown step;
        ``step`` is the step as the caller just read it (default: read it now).
        ``lookup_first=False``: the class's ``lookup_first`` does not apply (an
        agent, whose "lookup" is its own search, is asked to look only after an
        unclear try).
        """
        skey = self._step_key(name, item)
        cls = parse_class(effect_class)
        policy = policy_for(cls, self.job.classes)
        step = self.ledger.step(skey) if isinstance(step, EllipsisType) else step
        state = step.state if step else None

        def blocked(reason: str, cause: BlockCause) -> Decision:
            err = StepBlocked(self.key, name, reason, cause, target=step_ref(self.key, name, item))
            return Decision(Action.BLOCKED, skey, state, reason=reason, unblock=err.unblock,
                            cause=cause)

        if not looked_up and has_lookup and lookup_first and policy.lookup_first and (
                step is None or (step.state == _S.PLANNED and step.tries == 0)):
            return Decision(Action.LOOKUP, skey, state,
                            reason=(f"{name} has never run here: look for {skey} in the external "
                                    "system before the first execution (lookup_first)"))
        if step is not None:
            if step.state == _S.DONE:
                return Decision(Action.SKIP, skey, state, evidence=step.evidence)
            if step.state == _S.BLOCKED:
                return blocked(step.reason, BlockCause(step.cause or BlockCause.AGENT))
            if step.state == _S.RUNNING and not self._runner_gone(step):
                pid = step.runner.pid if step.runner else "?"
                return Decision(Action.BUSY, skey, state,
                                reason=f"step {name} of {self.key} is running in process {pid}")
            if step.state in (_S.UNKNOWN, _S.RUNNING) and not looked_up:
                if has_lookup or policy.on_unknown == OnUnknown.LOOKUP:
                    return Decision(
                        Action.LOOKUP, skey, state,
                        reason=(f"the last try of {name} may have happened "
                                f"({step.reason or step.state}): look for {skey} in the "
                                "external system before acting"))
                if policy.on_unknown == OnUnknown.BLOCK:
                    return blocked(f"class {cls} is never retried blindly after an unclear result",
                                   BlockCause.NEVER_BLIND)
            if step.state == _S.FAILED and not policy.retry_failed:
                return blocked(f"{name} failed ({step.reason}); class {cls} is not retried "
                               "automatically", BlockCause.NOT_RETRIED)
        if policy.approval and not (step and step.approved_by):
            return blocked(f"awaiting approval: class {cls} needs an approval record",
                           BlockCause.APPROVAL)
        return Decision(Action.EXECUTE, skey, state)

    def block(self, name: str, item: str | None, step: StepRecord | None, reason: str,
              cause: BlockCause, **fields: Any) -> StepBlocked:
        """Record the step as ``blocked`` for ``cause``; returns the error to raise.

        ``step`` is the step as last read (``None`` if it does not exist yet), so a
        concurrent change is refused rather than overwritten.
        """
        skey = self._step_key(name, item)
        if step is not None and step.state == _S.DONE and cause != BlockCause.ARTIFACT:
            raise InvalidInput(f"step {name} of {self.key} is already done (evidence "
                               f"{step.evidence!r}); it cannot be blocked",
                               key=self.key, step=name, state=step.state)
        self._move(skey, _S.BLOCKED, name=name, item=item, expect=[step.state if step else None],
                   reason=reason, cause=cause, **fields)
        self._log(skey, "block", reason)
        return StepBlocked.of(self.key, name, reason, cause, target=step_ref(self.key, name, item))

    def _refusal(self, name: str, item: str | None, step: StepRecord | None,
                 decision: Decision, effect_class: EffectClass) -> RetrysafeError:
        """The error for a decision that does not let the step execute; a new
        block is recorded first, so ``status`` shows it."""
        if decision.action is Action.BUSY:
            return Busy(decision.reason, key=self.key, step=name, state=decision.state)
        assert decision.action is Action.BLOCKED and decision.cause is not None
        if step is not None and step.state == _S.BLOCKED:
            return StepBlocked.of(self.key, name, decision.reason, decision.cause,
                                  target=step_ref(self.key, name, item))
        return self.block(name, item, step, decision.reason, decision.cause,
                          effect_class=str(effect_class))

    def _move(self, skey: str, to: str, *, name: str, item: str | None,
              outcome_state: str | None = None, **changes: Any) -> None:
        """Move one of this attempt's steps in the ledger (fenced, conditional)."""
        mark = outcome_state
        if mark is not None and _RANK.get(self._mark, -1) >= _RANK[mark]:
            mark = None  # this attempt already moved the outcome at least this far
        self.ledger.move_step(self._attempt(), skey, to, name=name, item=item or "",
                              outcome_state=mark, **changes)
        if mark is not None:
            self._mark = mark

    def intent(self, name: str, effect_class: str | EffectClass, *, item: str | None = None,
               check: str | None = None, connector: str | None = None,
               fingerprint: str | None = None, kind: str = "effect",
               runner_pid: int | None = None,
               step: StepRecord | EllipsisType | None = ...) -> None:
        """Write-ahead ``running`` (step 5): durable before the external call.

        ``step`` is the step as the caller just read it (``None``: it does not
        exist yet); the write itself refuses any change since, so passing it
        only saves a read.
        """
        skey = self._step_key(name, item)
        step = self.ledger.step(skey) if isinstance(step, EllipsisType) else step
        if step is not None and step.state == _S.RUNNING and not self._runner_gone(step):
            raise Busy(f"step {name} of {self.key} is already running in process "
                       f"{step.runner.pid if step.runner else '?'}", key=self.key, step=name,
                       state=step.state)
        if step is not None and step.state in (_S.DONE, _S.BLOCKED):
            raise InvalidInput(f"step {name} of {self.key} is {step.state}; nothing to start",
                               key=self.key, step=name, state=step.state)
        self._intent(skey, name, item, str(effect_class), step.state if step else None,
                     check=check, connector=connector, fingerprint=fingerprint, kind=kind,
                     runner_pid=runner_pid)

    def _intent(self, skey: str, name: str, item: str | None, effect_class: str,
                expect: str | None, *, check: str | None = None, connector: str | None = None,
                fingerprint: str | None = None, kind: str = "effect",
                runner_pid: int | None = None, explain: bool = True) -> bool:
        """Write the intent; ``explain=False``: return ``False`` if the step was
        not in the expected state (or the fence is lost) instead of saying why."""
        self._crash_point(name, "before-intent")
        fields = intent_fields(effect_class, check, connector, fingerprint)
        attempt = self._attempt()
        if not self.ledger.move_step(
                attempt, skey, _RUNNING_V, name=name, item=item or "", kind=kind,
                expect=(expect,), runner=this_holder(runner_pid),
                reason=f"attempt {attempt.number} started it", explain=explain, **fields):
            return False
        self._log(skey, "intent", "running")
        self._point(name, "after-intent")
        return True

    def record(self, name: str, evidence: str, *, item: str | None = None,
               outcome_state: str = _O.DELIVERED, **fields: Any) -> None:
        """Evidence and ``done``, immediately after success (step 7)."""
        self._record(self._step_key(name, item), name, item, evidence, outcome_state, **fields)

    def _record(self, skey: str, name: str, item: str | None, evidence: str,
                outcome_state: str | None = _O.DELIVERED, **fields: Any) -> None:
        self._move(skey, _DONE_V, name=name, item=item, expect=_FROM_RUNNING, evidence=evidence,
                   outcome_state=outcome_state, reason="", **fields)
        self._log(skey, "record", "done", evidence=evidence)
        self._point(name, "after-record")

    def mark_unknown(self, name: str, reason: str, *, item: str | None = None) -> None:
        skey = self._step_key(name, item)
        self._move(skey, _S.UNKNOWN, name=name, item=item, expect=_FROM_RUNNING, reason=reason)
        self._log(skey, "unknown", reason)

    def mark_failed(self, name: str, reason: str, *, item: str | None = None) -> None:
        skey = self._step_key(name, item)
        self._move(skey, _S.FAILED, name=name, item=item, expect=_FROM_RUNNING, reason=reason)
        self._log(skey, "fail", reason)

    def settle_found(self, name: str, evidence: str, *, item: str | None = None,
                     how: str = "lookup", fields: Mapping[str, Any] | None = None) -> str:
        """A lookup found the effect: record it without executing. Returns the
        evidence that stands: a human's ``resolve --found`` that landed first wins.
        ``fields``: what the step's intent would have recorded (its class, its check,
        its connector), for a step found before it ever executed."""
        skey = self._step_key(name, item)
        step = self.ledger.step(skey)
        if step is not None and step.state == _S.DONE:
            return self._settled(skey, step)
        try:
            self._move(skey, _S.DONE, name=name, item=item, expect=(step.state if step else None,),
                       evidence=evidence, outcome_state=_O.DELIVERED, reason=f"found by {how}",
                       **(fields or {}))
        except Busy:
            now = self.ledger.step(skey)
            if now is None or now.state != _S.DONE:
                raise
            return self._settled(skey, now)
        self._log(skey, "lookup", "found", evidence=evidence)
        return evidence

    def _settled(self, skey: str, step: StepRecord) -> str:
        """The step is done already (a human settled it meanwhile): take that."""
        self._log(skey, "check", "skip", evidence=step.evidence)
        return step.evidence or ""

    # --- the whole algorithm -----------------------------------------------------

    def effect(
        self,
        name: str,
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
    ) -> str:
        """Perform an effect at most once and return its evidence.

        Give either ``execute`` (and ideally ``lookup``), or a ``connector`` with
        its ``payload``. ``execute`` receives the step key to hand to the
        provider and returns the evidence (text: anything else leaves the step
        ``unknown``, :class:`~retrysafe.errors.StepUnknown`); it raises
        :class:`~retrysafe.connectors.EffectFailed` when nothing happened.
        ``lookup`` receives the step key and answers
        :class:`~retrysafe.connectors.Found`, ``ABSENT`` or
        :class:`~retrysafe.connectors.Ambiguous` (any other answer is refused,
        :class:`~retrysafe.errors.InvalidInput`, and nothing executes).
        """
        skey = self._step_key(name, item)  # a bad name or item is refused first
        cls, execute, lookup = self._bind(name, effect_class, execute, lookup, connector, payload)
        # lookup_first asks only a lookup that can ever find something
        first = lookup is not None and (connector is None or connector.can_look_up)
        fp = check_fields(name, check, connector_name, payload)
        # The common case is a step this outcome has never seen: write the intent
        # straight away, without reading first. The write only creates the step;
        # if it exists, it is read and decided below.
        if not self.read_only:
            if self._intended is not None:
                intended, self._intended = self._intended, None
                if intended == skey:  # the claim wrote this step's intent (Engine.once)
                    self._log(skey, "intent", "running")
                    self._point(name, "after-intent")
                    return self._perform(skey, name, item, execute)
            if policy_for(cls, self.job.classes).intent_first(first) and self._intent(
                    skey, name, item, cls, None, check=check, connector=connector_name,
                    fingerprint=fp, explain=False):
                return self._perform(skey, name, item, execute)
            self._leave_shared()  # (a read, a lookup or a refusal comes next)
        # what an intent records, for a step settled or blocked before its first one
        known_as = intent_fields(cls, check, connector_name, fp)
        step = self._known.get(skey) if self._known is not None else self.ledger.step(skey)
        if step is not None and step.kind == "generate":
            # its evidence is an artifact's checksum: taken as this effect's, the effect
            # would never happen
            raise InvalidInput(f"step {name} of {self.key} is a generate step, not an effect; "
                               "give the effect another step name or item",
                               key=self.key, step=name, state=step.state)
        if fp and step is not None and step.fingerprint and step.fingerprint != fp:
            return self._update_in_place(skey, name, item, step, connector, payload, fp,
                                         allow_update)
        if self.read_only:
            return (step.evidence or "") if step else ""
        decision = self.decide(name, cls, item=item, has_lookup=lookup is not None, step=step,
                               lookup_first=first)
        if decision.action is Action.LOOKUP:
            found = self._settle_by_lookup(skey, name, item, cls, step, lookup, connector,
                                           known_as)
            if found is not None:
                return found
            step = self.ledger.step(skey)
            decision = self.decide(name, cls, item=item, looked_up=True, step=step)
        if decision.action is Action.SKIP:
            self._log(skey, "check", "skip", evidence=decision.evidence)
            return decision.evidence or ""
        if decision.action is not Action.EXECUTE:
            raise self._refusal(name, item, step, decision, cls)
        try:
            self.intent(name, cls, item=item, check=check, connector=connector_name, step=step,
                        fingerprint=fp)
        except Busy:
            now = self.ledger.step(skey)
            if now is None or now.state != _S.DONE:
                raise
            return self._settled(skey, now)  # a human's resolve --found landed meanwhile
        return self._perform(skey, name, item, execute)

    def _bind(self, name: str, effect_class: str | EffectClass | None, execute: Execute | None,
              lookup: Lookup | None, connector: ConnectorBase | None,
              payload: Mapping[str, Any] | None) -> tuple[EffectClass, Execute, Lookup | None]:
        """The class, execute and lookup of an effect: given, or the connector's.
        A connector validates the payload first, so bad input records nothing."""
        if connector is not None:
            data: Mapping[str, Any] = payload or {}
            connector.validate(data)
            effect_class = effect_class or connector.effect_class
            conn = connector
            execute = execute or (lambda skey: conn.execute(skey, data))
            lookup = lookup or (lambda skey: conn.lookup(skey, data))
        execute = check_callables(name, effect_class, execute, lookup)
        assert effect_class is not None
        return parse_class(effect_class), execute, lookup

    def _update_in_place(self, skey: str, name: str, item: str | None, step: StepRecord,
                         connector: ConnectorBase | None, payload: Mapping[str, Any] | None,
                         fp: str, allow_update: bool) -> str:
        """The step was recorded with another payload: refuse, or (explicitly
        allowed, connector able, step done) replace the effect in place."""
        updatable = connector is not None and connector.updatable
        if self.read_only or not (allow_update and updatable and step.state == _S.DONE):
            raise PayloadMismatch(
                f"step {name} of {self.key} was recorded with a different payload; "
                "use a new step name or item" + (", or allow updating in place" if updatable else ""),
                key=self.key, step=name, state=step.state)
        assert connector is not None and payload is not None
        evidence = connector.update(skey, payload)
        self._crash_point(name, "after-execute")
        self._move(skey, _S.DONE, name=name, item=item, expect=[_S.DONE], evidence=evidence,
                   fingerprint=fp, reason="updated in place")
        self._log(skey, "update", "done", evidence=evidence)
        return evidence

    def _settle_by_lookup(self, skey: str, name: str, item: str | None, cls: EffectClass,
                          step: StepRecord | None, lookup: Lookup | None,
                          connector: ConnectorBase | None,
                          known_as: Mapping[str, Any] | None = None) -> str | None:
        """Step 2: an earlier try may have acted. Found: record it and return the
        evidence. Absent (and the lookup can prove it): ``None``, go on.
        Otherwise the step is blocked for a human. Before a step's first execution
        (``lookup_first``) the same answers apply."""
        state = step.state if step else "not started"
        if lookup is None:
            raise self.block(
                name, item, step,
                f"{name} may have happened ({step.reason if step else 'unknown'}) and there is no "
                f"lookup to tell: check the external system for {skey}", BlockCause.NO_LOOKUP)
        from .connectors.base import Absent, Ambiguous, Found  # (a command's run never looks up)

        try:
            result = lookup(skey)
        except Exception as exc:  # noqa: BLE001 - the system could not be asked
            raise StepUnknown(
                f"step {name} of {self.key} is {state} and the lookup failed "
                f"({type(exc).__name__}: {_said(exc)}); it stays {state}, try again later",
                key=self.key, step=name, state=state) from None
        if not isinstance(result, (Found, Absent, Ambiguous)) or (
                isinstance(result, Found) and not isinstance(result.evidence, str)):
            # only an answer of the lookup's own types decides; anything else (a bare
            # evidence string, None, True) is no "absent", so nothing is executed
            raise InvalidInput(
                f"step {name} of {self.key}: the lookup answered {result!r:.100}, not "
                "Found(evidence text), ABSENT or Ambiguous(reason); nothing was executed and "
                f"the step stays {state}", key=self.key, step=name, state=state)
        if isinstance(result, Found):
            return self.settle_found(name, result.evidence, item=item, fields=known_as)
        if isinstance(result, Ambiguous):
            raise self.block(name, item, step, f"lookup is ambiguous: {result.reason}",
                             BlockCause.AMBIGUOUS, **(known_as or {}))
        authoritative = connector.authoritative if connector is not None else True
        # "absent" from a lookup that cannot prove it settles nothing after a try that
        # may have acted; before the first execution (lookup_first) the ledger's own
        # "never ran here" stands
        if step is not None and step.tries > 0 and not authoritative \
                and policy_for(cls, self.job.classes).on_unknown != OnUnknown.REEXECUTE:
            raise self.block(
                name, item, step,
                f"the lookup found nothing, but it cannot prove {skey} never happened",
                BlockCause.NOT_PROVABLE)
        self._log(skey, "lookup", "absent")
        return None

    def _perform(self, skey: str, name: str, item: str | None, execute: Execute) -> str:
        """Steps 6-7 of the effect algorithm, after a durable intent: execute, then
        record the evidence, or what is known of the failure."""
        from .connectors.base import EffectFailed  # (not imported by a command's run)

        self._leave_shared()
        gone = self.ledger.backend.gone()
        if gone is not None:  # the intent just written is in no ledger anyone will read
            raise LedgerError(f"{gone} while attempt {self.number} of {self.key} ran: step "
                              f"{name} was not executed, since no ledger holds its intent; run "
                              "again (on the ledger there now, it starts over)",
                              key=self.key, step=name)
        try:
            evidence = execute(skey)
        except EffectFailed as exc:
            said = _said(exc)  # bytes or lone surrogates: escaped, and the step failed
            self.mark_failed(name, said, item=item)
            raise StepFailed(f"step {name} of {self.key} failed: {said}", key=self.key,
                             step=name, state=_S.FAILED) from None
        except InvalidInput as exc:
            # refused before the external call: nothing happened
            self.mark_failed(name, f"invalid input: {_said(exc)}", item=item)
            raise
        except TypeError as exc:
            if not _never_called(exc, execute, skey):
                raise self._unknown_after(name, item, exc) from exc
            # execute cannot take the step key: Python refused the call before it ran
            self.mark_failed(name, f"execute could not be called, so it never ran: "
                                   f"TypeError: {_said(exc)}", item=item)
            raise
        except Exception as exc:
            raise self._unknown_after(name, item, exc) from exc
        except BaseException as exc:  # (an interrupt, an exit: itself, once recorded)
            self._unknown_after(name, item, exc)
            raise
        self._crash_point(name, "after-execute")
        unfit = _unfit_evidence(evidence)
        if unfit:
            # it returned, so it may have acted: unknown (looked up next), never done
            # with evidence the ledger cannot hold, nor a generator that never ran as done
            reason = f"execute returned {unfit}"
            self.mark_unknown(name, reason, item=item)
            raise StepUnknown(
                f"step {name} of {self.key} may or may not have happened ({reason}); "
                "the next run looks it up first", key=self.key, step=name, state=_S.UNKNOWN)
        mark: str | None = _O.DELIVERED
        backend = self.ledger.backend
        if self._once:  # the record shares the close-out finish's commit (Engine.once)
            self.stop_heartbeat()
            if backend.shares_commits:
                self._share_open = backend.open_shared()
                # nobody can see the outcome delivered and not yet done: no mark between
                mark = None
            elif backend.single_statement_moves:
                recorded, self._prefinished = self.ledger.record_and_finish(
                    self._attempt(), skey, evidence)
                if recorded:
                    self._log(skey, "record", "done", evidence=evidence)
                    self._crash_point(name, "after-record")
                    return "" if evidence is None else evidence
                # (nothing was written: the record below says why)
        self._record(skey, name, item, evidence, mark)
        # no evidence is "", as every later read of the step gives it (the signature's str)
        return "" if evidence is None else evidence

    def _unknown_after(self, name: str, item: str | None, exc: BaseException) -> StepUnknown:
        """Mark the step unknown after ``execute`` raised ``exc`` (it may have acted first),
        and say so."""
        said = _said(exc)
        reason = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
        # the ledger may be the thing that failed; the running row says unknown anyway
        with contextlib.suppress(Exception):
            self.mark_unknown(name, reason, item=item)
        return StepUnknown(f"step {name} of {self.key} may or may not have happened ({reason}); "
                           "the next run looks it up first",
                           key=self.key, step=name, state=_S.UNKNOWN)

    # --- the same algorithm, one phase per call (the agent protocol) ----------------

    def check(self, name: str, effect_class: str | EffectClass, *,
              item: str | None = None) -> Decision:
        """Decide about a step an agent is about to act on (``retrysafe check``).

        The agent can search the external system itself, so it always has a
        lookup. A new policy block (approval, a class never retried) is recorded
        at once, so ``status`` shows what waits for a human.
        """
        step = self.ledger.step(self._step_key(name, item))
        decision = self.decide(name, effect_class, item=item, has_lookup=True, step=step,
                               lookup_first=False)
        if decision.action is Action.BLOCKED and self.attempt is not None \
                and decision.state != _S.BLOCKED:
            assert decision.cause is not None
            self.block(name, item, step, decision.reason, decision.cause,
                       effect_class=str(parse_class(effect_class)))
            decision = Decision(Action.BLOCKED, decision.step_key, _S.BLOCKED.value,
                                reason=decision.reason, unblock=decision.unblock,
                                cause=decision.cause)
        return decision

    def intend(self, name: str, effect_class: str | EffectClass, *, item: str | None = None,
               absent: str | None = None) -> str:
        """Write-ahead ``running`` for an agent about to act once (``retrysafe intent``).

        Refused when the step is done, blocked or running elsewhere, and when an
        earlier try may have acted and the agent has not looked (``absent`` says
        where it looked and found nothing). Returns the step key.
        """
        cls = parse_class(effect_class)
        if absent is not None:
            try:  # it goes to the attempt log only: refused here, as the ledger refuses
                absent.encode()
            except UnicodeEncodeError as exc:
                raise not_text(exc) from None
        step = self.ledger.step(self._step_key(name, item))
        decision = self.decide(name, cls, item=item, has_lookup=True,
                               looked_up=absent is not None, step=step, lookup_first=False)
        if decision.action is Action.SKIP:
            raise InvalidInput(f"step {name} of {self.key} is already done (evidence: "
                               f"{decision.evidence}); do not act again",
                               key=self.key, step=name, state=_S.DONE)
        if decision.action is Action.LOOKUP:
            raise InvalidInput(
                f"look first: {decision.reason}. Found: '{self.record_command(name, item)}'. "
                "Certainly absent: add --absent WHERE",
                key=self.key, step=name, state=decision.state)
        if decision.action is not Action.EXECUTE:
            raise self._refusal(name, item, step, decision, cls)
        if absent is not None:
            self._log(decision.step_key, "lookup", "absent", where=absent)
        self.intent(name, cls, item=item, step=step)
        return decision.step_key

    def record_command(self, name: str, item: str | None = None) -> str:
        """The ``retrysafe record`` line for a step of this attempt, ``<EVIDENCE>`` standing
        for the evidence: it names the item and the attempt, so it pastes as printed once
        the placeholder is replaced. Left as it is, the placeholder ends the line, so the
        shell refuses it (a redirection, then ``>`` before the end of the line) and nothing
        is recorded with a placeholder as its evidence."""
        from shlex import quote

        options = ""
        if item is not None:
            options += f"--item {quote(item)} "
        if self.attempt is not None:
            options += f"--attempt {quote(self.attempt.id)} "
        return command_line("record", self.key, name, options=options + "--evidence <EVIDENCE>")

    def record_evidence(self, name: str, evidence: str, *, item: str | None = None) -> bool:
        """Record what an agent did or found (``retrysafe record``); ``False`` when
        exactly this evidence was recorded already.

        The step must have been intended. Its own running intent becomes done;
        an unknown or failed step, or one running under an attempt that is gone,
        is settled as found. Other evidence for a done step, or any for a
        blocked one, is refused with the command that records it.
        """
        step = self.ledger.step(self._step_key(name, item))
        if step is None:
            raise InvalidInput(
                f"step {name} of {self.key} was never intended: run 'retrysafe check' and "
                "'retrysafe intent' before acting", key=self.key, step=name)
        if step.state == _S.DONE:
            if step.evidence == evidence:
                return False
            raise InvalidInput(
                f"step {name} of {self.key} is already done with evidence {step.evidence}; "
                f"refusing to record {evidence}", key=self.key, step=name, state=step.state)
        if step.state == _S.BLOCKED:
            raise StepBlocked(self.key, name, step.reason, step.cause or BlockCause.AGENT,
                              target=step_ref(self.key, name, item), evidence=evidence)
        try:
            if step.state == _S.RUNNING and self.attempt and step.attempt_id == self.attempt.id:
                self.record(name, evidence, item=item)
            else:
                self.settle_found(name, evidence, item=item, how="agent lookup")
        except StaleAttempt as exc:
            raise StaleAttempt.unrecorded(exc, self.key, step_ref(self.key, name, item),
                                          evidence) from None
        return True

    def declare_unknown(self, name: str, reason: str, *, item: str | None = None) -> None:
        """An agent's action may or may not have happened (``retrysafe unknown``)."""
        step = self.ledger.step(self._step_key(name, item))
        if step is None or step.state != _S.RUNNING:
            state = step.state if step else None
            raise InvalidInput(
                f"step {name} of {self.key} is {state or 'not started'}, not running: "
                "only an intended step can become unknown", key=self.key, step=name, state=state)
        self.mark_unknown(name, reason, item=item)

    def declare_blocked(self, name: str, reason: str, *, item: str | None = None) -> StepBlocked:
        """An agent stops a step for a human (``retrysafe block``); returns the error."""
        step = self.ledger.step(self._step_key(name, item))
        if step is not None and step.state in (_S.DONE, _S.BLOCKED):
            raise InvalidInput(f"step {name} of {self.key} is {step.state}; nothing to block",
                               key=self.key, step=name, state=step.state)
        return self.block(name, item, step, reason, BlockCause.AGENT)

    # --- generate steps ------------------------------------------------------------

    def generate(
        self,
        name: str,
        produce: Callable[[Path], object],
        *,
        filename: str | None = None,
        validate: Callable[[Path], bool] | None = None,
        item: str | None = None,
        provenance: Mapping[str, FieldValue] | None = None,
    ) -> Path:
        """Produce an artifact once and freeze it; a later attempt gets the same file.

        ``produce`` writes the artifact to the path it is given (inside this
        attempt's folder). ``validate`` may reject it. The accepted artifact's
        checksum is recorded; it is never produced again for this outcome.
        ``provenance`` (declared inputs: prompt file and checksum, model) is
        recorded with it, as named fields of its evidence (``provenance.py``).
        """
        check_name("step", name)
        fname = check_name("output", filename) if filename else artifact_name(name, item)
        skey = self._step_key(name, item)
        step = self.ledger.step(skey)
        if step is not None and step.state == _S.DONE and step.artifact:
            path = Path(step.artifact)
            problem = artifact_problem(path, step.checksum)
            if problem:
                raise self._artifact_lost(name, item, step, path, problem)
            self._log(skey, "generate", "reused", artifact=str(path))
            self._bring(path, fname)
            return path
        if self.read_only:
            raise InvalidInput(f"outcome {self.key} is done but has no artifact for {name}",
                               key=self.key, step=name)
        if step is not None and step.state in (_S.UNKNOWN, _S.RUNNING) and step.artifact \
                and step.checksum and self._runner_gone(step):
            adopted = self._adopt(name, item, step, validate, provenance)
            if adopted is not None:
                return adopted
        self.artifact_file(name, item, filename)  # never another item's accepted artifact
        self.intent(name, "local_write", item=item, kind="generate", step=step)
        out = self._produce(skey, name, item, produce, self.dir / fname)
        self._accept(name, item, out, validate, provenance)
        return out

    def _artifact_lost(self, name: str, item: str | None, step: StepRecord,
                       path: Path, problem: str) -> StepBlocked:
        """The accepted artifact of generate step ``name`` is missing or changed: it is
        never produced again on its own (what was delivered from it would differ from
        what a retry delivers). In an attempt the step is recorded ``blocked`` (cause
        ``artifact``), so the outcome waits for a human: restored as it was accepted,
        the next run takes it back (:meth:`Engine.begin`); ``resolve --absent`` has it
        produced again. A done outcome only reads: its artifact can only be restored."""
        reason = f"accepted artifact {path} {problem} (checksum {step.checksum})"
        if self.read_only:
            restore = f"restore {path} as it was accepted (checksum {step.checksum})"
            return StepBlocked(self.key, name, f"{reason}; the outcome is done, so its "
                               "artifacts are only read", BlockCause.ARTIFACT,
                               target=step_ref(self.key, name, item), unblock=restore)
        return self.block(name, item, step, f"{reason}; restore it as it was, or have it "
                          "produced again", BlockCause.ARTIFACT)

    def artifact_file(self, name: str, item: str | None, filename: str | None = None) -> str:
        """The file name in the attempt folder of generate step ``name`` (``item``):
        ``filename``, else :func:`artifact_name`. A name that is already the accepted
        artifact of another step or item of this outcome is refused (:class:`InvalidInput`),
        so producing this one never overwrites that one."""
        fname = check_name("output", filename) if filename else artifact_name(name, item)
        skey = self._step_key(name, item)
        for other in self.ledger.steps(self.key):
            if other.step_key != skey and other.state == _S.DONE and other.artifact \
                    and Path(other.artifact).name == fname:
                raise InvalidInput(
                    f"output {fname} is already the accepted artifact of "
                    f"{_whose(other.name, other.item)} of {self.key}; give {_whose(name, item)} "
                    "another --output, or none (each item then gets a file of its own)",
                    key=self.key, step=name)
        return fname

    def _produce(self, skey: str, name: str, item: str | None, produce: Callable[[Path], object],
                 out: Path) -> Path:
        """Run the generator after its intent; note the artifact's checksum at once."""
        from .connectors.base import EffectFailed

        try:
            produce(out)
            if not out.is_file():
                raise EffectFailed(f"the generator wrote no file at {out}")
        except BaseException as exc:
            said = _said(exc)
            self.mark_failed(name, f"generator failed: {type(exc).__name__}: {said}", item=item)
            if isinstance(exc, Exception):
                raise StepFailed(f"generate step {name} of {self.key} failed: {said}",
                                 key=self.key, step=name, state=_S.FAILED) from exc
            raise
        # The artifact exists before it is accepted: note its checksum now, so a
        # crash before acceptance lets the next attempt adopt it instead of
        # calling the (expensive, non-deterministic) generator again.
        self._move(skey, _S.RUNNING, name=name, item=item, expect=_FROM_RUNNING, artifact=str(out),
                   checksum=sha256_file(out), reason="artifact produced, not yet accepted")
        self._crash_point(name, "after-execute")
        return out

    def _accept(self, name: str, item: str | None, out: Path,
                validate: Callable[[Path], bool] | None,
                provenance: Mapping[str, FieldValue] | None = None) -> None:
        """Validate the artifact and freeze it (``done``, its checksum the evidence)."""
        try:
            ok = validate(out) if validate else True
        except Exception as exc:  # noqa: BLE001 - a crashing validator rejects
            ok = False
            why = f"{type(exc).__name__}: {_said(exc)}"
        else:
            why = "validation rejected the artifact"
            if ok is None:  # a validate without its return: say so, not "rejected"
                why = ("validate returned None, not True or False: return True to accept "
                       "the artifact, False to reject it")
        if not ok:
            self.mark_failed(name, why, item=item)
            raise StepFailed(f"generate step {name} of {self.key}: {why}", key=self.key,
                             step=name, state=_S.FAILED)
        checksum = sha256_file(out)
        self.record(name, Evidence(checksum, provenance), item=item, outcome_state=_O.GENERATED,
                    artifact=str(out), checksum=checksum)

    def _bring(self, accepted: Path, fname: str) -> None:
        """Copy an artifact accepted by an earlier attempt into this attempt's folder.

        Every attempt folder then holds what its outcome delivers, so the job's
        ``expected_artifacts`` and ``accept`` commands, which run in the attempt
        folder, see it. The accepted file stays the one recorded (and printed).
        """
        if self.read_only or accepted.parent == self.dir:
            return
        copy = self.dir / fname
        if not copy.exists():
            atomic_copy(accepted, copy)

    def _adopt(self, name: str, item: str | None, step: StepRecord,
               validate: Callable[[Path], bool] | None,
               provenance: Mapping[str, FieldValue] | None = None) -> Path | None:
        """Accept the artifact a dead attempt produced but never accepted, if intact."""
        path = Path(step.artifact or "")
        if artifact_problem(path, step.checksum):
            return None
        try:
            if validate is not None and not validate(path):
                return None
        except Exception:  # noqa: BLE001 - a crashing validator rejects; regenerate
            return None
        skey = self._step_key(name, item)
        self._move(skey, _S.DONE, name=name, item=item, expect=[step.state],
                   evidence=Evidence(step.checksum or "", provenance), outcome_state=_O.GENERATED,
                   reason=f"adopted from attempt {step.attempt_id}")
        self._log(skey, "generate", "adopted", artifact=str(path))
        return path

    # --- close-out (retrysafe.closeout) -------------------------------------------

    def closeout_problems(self, attempt_dir: Path | None = None) -> list[str]:
        """Why this outcome is not done yet: open steps, changed artifacts, failed checks."""
        return closeout.closeout_problems(self, attempt_dir)

    def acceptance_problems(self, steps: list[StepRecord],
                            attempt_dir: Path | None = None) -> list[str]:
        """The job's own acceptance: ``expected_artifacts`` exist and ``accept`` commands pass."""
        return closeout.acceptance_problems(self, steps, attempt_dir)

    def close(self, success: bool, reason: str = "") -> OutcomeRecord:
        """Close-out: ``done`` only when every check passes; otherwise what the steps say.
        An attempt closes once: a later call (the ``with`` block's end after an explicit
        close inside it) returns how it closed."""
        if self._closed is None:
            try:
                self._closed = closeout.close(self, success, reason)
            except BaseException:
                # the finish may not have landed (a full disk, a lost server): this process
                # no longer works on the attempt, so its next claim of the outcome takes it
                # over instead of answering busy until the process exits
                if self.attempt is not None:
                    release(self.attempt.id)
                raise
        return self._closed
