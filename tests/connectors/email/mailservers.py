"""Real mail servers on loopback, for the email connector tests and the examples' drills.

* Dovecot (``dovecot -F`` with a config written to a temporary folder) serves
  every user's Maildir over IMAP: plain + STARTTLS on one port, implicit TLS
  on another, with a self-signed certificate made by the ``openssl`` CLI.
* aiosmtpd, in a thread, requires AUTH and delivers each accepted message into
  the Maildir of each recipient, so Dovecot shows it in that user's INBOX.
  One listener is plain, one needs STARTTLS, one is implicit TLS.

The servers start once per test session (a few hundred milliseconds) and each
test uses its own step keys, so tests do not see each other's messages.
Needs the ``dovecot-imapd`` package (Debian/Ubuntu) and ``openssl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import mailbox
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

DOMAIN = "example.test"
PASSWORD = "pw-7d1e-never-printed"
"""Every mailbox's password; tests assert it never shows up in errors or evidence."""
PASSWORD_ENV = "RS_TEST_MAIL_PASSWORD"
USERS = ("ops", "alice", "bob", "relay")
"""``ops`` sends; ``alice`` and ``bob`` receive; ``relay``'s SMTP server files sent mail itself."""
SLOW_RECIPIENT = f"slow@{DOMAIN}"
"""Delivered to alice, but the final reply to DATA comes only after ``SLOW_SECONDS``."""
SLOW_SECONDS = 3.0
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class MailServers:
    """The running servers and what the mailboxes really hold."""

    root: Path
    imap_port: int
    imaps_port: int
    smtp_port: int
    smtp_starttls_port: int
    smtps_port: int
    ca_file: Path
    mail_uid: int
    mail_gid: int
    closed_port: int = field(default_factory=free_port)

    def maildir(self, user: str, folder: str = "INBOX") -> Path:
        base = self.root / "mail" / user / "Maildir"
        return base if folder == "INBOX" else base / f".{folder}"

    def messages(self, user: str, folder: str = "INBOX") -> list[EmailMessage]:
        """Every message in the folder, read straight from the Maildir files."""
        path = self.maildir(user, folder)
        found = []
        for sub in ("new", "cur"):
            directory = path / sub
            if directory.is_dir():
                for entry in sorted(directory.iterdir()):
                    parsed = message_from_bytes(entry.read_bytes(), policy=policy.default)
                    assert isinstance(parsed, EmailMessage)
                    found.append(parsed)
        return found

    def delivered(self, user: str, message_id: str, folder: str = "INBOX") -> list[EmailMessage]:
        """The copies of ``message_id`` in ``user``'s folder."""
        return [m for m in self.messages(user, folder) if m["Message-ID"] == message_id]

    def config(self, **overrides: Any) -> dict[str, Any]:
        """A ``[connectors.mail]`` table for ``ops`` over plain connections."""
        table: dict[str, Any] = {
            "type": "email",
            "from": f"Ops <ops@{DOMAIN}>",
            "username": "ops",
            "password_env": PASSWORD_ENV,
            "timeout": 10,
            "smtp": {"host": "127.0.0.1", "port": self.smtp_port, "security": "none"},
            "imap": {"host": "127.0.0.1", "port": self.imap_port, "security": "none"},
        }
        table.update(overrides)
        return {k: v for k, v in table.items() if v is not None}

    def recipient(self, user: str = "alice", **overrides: Any) -> dict[str, Any]:
        """A ``recipient_imap`` table for ``user``'s INBOX."""
        table: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.imap_port,
            "security": "none",
            "username": user,
            "password_env": PASSWORD_ENV,
            "address": f"{user}@{DOMAIN}",
            "settle_seconds": 0,
        }
        table.update(overrides)
        return table


