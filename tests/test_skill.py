"""The shipped OpenClaw skill: valid front matter, a protocol that exists, a safe installer."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

import retrysafe
from retrysafe.errors import HomeNotWritable, InvalidInput
from retrysafe.openclaw import (
    check_skill,
    detect_context,
    install_skill,
    openclaw_context,
    openclaw_state_dir,
    parse_front_matter,
    skill_text,
)
from retrysafe.openclaw.skill import DESCRIPTION_LIMIT

SRC = Path(retrysafe.__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a child process."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), full.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "retrysafe", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=False,
    )


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --- the file itself ----------------------------------------------------------------


def test_front_matter_is_what_openclaw_reads() -> None:
    """name, a one-line description under 160 chars, and the retrysafe binary as a requirement."""
    fields, body = parse_front_matter(skill_text())
    assert fields["name"] == "retrysafe"
    assert isinstance(fields["description"], str)
    assert "\n" not in fields["description"]
    assert 20 < len(fields["description"]) < DESCRIPTION_LIMIT
    assert fields["metadata"] == {"openclaw": {"requires": {"bins": ["retrysafe"]}}}
    assert check_skill(skill_text()) == fields
    assert body.strip()


def test_front_matter_lines_are_single_line_pairs() -> None:
    """Every front-matter line is 'key: value' so OpenClaw's fallback parser reads it too."""
    text = skill_text()
    block = text.split("---\n")[1]
    for line in block.strip().splitlines():
        assert re.match(r"^[a-z][a-z-]*: \S", line), line


def test_skill_is_short_enough_to_read_whole() -> None:
    """An agent reads the whole skill: keep it under ~120 lines and 6000 characters."""
    text = skill_text()
    assert len(text.splitlines()) <= 120
    assert len(text) <= 6000


def test_skill_teaches_the_whole_protocol() -> None:
    """The body names each phase: begin, check, intent, record, unknown, block, close."""
    _, body = parse_front_matter(skill_text())
    for phrase in (
        "retrysafe begin",
        "retrysafe check",
        "retrysafe intent",
        "retrysafe record",
        "retrysafe unknown",
        "retrysafe block",
        "retrysafe close",
        "--absent",
        "never invent",
    ):
        assert phrase.lower() in body.lower(), phrase


def test_every_command_the_skill_names_exists() -> None:
    """Each 'retrysafe <command>' in the skill is a real command of the CLI."""
    from retrysafe.cli import cli as group

    text = skill_text()
    code = re.findall(r"```\n(.*?)```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text)
    named = {m for block in code for m in re.findall(r"(?:^|\s)retrysafe ([a-z-]+)", block)}
    assert named, "the skill names no command"
    known = set(group.list_commands(click.Context(group)))
    missing = sorted(n for n in named if n not in known)
    assert not missing, f"the skill names commands the CLI lacks: {missing}"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no front matter\n", "must start with"),
        ("---\nname: retrysafe\n", "no closing"),
        ("---\nname retrysafe\n---\nbody\n", "key: value"),
        ("---\nname: a\nname: b\n---\nbody\n", "given twice"),
        ("---\nname: retrysafe\nmetadata:\n  openclaw: {}\n---\nbody\n", "one-line JSON"),
    ],
)
def test_malformed_front_matter_is_named(text: str, problem: str) -> None:
    """The tiny parser refuses what OpenClaw's single-line parser could misread."""
    with pytest.raises(ValueError, match=problem):
        parse_front_matter(text)


def test_long_description_is_refused() -> None:
    """A description of 160 characters or more fails the check."""
    text = skill_text().replace(parse_front_matter(skill_text())[0]["description"], "x" * DESCRIPTION_LIMIT)
    with pytest.raises(ValueError, match="description is 160 characters"):
        check_skill(text)


# --- installing ---------------------------------------------------------------------------


