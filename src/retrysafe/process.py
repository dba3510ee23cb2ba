"""Who is running: this process as a lease holder, and whether another one still lives.

A holder is recorded with its host, pid and start time (``started``: the boot
it ran in plus when it started in that boot), so a recycled pid or a reboot is
not mistaken for the holder. On Linux both come from the kernel's own counters
in ``/proc`` (the boot id, the start time in clock ticks): exact, unaffected by
the wall clock, and the form every earlier version wrote, so those records
still compare. Elsewhere (macOS, the BSDs) they come from psutil: the boot time
and the process creation time, which those kernels store once and never
recompute. psutil's creation time on Linux is derived from the *current* boot
time, which moves when the clock is stepped, so it is not used there.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from .ledger.records import AttemptRecord, Holder

__all__ = ["attempt_liveness", "carriers", "collect_if_held", "group_alive", "held", "hold",
           "holder_gone", "release", "this_holder"]

#: read ``/proc`` (Linux); otherwise ask psutil
PROCFS = sys.platform.startswith("linux") and os.path.isdir("/proc/self")

#: the attempts a live Run of this process works on; a Run dropped without closing
#: (a library caller that swallowed an error) falls out by itself
_HELD: weakref.WeakValueDictionary[str, object] = weakref.WeakValueDictionary()


def hold(attempt_id: str, run: object) -> None:
    """``run`` of this process works on ``attempt_id`` (for :func:`attempt_liveness`)."""
    _HELD[attempt_id] = run


_COLLECTED: dict[str, float] = {}
"""when :func:`collect_if_held` last collected for an attempt (monotonic seconds)"""
COLLECT_EVERY = 1.0
"""Seconds between two collections for the same held attempt: threads retrying an
outcome this process really holds pay one collection a second, not one a try."""


def release(attempt_id: str) -> None:
    """This process is done with ``attempt_id``."""
    _HELD.pop(attempt_id, None)
    _COLLECTED.pop(attempt_id, None)


def collect_if_held(attempt_id: str) -> None:
    """A Run of this process is recorded as working on ``attempt_id``: run the cycle
    collector (at most once in :data:`COLLECT_EVERY` per attempt), so a Run that is
    garbage no longer counts (:func:`held`). The engine calls it before a claim that
    will meet the attempt, outside the claim's transaction (on SQLite the write lock)."""
    if attempt_id not in _HELD:
        return
    now = time.monotonic()
    if now - _COLLECTED.get(attempt_id, -COLLECT_EVERY) < COLLECT_EVERY:
        return
    gc.collect()
    if len(_COLLECTED) >= 256:  # attempts whose Runs were dropped are never released
        _COLLECTED.clear()
    _COLLECTED[attempt_id] = now


def held(attempt_id: str) -> bool:
    """Does a live Run of this process still work on ``attempt_id``?

    A Run dropped without closing often still sits in a reference cycle (an
    error's traceback keeps the frame that held it, and the frame keeps the
    error): unreachable, yet alive until the cycle collector gets to it, which
    for objects in its oldest generation can take indefinitely long in a busy
    worker. Before a Run counts as held, a collection sets such garbage free
    (:func:`collect_if_held`: this costs only a claim that meets its own
    process's attempt, and at most one collection a second for that attempt).
    """
    collect_if_held(attempt_id)
    return attempt_id in _HELD


@functools.cache
def host_id() -> str:
    """The host name plus the machine id, so two hosts named alike are not confused."""
    name = os.uname().nodename
    try:
        machine = Path("/etc/machine-id").read_text().strip()[:12]
    except OSError:
        machine = ""
    return f"{name}#{machine}" if machine else name


def _psutil() -> Any:
    """psutil, imported on first use (Linux never needs it for liveness)."""
    import psutil  # type: ignore[import-untyped]  # it ships no type stubs

    return psutil


