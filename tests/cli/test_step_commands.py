"""`retrysafe step` and `generate` commands as real processes: the bytes they
print, commands that cannot start, and commands that run too long."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import Home

NO_EVIDENCE = "(no evidence: the command printed nothing)"


def setup_job(home: Home, extra: str = "") -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(f"""
        [jobs.job]
        key = "job:{{n}}"
        params = {{ n = "slug" }}
        lease_seconds = 600
        {extra}
    """)


def begin(home: Home, n: str = "a") -> tuple[str, Path]:
    """An attempt at ``job:N`` (held by its lease), its id and folder."""
    proc = home.run("begin", "job", "-p", f"n={n}", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    return info["attempt_id"], Path(info["folder"])


def run_bytes(home: Home, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """The CLI with its output as bytes: a command's stdout may be any bytes."""
    return subprocess.run(home.cmd(*args), env=home.env, capture_output=True, timeout=timeout,
                          check=False)


def step_record(home: Home, key: str, name: str) -> dict[str, Any]:
    status = json.loads(home.run("status", key, "--json").stdout)
    return next(s for s in status["steps"] if s["name"] == name)


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X")


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- item: output bytes never decide --------------------------------------------------


def test_non_utf8_output_of_a_successful_step_is_done(home: Home, tmp_path: Path) -> None:
    """Exit 0 with stdout that is not UTF-8: done (evidence with replacement
    characters), the bytes kept whole in the attempt folder, never re-executed."""
    setup_job(home)
    attempt, folder = begin(home)
    marker = tmp_path / "ran"
    cmd = ["sh", "-c", f"echo x >> {marker}; printf 'id-7\\n\\377\\376'"]
    first = run_bytes(home, "step", "w", "--class", "local_write", "--attempt", attempt, "--", *cmd)
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode() == "\ufffd\ufffd\n"
    record = step_record(home, "job:a", "w")
    assert record["state"] == "done" and record["evidence"] == "\ufffd\ufffd"
    assert (folder / "step-w.log").read_bytes() == b"id-7\n\xff\xfe"
    again = run_bytes(home, "step", "w", "--class", "local_write", "--attempt", attempt, "--", *cmd)
    assert again.returncode == 0 and again.stdout.decode() == "\ufffd\ufffd\n"
    assert marker.read_text() == "x\n"


def test_empty_output_gives_a_visible_no_evidence(home: Home) -> None:
    """A command that prints nothing (or only blank lines) is done with a visible
    "no evidence" text, never an empty string that looks like a value."""
    setup_job(home)
    attempt, _ = begin(home)
    for name, cmd in (("quiet", ["true"]), ("blank", ["printf", "\\n  \\n"])):
        proc = home.run("step", name, "--class", "local_write", "--attempt", attempt, "--", *cmd)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == NO_EVIDENCE + "\n"
        assert step_record(home, "job:a", name)["evidence"] == NO_EVIDENCE


def test_huge_output_caps_the_evidence_and_keeps_the_output(home: Home) -> None:
    """Megabytes of output: the evidence is the last line cut to 4 KiB, the whole
    output is in the attempt folder."""
    setup_job(home)
    attempt, folder = begin(home)
    script = ("import sys; out = sys.stdout.buffer; out.write(b'noise\\n' * 1_000_000); "
              "out.write(b'post-' + b'9' * 10_000 + b'\\n\\n')")
    proc = run_bytes(home, "step", "big", "--item", "i1", "--class", "local_write",
                     "--attempt", attempt, "--", "python3", "-c", script)
    assert proc.returncode == 0, proc.stderr[-500:]
    evidence = step_record(home, "job:a", "big")["evidence"]
    assert len(evidence.encode()) <= 4096
    assert evidence.startswith("post-999") and evidence.endswith("[...]")
    assert (folder / "step-big+i1.log").stat().st_size == 6_000_000 + 5 + 10_000 + 2


