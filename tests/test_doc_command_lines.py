"""Every shell command line of the README and docs/*.md runs as written, or says why not.

The lines are the ones of fenced ``sh``/``bash``/``console``/``shell`` blocks (only the ``$ ``
lines when a block shows prompts), with ``\\`` continuations joined and comments dropped. A
block that starts with ``#!`` is a script the docs name, not lines to paste: it is written to
the working folder as that script. docs/openclaw.md has its own test
(tests/openclaw/test_docs_commands.py) and is left out here.

Each doc file gets a world of its own: a temporary home (``RETRYSAFE_HOME``) whose
``retrysafe.toml`` declares the jobs, connectors and channels the docs use (:data:`CONFIG`;
connectors point at a loopback HTTP server, a local git repository with a bare remote, and
folders of the world), a working folder holding the scripts the docs run, and ``PATH`` with
this checkout's ``.venv/bin`` first. Lines run in doc order under ``sh -c`` in that working
folder; an ``export`` line's variables carry over to the lines after it. A ``retrysafe step``
line runs inside an attempt, as the docs say steps do: the world begins one
(``retrysafe begin``) and hands its id to the line in ``RETRYSAFE_ATTEMPT_ID``.

What is substituted is in :data:`SUBSTITUTE` (paths of another machine, placeholder URLs);
the exit code each line must have is 0 unless :data:`EXIT_CODES` says otherwise. Lines that
cannot run here are in :data:`NOT_RUN` with the reason; a collected line that is neither run
nor listed fails the test, and so does a listed line the docs no longer show.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOCS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md") if p.name != "openclaw.md"),
]

# (doc, line) -> why the line does not run here. A key ending in "*" is a prefix.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "scripts/demo"): "runs scripts/setup (creates .venv, installs packages) first",
    ("README.md", "scripts/test"): "the whole test suite, of which this test is a part",
    ("README.md", "pip install ."): "installs from a package index into the current environment",
    ("README.md", "pip install '.[postgres]'"): "installs from a package index",
    ("README.md", "uv tool install '.[postgres]'"): "installs from a package index",
    ("docs/dashboard.md", "pip install 'retrysafe[ui]'"): "installs from a package index",
    ("docs/dashboard.md", "retrysafe ui"): "a server that runs until stopped (tests/ui)",
    ("docs/dashboard.md", "retrysafe ui --allow-actions --name alice"):
        "a server that runs until stopped (tests/ui)",
    ("docs/many-machines.md", "pip install 'retrysafe[postgres]'"): "installs from a package index",
    ("docs/drills.md", ".venv/bin/python -m pytest -m real_drill "
     "tests/drills/test_content_real_servers.py"): "heavy tier: real WordPress and Synapse",
    ("docs/reliability.md", "scripts/reliability-report"): "heavy tier: the full chaos suite",
    ("docs/reliability.md", "model/check"): "minutes of SPIN model checking: tests/test_model_check.py runs every check (the SQLite explorations with -m heavy)",
    ("docs/reliability.md", "model/check mutant-no-fence"):
        "SPIN model checking: tests/test_model_check.py runs every check",
    ("docs/performance.md", "bench/run_all*"): "the benchmark tier (minutes)",
    ("docs/performance.md", "python bench/*"): "the benchmark tier (minutes)",
    ("docs/connectors/email.md", "sudo apt-get install -y dovecot-imapd openssl"):
        "installs Debian packages as root",
    ("docs/connectors/email.md", "pytest tests/connectors/email"):
        "the email connector's own tests (SMTP and Dovecot IMAP servers)",
    ("docs/connectors/email.md", "retrysafe run weekly-report -p week=2026-W32 -- "
     "sh -c 'retrysafe step send --connector mail --with to=team@example.com "
     "--with \"subject=Week 32\" --with body_file=runs/…/report.txt'"):
        "needs an SMTP and an IMAP server (tests/connectors/email); runs/… is a placeholder",
    ("docs/connectors/matrix.md", "retrysafe step notify --connector team --with body=\"Week 32 is out\""):
        "needs a Matrix homeserver (tests/connectors/matrix)",
    ("docs/connectors/sheets.md", "retrysafe step log --connector pipeline-log --with "
     "title=\"Week 32\" --with url=\"https://...\""): "Google Sheets API (cloud)",
    ("docs/connectors/slack.md", "retrysafe step notify --connector team-chat --with "
     "text=\"Week 32 is out\""): "Slack API (cloud)",
    ("docs/connectors/stripe.md", "retrysafe step charge --connector billing --payload charge.json"):
        "Stripe API (cloud)",
    ("docs/connectors/wordpress.md", "retrysafe step publish --connector blog --payload post.json"):
        "needs a WordPress site (tests/drills/test_content_real_servers.py)",
    ("docs/connectors/wordpress.md", "retrysafe step publish --connector blog --with "
     "title=\"Week 32\" --with content=\"<p>...</p>\""):
        "needs a WordPress site (tests/drills/test_content_real_servers.py)",
}

# (doc, line) -> why the line runs in an attempt of its own (another outcome: week 33) rather
# than in the one the doc's other step lines share.
OWN_ATTEMPT: dict[tuple[str, str], str] = {
    ("docs/connectors/http.md", "retrysafe step notify --connector crm --payload note.json"):
        "an alternative to the line above it: the same step name with another payload",
}

# (doc, line) -> (exit code, why). Every other line that runs must exit 0.
EXIT_CODES: dict[tuple[str, str], tuple[int, str]] = {}

# Text of the docs that stands for something of another machine -> what it becomes here
# ({tmp} is the world's folder, {pg} a fresh PostgreSQL database of the test server).
SUBSTITUTE = {
    "/var/lib/node_exporter/textfile": "{tmp}/textfile",
    "postgresql://retrysafe@db.internal:5432/ops": "{pg}",
}

# the jobs the docs use, left out of a world whose doc declares the job itself (job add)
JOBS = {
    "weekly-ops-report": """\
