"""The deployment recipes work: the systemd service and timer (checked by systemd's own
verifier where it is installed, and their ExecStart run under a temporary home), and
the container recipe (its instructions checked, its entry point run with /data's role
played by a temporary folder). No container engine is needed."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support import Home

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERVICE = DEPLOY / "systemd" / "retrysafe-weekly-ops-report.service"
TIMER = DEPLOY / "systemd" / "retrysafe-weekly-ops-report.timer"
RETRYSAFE = str(Path(sys.executable).parent / "retrysafe")


def unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections and settings (a setting may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        name, _, value = line.partition("=")
        current.setdefault(name.strip(), []).append(value.strip())
    return sections


def job_config(path: Path) -> str:
    """The job the unit's header comment declares (lines ``#   ...`` after ``[jobs.``)."""
    lines = [ln[4:] for ln in path.read_text().splitlines() if ln.startswith("#   ")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("[jobs."))
    return "\n".join(lines[start:]) + "\n"


def local_units(tmp_path: Path) -> tuple[Path, Path]:
    """The units with this machine's executables in ExecStart and no User= (the
    verifier checks that ExecStart's program exists and the user is known)."""
    service = tmp_path / SERVICE.name
    text = SERVICE.read_text().replace("/usr/local/bin/retrysafe", RETRYSAFE)
    text = text.replace("/usr/local/bin/send-report.sh", shutil.which("true") or "/bin/true")
    service.write_text(re.sub(r"^User=.*\n", "", text, flags=re.M))
    timer = tmp_path / TIMER.name
    timer.write_text(TIMER.read_text())
    return service, timer


def test_the_timer_starts_the_service_weekly_and_catches_up_after_downtime() -> None:
    """The timer names the service next to it, on a calendar, persistently; the
    service is a oneshot whose busy exit (75) is not a failure."""
    timer, service = unit(TIMER), unit(SERVICE)
    assert timer["Timer"]["Unit"] == [SERVICE.name]
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == ["true"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    assert service["Service"]["Type"] == ["oneshot"]
    assert service["Service"]["SuccessExitStatus"] == ["75"]
    assert "RETRYSAFE_HOME=/var/lib/retrysafe" in service["Service"]["Environment"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_verifies_both_units(tmp_path: Path) -> None:
    """``systemd-analyze verify`` accepts the units without a complaint."""
    service, timer = local_units(tmp_path)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(timer), str(service)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert not re.search(r"Failed|Unknown|ignoring|bad", proc.stderr), proc.stderr


def test_the_services_execstart_runs_the_job_once_per_week(tmp_path: Path) -> None:
    """ExecStart, run twice under a temporary home holding the job its comment
    declares: the first start does the week's run, the second finds it done."""
    service, _ = local_units(tmp_path)
    home = Home(tmp_path / "state")
    home.path.mkdir()
    home.config(job_config(SERVICE))
    argv = shlex.split(unit(service)["Service"]["ExecStart"][0])
    assert argv[0] == RETRYSAFE
    first = subprocess.run(argv, env=home.env, cwd=home.path, capture_output=True, text=True,
                           timeout=120, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.startswith("done: weekly-ops-report:")
    again = subprocess.run(argv, env=home.env, cwd=home.path, capture_output=True, text=True,
                           timeout=120, check=False)
    assert again.returncode == 0 and "already done" in again.stdout


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Containerfile's instructions, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") and not pending:
            continue
        pending += raw.rstrip("\\").strip() + " " if raw.endswith("\\") else raw.strip()
        if not raw.endswith("\\") and pending.strip():
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def test_the_container_recipe_keeps_its_home_in_data_and_runs_retrysafe(tmp_path: Path) -> None:
    """The recipe installs the package (with an extra pyproject.toml declares), makes
    /data the home and the working folder, runs as a user of its own, and its entry
    point (``retrysafe doctor``) passes on an empty home."""
    steps = instructions(DEPLOY / "Containerfile")
    words = [w for w, _ in steps]
    assert words[0] == "FROM" and steps[0][1].startswith("python:3.1")
    found = dict(steps)
    assert found["ENV"] == "RETRYSAFE_HOME=/data"
    assert found["VOLUME"] == "/data" and found["WORKDIR"] == "/data"
    assert found["USER"] not in ("root", "0")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = re.search(r'pip install --no-cache-dir "/src\[(\w+)\]"', found["RUN"])
    assert install is not None and install.group(1) in extras
    for command in re.findall(r"(?:^|&& )(\w+)", found["RUN"]):
        assert command == "pip" or shutil.which(command), f"RUN uses {command}, not found"
    entry = json.loads(found["ENTRYPOINT"]) + json.loads(found["CMD"])
    assert entry == ["retrysafe", "doctor"]
    data = tmp_path / "data"
    data.mkdir()
    home = Home(data)
    proc = subprocess.run([RETRYSAFE, *entry[1:]], env=home.env, cwd=data, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert str(data) in proc.stdout  # the home doctor checked is the one RETRYSAFE_HOME names


def test_pyproject_is_ready_to_publish_and_the_changelog_names_its_version() -> None:
    """The metadata an index shows is there, the Python classifiers match
    requires-python, and the changelog has a section for the version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for field in ("description", "readme", "license", "authors", "keywords", "classifiers",
                  "urls", "scripts"):
        assert project.get(field), field
    assert project["scripts"]["retrysafe"] == "retrysafe._entry:main"
    minimum = int(project["requires-python"].removeprefix(">=3."))
    versions = [int(c.rsplit(".", 1)[1]) for c in project["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions and min(versions) == minimum
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{project['version']}]" in changelog and "## [Unreleased]" in changelog
    readme = (ROOT / "README.md").read_text()
    assert "uv tool install" in readme and "pipx install" in readme
