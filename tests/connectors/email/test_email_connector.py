"""The email connector against real SMTP and IMAP servers on loopback."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from mailservers import DOMAIN, PASSWORD, PASSWORD_ENV, SLOW_RECIPIENT, MailServers, run_child

from retrysafe.connectors import build_connector
from retrysafe.connectors.base import ABSENT, Absent, Ambiguous, EffectFailed, Found
from retrysafe.connectors.email import EmailConnector, message_id_for
from retrysafe.errors import ConfigError, ConnectorError, InvalidInput

ALICE = f"alice@{DOMAIN}"
BOB = f"bob@{DOMAIN}"
ID_DOMAIN = "retrysafe.invalid"


def connector(mail: MailServers, **overrides: Any) -> EmailConnector:
    built = build_connector("mail", mail.config(**overrides))
    assert isinstance(built, EmailConnector)
    return built


def payload(**overrides: Any) -> dict[str, Any]:
    return {"to": ALICE, "subject": "Weekly ops report", "body": "All green.\n", **overrides}


def crash(mail: MailServers, tmp_path: Path, key: str, point: str, **overrides: Any) -> None:
    """Run the send in a child process that SIGKILLs itself at ``point``."""
    config, body = tmp_path / f"config-{point}.json", tmp_path / f"payload-{point}.json"
    config.write_text(json.dumps(mail.config(**overrides)))
    body.write_text(json.dumps(payload()))
    child = run_child(str(config), key, str(body), point)
    assert child.returncode == -signal.SIGKILL, child.stderr


def rerun(conn: EmailConnector, key: str, body: dict[str, Any]) -> Found | Absent | Ambiguous:
    """What the engine does for an ``unknown`` step: look, and send only when absent."""
    result = conn.lookup(key, body)
    if isinstance(result, Absent):
        return Found(conn.execute(key, body))
    return result


def sent_copies(mail: MailServers, message_id: str) -> list[Any]:
    return mail.delivered("ops", message_id, folder="Sent")


# --- the normal send ---------------------------------------------------------------


def test_send_delivers_one_message_with_the_step_keys_message_id(mail: MailServers, step_key: str) -> None:
    """One send: one message in the recipient's mailbox, Message-ID derived from the key,
    the Sent copy flagged sent, and lookup/verify/count all see it."""
    conn = connector(mail)
    evidence = conn.execute(step_key, payload(cc=BOB))

    assert evidence == message_id_for(step_key, ID_DOMAIN)
    [received] = mail.delivered("alice", evidence)
    assert received["X-Retrysafe-Key"] == step_key
    assert received["Subject"] == "Weekly ops report"
    assert received.get_content() == "All green.\n"
    assert len(mail.delivered("bob", evidence)) == 1
    assert len(sent_copies(mail, evidence)) == 1

    assert conn.lookup(step_key, {}) == Found(evidence, {"folder": "Sent"})
    assert conn.verify(step_key, evidence)
    assert conn.count(step_key) == 1
    assert connector(mail, recipient_imap=mail.recipient()).count(step_key) == 1
    assert conn.authoritative and conn.effect_class == "message"


def test_execute_again_after_a_send_does_not_send_twice(mail: MailServers, step_key: str) -> None:
    """Even if execute is called again for a sent step, it finds the sent copy and returns it."""
    conn = connector(mail)
    first = conn.execute(step_key, payload())
    assert conn.execute(step_key, payload()) == first
    assert len(mail.delivered("alice", first)) == 1


def test_body_file_is_sent_as_the_body(mail: MailServers, step_key: str, tmp_path: Path) -> None:
    """``body_file`` sends the file's text (a frozen artifact), not its name."""
    draft = tmp_path / "draft.txt"
    draft.write_text("Semaine 32 : tout est vert ✓\n", encoding="utf-8")
    evidence = connector(mail).execute(step_key, {"to": [ALICE], "subject": "S32", "body_file": str(draft)})
    [received] = mail.delivered("alice", evidence)
    assert received.get_content() == "Semaine 32 : tout est vert ✓\n"


def test_keys_that_prefix_each_other_are_different_messages(mail: MailServers, step_key: str) -> None:
    """IMAP header search matches substrings: ``.../send`` must not find ``.../send/item``."""
    conn = connector(mail)
    conn.execute(f"{step_key}/item-1", payload())
    assert conn.lookup(step_key, {}) == ABSENT
    assert conn.count(step_key) == 0


