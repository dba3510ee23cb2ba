"""Every condition retrysafe reports, one class each.

The CLI turns any :class:`RetrysafeError` into one line on stderr and the
exit code the class carries; Python callers catch the class they care about
and read the fields (key, step, state) instead of parsing the message.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import ClassVar

from .states import BlockCause

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_BUSY",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "ApprovalRequired",
    "AttemptNotActive",
    "AttemptsExhausted",
    "Busy",
    "ConfigError",
    "ConnectorError",
    "HomeNotWritable",
    "InvalidInput",
    "InvalidParameter",
    "LedgerAuthError",
    "LedgerError",
    "LedgerUnavailable",
    "NoStoredCommand",
    "NotInAttempt",
    "OutcomeBlocked",
    "PayloadMismatch",
    "RetrysafeError",
    "SchemaTooNew",
    "StaleAttempt",
    "StepBlocked",
    "StepFailed",
    "StepUnknown",
    "StorageFull",
    "UnknownJob",
    "UnknownOutcome",
    "UnknownStep",
    "UnsafePath",
    "command_line",
    "unblock_command",
]

EXIT_DONE = 0
"""The outcome is done, or the step was skipped because it already was."""
EXIT_FAILED = 1
"""The work failed; the state was recorded."""
EXIT_USAGE = 2
"""Usage, configuration or input error; nothing was changed."""
EXIT_BLOCKED = 3
"""Blocked: a human must act (resolve, approve or retry)."""
EXIT_BUSY = 75
"""Busy or stale lease (EX_TEMPFAIL): another attempt holds the outcome; try later."""


class RetrysafeError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code: ClassVar[int] = EXIT_FAILED

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        step: str | None = None,
        state: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.step = step
        self.state = state

    def __str__(self) -> str:
        return self.message


# --- input and configuration (exit 2, nothing changed) -----------------------


class InvalidInput(RetrysafeError):
    """A name, value or option given by the caller is not acceptable."""

    exit_code = EXIT_USAGE


def not_text(exc: UnicodeEncodeError) -> InvalidInput:
    """A value the ledger cannot store: it holds bytes that are not UTF-8 (Python keeps
    them as lone surrogates, as in a command-line argument or a file name)."""
    near = exc.object[max(0, exc.start - 16):exc.end + 16] if isinstance(exc.object, str) else ""
    return InvalidInput(f"a value is not UTF-8 text (near {near!r}); nothing was recorded: "
                        "give it as text (decode the bytes, or encode them, e.g. as hex)")


class ConfigError(InvalidInput):
    """The config file is missing, malformed or contradicts itself."""


class UnknownJob(InvalidInput):
    """The job is not declared in the config."""


class InvalidParameter(InvalidInput):
    """A job parameter is missing, extra, or not valid for its type."""


class UnknownOutcome(InvalidInput):
    """No outcome with this key is in the ledger."""


class UnknownStep(InvalidInput):
    """The outcome has no step with this name."""


class NotInAttempt(InvalidInput):
    """A step command was called outside any attempt."""


class NoStoredCommand(InvalidInput):
    """No attempt of the outcome recorded the command it ran (an agent's
    ``begin``, or a version that did not record it): nothing to re-run."""


class HomeNotWritable(InvalidInput):
    """The home folder cannot be created or written."""


class UnsafePath(InvalidInput):
    """A folder or file below the home is a symbolic link (or not a folder where
    one belongs): refused, never written through."""


class PayloadMismatch(InvalidInput):
    """A step key is reused with a payload different from the recorded one."""


# --- the ledger ---------------------------------------------------------------


class LedgerError(RetrysafeError):
    """The ledger could not be used."""

    exit_code = EXIT_USAGE


class SchemaTooNew(LedgerError):
    """The ledger was written by a newer retrysafe; refusing to touch it."""


class LedgerAuthError(LedgerError):
    """The ledger refused the credentials."""


class LedgerUnavailable(LedgerError):
    """The ledger server cannot be reached now; try again later."""

    exit_code = EXIT_BUSY


# --- leases and fencing (exit 75) ------------------------------------------------


class Busy(RetrysafeError):
    """Another live attempt holds the outcome's lease."""

    exit_code = EXIT_BUSY

    @classmethod
    def held(cls, key: str, state: str, number: int | None, pid: int | None = None,
             host: str | None = None, lease_expires: float | None = None,
             running: str = "") -> Busy:
        """``key`` is held by attempt ``number`` (``pid`` on ``host`` until
        ``lease_expires``); ``running``: what of it still runs on this host."""
        from .timefmt import when

        who = f"attempt {number}" if number is not None else "another attempt"
        if number is not None and host is not None:
            where = f"pid {pid} on {host}" if pid is not None else f"an agent on {host}"
            who += f" ({where}, lease until {when(lease_expires)})"
        if running:
            return cls(f"{key} is held by {who}, {running}; try later, or if it is stuck: "
                       f"{command_line('break-lease', key)}", key=key, state=state)
        return cls(f"{key} is held by {who}; try later", key=key, state=state)


class StaleAttempt(RetrysafeError):
    """This attempt's fencing token is no longer current; its writes are refused."""

    exit_code = EXIT_BUSY

    @classmethod
    def unrecorded(cls, exc: StaleAttempt, key: str, step: str, evidence: str) -> StaleAttempt:
        """``exc``, for evidence an agent could not record: what to run instead. ``step``
        names the step as a command does: its name, or its full step key for per-item
        work (which holds the key already)."""
        named = f"step {step}" if "/" in step else f"step {step} of {key}"
        return cls(f"{exc.message}; evidence {evidence} was NOT recorded: if {named} is still "
                   f"unknown, run: {unblock_command(BlockCause.AGENT, key, step, evidence=evidence)}",
                   key=key, step=step)


