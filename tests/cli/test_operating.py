"""Operating a home: needs-attention, prune and drill trials, on both ledgers, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import Home

PY = sys.executable
RS = f"{PY} -m retrysafe"


def setup_jobs(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        """
        [jobs.pay]
        key = "pay:{n}"
        params = { n = "int" }

        [jobs.once]
        key = "once:{n}"
        params = { n = "int" }
        max_attempts = 1

        [jobs.old]
        key = "old:{n}"
        params = { n = "int" }
        keep = "1s"

        [jobs.young]
        key = "young:{n}"
        params = { n = "int" }
        keep = "30d"
        """
    )
    return home


def run(home: Home, job: str, n: int, script: str) -> int:
    return home.run("run", job, "-p", f"n={n}", "--", "sh", "-c", script).returncode


@pytest.fixture
def waiting(any_home: Home) -> Home:
    """A blocked payment (approval), an exhausted outcome, an unknown one, and a done one."""
    home = setup_jobs(any_home)
    assert run(home, "pay", 1, f"{RS} step charge --class payment -- echo ch-1") == 3
    assert run(home, "once", 1, "exit 1") == 1
    assert run(home, "once", 1, "exit 1") == 3  # past the limit: blocked, exhausted
    assert run(home, "once", 2, f"{RS} step post --class message -- sh -c 'exit 9'") == 1
    assert run(home, "pay", 2, "true") == 0
    return home


def test_needs_attention_lists_what_waits_oldest_first_with_the_settling_command(waiting: Home) -> None:
    """Blocked (approval, exhausted) and unknown outcomes are listed oldest first, each with its
    cause and the exact command that settles it; a done one is not; --limit shows the oldest and
    still counts all; exit 0 without --fail-if-any, 1 with it; the printed commands, pasted,
    settle what they name."""
    proc = waiting.run("needs-attention", "--json")
    assert proc.returncode == 0, proc.stderr
    items = json.loads(proc.stdout)
    assert [i["key"] for i in items] == ["pay:1", "once:1", "once:2"]
    by_key = {i["key"]: i for i in items}
    assert by_key["pay:1"]["cause"] == "approval"
    assert by_key["pay:1"]["unblock"] == "retrysafe approve pay:1 charge"
    assert by_key["once:1"]["cause"] == "exhausted"
    assert by_key["once:1"]["unblock"] == "retrysafe retry once:1"
    assert by_key["once:2"]["state"] == "unknown"
    assert by_key["once:2"]["unblock"].startswith("retrysafe resolve once:2 post --found")
    assert all(i["since"].endswith("Z") and "T" in i["since"] for i in items)
    text = waiting.run("ls", "--attention")
    assert text.returncode == 0
    assert "settle  retrysafe approve pay:1 charge" in text.stdout
    assert "3 outcomes need attention" in text.stdout
    oldest_ls = waiting.run("ls", "--attention", "--limit", "1")
    assert "pay:1" in oldest_ls.stdout and "once:1" not in oldest_ls.stdout
    assert "3 outcomes need attention (the oldest 1 shown)" in oldest_ls.stdout
    for narrowed in (("--job", "pay"), ("--state", "blocked")):  # not silently ignored
        refused = waiting.run("ls", "--attention", *narrowed)
        assert refused.returncode == 2 and "--attention" in refused.stderr, narrowed
    oldest = waiting.run("needs-attention", "--limit", "1")
    assert oldest.returncode == 0, oldest.stderr
    assert "pay:1" in oldest.stdout and "once:1" not in oldest.stdout
    assert "3 outcomes need attention (the oldest 1 shown)" in oldest.stdout
    assert [i["key"] for i in json.loads(waiting.run("needs-attention", "--limit", "2", "--json").stdout)
            ] == ["pay:1", "once:1"]
    assert waiting.run("needs-attention", "--fail-if-any").returncode == 1
    # each printed command, pasted into a shell, settles its outcome
    for i in items[:2]:
        line = i["unblock"].replace("retrysafe", RS, 1)
        assert subprocess.run(line, shell=True, env=waiting.env, check=False,
                              capture_output=True).returncode == 0
    left = json.loads(waiting.run("needs-attention", "--json").stdout)
    assert [i["key"] for i in left] == ["once:2"]


def test_prune_removes_old_rows_and_folders_but_never_what_waits(waiting: Home, tmp_path: Path) -> None:
    """prune --older-than 1s removes the done outcome (rows, history, runs/ folder) and keeps the
    blocked and unknown ones; --dry-run counts the same and removes nothing; --export keeps the
    removed rows, which import --merge brings back."""
    folder = waiting.path / "runs" / "pay"
    assert len(list(folder.iterdir())) == 2
    time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
    dry = waiting.run("prune", "--older-than", "1s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counted = json.loads(dry.stdout)
    assert counted["outcomes"] == 1 and counted["keys"] == ["pay:2"] and counted["folders"] == 1
    assert waiting.run("status", "pay:2").returncode == 0
    export = tmp_path / "pruned.jsonl"
    real = waiting.run("prune", "--older-than", "1s", "--export", str(export), "--json")
    assert real.returncode == 0, real.stderr
    removed = json.loads(real.stdout)
    assert {k: removed[k] for k in ("outcomes", "attempts", "steps", "history", "folders")} == {
        k: counted[k] for k in ("outcomes", "attempts", "steps", "history", "folders")}
    assert removed["history"] > 0
    assert waiting.run("status", "pay:2").returncode == 2
    from retrysafe.folders import outcome_dir

    assert list(folder.iterdir()) == [outcome_dir(waiting.path, "pay", "pay:1")]
    left = {o["key"] for o in json.loads(waiting.run("ls", "--json").stdout)}
    assert left == {"pay:1", "once:1", "once:2"}
    assert export.stat().st_mode & 0o777 == 0o600
    back = waiting.run("import", "--merge", str(export))
    assert back.returncode == 0, back.stderr
    assert json.loads(waiting.run("status", "pay:2", "--json").stdout)["outcome"]["state"] == "done"


def test_prune_refuses_states_that_wait_and_needs_an_age(any_home: Home) -> None:
    """--state blocked/unknown is refused (exit 2), and so is a prune with no age and no keep;
    with nothing waiting, needs-attention says so and exits 0, --fail-if-any too."""
    home = setup_jobs(any_home)
    assert run(home, "pay", 4, "true") == 0
    quiet = home.run("needs-attention", "--fail-if-any")
    assert quiet.returncode == 0 and "nothing needs attention" in quiet.stdout
    bad = home.run("prune", "--older-than", "1s", "--state", "blocked")
    assert bad.returncode == 2 and "never pruned" in bad.stderr
    assert home.run("prune", "--older-than", "ninety").returncode == 2
    no_age = home.run("prune", "--job", "pay")
    assert no_age.returncode == 2 and "--older-than" in no_age.stderr


def test_prune_uses_each_jobs_keep_without_older_than(any_home: Home) -> None:
    """Without --older-than, a job with keep = "1s" is pruned, one keeping 30 days and one with
    no keep are not; --state narrows what goes."""
    home = setup_jobs(any_home)
    for job in ("old", "young", "pay"):
        assert run(home, job, 1, "true") == 0
    assert run(home, "old", 2, "exit 75") == 1
    time.sleep(1.1)  # older than the old job's keep ("0s" is refused: it would keep nothing)
    only_failed = home.run("prune", "--state", "failed", "--json")
    assert only_failed.returncode == 0, only_failed.stderr
    assert json.loads(only_failed.stdout)["keys"] == ["old:2"]
    rest = json.loads(home.run("prune", "--json").stdout)
    assert rest["keys"] == ["old:1"]
    left = sorted(o["key"] for o in json.loads(home.run("ls", "--json").stdout))
    assert left == ["pay:1", "young:1"]


def test_prune_never_touches_an_outcome_with_an_active_attempt(any_home: Home) -> None:
    """An outcome whose run is still going (an active attempt) is kept, however old."""
    home = setup_jobs(any_home)
    proc = home.popen("run", "pay", "-p", "n=5", "--", "sh", "-c",
                      f"{RS} step a --class local_write -- echo a && sleep 30")
    try:
        ledger = home.open_ledger()
        try:
            import time

            deadline = time.time() + 20
            while time.time() < deadline:
                if ledger.steps("pay:5"):
                    break
                time.sleep(0.1)
        finally:
            ledger.close()
        time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
        pruned = json.loads(home.run("prune", "--older-than", "1s", "--json").stdout)
        assert pruned["keys"] == []
    finally:
        proc.kill()
        proc.wait()


def test_drill_trials_are_hidden_from_ls_and_removed_by_cleanup(any_home: Home) -> None:
    """Outcomes of drill trials (KEY~TRIAL) show only with ls --drills; drill --cleanup removes
    them (blocked ones too) and nothing else."""
    home = setup_jobs(any_home)
    assert run(home, "pay", 6, "true") == 0
    trial = {"RETRYSAFE_DRILL_TRIAL": "t1-1"}
    assert home.run("run", "pay", "-p", "n=6", "--", "true", env=trial).returncode == 0
    blocked = home.run("run", "pay", "-p", "n=7", "--", "sh", "-c",
                       f"{RS} step charge --class payment -- echo x", env=trial)
    assert blocked.returncode == 3
    plain = [o["key"] for o in json.loads(home.run("ls", "--json").stdout)]
    assert plain == ["pay:6"]
    every = sorted(o["key"] for o in json.loads(home.run("ls", "--drills", "--json").stdout))
    assert every == ["pay:6", "pay:6~t1-1", "pay:7~t1-1"]
    assert json.loads(home.run("needs-attention", "--json").stdout) == []
    cleanup = home.run("drill", "pay", "--cleanup")
    assert cleanup.returncode == 0, cleanup.stderr
    assert "removed 2 drill trials" in cleanup.stdout
    assert [o["key"] for o in json.loads(home.run("ls", "--drills", "--json").stdout)] == ["pay:6"]
    assert not any("~" in p.name for p in (home.path / "runs" / "pay").iterdir())
