"""Every channel's try ends at ``[notify] timeout``, and a broken email channel is
refused with the config.

A real server on loopback that accepts the connection and never says a word (an
SMTP server that hung): the email channel (the email connector, its Sent folder
on a real Dovecot) and the apprise channel (``mailto://``) used to wait for their
libraries' own timeouts (30 and 15 seconds, each step of the dialogue), holding
the run's close-out that long. A broken email connector (a bad port, no host)
was found only when a message was sent."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from notifyjobs import configure
from support import Home


class Silent:
    """A TCP server on loopback that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            self.accepted.append(conn)

    def stop(self) -> None:
        self.server.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.stop()


def blocked_run(home: Home, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """A run that ends blocked (a payment needs an approval): close-out notifies."""
    began = time.monotonic()
    proc = home.run("run", "pay", "-p", "n=1", "--",
                    *home.cmd("step", "charge", "--class", "payment", "--", "true"),
                    env=env, timeout=120)
    return proc.returncode, proc.stderr, time.monotonic() - began


def listed(home: Home) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(home.run("notify", "ls", "--json").stdout)
    return rows


def email_connector(smtp_port: int, imap_port: int, password_env: str = "MAIL_PW") -> str:
    return f"""
[connectors.mail]
type = "email"
from = "ops@example.test"
username = "ops"
password_env = "{password_env}"
[connectors.mail.smtp]
host = "127.0.0.1"
port = {smtp_port}
security = "none"
[connectors.mail.imap]
host = "127.0.0.1"
port = {imap_port}
security = "none"
"""


MAIL_CHANNEL = """
[notify]
timeout = 2
[notify.channels.mail]
type = "email"
connector = "mail"
to = ["alice@example.test"]
"""


def test_an_smtp_server_that_never_answers_holds_the_run_no_longer_than_the_timeout(
        home: Home, mail_servers: Any, silent: Silent) -> None:
    """The Sent folder is on a working IMAP server, the SMTP server accepts the
    connection and never greets: the run ends blocked (exit 3) within the channel's
    2 seconds and a few for the run itself, not the connector's 30; the notification
    stays pending, saying no send was confirmed within 2s."""
    from mailservers import PASSWORD, PASSWORD_ENV

    configure(home, email_connector(silent.port, mail_servers.imap_port,
                                    password_env=PASSWORD_ENV) + MAIL_CHANNEL)
    code, err, took = blocked_run(home, {PASSWORD_ENV: PASSWORD})
    assert code == 3, err
    assert silent.accepted, "the channel never reached the SMTP server"
    assert took < 15, f"the run took {took:.1f}s"
    assert "no confirmed send within 2s" in err and len(err.strip().splitlines()) <= 3, err
    [row] = listed(home)
    assert row["state"] == "pending" and "no confirmed send within 2s" in row["last_error"], row
    assert PASSWORD not in err and PASSWORD not in row["last_error"]


def test_notify_test_through_a_silent_smtp_server_ends_at_the_timeout(
        home: Home, mail_servers: Any, silent: Silent) -> None:
    """``notify test`` tries the same way: failed, at the timeout, one line."""
    from mailservers import PASSWORD, PASSWORD_ENV

    configure(home, email_connector(silent.port, mail_servers.imap_port,
                                    password_env=PASSWORD_ENV) + MAIL_CHANNEL)
    began = time.monotonic()
    proc = home.run("notify", "test", env={PASSWORD_ENV: PASSWORD}, timeout=120)
    took = time.monotonic() - began
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("failed") and "no confirmed send within 2s" in proc.stdout
    assert took < 15, f"notify test took {took:.1f}s"


def test_an_apprise_url_to_a_silent_server_holds_the_run_no_longer_than_the_timeout(
        home: Home, silent: Silent) -> None:
    """apprise's email plugin waits 15 seconds for each SMTP reply; the channel's try
    ends at its 2 seconds, the notification pending."""
    pytest.importorskip("apprise")
    configure(home, f"""
[notify]
timeout = 2
[notify.channels.all]
type = "apprise"
urls = ["mailto://ops:s3cret@127.0.0.1:{silent.port}?to=alice@example.test&from=ops@example.test"]
""")
    code, err, took = blocked_run(home)
    assert code == 3, err
    assert silent.accepted, "apprise never reached the server"
    assert took < 12, f"the run took {took:.1f}s"
    [row] = listed(home)
    assert row["state"] == "pending" and "within 2s" in row["last_error"], row
    assert "s3cret" not in err and "s3cret" not in row["last_error"]


@pytest.mark.parametrize(("given", "message"), [
    ('port = "twenty-five"', "port must be a number from 1 to 65535, not 'twenty-five'"),
    ("port = 70000", "port must be a number from 1 to 65535, not 70000"),
    ('port = 25\nsecurity = "tls"', "security must be one of ssl, starttls, none; not 'tls'"),
    ("port = 25\ntimeout = -1", "'timeout' must be a number of seconds, not -1"),
], ids=["port-text", "port-range", "security", "timeout"])
def test_a_broken_email_connector_of_a_channel_is_refused_with_the_config(
        home: Home, given: str, message: str) -> None:
    """The email connector a channel sends through is checked when the config is read:
    every command refuses it (exit 2, one line naming the channel and the field),
    before anything runs or is recorded, instead of a failed send at close-out."""
    text = email_connector(0, 143).replace('port = 0\nsecurity = "none"\n', given + "\n")
    configure(home, text + MAIL_CHANNEL)
    proc = home.run("run", "pay", "-p", "n=1", "--", "true")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "notify.channels.mail" in line and "connector 'mail' [smtp]" in line, line
    assert message in line, line
    assert not (home.path / "ledger.sqlite3").exists()
    assert home.run("notify", "test").returncode == 2


def test_an_email_connector_without_a_host_is_refused_with_the_config(home: Home) -> None:
    """No ``host`` for its IMAP server (where the Sent copy is filed): refused at once."""
    text = email_connector(25, 143).replace('[connectors.mail.imap]\nhost = "127.0.0.1"\n',
                                            "[connectors.mail.imap]\n")
    configure(home, text + MAIL_CHANNEL)
    proc = home.run("jobs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "notify.channels.mail" in line and "connector 'mail' [imap]" in line, line
    assert "'host'" in line and "required" in line, line


def test_an_email_connector_without_a_sender_is_refused_with_the_config(home: Home) -> None:
    """A notification's message has no ``from`` of its own: a connector without one
    could send none of them, so the channel is refused with the config."""
    configure(home, email_connector(25, 143).replace('from = "ops@example.test"\n', "")
              + MAIL_CHANNEL)
    proc = home.run("jobs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "notify.channels.mail" in line and "connector 'mail' has no 'from'" in line, line


def test_a_subject_prefix_that_is_not_text_is_refused_with_the_config(home: Home) -> None:
    configure(home, email_connector(25, 143) + MAIL_CHANNEL + "subject = 5\n")
    proc = home.run("jobs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "'subject' must be a string" in line, line


def test_checking_the_email_channel_with_the_config_imports_no_mail_code(home: Home) -> None:
    """Every command reads the config, so checking the channel's connector there costs
    only its settings: no SMTP, IMAP, TLS or message code is imported until a send."""
    import subprocess
    import sys

    configure(home, email_connector(25, 143) + MAIL_CHANNEL)
    code = ("import json, sys\n"
            "from retrysafe.config import load_config\n"
            f"config = load_config({str(home.path)!r})\n"
            "assert config.jobs['pay'].notify is not None\n"
            "print(json.dumps(sorted(m for m in ('smtplib', 'imaplib', 'ssl', 'email.policy',"
            " 'retrysafe.connectors.email._connector') if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], env=home.env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert json.loads(out) == []
