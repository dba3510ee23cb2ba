"""``retrysafe drill``: an --only pattern that matches no trial is refused (it passed,
having tested nothing); a trial whose runs were stopped at --timeout says so."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from support import Home

CONFIG = """\
[jobs.ping]
key = "ping:{n}"
params = { n = "int" }
"""


def _job(home: Home, tmp_path: Path, *, before: str = "") -> Path:
    """A job of one keyed effect with a lookup, appended to sent.log; ``before`` is
    shell run before the step."""
    home.path.mkdir()
    home.config(CONFIG)
    sent = shlex.quote(str(tmp_path / "sent.log"))
    check = f'test -f {sent} && grep -Fx "$RETRYSAFE_STEP_KEY" {sent} || exit 1'
    effect = f'echo "$RETRYSAFE_STEP_KEY" >> {sent}; echo ok'
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nset -e\n{before}\n{shlex.quote(sys.executable)} -m retrysafe "
                      f"step send --class message --check {shlex.quote(check)} -- "
                      f"sh -c {shlex.quote(effect)}\n")
    script.chmod(0o755)
    return script


def _sent(tmp_path: Path) -> list[str]:
    sent = tmp_path / "sent.log"
    return sent.read_text().splitlines() if sent.exists() else []


@pytest.mark.parametrize(("points", "pattern"), [
    ("all", "send"),                  # no POINT at all
    ("all", "send:befor-intent"),     # a POINT that does not exist
    ("all", "send:after-begin"),      # a run point, not a step's
    ("seed", "send:after-intent"),    # a point of --points all only
    ("all", ""),
])
def test_a_pattern_no_point_fits_is_refused_before_any_run(home: Home, tmp_path: Path,
                                                             points: str, pattern: str) -> None:
    """Whatever the steps, no trial can match: one line naming the points, exit 2,
    nothing run."""
    script = _job(home, tmp_path)
    proc = home.run("drill", "ping", "-p", "n=1", "--points", points, "--only", pattern,
                    "--", str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"retrysafe: --only {pattern!r} matches no trial")
    assert "after-record" in proc.stderr
    assert _sent(tmp_path) == []


def test_a_pattern_no_step_fits_is_refused_after_the_first_clean_run(home: Home,
                                                                     tmp_path: Path) -> None:
    """A step name only the clean run can tell: refused right after it, with the trials
    there are, exit 2; no other run (not even the second clean one); a pattern that
    does match beside it does not hide it."""
    script = _job(home, tmp_path)
    proc = home.run("drill", "ping", "-p", "n=1", "--id", "t1", "--only", "sned:*",
                    "--only", "send:after-record", "--", str(script))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("retrysafe: --only 'sned:*' matches no trial of ping"), proc.stderr
    assert "send:before-intent" in last and "run:before-closeout" in last
    assert "'send:after-record'" not in last
    assert _sent(tmp_path) == ["ping:1~t1-0/send"]
    assert proc.stdout == ""


def test_a_matching_pattern_still_runs_its_trials(home: Home, tmp_path: Path) -> None:
    script = _job(home, tmp_path)
    proc = home.run("drill", "ping", "-p", "n=1", "--points", "seed", "--only", "*:cut",
                    "--", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 trials, 3 passed" in proc.stdout


def test_a_trial_whose_runs_time_out_says_so_in_its_row(home: Home, tmp_path: Path) -> None:
    """The crash trial's runs all hang (the clean runs do not): its row says they timed
    out after --timeout seconds, not only how the outcome ended."""
    script = _job(home, tmp_path, before='case "$RETRYSAFE_DRILL_TRIAL" in *-2) sleep 30;; esac')
    report = tmp_path / "drill.json"
    proc = home.run("drill", "ping", "-p", "n=1", "--id", "t1", "--only", "send:after-record",
                    "--max-reruns", "1", "--timeout", "2", "--json", str(report),
                    "--", str(script))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("2 "))
    assert "FAIL: runs 1, 2 of 2 timed out after 2 s" in row, proc.stdout
    trial = json.loads(report.read_text())["trials"][2]
    assert [r["timed_out"] for r in trial["runs"]] == [True, True]
    assert trial["failures"][0] == "runs 1, 2 of 2 timed out after 2 s"
