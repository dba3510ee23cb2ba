"""A command retrysafe prints for a person to paste names the home it was given with
``--home`` (``--config``, ``--ledger``): pasted in another shell or folder, without the
option, it would act on another home's ledger."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from retrysafe.errors import command_line, name_the_home
from retrysafe.location import name_given

CONFIG = '[jobs.pay]\nkey = "pay:{n}"\nparams = { n = "int" }\n'
BIN = str(Path(sys.executable).parent)


def _env() -> dict[str, str]:
    """A shell's environment with no retrysafe variable: the home comes from options."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")}
    env["PATH"] = BIN + os.pathsep + "/usr/bin:/bin"
    return env


def _rs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retrysafe", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    for home in ("h", "my home"):
        (tmp_path / home).mkdir()
        (tmp_path / home / "retrysafe.toml").write_text(CONFIG)
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


@pytest.mark.parametrize(("home", "folder"), [("h", "h"), ("./h/", "h"), ("my home", "my home")])
def test_the_unblock_line_of_a_run_given_home_pastes_anywhere(
        work: Path, home: str, folder: str) -> None:
    """``retrysafe --home h run ...`` blocks for an approval; the line it prints names
    the home (absolute), and pasted in a shell in another folder with no variable it
    approves the step of that home, so the next run is done."""
    step = f"{sys.executable} -m retrysafe step charge --class payment -- true"
    blocked = _rs(work, "--home", home, "run", "pay", "-p", "n=1", "--", "sh", "-c", step)
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    line = blocked.stdout.strip().splitlines()[-1].removeprefix("to unblock: ")
    expect = f"retrysafe --home {shlex.quote(str(work / folder))} approve pay:1 charge"
    assert line == expect
    status = _rs(work, "--home", home, "status", "pay:1")
    assert expect in status.stdout
    pasted = subprocess.run(["sh", "-c", line], cwd=work / "elsewhere", env=_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    again = _rs(work, "--home", home, "run", "pay", "-p", "n=1", "--", "sh", "-c", step)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (work / "elsewhere" / "runs").exists()


def test_a_home_from_the_environment_is_not_repeated(work: Path) -> None:
    """The shell a line is pasted in has the variable: the line stays short."""
    step = f"{sys.executable} -m retrysafe step charge --class payment -- true"
    env = {**_env(), "RETRYSAFE_HOME": str(work / "h")}
    blocked = subprocess.run([sys.executable, "-m", "retrysafe", "run", "pay", "-p", "n=1", "--",
                              "sh", "-c", step], cwd=work, env=env, capture_output=True,
                             text=True, timeout=60, check=False)
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    assert blocked.stdout.strip().splitlines()[-1] == "to unblock: retrysafe approve pay:1 charge"


def test_a_ledger_url_with_a_password_is_never_printed(tmp_path: Path) -> None:
    """``--ledger`` names a SQLite file or a server URL without a password; one with a
    password is left out of printed lines (they end up in logs)."""
    try:
        name_given(None, None, "postgresql://ops:s3cret@127.0.0.1:5432/ledger")
        assert "s3cret" not in command_line("status", "pay:1")
        assert command_line("status", "pay:1") == "retrysafe status pay:1"
        name_given(str(tmp_path), None, "postgresql://ops@127.0.0.1:5432/ledger")
        assert command_line("status", "pay:1") == (
            f"retrysafe --home {tmp_path} --ledger postgresql://ops@127.0.0.1:5432/ledger"
            " status pay:1")
    finally:
        name_the_home(())


def test_a_line_kept_in_the_ledger_names_no_home(work: Path) -> None:
    """The reason of an outcome out of attempts is kept in the ledger, which homes in
    other folders share: its commands name no home, even after ``--home``."""
    pay = work / "h" / "retrysafe.toml"
    pay.write_text(CONFIG.replace('params', 'max_attempts = 1\nparams'))
    failed = _rs(work, "--home", "h", "run", "pay", "-p", "n=1", "--", "false")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    again = _rs(work, "--home", "h", "run", "pay", "-p", "n=1", "--", "false")
    assert again.returncode == 3, again.stdout + again.stderr
    status = _rs(work, "--home", "h", "status", "pay:1", "--json")
    reason = json.loads(status.stdout)["outcome"]["reason"]
    assert "retrysafe status pay:1" in reason and "retrysafe retry pay:1" in reason, reason
    assert "--home" not in reason


def test_the_line_a_step_inside_the_run_prints_names_the_home_too(work: Path) -> None:
    """The ``retrysafe step`` inside CMD has its home from the run's environment, not
    from options, so its own line ("to unblock: retrysafe approve ...") named no home:
    pasted in the user's shell, which has no such variable, it approved nothing there.
    It names the run's home (not its config or ledger, which are that home's own)."""
    step = f"{sys.executable} -m retrysafe step charge --class payment -- true"
    blocked = _rs(work, "--home", "h", "run", "pay", "-p", "n=1", "--", "sh", "-c", step)
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    said = [ln for ln in blocked.stderr.splitlines() if "to unblock: " in ln]
    assert len(said) == 1, blocked.stderr
    line = said[0].partition("to unblock: ")[2]
    assert line == f"retrysafe --home {shlex.quote(str(work / 'h'))} approve pay:1 charge"
    pasted = subprocess.run(["sh", "-c", line], cwd=work / "elsewhere", env=_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    again = _rs(work, "--home", "h", "run", "pay", "-p", "n=1", "--", "sh", "-c", step)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_python_apis_unblock_names_the_home_start_was_given(work: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``retrysafe.start(..., home=...)``: the ``unblock`` of its error named no home, so
    the line a program printed for a person acted, pasted, on another home. It names the
    one the caller gave (a home from the variable is not repeated), and only inside the
    block: a line printed after it is as before."""
    import retrysafe
    from retrysafe.engine import close_all
    from retrysafe.errors import ApprovalRequired

    try:
        with pytest.raises(ApprovalRequired) as caught, \
                retrysafe.start("pay", {"n": "1"}, home=work / "h", heartbeat=False) as run:
            run.effect("charge", "payment", execute=lambda _k: "ch_1")
        assert command_line("status", "pay:1") == "retrysafe status pay:1"  # after the block
        line = caught.value.unblock
        assert line == f"retrysafe --home {shlex.quote(str(work / 'h'))} approve pay:1 charge"
        pasted = subprocess.run(["sh", "-c", line], cwd=work / "elsewhere", env=_env(),
                                capture_output=True, text=True, timeout=60, check=False)
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        monkeypatch.setenv("RETRYSAFE_HOME", str(work / "my home"))
        with pytest.raises(ApprovalRequired) as from_env, \
                retrysafe.start("pay", {"n": "1"}, heartbeat=False) as run:
            run.effect("charge", "payment", execute=lambda _k: "ch_1")
        assert from_env.value.unblock == "retrysafe approve pay:1 charge"
    finally:
        close_all()
