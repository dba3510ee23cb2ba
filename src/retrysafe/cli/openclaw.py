"""``retrysafe openclaw ...``: install the skill, write the automation line."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from ..errors import EXIT_BUSY, EXIT_DONE, EXIT_FAILED, ConfigError, InvalidInput, InvalidParameter
from ._common import emit_json, json_option, params_option, state

if TYPE_CHECKING:
    import subprocess

__all__ = ["openclaw"]


@click.group()
def openclaw() -> None:
    """OpenClaw integration: the agent skill and automation command jobs.

    \b
    Example:
      retrysafe openclaw install-skill --global
      retrysafe openclaw cron-command weekly-ops-report -- ./send-report.sh
      retrysafe openclaw runs weekly-ops-report
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
    """An absolute way to call this retrysafe: OpenClaw runs commands with a reset PATH."""
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if running is not None and running.name == "retrysafe" and running.is_file():
        return [str(running.absolute())]  # the executable running now, not another on PATH
    beside = Path(sys.executable).parent / "retrysafe"  # python -m retrysafe in a virtualenv
    if beside.is_file():
        return [str(beside.absolute())]
    found = shutil.which("retrysafe")
    if found:
        return [str(Path(found).absolute())]
    return [sys.executable, "-m", "retrysafe"]


def _bin_dir() -> Path | None:
    """The folder that holds the running ``retrysafe`` executable, if there is one."""
    argv = _retrysafe_argv()
    return Path(argv[0]).parent if len(argv) == 1 else None


