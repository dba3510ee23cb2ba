"""Running a command as an attempt's work (``retrysafe run``).

The command gets the attempt's environment and stays in our process group,
so a scheduler that stops the group (a timeout, Ctrl-C) stops all of it; the
signals sent to this process alone (SIGTERM, SIGINT, SIGHUP) are passed on to
the command. The lease is renewed while it runs, and when a renewal is refused
(another attempt took over) the command is stopped before it can act again.
Should this process die alone (``kill -9`` of its pid, the OOM killer), what
it started lives on carrying the attempt's id, and no other run takes the
outcome over while it does (:func:`retrysafe.process.attempt_liveness`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from . import tracing
from .attempt import Run

__all__ = ["run_command"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_command(run: Run, cmd: Sequence[str], *, cwd: str | None = None,
                stdout: TextIO | None = None) -> int:
    """Run ``cmd`` inside ``run`` (in ``cwd``, its standard output to ``stdout``;
    default: ours) and return its exit status (negative: killed by that
    signal). ``run.lost`` is set when the lease was lost meanwhile."""
    if run.job.notify is not None and run.attempt is not None:  # a ping channel's /start
        from .notify import notify_started

        notify_started(run.job, run.key, run.attempt.number)
    with tracing.attempt_span(run) as trace_env:  # TRACEPARENT, when the otel extra traces
        return _supervise(run, subprocess.Popen(list(cmd), env={**os.environ, **run.env(), **trace_env},
                                                cwd=cwd, stdout=stdout))


def _supervise(run: Run, proc: subprocess.Popen[bytes]) -> int:

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous: Mapping[int, object] = {s: signal.signal(s, forward) for s in _FORWARDED}
    # another attempt owns the outcome now: stop our command before it acts again
    run.on_lost = lambda: forward(signal.SIGTERM, None)
    run.start_heartbeat()
    try:
        return proc.wait()
    finally:
        run.stop_heartbeat()
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