def test_install_into_workspace(tmp_path: Path) -> None:
    """--workspace DIR writes DIR/skills/retrysafe/SKILL.md with the shipped text."""
    path = install_skill(tmp_path, False, None)
    assert path == tmp_path / "skills" / "retrysafe" / "SKILL.md"
    assert path.read_text(encoding="utf-8") == skill_text()
    assert files_under(tmp_path) == ["skills", "skills/retrysafe", "skills/retrysafe/SKILL.md"]


def test_install_global_uses_openclaw_state_dir(tmp_path: Path) -> None:
    """--global follows OPENCLAW_STATE_DIR, then OPENCLAW_HOME/.openclaw, then ~/.openclaw."""
    state = tmp_path / "state"
    state.mkdir()
    path = install_skill(None, True, None, env={"OPENCLAW_STATE_DIR": str(state)})
    assert path == state / "skills" / "retrysafe" / "SKILL.md"

    home = tmp_path / "home"
    (home / ".openclaw").mkdir(parents=True)
    assert openclaw_state_dir({"HOME": str(home)}) == home / ".openclaw"
    assert openclaw_state_dir({"HOME": "/elsewhere", "OPENCLAW_HOME": str(home)}) == (home / ".openclaw")
    # OpenClaw treats blank and "undefined" values as unset.
    assert openclaw_state_dir({"OPENCLAW_STATE_DIR": "undefined", "HOME": str(home)}) == (home / ".openclaw")
    path = install_skill(None, True, None, env={"HOME": str(home)})
    assert path == home / ".openclaw" / "skills" / "retrysafe" / "SKILL.md"


def test_install_into_explicit_state_dir(tmp_path: Path) -> None:
    """An explicit state folder wins over the environment."""
    path = install_skill(None, True, tmp_path, env={"OPENCLAW_STATE_DIR": "/nonexistent"})
    assert path == tmp_path / "skills" / "retrysafe" / "SKILL.md"


def test_reinstall_is_idempotent_and_replaces_old_versions(tmp_path: Path) -> None:
    """Installing twice leaves the identical file alone; an older skill is replaced."""
    path = install_skill(tmp_path, False, None)
    first = path.stat()
    assert install_skill(tmp_path, False, None) == path
    assert path.stat().st_mtime_ns == first.st_mtime_ns
    assert path.stat().st_ino == first.st_ino
    path.write_text("---\nname: retrysafe\ndescription: old\n---\nold body\n", encoding="utf-8")
    install_skill(tmp_path, False, None)
    assert path.read_text(encoding="utf-8") == skill_text()
    assert files_under(tmp_path) == ["skills", "skills/retrysafe", "skills/retrysafe/SKILL.md"]


def test_missing_workspace_is_one_clear_error(tmp_path: Path) -> None:
    """A workspace that does not exist is refused and nothing is created."""
    missing = tmp_path / "nope"
    with pytest.raises(InvalidInput, match=r"workspace folder .*nope does not exist"):
        install_skill(missing, False, None)
    assert not missing.exists()


def test_missing_state_dir_is_one_clear_error(tmp_path: Path) -> None:
    """A state folder that does not exist is refused, with the way out."""
    with pytest.raises(InvalidInput, match="OPENCLAW_STATE_DIR"):
        install_skill(None, True, None, env={"OPENCLAW_STATE_DIR": str(tmp_path / "gone")})


@pytest.mark.parametrize(
    ("workspace", "global_"), [(None, False), (Path("."), True)], ids=["neither", "both"]
)
def test_target_must_be_chosen_once(workspace: Path | None, global_: bool) -> None:
    """Neither or both of --workspace and --global is a usage error."""
    with pytest.raises(InvalidInput):
        install_skill(workspace, global_, None)


