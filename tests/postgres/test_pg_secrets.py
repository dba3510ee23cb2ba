"""A ledger password against a server that checks it: a command run under an
attempt connects with the password from PGPASSWORD, its RETRYSAFE_LEDGER
carries none, and nothing prints it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from pgrace import worker_env
from pgtest import ThrowawayServer
from psycopg import sql

pytestmark = pytest.mark.postgres

SECRET = "s#cr?t/pa@ss:w"
"""Every character a URL parser trips on."""


def _cli(home: Path, ledger: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**worker_env(), "RETRYSAFE_HOME": str(home), "RETRYSAFE_LEDGER": ledger}
    env.pop("PGPASSWORD", None)
    return subprocess.run([sys.executable, "-m", "retrysafe", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_step_under_run_authenticates_with_pgpassword_only(password_server: ThrowawayServer,
                                                           tmp_path: Path) -> None:
    """The run's URL holds the password (percent-encoded); its command's `retrysafe
    step` gets the URL without it and PGPASSWORD with it, and the server (which
    checks passwords) lets it record the step."""
    with psycopg.connect(password_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE worker LOGIN PASSWORD {}").format(sql.Literal(SECRET)))
        conn.execute("CREATE DATABASE ledger OWNER worker")
    url = f"postgresql://worker:{quote(SECRET, safe='')}@127.0.0.1:{password_server.port}/ledger"
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text('[jobs.report]\nkey = "report:{n}"\nparams = { n = "int" }\n')
    dump = tmp_path / "env.json"
    step = shlex.join([sys.executable, "-m", "retrysafe", "step", "send", "--class", "message",
                       "--", "echo", "sent"])
    script = (f"{shlex.quote(sys.executable)} -c 'import json, os, sys; "
              f"json.dump(dict(os.environ), open(sys.argv[1], \"w\"))' {shlex.quote(str(dump))}"
              f" && {step}")
    run = _cli(home, url, "run", "report", "-p", "n=1", "--", "sh", "-c", script)
    assert run.returncode == 0, run.stderr
    env = json.loads(dump.read_text())
    assert env["RETRYSAFE_LEDGER"] == f"postgresql://worker@127.0.0.1:{password_server.port}/ledger"
    assert env["PGPASSWORD"] == SECRET
    status = _cli(home, url, "status", "report:1", "--json")
    assert [(s["name"], s["state"]) for s in json.loads(status.stdout)["steps"]] == [("send", "done")]
    wrong = _cli(home, url.replace("worker:", "worker:x"), "status", "report:1")
    assert wrong.returncode == 2 and "refused the credentials" in wrong.stderr
    for proc in (run, status, wrong, _cli(home, url, "doctor")):
        out = proc.stdout + proc.stderr
        assert SECRET not in out and quote(SECRET, safe="") not in out and "pa@ss" not in out
