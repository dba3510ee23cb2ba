"""Runs OpenClaw's own scheduler fires (not ``cron run``), against our occurrences.

Run by ``scripts/e2e-openclaw`` only. A command job is created from the line
``retrysafe openclaw cron-command`` prints, with a daily schedule whose slot is
a minute or two ahead; the gateway fires it on its own, the run ends in our
ledger under that slot's occurrence key, ``retrysafe missed`` lists nothing
OpenClaw did not fire, and ``retrysafe openclaw runs`` puts OpenClaw's run
history beside our outcomes. Under libfaketime (an offset clock, which Node and
every child process honour alike) a gateway lives through Europe/Warsaw's
spring-forward and fall-back nights: the slots OpenClaw fires and the next run
it plans are the occurrences retrysafe derives.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_gateway_e2e import Gateway, launch, openclaw_cli, scratch_env

from retrysafe.engine import Engine
from retrysafe.schedule import format_occurrence, next_occurrence

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("RETRYSAFE_E2E_OPENCLAW") != "1",
        reason="needs a real OpenClaw gateway: run scripts/e2e-openclaw",
    ),
]

TZ = "Europe/Warsaw"
SEND = """#!/bin/sh
# a bare 'retrysafe': 'retrysafe openclaw run' put this installation first on PATH
set -eu
exec retrysafe step send --class message \\
  --check 'test -f outbox.txt || exit 1; grep -qxF "$RETRYSAFE_STEP_KEY" outbox.txt || exit 1
           echo "outbox:$RETRYSAFE_STEP_KEY"' \\
  -- sh -c 'echo "$RETRYSAFE_STEP_KEY" >> outbox.txt; echo "outbox:$RETRYSAFE_STEP_KEY"'
