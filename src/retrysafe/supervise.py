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
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from . import tracing
from .attempt import Run
from .process import carriers

__all__ = ["STOP_GRACE", "CommandNotStarted", "run_command"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE = 2.0
"""Seconds what is left of a stopped attempt gets between the stop signal and SIGKILL."""


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
        if stopped and run.attempt is not None:
            _stop_rest(run.attempt.id, stopped[0])
        return rc
    finally:
        run.stop_heartbeat()
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _stop_rest(attempt_id: str, signum: int) -> None:
    """Send ``signum`` to the processes still carrying the attempt (what the stopped
    command left running), then SIGKILL to those left after :data:`STOP_GRACE`
    seconds; returns once none is left (or, a process that even SIGKILL does not end
    at once, a few seconds later)."""
    sent = signum
    _signal_all(carriers(attempt_id), signum)
    deadline = time.monotonic() + STOP_GRACE
    while pids := carriers(attempt_id):
        if time.monotonic() >= deadline:
            if sent == signal.SIGKILL:
                return
            sent = signal.SIGKILL
            _signal_all(pids, sent)
            deadline = time.monotonic() + STOP_GRACE
        time.sleep(0.05)


def _signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