class _LineTap(io.TextIOBase):
    """Passes writes through to ``target`` and remembers the last line written."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self.last = ""
        self._partial = ""

    def write(self, text: str) -> int:
        self.target.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines[-1]
        done = [ln for ln in lines[:-1] if ln]
        if done:
            self.last = done[-1]
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()


@openclaw.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@params_option()
@click.option(
    "--busy-ok/--busy-error",
    default=True,
    show_default=True,
    help="A live run of the same outcome exits 0 (not an OpenClaw error) / exits 75.",
)
@click.option("--openclaw-run-id", metavar="ID", help="Record OpenClaw's run id with the attempt.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run_command(
    ctx: click.Context,
    job_name: str,
    params: tuple[str, ...],
    busy_ok: bool,
    openclaw_run_id: str | None,
    cmd: tuple[str, ...],
) -> None:
    """'retrysafe run' as an OpenClaw command job runs it.

    The same as 'retrysafe run JOB -- CMD', plus: the folder of this retrysafe
    executable goes first on CMD's PATH (OpenClaw's 'sh -lc' resets PATH), so a
    bare 'retrysafe step' in CMD is this installation, with this home; and a
    run that finds another live run doing the work exits 0 with a 'busy'
    summary (--busy-error: exit 75), so a live twin is not counted toward
    OpenClaw's error backoff and auto-disable.

    \b
    Example:
      retrysafe --home /srv/retrysafe openclaw run weekly-ops-report -- /srv/reports/send-report.sh
    """
    from .run_command import run as plain_run

    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise click.UsageError("give the command to run after '--'")
    bin_dir = _bin_dir()
    if bin_dir is not None:
        path = os.environ.get("PATH", "")
        parts = [p for p in path.split(os.pathsep) if p and Path(p) != bin_dir]
        os.environ["PATH"] = os.pathsep.join([str(bin_dir), *parts])
    tap = _LineTap(sys.stdout)
    code: object = 0
    try:
        with contextlib.redirect_stdout(tap):
            ctx.invoke(
                plain_run,
                job_name=job_name,
                params=params,
                openclaw_run_id=openclaw_run_id,
                cmd=cmd,
            )
    except SystemExit as exc:
        code = exc.code
    if code == EXIT_BUSY and busy_ok and tap.last.startswith("busy: "):
        click.echo(
            "skipped: another live run is doing this outcome; this run did nothing "
            "(exit 0, so OpenClaw does not count it as an error)"
        )
        sys.exit(EXIT_DONE)
    sys.exit(code if isinstance(code, int) else EXIT_FAILED)


@openclaw.command(
    "cron-command",
    context_settings={"ignore_unknown_options": True},
)
@click.argument("job_name", metavar="JOB")
@params_option("A job parameter the command passes (repeat for each; not the occurrence).")
@click.option("--name", metavar="NAME",
              help="OpenClaw automation name (default: JOB and the -p values, 'JOB region=eu').")
@click.option(
    "--cwd",
    "cwd",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Folder the command runs in (--command-cwd; default: the current folder).",
)
@click.option(
    "--busy-ok/--busy-error",
    default=True,
    show_default=True,
    help="Whether a run that finds a live twin exits 0 (not an OpenClaw error).",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def cron_command(
    job_name: str,
    params: tuple[str, ...],
    name: str | None,
    cwd: Path | None,
    busy_ok: bool,
    cmd: tuple[str, ...],
) -> None:
    """Print the 'openclaw cron add' line that runs JOB on its own schedule.

    The line works as copied: OpenClaw runs the command through 'sh -lc',
    which resets PATH, so it names this retrysafe executable and the home by
    absolute path, runs in --command-cwd (a relative script path is made
    absolute against it), and goes through 'retrysafe openclaw run', which
    puts this retrysafe first on the script's PATH. The schedule and time zone
    come from the job's declaration, so OpenClaw fires exactly at the
    occurrences retrysafe derives keys from. The job's other parameters are
    given with -p, checked now, and passed on every run; the automation is
    named after JOB and them ('region-report region=eu') unless --name is given.

    \b
    Example:
      retrysafe openclaw cron-command weekly-ops-report -- ./send-report.sh
      retrysafe openclaw cron-command region-report -p region=eu -- ./send-report.sh
    """
    from ..keys import SCHEDULE_TYPES, parse_assignments

    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise click.UsageError("give the command to run after '--'")
    engine = state().engine
    job = engine.config.job(job_name)
    if not job.schedule:
        raise ConfigError(f'job {job_name!r} has no schedule; add schedule = "..." to [jobs.{job_name}]')
    given = parse_assignments(params)
    fixed = sorted(n for n in given if job.params.get(n) in SCHEDULE_TYPES)
    if fixed:
        raise InvalidParameter(f"-p {fixed[0]}: the occurrence comes from the schedule at each run; "
                               "do not pass it")
    job.outcome_key(given)  # refused now, not at every run: a bad parameter, too long a key
    folder = (cwd or Path.cwd()).expanduser().absolute()
    program = cmd[0]
    if os.sep in program and not os.path.isabs(program):
        program = os.path.normpath(folder / program)
    command = [
        *_retrysafe_argv(),
        "--home",
        str(engine.home.resolve()),
        "openclaw",
        "run",
        *([] if busy_ok else ["--busy-error"]),
        job_name,
        *(word for n, v in given.items() for word in ("-p", f"{n}={v}")),
        "--",
        program,
        *cmd[1:],
    ]
    line = [
        "openclaw",
        "cron",
        "add",
        "--name",
        # one automation per parameter value: each gets a name of its own
        name or " ".join([job_name, *(f"{n}={v}" for n, v in given.items())]),
        "--cron",
        job.schedule,
        # retrysafe reads a schedule without tz as UTC; OpenClaw as the host's zone.
        "--tz",
        job.tz or "UTC",
        # fire on the minute, so OpenClaw's history times match the occurrences
        "--exact",
        "--command-cwd",
        str(folder),
        "--command",
        shlex.join(command),
        "--no-deliver",
    ]
    click.echo(shlex.join(line))


def _openclaw_exe(given: str | None) -> str | None:
    """The ``openclaw`` to call: ``--openclaw PATH`` when given, refused (exit 2) unless
    it is an executable file; else the one on PATH, or ``None`` when there is none."""
    if given is None:
        return shutil.which("openclaw")
    found = given if os.sep in given else shutil.which(given)
    problem = (
        "not found on PATH" if found is None
        else "no such file" if not os.path.exists(found)
        else "is a folder, not the openclaw executable" if os.path.isdir(found)
        else "is not executable" if not os.access(found, os.X_OK)
        else ""
    )
    if problem:
        raise InvalidInput(f"--openclaw {given}: {problem}")
    assert found is not None
    return found


class _NoAnswer(InvalidInput):
    """``openclaw`` ran but did not answer with JSON (a gateway that is down, another program)."""


def _call_openclaw(argv: list[str], timeout: float | None = 120,
                   **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end; one that cannot be started is exit 2 (:class:`InvalidInput`),
    one that does not end within ``timeout`` seconds :class:`_NoAnswer`."""
    import subprocess

    try:
        return subprocess.run(argv, timeout=timeout, text=True, check=False, **kwargs)
    except subprocess.TimeoutExpired:
        raise _NoAnswer(f"{shlex.join(argv[:4])}: no answer in {timeout:g} s") from None
    except OSError as exc:
        raise InvalidInput(f"{argv[0]}: cannot be run ({exc.strerror or exc}); "
                           "pass --openclaw PATH of the openclaw executable") from None