# --- crashes ----------------------------------------------------------------------------


def test_crash_after_the_smtp_send_is_ambiguous_and_says_what_to_check(
    mail: MailServers, step_key: str, tmp_path: Path
) -> None:
    """Killed after the server took the message: lookup cannot prove either way, so it
    says which mailbox to check for which Message-ID; a recipient mailbox settles it as
    found and the re-run sends nothing."""
    crash(mail, tmp_path, step_key, "after-send")
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert len(mail.delivered("alice", message_id)) == 1

    result = connector(mail).lookup(step_key, {})
    assert isinstance(result, Ambiguous)
    assert message_id in result.reason
    assert f"mailbox of {ALICE}" in result.reason

    with_mailbox = connector(mail, recipient_imap=mail.recipient())
    assert with_mailbox.lookup(step_key, {}) == Found(message_id, {"folder": "recipient mailbox"})
    assert rerun(with_mailbox, step_key, payload()) == Found(message_id, {"folder": "recipient mailbox"})
    assert len(mail.delivered("alice", message_id)) == 1
    assert with_mailbox.count(step_key) == 1


def test_crash_before_anything_was_filed_is_absent_and_the_rerun_sends_once(
    mail: MailServers, step_key: str, tmp_path: Path
) -> None:
    """Killed before the pending copy was filed: nothing can have been sent, lookup says
    absent (authoritatively) and the re-run sends exactly one message."""
    crash(mail, tmp_path, step_key, "before-file")
    conn = connector(mail)
    assert conn.lookup(step_key, {}) == ABSENT
    evidence = rerun(conn, step_key, payload())
    assert isinstance(evidence, Found)
    assert len(mail.delivered("alice", evidence.evidence)) == 1


def test_crash_between_filing_and_sending(mail: MailServers, step_key: str, tmp_path: Path) -> None:
    """Killed after filing, before SMTP: ambiguous without a recipient mailbox; with one it
    waits out ``settle_seconds``, then says absent, and the re-run sends once, reusing the
    pending copy."""
    crash(mail, tmp_path, step_key, "after-file")
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert mail.delivered("alice", message_id) == []
    assert isinstance(connector(mail).lookup(step_key, {}), Ambiguous)

    settling = connector(mail, recipient_imap=mail.recipient(settle_seconds=600))
    result = settling.lookup(step_key, {})
    assert isinstance(result, Ambiguous) and "delivery may still be under way" in result.reason

    with_mailbox = connector(mail, recipient_imap=mail.recipient())
    assert with_mailbox.lookup(step_key, {}) == ABSENT
    assert rerun(with_mailbox, step_key, payload()) == Found(message_id)
    assert len(mail.delivered("alice", message_id)) == 1
    [copy] = sent_copies(mail, message_id)
    assert with_mailbox.lookup(step_key, {}) == Found(message_id, {"folder": "Sent"})
    assert copy["Message-ID"] == message_id


def test_recipient_mailbox_that_is_not_a_recipient_does_not_decide(
    mail: MailServers, step_key: str, tmp_path: Path
) -> None:
    """Absence from a mailbox that was never addressed proves nothing: still ambiguous."""
    crash(mail, tmp_path, step_key, "after-file")
    conn = connector(mail, recipient_imap=mail.recipient("bob"))
    result = conn.lookup(step_key, {})
    assert isinstance(result, Ambiguous) and "not among its recipients" in result.reason


def test_timeout_waiting_for_the_servers_reply_is_unknown_not_failed(
    mail: MailServers, step_key: str
) -> None:
    """The server took the data but its reply came too late: execute raises something
    other than EffectFailed (the step becomes unknown), and the lookup then finds the
    message in the recipient mailbox."""
    conn = connector(mail, timeout=1, recipient_imap=mail.recipient())
    with pytest.raises(ConnectorError) as raised:
        conn.execute(step_key, payload(to=SLOW_RECIPIENT))
    assert not isinstance(raised.value, EffectFailed)
    assert "may have been sent" in str(raised.value)
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert isinstance(connector(mail).lookup(step_key, {}), Ambiguous)
    # alice's mailbox receives slow@; it is not the addressed one, so address it explicitly.
    slow_box = connector(mail, recipient_imap=mail.recipient(address=SLOW_RECIPIENT))
    assert slow_box.lookup(step_key, {}) == Found(message_id, {"folder": "recipient mailbox"})


