"""The OpenClaw and email channels, end to end: a stub ``openclaw`` on ``PATH``
recording its arguments, and real SMTP and IMAP servers on loopback."""

from __future__ import annotations

import json
from typing import Any

from notifyjobs import configure
from receivers import openclaw_calls, openclaw_stub, path_with
from support import Home


def blocked_run(home: Home, n: str, env: dict[str, str] | None = None) -> int:
    proc = home.run("run", "pay", "-p", f"n={n}", "--",
                    *home.cmd("step", "charge", "--class", "payment", "--", "true"), env=env)
    return proc.returncode


CHAT = """
[notify.channels.chat]
type = "openclaw"
channel = "telegram"
target = "@ops"
"""


def test_openclaw_channel_runs_message_send(home: Home, tmp_path: Any) -> None:
    """`openclaw message send --channel C --target T --message TEXT`, once per
    transition; the text says what happened and the command that settles it."""
    folder, log = openclaw_stub(tmp_path / "bin")
    configure(home, CHAT)
    env = {"PATH": path_with(folder)}
    assert blocked_run(home, "1", env) == 3
    [argv] = openclaw_calls(log)
    assert argv[:7] == ["message", "send", "--channel", "telegram", "--target", "@ops", "--message"]
    assert len(argv) == 8
    assert "pay:1 is blocked" in argv[7] and "retrysafe approve pay:1 charge" in argv[7]
    assert home.run("run", "pay", "-p", "n=1", "--", "true", env=env).returncode == 3
    assert len(openclaw_calls(log)) == 1


def test_openclaw_failure_stays_pending_then_is_sent_once(home: Home, tmp_path: Any) -> None:
    """openclaw exits 1 (its gateway is down): the run still exits 3; a flush
    after it recovers sends the message, and nothing is sent twice."""
    folder, log = openclaw_stub(tmp_path / "bin")
    configure(home, CHAT)
    env = {"PATH": path_with(folder)}
    assert blocked_run(home, "1", {**env, "OPENCLAW_STUB_EXIT": "1"}) == 3
    assert home.run("notify", "flush", env={**env, "OPENCLAW_STUB_EXIT": "1"}).returncode == 1
    assert home.run("notify", "flush", env=env).returncode == 0
    assert home.run("notify", "flush", env=env).returncode == 0
    assert len(openclaw_calls(log)) == 3  # two refused tries, one delivery
    [row] = json.loads(home.run("notify", "ls", "--json").stdout)
    assert (row["state"], row["tries"], row["last_error"]) == ("sent", 3, "")


def test_openclaw_not_installed_is_one_line(home: Home) -> None:
    """No openclaw on PATH: the run's exit code is unchanged, the reason is one line."""
    configure(home, CHAT.replace('target = "@ops"', 'target = "@ops"\ncommand = "no-such-openclaw"'))
    proc = home.run("run", "pay", "-p", "n=1", "--",
                    *home.cmd("step", "charge", "--class", "payment", "--", "true"))
    assert proc.returncode == 3
    assert "no-such-openclaw not found on PATH" in proc.stderr


def test_email_channel_sends_through_the_email_connector(home: Home, mail_servers: Any) -> None:
    """The email channel is the email connector: one message in the recipient's
    INBOX per transition, its Message-ID fixed by the notification, so a retry
    would find the copy in the Sent folder instead of sending again."""
    from mailservers import DOMAIN, PASSWORD, PASSWORD_ENV

    table = mail_servers.config()
    configure(home, f"""
[connectors.mail]
type = "email"
from = "{table['from']}"
username = "ops"
password_env = "{PASSWORD_ENV}"
[connectors.mail.smtp]
host = "127.0.0.1"
port = {mail_servers.smtp_port}
security = "none"
[connectors.mail.imap]
host = "127.0.0.1"
port = {mail_servers.imap_port}
security = "none"

[notify.channels.mail]
type = "email"
connector = "mail"
to = ["alice@{DOMAIN}"]
""")
    env = {PASSWORD_ENV: PASSWORD}
    assert blocked_run(home, "1", env) == 3
    got = [m for m in mail_servers.messages("alice") if "pay:1" in str(m["Subject"])]
    assert len(got) == 1
    assert str(got[0]["Subject"]) == "retrysafe: pay:1 is blocked"
    assert "retrysafe approve pay:1 charge" in got[0].get_content()
    tested = home.run("notify", "test", env=env)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert any(str(m["Subject"]) == "retrysafe: test notification"
               for m in mail_servers.messages("alice"))
