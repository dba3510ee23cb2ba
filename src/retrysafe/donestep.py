"""A step that is already done: one answer, for the fast path and the full CLI.

Re-running a job re-runs every ``retrysafe step`` in it, and most of those
steps are already done. :func:`done_step_evidence` says whether a command step
is done inside the current attempt and gives its evidence, after the checks
the full command makes (``Engine.attach``, ``Run.effect``): a valid step name
and item; an attempt that exists, is active and is its outcome's current
attempt; a ``done`` effect step recorded with the class given (so the class
is one the policy table knows). It writes the
``check``/``skip`` line to the attempt's ``log.jsonl`` that ``Run.effect``
writes, through the same :class:`~retrysafe.folders.AttemptFolder`.

Anything else, and any doubt, is ``None``: the caller then runs the full
effect algorithm, which decides and reports. The console script
(:mod:`retrysafe._entry`) asks here before loading the command-line framework,
and ``retrysafe step`` asks here first too: one answer either way.

This module stays cheap to import: no click, no connectors, not the
engine/attempt chain, and not :mod:`retrysafe.config` (its job parsing pulls
in ``dataclasses`` and the policy table). :func:`locate` finds the ledger by
the one precedence in :mod:`retrysafe.location`; it reads the config file
only when neither ``--ledger`` nor ``RETRYSAFE_LEDGER`` names the ledger. When it has read the
file, the step's job must be declared there, as ``Engine.attach`` requires.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import envvars
from .errors import ConfigError
from .location import config_file, ledger_settings, named_ledger, read_toml, resolve_home

__all__ = ["Location", "done_outcome_line", "done_step_evidence", "history_text", "locate",
           "startable", "status_text"]


class Location:
    """Where the home, the config file and the ledger are (``config.Settings``).

    ``jobs`` is the config file's ``[jobs]`` table, or ``None`` when the file
    was not read (the ledger was named without it; ``sqlite_synchronous`` is
    then ``full``, which only a migration on open would write with).
    """

    __slots__ = ("config_path", "home", "jobs", "ledger_url", "sqlite_synchronous")

    def __init__(self, home: Path, config_path: Path, ledger_url: str, sqlite_synchronous: str,
                 jobs: dict[str, Any] | None) -> None:
        self.home, self.config_path, self.jobs = home, config_path, jobs
        self.ledger_url, self.sqlite_synchronous = ledger_url, sqlite_synchronous


def locate(home: str | None = None, config: str | None = None,
           ledger: str | None = None, *, read_config: bool = False) -> Location | None:
    """The home, config file and ledger, by :mod:`retrysafe.location`'s precedence;
    ``None`` where :func:`retrysafe.config.load_config` would refuse the file (the
    full command reports it). The file is read only when ``read_config`` or when
    neither ``ledger`` nor ``RETRYSAFE_LEDGER`` names the ledger; once read, a
    ``[connectors]`` or ``[notify]`` table the full parse would judge is doubt."""
    home_path = resolve_home(home)
    config_path = config_file(home_path, config)
    url = named_ledger(ledger)
    if url and not read_config:
        return Location(home_path, config_path, url, "full", None)
    try:
        raw = read_toml(config_path)
        url, sync = ledger_settings(raw, config_path, home_path, ledger)
    except ConfigError:
        return None
    jobs = raw.get("jobs", {})
    if not isinstance(jobs, dict) or (read_config and (
            "connectors" in raw or "notify" in raw
            or not all(isinstance(t, dict) and "notify" not in t for t in jobs.values()))):
        return None
    return Location(home_path, config_path, url, sync, jobs)


def done_step_evidence(
    name: str,
    effect_class: str,
    *,
    item: str | None = None,
    attempt_id: str | None = None,
    home: str | None = None,
    config: str | None = None,
    ledger: str | None = None,
) -> str | None:
    """The evidence of the done command step ``name`` of the current attempt, or ``None``.

    ``attempt_id`` defaults to ``$RETRYSAFE_ATTEMPT_ID``; ``home``, ``config``
    and ``ledger`` are the ``--home``, ``--config`` and ``--ledger`` flags
    (see :func:`locate`). ``None`` means "not answered here": the step is not
    done, the input is bad, or anything is in doubt.
    """
    attempt_id = attempt_id or os.environ.get(envvars.ATTEMPT_ID)
    if not attempt_id or not effect_class or envvars.CRASH_AT in os.environ:
        return None
    try:
        where = locate(home, config, ledger)
        if where is None:
            return None
        if where.ledger_url.startswith("sqlite:") and not os.access(where.home, os.W_OK | os.X_OK):
            return None  # the full command refuses an unwritable home
        from .folders import AttemptFolder
        from .keys import step_key
        from .ledger import open_ledger

        with open_ledger(where.ledger_url, sqlite_synchronous=where.sqlite_synchronous) as book:
            attempt = book.attempt(attempt_id)
            if attempt is None or attempt.state != "active":
                return None
            out = book.outcome(attempt.outcome_key)
            if (out is None or out.current_attempt != attempt.id
                    or (where.jobs is not None and not isinstance(where.jobs.get(out.job), dict))):
                return None
            skey = step_key(out.key, name, item)
            step = book.step(skey)
        if (step is None or step.state != "done" or step.kind != "effect"
                or step.effect_class != effect_class or step.fingerprint):
            return None
        evidence = step.evidence or ""
        if "\x1b" in evidence:
            return None  # click.echo strips terminal escapes off a pipe: let it print
        folder = AttemptFolder(where.home, out.job, out.key, attempt.number)
        if not folder.path.is_dir():
            return None  # the full command reports the missing folder
        try:
            folder.log(attempt.id, skey, "check", "skip", evidence=step.evidence)
        finally:
            folder.close()
    except Exception:  # noqa: BLE001 - any doubt: the full command decides and reports
        return None
    return evidence


# -- reading an outcome: `retrysafe run` on a done outcome, `status`, `history` ---------


def _outcome_answer(home: str | None, config: str | None, ledger: str | None, *, write: bool,
                    answer: Callable[[Location, Any], list[str] | None]) -> str | None:
    """``answer(where, ledger)``'s lines as the text the full command prints, or ``None``.

    What the full command checks before it reads is checked here, and any doubt
    is ``None``: the whole config file is read (the full command loads it); the
    ledger is a SQLite file that exists (a PostgreSQL ledger takes the full
    command: its driver costs more than the answer saves); the home's
    ``runs/.ledger-id`` names this ledger (:func:`retrysafe.identity.check_home`).
    With ``write`` (``retrysafe run``, which opens the ledger for writing) the
    home and its ``runs/`` exist and are writable and the mark is there, so the
    full command would create and record nothing either.
    """
    if envvars.CRASH_AT in os.environ:
        return None
    try:
        where = locate(home, config, ledger, read_config=True)
        if where is None or not where.ledger_url.startswith("sqlite:///"):
            return None
        if os.stat(where.ledger_url.removeprefix("sqlite:///")).st_size == 0:
            return None  # a file of no bytes: opening it would write (the full command refuses)
        runs = where.home / "runs"
        if write and not (runs.is_dir() and not runs.is_symlink()
                          and os.access(where.home, os.W_OK | os.X_OK)):
            return None
        from .identity import _recorded, ledger_identity
        from .ledger import open_ledger

        with open_ledger(where.ledger_url, sqlite_synchronous=where.sqlite_synchronous,
                         must_exist=True) as book:
            recorded = _recorded(runs)
            if (recorded is None and write) or (
                    recorded is not None and recorded != ledger_identity(book, create=False)):
                return None
            lines = answer(where, book)
        if lines is None:
            return None
        text = "".join(line + "\n" for line in lines)
        text.encode(sys.stdout.encoding or "utf-8")  # else the full command decides
    except Exception:  # noqa: BLE001 - any doubt: the full command decides and reports
        return None
    return None if "\x1b" in text else text  # click.echo strips escapes off a pipe


def status_text(key: str, *, home: str | None = None, config: str | None = None,
                ledger: str | None = None) -> str | None:
    """What ``retrysafe status KEY`` prints, or ``None`` (a blocked outcome, whose
    unblock hint the engine writes, and an unknown key take the full command)."""
    from .readout import status_lines

    def answer(where: Location, book: Any) -> list[str] | None:
        out = book.outcome(key)
        if out is None or out.state == "blocked":
            return None
        return status_lines(where.home, out, book.attempts(key), book.steps(key))

    return _outcome_answer(home, config, ledger, write=False, answer=answer)


def history_text(key: str, *, home: str | None = None, config: str | None = None,
                 ledger: str | None = None) -> str | None:
    """What ``retrysafe history KEY`` prints, or ``None`` (an unknown key, or a job's name)."""
    from .readout import history_lines

    def answer(where: Location, book: Any) -> list[str] | None:
        return None if book.outcome(key) is None else history_lines(key, book.history(key))

    return _outcome_answer(home, config, ledger, write=False, answer=answer)


def done_outcome_line(job: str, params: list[str], command: str, *, home: str | None = None,
                      config: str | None = None, ledger: str | None = None) -> str | None:
    """What ``retrysafe run JOB -p ... -- COMMAND`` prints when the outcome is done, or ``None``.

    The key comes from the job's template and parameters as ``Job.outcome_key``
    derives it; a job with an ``occurrence`` parameter (resolved from its
    schedule), a drill trial, a missing or unknown parameter take the full
    command, as does a command it would not find (``retrysafe run`` refuses one
    before it reads the outcome).
    """
    try:
        if envvars.DRILL_TRIAL in os.environ or not startable(command, os.getcwd()):
            return None
    except OSError:  # the current folder is gone: the full command reports it
        return None
    from . import keys

    def answer(where: Location, book: Any) -> list[str] | None:
        table = (where.jobs or {}).get(job)
        declared = table.get("params", {}) if isinstance(table, dict) else None
        template = table.get("key") if isinstance(table, dict) else None
        given = keys.parse_assignments(params)
        if (not isinstance(declared, dict) or not isinstance(template, str)
                or set(given) != set(declared)
                or not all(isinstance(t, str) and t in keys.PARAM_TYPES
                           for t in declared.values())):
            return None
        canonical = {name: keys.validate_param(name, type_name, given[name])
                     for name, type_name in declared.items()}
        key = keys.render_key(template, canonical)
        out = book.outcome(key)
        if out is None or out.state != "done" or out.job != job or out.params != canonical:
            return None  # (other parameters made that key: the full command refuses it)
        return [f"done: {key} is already done; nothing to do"]

    return _outcome_answer(home, config, ledger, write=True, answer=answer)


def startable(argv0: str, cwd: str) -> bool:
    """``retrysafe run``'s check that its command can start, its one place: a path is
    an executable file (relative to ``cwd``); a name is found on ``PATH`` (unset:
    the system's default path) as :func:`shutil.which` finds it, without importing
    ``shutil``, which imports the compression modules."""
    if os.sep in argv0:
        path = Path(cwd) / argv0
        return path.is_file() and os.access(path, os.X_OK)
    if sys.platform == "win32":  # which() also tries PATHEXT and the current folder there
        import shutil

        return shutil.which(argv0) is not None
    search = os.environ.get("PATH")
    if search is None:
        try:
            search = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            search = os.defpath
    for folder in search.split(os.pathsep) if search else ():
        name = os.path.join(folder, argv0)
        if os.path.exists(name) and os.access(name, os.X_OK) and not os.path.isdir(name):
            return True
    return False
