"""Who is running: this process as a lease holder, and whether another one still lives."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .ledger.records import Holder

__all__ = ["holder_gone", "this_holder"]


@functools.cache
def host_id() -> str:
    """The host name plus the machine id, so two hosts named alike are not confused."""
    name = os.uname().nodename
    try:
        machine = Path("/etc/machine-id").read_text().strip()[:12]
    except OSError:
        machine = ""
    return f"{name}#{machine}" if machine else name


@functools.cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_start(pid: int) -> str | None:
    """Boot id plus the process start time in clock ticks, or ``None`` if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X"):
        return "dead"
    return f"{_boot_id()}:{fields[19]}" if len(fields) > 19 else None


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
    if holder.started and _boot_id() and not holder.started.startswith(_boot_id()):
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
    return bool(holder.started and now and now != holder.started)