def _openclaw_json(argv: list[str]) -> object:
    """The JSON an ``openclaw`` command prints (after any banner line); :class:`_NoAnswer`
    when it prints none."""
    import json

    done = _call_openclaw(argv, capture_output=True)
    starts = [i for i in (done.stdout.find("{"), done.stdout.find("[")) if i >= 0]
    try:
        if done.returncode != 0 or not starts:
            raise ValueError
        return json.loads(done.stdout[min(starts):])
    except ValueError:
        if done.returncode == 0:
            why = "printed no JSON (is it the openclaw executable?)"
        else:
            why = (done.stderr.strip().splitlines() or [f"exited {done.returncode}"])[-1]
        raise _NoAnswer(f"{shlex.join(argv[:4])}: {why[:300]}") from None


# what 'openclaw --version' prints: "OpenClaw 2026.9.6 (abc1234)", or the bare version
_OPENCLAW_VERSION = re.compile(r"\bOpenClaw\s+v?\d{4}\.\d+\.\d+|^v?\d{4}\.\d+\.\d+(?:-\S*)?$")


def _check_is_openclaw(exe: str) -> None:
    """Refuse (exit 2) a program that does not answer ``--version`` as OpenClaw does: any
    executable that exits 0 would otherwise pass for a successful plugin install."""
    import subprocess

    argv = [exe, "--version"]
    done = _call_openclaw(argv, timeout=60, capture_output=True, stdin=subprocess.DEVNULL)
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode == 0 and any(_OPENCLAW_VERSION.search(ln) for ln in lines[:5]):
        return
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or lines or [""])[-1][:200]
        what = f"exited {done.returncode}" + (f": {said}" if said else "")
    else:
        what = f"printed {lines[0][:200]!r}" if lines else "printed nothing"
    raise InvalidInput(f"{exe}: not the openclaw executable ('{shlex.join(argv)}' {what}, not "
                       "OpenClaw's version); 'plugins install' not run; pass --openclaw PATH "
                       "of the openclaw executable")


@openclaw.command("install-plugin")
@click.option("--link", is_flag=True, help="Load the plugin in place (openclaw plugins install --link).")
@click.option(
    "--yes",
    is_flag=True,
    help="Answer OpenClaw's trust and capability questions for this plugin "
    "(--force --accept-capabilities); without a terminal, OpenClaw cancels otherwise.",
)
@click.option(
    "--openclaw",
    "openclaw_bin",
    metavar="PATH",
    help="The openclaw executable (default: 'openclaw' on PATH).",
)
def install_plugin(link: bool, yes: bool, openclaw_bin: str | None) -> None:
    """Install the retrysafe plugin into OpenClaw with 'openclaw plugins install'.

    The plugin guards declared tool calls of cron-driven agent runs (see
    docs/openclaw.md). Without openclaw on PATH, prints the exact command.
    A program that does not answer '--version' as OpenClaw does is refused
    (exit 2) before anything is installed.

    \b
    Example:
      retrysafe openclaw install-plugin
      retrysafe openclaw install-plugin --link --yes
    """
    from ..openclaw.plugin import plugin_dir

    found = _openclaw_exe(openclaw_bin)
    flags = [*(["--link"] if link else []), *(["--force", "--accept-capabilities"] if yes else [])]
    argv = [found or "openclaw", "plugins", "install", *flags, str(plugin_dir())]
    if found is None:
        click.echo("note: 'openclaw' is not on PATH; run this where it is:", err=True)
        click.echo(shlex.join(argv))
        return
    _check_is_openclaw(found)
    done = _call_openclaw(argv, timeout=None)  # it may ask questions on the terminal
    if done.returncode != 0:
        raise click.ClickException(f"{shlex.join(argv)} exited {done.returncode}")
    click.echo("then configure it: plugins.entries.retrysafe.config (docs/openclaw.md)")


