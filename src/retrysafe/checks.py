"""Acceptance checks that are not shell commands: a URL that must answer (seed 000's
"see the production URL").

A job's ``accept`` list holds shell commands and, besides them, tables::

    accept = [
      "test -s report.md",
      { url = "{publish.url}", status = 200, contains = "Week 32" },
      { url = "https://blog.example/health", match = "version: [0-9a-f]{7}", within = 60 },
    ]

A URL check fetches ``url`` (redirects followed) and passes when the final
answer has ``status`` (default 200) and its body holds ``contains`` (a
substring) and matches ``match`` (a regular expression, searched anywhere),
when given. ``within`` keeps trying for that many seconds (a deploy that is
still propagating); the default is one try. The URL may name ``{key}`` (the
outcome key) and ``{STEP.FIELD}``, a named field of a done step's evidence
(``{publish.url}``: the link the publish step recorded). Close-out runs it
before an outcome is ``done``; ``retrysafe verify`` runs it again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .evidence import fields_of

if TYPE_CHECKING:
    from .ledger import StepRecord

__all__ = ["DEFAULT_CHECK_TIMEOUT", "ShellResult", "UrlCheck", "parse_accept", "run_shell_check"]

DEFAULT_CHECK_TIMEOUT = 600.0
"""Seconds an acceptance or verify command may take when the job sets no ``check_timeout``."""


@dataclass(frozen=True)
class ShellResult:
    """How a check command ended: its exit status (``None``: it timed out) and the
    last line it printed (stderr first), decoded whatever its bytes."""

    returncode: int | None
    tail: str


def run_shell_check(cmd: str, env: Mapping[str, str], *, cwd: Any = None,
                    timeout: float | None = None) -> ShellResult:
    """Run a check command (``/bin/sh -c``) in a process group of its own; past
    ``timeout`` (default :data:`DEFAULT_CHECK_TIMEOUT`) the whole group is killed.
    Its output is read as bytes: text that is not UTF-8 never makes a check fail
    or raise; only the exit status decides."""
    import contextlib
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(["/bin/sh", "-c", cmd], cwd=cwd, env=dict(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=DEFAULT_CHECK_TIMEOUT if timeout is None else timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return ShellResult(None, "")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    lines = (err or out).decode("utf-8", "replace").strip().splitlines()
    return ShellResult(proc.returncode, lines[-1] if lines else "")

_FIELDS = frozenset({"url", "status", "contains", "match", "within", "timeout"})
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_SHOWN_BODY = 120


@dataclass(frozen=True)
class UrlCheck:
    """GET ``url``; pass on ``status`` and a body with ``contains`` / matching ``match``."""

    url: str
    status: int = 200
    contains: str | None = None
    match: str | None = None
    within: float = 0.0
    timeout: float = 10.0

    def __str__(self) -> str:
        wants = [f"status {self.status}"]
        if self.contains is not None:
            wants.append(f"text {self.contains!r}")
        if self.match is not None:
            wants.append(f"a match of /{self.match}/")
        return f"GET {self.url} ({', '.join(wants)})"

    def target(self, key: str, steps: Sequence[StepRecord]) -> str:
        """The URL with ``{key}`` and ``{STEP.FIELD}`` filled in; :class:`ConfigError`
        names a placeholder that has no value."""
        values = {"key": key}
        for step in steps:
            if step.state == "done":
                name = step.name + (f"/{step.item}" if step.item else "")
                values.update({f"{name}.{f}": str(v) for f, v in fields_of(step.evidence).items()})

        def fill(m: re.Match[str]) -> str:
            try:
                return values[m[1]]
            except KeyError:
                raise ConfigError(f"acceptance URL {self.url}: nothing recorded for {{{m[1]}}} "
                                  "(use {key} or {STEP.FIELD} of a done step's evidence)") from None

        return _PLACEHOLDER.sub(fill, self.url)

    def problem(self, key: str, steps: Sequence[StepRecord]) -> str | None:
        """Why the check fails now (``None``: it passes)."""
        try:
            url = self.target(key, steps)
        except ConfigError as exc:
            return str(exc)
        if not url.startswith(("http://", "https://")):
            return f"acceptance URL {url!r} is not an http:// or https:// URL"
        deadline = time.monotonic() + self.within
        while True:
            problem = self._once(url)
            if problem is None or time.monotonic() >= deadline:
                return problem
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _once(self, url: str) -> str | None:
        import httpx  # imported on use: most runs have no URL check

        try:
            # http(s) only: checked once the URL is filled in
            resp = httpx.get(url, headers={"User-Agent": "retrysafe-accept"},
                             timeout=self.timeout, follow_redirects=True)
            status, body = resp.status_code, resp.content
        except httpx.HTTPError as exc:
            return f"acceptance URL {url} did not answer: {exc or type(exc).__name__}"
        text = body.decode("utf-8", errors="replace")
        shown = " ".join(text.split())[:_SHOWN_BODY]
        if status != self.status:
            return f"acceptance URL {url} answered {status}, not {self.status}: {shown}"
        if self.contains is not None and self.contains not in text:
            return f"acceptance URL {url} answered {status} without the text {self.contains!r}"
        if self.match is not None and not re.search(self.match, text):
            return f"acceptance URL {url} answered {status} with nothing matching /{self.match}/"
        return None


def _url_check(job: str, table: Mapping[str, Any]) -> UrlCheck:
    where = f"job {job!r}: acceptance check"
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        known = ", ".join(sorted(_FIELDS))
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {known})")
    url = table.get("url")
    if not isinstance(url, str) or not re.match(r"(https?://|\{)", url):
        raise ConfigError(f"{where}: 'url' must be an http:// or https:// URL "
                          "(or start with a {placeholder})")
    status = table.get("status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ConfigError(f"{where}: 'status' must be an HTTP status (100-599)")
    for name in ("contains", "match"):
        if name in table and not (isinstance(table[name], str) and table[name]):
            raise ConfigError(f"{where}: {name!r} must be a non-empty string")
    if "match" in table:
        try:
            re.compile(table["match"])
        except re.error as exc:
            raise ConfigError(f"{where}: 'match' is not a regular expression: {exc}") from None
    seconds = {}
    for name, default in (("within", 0.0), ("timeout", 10.0)):
        value = table.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"{where}: {name!r} must be a number of seconds, at least 0")
        seconds[name] = float(value)
    return UrlCheck(url, status, table.get("contains"), table.get("match"), **seconds)


def parse_accept(job: str, value: Any) -> tuple[str | UrlCheck, ...]:
    """A job's ``accept``: shell commands (strings) and URL checks (tables)."""
    if isinstance(value, str | Mapping):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"job {job!r}: 'accept' must be a list of commands and URL checks")
    out: list[str | UrlCheck] = []
    for entry in value:
        if isinstance(entry, str) and entry:
            out.append(entry)
        elif isinstance(entry, Mapping):
            out.append(_url_check(job, entry))
        else:
            raise ConfigError(f"job {job!r}: each 'accept' entry is a command (a string) "
                              "or a URL check (a table)")
    return tuple(out)
