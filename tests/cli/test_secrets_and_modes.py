"""Passwords, file modes and symbolic links, black box: the CLI as real processes.

* a ledger password, however it is typed, is never printed and never handed
  to a command in ``RETRYSAFE_LEDGER`` (it goes in ``PGPASSWORD``);
* a new home is ``0700`` and its files ``0600`` (a stricter umask still wins),
  and a rewritten file keeps its mode and owner;
* a symbolic link planted below the home is refused (exit 2), never written
  through;
* a connection setting libpq refuses is a configuration error (exit 2), not
  "try again later".
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from support import Home

from retrysafe.ledger import child_env, display_url

PY = sys.executable
SECRET = "Pa#ss?w/o@rd:1"
"""A password with every character that breaks a naive URL parser."""
PIECES = ("Pa#ss", "ss?w", "w/o", "o@rd", "rd:1")
"""Fragments of it that must not show either."""

CONFIG = """
    [jobs.report]
    key = "report:{week}"
    params = { week = "isoweek" }
    max_attempts = 3
    lease_seconds = 60
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_password(dsn: str, password: str, *, encode: bool = True) -> str:
    """``dsn`` with ``password`` in its user part, percent-encoded as a careful
    user writes it, or raw as a hurried one types it."""
    parts = urlsplit(dsn)
    user, _, host = parts.netloc.rpartition("@")
    secret = quote(password, safe="") if encode else password
    return urlunsplit((parts.scheme, f"{user or 'postgres'}:{secret}@{host}", parts.path,
                       parts.query, ""))


def _leaks(text: str) -> list[str]:
    spellings = (SECRET, quote(SECRET, safe=""), *PIECES)
    return [s for s in spellings if s in text]


