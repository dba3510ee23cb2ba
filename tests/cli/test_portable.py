"""Portable liveness and start-up: what runs on macOS runs here with ``/proc`` set aside.

The psutil paths of :mod:`retrysafe.process` are exercised by real runs under a
launcher that makes Python report ``darwin`` and refuses ``fcntl`` (the modules
that pick their platform code on import, psutil and urllib.request, are
imported first, for this machine). The Linux path keeps the start-time form
earlier versions recorded, which must still compare.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import Home

import retrysafe
from retrysafe.ledger import Holder
from retrysafe.process import PROCFS, holder_gone, host_id, this_holder

SRC = Path(retrysafe.__file__).parent
#: modules missing on macOS or the BSDs (or on every platform but Linux)
LINUX_ONLY = {"fcntl", "termios", "pwd", "grp", "resource", "posix", "spwd", "crypt", "pty", "tty"}

LAUNCHER = '''\
import sys
import sysconfig
import urllib.request  # noqa: F401 - would look for macOS's _scproxy
import psutil  # noqa: F401 - for this machine, before Python claims to be macOS
sysconfig.get_config_vars()  # read for this machine too
sys.platform = "darwin"
sys.modules["fcntl"] = None
sys.argv[0] = "retrysafe"
from retrysafe._entry import main
main()
'''


@pytest.fixture
def as_macos(tmp_path: Path) -> list[str]:
    path = tmp_path / "as_macos.py"
    path.write_text(LAUNCHER)
    return [sys.executable, str(path)]


def test_no_module_imports_a_posix_only_module_at_its_top() -> None:
    """Every ``import fcntl`` (and the like) in the package sits inside the function
    that needs it, so ``import retrysafe`` and the CLI start where it is missing."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(SRC)}: {n}" for n in names
                          if n.split(".")[0] in LINUX_ONLY]
    assert offenders == []


