"""The dashboard as an ASGI application (Starlette).

Pages: ``/`` what needs attention, ``/outcomes`` every outcome in pages,
``/outcome?key=KEY`` one outcome's story; ``/metrics`` for Prometheus. The
deciding forms post to ``/act/ACTION``, which calls the same library methods
as the deciding commands and records the actor as ``ui:NAME``. Every request
needs the token (:mod:`retrysafe.ui.auth`); actions also need the server to be
started with ``--allow-actions`` and the form's CSRF token.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import InvalidInput, RetrysafeError
from ..ledger.listing import Cursor, Listing
from ..states import OutcomeState
from ..timefmt import when
from .auth import COOKIE, Guard
from .story import story

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["ACTIONS", "WHO", "Settings", "create_app"]

HERE = Path(__file__).parent
ACTIONS = ("resolve", "approve", "retry", "break-lease")
_PAGE = 50
WHO = re.compile(r"\A[A-Za-z0-9._@+-]{1,64}\Z")
"""a name a decision may be recorded under (``ui:NAME``)"""
_OPEN_PATHS = ("/login", "/static/")


@dataclass(frozen=True)
class Settings:
    """How the server was started."""

    token: str
    allow_actions: bool
    operator: str
    """the default name in ``ui:NAME``, the actor of a decision made here"""


def _ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    secs = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = when
    env.filters["ago"] = _ago
    return env


def _day(text: str | None, what: str) -> float | None:
    """``YYYY-MM-DD`` (UTC midnight) as a timestamp."""
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise InvalidInput(f"{what} {text!r} is not a date (YYYY-MM-DD)") from None


def _cursor(text: str | None) -> Cursor | None:
    if not text:
        return None
    at, sep, oid = text.partition(":")
    try:
        cursor = Cursor(float(at), int(oid)) if sep else None
    except ValueError:  # (a link of an older version, which named a key: the first page)
        return None
    if cursor is None or not (math.isfinite(cursor.updated_at) and -2**63 <= cursor.id < 2**63):
        return None  # no outcome is there: the first page
    return cursor


class _Dashboard:
    """The request handlers, around one engine and the server's settings."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.guard = Guard(settings.token)
        self.env = _environment()
        from ..metrics import HistoryCounts

        self.history = HistoryCounts()  # the counters, carried from one scrape to the next

    # --- rendering -------------------------------------------------------------------

    def page(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        ctx.setdefault("actions_on", self.settings.allow_actions)
        ctx.setdefault("operator", self.settings.operator)
        ctx["csrf"] = self.guard.csrf
        return HTMLResponse(self.env.get_template(name).render(**ctx), status_code=status)

    # --- who may come in -------------------------------------------------------------

    def signed_in(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and self.guard.token_ok(auth[7:].strip()):
            return True
        return self.guard.session_ok(request.cookies.get(COOKIE))

    def with_session(self, response: Response) -> Response:
        response.set_cookie(COOKIE, self.guard.session(), httponly=True, samesite="strict")
        return response

    async def gate(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        if "\0" in path or any("\0" in k or "\0" in v
                                for k, v in request.query_params.multi_items()):
            # no key, job or cursor holds one (PostgreSQL cannot even be asked)
            return PlainTextResponse("retrysafe: the address holds a NUL character\n", 400)
        if path.startswith(_OPEN_PATHS):
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None:
            if not self.guard.token_ok(given):
                return self.page("login.html", 401, error="wrong token", back=path)
            # the token leaves the address bar (and the history) at once
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = path + (f"?{urlencode(rest)}" if rest else "")
            return self.with_session(RedirectResponse(target, status_code=303))
        if self.signed_in(request):
            return await call_next(request)
        if path == "/metrics" or request.method != "GET":
            return PlainTextResponse("retrysafe: the dashboard's token is required\n", 401)
        return self.page("login.html", 401, error="", back=path)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.page("login.html", error="", back=request.query_params.get("back", "/"))
        form = await request.form()
        back = str(form.get("back") or "/")
        if not back.startswith("/") or back.startswith("//"):
            back = "/"
        if not self.guard.token_ok(str(form.get("token") or "")):
            return self.page("login.html", 401, error="wrong token", back=back)
        return self.with_session(RedirectResponse(back, status_code=303))

    # --- pages ------------------------------------------------------------------------

    def attention(self, request: Request) -> Response:
        from ..housekeeping import attention_page

        after = _cursor(request.query_params.get("after"))
        items, nxt = attention_page(self.engine, after=after, limit=_PAGE)
        counts = self.engine.existing_ledger().retention.attention_counts()
        total = max(sum(counts.values()), len(items))
        missed = []
        if after is None:  # scheduled slots of the last week that never ran, on the first page
            from ..missed import recent_missing

            missed = recent_missing(self.engine)
        return self.page("attention.html", items=items, total=total + len(missed),
                         missed=missed, first=after is None,
                         next_query=urlencode({"after": f"{nxt.updated_at!r}:{nxt.id}"})
                         if nxt is not None else None, nav="attention")

    def outcomes(self, request: Request) -> Response:
        q = request.query_params
        job = q.get("job") or None
        state = q.get("state") or None
        error = ""
        try:
            if state is not None and state not in tuple(OutcomeState):
                raise InvalidInput(f"unknown state {state!r}")
            since, until = _day(q.get("since"), "since"), _day(q.get("until"), "until")
            if until is not None:
                until += 86400  # the whole last day
            page = Listing(self.engine.existing_ledger().backend).outcomes(
                job=job, state=state, since=since, until=until, after=_cursor(q.get("after")),
                limit=_PAGE)
        except InvalidInput as exc:
            error, page = exc.message, None
        filters = {k: q.get(k, "") for k in ("job", "state", "since", "until")}
        nxt = None
        if page is not None and page.next is not None:
            nxt = urlencode({**{k: v for k, v in filters.items() if v},
                             "after": f"{page.next.updated_at!r}:{page.next.id}"})
        return self.page("outcomes.html", 400 if error else 200, page=page, error=error,
                         filters=filters, next_query=nxt, first=not q.get("after"),
                         first_query=urlencode({k: v for k, v in filters.items() if v}),
                         states=[s.value for s in OutcomeState], jobs=sorted(self.engine.config.jobs),
                         nav="outcomes")

    def outcome(self, request: Request) -> Response:
        q = request.query_params
        return self.outcome_page(q.get("key", ""), message=q.get("msg", ""))

    def outcome_page(self, key: str, *, message: str = "", error: str = "",
                     status: int = 200) -> Response:
        found = story(self.engine, key) if key else None
        if found is None:
            return self.page("message.html", 404, title="No such outcome",
                             message=f"no outcome {key!r} in the ledger")
        return self.page("outcome.html", status, s=found, error=error, message=message,
                         nav="outcomes")

    async def verify(self, request: Request) -> Response:
        form = await request.form()
        key = str(form.get("key") or "")
        if not self.guard.csrf_ok(str(form.get("csrf") or ""), "verify", [key]):
            return PlainTextResponse("retrysafe: the form's CSRF token is wrong\n", 403)
        from ..verify import verify_outcome

        try:
            checks = await run_in_threadpool(verify_outcome, self.engine, key)
        except RetrysafeError as exc:
            return self.page("_verify.html", 400, checks=[], ok=False, error=exc.message)
        return self.page("_verify.html", checks=checks, ok=all(c.ok for c in checks), error="")

    def metrics(self, request: Request) -> Response:
        from ..metrics import render

        return Response(render(self.engine.existing_ledger(), self.history),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- actions ----------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        action = request.path_params["action"]
        if not self.settings.allow_actions:
            return PlainTextResponse("retrysafe: actions are off: this dashboard was started "
                                     "without --allow-actions\n", 403)
        if action not in ACTIONS:
            return PlainTextResponse(f"retrysafe: no action {action!r}\n", 404)
        form = await request.form()
        key = str(form.get("key") or "")
        step = str(form.get("step") or "")
        fields = [key, step] if action in ("resolve", "approve") else [key]
        if not self.guard.csrf_ok(str(form.get("csrf") or ""), action, fields):
            return PlainTextResponse("retrysafe: the form's CSRF token is wrong; reload the page "
                                     "and try again\n", 403)
        who = str(form.get("who") or self.settings.operator).strip()
        note = str(form.get("note") or "").strip()
        try:
            if not WHO.match(who):
                raise InvalidInput("your name: letters, digits and . _ @ + - (at most 64)")
            done = await run_in_threadpool(self._decide, action, key, step, f"ui:{who}", note,
                                           dict(form))
        except RetrysafeError as exc:
            return await run_in_threadpool(self.outcome_page, key, error=exc.message,
                                           status=400 if exc.exit_code == 2 else 409)
        return RedirectResponse("/outcome?" + urlencode({"key": key, "msg": done}), status_code=303)

    def _decide(self, action: str, key: str, step: str, actor: str, note: str,
                form: dict[str, Any]) -> str:
        """One decision, through the library call the command of the same name makes."""
        ledger = self.engine.existing_ledger()
        if action == "resolve":
            from ..process import attempt_liveness

            verdict = str(form.get("verdict") or "")
            evidence = str(form.get("evidence") or "").strip()
            if verdict not in ("found", "absent"):
                raise InvalidInput("choose found (with the evidence) or absent")
            if verdict == "found" and not evidence:
                raise InvalidInput("found needs the evidence (provider id, URL, SHA...)")
            got = ledger.resolve(key, step, found=evidence if verdict == "found" else None,
                                 actor=actor, note=note, liveness=attempt_liveness)
            return f"{got.state}: step {got.name} ({got.reason})"
        if action == "approve":
            approved = ledger.approve(key, step, actor=actor, note=note)
            return f"approved: step {approved.name}; run the job again to continue"
        if action == "retry":
            out = ledger.retry(key, actor=actor, note=note)
            return f"{out.state}: {out.reason}"
        broken = self.engine.break_lease(key, actor=actor, note=note)
        return f"broken: attempt {broken.number} ({broken.result}); run the job again to continue"


def create_app(engine: Engine, settings: Settings) -> Starlette:
    """The dashboard over ``engine``'s ledger."""
    d = _Dashboard(engine, settings)

    async def not_found(request: Request, exc: Exception) -> Response:
        return d.page("message.html", 404, title="Not found", message=request.url.path)

    async def refused(request: Request, exc: Exception) -> Response:
        # what the command would print as its one line (the ledger unreachable, a bad value)
        message = exc.message if isinstance(exc, RetrysafeError) else str(exc)
        return d.page("message.html", 400 if isinstance(exc, InvalidInput) else 503,
                      title="The ledger could not answer", message=message)

    return Starlette(
        routes=[
            Route("/", d.attention),
            Route("/outcomes", d.outcomes),
            Route("/outcome", d.outcome),
            Route("/verify", d.verify, methods=["POST"]),
            Route("/act/{action}", d.act, methods=["POST"]),
            Route("/login", d.login, methods=["GET", "POST"]),
            Route("/metrics", d.metrics),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=d.gate)],
        exception_handlers={404: not_found, RetrysafeError: refused},
    )
