"""``retrysafe openclaw doctor``: one line per check, with the fix, against real files.

OpenClaw's config is the JSON file OpenClaw writes (openclaw.json in its state
folder); the ``sh -lc`` check runs a real login shell with a reset PATH. The
cron-job check against a real gateway is in test_gateway_e2e.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RETRYSAFE = Path(sys.executable).parent / "retrysafe"


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "rs-home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        '[jobs.report]\nkey = "report:{occurrence}"\nschedule = "0 7 * * 1"\n'
        'tz = "Europe/Warsaw"\nparams = { occurrence = "occurrence" }\n'
    )
    state = tmp_path / "user" / ".openclaw"
    state.mkdir(parents=True)
    return {"home": home, "state": state, "tmp": tmp_path}


def write_config(world: dict[str, Path], entry: dict[str, Any] | None) -> None:
    doc: dict[str, Any] = {"gateway": {"mode": "local"}, "plugins": {"entries": {}}}
    if entry is not None:
        doc["plugins"]["entries"]["retrysafe"] = entry
    (world["state"] / "openclaw.json").write_text(json.dumps(doc, indent=2))


def doctor(world: dict[str, Path]) -> tuple[int, list[str]]:
    env = {
        "HOME": str(world["tmp"] / "user"),
        "PATH": "/usr/bin:/bin",  # no openclaw: the cron-job check says it was not done
        "OPENCLAW_STATE_DIR": str(world["state"]),
    }
    done = subprocess.run([str(RETRYSAFE), "--home", str(world["home"]), "openclaw", "doctor"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout.splitlines()


def line(lines: list[str], name: str) -> str:
    (found,) = [ln for ln in lines if ln[5:].startswith(f"{name}:")]
    return found


def good_entry(world: dict[str, Path]) -> dict[str, Any]:
    return {
        "enabled": True,
        "hooks": {"allowConversationAccess": True},
        "config": {"retrysafe": str(RETRYSAFE), "home": str(world["home"]),
                   "jobs": {"cron-1": "report"}},
    }


def test_plugin_not_installed_fails_with_the_install_command(world: dict[str, Path]) -> None:
    write_config(world, None)
    code, lines = doctor(world)
    assert code == 1
    assert line(lines, "plugin") == (
        "FAIL plugin: not installed (no plugins.entries.retrysafe); fix: retrysafe openclaw install-plugin"
    )
    assert line(lines, "agent home").startswith("warn agent home: agents' exec shells get no RETRYSAFE_HOME")
    # OpenClaw's sh -lc resets PATH: this retrysafe is not found there, and the line says what to do
    assert line(lines, "sh -lc").startswith("warn sh -lc: a bare 'retrysafe' is not found")
    assert "retrysafe openclaw cron-command" in line(lines, "sh -lc")
    assert line(lines, "cron jobs").startswith("warn cron jobs: not checked: 'openclaw' is not on PATH")


def test_a_correct_setup_passes_every_check(world: dict[str, Path]) -> None:
    write_config(world, good_entry(world))
    code, lines = doctor(world)
    assert code == 0, lines
    assert line(lines, "plugin home") == f"ok   plugin home: {world['home']}"
    assert line(lines, "plugin retrysafe") == f"ok   plugin retrysafe: {RETRYSAFE}"
    assert line(lines, "plugin agent_end").startswith("ok   ")
    assert line(lines, "agent home") == (
        f"ok   agent home: the plugin gives agents' exec RETRYSAFE_HOME={world['home'].resolve()}"
    )


@pytest.mark.parametrize(
    ("change", "name", "expected"),
    [
        (lambda e, w: e["config"].update(home=str(w["tmp"])), "plugin home",
         "fix: openclaw config set plugins.entries.retrysafe.config.home "),
        (lambda e, w: e["config"].update(retrysafe="retrysafe"), "plugin retrysafe",
         "must be the absolute path of an executable retrysafe"),
        (lambda e, w: e.pop("hooks"), "plugin agent_end",
         "fix: openclaw config set plugins.entries.retrysafe.hooks.allowConversationAccess true"),
        (lambda e, w: e["config"]["jobs"].update({"cron-2": "nope"}), "plugin jobs",
         "cron job cron-2 maps to 'nope', which this home does not declare"),
        (lambda e, w: e.update(enabled=False), "plugin", "fix: openclaw plugins enable retrysafe"),
    ],
)
def test_each_broken_setting_fails_with_its_fix(
    world: dict[str, Path], change: Any, name: str, expected: str
) -> None:
    entry = good_entry(world)
    change(entry, world)
    write_config(world, entry)
    code, lines = doctor(world)
    assert code == 1
    found = line(lines, name)
    assert found.startswith("FAIL ") and expected in found, found


def test_unreadable_openclaw_config_is_one_line(world: dict[str, Path]) -> None:
    (world["state"] / "openclaw.json").write_text("{ not json")
    code, lines = doctor(world)
    assert code == 1
    assert line(lines, "plugin").startswith("FAIL plugin: OpenClaw config ")
    assert "cannot be read as JSON" in line(lines, "plugin")


def test_sh_lc_finds_this_retrysafe_when_a_login_profile_puts_it_on_path(
    world: dict[str, Path],
) -> None:
    """A login shell that puts this retrysafe's folder on PATH (~/.profile) is ok."""
    (world["tmp"] / "user" / ".profile").write_text(f'PATH="{RETRYSAFE.parent}:$PATH"\n')
    write_config(world, good_entry(world))
    code, lines = doctor(world)
    assert code == 0
    assert line(lines, "sh -lc") == f"ok   sh -lc: a bare 'retrysafe' is this one ({RETRYSAFE})"
    assert os.access(RETRYSAFE, os.X_OK)
