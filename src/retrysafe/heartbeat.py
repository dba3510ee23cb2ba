"""One heartbeat thread per process renews the lease of every attempt it runs.

A thread per attempt cost more than the rest of a short outcome: starting it
and joining it at close-out took longer than the outcome's own ledger writes.
Here a single daemon thread, started with the first attempt and kept for the
life of the process, wakes when the earliest lease is due, renews it, and
sleeps again. Adding and removing an attempt are dictionary operations.

``remove`` waits while that attempt's renewal is in flight (up to
``STOP_WAIT`` seconds, as joining its own thread did), so once a run has
stopped its heartbeat no renewal of it starts or is still running. A fork
(``multiprocessing``) leaves the thread behind: the child starts its own when
it first needs one.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

__all__ = ["Beat", "add", "remove"]

STOP_WAIT = 5.0


class Beat:
    """One attempt's heartbeat: ``renew`` every ``every`` seconds while it returns
    true; when it returns false the beat ends (the lease was lost)."""

    __slots__ = ("due", "every", "renew")

    def __init__(self, every: float, renew: Callable[[], bool]) -> None:
        self.every, self.renew = every, renew
        self.due = time.monotonic() + every


class _Keeper:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.beats: set[Beat] = set()
        self.busy: Beat | None = None
        self.thread: threading.Thread | None = None
        #: when the thread wakes next on its own (-inf: it is renewing and will look
        #: again before it sleeps), so an add due later need not wake it
        self.wakes = -math.inf

    def add(self, beat: Beat) -> None:
        with self.cond:
            self.beats.add(beat)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="retrysafe-heartbeat",
                                               daemon=True)
                self.thread.start()
            if beat.due < self.wakes:
                # waking a sleeping thread costs a context switch per attempt: only
                # when this beat is due before the thread would look again
                self.cond.notify()

    def remove(self, beat: Beat) -> None:
        deadline = time.monotonic() + STOP_WAIT
        with self.cond:
            self.beats.discard(beat)
            while self.busy is beat and (left := deadline - time.monotonic()) > 0:
                self.cond.wait(left)

    def _loop(self) -> None:
        cond = self.cond
        with cond:
            while True:
                if not self.beats:
                    self.wakes = math.inf
                    cond.wait()
                    self.wakes = -math.inf
                    continue
                beat = min(self.beats, key=lambda b: b.due)
                wait = beat.due - time.monotonic()
                if wait > 0:
                    self.wakes = beat.due
                    cond.wait(wait)
                    self.wakes = -math.inf
                    continue
                beat.due = time.monotonic() + beat.every
                self.busy = beat
                cond.release()
                try:
                    keep = _renew(beat)
                finally:
                    cond.acquire()
                    self.busy = None
                    cond.notify_all()
                if not keep:
                    self.beats.discard(beat)


def _renew(beat: Beat) -> bool:
    try:
        return beat.renew()
    except Exception:  # noqa: BLE001 - a ledger hiccup: try again at the next beat
        return True


_keeper: _Keeper | None = None
_keeper_lock = threading.Lock()


def _current() -> _Keeper:
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.pid != os.getpid():  # first use, or a forked child
            _keeper = _Keeper()
        return _keeper


def _forked() -> None:
    global _keeper, _keeper_lock
    _keeper, _keeper_lock = None, threading.Lock()  # the parent's may be held by its threads


os.register_at_fork(after_in_child=_forked)


def add(beat: Beat) -> None:
    """Renew ``beat`` from now on, every ``beat.every`` seconds."""
    _current().add(beat)


def remove(beat: Beat) -> None:
    """Stop renewing ``beat``; returns once no renewal of it is running."""
    _current().remove(beat)
