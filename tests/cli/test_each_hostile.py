"""`retrysafe each` and `retrysafe run --catch-up` fed careless or hostile input: one line and
exit 2 for what is wrong, the rest of the batch still runs, and a dry run says what the run does."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from support import Home

CONFIG = """
[jobs.feed-item]
key = "feed-item:{feed}:{item}"
params = { feed = "slug", item = "str" }

[jobs.weekly]
key = "weekly:{occurrence}"
schedule = "0 7 * * 1"
tz = "Europe/Warsaw"
params = { occurrence = "occurrence" }
max_attempts = 2

[jobs.minutely]
key = "minutely:{occurrence}"
schedule = "* * * * *"
params = { occurrence = "occurrence" }
"""


@pytest.fixture
def jobs(home: Home) -> Home:
    home.path.mkdir(mode=0o700, parents=True)
    home.config(CONFIG)
    return home


def _each(home: Home, items: bytes, *args: str, cmd: tuple[str, ...] = ("--", "true")
          ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(home.cmd("each", "feed-item", "--param", "item", *args, *cmd),
                          input=items, env=home.env, capture_output=True, timeout=120, check=False)


def _keys(home: Home) -> list[str]:
    listed = home.run("ls", "--json")
    return sorted(o["key"] for o in json.loads(listed.stdout)) if listed.returncode == 0 else []


def test_an_id_that_is_not_utf8_is_refused_alone_and_the_others_still_run(jobs: Home) -> None:
    """A line of bytes that are not UTF-8, and a JSON line escaping a lone surrogate: each is
    one refused id; the ids before and after them run and the summary line is printed (the
    first refused the whole input; the second stopped the batch half-way, no summary)."""
    proc = _each(jobs, b'ok-1\n"\\ud800"\n\xff\xfe-bytes\nok-2\n', "-p", "feed=blog")
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 2, out + err
    assert err.splitlines() == ["retrysafe: item line 2 refused: the id is not UTF-8 text",
                                "retrysafe: item line 3 refused: the id is not UTF-8 text"]
    assert out.splitlines()[-1] == "each: 2 done, 2 refused"
    assert _keys(jobs) == ["feed-item:blog:ok-1", "feed-item:blog:ok-2"]


def test_a_byte_order_mark_is_not_part_of_the_first_id(jobs: Home) -> None:
    """A file saved with a UTF-8 byte order mark: a JSON array is still read as one, and the
    first line's id is the id (it was refused for an invisible character)."""
    for items in (b'\xef\xbb\xbf["bom-1", "bom-2"]', b"\xef\xbb\xbfbom-3\r\nbom-4\r\n"):
        proc = _each(jobs, items, "-p", "feed=blog")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _keys(jobs) == [f"feed-item:blog:bom-{n}" for n in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "feed=Not A Slug"], "retrysafe: parameter 'feed': 'Not A Slug' is not a slug"),
        (["-p", "feed=blog", "-p", "nope=1"], "retrysafe: job 'feed-item': unknown parameter 'nope'"),
        ([], "retrysafe: job 'feed-item': missing parameter 'feed' (slug); pass -p feed=VALUE "
             "(from Python: params={'feed': VALUE})"),
    ],
)
@pytest.mark.parametrize("items", [b"a-1\na-2\na-3\n", b""])
def test_a_bad_fixed_parameter_is_one_line_before_any_item(jobs: Home, args: list[str],
                                                           message: str, items: bytes) -> None:
    """A -p the job refuses is the command line's fault, said once (exit 2, nothing run, no
    ledger), not blamed on every item ('item line N refused', as many lines as items), nor
    passed with exit 0 on a day when the list is empty."""
    proc = _each(jobs, items, *args)
    err = proc.stderr.decode()
    assert proc.returncode == 2, proc.stdout.decode() + err
    assert len(err.splitlines()) == 1 and err.startswith(message), err
    assert proc.stdout == b""
    assert not (jobs.path / "ledger.sqlite3").exists()


def test_a_dry_run_says_when_an_outcome_is_out_of_attempts(jobs: Home) -> None:
    """An outcome whose attempts are spent but not yet blocked (state failed): the run blocks
    it and exits 3 without running CMD; the dry runs of each and of run --catch-up say so
    instead of 'run' and 'catch up'."""
    for _ in range(5):  # the default max_attempts of feed-item
        assert _each(jobs, b"spent\n", "-p", "feed=blog", cmd=("--", "false")).returncode == 1
    listed = _each(jobs, b"spent\nfresh\n", "-p", "feed=blog", "--dry-run", "--json", cmd=())
    assert listed.returncode == 0, listed.stderr
    rows = {r["item"]: (r["state"], r["action"]) for r in json.loads(listed.stdout)["items"]}
    assert rows == {"spent": ("failed", "stop (out of attempts)"), "fresh": ("new", "run")}
    real = _each(jobs, b"spent\n", "-p", "feed=blog", cmd=("--", "true"))
    assert real.returncode == 3 and b"retrysafe retry feed-item:blog:spent" in real.stdout

    for _ in range(2):
        assert jobs.run("run", "weekly", "-p", "occurrence=2026-11-16", "--", "false").returncode == 1
    planned = jobs.run("run", "weekly", "-p", "occurrence=2026-11-23", "--catch-up", "--dry-run",
                       "--json", "--", "true")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert [(e["key"], e["action"]) for e in plan["catch_up"]] == [
        ("weekly:2026-11-16T0700", "stop (out of attempts)")]
    alone = jobs.run("run", "weekly", "-p", "occurrence=2026-11-16", "--dry-run", "--", "true")
    assert alone.stdout.splitlines()[-1].split() == ["weekly:2026-11-16T0700", "failed", "stop",
                                                     "(out", "of", "attempts)"]


@pytest.mark.parametrize(
    ("job", "window", "message"),
    [
        ("minutely", "999999", "'999999' is more than 10000 occurrences"),
        ("weekly", "99999999w", "'99999999w' reaches back before the year 1"),
        ("weekly", "999999999d", "'999999999d' reaches back before the year 1"),
    ],
)
def test_a_window_too_large_is_refused_at_once(jobs: Home, tmp_path: Path, job: str,
                                               window: str, message: str) -> None:
    """A count no run could look at was counted back one occurrence at a time (minutes for a
    minutely job) before being refused; an age past the calendar was an internal error.
    Now: one line, exit 2, at once, nothing ran."""
    ran = tmp_path / "ran"
    began = time.monotonic()
    proc = jobs.run("run", job, "-p", "occurrence=2026-11-23T07:00", "--catch-up-window", window,
                    "--", "touch", str(ran))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert time.monotonic() - began < 15
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and not ran.exists()


def test_a_catch_up_setting_too_large_is_a_config_error(home: Home) -> None:
    """catch_up = 20000 occurrences could never run (every scheduled run would fail, after
    counting back); it is refused when the config is read, as a bad window is, by any
    command (it was accepted, and only the scheduled runs failed)."""
    home.path.mkdir(parents=True)
    home.config('[jobs.j]\nkey = "j:{occurrence}"\nschedule = "* * * * *"\n'
                'params = { occurrence = "occurrence" }\ncatch_up = 20000\n')
    proc = home.run("jobs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.endswith("job 'j': 'catch_up' '20000' is more than 10000 occurrences "
                                "(or true for 7d)\n"), proc.stderr