def test_unwritable_target_leaves_nothing_half_written(tmp_path: Path) -> None:
    """When skills/ cannot hold a folder, the error is one line and no folder or temp file stays."""
    (tmp_path / "skills").write_text("a file where the folder should be", encoding="utf-8")
    with pytest.raises(HomeNotWritable, match="cannot install the skill"):
        install_skill(tmp_path, False, None)
    assert files_under(tmp_path) == ["skills"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_workspace_is_refused(tmp_path: Path) -> None:
    """A workspace without write permission raises HomeNotWritable and leaves it empty."""
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(HomeNotWritable):
            install_skill(tmp_path, False, None)
    finally:
        tmp_path.chmod(0o700)
    assert files_under(tmp_path) == []


# --- the command line and the environment ---------------------------------------------------


def test_cli_install_skill_global(tmp_path: Path) -> None:
    """`retrysafe openclaw install-skill --global` installs into OPENCLAW_STATE_DIR."""
    done = cli("openclaw", "install-skill", "--global", env={"OPENCLAW_STATE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    target = tmp_path / "skills" / "retrysafe" / "SKILL.md"
    assert f"installed: {target}" in done.stdout
    assert target.read_text(encoding="utf-8") == skill_text()


def test_cli_install_skill_error_is_one_line_exit_2(tmp_path: Path) -> None:
    """A missing workspace gives exit 2 and one 'retrysafe:' line, no traceback."""
    done = cli("openclaw", "install-skill", "--workspace", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("retrysafe: workspace folder")


def test_context_reads_openclaw_markers_but_never_credentials() -> None:
    """Command jobs and agent tool calls are told apart; gateway secrets are never kept."""
    secret = "tok-" + "9" * 20
    job_env = {
        "OPENCLAW_CLI": "1",
        "OPENCLAW_GATEWAY_PORT": "18789",
        "OPENCLAW_GATEWAY_TOKEN": secret,
        "OPENCLAW_GATEWAY_PASSWORD": secret,
    }
    assert openclaw_context(job_env).kind == "command"
    assert detect_context(job_env) == {
        "runner": "openclaw:command",
        "openclaw_gateway_port": "18789",
    }
    assert openclaw_context({"OPENCLAW_SHELL": "exec"}).kind == "agent-exec"
    assert detect_context({"PATH": "/usr/bin"}) == {}
    assert secret not in repr(openclaw_context(job_env))


def test_cron_command_line_uses_the_jobs_schedule_and_absolute_paths(tmp_path: Path) -> None:
    """cron-command prints an 'openclaw cron add' line with the job's cron, zone and absolute paths."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        '[jobs.weekly-ops-report]\nkey = "weekly-ops-report:{occurrence}"\n'
        'schedule = "0 7 * * 1"\ntz = "Europe/Warsaw"\nparams = { occurrence = "occurrence" }\n'
        '[jobs.adhoc]\nkey = "adhoc:{week}"\nparams = { week = "isoweek" }\n'
    )
    env = {"RETRYSAFE_HOME": str(home)}
    done = cli("openclaw", "cron-command", "weekly-ops-report", "--", "/srv/send.sh", "-v", env=env)
    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout)
    assert argv[:3] == ["openclaw", "cron", "add"]
    opts = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert opts["--cron"] == "0 7 * * 1" and opts["--tz"] == "Europe/Warsaw"
    assert "--no-deliver" in argv
    inner = shlex.split(argv[argv.index("--command") + 1])
    assert Path(inner[0]).is_absolute()
    assert inner[-8:] == [
        "--home", str(home), "openclaw", "run", "weekly-ops-report", "--", "/srv/send.sh", "-v",
    ]
    assert Path(argv[argv.index("--command-cwd") + 1]).is_absolute()

    relative = cli("openclaw", "cron-command", "weekly-ops-report", "--cwd", str(tmp_path),
                   "--busy-error", "--", "./send.sh", env=env)
    argv = shlex.split(relative.stdout)
    assert argv[argv.index("--command-cwd") + 1] == str(tmp_path)
    inner = shlex.split(argv[argv.index("--command") + 1])
    assert inner[-4:] == ["--busy-error", "weekly-ops-report", "--", str(tmp_path / "send.sh")]

    no_schedule = cli("openclaw", "cron-command", "adhoc", "--", "/srv/send.sh", env=env)
    assert no_schedule.returncode == 2
    assert "has no schedule" in no_schedule.stderr
