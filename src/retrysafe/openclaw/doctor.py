"""``retrysafe openclaw doctor``: what broke for real, checked from OpenClaw's side.

Each check is one line: ``ok``, ``warn`` or ``FAIL``, what was found and, when
it is not ok, the command or setting that fixes it. The checks:

* ``sh -lc``: OpenClaw runs a command job as ``sh -lc '...'``, which resets
  ``PATH``; a bare ``retrysafe`` there is not found, or is another installation;
* ``cron jobs``: every OpenClaw command job that calls retrysafe names it by an
  absolute path that exists, runs in a ``--command-cwd``, uses this home, and
  runs a job this home declares with the parameters it needs (``-p``; without
  one, every run is refused);
* ``plugin``: the guard plugin is installed and enabled in OpenClaw's config,
  names an executable retrysafe and this home, may see ``agent_end`` (to close
  an agent run's attempt), and maps cron jobs to jobs this home declares, with
  the parameters they need;
* ``agent home``: what ``RETRYSAFE_HOME`` an agent's ``exec`` shell sees.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..keys import SCHEDULE_TYPES
from .context import openclaw_state_dir

if TYPE_CHECKING:
    from ..config import Job

__all__ = ["Check", "check_cron_jobs", "check_plugin", "check_sh_lc", "read_openclaw_config"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    status: str  # "ok", "warn" or "FAIL"
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and self.status != "ok" else ""
        return f"{self.status:<4} {self.name}: {self.detail}{fix}"


def _same(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def check_sh_lc(retrysafe: str, user_home: str | None = None) -> Check:
    """Which ``retrysafe`` a command job's ``sh -lc`` finds with a reset PATH."""
    home = user_home or os.environ.get("HOME", "/")
    done = subprocess.run(
        ["env", "-i", f"HOME={home}", "sh", "-lc", "command -v retrysafe"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    found = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    fix = "name retrysafe by its absolute path in command jobs (retrysafe openclaw cron-command prints it)"
    if not found:
        return Check("warn", "sh -lc", "a bare 'retrysafe' is not found (OpenClaw resets PATH)", fix)
    if not _same(found, retrysafe):
        return Check("warn", "sh -lc", f"a bare 'retrysafe' is {found}, not this one ({retrysafe})", fix)
    return Check("ok", "sh -lc", f"a bare 'retrysafe' is this one ({found})")


def read_openclaw_config(path: Path | None = None) -> tuple[Path, dict[str, Any] | None, str]:
    """OpenClaw's config (``openclaw.json`` in its state folder): path, document, problem."""
    path = path or Path(os.environ.get("OPENCLAW_CONFIG_PATH") or openclaw_state_dir() / "openclaw.json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return path, None, "not found"
    except (OSError, ValueError) as exc:
        return path, None, f"cannot be read as JSON ({exc.__class__.__name__})"
    return path, doc if isinstance(doc, dict) else None, "" if isinstance(doc, dict) else "not an object"


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _needed(job: Job) -> list[str]:
    """The parameters ``job`` needs given (every one but its occurrence)."""
    return [n for n, t in job.params.items() if t not in SCHEDULE_TYPES]


def check_plugin(doc: dict[str, Any] | None, where: Path, problem: str, home: Path,
                 jobs: Mapping[str, Job]) -> Iterator[Check]:
    """The plugin's entry in OpenClaw's config, compared with this retrysafe home."""
    install = "retrysafe openclaw install-plugin"
    if doc is None:
        yield Check("FAIL", "plugin", f"OpenClaw config {where}: {problem}",
                    "set OPENCLAW_STATE_DIR (or OPENCLAW_CONFIG_PATH) to the gateway's")
        return
    entry = _get(doc, "plugins", "entries", "retrysafe")
    if not isinstance(entry, dict):
        yield Check("FAIL", "plugin", "not installed (no plugins.entries.retrysafe)", install)
        return
    if entry.get("enabled") is False:
        yield Check("FAIL", "plugin", "installed but disabled", "openclaw plugins enable retrysafe")
        return
    config: dict[str, Any] = entry["config"] if isinstance(entry.get("config"), dict) else {}
    prefix = "openclaw config set plugins.entries.retrysafe"
    their_home = config.get("home")
    if not their_home:
        yield Check("FAIL", "plugin home", "not set: agents would use another home's ledger",
                    f"{prefix}.config.home {shlex.quote(str(home))}")
    elif not _same(their_home, home):
        yield Check("FAIL", "plugin home", f"{their_home}, not this home ({home})",
                    f"{prefix}.config.home {shlex.quote(str(home))}")
    else:
        yield Check("ok", "plugin home", f"{their_home}")
    exe = config.get("retrysafe")
    if not exe or not os.path.isabs(str(exe)) or not os.access(str(exe), os.X_OK):
        yield Check("FAIL", "plugin retrysafe",
                    f"{exe or 'not set'}: must be the absolute path of an executable retrysafe "
                    "(agent tools put system folders first on PATH)",
                    f"{prefix}.config.retrysafe PATH-OF-RETRYSAFE")
    else:
        yield Check("ok", "plugin retrysafe", str(exe))
    if _get(entry, "hooks", "allowConversationAccess") is not True:
        yield Check("FAIL", "plugin agent_end",
                    "OpenClaw blocks agent_end for a plugin without conversation access, so an "
                    "agent run's attempt is never closed",
                    f"{prefix}.hooks.allowConversationAccess true")
    else:
        yield Check("ok", "plugin agent_end", "allowed (the attempt closes at the end of a turn)")
    from .runs import join_problem

    mapped: dict[str, Any] = config["jobs"] if isinstance(config.get("jobs"), dict) else {}
    for cron_id, spec in sorted(mapped.items()):
        name = spec.get("job") if isinstance(spec, dict) else spec
        job = jobs.get(name) if isinstance(name, str) else None
        if job is None:
            yield Check("FAIL", "plugin jobs", f"cron job {cron_id} maps to {name!r}, which this "
                        "home does not declare", f"add [jobs.{name}] to retrysafe.toml or fix the map")
            continue
        given = spec.get("params") if isinstance(spec, dict) else None
        params = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
        why = join_problem(job, params, "its mapping")
        if why is not None:
            wanted = json.dumps({"job": name, "params": {n: "VALUE" for n in _needed(job)}})
            yield Check("FAIL", "plugin jobs", f"cron job {cron_id}: {why}, so every guarded call "
                        "of its runs is blocked", f"{prefix}.config.jobs.{cron_id} "
                        f"{shlex.quote(wanted)}")
    if not mapped:
        yield Check("warn", "plugin jobs", "no cron job is mapped, so no agent tool call is guarded "
                    "(unmapped cron runs are blocked)", f"{prefix}.config.jobs.CRON-JOB-ID JOB")


def _command_of(job: dict[str, Any]) -> tuple[str, str | None, dict[str, str]]:
    """(shell command, cwd, env) of a command job, from the shapes OpenClaw lists."""
    payload: dict[str, Any] = job["payload"] if isinstance(job.get("payload"), dict) else {}
    argv = payload.get("argv") or payload.get("commandArgv")
    if isinstance(argv, list) and argv:
        command = str(argv[-1]) if argv[:2] == ["sh", "-lc"] else shlex.join(str(a) for a in argv)
    else:
        command = str(payload.get("command") or "")
    cwd = payload.get("cwd") or payload.get("commandCwd")
    env: dict[str, Any] = payload["env"] if isinstance(payload.get("env"), dict) else {}
    return command, (str(cwd) if cwd else None), {str(k): str(v) for k, v in env.items()}


def _job_trouble(entry: dict[str, Any], jobs: Mapping[str, Job]) -> tuple[str, str] | None:
    """Why every run of command job ``entry`` is refused by this home (the job it runs is
    not declared, or its ``-p`` parameters do not fit it), with the fix; ``None`` if not."""
    from .runs import job_called, join_problem, params_of

    name = job_called(entry)
    if name is None:
        return None
    remake = "re-create it from retrysafe openclaw cron-command"
    job = jobs.get(name)
    if job is None:
        return (f"runs job {name!r}, which this home does not declare, so every run fails",
                f"add [jobs.{name}] to retrysafe.toml, or {remake} with a job it declares")
    why = join_problem(job, params_of(entry))
    if why is None:
        return None
    words = " ".join(f"-p {n}=VALUE" for n in _needed(job))
    return (f"{why}, so every run fails (exit 2)",
            f"{remake} {shlex.quote(name)} {words + ' ' if words else ''}-- CMD")


def check_cron_jobs(listed: Any, home: Path,
                    declared: Mapping[str, Job] | None = None) -> Iterator[Check]:
    """Each OpenClaw command job that calls retrysafe, as ``openclaw cron list --json`` lists it;
    with ``declared`` (this home's jobs), also whether the job it runs and its parameters fit."""
    jobs = listed.get("jobs", []) if isinstance(listed, dict) else listed
    seen = 0
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict):
            continue
        command, cwd, env = _command_of(job)
        if "retrysafe" not in command:
            continue
        seen += 1
        name = f"cron job {job.get('name') or job.get('id')}"
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        exe = words[0] if words else ""
        if not os.path.isabs(exe) or not os.access(exe, os.X_OK):
            yield Check("FAIL", name, f"starts with {exe!r}: sh -lc resets PATH, so it is not found",
                        "re-create it from retrysafe openclaw cron-command")
            continue
        given = words[words.index("--home") + 1] if "--home" in words[:-1] else env.get("RETRYSAFE_HOME")
        if given and not _same(given, home):
            yield Check("FAIL", name, f"uses home {given}, not this one ({home})",
                        f"--home {shlex.quote(str(home))} in its command")
            continue
        if not given:
            yield Check("warn", name, "names no home; it uses the default home of the gateway's user",
                        "re-create it from retrysafe openclaw cron-command (it adds --home)")
            continue
        trouble = _job_trouble(job, declared) if declared is not None else None
        if trouble is not None:
            yield Check("FAIL", name, *trouble)
            continue
        if cwd is None:
            yield Check("warn", name, "has no --command-cwd: it runs in the gateway's folder",
                        "re-create it from retrysafe openclaw cron-command (it adds --command-cwd)")
            continue
        yield Check("ok", name, f"{exe} in {cwd}")
    if not seen:
        yield Check("ok", "cron jobs", "no OpenClaw command job calls retrysafe")
