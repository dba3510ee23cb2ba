"""``retrysafe openclaw runs JOB``: OpenClaw's run history beside our outcomes.

OpenClaw keeps one history line per run of an automation (``openclaw cron runs
--json``: when it ran, ``ok``/``error``/``skipped``, the command's output as
the summary); retrysafe keeps one outcome per occurrence. A run is joined to
its outcome by the key it derived: the occurrence the run's start (``runAtMs``)
serves (:meth:`~retrysafe.schedule.Schedule.current_at`) with the parameters the
automation's command passes, the same rule ``retrysafe run`` follows. What we
answered that run is read from the summary's own line (``done: ...``, ``busy:
...``, ``blocked: ...``). An automation whose parameters do not fit the job (a
line made without ``-p``) is not joined: :func:`join_problem` says why.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..keys import SCHEDULE_TYPES

if TYPE_CHECKING:
    from ..config import Job

__all__ = ["JoinedRun", "answer_of", "cron_jobs_for", "job_called", "join_problem", "not_joined",
           "params_of", "run_not_joined"]

_YEAR_10000_MS = 253_402_300_800_000  # a run time past it is not a time datetime can hold
_ANSWER = re.compile(r"^(done|busy|blocked|unknown|failed|stale|skipped|missed --run): ", re.M)


@dataclass(frozen=True)
class JoinedRun:
    """One OpenClaw run and the outcome it served."""

    at: datetime
    cron_job: str
    cron_job_id: str
    status: str
    key: str
    state: str
    answer: str

    def to_json(self) -> dict[str, str | float | None]:
        # "at" as a number: emit_json writes it as every command's times (timefmt.iso_times)
        return {"at": self.at.timestamp(), "cron_job": self.cron_job, "cron_job_id": self.cron_job_id,
                "openclaw_status": self.status, "key": self.key, "state": self.state,
                "answer": self.answer, "not_joined": None}


def not_joined(cron_job: str, cron_job_id: str, why: str) -> dict[str, str | None]:
    """The ``--json`` entry of an automation whose runs could not be joined, and why."""
    return {"at": None, "cron_job": cron_job, "cron_job_id": cron_job_id, "openclaw_status": None,
            "key": None, "state": None, "answer": None, "not_joined": why}


def run_not_joined(cron_job: str, cron_job_id: str, at: datetime, status: str, answer: str,
                   why: str) -> dict[str, str | float | None]:
    """The ``--json`` entry of one run that could not be joined to an outcome, and why."""
    return {"at": at.timestamp(), "cron_job": cron_job, "cron_job_id": cron_job_id,
            "openclaw_status": status, "key": None, "state": None, "answer": answer,
            "not_joined": why}


def _words(job: Mapping[str, Any]) -> list[str]:
    from .doctor import _command_of

    command = _command_of(dict(job))[0]
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# options of 'retrysafe [openclaw] run' and 'missed' that take a value, which may come
# before JOB ('openclaw run --busy-error JOB', as cron-command --busy-error prints it)
_VALUED = frozenset({"-p", "--param", "--openclaw-run-id", "--catch-up-window", "--since",
                     "--until", "--grace"})


def _job_word_at(words: list[str]) -> int | None:
    """Index of JOB in ``retrysafe [GLOBAL...] [openclaw] run|missed [OPTIONS] JOB ...``."""
    for i, word in enumerate(words[:-1]):
        if word in ("run", "missed") and (i == 0 or words[i - 1] != "--") and "--" not in words[:i]:
            at = i + 1
            while at < len(words) and words[at].startswith("-") and words[at] != "--":
                at += 2 if words[at] in _VALUED else 1
            return at if at < len(words) and words[at] != "--" else None
    return None


def job_called(entry: Mapping[str, Any]) -> str | None:
    """The retrysafe job an automation's command runs (``retrysafe [openclaw] run JOB``
    or ``missed JOB``), or ``None`` when it runs none."""
    words = _words(entry)
    at = _job_word_at(words)
    return words[at] if words and "retrysafe" in words[0] and at is not None else None


def params_of(job: Mapping[str, Any]) -> dict[str, str]:
    """The ``-p N=V`` parameters an automation's retrysafe command passes."""
    words = _words(job)
    end = words.index("--") if "--" in words else len(words)
    out: dict[str, str] = {}
    for i, word in enumerate(words[:end]):
        value = None
        if word in ("-p", "--param") and i + 1 < end:
            value = words[i + 1]
        elif word.startswith("--param="):
            value = word.split("=", 1)[1]
        if value and "=" in value:
            name, _, val = value.partition("=")
            out[name] = val
    return out


def join_problem(job: Job, params: Mapping[str, str], via: str = "its command") -> str | None:
    """Why runs passing ``params`` (``via`` what) cannot be joined to ``job``'s outcomes:
    a parameter it does not declare, one it needs (not the occurrence) that is not passed,
    a value not valid for its type, or values that make a key the job refuses (too long);
    ``None`` when they can."""
    unknown = sorted(set(params) - set(job.params))
    if unknown:
        return (f"{via} passes -p {unknown[0]}=..., which job {job.name!r} does not declare "
                f"(declared: {', '.join(job.params) or 'none'})")
    missing = [n for n, t in job.params.items() if t not in SCHEDULE_TYPES and n not in params]
    if missing:
        return f"{via} passes no -p {missing[0]}=VALUE, which job {job.name!r} needs"
    try:
        job.outcome_key(params)  # the key too: one too long is refused at every run
    except InvalidInput as exc:
        return f"{via} passes parameters job {job.name!r} refuses: {exc}"
    return None


def by_plugin(entry: Mapping[str, Any], job: str, plugin_jobs: Mapping[str, Any]) -> bool:
    """Whether the plugin maps automation ``entry`` (an agent job) to retrysafe job ``job``."""
    mapped = plugin_jobs.get(str(entry.get("id")))
    return (mapped.get("job") if isinstance(mapped, dict) else mapped) == job


def cron_jobs_for(listed: Any, job: str, plugin_jobs: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The automations in ``openclaw cron list --json`` that run retrysafe job ``job``:
    command jobs calling ``retrysafe [openclaw] run JOB`` (or ``missed JOB``), and
    agent jobs the plugin maps to it."""
    jobs = listed.get("jobs", []) if isinstance(listed, dict) else listed
    for entry in jobs if isinstance(jobs, list) else []:
        if not isinstance(entry, dict) or entry.get("id") is None:
            continue  # without an id its runs cannot be asked for
        if by_plugin(entry, job, plugin_jobs):
            yield entry
            continue
        if job_called(entry) == job:
            yield entry


def answer_of(summary: str) -> str:
    """What retrysafe answered a run, from the line it printed (``-`` when none)."""
    found = _ANSWER.findall(summary or "")
    if not found:
        return "-"
    if "skipped" in found:
        return "busy (exit 0)"
    word = str(found[0])
    if word == "done" and "is already done" in summary:
        return "already done"
    return word


def finished(history: Any) -> Iterable[dict[str, Any]]:
    """The finished runs in ``openclaw cron runs --json``, oldest first."""
    entries = history.get("entries", []) if isinstance(history, dict) else history
    runs = [e for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and e.get("action", "finished") == "finished"
            and isinstance(e.get("runAtMs"), int | float) and 0 <= e["runAtMs"] < _YEAR_10000_MS]
    return sorted(runs, key=lambda e: e["runAtMs"])


def run_time(entry: Mapping[str, Any]) -> datetime:
    return datetime.fromtimestamp(entry["runAtMs"] / 1000, UTC)
