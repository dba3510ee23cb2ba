"""Every command line in docs/openclaw.md and the README's OpenClaw line runs as written.

Only paths are substituted (/opt/retrysafe/bin/retrysafe, /srv/retrysafe,
/srv/reports). ``openclaw`` is a stub on PATH that records its arguments (the
real gateway is scripts/e2e-openclaw's tier); the ``--command`` an
``openclaw cron add`` line hands it is then run the way OpenClaw runs it:
``sh -lc`` in ``--command-cwd`` with an empty environment and a reset PATH.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "openclaw.md").read_text()
README = (ROOT / "README.md").read_text()
RETRYSAFE = Path(sys.executable).parent / "retrysafe"

STUB = """#!/bin/sh
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$OPENCLAW_STUB_LOG"
if [ "$1" = --version ]; then echo 'OpenClaw 2026.9.6 (0000000)'; exit 0; fi
echo '{}'
"""

MAIL = """#!/bin/sh
echo "$RETRYSAFE_STEP_KEY" >> /srv/reports/sent.log
echo "<$(grep -c '' /srv/reports/sent.log)@mail>"
"""


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)


def commands(block: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each command of a shell block."""
    lines = block.replace("\\\n", "").splitlines()
    prompt = any(ln.startswith("$ ") for ln in lines)
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        if prompt and line.startswith("$ "):
            out.append((line[2:], []))
        elif prompt and out:
            out[-1][1].append(line)
        elif not prompt and line.strip() and not line.lstrip().startswith("#"):
            out.append((line, []))
    return out


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "/opt/retrysafe/bin/retrysafe": RETRYSAFE,
        "/srv/retrysafe": tmp_path / "rs-home",
        "/srv/reports": tmp_path / "reports",
    }
    for folder in ("/srv/retrysafe", "/srv/reports"):
        paths[folder].mkdir()
    (tmp_path / "user" / ".openclaw" / "workspace").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    return {**paths, "tmp": tmp_path}


def sub(text: str, world: dict[str, Path]) -> str:
    for doc_path in ("/opt/retrysafe/bin/retrysafe", "/srv/retrysafe", "/srv/reports"):
        text = text.replace(doc_path, str(world[doc_path]))
    return text


def unsub(text: str, world: dict[str, Path]) -> str:
    for doc_path in ("/opt/retrysafe/bin/retrysafe", "/srv/retrysafe", "/srv/reports"):
        text = text.replace(str(world[doc_path]), doc_path)
    return text


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def run_as_openclaw(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """What the gateway does with a command job: sh -lc in --command-cwd, PATH reset."""
    command = argv[argv.index("--command") + 1]
    cwd = argv[argv.index("--command-cwd") + 1]
    home = str(Path(cwd).parent)
    return subprocess.run(
        ["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", "sh", "-lc", command],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )


def shell(world: dict[str, Path], command: str) -> subprocess.CompletedProcess[str]:
    tmp = world["tmp"]
    env = {
        "HOME": str(tmp / "user"),
        "PATH": os.pathsep.join([str(tmp / "bin"), str(RETRYSAFE.parent), "/usr/bin", "/bin"]),
        "RETRYSAFE_HOME": str(world["/srv/retrysafe"]),
        "OPENCLAW_STUB_LOG": str(tmp / "openclaw.log"),
    }
    return subprocess.run(["bash", "-c", sub(command, world)], cwd=world["/srv/reports"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def stub_calls(world: dict[str, Path]) -> list[list[str]]:
    log = world["tmp"] / "openclaw.log"
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def setup_world(world: dict[str, Path]) -> None:
    (config,) = blocks("toml")
    write(world["/srv/retrysafe"] / "retrysafe.toml", config)
    (script,) = [b for b in blocks("sh") if b.startswith("#!/bin/sh")]
    write(world["/srv/reports"] / "send-report.sh", sub(script, world), 0o755)
    write(world["/srv/reports"] / "mail-report.sh", sub(MAIL, world), 0o755)
    write(world["tmp"] / "bin" / "openclaw", STUB, 0o755)
    # OpenClaw's config with the plugin configured as the doc shows (for openclaw doctor)
    (plugin_config,) = blocks("json")
    entry = {"enabled": True, "hooks": {"allowConversationAccess": True},
             "config": json.loads(sub(plugin_config, world))}
    write(world["tmp"] / "user" / ".openclaw" / "openclaw.json",
          json.dumps({"plugins": {"entries": {"retrysafe": entry}}}))


def check_command(world: dict[str, Path], command: str, expected: list[str]) -> None:
    before = len(stub_calls(world))
    done = shell(world, command)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    if "cron-command" in command:
        assert unsub(done.stdout, world).splitlines() == expected, done.stdout
    for argv in stub_calls(world)[before:]:
        if "--command" in argv:
            ran = run_as_openclaw(argv)
            assert ran.returncode == 0, f"{argv}\n{ran.stdout}\n{ran.stderr}"
            last = ran.stdout.splitlines()[-1]
            assert re.match(r"(done|skipped): |missed --run: .* 0 blocked, 0 not done", last), ran.stdout


def test_every_command_in_the_openclaw_doc_runs_as_written(world: dict[str, Path]) -> None:
    """Each shell line of docs/openclaw.md exits 0; printed lines match; command jobs run."""
    setup_world(world)
    ran = []
    for block in blocks("sh"):
        if block.startswith("#!/bin/sh"):
            continue
        for command, expected in commands(block):
            check_command(world, command, expected)
            ran.append(command.split()[0:3])
    assert ["openclaw", "cron", "add"] in ran and ["retrysafe", "openclaw", "install-plugin"] in ran
    calls = stub_calls(world)
    assert any(c[:2] == ["plugins", "install"] for c in calls)
    assert any("--message" in c for c in calls)
    # every command job ran the script's one effect once per occurrence
    sent = (world["/srv/reports"] / "sent.log").read_text().splitlines()
    assert len(sent) == len(set(sent)) >= 2


def test_readme_openclaw_line_runs_as_written(world: dict[str, Path]) -> None:
    """The README's 'openclaw cron add' line, run by OpenClaw's rules, does the work once."""
    setup_world(world)
    (line,) = re.findall(r"In an OpenClaw cron job:\n`([^`]+)`", README)
    check_command(world, line, [])
    check_command(world, line, [])
    (argv,) = stub_calls(world)[:1]
    assert shlex.split(sub(line, world))[1:] == argv
    assert len((world["/srv/reports"] / "sent.log").read_text().splitlines()) == 1