def test_every_module_and_command_loads_as_on_macos(as_macos: list[str], tmp_path: Path) -> None:
    """With ``fcntl`` refused and ``sys.platform`` darwin, every module of the package
    imports and every command's help prints."""
    script = tmp_path / "import_all.py"
    script.write_text(textwrap.dedent('''\
        import importlib, pkgutil, sys, sysconfig, urllib.request
        import psutil
        sysconfig.get_config_vars()
        sys.platform = "darwin"
        sys.modules["fcntl"] = None
        import retrysafe
        from retrysafe.process import PROCFS
        assert not PROCFS
        failed = []
        for mod in pkgutil.walk_packages(retrysafe.__path__, "retrysafe."):
            if mod.name.endswith("__main__"):
                continue  # runs the command line
            try:
                importlib.import_module(mod.name)
            except ModuleNotFoundError as exc:
                if exc.name in {"fcntl"} or (exc.name or "").startswith("retrysafe"):
                    failed.append(f"{mod.name}: {exc}")
        print("\\n".join(failed))
        '''))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
    helped = subprocess.run([*as_macos, "--help"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert helped.returncode == 0 and "Usage" in helped.stdout, helped.stderr
    for cmd in ("run", "step", "resume", "status", "doctor"):
        one = subprocess.run([*as_macos, cmd, "--help"], capture_output=True, text=True,
                             timeout=60, check=False)
        assert one.returncode == 0, one.stderr


def test_liveness_without_proc_sees_the_holder_its_orphan_and_then_nothing(
        home: Home, as_macos: list[str], tmp_path: Path) -> None:
    """As on macOS: while a run's holder lives, a second run is busy (75); after the
    holder is killed with SIGKILL its command lives on, still busy; once that is gone
    too, the next run takes the outcome over at once and finishes it."""
    home.path.mkdir(parents=True)
    home.config("""
        [jobs.slow]
        key = "slow:{n}"
        params = { n = "int" }
        lease_seconds = 3600
        """)
    pidfile, ready = tmp_path / "cmd.pid", tmp_path / "ready"
    cmd = ("echo $$ > " + str(pidfile) + "; touch " + str(ready)
           + "; i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")
    first = subprocess.Popen([*as_macos, "run", "slow", "-p", "n=1", "--", "sh", "-c", cmd],
                             env=home.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(ready, first)
        busy = subprocess.run([*as_macos, "run", "slow", "-p", "n=1", "--", "true"], env=home.env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert busy.returncode == 75, busy.stdout + busy.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        orphan = subprocess.run([*as_macos, "run", "slow", "-p", "n=1", "--", "true"],
                                env=home.env, capture_output=True, text=True, timeout=60,
                                check=False)
        assert orphan.returncode == 75, orphan.stdout + orphan.stderr
        assert "still running on this host" in orphan.stdout
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        if pidfile.exists():
            _kill(int(pidfile.read_text()))
    took = subprocess.run([*as_macos, "run", "slow", "-p", "n=1", "--json", "--", "true"],
                          env=home.env, capture_output=True, text=True, timeout=60, check=False)
    assert took.returncode == 0, took.stdout + took.stderr
    assert (json.loads(took.stdout)["state"], json.loads(took.stdout)["attempt"]) == ("done", 2)
    status = json.loads(home.run("status", "slow:1", "--json").stdout)
    started = status["attempts"][0]["holder"]["started"]
    assert started.startswith("boot-") and ":" in started


def test_steps_run_and_skip_as_on_macos(home: Home, as_macos: list[str]) -> None:
    """A run with a step, re-run: the step is done once, its evidence answered again."""
    home.path.mkdir(parents=True)
    home.config("""
        [jobs.rep]
        key = "rep:{n}"
        params = { n = "int" }
        """)
    rs = " ".join(as_macos)
    script = f"{rs} step send --class message --timeout 30 -- echo msg-1"
    for _ in range(2):
        proc = subprocess.run([*as_macos, "run", "rep", "-p", "n=1", "--", "sh", "-c", script],
                              env=home.env, capture_output=True, text=True, timeout=60,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = json.loads(home.run("status", "rep:1", "--json").stdout)["steps"]
    assert [(s["state"], s["evidence"], s["tries"]) for s in steps] == [("done", "msg-1", 1)]


@pytest.mark.skipif(not PROCFS, reason="the Linux form of a start time")
def test_linux_start_times_keep_the_form_earlier_versions_recorded(tmp_path: Path) -> None:
    """``BOOT_ID:TICKS`` from ``/proc``, read here independently: a holder recorded
    in that form by an earlier version (the whole boot id) is alive while its process
    is, as is one in today's form (its first 12 hex digits), and either is gone when
    the pid's start time differs (a recycled pid) or the boot id does (a reboot)."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        ticks = stat[stat.rfind(")") + 2:].split()[19]
        legacy = f"{boot}:{ticks}"
        assert this_holder(child.pid).started == f"{boot.replace('-', '')[:12]}:{ticks}"
        assert not holder_gone(Holder(host_id(), child.pid, legacy))
        assert not holder_gone(this_holder(child.pid))
        assert holder_gone(Holder(host_id(), child.pid, f"{boot}:{int(ticks) + 1}"))
        assert holder_gone(Holder(host_id(), child.pid, f"another-boot:{ticks}"))
        other = f"{boot[:9]}{'0' if boot[9] != '0' else '1'}{boot[10:]}"  # another boot's id
        assert holder_gone(Holder(host_id(), child.pid, f"{other}:{ticks}"))
    finally:
        child.kill()
        child.wait()
    assert holder_gone(Holder(host_id(), child.pid, legacy))


def test_time_zones_work_without_a_system_zone_database(home: Home, tmp_path: Path) -> None:
    """With the zone search path pointed at an empty folder, a job scheduled in
    Europe/Berlin still resolves its occurrences (from the tzdata package)."""
    home.path.mkdir(parents=True)
    home.config("""
        [jobs.weekly]
        key = "weekly:{occurrence}"
        schedule = "0 7 * * 1"
        tz = "Europe/Berlin"
        params = { occurrence = "occurrence" }
        """)
    empty = tmp_path / "no-zones"
    empty.mkdir()
    env = {"PYTHONTZPATH": str(empty)}
    check = subprocess.run([sys.executable, "-c", "import zoneinfo; print(zoneinfo.TZPATH)"],
                           env={**home.env, **env}, capture_output=True, text=True, check=True)
    assert check.stdout.strip() == f"('{empty}',)"
    proc = home.run("missed", "weekly", "--since", "2026-11-01", "--until", "2026-11-10",
                    "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 2


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    import time

    while not path.exists():
        assert proc.poll() is None, "the run ended before its command started"
        time.sleep(0.05)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
