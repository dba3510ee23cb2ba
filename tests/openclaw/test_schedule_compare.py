"""Our occurrences against OpenClaw's own next-run computation, over a table of schedules.

Run by ``scripts/e2e-openclaw`` only (lean tier included). Each row's job is
added to a real gateway the way a user adds it (``openclaw cron add --cron
EXPR --tz ZONE --exact``, or ``--every``) and the job OpenClaw stored comes
back as JSON. The gateway's first planned run (``nextRunAtMs``) must be our
next occurrence. The successive runs around both daylight-saving changes of the
zone are then computed by the very function the gateway calls after each run
and when a job is added (``computeJobNextRunAtMs`` in OpenClaw's shipped dist
code, which wraps croner with OpenClaw's own DST handling and stagger), run
through Node on the stored job: that is OpenClaw's computation without waiting
months for the slots, and it is checked against the live gateway's answer
first. Waiting for real slots, and living through DST nights on a fake clock,
is the full tier's test_scheduled_e2e.py.

For a cron row the runs must be exactly our occurrences, and ``missed`` (which
lists :meth:`Schedule.between`) must list exactly those runs in the window,
nothing OpenClaw would not have fired. An ``--every`` job is an interval from
its creation, not a wall-clock schedule: each of its runs must map (by the key a
run derives) to the next occurrence of the matching cron schedule, no
occurrence left unserved, and two runs share one key only in the second
reading of a repeated hour (which our occurrences, like croner, do not have).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_gateway_e2e import Gateway

from retrysafe.missed import EARLY
from retrysafe.schedule import Schedule

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("RETRYSAFE_E2E_OPENCLAW") != "1",
        reason="needs a real OpenClaw gateway: run scripts/e2e-openclaw",
    ),
]

HERE = Path(__file__).parent
RUNS = 20  # successive runs compared per window
RUN_MS = 1_000  # how long each run lasts: the next run is computed at its end


@dataclass(frozen=True)
class Row:
    """One job of the table: OpenClaw's schedule options and the matching retrysafe schedule."""

    name: str
    schedule: str  # retrysafe's schedule (for an --every row: the cron it stands for)
    tz: str
    openclaw: tuple[str, ...]  # the schedule options of 'openclaw cron add'
    lead: timedelta  # windows start this long before each DST change of the year
    year: int = 2026


def cron(expr: str, tz: str) -> tuple[str, ...]:
    return ("--cron", expr, "--tz", tz, "--exact")


TABLE = [
    # daily wall-clock times in the spring-forward gap and the fall-back repeated hour
    Row("warsaw-0230", "30 2 * * *", "Europe/Warsaw", cron("30 2 * * *", "Europe/Warsaw"),
        timedelta(days=10)),
    Row("warsaw-0200", "0 2 * * *", "Europe/Warsaw", cron("0 2 * * *", "Europe/Warsaw"),
        timedelta(days=10)),
    Row("newyork-0230", "30 2 * * *", "America/New_York",
        cron("30 2 * * *", "America/New_York"), timedelta(days=10)),
    Row("newyork-0100", "0 1 * * *", "America/New_York",
        cron("0 1 * * *", "America/New_York"), timedelta(days=10)),
    # weekly: Monday 07:00, and Sunday 02:30 (the US changes clocks on Sunday at 02:00)
    Row("warsaw-weekly", "0 7 * * 1", "Europe/Warsaw", cron("0 7 * * 1", "Europe/Warsaw"),
        timedelta(weeks=10)),
    Row("newyork-sunday-0230", "30 2 * * 0", "America/New_York",
        cron("30 2 * * 0", "America/New_York"), timedelta(weeks=10)),
    # hourly and every 15 minutes through the DST nights
    Row("warsaw-hourly", "0 * * * *", "Europe/Warsaw", cron("0 * * * *", "Europe/Warsaw"),
        timedelta(hours=10)),
    Row("warsaw-15min", "*/15 * * * *", "Europe/Warsaw", cron("*/15 * * * *", "Europe/Warsaw"),
        timedelta(hours=2, minutes=30)),
    # zones with a non-hour offset: Adelaide (+09:30/+10:30, DST in April and October)
    # and Kolkata (+05:30, no DST)
    Row("adelaide-0245", "45 2 * * *", "Australia/Adelaide",
        cron("45 2 * * *", "Australia/Adelaide"), timedelta(days=10)),
    Row("adelaide-30min", "*/30 * * * *", "Australia/Adelaide",
        cron("*/30 * * * *", "Australia/Adelaide"), timedelta(hours=5)),
    Row("kolkata-weekdays", "30 9 * * 1-5", "Asia/Kolkata", cron("30 9 * * 1-5", "Asia/Kolkata"),
        timedelta(days=10)),
    # --every: an interval anchored at the job's creation; its DST changes are the
    # coming year's (the anchor is now)
    Row("every-15m-warsaw", "*/15 * * * *", "Europe/Warsaw", ("--every", "15m"),
        timedelta(hours=2, minutes=30), 2027),
    Row("every-30m-kolkata", "*/30 * * * *", "Asia/Kolkata", ("--every", "30m"),
        timedelta(hours=5), 2027),
]