class MaildirDelivery:
    """aiosmtpd handler: accept known recipients, deliver into their Maildirs."""

    def __init__(self, servers: MailServers, files_sent_for: set[str]) -> None:
        self.servers = servers
        self.files_sent_for = files_sent_for

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        local, _, domain = address.lower().partition("@")
        if domain != DOMAIN or (local not in USERS and address.lower() != SLOW_RECIPIENT):
            return f"550 5.1.1 <{address}>: no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        slow = False
        for address in envelope.rcpt_tos:
            local = address.lower().partition("@")[0]
            if address.lower() == SLOW_RECIPIENT:
                local, slow = "alice", True
            self._deliver(local, "INBOX", b"Delivered-To: %s\r\n" % address.encode() + content)
        login = session.auth_data.login.decode() if session.auth_data else ""
        if login in self.files_sent_for:
            # What Gmail-like servers do: file the submitted message in Sent.
            self._deliver(login, "Sent", content)
        if slow:
            await asyncio.sleep(SLOW_SECONDS)
        return "250 2.0.0 Ok: queued"

    def _deliver(self, user: str, folder: str, data: bytes) -> None:
        path = self.servers.maildir(user, folder)
        box = mailbox.Maildir(str(path), create=True)
        # Like a real delivery agent: Maildir files have Unix line ends.
        key = box.add(data.replace(b"\r\n", b"\n"))
        chown_tree(path, self.servers.mail_uid, self.servers.mail_gid)
        os.chown(path / "new" / key, self.servers.mail_uid, self.servers.mail_gid)


