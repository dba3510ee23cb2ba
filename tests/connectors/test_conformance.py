"""The connector contract, checked the same way for every connector type.

Each case below drives one registered type against its real system (files,
a CSV file, SQLite and PostgreSQL tables, git repositories and a bare remote,
an HTTP API process, SMTP and IMAP servers) and reads that system back by its
own means, never through the connector, so a connector that lies fails here.
"""

from __future__ import annotations

import csv
import hashlib
import imaplib
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_systems import Api, Repos, SqlTarget, open_sql_target
from mailservers import DOMAIN, PASSWORD, MailServers

import retrysafe
from retrysafe.connectors import ABSENT, CONNECTOR_TYPES, ConnectorBase, Found, build_connector
from retrysafe.connectors.files import slug_of
from retrysafe.errors import ConfigError, InvalidInput
from retrysafe.evidence import fields_of, from_column, to_column

ALICE = f"alice@{DOMAIN}"


class Case:
    """One connector type on its real system: how to use it and how to read the system back."""

    type_name = ""
    #: why ``verify`` cannot be shown to notice a changed target, if it cannot
    verify_skip: str | None = None

    def __init__(self, config: dict[str, Any], bad: list[tuple[dict[str, Any], str]]) -> None:
        self.config = config
        self.bad = bad  # payloads validate must refuse, with a part of the message

    def connector(self) -> ConnectorBase:
        return build_connector("under-test", {"type": self.type_name, **self.config})

    def payload(self) -> dict[str, Any]:
        """A good payload for a new effect (JSON-serialisable, for the child process)."""
        raise NotImplementedError

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        """The evidence of the effect for ``key``, read from the system itself; None if absent."""
        raise NotImplementedError

    def count(self, key: str, payload: dict[str, Any]) -> int:
        """How many effects for ``key`` the system holds, read by its own means."""
        raise NotImplementedError

    def state(self) -> Any:
        """Everything an effect could change, to compare before and after."""
        raise NotImplementedError

    def before_rerun(self) -> None:
        """Make a second effect possible, so a re-run that repeats it would show."""

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        """Change the system so the recorded evidence no longer holds."""
        raise NotImplementedError