def dst_changes(tz: str, year: int) -> list[datetime]:
    """The instants (UTC, to the hour) where ``tz``'s offset changes in ``year``."""
    zone = ZoneInfo(tz)
    at = datetime(year, 1, 1, tzinfo=UTC)
    found = []
    while at.year == year:
        if at.astimezone(zone).utcoffset() != (at - timedelta(hours=1)).astimezone(zone).utcoffset():
            found.append(at)
        at += timedelta(minutes=30)
    return found


def windows(row: Row) -> list[datetime]:
    """Where each compared sequence starts: before each DST change, or one window without."""
    changes = dst_changes(row.tz, row.year)
    if not changes:
        return [datetime(row.year, 3, 1, tzinfo=UTC)]
    return [change - row.lead for change in changes]


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def scheduler_module(openclaw: str) -> tuple[Path, str]:
    """The dist file of this openclaw defining computeJobNextRunAtMs, and its export name."""
    dist = Path(openclaw).resolve().parent / "dist"
    for path in sorted(dist.glob("*.mjs")):
        text = path.read_text(errors="replace")
        if "function computeJobNextRunAtMs(" not in text:
            continue
        found = re.search(r"\bcomputeJobNextRunAtMs as (\w+)\b", text)
        assert found, f"{path} defines computeJobNextRunAtMs but does not export it"
        return path, found.group(1)
    raise AssertionError(f"no computeJobNextRunAtMs in {dist}: OpenClaw's scheduler moved")


def openclaw_runs(gw: Gateway, requests: list[dict[str, Any]]) -> list[list[int]]:
    """Run times from OpenClaw's own computeJobNextRunAtMs, through Node."""
    module, name = scheduler_module(gw.openclaw)
    node = str(Path(os.environ["RETRYSAFE_E2E_NODE_BIN"]) / "node")
    done = subprocess.run(
        [node, str(HERE / "openclaw_next_runs.mjs"), str(module), name],
        input=json.dumps(requests), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers: list[list[int]] = json.loads(done.stdout)
    return answers


@pytest.fixture(scope="module")
def jobs(gateway: Gateway) -> dict[str, tuple[dict[str, Any], datetime, datetime]]:
    """Each row's job as OpenClaw stored it, with the real time just before and after adding it."""

    def add(row: Row) -> tuple[dict[str, Any], datetime, datetime]:
        before = datetime.now(UTC)
        job: dict[str, Any] = gateway.cli(
            "cron", "add", "--name", f"sc-{row.name}", *row.openclaw,
            "--command", "true", "--no-deliver", "--json",
        )
        return job, before, datetime.now(UTC)

    # each 'openclaw cron add' is a Node process that takes seconds to start: a few at once
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip([r.name for r in TABLE], pool.map(add, TABLE), strict=True))