class AttemptNotActive(StaleAttempt):
    """The attempt has already finished."""


# --- outcomes and steps -----------------------------------------------------------


_GIVEN: tuple[str, ...] = ()
"""The ``--home``/``--config``/``--ledger`` this process was given on its command line
(:func:`name_the_home`), which every command it prints names again."""
NAMED: ContextVar[tuple[str, ...] | None] = ContextVar("retrysafe_named", default=None)
"""The same options for the code running now, when it is not the process's: inside a
``with retrysafe.start(..., home=...)`` block, the home the Python caller named
(``engine._Started``), so an error's ``unblock`` pasted in a shell acts on that home."""


def name_the_home(options: tuple[str, ...]) -> None:
    """Make every printed command (:func:`command_line`) start with ``options``: the
    home, config and ledger this command was given as options, so a printed line pasted
    in another shell or folder acts on the same home. (Environment variables are not
    repeated: the shell that pastes the line has them.)"""
    global _GIVEN
    _GIVEN = options


def command_line(verb: str, *args: str, options: str = "", kept: bool = False) -> str:
    """``retrysafe VERB [OPTIONS] ARGS``, each argument quoted for the shell, so a
    printed command pastes as it is; an argument that starts with ``-`` comes
    after ``--``, so it is never read as an option. ``kept``: the line is kept in the
    ledger (part of a reason), which homes in other folders read: it names no home."""
    from shlex import quote

    words = " ".join(quote(a) for a in args)
    named = () if kept else NAMED.get()
    verb = " ".join([*(quote(o) for o in (_GIVEN if named is None else named)), verb])
    if any(a.startswith("-") for a in args):
        return f"retrysafe {verb} {options + ' ' if options else ''}-- {words}"
    return " ".join(w for w in ("retrysafe", verb, words, options) if w)


def unblock_command(cause: BlockCause | str, key: str, step: str | None = None, *,
                    evidence: str | None = None, kept: bool = False) -> str:
    """The command a human runs to move what ``cause`` blocked, quoted for the shell.

    ``step`` names the step (its full step key for per-item work); without
    one, the outcome itself is blocked. ``evidence``: what an agent found, so
    the command records exactly that.
    """
    from shlex import quote

    if step is None or cause == BlockCause.EXHAUSTED:
        return command_line("retry", key, kept=kept)
    if cause == BlockCause.APPROVAL:
        return command_line("approve", key, step, kept=kept)
    if evidence is not None:
        return command_line("resolve", key, step, options=f"--found {quote(evidence)}", kept=kept)
    if cause in (BlockCause.NOT_RETRIED, BlockCause.ARTIFACT):
        return command_line("resolve", key, step, options="--absent", kept=kept)
    # the placeholder <EVIDENCE> cannot run: pasted as printed, the shell refuses the
    # line (a redirection, then '>' before '|') before it starts anything, so no step
    # is ever recorded found with the word EVIDENCE as what was found
    found = command_line("resolve", key, step, options="--found <EVIDENCE>", kept=kept)
    if found.endswith("--found <EVIDENCE>"):
        return found + " | --absent"
    return f"{found} | {command_line('resolve', key, step, options='--absent', kept=kept)}"


class OutcomeBlocked(RetrysafeError):
    """The outcome is blocked; ``unblock`` is the command that would move it,
    ``cause`` why (a :class:`~retrysafe.states.BlockCause`)."""

    exit_code = EXIT_BLOCKED

    def __init__(self, key: str, reason: str, *, cause: BlockCause | str,
                 unblock: str, step: str | None = None, message: str | None = None) -> None:
        super().__init__(message or f"{key} is blocked: {reason}", key=key, step=step,
                         state="blocked")
        self.reason = reason
        self.cause = BlockCause(cause)
        self.unblock = unblock


class AttemptsExhausted(OutcomeBlocked):
    """The job's attempt limit was reached."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, reason, cause=BlockCause.EXHAUSTED,
                         unblock=unblock_command(BlockCause.EXHAUSTED, key))


class StepBlocked(OutcomeBlocked):
    """A step cannot proceed without a human (ambiguity, missing lookup).

    Build one with :meth:`of`, which picks :class:`ApprovalRequired` for a
    missing approval. ``target`` is how the unblock command names the step
    (its full step key for per-item work).
    """

    def __init__(self, key: str, step: str, reason: str,
                 cause: BlockCause | str = BlockCause.AMBIGUOUS, *, target: str | None = None,
                 evidence: str | None = None, unblock: str | None = None) -> None:
        # ``unblock``: what a human does when no command can (a done outcome's lost artifact)
        unblock = unblock or unblock_command(cause, key, target or step, evidence=evidence)
        super().__init__(key, reason, cause=cause, unblock=unblock, step=step,
                         message=f"step {step} of {key} is blocked: {reason}; to unblock: {unblock}")

    @classmethod
    def of(cls, key: str, step: str, reason: str, cause: BlockCause | str, *,
           target: str | None = None) -> StepBlocked:
        kind = ApprovalRequired if cause == BlockCause.APPROVAL else StepBlocked
        return kind(key, step, reason, cause, target=target)


class ApprovalRequired(StepBlocked):
    """The step's effect class needs an approval record before it may execute."""


class StepFailed(RetrysafeError):
    """The step failed definitely: nothing happened."""


class StepUnknown(RetrysafeError):
    """The step's effect may or may not have happened; a lookup must decide."""


class StorageFull(RetrysafeError):
    """The disk (or quota) is full: the work stopped; run again once there is space."""

    exit_code = EXIT_FAILED


class ConnectorError(RetrysafeError):
    """A connector could not talk to its system (raised to the engine, never past it)."""
