"""``retrysafe ui``: the web dashboard (needs the ui extra)."""

from __future__ import annotations

import ipaddress
import os
import socket
from urllib.parse import quote

import click

from .. import envvars
from ..errors import InvalidInput
from ._common import login_name, state

__all__ = ["ui"]

DEFAULT_BIND = "127.0.0.1:8321"


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise InvalidInput(f"--bind {text!r}: give HOST:PORT, e.g. {DEFAULT_BIND}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--bind", default=DEFAULT_BIND, show_default=True, metavar="HOST:PORT",
              help="Where to listen. Anything but loopback is reachable from other machines.")
@click.option("--token", envvar=envvars.UI_TOKEN, metavar="TOKEN",
              help="The token every request needs (env RETRYSAFE_UI_TOKEN); default: a new one, "
                   "printed at start.")
@click.option("--allow-actions", is_flag=True,
              help="Allow resolve, approve, retry and break-lease from the pages "
                   "(default: read-only).")
@click.option("--name", "operator", metavar="NAME",
              help="Who decides, as recorded (actor ui:NAME); default: your user name. "
                   "Each form may name someone else.")
def ui(bind: str, token: str | None, allow_actions: bool, operator: str | None) -> None:
    """Serve the dashboard: what needs attention, every outcome, one outcome's
    whole story, and /metrics for Prometheus.

    Read-only unless --allow-actions. Every request needs the token (open the
    printed address once, or type the token on the sign-in page; scrapers send
    'Authorization: Bearer TOKEN'). Needs the ui extra: pip install 'retrysafe[ui]'.

    \b
    Example:
      retrysafe ui --allow-actions --bind 127.0.0.1:8321
    """
    from ..ui import require_extra

    require_extra()
    import uvicorn

    from ..ui.app import WHO, Settings, create_app
    from ..ui.auth import Guard

    host, port = parse_bind(bind)
    if token is not None and (len(token) < 16 or not token.isascii() or not token.isprintable()
                              or " " in token):
        # what a browser, a sign-in form and an Authorization header all carry unchanged
        raise InvalidInput("--token must be at least 16 characters, printable ASCII without spaces")
    token = token or Guard.generate()
    if operator is not None and not WHO.match(operator):
        raise InvalidInput(f"--name {operator!r}: letters, digits and . _ @ + - (at most 64)")
    name = operator or login_name()
    if allow_actions and not WHO.match(name):
        raise InvalidInput(f"your user name {name!r} cannot name a decision: give --name NAME "
                           "(letters, digits and . _ @ + -)")
    engine = state().engine
    ledger = engine.existing_ledger()
    sock = listen(host, port, bind)
    port = int(sock.getsockname()[1])
    settings = Settings(token=token, allow_actions=allow_actions, operator=name)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"retrysafe ui: ledger {ledger.url}")
    click.echo(f"retrysafe ui: listening on http://{shown}:{port}/ ("
               + ("actions ON: resolve, approve, retry, break-lease as ui:" + name
                  if allow_actions else "read-only; --allow-actions to decide from the pages")
               + ")")
    if not is_loopback(host):
        click.echo(f"retrysafe ui: warning: {host} is not loopback: other machines can reach "
                   "this dashboard; put TLS in front of it", err=True)
    click.echo(f"retrysafe ui: open http://{shown}:{port}/?token={quote(token, safe='')}")
    os.environ.pop(envvars.UI_TOKEN, None)  # the checks verify runs need not see it
    config = uvicorn.Config(create_app(engine, settings), log_level="warning", access_log=False,
                            server_header=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def listen(host: str, port: int, bind: str) -> socket.socket:
    """The listening socket, bound here so a taken port is one clear line (exit 2)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {bind}: {exc.strerror or exc}") from None
