"""The email connector end to end: ``retrysafe run`` / ``retrysafe step --connector``,
real processes killed for real, against the loopback mail servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mailservers import DOMAIN, PASSWORD, PASSWORD_ENV, SLOW_RECIPIENT, MailServers, child_env

from retrysafe.connectors.email import message_id_for

ALICE = f"alice@{DOMAIN}"
JOB = "report"
WEEK = "2026-W32"


def toml_table(name: str, table: dict[str, Any]) -> str:
    """A TOML table (one level of sub-tables) for the config file."""
    lines, subs = [f"[{name}]"], []
    for key, value in table.items():
        if isinstance(value, dict):
            subs.append(toml_table(f"{name}.{key}", value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join([*lines, "", *subs])


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Cli:
    """A retrysafe home with the mail connector declared, and the CLI as a process."""

    def __init__(self, home: Path, mail: MailServers, **connector: Any) -> None:
        self.home = home
        self.mail = mail
        # The mail servers live for the whole session: a key of its own per test.
        self.prefix = f"report-{uuid.uuid4().hex[:8]}"
        self.message_id = message_id_for(f"{self.prefix}:{WEEK}/send", "retrysafe.invalid")
        home.mkdir(parents=True, exist_ok=True)
        self.write_config(**connector)
        self.env = {k: v for k, v in child_env().items() if not k.startswith("RETRYSAFE_")}
        self.env.update({"RETRYSAFE_HOME": str(home), PASSWORD_ENV: PASSWORD})
        # ``retrysafe`` inside ``sh -c`` must be this interpreter's.
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env["PATH"]])

    def write_config(self, **connector: Any) -> None:
        job = textwrap.dedent(
            f"""\
            [jobs.{JOB}]
            key = "{self.prefix}:{{week}}"
            params = {{ week = "isoweek" }}

            """
        )
        table = self.mail.config(**connector)
        (self.home / "retrysafe.toml").write_text(job + toml_table("connectors.mail", table))

    def command(self, to: str = ALICE) -> list[str]:
        step = (
            f"retrysafe step send --connector mail --with to={to} "
            "--with 'subject=Week 32 report' --with 'body=All green.'"
        )
        return [sys.executable, "-m", "retrysafe", "run", JOB, "-p", f"week={WEEK}", "--",
                "sh", "-c", step]  # fmt: skip

    def run(self, *, to: str = ALICE, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(to),
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_crash_after_execute_then_rerun_finds_the_sent_message(mail: MailServers, tmp_path: Path) -> None:
    """SIGKILL right after the send returned, before the ledger recorded it: the re-run
    looks in the Sent folder, finds the copy marked sent, records it, and sends nothing."""
    cli = Cli(tmp_path / "home", mail)
    first = cli.run(RETRYSAFE_CRASH_AT="send:after-execute")
    assert first.returncode != 0, first.stdout + first.stderr
    message_id = cli.message_id
    assert len(mail.delivered("alice", message_id)) == 1

    second = cli.run()
    assert second.returncode == 0, second.stdout + second.stderr
    assert len(mail.delivered("alice", message_id)) == 1

    third = cli.run()
    assert third.returncode == 0, third.stdout + third.stderr
    assert len(mail.delivered("alice", message_id)) == 1


def kill_while_awaiting_the_reply(cli: Cli) -> None:
    """Start the run, wait until the server has delivered the message (its reply is
    held back by ``SLOW_SECONDS``), then SIGKILL every process of the run."""
    proc = subprocess.Popen(
        cli.command(to=SLOW_RECIPIENT),
        env=cli.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not cli.mail.delivered("alice", cli.message_id) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cli.mail.delivered("alice", cli.message_id), "the message never arrived"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_kill_while_awaiting_the_smtp_reply_blocks_with_what_to_check(
    mail: MailServers, tmp_path: Path
) -> None:
    """The run is SIGKILLed after the server took the message, before it replied: the
    re-run cannot prove either way, so it blocks (exit 3) naming the mailbox and the
    Message-ID to check; after ``resolve --found`` the run completes without sending."""
    cli = Cli(tmp_path / "home", mail)
    kill_while_awaiting_the_reply(cli)

    blocked = cli.run(to=SLOW_RECIPIENT)
    assert blocked.returncode == 3, blocked.stdout + blocked.stderr
    said = blocked.stdout + blocked.stderr
    assert cli.message_id in said and f"mailbox of {SLOW_RECIPIENT}" in said
    assert len(mail.delivered("alice", cli.message_id)) == 1

    resolved = subprocess.run(
        [sys.executable, "-m", "retrysafe", "resolve", f"{cli.prefix}:{WEEK}", "send",
         "--found", cli.message_id, "--note", "seen in the recipient's inbox"],
        env=cli.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    done = cli.run(to=SLOW_RECIPIENT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(mail.delivered("alice", cli.message_id)) == 1


def test_kill_while_awaiting_the_smtp_reply_is_settled_by_the_recipient_mailbox(
    mail: MailServers, tmp_path: Path
) -> None:
    """Same kill, with a recipient mailbox configured: the re-run finds the delivered
    message there, records it and sends nothing; the mailbox holds exactly one copy."""
    cli = Cli(tmp_path / "home", mail, recipient_imap=mail.recipient(address=SLOW_RECIPIENT))
    kill_while_awaiting_the_reply(cli)
    settled = cli.run(to=SLOW_RECIPIENT)
    assert settled.returncode == 0, settled.stdout + settled.stderr
    assert cli.message_id in settled.stdout
    assert len(mail.delivered("alice", cli.message_id)) == 1


@pytest.mark.parametrize("mode", ["wrong-password", "bad-address"])
def test_definite_failures_exit_cleanly_and_send_nothing(
    mail: MailServers, tmp_path: Path, mode: str
) -> None:
    """A refused login (step failed) or a malformed address (refused before the intent is
    recorded): a one-line error, a non-zero exit, nothing sent; after the fix the run
    sends exactly one message."""
    cli = Cli(tmp_path / "home", mail)
    message_id = cli.message_id
    if mode == "wrong-password":
        failed = cli.run(**{PASSWORD_ENV: "wrong-password-5b1"})
        assert "refused the login" in failed.stderr
        assert "wrong-password-5b1" not in failed.stderr + failed.stdout
    else:
        failed = cli.run(to="alice-at-example")
        assert "malformed address in 'to'" in failed.stderr
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr
    assert mail.delivered("alice", message_id) == []

    fixed = cli.run()
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert len(mail.delivered("alice", message_id)) == 1
