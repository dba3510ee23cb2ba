"""``retrysafe drill``: a bad --timeout, a clean run that times out, a drill id used twice."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from support import Home

CONFIG = """\
[jobs.ping]
key = "ping:{n}"
params = { n = "int" }
"""


def _job(home: Home, tmp_path: Path, *, pause: str = "0", before: str = "0") -> Path:
    """A job of one keyed effect with a lookup; it sleeps ``before`` seconds before the
    step, and the effect ``pause`` seconds after it lands."""
    home.path.mkdir()
    home.config(CONFIG)
    sent = shlex.quote(str(tmp_path / "sent.log"))
    check = f'test -f {sent} && grep -Fx "$RETRYSAFE_STEP_KEY" {sent} || exit 1'
    effect = f'echo "$RETRYSAFE_STEP_KEY" >> {sent}; sleep {pause}; echo ok'
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nset -e\nsleep {before}\n{shlex.quote(sys.executable)} -m retrysafe step send "
                      f"--class message --check {shlex.quote(check)} -- "
                      f"sh -c {shlex.quote(effect)}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_a_timeout_of_zero_or_less_is_refused(home: Home, tmp_path: Path, bad: str) -> None:
    """--timeout 0 (every run stopped at once) or below: one line, exit 2, nothing run."""
    script = _job(home, tmp_path)
    proc = home.run("drill", "ping", "-p", "n=1", "--timeout", bad, "--", str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("retrysafe: ") and "--timeout" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "sent.log").exists()


@pytest.mark.parametrize("where", ["before", "pause"])
def test_a_clean_run_that_times_out_says_so(home: Home, tmp_path: Path, where: str) -> None:
    """The clean run stopped at --timeout, before its first step or inside it: the drill
    says it timed out and to raise --timeout (not "recorded no steps", nor a pass after
    re-runs), runs it once only, exit 2."""
    script = _job(home, tmp_path, **{where: "30"})
    report = tmp_path / "drill.json"
    started = time.monotonic()
    proc = home.run("drill", "ping", "-p", "n=1", "--timeout", "1.5", "--json", str(report),
                    "--", str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "problem: the clean run timed out after 1.5 s" in proc.stdout, proc.stdout
    assert "--timeout" in proc.stdout and "recorded no steps" not in proc.stdout
    data = json.loads(report.read_text())
    assert [len(t["runs"]) for t in data["trials"]] == [1]  # not re-run 5 more times
    assert data["trials"][0]["runs"][0]["timed_out"]
    assert time.monotonic() - started < 30


def test_a_reused_drill_id_is_refused(home: Home, tmp_path: Path) -> None:
    """A second drill with the same --id would find its trials done and test nothing
    ("pass (crash point not reached)"): refused in one line, exit 2, nothing run. After
    --cleanup the targets still hold the first drill's effects: exit 2 again, never a pass."""
    script = _job(home, tmp_path)
    only = ["--only", "send:after-record"]
    first = home.run("drill", "ping", "-p", "n=1", "--id", "t1", *only, "--", str(script))
    assert first.returncode == 0, first.stdout + first.stderr
    sent = (tmp_path / "sent.log").read_text()

    again = home.run("drill", "ping", "-p", "n=1", "--id", "t1", *only, "--", str(script))
    assert again.returncode == 2, again.stdout + again.stderr
    assert again.stdout == "" and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert again.stderr.startswith("retrysafe: drill id t1 was used before")
    assert "give a new --id" in again.stderr
    assert (tmp_path / "sent.log").read_text() == sent  # nothing ran

    # the same id for another outcome of the job is a drill of its own
    other = home.run("drill", "ping", "-p", "n=2", "--id", "t1", *only, "--", str(script))
    assert other.returncode == 0, other.stdout + other.stderr

    assert home.run("drill", "ping", "--cleanup").returncode == 0
    cleaned = home.run("drill", "ping", "-p", "n=1", "--id", "t1", *only, "--", str(script))
    assert cleaned.returncode == 2, cleaned.stdout + cleaned.stderr
    assert "problem: ping:1~t1-2: the effect of step send is in the target before the trial " \
           "ran" in cleaned.stdout and "give a new --id" in cleaned.stdout
    assert "crash point not reached" not in cleaned.stdout

    fresh = home.run("drill", "ping", "-p", "n=1", "--id", "t2", *only, "--", str(script))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "crash point not reached" not in fresh.stdout