def test_check_output_that_is_not_utf8_is_found_evidence(home: Home, tmp_path: Path) -> None:
    """A --check that finds the effect and prints bytes that are not UTF-8 settles
    the step as found; the effect does not run again."""
    setup_job(home)
    attempt, folder = begin(home)
    lost = home.run("step", "send", "--class", "message", "--attempt", attempt, "--", "sh", "-c", "exit 9")
    assert lost.returncode == 1 and step_record(home, "job:a", "send")["state"] == "unknown"
    marker = tmp_path / "ran"
    found = run_bytes(home, "step", "send", "--class", "message", "--attempt", attempt,
                      "--check", "printf 'noise\\n\\377msg-1\\n'", "--", "sh", "-c", f"touch {marker}")
    assert found.returncode == 0, found.stderr
    record = step_record(home, "job:a", "send")
    assert record["state"] == "done" and record["evidence"] == "\ufffdmsg-1"
    assert not marker.exists()
    assert (folder / "step-send.check.out").read_bytes() == b"noise\n\xffmsg-1\n"


def test_generate_with_stdout_that_is_not_utf8(home: Home) -> None:
    """A generator printing bytes that are not UTF-8 still produces its artifact."""
    setup_job(home)
    attempt, folder = begin(home)
    proc = run_bytes(home, "generate", "draft", "--attempt", attempt, "--", "sh", "-c",
                     "printf '\\377\\376'; echo text > \"$RETRYSAFE_OUTPUT\"")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == str(folder / "draft")
    assert step_record(home, "job:a", "draft")["state"] == "done"


# --- item: a command that cannot start records nothing ------------------------------------