class FileCase(Case):
    type_name = "file"

    def __init__(self, tmp_path: Path) -> None:
        self.www = tmp_path / "www"
        self.www.mkdir()
        self.artifact = tmp_path / "attempt-1" / "report.html"
        self.artifact.parent.mkdir()
        self.artifact.write_text("<h1>Week 32</h1>\n")
        missing = str(tmp_path / "missing.html")
        super().__init__(
            {"target": f"{self.www}/{{key}}.html"},
            [
                ({}, "payload needs 'source'"),
                ({"source": missing}, "is not a readable file"),
                ({"source": str(self.artifact), "overwrite": "perhaps"}, "must be true or false"),
                ({"source": str(self.artifact), "target": "out/{key}.html"}, "must be an absolute path"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"source": str(self.artifact)}

    def _target(self, key: str) -> Path:
        return self.www / f"{slug_of(key)}.html"

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        target = self._target(key)
        if not target.exists():
            return None
        return f"sha256:{hashlib.sha256(target.read_bytes()).hexdigest()}@{target}"

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return sum(1 for p in self.www.iterdir() if p.read_bytes() == self.artifact.read_bytes())

    def state(self) -> Any:
        return sorted((p.name, p.stat().st_ino, p.stat().st_mtime_ns) for p in self.www.iterdir())

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        self._target(key).write_text("edited by hand\n")


class CsvCase(Case):
    type_name = "csv"

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "log.csv"
        self.path.write_text("title,retrysafe_key\n")
        super().__init__(
            {"path": str(self.path)},
            [
                ({"title": "x", "colour": "red"}, "no column(s) colour"),
                ({"retrysafe_key": "forged"}, "must not set the key column"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"title": "Week 32"}

    def _rows(self) -> list[list[str]]:
        with self.path.open(newline="") as fh:
            return list(csv.reader(fh))[1:]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        rows = [i for i, row in enumerate(self._rows()) if row[1] == key]
        return f"{self.path}#{rows[0] + 2}" if rows else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return sum(1 for row in self._rows() if row[1] == key)

    def state(self) -> Any:
        return self.path.read_bytes(), self.path.stat().st_ino

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        kept = [row for row in self._rows() if row[1] != key]
        self.path.write_text("".join(",".join(row) + "\n" for row in [["title", "retrysafe_key"], *kept]))


class SqlCase(Case):
    type_name = "sql"

    def __init__(self, target: SqlTarget) -> None:
        self.target = target
        super().__init__(
            {"url": target.url, "table": target.table, "id_column": "id"},
            [
                ({"title; DROP TABLE items": "x"}, "not a plain identifier"),
                ({"title": "x", "retrysafe_key": "forged"}, "must not set the key column"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"title": "Week 32", "amount": 7}

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        ids = [row[0] for row in self.target.rows() if row[1] == key]
        return f"{self.target.table}#{ids[0]}" if ids else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return sum(1 for row in self.target.rows() if row[1] == key)

    def state(self) -> Any:
        return self.target.rows()

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        self.target.execute(f"DELETE FROM items WHERE retrysafe_key = '{key}'")


class GitCommitCase(Case):
    type_name = "git"

    def __init__(self, repos: Repos) -> None:
        self.repos = repos
        self.written: list[Path] = []
        super().__init__(
            {"repo": str(repos.work), "branch": "main"},
            [
                ({"paths": "w32.md"}, "needs a 'message'"),
                ({"paths": " , ", "message": "Add"}, "names no path"),
                ({"paths": "../outside.md", "message": "Add"}, "not a file inside the repository"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        path = self.repos.work / f"report-{len(self.written)}.md"
        path.write_text("# Week 32\n")
        self.written.append(path)
        return {"paths": path.name, "message": "Add the week 32 report"}

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self.repos.keyed(self.repos.work, "main", key)
        return found[0] if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self.repos.keyed(self.repos.work, "main", key))

    def state(self) -> Any:
        return self.repos.git(self.repos.work, "for-each-ref", "--format=%(refname) %(objectname)")

    def before_rerun(self) -> None:
        for path in self.written:  # a changed file could be committed again
            path.write_text("# Week 32, regenerated\n")

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        self.repos.git(self.repos.work, "reset", "-q", "--hard", "HEAD~1")


class GitPushCase(Case):
    type_name = "git_push"

    def __init__(self, repos: Repos, tmp_path: Path) -> None:
        self.repos = repos
        self.commits = 0
        super().__init__(
            {"repo": str(repos.work), "branch": "main"},
            [
                ({"repo": "relative/repo"}, "must be an absolute path"),
                ({"repo": str(tmp_path / "nowhere")}, "does not exist"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        """A new local commit, not yet on the remote: the push lookup goes by commit."""
        self.commits += 1
        work = self.repos.work
        (work / f"note-{self.commits}.md").write_text(f"note {self.commits}\n")
        self.repos.git(work, "add", f"note-{self.commits}.md")
        self.repos.git(work, "commit", "-q", "-m", f"Note {self.commits}")
        return {"sha": self.repos.git(work, "rev-parse", "HEAD")}

    def _on_remote(self, sha: str) -> bool:
        remote = self.repos.remote
        head = self.repos.git(remote, "rev-parse", "main")
        return subprocess.run(["git", "-C", str(remote), "merge-base", "--is-ancestor", sha, head]).returncode == 0

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        return f"origin/main@{payload['sha']}" if self._on_remote(payload["sha"]) else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return 1 if self._on_remote(payload["sha"]) else 0

    def state(self) -> Any:
        return self.repos.git(self.repos.remote, "for-each-ref", "--format=%(refname) %(objectname)")

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        # Someone force-pushes the remote branch back: the commit is no longer on it.
        self.repos.git(self.repos.work, "push", "-q", "-f", "origin", f"{payload['sha']}~1:main")


class HttpCase(Case):
    type_name = "http"

    def __init__(self, api: Api) -> None:
        self.api = api
        super().__init__(
            api.config("plain"),
            [({"title": "Weekly report", "when": object()}, "not JSON-serialisable")],
        )

    def payload(self) -> dict[str, Any]:
        return {"title": "Weekly report"}

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self.api.resources("plain", key)
        return str(found[0]["id"]) if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self.api.resources("plain", key))

    def state(self) -> Any:
        return self.api.resources("plain")

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        for resource in self.api.resources("plain", key):
            self.api.delete("plain", resource["id"])


class EmailCase(Case):
    type_name = "email"

    def __init__(self, mail: MailServers) -> None:
        self.mail = mail
        super().__init__(
            {k: v for k, v in mail.config().items() if k != "type"},
            [
                ({"subject": "s", "body": "b"}, "'to' is missing"),
                ({"to": "alice", "subject": "s", "body": "b"}, "malformed address in 'to'"),
                ({"to": ALICE, "subject": "s", "body": "b", "bcc": ALICE}, "unknown field(s) bcc"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"to": ALICE, "subject": "Weekly ops report", "body": "All green.\n"}

    def _received(self, key: str) -> list[Any]:
        return [m for m in self.mail.messages("alice") if m["X-Retrysafe-Key"] == key]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self._received(key)
        return str(found[0]["Message-ID"]) if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._received(key))

    def state(self) -> Any:
        # The servers serve the whole run: only this test's messages matter.
        return sorted(
            (folder, str(m["Message-ID"]))
            for user, folder in (("alice", "INBOX"), ("ops", "Sent"))
            for m in self.mail.messages(user, folder)
            if str(m["X-Retrysafe-Key"]).startswith(KEY_PREFIX)
        )

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        # Someone deletes the copy in the Sent folder, where the connector keeps its record.
        imap = imaplib.IMAP4("127.0.0.1", self.mail.imap_port)
        try:
            imap.login("ops", PASSWORD)
            imap.select("Sent")
            _, data = imap.uid("SEARCH", "HEADER", "X-Retrysafe-Key", key)
            uids = data[0].decode().split()
            assert uids, f"no Sent copy for {key}"
            imap.uid("STORE", ",".join(uids), "+FLAGS", "(\\Deleted)")
            imap.expunge()
        finally:
            imap.logout()


KEY_PREFIX = "conformance:"

# type name, then the system when one type runs on several
CASES = [
    "email",
    "git",
    "git_push",
    "http",
    "csv",
    "sql-sqlite",
    pytest.param("sql-postgresql", marks=pytest.mark.postgres),
    "file",
]


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    """Each connector type on its real system."""
    kind = request.param
    if kind.startswith("sql-"):
        with open_sql_target(kind.removeprefix("sql-"), request, tmp_path) as target:
            yield SqlCase(target)
    elif kind == "file":
        yield FileCase(tmp_path)
    elif kind == "csv":
        yield CsvCase(tmp_path)
    elif kind == "git":
        yield GitCommitCase(request.getfixturevalue("repos"))
    elif kind == "git_push":
        yield GitPushCase(request.getfixturevalue("repos"), tmp_path)
    elif kind == "http":
        yield HttpCase(request.getfixturevalue("api"))
    else:
        yield EmailCase(request.getfixturevalue("mail"))


@pytest.fixture
def key() -> str:
    """A step key no other test uses (the mail servers live for the whole run)."""
    return f"{KEY_PREFIX}2026-W32/{uuid.uuid4().hex[:8]}/effect"


# --- the registry -------------------------------------------------------------------------


def test_every_registered_type_is_in_the_conformance_suite() -> None:
    """A new connector type cannot be registered without passing this suite."""
    kinds = [c if isinstance(c, str) else c.values[0] for c in CASES]
    assert sorted(CONNECTOR_TYPES) == sorted({str(kind).split("-")[0] for kind in kinds})


@pytest.mark.parametrize("type_name", sorted(CONNECTOR_TYPES))
def test_each_registered_class_carries_the_type_name_it_is_registered_under(type_name: str) -> None:
    """The type name is written once (the registry); the class learns it from there."""
    from retrysafe.connectors import connector_class

    cls = connector_class(type_name)
    assert issubclass(cls, ConnectorBase)
    assert cls.type_name == type_name
    assert cls.from_config.__func__ is not ConnectorBase.from_config.__func__  # type: ignore[attr-defined]


def test_an_unknown_type_is_refused_naming_the_known_ones() -> None:
    """A typo in ``type`` is a one-line ConfigError that lists every known type."""
    with pytest.raises(ConfigError) as raised:
        build_connector("site", {"type": "ftp"})
    known = ", ".join(sorted(CONNECTOR_TYPES))
    assert str(raised.value) == f"unknown connector type 'ftp' (known: {known})"
    with pytest.raises(ConfigError, match="missing 'type'"):
        build_connector("site", {})


def test_building_one_type_imports_no_other_connector() -> None:
    """A job that publishes a file never imports the email, git, HTTP or table code."""
    code = (
        "import json, sys\n"
        "from retrysafe.connectors import build_connector\n"
        "build_connector('site', {'type': 'file', 'target': '/srv/{key}'})\n"
        "print(json.dumps([m for m in sys.modules if m.startswith('retrysafe.connectors.')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    assert "retrysafe.connectors.files" in loaded
    assert not loaded & {
        "retrysafe.connectors.email",
        "retrysafe.connectors.git",
        "retrysafe.connectors.http",
        "retrysafe.connectors.table",
    }


def test_execute_and_lookup_are_required() -> None:
    """A connector that leaves out execute or lookup cannot even be made."""

    class NoLookup(ConnectorBase):
        def execute(self, step_key: str, payload: Any) -> str:
            return step_key

    with pytest.raises(TypeError, match="lookup"):
        NoLookup()  # type: ignore[abstract]


# --- the contract, for every connector --------------------------------------------------------


def test_validate_refuses_bad_payloads_and_records_nothing(case: Case, tmp_path: Path) -> None:
    """Each bad payload is a one-line InvalidInput from validate; neither the system nor
    the ledger changes, also when it goes through the engine."""
    conn = case.connector()
    conn.validate(case.payload())  # the good payload passes
    before = case.state()
    for payload, message in case.bad:
        with pytest.raises(InvalidInput) as raised:
            conn.validate(payload)
        assert message in str(raised.value) and "\n" not in str(raised.value)
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        '[jobs.conformance]\nkey = "conformance:{week}"\nparams = { week = "isoweek" }\n'
    )
    with retrysafe.start("conformance", {"week": "2026-W32"}, home=home) as run:
        for payload, message in case.bad:
            with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
                run.effect("effect", connector=conn, payload=payload)
        assert run.ledger.steps(run.key) == []
    assert case.state() == before


def test_execute_then_lookup_finds_the_effect_with_its_evidence(case: Case, key: str) -> None:
    """Before: Absent. After execute: the system holds one effect, whose evidence is what
    execute returned and what lookup finds; count agrees."""
    conn = case.connector()
    payload = case.payload()
    assert conn.lookup(key, payload) == ABSENT
    evidence = conn.execute(key, payload)
    assert evidence == case.evidence(key, payload)
    result = conn.lookup(key, payload)
    assert isinstance(result, Found) and result.evidence == evidence
    assert case.count(key, payload) == 1
    assert conn.count(key) == 1


def test_lookup_of_a_key_never_used_is_absent(case: Case, key: str) -> None:
    """With another effect already made, lookup of a key never used still says Absent."""
    conn = case.connector()
    conn.execute(key, case.payload())
    other, payload = f"{key}-never-used", case.payload()
    assert conn.lookup(other, payload) == ABSENT
    assert case.evidence(other, payload) is None


def test_sigkill_right_after_execute_then_rerun_finds_the_effect_and_does_not_repeat_it(
    case: Case, key: str, spawn: Any
) -> None:
    """A real process is SIGKILLed the moment execute returns (nothing recorded); the
    re-run looks first, finds the effect with its evidence and changes nothing."""
    payload = case.payload()
    code, out = spawn(case.type_name, case.config, key, payload, kill_after_execute=True)
    assert code == -signal.SIGKILL and out is None
    evidence = case.evidence(key, payload)
    assert evidence is not None and case.count(key, payload) == 1
    case.before_rerun()
    before = case.state()

    code, out = spawn(case.type_name, case.config, key, payload)
    assert (code, out) == (0, {"found": evidence})
    assert case.count(key, payload) == 1
    assert case.state() == before


#: the named fields each type's evidence carries (an id and a URL where the system has one);
#: email (Message-ID) and git (SHA) evidence is the id itself, with no fields
EVIDENCE_FIELDS = {
    "wordpress": {"id", "url", "slug", "status"},
    "matrix": {"event_id", "room", "url"},
    "slack": {"channel", "ts"},
    "discord": {"id", "channel_id"},
    "telegram": {"chat_id", "message_id"},
    "stripe": {"id", "status", "amount", "currency"},
    "sheets": {"row", "worksheet", "url"},
    "http": {"id"},
    "csv": {"path", "row"},
    "sql": {"table", "id"},
    "file": {"path", "sha256"},
    "git_push": {"remote", "branch", "sha"},
    "email": set(),
    "git": set(),
}


def test_evidence_names_its_fields_and_the_ledger_column_keeps_them(case: Case, key: str) -> None:
    """execute and lookup both answer evidence with the type's named fields; stored in the
    ledger's text column and read back, the value and the fields are unchanged."""
    conn = case.connector()
    payload = case.payload()
    expected = EVIDENCE_FIELDS[case.type_name]
    evidence = conn.execute(key, payload)
    assert set(fields_of(evidence)) >= expected
    stored = from_column(to_column(evidence))
    assert stored == evidence and str(stored) == str(evidence)
    assert fields_of(stored) == fields_of(evidence)
    result = conn.lookup(key, payload)
    assert isinstance(result, Found) and set(fields_of(result.evidence)) >= expected


def test_verify_notices_when_the_target_changed(case: Case, key: str) -> None:
    """verify holds right after execute and fails once someone changed the target."""
    if case.verify_skip:
        pytest.skip(case.verify_skip)
    conn = case.connector()
    payload = case.payload()
    evidence = conn.execute(key, payload)
    assert conn.verify(key, evidence)
    case.change_target(key, payload)
    assert not conn.verify(key, evidence)


# --- connectors on servers of their own: WordPress, Matrix (cases_servers.py) -----------------

from cases_servers import synapse, synapse_server, with_server_cases, wordpress, wordpress_site  # noqa: E402, F401

case = with_server_cases(case, CASES)


# --- connectors on contract stand-ins: Slack, Discord, Telegram, Stripe, Sheets (cases_services.py)

from cases_services import with_service_cases  # noqa: E402

case = with_service_cases(case, CASES)
