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
from pathlib import Path
from typing import Any

from . import envvars
from .errors import ConfigError
from .location import config_file, ledger_settings, named_ledger, read_toml, resolve_home

__all__ = ["Location", "done_step_evidence", "locate"]


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
           ledger: str | None = None) -> Location | None:
    """The home, config file and ledger, by :mod:`retrysafe.location`'s precedence;
    ``None`` where :func:`retrysafe.config.load_config` would refuse the file (the
    full command reports it). The file is read only when neither ``ledger`` nor
    ``RETRYSAFE_LEDGER`` names the ledger."""
    home_path = resolve_home(home)
    config_path = config_file(home_path, config)
    url = named_ledger(ledger)
    if url:
        return Location(home_path, config_path, url, "full", None)
    try:
        raw = read_toml(config_path)
        url, sync = ledger_settings(raw, config_path, home_path)
    except ConfigError:
        return None
    jobs = raw.get("jobs", {})
    if not isinstance(jobs, dict):
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
