"""Running a command as an attempt's work (``retrysafe run``).

The command gets the attempt's environment and stays in our process group,
so a scheduler that stops the group (a timeout, Ctrl-C) stops all of it; the
signals sent to this process alone (SIGTERM, SIGINT, SIGHUP) are passed on to
the command. The lease is renewed while it runs, and when a renewal is refused
(another attempt took over) the command is stopped before it can act again.
Should this process die alone (``kill -9`` of its pid, the OOM killer), what
it started lives on carrying the attempt's id, and no other run takes the
outcome over while it does (:func:`retrysafe.process.attempt_liveness`).
A stop signal passed on (or a lost lease) stops all of the attempt: what the
command leaves running when it ends (its children, orphaned by the signal)
gets that signal too, then SIGKILL after :data:`STOP_GRACE` seconds, so the
attempt is closed only once nothing of it runs.

A command that ends on its own (any exit status) may leave steps of the attempt
running (``retrysafe step ... &``): their result is still to come, so close-out
waits for them (:func:`_wait_rest`), up to the job's ``lease_seconds``, saying
so on stderr. A step still running then is stopped with the rest of the attempt
(as after a stop signal) and left ``unknown``, its reason saying why; what the
command left running that runs no step (a daemon it started) is waited for
:data:`SETTLE` seconds at most (it may be about to start one), then left alone; so is
a process of the command still starting a program, whose environment cannot be read yet.
An attempt of which anything had to be stopped after its command ended is never
``done`` (:func:`retrysafe.closeout.cut_short`): what was stopped may have had
work left to do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from . import closeout, tracing
from .attempt import Run
from .process import PROCFS, carriers, host_id
from .states import StepState

if TYPE_CHECKING:
    from .ledger import AttemptRecord

__all__ = ["SETTLE", "STOP_GRACE", "CommandNotStarted", "run_command"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE = 2.0
"""Seconds what is left of a stopped attempt gets between the stop signal and SIGKILL."""
SETTLE = 1.0
"""Seconds close-out waits for what the command left running that runs no step (a
daemon, a shell about to start one), counted from the last time a step ran."""
_PAUSE = 0.25
"""At most this many seconds between two looks at what the command left running."""


class CommandNotStarted(Exception):
    """The command could not be executed (a missing interpreter, not a program):
    nothing of it ran."""


def run_command(run: Run, cmd: Sequence[str], *, cwd: str | None = None,
                stdout: TextIO | None = None) -> int:
    """Run ``cmd`` inside ``run`` (in ``cwd``, its standard output to ``stdout``;
    default: ours) and return its exit status (negative: killed by that
    signal). ``run.lost`` is set when the lease was lost meanwhile."""
    if run.job.notify is not None and run.attempt is not None:  # a ping channel's /start
        from .notify import notify_started

        notify_started(run.job, run.key, run.attempt.number)
    with tracing.attempt_span(run) as trace_env:  # TRACEPARENT, when the otel extra traces
        try:
            proc = subprocess.Popen(list(cmd), env={**os.environ, **run.env(), **trace_env},
                                    cwd=cwd, stdout=stdout)
        except OSError as exc:
            raise CommandNotStarted(f"command could not start: {cmd[0]}: "
                                    f"{exc.strerror or exc}") from None
        return _supervise(run, proc)


def _supervise(run: Run, proc: subprocess.Popen[bytes]) -> int:
    stopped: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopped.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous: Mapping[int, object] = {s: signal.signal(s, forward) for s in _FORWARDED}
    # another attempt owns the outcome now: stop our command before it acts again
    run.on_lost = lambda: forward(signal.SIGTERM, None)
    run.start_heartbeat()
    try:
        rc = proc.wait()
        if run.attempt is not None and not stopped:
            _wait_rest(run, run.attempt, stopped)  # the steps it left running
        if stopped and run.attempt is not None and _stop_rest(run.attempt.id, stopped[0]):
            # work of the attempt was cut short: whatever the command's status, not done
            closeout.cut_short(run.attempt.id, f"{signal.Signals(stopped[0]).name} stopped what "
                               "the command left running")
        return rc
    finally:
        run.stop_heartbeat()
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _stop_rest(attempt_id: str, signum: int) -> bool:
    """Send ``signum`` to the processes still carrying the attempt (what the stopped
    command left running), then SIGKILL to those left after :data:`STOP_GRACE`
    seconds; returns once none is left (or, a process that even SIGKILL does not end
    at once, a few seconds later). Whether there were any."""
    sent = signum
    first = carriers(attempt_id)
    _signal_all(first, signum)
    deadline = time.monotonic() + STOP_GRACE
    while pids := carriers(attempt_id):
        if time.monotonic() >= deadline:
            if sent == signal.SIGKILL:
                break
            sent = signal.SIGKILL
            _signal_all(pids, sent)
            deadline = time.monotonic() + STOP_GRACE
        time.sleep(0.05)
    return bool(first)


def _signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _say(line: str) -> None:
    print(f"retrysafe: {line}", file=sys.stderr, flush=True)


def _wait_rest(run: Run, attempt: AttemptRecord, stopped: list[int]) -> None:
    """The command ended on its own: wait until nothing it left running runs a step
    of the attempt (a ``retrysafe`` process, or the runner of one of its running
    steps) before close-out, at most the job's ``lease_seconds`` from the command's
    end; then stop all of the attempt (:func:`_stop_left`). What runs no step gets
    :data:`SETTLE` seconds after the last step ended, then is left running. A stop
    signal (or a lost lease) meanwhile ends the wait: ``stopped`` then says so."""
    limit = float(run.job.lease_seconds)
    began = last_step = time.monotonic()
    told = False
    pause = 0.02
    rest: dict[int, str] = {}
    while not stopped:
        work, rest, starting = _leftovers(run, attempt)
        now = time.monotonic()
        if work:
            last_step = now
            if not told:
                told = True
                _say(f"the command of attempt {attempt.number} of {run.key} ended, but left "
                     f"{_listed(work)} running: waiting for it to end (at most {limit:g} s) "
                     "before close-out")
                run._log(run.key, "leftover", "waiting", processes=sorted(work.values()))
            if now - began >= limit:
                _stop_left(run, attempt, work, limit)
                return
        elif (not rest and not starting) or now - last_step >= SETTLE:
            break
        time.sleep(pause)
        pause = min(pause * 2, _PAUSE)
    if stopped:
        return
    if told:
        took = time.monotonic() - began
        _say(f"what the command of attempt {attempt.number} left running ended "
             f"{took:.1f} s after it; closing out")
        run._log(run.key, "leftover", "ended", seconds=round(took, 3))
    if rest:
        _say(f"not waiting for {_listed(rest)}: it carries attempt {attempt.number} but runs "
             "no step of it (a step it starts now is refused: the attempt is closing)")


def _stop_left(run: Run, attempt: AttemptRecord, work: Mapping[int, str], limit: float) -> None:
    """Steps still running ``limit`` seconds after the command ended: stop all of the
    attempt (SIGTERM, then SIGKILL after :data:`STOP_GRACE` seconds), then leave each
    step that was running and did not record a result ``unknown``, saying why (one
    that recorded ``unknown`` itself when stopped keeps its own reason, after ours).
    A step that recorded its result meanwhile keeps it."""
    _say(f"{_listed(work)} of attempt {attempt.number} of {run.key} still running {limit:g} s "
         "after the command ended: stopping it (SIGTERM, then SIGKILL)")
    run._log(run.key, "leftover", "stopping", processes=sorted(work.values()))
    was_running = {s.step_key for s in run.ledger.steps(run.key)
                   if s.attempt_id == attempt.id and s.state == StepState.RUNNING}
    _stop_rest(attempt.id, signal.SIGTERM)
    closeout.cut_short(attempt.id, f"what the command left running still ran {limit:g} s "
                       "after it ended, and was stopped")
    why = f"it was still running {limit:g} s after the command ended, and was stopped"
    for step in run.ledger.steps(run.key):
        if step.attempt_id != attempt.id:
            continue
        # done or failed: it recorded its result before it ended, and that stands
        if step.state == StepState.RUNNING:
            own = ""  # ended by SIGKILL (or never recorded one)
        elif step.state == StepState.UNKNOWN and step.step_key in was_running:
            own = f" ({step.reason})" if step.reason else ""  # what it recorded when stopped
        else:
            continue
        run.ledger.move_step(attempt, step.step_key, StepState.UNKNOWN, name=step.name,
                             item=step.item, expect=[step.state], reason=why + own,
                             explain=False)


def _leftovers(run: Run, attempt: AttemptRecord
               ) -> tuple[dict[int, str], dict[int, str], list[int]]:
    """The processes carrying the attempt, each named: those that run a step of it
    (a ``retrysafe`` command, or the recorded runner of one of its running steps),
    and the others; and the processes of this process group still starting a program
    (inside ``execve``, which shows neither their command line nor their environment
    yet: the command's ``retrysafe step ... &`` is one for a moment after its shell
    exits, and a look that found nothing then would close the attempt out under it).
    The ledger is read only when some are not ``retrysafe``."""
    found: list[tuple[int, list[str]]] = []
    starting: list[int] = []
    for pid in carriers(attempt.id, starting=starting):
        argv = _argv(pid)
        if argv:  # (else gone meanwhile, or starting a program again)
            found.append((pid, argv))
        else:
            starting.append(pid)
    runners: set[int] = set()
    if any(not _is_retrysafe(argv) for _, argv in found):
        here = host_id()
        runners = {s.runner.pid for s in run.ledger.steps(run.key)
                   if s.attempt_id == attempt.id and s.state == StepState.RUNNING
                   and s.runner is not None and s.runner.host == here
                   and s.runner.pid is not None}
    work: dict[int, str] = {}
    rest: dict[int, str] = {}
    for pid, argv in found:
        named = f"pid {pid} ({_name(argv)})"
        (work if pid in runners or _is_retrysafe(argv) else rest)[pid] = named
    return work, rest, starting


def _argv(pid: int) -> list[str] | None:
    """The words of ``pid``'s command line; ``None`` when it is gone (or a zombie)."""
    if PROCFS:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        words = [w.decode("utf-8", errors="replace") for w in raw.split(b"\0")]
        return words[:-1] if words and not words[-1] else words or None
    import psutil  # type: ignore[import-untyped]  # it ships no type stubs

    try:
        return list(psutil.Process(pid).cmdline()) or None
    except (psutil.Error, OSError):
        return None


def _is_retrysafe(argv: Sequence[str]) -> bool:
    """Is this a ``retrysafe`` command (``retrysafe step``, ``python -m retrysafe ...``)?"""
    return any(os.path.basename(word) in ("retrysafe", "retrysafe.exe") for word in argv[:4])


def _name(argv: Sequence[str]) -> str:
    """A short printable name: ``retrysafe step send``, else the program's name."""
    at = next((i for i, w in enumerate(argv[:4])
               if os.path.basename(w) in ("retrysafe", "retrysafe.exe")), None)
    words = ["retrysafe", *argv[at + 1:at + 3]] if at is not None else [os.path.basename(argv[0])]
    text = " ".join(words)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 60 else text[:57] + "..."


def _listed(named: Mapping[int, str]) -> str:
    shown = [named[pid] for pid in sorted(named)][:5]
    more = len(named) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