def _ready(home: Home) -> Home:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)
    return home


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _run_with_umask(home: Home, umask: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(home.cmd(*args), env=home.env, capture_output=True, text=True,
                          timeout=120, check=False, umask=umask)


# --- passwords ------------------------------------------------------------------


URL_FORMS = [
    pytest.param(f"postgresql://worker:{quote(SECRET, safe='')}@db.internal:5432/ops",
                 "postgresql://worker@db.internal:5432/ops", SECRET, id="encoded"),
    pytest.param(f"postgresql://worker:{SECRET}@db.internal:5432/ops",
                 "postgresql://worker@db.internal:5432/ops", SECRET, id="raw"),
    pytest.param("postgresql://worker:Pa#ss?w@db/ops?sslmode=require",
                 "postgresql://worker@db/ops?sslmode=require", "Pa#ss?w", id="raw-libpq-reads-it"),
    pytest.param(f"postgres://worker@db/ops?password={quote(SECRET, safe='')}&sslmode=require",
                 "postgres://worker@db/ops?sslmode=require", SECRET, id="parameter"),
    pytest.param(f"postgresql://worker@db/ops?sslmode=require&password={SECRET}",
                 "postgresql://worker@db/ops?sslmode=require", SECRET, id="raw-parameter"),
    pytest.param(f"host=db user=worker password='{SECRET}' dbname=ops",
                 "host=db user=worker  dbname=ops", SECRET, id="keyword-quoted"),
    pytest.param(f"host=db password={SECRET} dbname=ops",
                 "host=db  dbname=ops", SECRET, id="keyword-bare"),
]


@pytest.mark.parametrize(("url", "bare", "password"), URL_FORMS)
def test_password_is_masked_and_moved_out_however_it_is_typed(url: str, bare: str,
                                                              password: str) -> None:
    """The display form hides the whole password (no fragment left), and the
    child's URL has none: it travels in PGPASSWORD, as libpq would read it."""
    shown = display_url(url)
    assert "***" in shown and not _leaks(shown), shown
    env = child_env(url)
    assert env["RETRYSAFE_LEDGER"] == bare
    assert env["PGPASSWORD"] == password
    assert not _leaks(env["RETRYSAFE_LEDGER"])


def test_password_never_printed_by_doctor_status_or_errors(home: Home) -> None:
    """doctor, a reading command and a running command, with the password typed
    raw or percent-encoded, against a server that is not there: every output line
    shows the URL masked, never the password or a piece of it."""
    _ready(home)
    port = _free_port()
    for encode in (True, False):
        url = _with_password(f"postgresql://worker@127.0.0.1:{port}/ops", SECRET, encode=encode)
        env = {"RETRYSAFE_LEDGER": url}
        doctor = home.run("doctor", env=env)
        assert doctor.returncode == 1
        assert "worker:***@127.0.0.1" in doctor.stdout
        as_json = home.run("doctor", "--json", env=env)
        assert json.loads(as_json.stdout)["ledger"].startswith("postgresql://worker:***@")
        status = home.run("status", "report:2026-W01", env=env)
        run = home.run("run", "report", "-p", "week=2026-W01", "--", "true", env=env)
        # unreachable: try later; a raw password libpq would misread: fix the URL
        expected = 75 if encode else 2
        assert (status.returncode, run.returncode) == (expected, expected), status.stderr
        for proc in (doctor, as_json, status, run):
            out = proc.stdout + proc.stderr
            assert not _leaks(out), out
            assert "Traceback" not in out
        assert status.stderr.count("\n") == 1 and "***" in status.stderr


def test_password_in_a_keyword_string_is_not_echoed(home: Home) -> None:
    """A libpq key=value string is not a ledger URL: refused (exit 2) without
    echoing its password."""
    _ready(home)
    proc = home.run("status", "report:2026-W01",
                    env={"RETRYSAFE_LEDGER": f"host=db user=worker password='{SECRET}'"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert not _leaks(proc.stdout + proc.stderr) and "password=***" in proc.stderr


@pytest.mark.postgres
def test_child_gets_the_url_without_the_password_and_still_connects(home: Home, tmp_path: Path,
                                                                      pg_dsn: str) -> None:
    """A command under `retrysafe run` sees RETRYSAFE_LEDGER without the password
    and PGPASSWORD with it; its `retrysafe step` reaches the ledger; no file of
    the attempt and no output holds the password."""
    _ready(home)
    url = _with_password(pg_dsn, SECRET)
    home.env["RETRYSAFE_LEDGER"] = url
    home.env.pop("PGPASSWORD", None)
    dump = tmp_path / "env.json"
    step = shlex.join([*home.cmd(), "step", "send", "--class", "message", "--", "echo", "sent"])
    script = (f"{shlex.quote(PY)} -c 'import json, os, sys; json.dump(dict(os.environ), "
              f"open(sys.argv[1], \"w\"))' {shlex.quote(str(dump))} && {step}")
    proc = home.run("run", "report", "-p", "week=2026-W05", "--", "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    env = json.loads(dump.read_text())
    assert env["PGPASSWORD"] == SECRET
    assert env["RETRYSAFE_LEDGER"] == url.replace(":" + quote(SECRET, safe=""), "", 1)
    assert not [k for k, v in env.items() if k != "PGPASSWORD" and _leaks(v)]
    status = home.run("status", "report:2026-W05", "--json")
    steps = json.loads(status.stdout)["steps"]
    assert [(s["name"], s["state"]) for s in steps] == [("send", "done")]
    outputs = [proc.stdout, proc.stderr, status.stdout, status.stderr,
               home.run("doctor", "--json").stdout, home.run("history", "report:2026-W05").stdout]
    files = [p.read_text() for p in home.path.rglob("*") if p.is_file()]
    assert not [t for t in outputs + files if _leaks(t)]


# --- connection settings libpq refuses -------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("setting", ["connect_timeout=x", "sslmode=bogus"])
def test_a_bad_connection_setting_is_a_usage_error_not_try_later(home: Home, pg_dsn: str,
                                                                  setting: str) -> None:
    """A setting libpq refuses exits 2 (fix the configuration) with one line
    naming it, never 75 (try again later), and runs nothing."""
    _ready(home)
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}{setting}"
    for args in (["status", "report:2026-W01"],
                 ["run", "report", "-p", "week=2026-W01", "--", "touch", str(home.path / "ran")]):
        proc = home.run(*args, env={"RETRYSAFE_LEDGER": url})
        assert proc.returncode == 2, (proc.returncode, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "not valid" in proc.stderr
        assert setting.split("=")[1] in proc.stderr
    assert not (home.path / "ran").exists()


# --- file modes --------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_new_home_is_private_whatever_the_umask(home: Home, tmp_path: Path, umask: int) -> None:
    """A home created by retrysafe is 0700 and every file in it 0600 (the ledger,
    its -wal and -shm while a run holds them, the config, status.json, summary.json,
    log.jsonl), under a permissive and a strict umask (0600 & ~umask, 0700 & ~umask)."""
    probe = tmp_path / "modes.json"
    code = ("import json, os, stat, sys; h = os.environ['RETRYSAFE_HOME']; "
            "json.dump({n: stat.S_IMODE(os.stat(os.path.join(h, n)).st_mode) for n in "
            "os.listdir(h) if n.startswith('ledger')}, open(sys.argv[1], 'w'))")
    assert _run_with_umask(home, umask, "job", "add", "report", "--key", "report:{week}",
                           "--param", "week=isoweek").returncode == 0
    proc = _run_with_umask(home, umask, "run", "report", "-p", "week=2026-W10", "--",
                           PY, "-c", code, str(probe))
    assert proc.returncode == 0, proc.stderr
    during = json.loads(probe.read_text())
    assert {"ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"} <= set(during)
    assert set(during.values()) == {0o600}
    assert _mode(home.path) == 0o700
    for path in home.path.rglob("*"):
        expected = 0o700 if path.is_dir() else 0o600
        assert _mode(path) == expected, (path, oct(_mode(path)))


def test_rewritten_files_keep_their_mode(home: Home) -> None:
    """`job add` leaves a 0640 config 0640 (it used to become 0644), and a
    summary.json a person made 0640 stays 0640 when a later attempt rewrites it."""
    _ready(home)
    config = home.path / "retrysafe.toml"
    config.chmod(0o640)
    proc = _run_with_umask(home, 0o022, "job", "add", "other", "--key", "other:{n}",
                           "--param", "n=int")
    assert proc.returncode == 0, proc.stderr
    assert "[jobs.other]" in config.read_text() and _mode(config) == 0o640
    assert home.run("run", "report", "-p", "week=2026-W11", "--", "false").returncode != 0
    summary = home.path / "runs" / "report" / "report+2026-W11" / "summary.json"
    summary.chmod(0o640)
    before = summary.read_text()
    assert home.run("run", "report", "-p", "week=2026-W11", "--", "true").returncode == 0
    assert summary.read_text() != before and _mode(summary) == 0o640


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_rewritten_config_keeps_its_owner(home: Home) -> None:
    """A config owned by another user (root rewriting it) keeps that owner and mode."""
    _ready(home)
    config = home.path / "retrysafe.toml"
    os.chown(config, 65534, 65534)
    config.chmod(0o600)
    proc = home.run("job", "add", "other", "--key", "other:{n}", "--param", "n=int")
    assert proc.returncode == 0, proc.stderr
    st = os.stat(config)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)


# --- symbolic links ----------------------------------------------------------------


def _victim(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder outside the home with a file in it, and its content."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "log.jsonl").write_bytes(b"precious\n")
    (elsewhere / "summary.json").write_bytes(b"precious\n")
    return elsewhere, {p.name: p.read_bytes() for p in elsewhere.iterdir()}


def _assert_refused(proc: subprocess.CompletedProcess[str], link: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "symbolic link" in proc.stderr and str(link) in proc.stderr


def test_linked_job_folder_is_refused_and_not_written_through(home: Home, tmp_path: Path) -> None:
    """runs/JOB planted as a link to another folder: the run exits 2 naming it,
    and nothing is created or changed in the folder it points to."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    (home.path / "runs").mkdir()
    link = home.path / "runs" / "report"
    link.symlink_to(elsewhere, target_is_directory=True)
    proc = home.run("run", "report", "-p", "week=2026-W20", "--", "true")
    _assert_refused(proc, link)
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_linked_runs_folder_is_refused(home: Home, tmp_path: Path) -> None:
    """runs/ itself as a link: refused (the home may be a link, nothing below it)."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    (home.path / "runs").symlink_to(elsewhere, target_is_directory=True)
    proc = home.run("run", "report", "-p", "week=2026-W20", "--", "true")
    _assert_refused(proc, home.path / "runs")
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_home_itself_may_be_a_link(tmp_path: Path) -> None:
    """The home given as a link to a real folder works as usual."""
    real = tmp_path / "real-home"
    real.mkdir()
    (tmp_path / "home").symlink_to(real, target_is_directory=True)
    home = _ready(Home(tmp_path / "home"))
    assert home.run("run", "report", "-p", "week=2026-W20", "--", "true").returncode == 0
    assert (real / "runs" / "report" / "report+2026-W20" / "summary.json").is_file()


def test_linked_log_is_refused_by_a_step_and_not_appended_to(home: Home, tmp_path: Path) -> None:
    """The attempt's log.jsonl replaced by a link while the run goes on: the step
    command exits 2 naming it, and the file it points to is untouched."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    victim = elsewhere / "log.jsonl"
    step = shlex.join([*home.cmd(), "step", "send", "--class", "message", "--", "echo", "sent"])
    script = ('log="$RETRYSAFE_ATTEMPT_DIR/log.jsonl"; rm "$log" && '
              f'ln -s {shlex.quote(str(victim))} "$log" && {step}; echo "step=$?"')
    proc = home.run("run", "report", "-p", "week=2026-W21", "--", "sh", "-c", script)
    assert "step=2" in proc.stdout, (proc.stdout, proc.stderr)
    assert "symbolic link" in proc.stderr and "log.jsonl" in proc.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_linked_summary_is_refused_and_its_target_unchanged(home: Home, tmp_path: Path) -> None:
    """summary.json replaced by a link between attempts: the next run exits 2
    naming it, and the file it points to keeps its content."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    assert home.run("run", "report", "-p", "week=2026-W22", "--", "false").returncode != 0
    summary = home.path / "runs" / "report" / "report+2026-W22" / "summary.json"
    summary.unlink()
    summary.symlink_to(elsewhere / "summary.json")
    ran = tmp_path / "ran"
    proc = home.run("run", "report", "-p", "week=2026-W22", "--", "touch", str(ran))
    _assert_refused(proc, summary)
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert summary.is_symlink()
    # refused before the claim: the command did not run, no attempt was started
    assert not ran.exists()
    with home.open_ledger() as ledger:
        assert [a.number for a in ledger.attempts("report:2026-W22")] == [1]


def test_linked_outcome_folder_is_refused_before_anything_is_claimed(
        home: Home, tmp_path: Path) -> None:
    """runs/JOB/OUTCOME planted as a link: exit 2 naming it, and nothing recorded (no
    attempt left active to count against the limit), the command not run."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    (home.path / "runs" / "report").mkdir(parents=True)
    link = home.path / "runs" / "report" / "report+2026-W23"
    link.symlink_to(elsewhere, target_is_directory=True)
    ran = tmp_path / "ran"
    proc = home.run("run", "report", "-p", "week=2026-W23", "--", "touch", str(ran))
    _assert_refused(proc, link)
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert not ran.exists()
    with home.open_ledger() as ledger:
        assert ledger.outcome("report:2026-W23") is None


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_step_output_logs_are_private_whatever_the_umask(home: Home, umask: int) -> None:
    """What a step's command and its check print is kept in ``step-NAME.log`` and
    ``step-NAME.check.out``: 0600 like every other file of the home."""
    _ready(home)
    step = shlex.join([*home.cmd(), "step", "send", "--class", "message",
                       "--check", "echo absent >&2; exit 1", "--", "echo", "secret-output"])
    proc = _run_with_umask(home, umask, "run", "report", "-p", "week=2026-W30", "--",
                           "sh", "-c", step)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = home.path / "runs/report/report+2026-W30/attempt-1"
    logs = sorted(p.name for p in folder.glob("step-*"))
    assert logs == ["step-send.check.out", "step-send.log"]
    assert {_mode(folder / n) for n in logs} == {0o600}


@pytest.mark.parametrize("name", ["step-send.log", "step-send.check.out"])
def test_linked_step_log_is_refused_before_the_step_records_anything(
        home: Home, tmp_path: Path, name: str) -> None:
    """A link planted where a step keeps its command's output: the step exits 2 naming
    it before it records anything or runs its command; the file it points to is
    untouched."""
    _ready(home)
    elsewhere, before = _victim(tmp_path)
    sent = tmp_path / "sent"
    step = shlex.join([*home.cmd(), "step", "send", "--class", "message",
                       "--check", "exit 1", "--", "sh", "-c", f"echo x >> {sent}; echo overwritten"])
    script = (f'ln -s {shlex.quote(str(elsewhere / "log.jsonl"))} '
              f'"$RETRYSAFE_ATTEMPT_DIR/{name}" && {step}; echo "step=$?"')
    proc = home.run("run", "report", "-p", "week=2026-W31", "--", "sh", "-c", script)
    assert "step=2" in proc.stdout, (proc.stdout, proc.stderr)
    assert "symbolic link" in proc.stderr and name in proc.stderr
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert not sent.exists()
    with home.open_ledger() as ledger:
        assert ledger.step("report:2026-W31/send") is None
