"""Sending one message through one channel.

Each sender gets the message as the JSON body a webhook receives
(``{id, event, key, job, state, reason, unblock, host, time}``) and raises
:class:`SendFailed` with one line when the receiver did not take it. The
libraries a channel needs are imported here, when it sends: a run with
nothing configured never imports httpx or apprise.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from .config import Channel

__all__ = ["SendFailed", "send", "subject", "text"]

Body = Mapping[str, Any]


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


def _http(method: str, url: str, timeout: float, **kw: Any) -> None:
    """One request, over in ``timeout`` seconds whatever the receiver does (httpx's
    own timeout bounds each read, not the whole: a receiver that trickles its
    answer would hold the run). The answer's body is never read; a redirect is
    not followed (following a 302 or 303 turns the POST into a GET without the
    message) but refused, naming where it points."""
    import httpx

    answer: list[tuple[int, str, str]] = []
    error: list[str] = []

    def request() -> None:
        try:
            with httpx.stream(method, url, timeout=timeout, follow_redirects=False, **kw) as resp:
                answer.append((resp.status_code, resp.reason_phrase,
                               resp.headers.get("location", "")))
        except Exception as exc:  # noqa: BLE001 - any failure is one failed try
            error.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=request, name="retrysafe-notify-http", daemon=True)
    worker.start()
    worker.join(timeout)
    if error:
        raise SendFailed(error[0])
    if not answer:
        raise SendFailed(f"no answer within {timeout:g}s")
    status, reason, location = answer[0]
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
    from ..errors import RetrysafeError

    opts = channel.options
    connector = EmailConnector.from_config(opts["connector"], opts["connector_table"])
    payload = {"to": list(opts["to"]), "subject": f"{opts.get('subject', '')}{subject(body)}".strip(),
               "body": text(body) + "\n"}
    try:
        # the notification's id as the step key: a retry finds the copy already sent
        # in the Sent folder and does not send it twice
        connector.execute(f"notify/{body['id']}/{channel.name}", payload)
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
    if not sender.notify(title=subject(body), body=text(body)):
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