@openclaw.command("doctor")
@click.option(
    "--openclaw",
    "openclaw_bin",
    metavar="PATH",
    help="The openclaw executable, to list cron jobs through the gateway (default: on PATH).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="OpenClaw's config (default: $OPENCLAW_CONFIG_PATH, else openclaw.json in its state folder).",
)
def doctor(openclaw_bin: str | None, config_path: Path | None) -> None:
    """Check what command jobs and agents need, one line per check with its fix.

    Checks that a command job's 'sh -lc' (PATH reset) finds this retrysafe or
    names it by absolute path, that OpenClaw's command jobs calling retrysafe
    use this home and a --command-cwd and run a job it declares with the -p
    parameters the job needs, and that the guard plugin is installed, enabled,
    names an executable retrysafe and this home (which it hands to agents' exec
    shells), may close an agent run's attempt and maps cron jobs to declared
    jobs with their parameters. Exit 1 when a check fails.

    \b
    Example:
      retrysafe --home /srv/retrysafe openclaw doctor
    """
    from ..openclaw.doctor import (
        Check,
        check_cron_jobs,
        check_plugin,
        check_sh_lc,
        read_openclaw_config,
    )

    engine = state().engine
    home = engine.home.resolve()
    found = _openclaw_exe(openclaw_bin)  # a --openclaw PATH that cannot be run: exit 2 first
    checks: list[Check] = [check_sh_lc(_retrysafe_argv()[0])]
    if found is None:
        checks.append(Check("warn", "cron jobs", "not checked: 'openclaw' is not on PATH",
                            "pass --openclaw PATH"))
    else:
        try:
            checks.extend(check_cron_jobs(_openclaw_json([found, "cron", "list", "--all", "--json"]),
                                          home, engine.config.jobs))
        except _NoAnswer as exc:
            checks.append(Check("warn", "cron jobs", f"not checked: {exc}",
                                "start the gateway, or check its port and token"))
    where, doc, problem = read_openclaw_config(config_path)
    plugin = list(check_plugin(doc, where, problem, home, engine.config.jobs))
    checks.extend(plugin)
    if any(c.name == "plugin home" and c.status == "ok" for c in plugin):
        checks.append(Check("ok", "agent home", f"the plugin gives agents' exec RETRYSAFE_HOME={home}"))
    else:
        checks.append(Check("warn", "agent home", "agents' exec shells get no RETRYSAFE_HOME from the "
                            "plugin, so the skill uses the gateway user's default home",
                            f"set plugins.entries.retrysafe.config.home to {home}"))
    for check in checks:
        click.echo(check.line())
    sys.exit(EXIT_FAILED if any(c.status == "FAIL" for c in checks) else EXIT_DONE)


@openclaw.command("runs")
@click.argument("job_name", metavar="JOB")
@click.option("--openclaw", "openclaw_bin", metavar="PATH",
              help="The openclaw executable (default: 'openclaw' on PATH).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True,
              help="Latest runs of each automation to read.")
