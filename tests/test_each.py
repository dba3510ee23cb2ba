"""`retrysafe each`: one outcome per item id (seed 001), as a cron job drives it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import Home

HANDLER = """#!/bin/sh
# handles one item: appends it to the log (the side effect we count); 'broken' fails
echo "$1" >> "$LOG"
[ "$1" = "broken" ] && exit 1
[ "$1" = "slow" ] && touch "$LOG.started" && exec sleep 30
echo "handled $1"
"""


@pytest.fixture
def job(home: Home, tmp_path: Path) -> Path:
    """A per-item job and its handler; returns the handler's log."""
    home.path.mkdir(mode=0o700, parents=True)
    home.config("""
        [jobs.new-item]
        key = "new-item:{feed}:{item}"
        params = { feed = "slug", item = "slug" }
    """)
    handler = tmp_path / "handle.sh"
    handler.write_text(HANDLER)
    handler.chmod(0o755)
    log = tmp_path / "handled.log"
    home.env["LOG"] = str(log)
    home.env["HANDLER"] = str(handler)
    return log


def each(home: Home, items: str, *args: str, cmd: tuple[str, ...] | None = None) -> subprocess.CompletedProcess[str]:
    words = ("--", home.env["HANDLER"], "{item}") if cmd is None else cmd
    return subprocess.run(home.cmd("each", "new-item", "--param", "item", "-p", "feed=blog", *args, *words),
                          input=items, env=home.env, capture_output=True, text=True, timeout=120, check=False)


def handled(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_each_item_runs_once_and_done_items_are_skipped_on_the_next_run(home: Home, job: Path) -> None:
    """Three ids: three outcomes keyed by item; the next occurrence's list repeats two of
    them and adds one: only the new one runs."""
    first = each(home, "a-1\na-2\na-3\n")
    assert first.returncode == 0, first.stderr
    assert handled(job) == ["a-1", "a-2", "a-3"]
    assert "each: 3 done" in first.stdout
    second = each(home, "a-2\na-3\na-4\n")
    assert second.returncode == 0, second.stderr
    assert handled(job) == ["a-1", "a-2", "a-3", "a-4"]
    assert "skip: new-item:blog:a-2 is done" in second.stdout
    assert "each: 1 done, 2 skipped" in second.stdout
    status = json.loads(home.run("status", "new-item:blog:a-4", "--json").stdout)
    assert status["outcome"]["state"] == "done"


def test_items_come_as_a_json_array_json_lines_or_a_file(home: Home, job: Path, tmp_path: Path) -> None:
    """A JSON array (strings, integers, source records by the param's name or 'id'),
    JSON lines, and --from FILE; a repeated id runs once."""
    proc = each(home, json.dumps(["j-1", 7, {"item": "j-2"}, {"id": "j-3", "title": "x"}, "j-1"]))
    assert proc.returncode == 0, proc.stderr
    assert handled(job) == ["j-1", "7", "j-2", "j-3"]
    source = tmp_path / "items.jsonl"
    source.write_text('"l-1"\n{"id": "l-2"}\n\n')
    proc = each(home, "", "--from", str(source))
    assert proc.returncode == 0, proc.stderr
    assert handled(job)[-2:] == ["l-1", "l-2"]


def test_bad_ids_are_refused_one_line_each_and_the_valid_ones_still_run(home: Home, job: Path) -> None:
    """Ids the parameter's type refuses (and JSON that is not an id) are each one
    'retrysafe:' line on stderr; the valid ids run; exit 2; nothing is recorded for them."""
    proc = each(home, 'ok-1\nNot A Slug\n{"item": null}\n{"broken json\nok-2\n')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert handled(job) == ["ok-1", "ok-2"]
    refused = [line for line in proc.stderr.splitlines() if line.startswith("retrysafe: item")]
    assert len(refused) == 3, proc.stderr
    assert "line 2 refused: parameter 'item'" in refused[0]
    assert "Traceback" not in proc.stderr
    keys = [o["key"] for o in json.loads(home.run("ls", "--json").stdout)]
    assert sorted(keys) == ["new-item:blog:ok-1", "new-item:blog:ok-2"]


def test_the_exit_code_sums_up_the_batch(home: Home, job: Path) -> None:
    """A failed item makes the batch exit 1 even with a refused id beside it (failed wins
    over refused); the other items still ran; the failed one runs again next time."""
    proc = each(home, "f-1\nbroken\nBAD\nf-2\n", "--json")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 1
    assert result["counts"] == {"done": 2, "failed": 1, "refused": 1}
    assert handled(job) == ["f-1", "broken", "f-2"]
    again = each(home, "f-1\nbroken\n")
    assert again.returncode == 1
    assert handled(job) == ["f-1", "broken", "f-2", "broken"]


def test_dry_run_lists_each_item_with_its_state_and_runs_nothing(home: Home, job: Path) -> None:
    """Before any run no ledger is created; after one, done items say skip, failed ones run."""
    proc = each(home, "d-1\nbroken\n", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert handled(job) == [] and not (home.path / "ledger.sqlite3").exists()
    assert "d-1" in proc.stdout and "new" in proc.stdout
    each(home, "d-1\nbroken\n")
    proc = each(home, "d-1\nbroken\nd-2\n", "--dry-run", "--json", cmd=())
    assert proc.returncode == 0, proc.stderr
    rows = {r["item"]: (r["state"], r["action"]) for r in json.loads(proc.stdout)["items"]}
    assert rows == {"d-1": ("done", "skip"), "broken": ("failed", "run"), "d-2": ("new", "run")}
    assert handled(job) == ["d-1", "broken"]
    # an id the job refuses: one line for it, the others listed, exit 2 (the text form too)
    proc = each(home, "d-1\nNot A Slug\n", "--dry-run", cmd=())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "refused" in proc.stderr and "Traceback" not in proc.stderr
    assert "d-1" in proc.stdout and "skip" in proc.stdout
    assert handled(job) == ["d-1", "broken"]


def test_usage_errors_change_nothing(home: Home, job: Path) -> None:
    """An unknown --param, the item also given with -p, or a missing command: exit 2, one line."""
    for args in (("--param", "nope"), ("-p", "item=x")):
        proc = subprocess.run(home.cmd("each", "new-item", "--param", "item", "-p", "feed=blog", *args,
                                       "--", home.env["HANDLER"]),
                              input="a-1\n", env=home.env, capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    proc = each(home, "a-1\n", cmd=("--", str(home.path / "missing.sh")))
    assert (proc.returncode, proc.stderr.strip()) == (2, f"retrysafe: command not found: {home.path}/missing.sh")
    assert handled(job) == [] and not (home.path / "ledger.sqlite3").exists()


def test_sigint_stops_the_batch_after_the_running_item(home: Home, job: Path) -> None:
    """Ctrl-C while an item runs reaches its command; the items after it are not started; exit 130."""
    proc = subprocess.Popen(home.cmd("each", "new-item", "--param", "item", "-p", "feed=blog", "--",
                                     home.env["HANDLER"], "{item}"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=home.env, text=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("s-1\nslow\ns-2\n")
    proc.stdin.close()
    started = Path(f"{job}.started")
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == 130, out + err
    assert handled(job) == ["s-1", "slow"]
    assert "(interrupted)" in out
