"""Running out of disk, a read-only home, an unusable runs/: one clear error, then recovery.

The disk and the read-only home are real: a size-limited tmpfs and a
read-only bind mount, each in a private mount namespace of the run
(``unshare -m``), so nothing leaks into the machine. They need root (or the
privilege to unshare); the file-size limit and runs/-is-a-file cases need
nothing.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
from example_targets import BIN, CONTENT, ContentTargets, example_env

OCCURRENCE = "2026-11-30T0900"
pytestmark = pytest.mark.chaos


def _run_argv(target: str) -> list[str]:
    return [str(BIN / "retrysafe"), "run", "content-pipeline", "-p", f"occurrence={OCCURRENCE}",
            "-p", f"target={target}", "--", str(CONTENT / "pipeline.sh")]


def _key(target: str) -> str:
    return f"content-pipeline:{OCCURRENCE}:{target}"


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not _can_unshare(),
                                  reason="needs 'unshare -m' and mount privileges")


def _in_namespace(setup: str, target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = " ".join(f"'{a}'" for a in _run_argv(target))
    return subprocess.run(["unshare", "-m", "sh", "-c", f"{setup} && exec {argv}"], env=env,
                          cwd=CONTENT, capture_output=True, text=True, timeout=120, check=False)


def _assert_clear_failure(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode not in (0, 75), proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert any(ln.startswith("retrysafe: ") and any(n in ln for n in needles) for ln in lines), \
        proc.stderr


def _assert_recovers(targets: ContentTargets, env: dict[str, str], target: str) -> None:
    """Nothing half-done is left: the next run finishes and every effect is there once."""
    status = subprocess.run([str(BIN / "retrysafe"), "status", _key(target), "--json"], env=env,
                            capture_output=True, text=True, check=False)
    if status.returncode == 0:
        data = json.loads(status.stdout)
        assert all(s["state"] != "running" for s in data["steps"]), data
        assert data["outcome"]["state"] != "done"
    again = subprocess.run(_run_argv(target), env=env, cwd=CONTENT, capture_output=True,
                           text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    counts = targets.counts()
    for system, step in (("cms", "publish"), ("sheet", "sheet-row"), ("chat", "notify")):
        assert counts[system].get(f"{_key(target)}/{step}") == 1, (system, counts[system])
    verify = subprocess.run([str(BIN / "retrysafe"), "verify", _key(target)], env=env,
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout


def _ready_home(targets: ContentTargets, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = targets.home(tmp_path / "home")
    env = example_env(home)
    first = subprocess.run(_run_argv("warm-up"), env=env, cwd=CONTENT, capture_output=True,
                           text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    return home, env


@needs_mounts
def test_disk_full_while_the_attempt_writes_its_folder(content_targets: ContentTargets,
                                                       tmp_path: Path) -> None:
    """runs/ on a full 64 KiB tmpfs: a clear 'no space' error, then the next run succeeds."""
    home, env = _ready_home(content_targets, tmp_path)
    runs = home / "runs"
    setup = (f"mount -t tmpfs -o size=64k tmpfs '{runs}' && "
             f"(dd if=/dev/zero of='{runs}/fill' bs=4k count=64 2>/dev/null || true)")
    proc = _in_namespace(setup, "disk-full", env)
    _assert_clear_failure(proc, "No space left on device", "disk is full", "no space")
    _assert_recovers(content_targets, env, "disk-full")


@needs_mounts
def test_read_only_home(content_targets: ContentTargets, tmp_path: Path) -> None:
    """The home bind-mounted read-only: a clear error, the ledger untouched, then success."""
    home, env = _ready_home(content_targets, tmp_path)
    before = (home / "ledger.sqlite3").read_bytes()
    proc = _in_namespace(f"mount --bind -o ro '{home}' '{home}'", "read-only", env)
    _assert_clear_failure(proc, "not writable", "read-only", "Read-only")
    assert (home / "ledger.sqlite3").read_bytes() == before
    _assert_recovers(content_targets, env, "read-only")


def test_file_size_limit_reached(content_targets: ContentTargets, tmp_path: Path) -> None:
    """No file may grow (RLIMIT_FSIZE = 0): a clear error, then the next run succeeds."""
    _home, env = _ready_home(content_targets, tmp_path)

    def no_growth() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    proc = subprocess.run(_run_argv("fsize"), env=env, cwd=CONTENT, capture_output=True,
                          text=True, timeout=120, check=False, preexec_fn=no_growth)
    _assert_clear_failure(proc, "disk", "File too large", "space", "I/O")
    _assert_recovers(content_targets, env, "fsize")


def test_runs_folder_is_a_file(content_targets: ContentTargets, tmp_path: Path) -> None:
    """runs/ replaced by a file: a clear error naming the home, then success once it is back."""
    home = content_targets.home(tmp_path / "home")
    env = example_env(home)
    (home / "runs").write_text("not a folder")
    proc = subprocess.run(_run_argv("runs-file"), env=env, cwd=CONTENT, capture_output=True,
                          text=True, timeout=120, check=False)
    _assert_clear_failure(proc, str(home))
    os.unlink(home / "runs")
    _assert_recovers(content_targets, env, "runs-file")
