"""Random SIGKILLs of processes racing ``retrysafe.once()`` over the same keys.

Worker processes go through the same keys in their own order, each key one
outcome whose work is one effect (``git_commit``: looked up after a crash, not
asked first). The effect appends the step key to a file and the lookup reads it,
so the file is the external system. Workers are killed at random moments
(inside the effect, between the ledger's writes, while another worker waits)
and replaced; at the end every key's effect is in the file exactly once and
every outcome is ``done`` with that effect's evidence. On a server, a new
outcome's claim and its intent are one statement, and its record and finish
another: this is what drives those statements with kills in between, where the
crash drills (which name points between the writes) take the statement-by-
statement path.
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import Home

CONFIG = """
[jobs.rep]
key = "rep:{n}"
params = { n = "slug" }
"""

WORKER = """
import os
import random
import sys
import time
from pathlib import Path

import retrysafe
from retrysafe import ABSENT, Busy, Found

home, box, keys, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)


def commit(step_key):
    time.sleep(rng.random() * 0.01)
    fd = os.open(box, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (step_key + "\\n").encode())
    finally:
        os.close(fd)
    time.sleep(rng.random() * 0.01)
    return "c-" + step_key


def lookup(step_key):
    lines = box.read_text().splitlines() if box.exists() else []
    return Found("c-" + step_key) if step_key in lines else ABSENT


left = [f"k{i}" for i in range(keys)]
rng.shuffle(left)
while left:
    busy = []
    for k in left:
        try:
            retrysafe.once("rep", {"n": k}, "commit", "git_commit", execute=commit,
                           lookup=lookup, home=home)
        except Busy:
            busy.append(k)
    left = busy
    if left:
        time.sleep(0.02)
"""


def _worker(home: Home, box: Path, keys: int, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(home.path), str(box), str(keys),
                             str(seed)], env=home.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _chaos(home: Home, box: Path, *, keys: int, workers: int, kills: int, seed: int) -> int:
    """Run ``workers`` racing workers, kill one at a random moment ``kills`` times (a new
    one takes its place), then let the rest finish; the kills that landed."""
    rng = random.Random(seed)
    live = [_worker(home, box, keys, rng.randrange(1 << 30)) for _ in range(workers)]
    landed = 0
    for _ in range(kills):
        time.sleep(rng.uniform(0.02, 0.2))
        running = [p for p in live if p.poll() is None]
        if not running:
            break
        victim = rng.choice(running)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        if victim.returncode == -signal.SIGKILL:
            landed += 1
        else:  # it finished first: it must have finished cleanly
            _, err = victim.communicate(timeout=60)
            assert victim.returncode == 0, err
        live.remove(victim)
        live.append(_worker(home, box, keys, rng.randrange(1 << 30)))
    for p in live:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return landed


@pytest.mark.parametrize("seed", [1, 2, *(pytest.param(s, marks=pytest.mark.heavy)
                                          for s in range(3, 23))])
def test_racing_once_calls_killed_at_random_do_each_effect_once(
        any_home: Home, tmp_path: Path, seed: int) -> None:
    keys = 60
    any_home.path.mkdir()
    any_home.config(CONFIG)
    box = tmp_path / "commits.txt"
    landed = _chaos(any_home, box, keys=keys, workers=3, kills=12, seed=seed)
    assert landed >= 1  # (else nothing was attacked)
    # a last worker, never killed, finishes whatever a kill left
    last = _worker(any_home, box, keys, seed)
    _, err = last.communicate(timeout=300)
    assert last.returncode == 0, err
    counts = collections.Counter(box.read_text().splitlines())
    expected = {f"rep:k{i}/commit" for i in range(keys)}
    assert set(counts) == expected
    assert [k for k, n in counts.items() if n != 1] == []  # each effect exactly once
    with any_home.open_ledger() as ledger:
        for i in range(keys):
            out = ledger.outcome(f"rep:k{i}")
            step = ledger.step(f"rep:k{i}/commit")
            assert out is not None and out.state == "done", out
            assert out.current_attempt is None
            assert step is not None and step.evidence == f"c-rep:k{i}/commit"