# --- definite failures -----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["smtp", "imap"])
def test_wrong_password_fails_definitely_and_the_fix_sends_once(
    mail: MailServers, step_key: str, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused login is EffectFailed with the server's reason, sends nothing, leaves no
    pending copy (lookup: absent), never shows the password; after the fix one message."""
    monkeypatch.setenv("RS_TEST_WRONG_PASSWORD", "not-the-password-9c2")
    servers = mail.config()
    broken = {**servers[which], "password_env": "RS_TEST_WRONG_PASSWORD"}
    conn = connector(mail, **{which: broken})
    with pytest.raises(EffectFailed) as raised:
        conn.execute(step_key, payload())
    message = str(raised.value)
    assert "refused the login of 'ops'" in message and "nothing was sent" in message
    assert "not-the-password-9c2" not in message and PASSWORD not in message

    message_id = message_id_for(step_key, ID_DOMAIN)
    assert mail.delivered("alice", message_id) == []
    assert sent_copies(mail, message_id) == []
    assert connector(mail).lookup(step_key, {}) == ABSENT

    evidence = connector(mail).execute(step_key, payload())
    assert len(mail.delivered("alice", evidence)) == 1
    assert len(sent_copies(mail, evidence)) == 1


def test_refused_recipient_fails_definitely_and_sends_to_nobody(mail: MailServers, step_key: str) -> None:
    """A recipient refused with 5xx before DATA: EffectFailed naming it; the accepted
    recipients get nothing either, and lookup says absent."""
    conn = connector(mail)
    with pytest.raises(EffectFailed) as raised:
        conn.execute(step_key, payload(to=[ALICE, f"nobody-here@{DOMAIN}"]))
    assert f"nobody-here@{DOMAIN} (550" in str(raised.value)
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert mail.delivered("alice", message_id) == []
    assert conn.lookup(step_key, {}) == ABSENT


def test_unreachable_servers_fail_definitely_and_file_nothing(mail: MailServers, step_key: str) -> None:
    """Nothing listening: EffectFailed saying which server, nothing filed or sent."""
    closed = {"host": "127.0.0.1", "port": mail.closed_port, "security": "none"}
    with pytest.raises(EffectFailed, match=r"cannot connect to imap 127\.0\.0\.1:\d+"):
        connector(mail, imap=closed).execute(step_key, payload())
    with pytest.raises(EffectFailed, match=r"cannot connect to smtp 127\.0\.0\.1:\d+"):
        connector(mail, smtp=closed).execute(step_key, payload())
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert sent_copies(mail, message_id) == []
    assert mail.delivered("alice", message_id) == []
    with pytest.raises(ConnectorError, match="cannot connect"):
        connector(mail, imap=closed).lookup(step_key, {})


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"subject": "s", "body": "b"}, "'to' is missing"),
        ({"to": ALICE, "body": "b"}, "'subject' is missing"),
        ({"to": ALICE, "subject": "s"}, "'body' (or 'body_file') is missing"),
        ({"to": "alice", "subject": "s", "body": "b"}, "malformed address in 'to': 'alice'"),
        ({"to": [ALICE, "bob@"], "subject": "s", "body": "b"}, "malformed address in 'to'"),
        ({"to": ALICE, "cc": "a b@c", "subject": "s", "body": "b"}, "malformed address in 'cc'"),
        ({"to": f"{ALICE}\r\nBcc: x@y.z", "subject": "s", "body": "b"}, "line break"),
        ({"to": ALICE, "subject": "s", "body": "b", "bcc": BOB}, "unknown field(s) bcc"),
        ({"to": ALICE, "subject": "s", "body_file": "/nonexistent/x"}, "does not exist"),
    ],
)
def test_bad_input_is_rejected_before_anything_happens(
    mail: MailServers, step_key: str, body: dict[str, Any], error: str
) -> None:
    """Missing fields and malformed addresses: InvalidInput with a one-line reason, no copy
    filed, nothing sent."""
    with pytest.raises(InvalidInput) as raised:
        connector(mail).execute(step_key, body)
    assert error in str(raised.value) and "\n" not in str(raised.value)
    closed = {"host": "127.0.0.1", "port": mail.closed_port, "security": "none"}
    with pytest.raises(InvalidInput, match=re.escape(error)):
        connector(mail, imap=closed, smtp=closed).validate(body)  # no server needed
    message_id = message_id_for(step_key, ID_DOMAIN)
    assert sent_copies(mail, message_id) == []
    assert mail.delivered("alice", message_id) == []


def test_config_mistakes_are_one_line_config_errors(
    mail: MailServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Missing tables, bad values, unknown keys and an unset password variable are
    ConfigErrors naming the connector; the password itself never appears."""
    table = mail.config()
    cases = [
        ({k: v for k, v in table.items() if k != "smtp"}, "[smtp] table"),
        ({**table, "smtp": {"port": 25}}, "'host' is required"),
        ({**table, "imap": {**table["imap"], "security": "tls"}}, "security must be one of"),
        ({**table, "sent_copy": "both"}, "sent_copy must be"),
        ({**table, "pasword_env": "X"}, "unknown key(s) pasword_env"),
        ({**table, "recipient_imap": {**mail.recipient(), "address": None}}, "'address'"),
    ]
    for bad, error in cases:
        bad = {k: v for k, v in bad.items() if v is not None}
        if "recipient_imap" in bad:
            bad["recipient_imap"] = {k: v for k, v in bad["recipient_imap"].items() if v}
            bad["recipient_imap"]["username"] = "not-an-address"
        with pytest.raises(ConfigError) as raised:
            build_connector("mail", bad)
        assert error in str(raised.value) and "connector 'mail'" in str(raised.value)
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(ConfigError, match=f"environment variable {PASSWORD_ENV} .* is not set"):
        connector(mail).execute("k/send", payload())


# --- a server that files sent mail itself -------------------------------------------------------


def test_server_filed_sent_copy_mode(mail: MailServers, step_key: str) -> None:
    """``sent_copy = "server"``: nothing is filed by the connector, the server's own Sent
    copy is found; before sending, lookup says absent but the connector is not
    authoritative, so the engine must not take that absence as proof."""
    conn = connector(mail, username="relay", sent_copy="server", **{"from": f"relay@{DOMAIN}"})
    assert conn.authoritative is False
    assert conn.lookup(step_key, {}) == ABSENT
    evidence = conn.execute(step_key, payload())
    [filed] = mail.delivered("relay", evidence, folder="Sent")
    assert filed["X-Retrysafe-Key"] == step_key
    assert conn.lookup(step_key, {}) == Found(evidence, {"folder": "Sent"})
    assert conn.execute(step_key, payload()) == evidence
    assert len(mail.delivered("alice", evidence)) == 1
    assert conn.count(step_key) == 1


# --- TLS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("imap", "smtp"),
    [("ssl", "starttls"), ("starttls", "ssl")],
    ids=["imaps+starttls", "starttls+smtps"],
)
def test_tls_connections_verify_the_certificate(
    mail: MailServers, step_key: str, imap: str, smtp: str
) -> None:
    """Implicit TLS and STARTTLS on both protocols, verified against the configured CA;
    without that CA the handshake fails definitely and nothing is sent."""
    imap_port = mail.imaps_port if imap == "ssl" else mail.imap_port
    smtp_port = mail.smtps_port if smtp == "ssl" else mail.smtp_starttls_port
    tls = {
        "imap": {"host": "127.0.0.1", "port": imap_port, "security": imap},
        "smtp": {"host": "127.0.0.1", "port": smtp_port, "security": smtp},
    }
    with pytest.raises(EffectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        connector(mail, **tls).execute(step_key, payload())
    evidence = connector(mail, ca_file=str(mail.ca_file), **tls).execute(step_key, payload())
    assert len(mail.delivered("alice", evidence)) == 1


def test_plain_smtp_login_is_refused_where_the_server_demands_starttls(
    mail: MailServers, step_key: str
) -> None:
    """Security set to none against a STARTTLS-only server: a definite, explained failure."""
    smtp = {"host": "127.0.0.1", "port": mail.smtp_starttls_port, "security": "none"}
    with pytest.raises(EffectFailed, match=r"smtp 127\.0\.0\.1"):
        connector(mail, smtp=smtp).execute(step_key, payload())
    assert connector(mail).lookup(step_key, {}) == ABSENT
