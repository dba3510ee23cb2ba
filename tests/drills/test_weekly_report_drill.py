"""Drilling the weekly ops report example (seed 000) against real local mail servers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from example_targets import EXAMPLES, example_env, retrysafe

EXAMPLE = EXAMPLES / "weekly-ops-report"
PASSWORD = "pw-7d1e-never-printed"  # the local test servers' password (tests/connectors/email)


@pytest.fixture
def mail_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example's own mail servers (aiosmtpd + Dovecot), started by its mail.py."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    if shutil.which("dovecot", path=search) is None or shutil.which("openssl") is None:
        pytest.skip("needs dovecot (apt-get install dovecot-imapd) and openssl")
    import tempfile

    # not pytest's private tmp dir: Dovecot's mail processes may run as another user
    root = Path(tempfile.mkdtemp(prefix="retrysafe-example-mail-"))
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / "mail.py"), "serve", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (root / "servers.json").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the example's mail servers did not start")
            time.sleep(0.05)
        yield root
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have died on its own
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _inbox_copies(root: Path, step_key: str) -> int:
    out = subprocess.run([sys.executable, str(EXAMPLE / "mail.py"), "count", str(root), step_key],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def test_weekly_report_seed_scenarios_send_exactly_once(mail_root: Path, tmp_path: Path) -> None:
    """--points seed: each scenario ends done, with one email in the recipient's INBOX."""
    home = tmp_path / "home"
    home.mkdir()
    config = subprocess.run([sys.executable, str(EXAMPLE / "mail.py"), "config", str(mail_root)],
                            capture_output=True, text=True, check=True).stdout
    (home / "retrysafe.toml").write_text(config)
    assert PASSWORD not in config
    env = example_env(home, {"OPS_MAIL_PASSWORD": PASSWORD})
    report_file = tmp_path / "drill.json"
    proc = retrysafe("drill", "weekly-ops-report", "-p", "week=2026-W32", "--points", "seed",
                     "--json", str(report_file), "--", str(EXAMPLE / "send-report.sh"),
                     env=env, cwd=EXAMPLE, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr
    report = json.loads(report_file.read_text())
    assert report["ok"]
    assert {t["point"] for t in report["trials"]} >= {"clean", "before-intent", "after-record",
                                                     "failed", "cut"}
    for trial in report["trials"]:
        key = trial["outcome_key"]
        assert _inbox_copies(mail_root, f"{key}/send") == 1, key
        status = json.loads(retrysafe("status", key, "--json", env=env).stdout)
        send = next(s for s in status["steps"] if s["name"] == "send")
        assert send["evidence"].startswith("<") and send["evidence"].endswith(">")