@functools.cache
def _boot_id() -> str:
    """What names this boot of the host: Linux's boot id (its first 12 hex digits,
    :func:`_short_boot`), else ``boot-`` and the boot time in whole seconds; ``""``
    when neither can be read."""
    if PROCFS:
        try:
            return _short_boot(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        except OSError:
            return ""
    try:
        psutil = _psutil()

        return f"boot-{round(psutil.boot_time())}"
    except Exception:  # noqa: BLE001 - no boot time: reboots are told by the pid check alone
        return ""


def _short_boot(boot: str) -> str:
    """A Linux boot id (a random uuid) as its first 12 hex digits: 48 random bits
    tell one boot of a host from another as well (a holder must match its pid and
    start time too), in 24 bytes less of every attempt and step row. Any other
    form is kept as it is."""
    return boot.replace("-", "")[:12] if len(boot) == 36 and boot.count("-") == 4 else boot


def _same_form(started: str) -> str:
    """A recorded start time in today's form: earlier versions recorded the whole
    boot id, and a holder recorded so is the same process."""
    boot, sep, when = started.rpartition(":")
    return f"{_short_boot(boot)}{sep}{when}" if sep else started


def _proc_start(pid: int) -> str | None:
    """Boot id plus the process start time, ``"dead"`` for a zombie, or ``None``
    if unreadable."""
    if not PROCFS:
        return _psutil_start(pid)
    fields = _stat_fields(pid)
    if fields is None:
        return None
    if fields and fields[0] in (b"Z", b"X"):
        return "dead"
    return f"{_boot_id()}:{fields[19].decode()}" if len(fields) > 19 else None


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...);
    ``None`` when it cannot be read (gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    return stat[stat.rfind(b")") + 2:].split()


def _group_of(pid: int | str) -> int | None:
    """The process group of a live process (``None``: gone, or a zombie)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 3 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[2])


def _psutil_start(pid: int) -> str | None:
    """:func:`_proc_start` through psutil: the creation time to the microsecond."""
    psutil = _psutil()

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status, created = proc.status(), proc.create_time()
    except psutil.NoSuchProcess:
        return None
    except (psutil.Error, OSError):
        return None
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return "dead"
    return f"{_boot_id()}:{created:.6f}"


_SELF: dict[int, Holder] = {}


def this_holder(pid: int | None = None) -> Holder:
    if pid is None:
        # our own start time never changes; a forked child has another pid
        own = os.getpid()
        if own not in _SELF:
            _SELF[own] = Holder(host=host_id(), pid=own, started=_proc_start(own))
        return _SELF[own]
    return Holder(host=host_id(), pid=pid, started=_proc_start(pid))


def holder_gone(holder: Holder) -> bool:
    """True only when we *know* the holder is dead: same host and its process is gone.

    A holder on another host, or one without a pid, is never judged here: its
    lease ends by expiry, by the ledger's clock.
    """
    if holder.host != host_id() or holder.pid is None:
        return False
    started = _same_form(holder.started) if holder.started else None
    if started and _boot_id() and not started.startswith(f"{_boot_id()}:"):
        return True  # the host rebooted since
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    now = _proc_start(holder.pid)
    if now == "dead":
        return True
    return bool(started and now and now != started)


def carriers(attempt_id: str, *, starting: list[int] | None = None) -> list[int]:
    """Processes on this host that carry the attempt in their environment: the
    command ``retrysafe run`` started, the steps inside it, and their children,
    orphans included (their parent may be gone). Stopped processes count.

    ``starting`` (Linux): gets the processes of this process group whose environment
    is empty, as it reads while a process is inside ``execve`` (kernel threads, also
    empty, belong to no group of ours): whether they carry the attempt shows a moment
    later."""
    own = os.getpid()
    if not PROCFS:
        return _psutil_carriers(attempt_id, own)
    needle = f"RETRYSAFE_ATTEMPT_ID={attempt_id}".encode()
    group = os.getpgrp()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue  # gone meanwhile, or another user's: not ours to judge
        if needle in env.split(b"\0"):
            found.append(int(entry))
        elif not env and starting is not None and _group_of(entry) == group:
            starting.append(int(entry))
    return sorted(found)


def _psutil_carriers(attempt_id: str, own: int) -> list[int]:
    """:func:`carriers` through psutil (the environment of our user's processes)."""
    psutil = _psutil()

    found: list[int] = []
    for proc in psutil.process_iter():
        if proc.pid == own:
            continue
        try:
            if proc.environ().get("RETRYSAFE_ATTEMPT_ID") == attempt_id:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or another user's: not ours to judge
    return sorted(found)


def _describe(pid: int) -> str:
    if PROCFS:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            name = "?"
    else:
        psutil = _psutil()

        try:
            name = psutil.Process(pid).name()
        except (psutil.Error, OSError):
            name = "?"
    return f"pid {pid} ({name})"


def group_alive(pgid: int) -> bool:
    """Does a process of group ``pgid`` still run? Zombies waiting for their
    reaper do not count."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not PROCFS:
        return _psutil_group_alive(pgid)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    return any(entry.isdigit() and _group_of(entry) == pgid for entry in entries)


def _psutil_group_alive(pgid: int) -> bool:
    psutil = _psutil()

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in (psutil.STATUS_ZOMBIE,
                                                                       psutil.STATUS_DEAD):
                return True
        except (psutil.Error, OSError):
            continue
    return False


def attempt_liveness(attempt: AttemptRecord, runners: list[Holder]) -> tuple[bool | None, str]:
    """Does anything of ``attempt`` still run? ``(True, what)``: on this host, its
    holder, a step's runner or any process carrying the attempt (an orphaned
    command or step) lives, stopped ones included: never take it over.
    ``(False, why)``: on this host and nothing of it lives: take it over now.
    ``(None, "")``: another host, or a holder without a process (an agent's
    lease): only the lease, by the ledger's clock, can tell.
    """
    holder = attempt.holder
    if holder.host != host_id():
        return None, ""
    # this very process, no longer working on it (it is claiming again): neither it as
    # the holder nor as the runner of a step it left running counts as alive
    abandoned = holder.pid == os.getpid() and not held(attempt.id)
    alive = [h.pid for h in (holder, *runners) if h.pid is not None and h.host == holder.host
             and not (abandoned and h.pid == os.getpid()) and not holder_gone(h)]
    if not alive:  # the holder is gone: does something it started live on (orphans)?
        alive = carriers(attempt.id)
    if alive:
        # (the holder is often also the runner of its own steps: each process once)
        return True, "still running on this host: " + ", ".join(
            _describe(p) for p in dict.fromkeys(alive))
    if holder.pid is None:
        return None, ""
    return False, "holder process is gone"