class Authenticator:
    """SMTP AUTH against the same accounts Dovecot knows."""

    def __call__(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if isinstance(auth_data, LoginPassword):
            user, password = auth_data.login.decode(), auth_data.password.decode()
            if user in USERS and password == PASSWORD:
                return AuthResult(success=True, auth_data=auth_data)
        return AuthResult(success=False, handled=False)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    if os.geteuid() != 0:
        return
    for directory, _, files in os.walk(path):
        os.chown(directory, uid, gid)
        for name in files:
            os.chown(os.path.join(directory, name), uid, gid)


def dovecot_binary() -> str | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    return shutil.which("dovecot", path=search)


def make_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def dovecot_config(servers: MailServers, cert: Path, key: Path) -> str:
    root = servers.root
    if os.geteuid() == 0:
        # Dovecot refuses root for login processes and mail access: use the
        # unprivileged users its package creates, and nobody for the mail.
        internal, group, login, chroot = "dovecot", "dovecot", "dovenull", "login"
    else:
        internal = login = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        chroot = ""  # chroot needs root
    return f"""
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
disable_plaintext_auth = no
auth_mechanisms = plain login
# Tests try wrong passwords on purpose; no need to wait 2 s each time.
auth_failure_delay = 0
default_internal_user = {internal}
default_internal_group = {group}
default_login_user = {login}
first_valid_uid = 1
mail_uid = {servers.mail_uid}
mail_gid = {servers.mail_gid}
mail_home = {root}/mail/%n
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%n {root}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%n {root}/passwd
}}
service anvil {{
  chroot = {chroot and "empty"}
  # No growing penalty for the wrong passwords the tests use on purpose.
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
service imap-login {{
  chroot = {chroot}
  inet_listener imap {{
    address = 127.0.0.1
    port = {servers.imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {servers.imaps_port}
    ssl = yes
  }}
}}
"""


def wait_for_banner(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(100).startswith(b"* OK"):
                    return
        except OSError:
            time.sleep(0.05)
    text = log.read_text() if log.exists() else "(no log)"
    raise RuntimeError(f"dovecot did not start on port {port}:\n{text}")


class MissingMailServer(RuntimeError):
    """Dovecot or openssl is not installed."""


PORT_TRIES = 5
"""Starts with fresh ports when one was taken meanwhile: a port free when chosen can be
taken before the server binds it (another test's connection gets it as its own port)."""


@contextlib.contextmanager
def start_mail_servers() -> Iterator[MailServers]:
    """Start Dovecot and the SMTP listeners; stop them on exit. Raises
    :class:`MissingMailServer` when Dovecot or openssl is not installed."""
    binary = dovecot_binary()
    if binary is None or shutil.which("openssl") is None:
        raise MissingMailServer("needs dovecot (apt-get install dovecot-imapd) and openssl")
    for tries_left in reversed(range(PORT_TRIES)):
        stack = contextlib.ExitStack()
        try:
            servers = stack.enter_context(_started(binary))
        except (OSError, RuntimeError) as exc:
            stack.close()
            if tries_left and "in use" in str(exc).lower():
                continue
            raise
        with stack:
            yield servers
        return


@contextlib.contextmanager
def _started(binary: str) -> Iterator[MailServers]:
    """One start on freshly chosen ports (OSError or RuntimeError: one was taken)."""
    # Not pytest's tmp dir: that one is private to our user, and Dovecot's
    # mail processes run as another user when the tests run as root.
    root = Path(tempfile.mkdtemp(prefix="retrysafe-mail-"))
    root.chmod(0o755)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    else:
        uid, gid = os.getuid(), os.getgid()
    ports: set[int] = set()
    while len(ports) < 5:  # five different ones
        ports.add(free_port())
    imap, imaps, smtp, starttls, smtps = sorted(ports)
    servers = MailServers(
        root=root,
        imap_port=imap,
        imaps_port=imaps,
        smtp_port=smtp,
        smtp_starttls_port=starttls,
        smtps_port=smtps,
        ca_file=root / "tls" / "cert.pem",
        mail_uid=uid,
        mail_gid=gid,
    )
    (root / "tls").mkdir()
    cert, key = make_certificate(root / "tls")
    for user in USERS:
        servers.maildir(user).parent.mkdir(parents=True)
        mailbox.Maildir(str(servers.maildir(user)), create=True)
    chown_tree(root / "mail", uid, gid)
    (root / "passwd").write_text("".join(f"{user}:{{PLAIN}}{PASSWORD}::::::\n" for user in USERS))
    config = root / "dovecot.conf"
    config.write_text(dovecot_config(servers, cert, key))
    log = root / "dovecot.log"
    dovecot = subprocess.Popen(
        [binary, "-F", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started: list[Controller] = []
    try:
        wait_for_banner(servers.imap_port, dovecot, log)
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(cert, key)
        handler = MaildirDelivery(servers, files_sent_for={"relay"})
        common: dict[str, Any] = {
            "hostname": "127.0.0.1",
            "authenticator": Authenticator(),
            "auth_required": True,
        }
        controllers = [
            Controller(handler, port=servers.smtp_port, auth_require_tls=False, **common),
            Controller(
                handler,
                port=servers.smtp_starttls_port,
                tls_context=server_tls,
                require_starttls=True,
                **common,
            ),
            # aiosmtpd only counts STARTTLS as TLS; this listener is implicit TLS.
            Controller(
                handler,
                port=servers.smtps_port,
                ssl_context=server_tls,
                auth_require_tls=False,
                **common,
            ),
        ]
        for controller in controllers:
            controller.start()  # one that fails to bind is not started: not stopped below
            started.append(controller)
        yield servers
    finally:
        for controller in started:
            controller.stop()
        if dovecot.poll() is None:
            dovecot.send_signal(signal.SIGTERM)
            try:
                dovecot.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(dovecot.pid, signal.SIGKILL)
                dovecot.wait()
        shutil.rmtree(root, ignore_errors=True)


def child_env() -> dict[str, str]:
    """Environment for a child Python that imports the same retrysafe as the tests."""
    import retrysafe

    package_root = str(Path(next(iter(retrysafe.__path__))).parent)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
    }


def run_child(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``crash_child.py`` with ``args``."""
    return subprocess.run(
        [sys.executable, str(HERE / "crash_child.py"), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
