"""``retrysafe openclaw ...``: install the skill, write the automation line."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import click

from ..errors import ConfigError
from ._common import state

__all__ = ["openclaw"]


@click.group()
def openclaw() -> None:
    """OpenClaw integration: the agent skill and automation command jobs.

    \b
    Example:
      retrysafe openclaw install-skill --global
      retrysafe openclaw cron-command weekly-ops-report -- ./send-report.sh
    """


@openclaw.command("install-skill")
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Install for the agent of this workspace (DIR/skills/retrysafe/).",
)
@click.option(
    "--global",
    "global_",
    is_flag=True,
    help="Install for every agent: OpenClaw's state folder skills/retrysafe/.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="OpenClaw state folder for --global (default: $OPENCLAW_STATE_DIR, else ~/.openclaw).",
)
def install_skill_command(workspace: Path | None, global_: bool, state_dir: Path | None) -> None:
    """Install the retrysafe skill so OpenClaw agents follow the protocol.

    Safe to repeat: an identical skill is left alone, an older one replaced.

    \b
    Example:
      retrysafe openclaw install-skill --workspace ~/.openclaw/workspace
      retrysafe openclaw install-skill --global
    """
    from ..openclaw.skill import install_skill  # importlib.resources: not on every start-up

    path = install_skill(workspace, global_, state_dir)
    click.echo(f"installed: {path}")
    if shutil.which("retrysafe") is None:
        # OpenClaw hides a skill whose required binaries are not on its PATH.
        click.echo(
            "note: 'retrysafe' is not on PATH; OpenClaw shows the skill only when it is",
            err=True,
        )
    click.echo("check: openclaw skills info retrysafe")


@openclaw.command("show-skill")
def show_skill() -> None:
    """Print the shipped SKILL.md."""
    from ..openclaw.skill import skill_text

    click.echo(skill_text(), nl=False)


def _retrysafe_argv() -> list[str]:
    """An absolute way to call retrysafe: OpenClaw runs commands with a reset PATH."""
    found = shutil.which("retrysafe")
    if found:
        return [str(Path(found).absolute())]
    beside = Path(sys.executable).parent / "retrysafe"  # a virtualenv not on PATH
    if beside.is_file():
        return [str(beside.absolute())]
    return [sys.executable, "-m", "retrysafe"]


@openclaw.command(
    "cron-command",
    context_settings={"ignore_unknown_options": True},
)
@click.argument("job_name", metavar="JOB")
@click.option("--name", metavar="NAME", help="OpenClaw automation name (default: JOB).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def cron_command(job_name: str, name: str | None, cmd: tuple[str, ...]) -> None:
    """Print the 'openclaw cron add' line that runs JOB on its own schedule.

    Paths are absolute (OpenClaw runs commands through 'sh -lc' with a reset
    PATH) and the schedule and time zone come from the job's declaration, so
    OpenClaw fires exactly at the occurrences retrysafe derives keys from.

    \b
    Example:
      retrysafe openclaw cron-command weekly-ops-report -- ./send-report.sh
    """
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise click.UsageError("give the command to run after '--'")
    engine = state().engine
    job = engine.config.job(job_name)
    if not job.schedule:
        raise ConfigError(f'job {job_name!r} has no schedule; add schedule = "..." to [jobs.{job_name}]')
    command = [
        *_retrysafe_argv(),
        "--home",
        str(engine.home.resolve()),
        "run",
        job_name,
        "--",
        *cmd,
    ]
    line = [
        "openclaw",
        "cron",
        "add",
        "--name",
        name or job_name,
        "--cron",
        job.schedule,
        # retrysafe reads a schedule without tz as UTC; OpenClaw as the host's zone.
        "--tz",
        job.tz or "UTC",
        # fire on the minute, so OpenClaw's history times match the occurrences
        "--exact",
        "--command",
        shlex.join(command),
        "--no-deliver",
    ]
    click.echo(shlex.join(line))
