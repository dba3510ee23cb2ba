"""Sending one message through one channel.

Each sender gets the message as the JSON body a webhook receives
(``{id, event, key, job, state, reason, unblock, host, time}``) and raises
:class:`SendFailed` with one line when the receiver did not take it. Every
send is over in the plan's ``timeout`` whatever the receiver does (it runs
in a thread the caller stops waiting for: :func:`_within`), and the sockets
it opens time out by then too, so a receiver that never answers holds
neither the run nor, for long, the thread. The libraries a channel needs
are imported here, when it sends: a run with nothing configured never
imports httpx or apprise.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from .config import Channel

__all__ = ["SendFailed", "send", "subject", "text"]

Body = Mapping[str, Any]
T = TypeVar("T")


class SendFailed(Exception):
    """The receiver did not take the message (the text is one line, with no secret)."""


def subject(body: Body) -> str:
    """``retrysafe: weekly:2026-W32 is blocked`` and the like."""
    event, key = body.get("event", ""), body.get("key", "")
    if event == "test":
        return "retrysafe: test notification"
    if event == "missed":
        return f"retrysafe: {key} was missed"
    if event == "failed":
        return f"retrysafe: {key} failed (no attempt left)"
    return f"retrysafe: {key} is {event}"


def text(body: Body) -> str:
    """The message for people: what happened, why, and the command that settles it."""
    lines = [subject(body), ""]
    if body.get("job"):
        lines.append(f"job: {body['job']}")
    lines.append(f"state: {body.get('state', '')}")
    if body.get("reason"):
        lines.append(f"reason: {body['reason']}")
    if body.get("unblock"):
        lines.append(f"to settle it: {body['unblock']}")
    lines.append(f"host: {body.get('host', '')}  time: {body.get('time', '')}")
    return "\n".join(lines)


def _within(timeout: float, work: Callable[[], T], name: str, late: str) -> T:
    """``work()``'s result, or what it raised, if it ends within ``timeout`` seconds;
    otherwise :class:`SendFailed` (``late``) at the timeout. A library's own timeouts
    bound each connect or read, not the whole: a receiver that answers a byte at a
    time, or an SMTP dialogue of many steps, would hold the caller far longer. The
    work goes on in a daemon thread until its own timeouts end it."""
    result: list[T] = []
    error: list[Exception] = []

    def run() -> None:
        try:
            result.append(work())
        except Exception as exc:  # noqa: BLE001 - raised in the caller, as its own
            error.append(exc)

    worker = threading.Thread(target=run, name=f"retrysafe-notify-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if error:
        raise error[0]
    if not result:
        raise SendFailed(late)
    return result[0]


def _http(method: str, url: str, timeout: float, **kw: Any) -> None:
    """One request, over in ``timeout`` seconds whatever the receiver does. The
    answer's body is never read; a redirect is not followed (following a 302 or 303
    turns the POST into a GET without the message) but refused, naming where it
    points."""
    import httpx

    def request() -> tuple[int, str, str]:
        with httpx.stream(method, url, timeout=timeout, follow_redirects=False, **kw) as resp:
            return resp.status_code, resp.reason_phrase, resp.headers.get("location", "")

    status, reason, location = _within(timeout, request, "http",
                                       f"no answer within {timeout:g}s")
    if 300 <= status < 400:
        # the address may carry a token: name only its scheme and host
        to = urlsplit(urljoin(url, location)) if location else None
        raise SendFailed(f"HTTP {status} {reason}".rstrip() + ": the URL redirects"
                         + (f" to {to.scheme}://{to.hostname}/..." if to and to.hostname else "")
                         + "; configure the address it redirects to")
    if not 200 <= status < 300:
        raise SendFailed(f"HTTP {status} {reason}".rstrip())


def _webhook(channel: Channel, body: Body, timeout: float) -> None:
    _http("POST", channel.options["url"], timeout, json=dict(body),
          headers={"User-Agent": "retrysafe", **channel.options.get("headers", {})})


def ping_url(base: str, event: str) -> str:
    """healthchecks.io's convention: the URL itself for success, ``/fail``, ``/start``,
    and ``/log`` (recorded, the check's state unchanged) for a test."""
    suffix = {"done": "", "start": "/start", "test": "/log"}.get(event, "/fail")
    if not suffix:
        return base
    if "?" in base:
        path, _, query = base.partition("?")
        return f"{path.rstrip('/')}{suffix}?{query}"
    return base.rstrip("/") + suffix


def _ping(channel: Channel, body: Body, timeout: float) -> None:
    _http("POST", ping_url(channel.options["url"], str(body.get("event", ""))), timeout,
          content=text(body).encode(), headers={"User-Agent": "retrysafe"})


def _email(channel: Channel, body: Body, timeout: float) -> None:
    from ..connectors.email import EmailConnector
    from ..connectors.email._settings import ServerSettings, parse_settings
    from ..errors import RetrysafeError

    def bound(server: ServerSettings) -> ServerSettings:
        return replace(server, timeout=min(server.timeout, timeout))

    opts = channel.options
    settings = parse_settings(opts["connector"], opts["connector_table"])
    rcpt = settings.recipient
    # each connect and read of its SMTP and IMAP servers within the notification's
    # timeout too (the connector's own may be longer): a try given up on ends soon
    connector = EmailConnector(replace(
        settings, smtp=bound(settings.smtp), imap=bound(settings.imap),
        recipient=None if rcpt is None else replace(rcpt, server=bound(rcpt.server))))
    payload = {"to": list(opts["to"]), "subject": f"{opts.get('subject', '')}{subject(body)}".strip(),
               "body": text(body) + "\n"}
    try:
        # the notification's id as the step key: a retry finds the copy already sent
        # in the Sent folder and does not send it twice
        _within(timeout, lambda: connector.execute(f"notify/{body['id']}/{channel.name}", payload),
                "email", f"no confirmed send within {timeout:g}s ({settings.smtp.describe()}, "
                f"{settings.imap.describe()}); a later try looks in the Sent folder first")
    except SendFailed:
        raise
    except RetrysafeError as exc:
        raise SendFailed(exc.message) from None
    except Exception as exc:  # noqa: BLE001 - any connector failure is one failed try
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None


def openclaw_argv(channel: Channel, body: Body) -> list[str]:
    """``openclaw message send [--channel C] --target T [--account A] --message TEXT``."""
    opts = channel.options
    argv = [opts.get("command", "openclaw"), "message", "send"]
    if opts.get("channel"):
        argv += ["--channel", opts["channel"]]
    argv += ["--target", opts["target"]]
    if opts.get("account"):
        argv += ["--account", opts["account"]]
    return [*argv, "--message", text(body)]


def _openclaw(channel: Channel, body: Body, timeout: float) -> None:
    argv = openclaw_argv(channel, body)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise SendFailed(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise SendFailed(f"{argv[0]} message send did not finish in {timeout:g}s") from None
    except OSError as exc:
        raise SendFailed(f"{argv[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise SendFailed(f"{argv[0]} message send exited {proc.returncode}"
                         + (f": {tail[0][:300]}" if tail[0] else ""))


def _apprise(channel: Channel, body: Body, timeout: float) -> None:
    try:
        import apprise
    except ImportError:
        raise SendFailed("the apprise channel needs the notify extra: "
                         "pip install 'retrysafe[notify]'") from None
    sender = apprise.Apprise()
    for url in channel.options["urls"]:
        if not sender.add(url):
            # the URL may hold a token: name only its scheme
            raise SendFailed(f"apprise does not accept the URL {url.split(':', 1)[0]}://...")
    for service in sender:  # its connects and reads within the timeout too
        for attr in ("socket_connect_timeout", "socket_read_timeout"):
            own = getattr(service, attr, None)
            if isinstance(own, int | float) and not isinstance(own, bool) and own > timeout:
                setattr(service, attr, timeout)
    schemes = ", ".join(sorted({u.split(":", 1)[0] for u in channel.options["urls"]}))
    if not _within(timeout, lambda: sender.notify(title=subject(body), body=text(body)),
                   "apprise", f"apprise did not deliver within {timeout:g}s ({schemes})"):
        raise SendFailed("apprise could not deliver to every URL")


SENDERS: dict[str, Callable[[Channel, Body, float], None]] = {
    "webhook": _webhook,
    "ping": _ping,
    "email": _email,
    "openclaw": _openclaw,
    "apprise": _apprise,
}


def send(channel: Channel, body: Body, timeout: float) -> None:
    """Send ``body`` through ``channel``; :class:`SendFailed` when it was not taken."""
    try:
        SENDERS[channel.type](channel, body, timeout)
    except SendFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - a channel's failure is never the run's
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