[jobs.weekly-ops-report]
key = "weekly-ops-report:{week}"
params = { week = "isoweek" }

[jobs.weekly-ops-report.notify.channels.hc]
type = "ping"
url = "{http}/ping/weekly-ops-report"
""",
    "weekly-report": """\
[jobs.weekly-report]
key = "weekly-report:{week}"
params = { week = "isoweek" }
""",
}

CONFIG = """\
[notify.channels.ops]
type = "webhook"
url = "{http}/hook"

[connectors.site]
type = "file"
target = "{tmp}/www/{key}.html"

[connectors.notes]
type = "git"
repo = "{tmp}/notes"
branch = "main"

[connectors.notes-push]
type = "git_push"
repo = "{tmp}/notes"
remote = "origin"
branch = "main"

[connectors.crm]
type = "http"
url = "{http}/api/notes"
body = { kind = "weekly", ref = "{key}" }
token_env = "CRM_TOKEN"
evidence_field = "data.id"
lookup_url = "{http}/api/notes/by-key/{key}"
lookup_attempts = 1

[connectors.sheet]
type = "csv"
path = "{tmp}/shared/report-log.csv"
columns = ["week", "title", "url"]
"""

# the helpers the README's send-report.sh calls; the send is a line in sent.log
SCRIPTS = {
    "render-report.sh": '#!/bin/sh\nprintf "# Ops report, week 32\\n" > "$RETRYSAFE_OUTPUT"\n',
    "send-mail.sh": (
        "#!/bin/sh\n"
        'n=$(($(grep -c "" sent.log 2>/dev/null || true) + 1))\n'
        'echo "$RETRYSAFE_STEP_KEY <$n@mail>" >> sent.log\n'
        'echo "<$n@mail>"\n'
    ),
    "find-in-sent.sh": (
        "#!/bin/sh\n"
        'line=$(grep -F -- "$1 " sent.log 2>/dev/null | head -n 1)\n'
        '[ -n "$line" ] || exit 1\n'
        'echo "${line##* }"\n'
    ),
}


@dataclass(frozen=True)
class Line:
    doc: str
    number: int
    text: str
    block: int


def strip_comment(line: str) -> str:
    """The line without a shell comment (a ``#`` at a word start, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_blocks(doc: str) -> Iterator[tuple[int, str]]:
    """(line number of the block's first line, text) of each shell block of a doc."""
    text = (ROOT / doc).read_text()
    for m in re.finditer(r"^```(sh|bash|console|shell)\n(.*?)^```", text, flags=re.S | re.M):
        yield text[: m.start(2)].count("\n") + 1, m.group(2)


def lines_of(doc: str) -> list[Line]:
    out: list[Line] = []
    for index, (first, block) in enumerate(shell_blocks(doc)):
        if block.startswith("#!"):
            continue
        raw = block.splitlines()
        prompt = any(r.startswith("$ ") for r in raw)
        i = 0
        while i < len(raw):
            number, text = first + i, raw[i]
            while text.endswith("\\") and i + 1 < len(raw):
                i += 1
                text = text[:-1].rstrip() + " " + raw[i].strip()
            i += 1
            if prompt:
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            text = " ".join(strip_comment(text).split())
            if text:
                out.append(Line(doc, number, text, index))
    return out


ALL = [line for doc in DOCS for line in lines_of(doc)]


def listed(entry: str, text: str) -> bool:
    return text == entry or (entry.endswith("*") and text.startswith(entry[:-1]))


def not_run(line: Line) -> str | None:
    for (doc, text), why in NOT_RUN.items():
        if doc == line.doc and listed(text, line.text):
            return why
    return None


def test_every_doc_line_is_run_or_listed_with_a_reason() -> None:
    """Each collected line is a retrysafe/export line (run below) or is in NOT_RUN."""
    assert len(ALL) > 30
    unhandled = [
        f"{ln.doc}:{ln.number}: {ln.text}" for ln in ALL
        if not_run(ln) is None and not re.match(r"(\w+=\S* )*(retrysafe|export) ", ln.text + " ")
    ]
    assert not unhandled, "doc lines neither run nor listed in NOT_RUN:\n" + "\n".join(unhandled)


def test_every_listed_line_is_still_in_the_docs() -> None:
    """NOT_RUN, EXIT_CODES and SUBSTITUTE name only what the docs still show."""
    collected = {(ln.doc, ln.text) for ln in ALL}
    stale = [k for k in NOT_RUN if not any(d == k[0] and listed(k[1], t) for d, t in collected)]
    stale += [k for k in [*EXIT_CODES, *OWN_ATTEMPT]
              if k not in collected or not_run(Line(k[0], 0, k[1], 0))]
    assert not stale, f"listed lines the docs no longer show: {stale}"
    for placeholder in SUBSTITUTE:
        assert any(placeholder in ln.text for ln in ALL if not_run(ln) is None), placeholder


# --- the world -------------------------------------------------------------------------------


class _Api(BaseHTTPRequestHandler):
    """crm's notes API (by key), the notification webhook and the ping URL."""

    notes: ClassVar[dict[str, str]] = {}
    received: ClassVar[list[tuple[str, str]]] = []

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self.received.append(("GET", self.path))
        if self.path.startswith("/api/notes/by-key/"):
            key = unquote(self.path.removeprefix("/api/notes/by-key/"))
            if key in self.notes:
                self._answer(200, {"data": {"id": self.notes[key]}})
            else:
                self._answer(404, {"error": "not found"})
        else:
            self._answer(200, {"ok": True})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.received.append(("POST", self.path))
        if self.path == "/api/notes":
            assert self.headers["Authorization"] == "Bearer crm-token"
            ref = json.loads(body)["ref"]
            self.notes.setdefault(ref, f"note-{len(self.notes) + 1}")
            self._answer(201, {"data": {"id": self.notes[ref]}})
        else:
            self._answer(200, {"ok": True})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def api() -> Iterator[type[_Api]]:
    handler = type("Api", (_Api,), {"notes": {}, "received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class World:
    def __init__(self, tmp: Path, http: str, pg: str, doc: str) -> None:
        self.tmp, self.work, self.home = tmp, tmp / "work", tmp / "home"
        self.values = {"{tmp}": str(tmp), "{http}": http, "{pg}": pg}
        for folder in (self.work, self.home, tmp / "www", tmp / "shared", tmp / "textfile"):
            folder.mkdir()
        added = {m.group(1) for ln in ALL if ln.doc == doc
                 for m in [re.match(r"retrysafe job add (\S+)", ln.text)] if m}
        jobs = "\n".join(text for name, text in JOBS.items() if name not in added)
        (self.home / "retrysafe.toml").write_text(self.fill(jobs + "\n" + CONFIG))
        for name, text in SCRIPTS.items():
            self.script(name, text)
        for doc in DOCS:  # the scripts the docs show (a block starting with #!)
            for _, block in shell_blocks(doc):
                named = re.match(r"#!.*\n# (\S+\.sh):", block)
                if named:
                    self.script(named.group(1), block)
        (self.work / "report.html").write_text("<h1>Week 32</h1>\n")
        (self.work / "note.json").write_text(json.dumps({"title": "Week 32", "week": 32}))
        notes = tmp / "notes"
        git(tmp, "init", "-q", "--bare", "-b", "main", "remote.git")
        git(tmp, "init", "-q", "-b", "main", "notes")
        for key, value in (("user.name", "Ops"), ("user.email", "ops@example.com")):
            git(notes, "config", key, value)
        git(notes, "remote", "add", "origin", str(tmp / "remote.git"))
        (notes / "README").write_text("notes\n")
        git(notes, "add", "README")
        git(notes, "commit", "-q", "-m", "start")
        git(notes, "push", "-q", "origin", "main")
        (notes / "reports").mkdir()
        (notes / "reports" / "w32.md").write_text("# Week 32\n")
        self.env = {
            "HOME": str(tmp),
            "PATH": os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
            "RETRYSAFE_HOME": str(self.home),
            "CRM_TOKEN": "crm-token",
            "REPORT": str(self.work / "report.html"),
            "LANG": "C.UTF-8",
        }
        if not pg:  # a ledger with some history (weekly-report's week 31), as a home in use has
            earlier = self.sh("retrysafe run weekly-report -p week=2026-W31 -- true")
            assert earlier.returncode == 0, earlier.stderr

    def fill(self, text: str) -> str:
        for name, value in self.values.items():
            text = text.replace(name, value)
        return text

    def script(self, name: str, text: str) -> None:
        path = self.work / name
        path.write_text(text)
        path.chmod(0o755)

    def sh(self, command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command], cwd=self.work, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=120, check=False)

    def run_line(self, line: Line, attempt: dict[str, str]) -> subprocess.CompletedProcess[str]:
        command = line.text
        for placeholder, value in SUBSTITUTE.items():
            command = command.replace(placeholder, self.fill(value))
        if command.startswith("export "):
            saved = self.tmp / "env"
            done = self.sh(command + f"\nenv -0 > '{saved}'")
            if done.returncode == 0:
                self.env = dict(v.split("=", 1) for v in saved.read_text().split("\0") if "=" in v)
            return done
        return self.sh(command, attempt if re.match(r"retrysafe step ", command) else None)

    def attempt(self, week: str = "2026-W32") -> dict[str, str]:
        """An attempt the doc's step lines run in (an outcome of weekly-report)."""
        begun = self.sh(f"retrysafe begin weekly-report -p week={week} --json")
        assert begun.returncode == 0, begun.stderr
        data = json.loads(begun.stdout)
        return {"RETRYSAFE_ATTEMPT_ID": data["attempt_id"], "RETRYSAFE_OUTCOME_KEY": data["key"],
                "RETRYSAFE_JOB": data["job"]}


def close(world: World, attempt: dict[str, str]) -> None:
    closed = world.sh(f"retrysafe close {attempt['RETRYSAFE_OUTCOME_KEY']} --json", attempt)
    assert closed.returncode == 0 and json.loads(closed.stdout)["state"] == "done", closed


def run_doc(doc: str, tmp: Path, http: str, pg: str) -> World:
    world = World(tmp, http, pg, doc)
    lines = [ln for ln in ALL if ln.doc == doc and not_run(ln) is None]
    assert lines, f"{doc}: no line runs; drop it from the parameters"
    shared = [ln for ln in lines if (doc, ln.text) not in OWN_ATTEMPT]
    attempt = world.attempt() if any(ln.text.startswith("retrysafe step ") for ln in shared) else {}
    for line in lines:
        own = world.attempt("2026-W33") if (doc, line.text) in OWN_ATTEMPT else None
        done = world.run_line(line, own or attempt)
        if own:
            close(world, own)
        code, _why = EXIT_CODES.get((doc, line.text), (0, ""))
        assert done.returncode == code, (
            f"{doc}:{line.number}: exit {done.returncode}, documented {code}\n$ {line.text}\n"
            f"{done.stdout}\n{done.stderr}"
        )
    if attempt:
        close(world, attempt)
    return world


RUN_DOCS = sorted({ln.doc for ln in ALL if not_run(ln) is None})


@pytest.mark.parametrize("doc", RUN_DOCS)
def test_doc_lines_run_as_written(doc: str, tmp_path: Path, api: type[_Api],
                                  request: pytest.FixtureRequest) -> None:
    """Each line of the doc that runs here exits with its documented code, in doc order."""
    needs_pg = any("postgresql://" in ln.text for ln in ALL if ln.doc == doc and not_run(ln) is None)
    pg = request.getfixturevalue("pg_dsn") if needs_pg else ""
    world = run_doc(doc, tmp_path, api.url, pg)  # type: ignore[attr-defined]
    if doc == "README.md":  # the report was sent once, though the job ran twice
        assert len((world.work / "sent.log").read_text().splitlines()) == 1
    if doc == "docs/connectors/http.md":  # two notes, each created once
        assert len(api.notes) == 2
    if doc == "docs/connectors/git.md":
        log = subprocess.run(["git", "log", "--format=%s", "main"], cwd=tmp_path / "remote.git",
                             capture_output=True, text=True, check=True).stdout
        assert log.splitlines()[0] == "Add week 32"
    if doc == "docs/notifications.md":
        assert ("POST", "/hook") in api.received