"""


def _rs(gw: Gateway) -> str:
    return str(gw.scratch / "bin" / "retrysafe")


def _retrysafe(gw: Gateway, home: Path, *args: str, cwd: Path | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**gw.env, "OPENCLAW_GATEWAY_PORT": str(gw.port), "OPENCLAW_GATEWAY_TOKEN": gw.token}
    done = subprocess.run([_rs(gw), "--home", str(home), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    if check:
        assert done.returncode == 0, f"retrysafe {args}: {done.stdout}{done.stderr}"
    return done


def _world(gw: Gateway, name: str, schedule: str) -> tuple[Path, Path]:
    """A retrysafe home declaring job ``tick`` on ``schedule`` and a folder with send.sh."""
    home = gw.scratch / f"rs-{name}"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        f'[jobs.tick]\nkey = "tick:{{occurrence}}"\nschedule = "{schedule}"\ntz = "{TZ}"\n'
        'params = { occurrence = "occurrence" }\n'
    )
    work = gw.scratch / f"work-{name}"
    work.mkdir()
    (work / "send.sh").write_text(SEND)
    (work / "send.sh").chmod(0o755)
    return home, work


def _add_from_cron_command(gw: Gateway, home: Path, work: Path, name: str) -> dict[str, Any]:
    """Create the OpenClaw job exactly as 'retrysafe openclaw cron-command' prints it."""
    line = _retrysafe(gw, home, "openclaw", "cron-command", "tick", "--name", name, "--",
                      "./send.sh", cwd=work).stdout.strip()
    words = shlex.split(line)
    assert words[:3] == ["openclaw", "cron", "add"], line
    job: dict[str, Any] = gw.cli(*words[1:], "--timeout-seconds", "180")
    return job


def _finished(gw: Gateway, job_id: str, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        history = gw.cli("cron", "runs", "--id", job_id, "--json")
        runs = [e for e in history["entries"] if e.get("action") == "finished"]
        if len(runs) >= count:
            return sorted(runs, key=lambda e: e["runAtMs"])
        assert time.monotonic() < deadline, f"{job_id}: {len(runs)} of {count} runs finished"
        time.sleep(2)


def _job_state(gw: Gateway, job_id: str) -> dict[str, Any]:
    listed = gw.cli("cron", "list", "--all", "--json")
    jobs = listed.get("jobs", listed) if isinstance(listed, dict) else listed
    (job,) = [j for j in jobs if j["id"] == job_id]
    state: dict[str, Any] = job.get("state") or {}
    return state


def _slot(run: dict[str, Any]) -> datetime:
    """The minute a run was started for (``runAtMs`` is its start, some ms after it)."""
    return datetime.fromtimestamp(run["runAtMs"] // 60_000 * 60, UTC)


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _outcome(home: Path, key: str) -> tuple[str, list[tuple[int, str]]]:
    engine = Engine.open(home)
    try:
        out = engine.ledger.require_outcome(key)
        return out.state, [(a.number, a.result or a.state) for a in engine.ledger.attempts(key)]
    finally:
        engine.close()


def _missed(gw: Gateway, home: Path, since: datetime, until: datetime) -> list[str]:
    """The keys 'retrysafe missed' lists in [since, until]."""
    done = _retrysafe(gw, home, "missed", "tick", "--since", since.isoformat(),
                      "--until", until.isoformat(), "--json")
    return [str(r["key"]) for r in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    scratch = tmp_path_factory.mktemp("openclaw-scheduled")
    env = scratch_env(scratch)
    openclaw_cli(env, "config", "set", "gateway.mode", "local")
    with launch(scratch, env) as gw:
        yield gw


def test_scheduler_fires_the_slot_and_runs_joins_it(gateway: Gateway) -> None:
    """A daily slot a minute or two ahead: OpenClaw fires it by itself, the run is
    done under that slot's key, missed agrees, and 'openclaw runs' joins both histories."""
    slot_utc = (datetime.now(UTC) + timedelta(seconds=100)).replace(second=0, microsecond=0)
    slot = slot_utc.astimezone(ZoneInfo(TZ))
    schedule = f"{slot.minute} {slot.hour} * * *"
    home, work = _world(gateway, "daily", schedule)
    key = f"tick:{format_occurrence(schedule, TZ, slot)}"
    created = _add_from_cron_command(gateway, home, work, "rs-daily")
    job_id = str(created["id"])
    assert created["state"]["nextRunAtMs"] == _ms(slot_utc), created["state"]

    (fired,) = _finished(gateway, job_id, 1, timeout=400)
    assert fired["status"] == "ok", fired
    assert _slot(fired) == slot_utc  # the scheduler's slot (runAtMs: its start, ms late)
    assert f"done: {key} (attempt 1)" in fired["summary"]
    assert (work / "outbox.txt").read_text().splitlines() == [f"{key}/send"]
    assert _outcome(home, key) == ("done", [(1, "done")])
    # the next run OpenClaw plans is our next occurrence
    after = _job_state(gateway, job_id)
    assert after["nextRunAtMs"] == _ms(next_occurrence(schedule, TZ, slot))

    # missed agrees with what OpenClaw scheduled: the one slot since the job was made is done
    assert _missed(gateway, home, slot_utc - timedelta(days=1, minutes=-1), slot_utc) == []
    # and the day before, which OpenClaw never fired (the job did not exist), is listed
    day_before = slot - timedelta(days=1)
    assert _missed(gateway, home, slot_utc - timedelta(days=2, minutes=-1), slot_utc) == [
        f"tick:{format_occurrence(schedule, TZ, day_before)}"]

    # a forced run is answered 'already done', and our history says so
    gateway.force_run(job_id)
    _, forced = _finished(gateway, job_id, 2, timeout=200)
    assert forced["status"] == "ok" and f"done: {key} is already done" in forced["summary"]
    history = json.loads(_retrysafe(gateway, home, "history", key, "--json").stdout)
    (answer,) = [e for e in history if e["kind"] == "answer"]
    assert answer["actor"] == "openclaw:command"
    assert answer["reason"].startswith("already done; nothing ran (pid ")

    # openclaw runs: OpenClaw's two runs beside our outcome and answers
    joined = json.loads(_retrysafe(gateway, home, "openclaw", "runs", "tick", "--json",
                                   "--openclaw", gateway.openclaw).stdout)
    assert [(r["openclaw_status"], r["key"], r["state"], r["answer"], r["cron_job"])
            for r in joined] == [("ok", key, "done", "done", "rs-daily"),
                                 ("ok", key, "done", "already done", "rs-daily")]
    assert datetime.fromisoformat(joined[0]["at"]).replace(microsecond=0) == slot_utc
    text = _retrysafe(gateway, home, "openclaw", "runs", "tick",
                      "--openclaw", gateway.openclaw).stdout.splitlines()
    assert text[0].split() == ["TIME", "OPENCLAW", "KEY", "STATE", "ANSWER", "AUTOMATION"]
    assert text[1].split()[2:] == ["ok", key, "done", "done", "rs-daily"]
    assert text[2].split()[2:] == ["ok", key, "done", "already", "done", "rs-daily"]


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# night: (where the fake clock starts, the last slot to wait for, what comes next in UTC)
NIGHTS = {
    # 02:00 CET jumps to 03:00 CEST: 01:59 is followed by 03:00, never by 02:xx
    "spring-forward": ("2026-03-29T00:56:00+00:00", "2026-03-29T01:00:00+00:00",
                       "2026-03-29T01:01:00+00:00"),
    # 03:00 CEST falls back to 02:00 CET: 02:59 (summer) is followed by 03:00 CET, an hour later
    "fall-back": ("2026-10-25T00:55:30+00:00", "2026-10-25T00:59:00+00:00",
                  "2026-10-25T02:00:00+00:00"),
}


