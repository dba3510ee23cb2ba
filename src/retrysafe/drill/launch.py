"""Starting ``retrysafe run`` for a trial, and stopping it cleanly on Ctrl-C.

Each run gets a process group of its own, so a drill can end the whole tree
(``retrysafe run``, the user's command, its ``retrysafe step`` children)
without touching anything else, and a Ctrl-C at the terminal reaches the
drill alone: the drill then asks the run to stop (SIGINT, which it forwards to
the command), so the attempt closes out as ``unknown``/``failed`` instead of
being left ``running``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["RunResult", "launch_run", "stop_group"]

_GRACE_SECONDS = 15.0


@dataclass(frozen=True)
class RunResult:
    """How one ``retrysafe run`` ended: exit code (negative: signal) and its last line."""

    returncode: int
    last_line: str
    timed_out: bool = False
    interrupted: bool = False

    def to_json(self) -> dict[str, object]:
        return {"returncode": self.returncode, "last_line": self.last_line,
                "timed_out": self.timed_out, "interrupted": self.interrupted}


def stop_group(proc: subprocess.Popen[str], grace: float = _GRACE_SECONDS) -> None:
    """SIGINT the run's group and wait; SIGTERM, then SIGKILL if it will not end."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the run is gone; its command may linger a moment in the same group
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        if sig == signal.SIGKILL:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def launch_run(job: str, params: Mapping[str, str], cmd: Sequence[str], env: Mapping[str, str],
               *, timeout: float) -> RunResult:
    """Run ``retrysafe run JOB -p ... -- CMD`` to its end; Ctrl-C stops it cleanly."""
    argv = [sys.executable, "-m", "retrysafe", "run", job]
    for name, value in params.items():
        argv += ["-p", f"{name}={value}"]
    argv += ["--", *cmd]
    proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out = proc.stdout.read() if proc.stdout else ""
        return RunResult(proc.returncode, _last(out), timed_out=True)
    except KeyboardInterrupt:
        stop_group(proc)
        raise
    return RunResult(proc.returncode, _last(out))


def _last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
