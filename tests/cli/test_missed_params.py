"""``retrysafe missed`` for a job with parameters besides its occurrence, and odd input:
every line it prints to paste works when pasted, and what it cannot do is refused up front."""

from __future__ import annotations

import json
import re
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import Home

CONFIG = """
    [jobs.report]
    key = "report:{region}:{at}"
    schedule = "0 7 * * 1"
    tz = "Europe/Warsaw"
    params = { at = "occurrence", region = "str" }

    [jobs.adhoc]
    key = "adhoc:{week}"
    params = { week = "isoweek" }
    """
RANGE = ("--since", "2026-11-01", "--until", "2026-11-17")
ODD = "Zürich 'HQ' $HOME; `id` \"x\" ✓"


@pytest.fixture
def report(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    return home


def _pasted(home: Home, line: str, cmd: list[str]) -> list[str]:
    """A printed ``retrysafe ...`` line as the shell splits it, ``CMD`` replaced by ``cmd``."""
    words = shlex.split(line)
    assert words[0] == "retrysafe"
    if words[-1] == "CMD":
        words = [*words[:-1], *cmd]
    return home.cmd(*words[1:])


def _paste(home: Home, line: str, cmd: list[str]) -> tuple[int, str, str]:
    import subprocess

    done = subprocess.run(_pasted(home, line, cmd), env=home.env, capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def _record(log: Path) -> list[str]:
    return ["sh", "-c", f'echo "$RETRYSAFE_OUTCOME_KEY" >> {shlex.quote(str(log))}']


def _missing_keys(home: Home, *args: str) -> list[str]:
    listed = home.run("missed", "report", *RANGE, *args, "--json")
    assert listed.returncode == 0, listed.stderr
    return [r["key"] for r in json.loads(listed.stdout)]


def test_occurrence_given_with_p_is_refused_up_front(report: Home, tmp_path: Path) -> None:
    """-p at=... would be ignored (and doubled in the backfill line, and make every --run
    occurrence fail): one line, exit 2, nothing run; the line it suggests runs that one."""
    assert report.run("missed", "report", *RANGE, "-p", "region=eu").returncode == 0
    before = report.snapshot()
    log = tmp_path / "ran.log"
    for extra in ([], ["--json"], ["--run", "--", *_record(log)]):
        done = report.run("missed", "report", *RANGE, "-p", "region=eu",
                          "-p", "at=2026-11-09T0700", *extra)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and "-p at:" in done.stderr
    assert not log.exists()
    assert report.snapshot() == before
    hint = re.search(r"alone: (retrysafe run .* -- CMD)\)$", done.stderr.strip())
    assert hint is not None, done.stderr
    code, _, err = _paste(report, hint.group(1), _record(log))
    assert code == 0, err
    assert log.read_text().splitlines() == ["report:eu:2026-11-09T0700"]


def test_backfill_line_pastes_with_an_odd_value(report: Home, tmp_path: Path) -> None:
    """Quotes, $, backticks, spaces and non-ASCII text in a parameter: the printed line,
    split as the shell splits it, backfills exactly the first missing key."""
    keys = _missing_keys(report, "-p", f"region={ODD}")
    assert keys[0] == f"report:{ODD}:2026-11-02T0700"
    done = report.run("missed", "report", *RANGE, "-p", f"region={ODD}")
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("backfill: ") and last.count("-p ") == 2
    log = tmp_path / "ran.log"
    code, _, err = _paste(report, last.removeprefix("backfill: "), _record(log))
    assert code == 0, err
    assert log.read_text().splitlines() == [keys[0]]
    assert _missing_keys(report, "-p", f"region={ODD}") == keys[1:]


def test_run_passes_the_other_parameters_through(report: Home, tmp_path: Path) -> None:
    """--run runs each occurrence with the job's other parameters and its own key."""
    log = tmp_path / "ran.log"
    keys = _missing_keys(report, "-p", f"region={ODD}")
    done = report.run("missed", "report", *RANGE, "-p", f"region={ODD}", "--run", "--",
                      *_record(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == keys
    assert _missing_keys(report, "-p", f"region={ODD}") == []


def test_run_uses_the_config_and_ledger_it_was_given(home: Home, tmp_path: Path) -> None:
    """retrysafe --config FILE --ledger URL missed --run: the runs use the same config and
    ledger (they found no job, or wrote to another ledger)."""
    home.path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "elsewhere.toml"
    config.write_text(CONFIG)
    where = ["--config", str(config), "--ledger", f"sqlite:///{tmp_path / 'other.sqlite3'}"]
    log = tmp_path / "ran.log"
    done = home.run(*where, "missed", "report", *RANGE, "-p", "region=eu", "--run", "--",
                    *_record(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(log.read_text().splitlines()) == 3
    listed = home.run(*where, "missed", "report", *RANGE, "-p", "region=eu", "--json")
    assert json.loads(listed.stdout) == []
    assert not (home.path / "ledger.sqlite3").exists()


def test_blocked_line_pastes_for_a_key_with_spaces(report: Home) -> None:
    """The 'retrysafe status KEY' of a blocked occurrence is quoted for the shell."""
    blocked = report.run("run", "report", "-p", "region=a b", "-p", "at=2026-11-02T0700", "--",
                         "sh", "-c", f"{sys.executable} -m retrysafe step pay --class payment -- true")
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    done = report.run("missed", "report", "--since", "2026-11-01", "--until", "2026-11-03",
                      "-p", "region=a b", "--run", "--", "true")
    assert done.returncode == 3, done.stdout + done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("blocked: "))
    code, out, err = _paste(report, line.split("waits for a person: ", 1)[1], [])
    assert code == 0, err
    assert "report:a b:2026-11-02T0700" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "2026-11-20", "--until", "2026-11-10", "-p", "region=eu"],
         "is after --until"),
        (["--since", "2099-01-01", "-p", "region=eu"], "is in the future"),
        (["--since", "1969-12-01", "--until", "1969-12-31", "-p", "region=eu"], "before 1970"),
        (["--since", "0001-01-01", "-p", "region=eu"], "out of range"),
        (["--since", "999999999d", "-p", "region=eu"], "out of range"),
        # a range without an occurrence (Tuesday to Wednesday) checks the parameters too
        (["--since", "2026-11-03", "--until", "2026-11-04", "-p", "region=\udcff"],
         "parameter 'region': the value is not UTF-8 text"),
        (["--since", "2026-11-03", "--until", "2026-11-04", "-p", "region=a\u202eb"],
         "invisible character U+202E"),
        (["--since", "2026-11-03", "--until", "2026-11-04"], "missing parameter 'region'"),
        (["--since", "2026-11-03", "--until", "2026-11-04", "-p", "region=eu", "-p", "x=1"],
         "unknown parameter 'x'"),
    ],
)
def test_odd_input_is_one_line_and_exit_2(report: Home, args: list[str], message: str) -> None:
    """Nothing looked at, listed, notified or run: one line on stderr, exit 2."""
    assert report.run("missed", "report", *RANGE, "-p", "region=eu").returncode == 0
    before = report.snapshot()
    done = report.run("missed", "report", *args, "--run", "--", "true")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr
    assert report.snapshot() == before


def test_job_without_a_schedule_is_one_line_and_exit_2(report: Home) -> None:
    done = report.run("missed", "adhoc", "--since", "2026-11-01", "-p", "week=2026-W45")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "retrysafe: job 'adhoc' has no schedule and occurrence parameter to backfill"]


def test_until_in_the_future_looks_until_now_and_runs_nothing_ahead(
    report: Home, tmp_path: Path
) -> None:
    """An occurrence not due yet is not missed: not listed, not counted, never run early."""
    now = datetime.now(UTC)
    since = (now - timedelta(days=15)).date().isoformat()
    until = (now + timedelta(days=30)).date().isoformat()
    log = tmp_path / "ran.log"
    done = report.run("missed", "report", "--since", since, "--until", until, "-p", "region=eu",
                      "--run", "--", *_record(log))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"--until '{until}' is in the future: looking until now" in done.stderr
    ran = log.read_text().splitlines()
    assert 1 <= len(ran) <= 3
    for key in ran:
        occurrence = datetime.strptime(key.rsplit(":", 1)[1], "%Y-%m-%dT%H%M")
        assert occurrence.date() <= now.date() + timedelta(days=1)
    listed = report.run("missed", "report", "--since", since, "--until", until,
                        "-p", "region=eu", "--json", "--fail-if-missing")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