@pytest.mark.skipif(not Path(LIBFAKETIME).exists(), reason="needs libfaketime (Debian faketime)")
@pytest.mark.parametrize("night", sorted(NIGHTS))
def test_dst_night_under_faketime(tmp_path: Path, night: str) -> None:
    """A gateway and every process it starts on a fake clock across a DST change: the
    slots OpenClaw fires (croner) are our occurrences, each run lands under its key,
    the next run it plans is our next occurrence, and missed lists no phantom."""
    start, last, following = (datetime.fromisoformat(t) for t in NIGHTS[night])
    offset = int(start.timestamp() - time.time())
    env = scratch_env(tmp_path)
    # an offset, not a start time ('@...'): each process started later shares the clock
    env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME=f"{offset:+d}s")
    openclaw_cli(env, "config", "set", "gateway.mode", "local")
    schedule = "* * * * *"

    def fake_now() -> datetime:
        return datetime.fromtimestamp(time.time() + offset, UTC)

    with launch(tmp_path, env) as gw:
        home, work = _world(gw, night, schedule)
        job_id = str(_add_from_cron_command(gw, home, work, f"rs-{night}")["id"])
        assert fake_now() < last, "the gateway started too late for this night's slots"
        deadline = time.monotonic() + 400
        while True:
            runs = _finished(gw, job_id, 1, timeout=400)
            if any(_slot(r) >= last for r in runs):
                break
            assert time.monotonic() < deadline, runs
            time.sleep(2)
        state = _job_state(gw, job_id)
        if night == "fall-back":
            # nothing fires in the repeated hour's second reading (01:00Z-02:00Z)
            while fake_now() < last + timedelta(seconds=95):
                time.sleep(2)
            runs = _finished(gw, job_id, 1, timeout=10)
        lines = (work / "outbox.txt").read_text().splitlines()

    fired = [_slot(r) for r in runs]
    keys = [f"tick:{format_occurrence(schedule, TZ, at)}" for at in fired]
    assert all(r["status"] == "ok" for r in runs), runs
    for run, key in zip(runs, keys, strict=True):
        assert f"done: {key} (attempt 1)" in run["summary"], run
    assert lines == [f"{key}/send" for key in keys]
    # every slot OpenClaw fired is an occurrence of ours, one after the other
    for before, after in itertools.pairwise(fired):
        assert next_occurrence(schedule, TZ, before).astimezone(UTC) == after
    assert fired[-1] == last
    assert state["nextRunAtMs"] == _ms(following)
    assert next_occurrence(schedule, TZ, last).astimezone(UTC) == following
    if night == "spring-forward":
        assert keys[-2:] == ["tick:2026-03-29T0159", "tick:2026-03-29T0300"]
    else:
        assert keys[-1] == "tick:2026-10-25T0259"
    # missed agrees with what OpenClaw fired: no 02:xx on the spring-forward night, no
    # second reading of 02:xx on the fall-back night
    until = fired[-1] + (timedelta(seconds=90) if night == "fall-back" else timedelta(0))
    assert _missed_real(home, fired[0], until) == []


def _missed_real(home: Path, since: datetime, until: datetime) -> list[str]:
    """'retrysafe missed' on the real clock (the window is explicit)."""
    done = subprocess.run([sys.executable, "-m", "retrysafe", "--home", str(home), "missed", "tick",
                           "--since", since.isoformat(), "--until", until.isoformat(), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [str(r["key"]) for r in json.loads(done.stdout)]