def _not_executable(tmp_path: Path) -> str:
    path = tmp_path / "script.sh"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    return str(path)


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: "/no/such/cmd", "command not found: /no/such/cmd"),
    (lambda tmp: "no-such-command-anywhere", "command not found: no-such-command-anywhere"),
    (_not_executable, "exists but is not executable"),
])
@pytest.mark.parametrize("command", ["step", "generate"])
def test_a_command_that_cannot_start_records_nothing(home: Home, tmp_path: Path, make: Any,
                                                     message: str, command: str) -> None:
    """Missing or without its run bit: exit 2, one line that says which, and the
    home (ledger included) exactly as it was: a delete step is not left failed."""
    setup_job(home)
    attempt, _ = begin(home)
    before = home.snapshot()
    args = ["step", "rm", "--class", "delete"] if command == "step" else ["generate", "rm"]
    proc = home.run(*args, "--attempt", attempt, "--", make(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert home.snapshot() == before


# --- item: timeouts ----------------------------------------------------------------------


HANG = "echo $$ > {pids}; sleep 60 & echo $! >> {pids}; wait"


def test_step_past_its_timeout_is_killed_and_unknown(home: Home, tmp_path: Path) -> None:
    """A step command running past --timeout: its whole process group is killed
    (the command and its child), the step is unknown, and the next try's lookup
    decides (found: done, nothing executed again)."""
    setup_job(home)
    attempt, _ = begin(home)
    pids = tmp_path / "pids"
    started = time.monotonic()
    proc = home.run("step", "send", "--class", "message", "--timeout", "1", "--attempt", attempt,
                    "--", "sh", "-c", HANG.format(pids=pids))
    assert time.monotonic() - started < 30
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "timed out after 1 s" in proc.stderr
    assert all(wait_gone(int(p)) for p in pids.read_text().split()), pids.read_text()
    record = step_record(home, "job:a", "send")
    assert record["state"] == "unknown" and "timed out" in record["reason"]
    marker = tmp_path / "ran"
    again = home.run("step", "send", "--class", "message", "--check", "echo msg-1",
                     "--attempt", attempt, "--", "touch", str(marker))
    assert again.returncode == 0 and again.stdout == "msg-1\n"
    assert not marker.exists()


def test_a_check_that_hangs_blocks_with_timed_out(home: Home, tmp_path: Path) -> None:
    """The job's check_timeout: a hanging --check is ambiguous, the step blocked
    (exit 3) with a reason that says it timed out, and the check's group is gone."""
    setup_job(home, "check_timeout = 1")
    attempt, _ = begin(home)
    lost = home.run("step", "send", "--class", "message", "--attempt", attempt, "--", "false")
    assert lost.returncode == 1
    pids = tmp_path / "pids"
    proc = home.run("step", "send", "--class", "message", "--check", HANG.format(pids=pids),
                    "--attempt", attempt, "--", "true")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "timed out after 1 s" in proc.stderr
    record = step_record(home, "job:a", "send")
    assert record["state"] == "blocked" and "timed out" in record["reason"]
    assert all(wait_gone(int(p)) for p in pids.read_text().split())


def test_the_jobs_step_timeout_applies_without_the_flag(home: Home, tmp_path: Path) -> None:
    """[jobs.NAME] step_timeout bounds a step command that gives no --timeout."""
    setup_job(home, "step_timeout = 1")
    attempt, _ = begin(home)
    pids = tmp_path / "pids"
    proc = home.run("step", "send", "--class", "message", "--attempt", attempt,
                    "--", "sh", "-c", HANG.format(pids=pids))
    assert proc.returncode == 1 and "timed out after 1 s" in proc.stderr, proc.stderr
    assert all(wait_gone(int(p)) for p in pids.read_text().split())


def test_generate_past_its_timeout_fails(home: Home, tmp_path: Path) -> None:
    """A generator running past --timeout is killed with its group; the step fails."""
    setup_job(home)
    attempt, _ = begin(home)
    pids = tmp_path / "pids"
    proc = home.run("generate", "draft", "--timeout", "1", "--attempt", attempt,
                    "--", "sh", "-c", HANG.format(pids=pids))
    assert proc.returncode == 1 and "timed out after 1 s" in proc.stderr, proc.stderr
    assert step_record(home, "job:a", "draft")["state"] == "failed"
    assert all(wait_gone(int(p)) for p in pids.read_text().split())


@pytest.mark.parametrize("value", ["0", "-1", '"5"', "true"])
def test_a_bad_timeout_in_the_config_is_refused(home: Home, value: str) -> None:
    """step_timeout and check_timeout must be positive numbers of seconds."""
    setup_job(home, f"check_timeout = {value}")
    proc = home.run("jobs")
    assert proc.returncode == 2 and "'check_timeout' must be a positive number" in proc.stderr


def test_a_bad_timeout_flag_is_refused(home: Home) -> None:
    """--timeout 0, nan (which every comparison lets through), inf or past 1e9 seconds is
    refused before anything runs, in one line."""
    setup_job(home)
    attempt, _ = begin(home)
    before = home.snapshot()
    for bad in ("0", "nan", "NaN", "inf", "2e9"):
        proc = home.run("step", "s", "--class", "read", "--timeout", bad, "--attempt", attempt,
                        "--", "true")
        assert proc.returncode == 2 and home.snapshot() == before, bad
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_timeouts_keep_the_pass_through_of_signals(home: Home, tmp_path: Path) -> None:
    """SIGTERM to a step whose command has a group of its own (a timeout) reaches
    that group: nothing of it survives, the step is unknown."""
    setup_job(home)
    attempt, _ = begin(home)
    pids = tmp_path / "pids"
    proc = home.popen("step", "send", "--class", "message", "--timeout", "60", "--attempt", attempt,
                      "--", "sh", "-c", HANG.format(pids=pids))
    deadline = time.monotonic() + 30
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, 15)
    proc.communicate(timeout=30)
    assert all(wait_gone(int(p)) for p in pids.read_text().split())
    assert step_record(home, "job:a", "send")["state"] == "unknown"


def test_a_step_its_check_finds_before_it_ever_runs_keeps_its_class_and_check(
        home: Home, tmp_path: Path) -> None:
    """A ``message`` step is looked up before its first execution; found there, it is
    recorded done without running, and still with its class and its ``--check``, so
    ``status`` names the class and ``verify`` runs that check."""
    setup_job(home)
    ran = tmp_path / "ran"
    proc = home.run("run", "job", "-p", "n=found", "--", *home.cmd(), "step", "send",
                    "--class", "message", "--check", "echo msg-42", "--",
                    "sh", "-c", f"touch {ran}; echo executed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not ran.exists()
    step = step_record(home, "job:found", "send")
    assert (step["state"], step["evidence"]) == ("done", "msg-42")
    assert (step["effect_class"], step["check"]) == ("message", "echo msg-42")
    verify = home.run("verify", "job:found")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "check found the effect" in verify.stdout
