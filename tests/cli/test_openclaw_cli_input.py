"""``retrysafe openclaw ...`` given bad input: one line and exit 2, never a traceback.

``--openclaw PATH`` that is not an openclaw executable, ``cron-command -p``
(the printed line must work when pasted), and ``runs --json`` times in the
ISO 8601 form every other ``--json`` prints. No gateway: ``openclaw`` here is a
stub that answers ``cron list`` and ``cron runs`` with fixed JSON.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import Home, executable

REPORT = """
[jobs.report]
key = "report:{region}:{occurrence}"
schedule = "0 7 * * 1"
params = { region = "str", occurrence = "occurrence" }
"""


@pytest.fixture
def env(home: Home, tmp_path: Path) -> dict[str, str]:
    """OpenClaw's state folder of the test, not the user's."""
    state = tmp_path / "openclaw-state"
    state.mkdir()
    home.path.mkdir()
    home.config(REPORT)
    return {"OPENCLAW_STATE_DIR": str(state), "OPENCLAW_CONFIG_PATH": ""}


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert lines and "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert lines[-1].startswith("retrysafe: "), done.stderr
    for word in words:
        assert word in lines[-1], lines[-1]
    return lines[-1]


# --- --openclaw PATH ----------------------------------------------------------

COMMANDS = [("openclaw", "install-plugin"), ("openclaw", "doctor"), ("openclaw", "runs", "report")]


def bad_openclaw(kind: str, tmp_path: Path) -> Path:
    if kind == "missing":
        return tmp_path / "no-such-openclaw"
    if kind == "folder":
        (tmp_path / "a-folder").mkdir()
        return tmp_path / "a-folder"
    if kind == "not executable":
        (tmp_path / "plain-file").write_text("#!/bin/sh\nexit 0\n")
        return tmp_path / "plain-file"
    assert kind == "not a program"  # executable bit, but neither a binary nor a script
    return executable(tmp_path / "text-file", "just some words\n")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[1])
@pytest.mark.parametrize(("kind", "says"), [
    ("missing", "no such file"), ("folder", "is a folder"), ("not executable", "not executable"),
    ("not a program", "cannot be run"),
])
def test_openclaw_path_that_cannot_run_is_one_line_exit_2(
    home: Home, env: dict[str, str], tmp_path: Path, command: tuple[str, ...], kind: str, says: str
) -> None:
    path = bad_openclaw(kind, tmp_path)
    done = home.run(*command, "--openclaw", str(path), env=env)
    one_line_error(done, 2, f"{path}: ", says)
    assert done.stdout == ""  # nothing checked, nothing installed


FAILS = "#!/bin/sh\necho 'usage: something else' >&2\nexit 1\n"
GARBAGE = "#!/bin/sh\necho 'hello, I am not openclaw'\n"


@pytest.mark.parametrize("script", [FAILS, GARBAGE], ids=["exits-1", "prints-garbage"])
def test_runs_with_a_program_that_is_not_openclaw(
    home: Home, env: dict[str, str], tmp_path: Path, script: str
) -> None:
    fake = executable(tmp_path / "fake", script)
    done = home.run("openclaw", "runs", "report", "--openclaw", str(fake), env=env)
    one_line_error(done, 2, str(fake), "cron list")


@pytest.mark.parametrize("script", [FAILS, GARBAGE], ids=["exits-1", "prints-garbage"])
def test_doctor_with_a_program_that_is_not_openclaw(
    home: Home, env: dict[str, str], tmp_path: Path, script: str
) -> None:
    """Doctor reports what it could not check, as for a gateway that is down: a
    warn line with the reason; exit 1 here because the plugin check fails."""
    fake = executable(tmp_path / "fake", script)
    done = home.run("openclaw", "doctor", "--openclaw", str(fake), env=env)
    assert done.returncode == 1 and done.stderr == "", done.stderr
    (cron,) = [ln for ln in done.stdout.splitlines() if ln.startswith("warn cron jobs:")]
    assert ("usage: something else" if script == FAILS else "no JSON") in cron


def test_install_plugin_with_a_program_that_fails(
    home: Home, env: dict[str, str], tmp_path: Path
) -> None:
    fake = executable(tmp_path / "fake", FAILS)
    done = home.run("openclaw", "install-plugin", "--openclaw", str(fake), env=env)
    one_line_error(done, 2, str(fake), "plugins install", "exited 1")
    assert "then configure it" not in done.stdout


ODD_SHAPES = """#!/bin/sh
case "$2" in
list) echo '{"jobs": [5, {"payload": {"argv": ["sh", "-lc", 5]}},
      {"payload": {"command": "/x/retrysafe run report -p region=eu -- ./a"}},
      {"id": "j1", "payload": {"command": "/x/retrysafe run report -p region=eu -- ./a"}}]}';;
