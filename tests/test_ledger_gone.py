"""The SQLite ledger deleted or replaced while an attempt runs (a home removed by a
cleanup, a copy put back). The attempt's connection kept writing into the file that
was gone, and closed quietly: its intent, record and close-out were in no ledger
anyone would read, and the next run did every effect again without a word. Now an
effect whose intent went nowhere is not executed, and an attempt whose record was
lost says so, naming what it did."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import retrysafe
from retrysafe.engine import close_all
from retrysafe.errors import LedgerError

CONFIG = '[jobs.rep]\nkey = "rep:{week}"\nparams = { week = "isoweek" }\n'
WEEK = {"week": "2026-W10"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    (path / "retrysafe.toml").write_text(CONFIG)
    return path


def _remake(home: Path) -> None:
    home.mkdir(exist_ok=True)
    (home / "retrysafe.toml").write_text(CONFIG)


def test_an_effect_after_the_home_was_deleted_is_not_executed(home: Path) -> None:
    sent: list[str] = []
    try:
        with pytest.raises(LedgerError) as caught, \
                retrysafe.start("rep", WEEK, home=home, heartbeat=False) as run:
            shutil.rmtree(home)
            run.effect("send", "message", execute=lambda k: sent.append(k) or "id-1")
    finally:
        close_all()
    assert sent == []
    said = caught.value.message
    assert "was deleted while attempt 1 of rep:2026-W10 ran" in said
    assert "step send was not executed" in said and "\n" not in said
    _remake(home)  # the next run starts over on a new ledger, and sends once
    try:
        with retrysafe.start("rep", WEEK, home=home, heartbeat=False) as run:
            run.effect("send", "message", execute=lambda k: sent.append(k) or "id-1")
    finally:
        close_all()
    assert sent == ["rep:2026-W10/send"]


def test_an_attempt_whose_ledger_went_away_says_what_it_did(home: Path, tmp_path: Path) -> None:
    """The effect itself removed the ledger (a copy put back in its place): it happened,
    and its record is lost; close-out raises, naming the step and its evidence."""
    def execute(_key: str) -> str:
        os.replace(home / "ledger.sqlite3", tmp_path / "aside.sqlite3")
        shutil.copy(tmp_path / "aside.sqlite3", home / "ledger.sqlite3")  # an older copy
        return "id-1"

    try:
        with pytest.raises(LedgerError) as caught, \
                retrysafe.start("rep", WEEK, home=home, heartbeat=False) as run:
            assert run.effect("send", "message", execute=execute) == "id-1"
    finally:
        close_all()
    said = caught.value.message
    assert "was replaced by another file while attempt 1 of rep:2026-W10 ran" in said
    assert "it did send: id-1, which a new run does again" in said


def test_an_untouched_ledger_is_never_taken_for_gone(home: Path) -> None:
    """The check costs a stat and finds nothing on every ordinary run (one engine, many
    outcomes, a checkpoint between them)."""
    with retrysafe.Engine.open(home) as engine:
        for n in range(1, 6):
            with engine.start("rep", {"week": f"2026-W0{n}"}, heartbeat=False) as run:
                run.effect("send", "message", execute=lambda _k: "id")
            assert engine.ledger.backend.gone() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the shell line is POSIX")
def test_a_step_in_a_run_whose_ledger_was_moved_aside_sends_nothing(home: Path,
                                                                    tmp_path: Path) -> None:
    marks = tmp_path / "sent"
    step = (f"mv {home}/ledger.sqlite3 {tmp_path}/aside.sqlite3; "
            f"{sys.executable} -m retrysafe step send --class message -- "
            f"sh -c 'echo sent >> {marks}; echo id-9'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")}
    done = subprocess.run([sys.executable, "-m", "retrysafe", "--home", str(home), "run", "rep",
                           "-p", "week=2026-W10", "--", "sh", "-c", step], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not marks.exists()
    assert "Traceback" not in done.stderr
    assert all(line.startswith("retrysafe: ") for line in done.stderr.splitlines()), done.stderr
    assert "was replaced by another file while attempt 1 of rep:2026-W10 ran" in done.stderr