@json_option
def runs(job_name: str, openclaw_bin: str | None, limit: int, as_json: bool) -> None:
    """OpenClaw's runs of JOB beside our outcomes, one line per run.

    Reads the automations that run JOB ('openclaw cron list': command jobs
    calling 'retrysafe [openclaw] run JOB', agent jobs the plugin maps to JOB)
    and each one's history ('openclaw cron runs'); each run is joined to the
    outcome it served (the occurrence at or before its start, the command's
    -p parameters). TIME is when OpenClaw started the run (UTC), OPENCLAW its
    status there, STATE the outcome's state in the ledger now, ANSWER what
    retrysafe told that run ('done', 'already done', 'busy', 'blocked'...).
    An automation whose command lacks a parameter JOB needs (or passes one it
    does not declare) is not joined: a warning on stderr names it and why, the
    others are shown, and the exit is 0 (--json: an entry with 'not_joined').
    So is a single run whose time has no occurrence of the schedule to join it
    to: a warning names that run, the others are shown.

    \b
    Example:
      retrysafe openclaw runs weekly-ops-report
    """
    from ..openclaw.doctor import read_openclaw_config
    from ..openclaw.runs import (
        JoinedRun,
        answer_of,
        by_plugin,
        cron_jobs_for,
        finished,
        join_problem,
        not_joined,
        params_of,
        run_not_joined,
        run_time,
    )

    engine = state().engine
    job = engine.config.job(job_name)  # an unknown job is refused before OpenClaw is asked
    found = _openclaw_exe(openclaw_bin)
    if found is None:
        raise InvalidInput("'openclaw' is not on PATH; pass --openclaw PATH")
    _where, doc, _problem = read_openclaw_config(None)
    entry = ((doc or {}).get("plugins") or {}).get("entries", {}).get("retrysafe") or {}
    mapped = (entry.get("config") or {}).get("jobs") or {} if isinstance(entry, dict) else {}
    listed = _openclaw_json([found, "cron", "list", "--all", "--json"])
    plugin_jobs = mapped if isinstance(mapped, dict) else {}
    joined: list[JoinedRun] = []
    skipped: list[tuple[str, str, str]] = []  # (name, id, why) of automations not joined
    # (name, id, time, status, answer, why) of single runs whose time has no outcome
    lone: list[tuple[str, str, datetime, str, str, str]] = []
    ledger = engine.existing_ledger  # only reads: a home with no ledger yet is refused, not created
    for cron in cron_jobs_for(listed, job_name, plugin_jobs):
        params = params_of(cron)
        name, cron_id = str(cron.get("name") or cron["id"]), str(cron["id"])
        via = "its agent runs" if by_plugin(cron, job_name, plugin_jobs) else "its command"
        why = join_problem(job, params, via)
        if why is not None:  # its runs have no key to join: say so, show the others
            skipped.append((name, cron_id, why))
            continue
        history = _openclaw_json([found, "cron", "runs", "--id", cron_id, "--json",
                                  "--limit", str(limit)])
        for run in finished(history):
            at = run_time(run)
            status, answer = str(run.get("status")), answer_of(str(run.get("summary") or ""))
            try:
                _spec, key, _canonical = engine.outcome_key(job_name, params, at)
            except (InvalidInput, ValueError, OverflowError) as exc:
                # this run alone has no key (no occurrence of the schedule at or before its
                # time, or one past the dates that can be computed): say so, show the others
                detail = exc if isinstance(exc, InvalidInput) else "its time is out of range"
                why = f"no occurrence of {job_name}'s schedule to join it to ({detail})"
                lone.append((name, cron_id, at, status, answer, why))
                continue
            known = ledger().outcome(key)
            joined.append(JoinedRun(at, name, cron_id, status, key,
                                    known.state if known else "missing", answer))
    joined.sort(key=lambda r: r.at)
    for name, cron_id, why in skipped:
        click.echo(f"retrysafe: warning: automation {name!r} (id {cron_id}): runs not shown: {why}",
                   err=True)
    for name, cron_id, at, _status, _answer, why in lone:
        click.echo(f"retrysafe: warning: automation {name!r} (id {cron_id}): run at "
                   f"{at.strftime('%Y-%m-%d %H:%M:%SZ')} not shown: {why}", err=True)
    if as_json:
        emit_json([r.to_json() for r in joined] + [run_not_joined(*r) for r in lone]
                  + [not_joined(*s) for s in skipped])
        return
    if not joined:
        if not skipped and not lone:
            click.echo(f"no OpenClaw run of {job_name} yet")
        return
    rows = [("TIME", "OPENCLAW", "KEY", "STATE", "ANSWER", "AUTOMATION")] + [
        (r.at.strftime("%Y-%m-%d %H:%M:%SZ"), r.status, r.key, r.state, r.answer, r.cron_job)
        for r in joined]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)) + "  " + row[5])
