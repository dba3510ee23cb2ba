#!/usr/bin/env python3
"""Local test mail servers for the example: aiosmtpd (SMTP) and Dovecot (IMAP), on loopback.

The servers are the ones retrysafe's own email tests use
(``tests/connectors/email/mailservers.py``): SMTP with AUTH that delivers into
Maildirs, and Dovecot serving those Maildirs over IMAP, so the connector can
file its Sent copy and find it again. Needs ``dovecot-imapd`` and ``openssl``.

    python3 mail.py serve MAILDIR     # runs until stopped; writes MAILDIR/servers.json
    python3 mail.py config MAILDIR    # prints retrysafe.toml for these servers
    python3 mail.py count MAILDIR KEY # copies of the report for step KEY in alice's INBOX

The mailboxes' password is printed by ``serve``; export it as
OPS_MAIL_PASSWORD (the config names the variable, never the secret).
"""

from __future__ import annotations

import importlib.util
import json
import mailbox
import os
import pwd
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
SERVERS = HERE.parents[1] / "tests" / "connectors" / "email" / "mailservers.py"


def servers_module() -> ModuleType:
    """The test suite's mail server code, imported by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("retrysafe_example_mail_servers", SERVERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def serve(root: Path) -> None:
    m = servers_module()
    binary = m.dovecot_binary()
    if binary is None:
        sys.exit("needs dovecot (apt-get install dovecot-imapd) and openssl")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    else:
        uid, gid = os.getuid(), os.getgid()
    servers = m.MailServers(root=root, imap_port=m.free_port(), imaps_port=m.free_port(),
                            smtp_port=m.free_port(), smtp_starttls_port=m.free_port(),
                            smtps_port=m.free_port(), ca_file=root / "tls" / "cert.pem",
                            mail_uid=uid, mail_gid=gid)
    (root / "tls").mkdir(exist_ok=True)
    cert, key = m.make_certificate(root / "tls")
    for user in m.USERS:
        servers.maildir(user).parent.mkdir(parents=True, exist_ok=True)
        mailbox.Maildir(str(servers.maildir(user)), create=True)
    m.chown_tree(root / "mail", uid, gid)
    (root / "passwd").write_text("".join(f"{u}:{{PLAIN}}{m.PASSWORD}::::::\n" for u in m.USERS))
    (root / "dovecot.conf").write_text(m.dovecot_config(servers, cert, key))
    dovecot = subprocess.Popen([binary, "-F", "-c", str(root / "dovecot.conf")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    m.wait_for_banner(servers.imap_port, dovecot, root / "dovecot.log")
    controller = m.Controller(m.MaildirDelivery(servers, files_sent_for=set()),
                              port=servers.smtp_port, hostname="127.0.0.1",
                              authenticator=m.Authenticator(), auth_required=True,
                              auth_require_tls=False)
    controller.start()
    info = {"smtp_port": servers.smtp_port, "imap_port": servers.imap_port,
            "domain": m.DOMAIN, "maildirs": str(root / "mail")}
    (root / "servers.json").write_text(json.dumps(info))
    print(f"mail servers up; export OPS_MAIL_PASSWORD='{m.PASSWORD}'", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        controller.stop()
        dovecot.terminate()
        dovecot.wait(timeout=10)


def config(root: Path) -> str:
    info = json.loads((root / "servers.json").read_text())
    text = (HERE / "retrysafe.toml").read_text()
    for name, value in (("SMTP_PORT", info["smtp_port"]), ("IMAP_PORT", info["imap_port"]),
                        ("DOMAIN", info["domain"]), ("EXAMPLE", str(HERE))):
        text = text.replace(f"@{name}@", str(value))
    return text


def count(root: Path, step_key: str) -> int:
    """Copies in alice's INBOX carrying the step key (read straight from the Maildir)."""
    from email import message_from_bytes, policy

    found = 0
    inbox = root / "mail" / "alice" / "Maildir"
    for sub in ("new", "cur"):
        folder = inbox / sub
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            msg = message_from_bytes(entry.read_bytes(), policy=policy.default)
            if step_key in str(msg.get("X-Retrysafe-Key", "")):
                found += 1
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("serve", "config", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[2]).absolute()
    if argv[1] == "serve":
        serve(root)
    elif argv[1] == "config":
        sys.stdout.write(config(root))
    else:
        print(count(root, argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