runs) echo '{"entries": [{"runAtMs": 1e20}, {"runAtMs": -5}, {"runAtMs": "soon"}, 7]}';;
esac
"""


@pytest.mark.parametrize("command", [("doctor",), ("runs", "report")], ids=["doctor", "runs"])
def test_json_of_another_shape_is_no_traceback(
    home: Home, env: dict[str, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A program that answers JSON, but not OpenClaw's: what fits is read, the rest skipped."""
    fake = executable(tmp_path / "fake", ODD_SHAPES)
    assert home.run("run", "report", "-p", "region=eu", "--", "true", env=env).returncode == 0
    done = home.run("openclaw", *command, "--openclaw", str(fake), env=env)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    if command[0] == "runs":
        assert (done.returncode, done.stdout) == (0, "no OpenClaw run of report yet\n")
    else:
        assert done.returncode == 1 and "FAIL cron job j1: starts with '/x/retrysafe'" in done.stdout


# --- cron-command -p ------------------------------------------------------------


def inner_command(line: str) -> list[str]:
    """The ``--command`` of a printed ``openclaw cron add`` line, as ``sh -lc`` splits it."""
    words = shlex.split(line)
    assert words[:3] == ["openclaw", "cron", "add"], line
    return shlex.split(words[words.index("--command") + 1])


def test_cron_command_carries_the_params_and_the_line_works(
    home: Home, env: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    executable(work / "send.sh", '#!/bin/sh\necho "sent $RETRYSAFE_OUTCOME_KEY" >> sent.log\n')
    done = home.run("openclaw", "cron-command", "report", "-p", "region=eu", "--cwd", str(work),
                    "--", "./send.sh", "-p", "script-own", env=env)
    assert done.returncode == 0, done.stderr
    command = inner_command(done.stdout.strip())
    cut = command.index("--")
    assert command[command.index("run") + 1:cut] == ["report", "-p", "region=eu"], command
    assert command[cut + 1:] == [str(work / "send.sh"), "-p", "script-own"]  # the script's own -p
    pasted = {k: v for k, v in {**home.env, **env}.items() if k != "RETRYSAFE_HOME"}
    ran = subprocess.run(command, cwd=work, env=pasted,
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "done: report:eu:" in ran.stdout
    assert (work / "sent.log").read_text().startswith("sent report:eu:")


@pytest.mark.parametrize(("params", "words"), [
    ((), ["missing parameter 'region'"]),
    (("-p", "region=eu", "-p", "colour=red"), ["unknown parameter 'colour'"]),
    (("-p", "region=eu", "-p", "region=us"), ["'region' given twice"]),
    (("-p", "region"), ["expected NAME=VALUE"]),
    (("-p", "region=eu", "-p", "occurrence=2026-01-05T0700"), ["occurrence", "schedule"]),
], ids=["missing", "unknown", "twice", "no-value", "occurrence"])
def test_cron_command_refuses_bad_params(
    home: Home, env: dict[str, str], params: tuple[str, ...], words: list[str]
) -> None:
    done = home.run("openclaw", "cron-command", "report", *params, "--", "/srv/send.sh", env=env)
    one_line_error(done, 2, *words)
    assert done.stdout == ""


# --- runs --json ----------------------------------------------------------------

STUB = """#!{python}
import json, sys
args = sys.argv[1:]
if args[:2] == ["cron", "list"]:
    print("banner line of the gateway")
    print(json.dumps({{"jobs": [{{"id": "job-1", "name": "report eu", "payload": {{
        "kind": "command", "command": {command!r}, "cwd": "/srv"}}}}]}}))
elif args[:2] == ["cron", "runs"]:
    print(json.dumps({{"entries": [{{"action": "finished", "status": "ok", "runAtMs": {at_ms},
        "summary": "done: report:eu:2026-01-05T0700 (attempt 1)"}}]}}))
else:
    sys.exit(2)
"""


def test_runs_json_times_are_iso_8601_utc_with_z(
    home: Home, env: dict[str, str], tmp_path: Path
) -> None:
    at_ms = 1767596405250  # 2026-01-05 07:00:05.25 UTC, a Monday
    command = f"/opt/retrysafe --home {home.path} openclaw run report -p region=eu -- ./send.sh"
    fake = executable(tmp_path / "openclaw", STUB.format(python=sys.executable, command=command,
                                                         at_ms=at_ms))
    first = home.run("run", "report", "-p", "region=eu", "--", "true", env=env)  # makes the ledger
    assert first.returncode == 0, first.stderr
    done = home.run("openclaw", "runs", "report", "--openclaw", str(fake), "--json", env=env)
    assert done.returncode == 0, done.stderr
    (joined,) = json.loads(done.stdout)
    assert joined["at"] == "2026-01-05T07:00:05.250000Z"
    assert datetime.fromisoformat(joined["at"]) == datetime.fromtimestamp(at_ms / 1000, UTC)
    assert joined["key"] == "report:eu:2026-01-05T0700" and joined["answer"] == "done"
    text = home.run("openclaw", "runs", "report", "--openclaw", str(fake), env=env)
    assert "2026-01-05 07:00:05Z" in text.stdout