def test_the_gateway_plans_our_next_occurrence(gateway: Gateway, jobs: dict[str, Any]) -> None:
    """Each job's first run, as the live gateway planned it, is our next occurrence (an
    --every job's is its creation plus the interval), and OpenClaw's computeJobNextRunAtMs
    run through Node on the stored job gives the gateway's answer: the function the
    table below runs is the one the gateway ran."""
    requests = []
    for row in TABLE:
        job, before, after = jobs[row.name]
        planned = job["state"]["nextRunAtMs"]
        if row.openclaw[0] == "--every":
            assert planned == job["createdAtMs"] + job["schedule"]["everyMs"], job
        else:
            assert job["schedule"].get("staggerMs") == 0, job  # --exact
            schedule = Schedule.parse(row.schedule, row.tz)
            ours = {_ms(schedule.next_after(before)), _ms(schedule.next_after(after))}
            assert planned in ours, (row, job["state"], sorted(map(_utc, ours)))
        requests.append({"job": job, "fromMs": job["createdAtMs"], "count": 1, "runMs": 0})
    answers = openclaw_runs(gateway, requests)
    assert [a[0] for a in answers] == [jobs[r.name][0]["state"]["nextRunAtMs"] for r in TABLE]


@pytest.fixture(scope="module")
def openclaw_table(gateway: Gateway, jobs: dict[str, Any]) -> dict[str, list[list[int]]]:
    """For each row, RUNS successive run times (ms) from each window's start, computed by
    OpenClaw in one Node process (each row's windows in order)."""
    requests = [{"job": jobs[row.name][0], "fromMs": _ms(start), "count": RUNS, "runMs": RUN_MS}
                for row in TABLE for start in windows(row)]
    answers = iter(openclaw_runs(gateway, requests))
    return {row.name: [next(answers) for _ in windows(row)] for row in TABLE}


@pytest.mark.parametrize("row", TABLE, ids=[r.name for r in TABLE])
def test_openclaw_runs_are_our_occurrences(openclaw_table: dict[str, list[list[int]]],
                                           row: Row) -> None:
    """RUNS successive runs from before each DST change of the zone's year: a cron job's
    runs are exactly our occurrences and exactly what missed lists for that window; an
    --every job's runs each serve the next occurrence, sharing one only in a repeated hour."""
    starts = windows(row)
    schedule = Schedule.parse(row.schedule, row.tz)
    for start, runs in zip(starts, openclaw_table[row.name], strict=True):
        assert len(runs) == RUNS, (start, runs)
        fired = [_utc(ms) for ms in runs]
        assert fired[0] > start
        shown = [schedule.format(f) for f in fired]
        if row.openclaw[0] == "--every":
            _check_interval(schedule, fired)
            continue
        ours = []
        at = start
        for _ in range(RUNS):
            at = schedule.next_after(at).astimezone(UTC)
            ours.append(at)
        assert ours == fired, (row.name, start, shown, [schedule.format(o) for o in ours])
        # missed lists what OpenClaw fires in the window, no more (no phantom) and no less
        listed = [o.astimezone(UTC) for o in schedule.between(fired[0], fired[-1])]
        assert listed == fired, (row.name, [schedule.format(o) for o in listed], shown)


def _check_interval(schedule: Schedule, fired: list[datetime]) -> None:
    # the occurrence each run serves, by the rule 'retrysafe run' follows (a run a few
    # seconds before an occurrence serves it)
    keys = [schedule.current_at(f).astimezone(UTC) for f in fired]
    for (run_a, key_a), (run_b, key_b) in itertools.pairwise(zip(fired, keys, strict=True)):
        assert run_b > run_a
        if key_b == key_a:
            # only a run in the repeated hour's second reading shares its key, or one just
            # before that hour after a run that served its slot seconds early: the slot it
            # is early for does not exist (its wall time comes in the second reading), so
            # it serves the one before, which is done: an "already done", no slot missed
            local = run_b.astimezone(schedule.zone)
            repeated = local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()
            before_it = key_a > run_a and schedule.next_after(key_a).astimezone(UTC) - run_b > EARLY
            assert repeated or before_it, (run_b, schedule.format(key_b))
        else:
            assert key_b == schedule.next_after(key_a).astimezone(UTC), (
                run_a, run_b, schedule.format(key_a), schedule.format(key_b))
    # every occurrence between the first and last run's keys was served by a run
    served = sorted(set(keys))
    listed = [o.astimezone(UTC) for o in schedule.between(served[0], served[-1])]
    assert listed == served
