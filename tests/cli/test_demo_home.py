"""``retrysafe demo`` leaves no mess, and with --keep its last line works when pasted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support import Home


def test_demo_removes_its_temporary_home(home: Home, tmp_path: Path) -> None:
    """Without --keep the demo's home is made under TMPDIR and gone when it ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = home.run("demo", env={"TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one outcome, as intended" in proc.stdout
    assert list(tmp.iterdir()) == []
    assert "to inspect" not in proc.stdout and "--keep" in proc.stdout


def test_kept_demo_prints_a_command_that_works_pasted_anywhere(home: Home, tmp_path: Path) -> None:
    """With --keep DIR (a path with a space), the printed line, run by a shell in another
    folder with no retrysafe on PATH, shows the outcome's history; the console script names
    itself by its full path."""
    kept = tmp_path / "demo home"
    exe = str(Path(sys.executable).parent / "retrysafe")
    proc = subprocess.run([exe, "demo", "--keep", str(kept)], env=home.env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]  # the last line, whole, is the command
    line = re.fullmatch(r"(RETRYSAFE_HOME=.*)", last)
    assert line is not None, proc.stdout
    assert exe in line.group(1)
    env = {k: v for k, v in home.env.items() if k != "RETRYSAFE_HOME"}
    env["PATH"] = "/usr/bin:/bin"
    shown = subprocess.run(["sh", "-c", line.group(1)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "attempt-1" in shown.stdout
    assert (kept / "ledger.sqlite3").is_file()
