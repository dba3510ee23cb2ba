"""Notifications from real ``retrysafe`` processes to real receivers on loopback.

Each transition (blocked, unknown left for a human, failed with no attempt
left, a missed occurrence, done when asked) is notified once per channel,
recorded in the ledger, sent again after a failure until the receiver takes
it, and never changes the run's exit code.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from notifyjobs import configure
from receivers import HttpReceiver, closed_port
from support import Home

ALL_EVENTS = '["blocked", "unknown", "failed", "missed", "done"]'


def webhook(url: str, events: str | None = None, name: str = "hook") -> str:
    return (f'[notify.channels.{name}]\ntype = "webhook"\nurl = "{url}"\n'
            + (f"events = {events}\n" if events else ""))


def bodies(receiver: HttpReceiver, path: str = "/hook") -> list[dict[str, object]]:
    return [r.json() for r in receiver.delivered(path)]


def blocked_run(home: Home, n: str) -> tuple[int, str, str]:
    """A run whose payment step waits for an approval: blocked, exit 3."""
    proc = home.run("run", "pay", "-p", f"n={n}", "--", *home.cmd("step", "charge", "--class",
                                                                    "payment", "--", "true"))
    return proc.returncode, proc.stdout, proc.stderr


def test_blocked_outcome_posts_the_documented_body_once(home: Home, receiver: HttpReceiver) -> None:
    """The webhook gets {id, event, key, job, state, reason, unblock, host, time} for the
    block, with an ISO 8601 time and the pasteable unblock command; a later run that
    finds the outcome still blocked sends nothing more."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    code, out, err = blocked_run(home, "1")
    assert code == 3, err
    [body] = bodies(receiver)
    assert set(body) == {"id", "event", "key", "job", "state", "reason", "unblock", "host", "time"}
    assert (body["event"], body["key"], body["job"], body["state"]) == ("blocked", "pay:1", "pay",
                                                                         "blocked")
    assert "approval" in str(body["reason"])
    assert body["unblock"] == "retrysafe approve pay:1 charge"
    assert f"to unblock: {body['unblock']}" in out
    when = dt.datetime.fromisoformat(str(body["time"]).replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.UTC) - when).total_seconds()) < 600
    again = home.run("run", "pay", "-p", "n=1", "--", "true")
    assert again.returncode == 3
    assert len(receiver.requests) == 1
    listed = json.loads(home.run("notify", "ls", "--json").stdout)
    assert [(r["state"], r["event"], r["channel"], r["tries"]) for r in listed] == [
        ("sent", "blocked", "hook", 1)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*Z", listed[0]["sent_at"])


def test_failed_is_notified_only_when_no_attempt_is_left(home: Home, receiver: HttpReceiver) -> None:
    """max_attempts = 2: the first failure is not notified, the second is, with
    'retrysafe retry KEY' as what settles it; done is notified only when listed."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    assert home.run("run", "pay", "-p", "n=1", "--", "false").returncode == 1
    assert bodies(receiver) == []
    assert home.run("run", "pay", "-p", "n=1", "--", "false").returncode == 1
    [body] = bodies(receiver)
    assert (body["event"], body["state"], body["unblock"]) == ("failed", "failed",
                                                               "retrysafe retry pay:1")
    assert home.run("run", "pay", "-p", "n=2", "--", "true").returncode == 0
    assert len(bodies(receiver)) == 1  # done is not in the default events


def test_unknown_and_done_when_asked(home: Home, receiver: HttpReceiver) -> None:
    """A step that may have acted leaves the outcome unknown: notified with the
    resolve command; with "done" in events a done outcome is notified too."""
    configure(home, f"[notify]\nevents = {ALL_EVENTS}\n" + webhook(f"{receiver.url}/hook"))
    unclear = home.run("run", "pay", "-p", "n=1", "--",
                       *home.cmd("step", "send", "--class", "message", "--", "sh", "-c", "exit 9"))
    assert unclear.returncode == 1, unclear.stderr
    assert home.run("run", "pay", "-p", "n=2", "--", "true").returncode == 0
    unknown, done = bodies(receiver)
    assert (unknown["event"], unknown["key"]) == ("unknown", "pay:1")
    assert str(unknown["unblock"]).startswith("retrysafe resolve pay:1 send --found")
    assert (done["event"], done["key"], done["unblock"]) == ("done", "pay:2", "")


def test_receiver_that_fails_then_recovers_gets_it_once_after_recovery(
        home: Home, receiver: HttpReceiver) -> None:
    """HTTP 500: the run's exit code is what it would be, stderr has one line, the
    notification stays pending; after recovery the job's next close-out sends it
    (once), and flush finds nothing more to send."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    receiver.status = 500
    code, _, err = blocked_run(home, "1")
    assert code == 3
    notify_lines = [ln for ln in err.splitlines() if ln.startswith("retrysafe: notify:")]
    assert len(notify_lines) == 1 and "HTTP 500" in notify_lines[0], err
    assert receiver.delivered() == [] and len(receiver.requests) == 1
    flush = home.run("notify", "flush")
    assert flush.returncode == 1 and "still pending 1" in flush.stdout
    receiver.status = 200
    code, _, _ = blocked_run(home, "2")  # the job's next close-out sends what is due
    assert code == 3
    assert sorted(b["key"] for b in bodies(receiver)) == ["pay:1", "pay:2"]
    flush = home.run("notify", "flush")
    assert flush.returncode == 0 and flush.stdout.startswith("sent 0"), flush.stdout
    assert len(receiver.delivered()) == 2
    rows = json.loads(home.run("notify", "ls", "--json", "--key", "pay:1").stdout)
    assert [(r["state"], r["tries"]) for r in rows] == [("sent", 3)]


def test_flush_delivers_after_recovery(home: Home, receiver: HttpReceiver) -> None:
    """`notify flush` sends a pending notification once the receiver is back."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    receiver.status = 500
    assert blocked_run(home, "1")[0] == 3
    receiver.status = 200
    flush = home.run("notify", "flush", "--json")
    assert flush.returncode == 0, flush.stderr
    assert [r["outcome_key"] for r in json.loads(flush.stdout)["sent"]] == ["pay:1"]
    assert [b["key"] for b in bodies(receiver)] == ["pay:1"]


@pytest.mark.parametrize("command, expected", [
    (["true"], 0),
    (["false"], 1),
    (["STEP", "charge", "--class", "payment", "--", "true"], 3),
])
def test_a_channel_that_is_down_never_changes_the_exit_code(
        home: Home, command: list[str], expected: int) -> None:
    """Nothing listens on the webhook's port: the run exits as it would without
    notifications, and its --json result stays the only thing on stdout."""
    configure(home, f"[notify]\nevents = {ALL_EVENTS}\nmax_tries = 1\n"
              + webhook(f"http://127.0.0.1:{closed_port()}/hook"))
    cmd = home.cmd("step", *command[1:]) if command[0] == "STEP" else command
    proc = home.run("run", "pay", "-p", "n=1", "--json", "--", *cmd)
    assert proc.returncode == expected, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == expected
    if expected == 1:
        return  # a failure with attempts left is not notified
    assert "retrysafe: notify: hook (webhook) did not take" in proc.stderr
    assert "giving up after 1 tries" in proc.stderr
    rows = json.loads(home.run("notify", "ls", "--json").stdout)
    assert [r["state"] for r in rows] == ["failed"]


def test_missed_occurrences_are_notified_once_each(home: Home, receiver: HttpReceiver) -> None:
    """Each occurrence that never ran is notified once, with the backfill command;
    a second `missed` sends nothing new; a blocked occurrence was notified at its
    own transition and is not 'missed' again."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    listed = home.run("missed", "daily", "--since", "2026-03-01", "--until", "2026-03-03")
    assert listed.returncode == 0, listed.stderr
    got = bodies(receiver)
    assert [(b["event"], b["key"], b["state"]) for b in got] == [
        ("missed", f"daily:2026-03-0{d}T0700", "missing") for d in (1, 2, 3)]
    assert got[0]["unblock"] == "retrysafe run daily -p occurrence=2026-03-01T0700 -- CMD"
    assert "never ran" in str(got[0]["reason"])
    again = home.run("missed", "daily", "--since", "2026-03-01", "--until", "2026-03-04",
                     "--fail-if-missing")
    assert again.returncode == 1  # missed's own exit code, untouched
    assert [b["key"] for b in bodies(receiver)][3:] == ["daily:2026-03-04T0700"]


def test_two_processes_racing_on_the_same_transitions_send_once(
        any_home: Home, receiver: HttpReceiver) -> None:
    """Two `missed` processes notice the same missed occurrences at the same time
    (the receiver answers slowly, so their sends overlap): one notification each,
    on SQLite and on PostgreSQL."""
    configure(any_home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    receiver.delay = 0.3
    procs = [any_home.popen("missed", "daily", "--since", "2026-03-01", "--until", "2026-03-04")
             for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    keys = [b["key"] for b in bodies(receiver)]
    assert sorted(keys) == [f"daily:2026-03-0{d}T0700" for d in (1, 2, 3, 4)]


def test_two_flushes_racing_send_a_pending_notification_once(
        any_home: Home, receiver: HttpReceiver) -> None:
    """A notification left pending by a failing receiver, then two `notify flush`
    at once after it recovered: it arrives once."""
    configure(any_home, "[notify]\n" + webhook(f"{receiver.url}/hook"))
    receiver.status = 500
    assert blocked_run(any_home, "1")[0] == 3
    receiver.status, receiver.delay = 200, 0.5
    procs = [any_home.popen("notify", "flush") for _ in range(2)]
    for proc in procs:
        proc.communicate(timeout=120)
    assert [b["key"] for b in bodies(receiver)] == ["pay:1"]


def test_a_job_chooses_its_channels_and_events(home: Home, receiver: HttpReceiver) -> None:
    """[jobs.NAME.notify]: `use` picks global channels, a job may declare its own,
    and its `events` replace the global list."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook")
              + webhook(f"{receiver.url}/other", name="other"),
              jobs="""
[jobs.pay]
key = "pay:{n}"
params = { n = "str" }
[jobs.pay.notify]
use = ["other"]
events = ["done"]
[jobs.pay.notify.channels.own]
type = "webhook"
url = "RECEIVER/own"
""".replace("RECEIVER", receiver.url))
    assert home.run("run", "pay", "-p", "n=1", "--", "true").returncode == 0
    assert sorted(r.path for r in receiver.delivered()) == ["/other", "/own"]


def test_ping_channel_success_fail_and_test(home: Home, receiver: HttpReceiver) -> None:
    """A healthchecks-style ping: /start when an attempt begins, the URL itself when
    done, /fail when blocked or failed for good; `notify test` uses /log, which
    leaves the check alone."""
    configure(home, f'[notify.channels.hc]\ntype = "ping"\nurl = "{receiver.url}/ping/abc"\n')
    assert home.run("run", "pay", "-p", "n=1", "--", "true").returncode == 0
    assert blocked_run(home, "2")[0] == 3
    assert [r.path for r in receiver.delivered()] == ["/ping/abc/start", "/ping/abc",
                                                      "/ping/abc/start", "/ping/abc/fail"]
    assert "pay:2" in receiver.delivered()[3].body.decode()
    tested = home.run("notify", "test")
    assert tested.returncode == 0, tested.stderr
    assert receiver.delivered()[-1].path == "/ping/abc/log"


def test_notify_test_reports_each_channel(home: Home, receiver: HttpReceiver) -> None:
    """One line per channel, ok or failed with the reason; exit 1 when one failed.
    Nothing is recorded in the ledger."""
    configure(home, "[notify]\n" + webhook(f"{receiver.url}/hook")
              + webhook(f"http://127.0.0.1:{closed_port()}/x", name="down"))
    proc = home.run("notify", "test")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ok      hook (webhook)")
    assert lines[1].startswith("failed  down (webhook)") and "ConnectError" in lines[1]
    [body] = bodies(receiver)
    assert body["event"] == "test"
    data = json.loads(home.run("notify", "test", "--json").stdout)
    assert [(r["channel"], r["ok"]) for r in data] == [("hook", True), ("down", False)]
    assert not (home.path / "ledger.sqlite3").exists()


def test_apprise_channel_through_a_json_url(home: Home, receiver: HttpReceiver) -> None:
    """apprise's json:// posts the title and the message to our receiver."""
    pytest.importorskip("apprise")
    configure(home, "[notify.channels.more]\ntype = \"apprise\"\n"
              f'urls = ["json://127.0.0.1:{receiver.port}/apprise"]\n')
    assert blocked_run(home, "1")[0] == 3
    [req] = receiver.delivered("/apprise")
    sent = req.json()
    assert "pay:1" in sent["title"] and "retrysafe approve pay:1 charge" in sent["message"]


@pytest.mark.parametrize("table, error", [
    ('[notify.channels.x]\ntype = "pager"\n', "'type' must be one of"),
    ('[notify.channels.x]\ntype = "webhook"\n', "'url' is required"),
    ('[notify.channels.x]\ntype = "webhook"\nurl = "ftp://h"\n', "http:// or https://"),
    ('[notify]\nevents = ["blocked", "soon"]\n', "unknown event 'soon'"),
    ('[notify.channels.x]\ntype = "email"\nconnector = "mail"\nto = ["a@b.c"]\n',
     "must name an email connector"),
    ('[jobs.pay.notify]\nuse = ["nope"]\n', "'use' names 'nope'"),
])
def test_bad_notify_config_is_one_line_exit_2(home: Home, table: str, error: str) -> None:
    """A bad [notify] is refused before anything runs: one line, exit 2."""
    jobs = '[jobs.pay]\nkey = "pay:{n}"\nparams = { n = "str" }\n'
    configure(home, table if "jobs.pay" not in table else "", jobs + table if "jobs.pay" in table
              else jobs)
    proc = home.run("run", "pay", "-p", "n=1", "--", "true")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and error in proc.stderr, proc.stderr
    assert proc.stderr.startswith("retrysafe: ")


def test_nothing_configured_imports_nothing_of_notify(home: Home) -> None:
    """Without [notify] a run never imports the notification code (nor apprise)."""
    configure(home, "")
    probe = ("import sys, retrysafe\n"
             "with retrysafe.start('pay', {'n': '1'}) as run:\n"
             "    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('retrysafe.notify', 'apprise'))))\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", probe], env=home.env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
