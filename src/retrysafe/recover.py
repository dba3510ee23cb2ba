"""Rebuild a lost ledger from the home's attempt folders (``retrysafe recover``).

The folders are what a person reads first, and they carry enough to rebuild
the ledger's outcomes and steps: ``summary.json`` names the outcome, its job,
its state and the accepted attempt; each ``attempt-N/status.json`` names its
attempt; each ``log.jsonl`` line says what a step did, with the evidence of
every effect that was recorded. Attempts made without a folder (the Python
API's, folders.py) wrote the same lines to their job's journal,
``runs/<job>/.journal/``, each naming its outcome; the last close-out line
there stands for the summary.

What the folders prove is taken as proven: a step whose log (or summary)
records evidence is ``done`` with that evidence; a generated artifact whose
file still has the recorded checksum is ``done``; an outcome is ``done`` when
its summary says so and every step is proven. Nothing else is guessed: every
other step becomes ``unknown`` and every other outcome ``unknown``, so the
next run checks before it acts (a lookup, or a human when there is none), as
after any crash. Attempt numbers and fencing tokens continue above the
highest the folders show, so no attempt folder is ever written twice.

A key whose journal holds a prune's ``pruned`` line (housekeeping.py) is read
from its later lines alone: the earlier ones are of the outcome that was pruned,
and a run of a pruned key starts afresh; with none later, it is not rebuilt.

A folder a killed prune set aside (``runs/<job>/.journal/pruning/``,
housekeeping.py) is never read as an outcome, nor are the journal lines of an
outcome its marker names: the marker cannot say whether the prune committed
(the outcome was pruned on purpose, and a run of its key must start afresh) or
was killed before (the lost ledger still held it), and only a ledger can. Each
such folder is reported instead, for a person to decide (moving it back to
``runs/<job>/`` before ``recover`` recovers it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInput
from .folders import JOURNAL
from .fsio import sha256_file
from .housekeeping import SetAside, pruned_line, set_aside
from .keys import step_key, unslug
from .ledger import Ledger
from .ledger.backend import Tx
from .ledger.listing import note_unlogged
from .ledger.moves import HISTORY_COLUMNS, HISTORY_VALUES, step_suffix
from .ledger.records import dumps
from .states import AttemptState, OutcomeState, StepState

__all__ = ["Recovered", "RecoveredOutcome", "read_home", "write"]

_ATTEMPT = re.compile(r"^attempt-([1-9][0-9]{0,8})$")
_CHECKSUM = re.compile(r"^(?:sha256:)?[0-9a-f]{64}$")
# log actions that prove an effect happened, with its evidence
_PROVEN = {("record", "done"), ("update", "done"), ("lookup", "found"), ("check", "skip")}
_ACTOR = "retrysafe recover"
_HISTORY = f"INSERT INTO rs_history ({HISTORY_COLUMNS}) VALUES {HISTORY_VALUES}"


@dataclass
class RecoveredStep:
    name: str
    item: str
    state: str = StepState.UNKNOWN.value
    evidence: str | None = None
    kind: str = "effect"
    artifact: str | None = None
    checksum: str | None = None
    attempt: str | None = None
    reason: str = ""


@dataclass
class RecoveredOutcome:
    key: str
    job: str
    state: str
    folder: Path
    reason: str
    attempts: list[tuple[int, str, str, float]]  # (number, id, state, time)
    accepted: str | None
    steps: dict[str, RecoveredStep] = field(default_factory=dict)
    fence: int = 0


@dataclass
class Recovered:
    outcomes: list[RecoveredOutcome]
    skipped: list[str]  # folders that name no outcome, with why
    set_aside: list[SetAside] = field(default_factory=list)
    """folders a killed prune set aside: not recovered (see the module's docstring)"""

    def counts(self) -> dict[str, int]:
        steps = [s for o in self.outcomes for s in o.steps.values()]
        return {"outcomes": len(self.outcomes),
                "done": sum(o.state == OutcomeState.DONE for o in self.outcomes),
                "unknown": sum(o.state == OutcomeState.UNKNOWN for o in self.outcomes),
                "steps_done": sum(s.state == StepState.DONE for s in steps),
                "steps_unknown": sum(s.state == StepState.UNKNOWN for s in steps),
                "skipped": len(self.skipped)}


def _is_text(value: object) -> bool:
    """Whether ``value`` (a name, or JSON read from a folder) holds only UTF-8 text: a
    name of bytes that are not, or a lone surrogate in JSON, cannot go into a ledger."""
    try:
        (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).encode()
    except UnicodeEncodeError:
        return False
    return True


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and _is_text(data) else None


def _log_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The log's lines; a torn last line (a kill mid-write) is skipped."""
    try:
        raw = path.read_bytes()
    except OSError:
        return
    for line in raw.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and _is_text(rec):
            yield rec


def _step_part(key: str, skey: str) -> tuple[str, str] | None:
    """(name, item) of a step key of outcome ``key``, in the current or the old rendering."""
    for prefix in (key + "//", key + "/"):
        if skey.startswith(prefix):
            name, _, item = skey[len(prefix):].partition("/")
            return (name, item) if name else None
    return None


def _journals(job_dir: Path, moved_back: set[str]) -> dict[str, list[dict[str, Any]]]:
    """A job's journal lines (folders.py), by outcome key, oldest day first. A prune's
    ``pruned`` line (housekeeping.py) forgets the key's lines before it, and the later
    lines of their attempts (a close-out written just after its commit): they are of
    the outcome it pruned, which a run of the key must not find. Unless the key is one
    of ``moved_back``, whose folder a person moved back from where a killed prune set it
    aside: the prune never committed, and its lines are the outcome's."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    pruned: dict[str, set[str]] = {}  # key -> the attempts of the outcomes pruned
    journal = job_dir / JOURNAL
    if not journal.is_dir() or journal.is_symlink():
        return by_key
    for path in sorted(journal.glob("*.jsonl")):
        if path.is_symlink():
            continue
        for rec in _log_lines(path):
            key = rec.get("outcome_key")
            if not isinstance(key, str) or not key:
                continue
            if pruned_line(rec):
                if key in moved_back:
                    continue
                pruned.setdefault(key, set()).update(
                    a for r in by_key.pop(key, ()) if isinstance(a := r.get("attempt_id"), str))
            elif rec.get("attempt_id") not in pruned.get(key, ()):
                by_key.setdefault(key, []).append(rec)
    return by_key


def _apply_journal(out: RecoveredOutcome, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Add an outcome's journal lines; returns what its last close-out line says
    (``{}`` when none), which stands for the summary of an outcome without folders."""
    numbers = {n for n, _, _, _ in out.attempts}
    closed: dict[str, Any] = {}
    for rec in lines:
        number, attempt_id = rec.get("attempt"), rec.get("attempt_id")
        if isinstance(number, int) and number > 0 and isinstance(attempt_id, str) and attempt_id:
            at = rec.get("time")
            when = float(at) if isinstance(at, int | float) else 0.0
            if number not in numbers:
                numbers.add(number)
                out.attempts.append((number, attempt_id, "", when))
            out.fence = max(out.fence, number)
            if rec.get("action") == "closeout" and isinstance(rec.get("result"), str):
                out.attempts = [(n, a, rec["result"] if n == number else s, when if n == number else t)
                                for n, a, s, t in out.attempts]
                closed = {"state": rec["result"], "attempt_id": attempt_id}
        _apply_line(out, rec)
    out.attempts.sort()
    return closed


def _journal_outcome(job: str, job_dir: Path, key: str,
                     lines: list[dict[str, Any]]) -> RecoveredOutcome:
    """An outcome whose attempts had no folder: its journal lines are all there is."""
    out = RecoveredOutcome(key=key, job=job, state=OutcomeState.UNKNOWN.value,
                           folder=job_dir / JOURNAL, reason="", attempts=[], accepted=None)
    closed = _apply_journal(out, lines)
    _conclude(out, closed.get("state"), closed.get("attempt_id"), "its journal")
    return out


def _conclude(out: RecoveredOutcome, state: object, accepted: object, source: str) -> None:
    """Done when what was read says done and every step is proven; otherwise unknown."""
    unproven = [s for s in out.steps.values() if s.state != StepState.DONE]
    known = {a for _, a, _, _ in out.attempts}
    out.accepted = accepted if isinstance(accepted, str) and accepted in known else None
    if state == OutcomeState.DONE and out.accepted and not unproven:
        out.state, out.reason = OutcomeState.DONE.value, f"rebuilt from {source}: done"
    else:
        out.accepted = None if state != OutcomeState.DONE else out.accepted
        out.reason = (f"rebuilt from {source}, which does not prove it done: the next "
                      "run checks each unproven step before acting")
    for step in unproven:
        step.state = StepState.UNKNOWN.value
        step.reason = ("rebuilt from the attempt folders without evidence that it happened or "
                       "not: the next run looks it up before acting")


def _outcome(folder: Path, skipped: list[str],
             journals: dict[str, list[dict[str, Any]]] | None = None) -> RecoveredOutcome | None:
    summary = _json(folder / "summary.json") or {}
    numbered = sorted((int(m.group(1)), p) for p in folder.iterdir()
                      if (m := _ATTEMPT.match(p.name)) and p.is_dir())
    statuses = {n: _json(p / "status.json") or {} for n, p in numbered}
    key = summary.get("outcome_key") or next(
        (s["outcome_key"] for s in statuses.values() if isinstance(s.get("outcome_key"), str)), None)
    if not isinstance(key, str) or not key:
        try:
            key = None if "~" in folder.name else unslug(folder.name)
        except (ValueError, UnicodeDecodeError):
            key = None
        if not key:
            skipped.append(f"{folder}: no summary.json or status.json names its outcome")
            return None
    job = summary.get("job") if isinstance(summary.get("job"), str) else folder.parent.name
    attempts = []
    for n, _ in numbered:
        status = statuses[n]
        attempt_id = status.get("attempt_id")
        at = status.get("updated_at")
        attempts.append((n, attempt_id if isinstance(attempt_id, str) and attempt_id
                         else f"recovered-{n}-{key}", str(status.get("state") or ""),
                         float(at) if isinstance(at, int | float) else 0.0))
    out = RecoveredOutcome(key=key, job=str(job), state=OutcomeState.UNKNOWN.value, folder=folder,
                           reason="", attempts=attempts, accepted=None,
                           fence=max((n for n, _ in numbered), default=0))
    for _, path in numbered:
        for rec in _log_lines(path / "log.jsonl"):
            _apply_line(out, rec)
    listed = summary.get("steps")
    for skey, seen in (listed if isinstance(listed, dict) else {}).items():
        parts = _step_part(key, str(skey)) if isinstance(seen, dict) else None
        if parts is None or seen.get("state") != StepState.DONE or not seen.get("evidence"):
            continue
        step = out.steps.setdefault(str(skey), RecoveredStep(*parts))
        if step.state != StepState.DONE:
            step.state, step.evidence = StepState.DONE.value, str(seen["evidence"])
    by_name = {f"attempt-{n}": attempt_id for n, attempt_id, _, _ in attempts}
    # attempts made without a folder (folders.py) wrote to the job's journal instead
    closed = _apply_journal(out, (journals or {}).pop(key, []))
    _settle_generated(out, numbered)
    state, accepted = summary.get("state"), by_name.get(str(summary.get("accepted_attempt")))
    last_folder = max((n for n, _ in numbered), default=0)
    if closed and max(n for n, _, _, _ in out.attempts) > last_folder:
        state, accepted = closed.get("state"), closed.get("attempt_id")  # a later attempt
    _conclude(out, state, accepted, "its attempt folders")
    return out


def _apply_line(out: RecoveredOutcome, rec: dict[str, Any]) -> None:
    """One log or journal line: what it proves of a step, and the fence it names."""
    _apply(out, rec)
    fence = rec.get("fence")
    if isinstance(fence, int):
        out.fence = max(out.fence, fence)


def _apply(out: RecoveredOutcome, rec: dict[str, Any]) -> None:
    skey, action, result = rec.get("step_key"), rec.get("action"), rec.get("result")
    if not isinstance(skey, str) or skey == out.key:
        return
    parts = _step_part(out.key, skey)
    if parts is None:
        return
    step = out.steps.setdefault(skey, RecoveredStep(*parts))
    if step.state == StepState.DONE:
        return  # a done step stays done: evidence is never taken back
    evidence = rec.get("evidence")
    if (action, result) in _PROVEN and isinstance(evidence, str) and evidence:
        step.state, step.evidence = StepState.DONE.value, evidence
        step.attempt = str(rec.get("attempt_id") or "") or None
    elif action == "generate" and isinstance(rec.get("artifact"), str):
        step.kind, step.artifact = "generate", rec["artifact"]
    elif action in ("intent", "unknown", "fail", "block"):
        step.attempt = str(rec.get("attempt_id") or "") or None


def _settle_generated(out: RecoveredOutcome, numbered: list[tuple[int, Path]]) -> None:
    """A done step whose evidence is a checksum is a generated artifact: find the
    file that still has it (the latest attempt first); without one it is unproven."""
    for step in out.steps.values():
        if step.state != StepState.DONE or not _CHECKSUM.match(step.evidence or ""):
            continue
        want = (step.evidence or "").removeprefix("sha256:")
        candidates = [Path(step.artifact)] if step.artifact else []
        candidates += [f for _, p in reversed(numbered) for f in sorted(p.iterdir())
                       if f.is_file() and f.name not in ("status.json", "log.jsonl")
                       and not f.name.startswith("step-")]
        for path in candidates:
            try:
                if path.is_file() and sha256_file(path).removeprefix("sha256:") == want:
                    step.kind, step.artifact, step.checksum = "generate", str(path), step.evidence
                    break
            except OSError:
                continue
        else:
            if step.kind == "generate":
                step.state, step.evidence = StepState.UNKNOWN.value, None


def read_home(home: Path) -> Recovered:
    """Everything the attempt folders under ``home/runs`` prove."""
    runs = home / "runs"
    outcomes: list[RecoveredOutcome] = []
    skipped: list[str] = []
    if not runs.is_dir():
        return Recovered(outcomes, skipped)
    aside, pruning = set_aside(home)
    # outcomes a killed prune's marker names whose folder is no longer set aside: moved
    # back by a person (or removed by the next prune, which then removes the marker)
    moved_back = pruning - {(a.job, a.key) for a in aside}
    for job_dir in sorted(p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()):
        if not _is_text(job_dir.name):
            skipped.append(f"{job_dir}: its name is not UTF-8 text")
            continue
        journals = _journals(job_dir, {k for j, k in moved_back if j == job_dir.name})
        for folder in sorted(p for p in job_dir.iterdir()
                             if p.is_dir() and not p.is_symlink() and p.name != JOURNAL):
            if not _is_text(folder.name):
                skipped.append(f"{folder}: its name is not UTF-8 text")
                continue
            got = _outcome(folder, skipped, journals)
            if got is not None:
                outcomes.append(got)
        # (an outcome a prune set aside: its lines alone would bring it back)
        outcomes += [_journal_outcome(job_dir.name, job_dir, key, lines)
                     for key, lines in journals.items() if (job_dir.name, key) not in pruning]
    return Recovered(outcomes, skipped, aside)


def write(ledger: Ledger, recovered: Recovered) -> bool:
    """Insert what was recovered, in one transaction; the ledger must hold no outcome,
    or be this very rebuild, untouched since (a recover stopped before the home took
    the ledger as its own): then ``False``, nothing written."""
    with ledger.backend.transaction() as tx:
        if tx.one("SELECT 1 AS one FROM rs_outcomes LIMIT 1") is not None:
            if _is_rebuild(tx, recovered):
                return False
            raise InvalidInput("the ledger already records outcomes: recover rebuilds only an "
                               "empty ledger (export it first if it should be kept)")
        note_unlogged(tx, whole=True)  # a ledger of rows without history of their own
        now = tx.now
        for out in recovered.outcomes:
            last = max((n for n, _, _, _ in out.attempts), default=0)
            tx.run("INSERT INTO rs_outcomes (key, job, params, state, reason, fence, attempts,"
                   " accepted_attempt, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (out.key, out.job, dumps({}), out.state, out.reason, out.fence + 1, last,
                    None, now, now))
            for number, attempt_id, _, at in out.attempts:
                tx.run("INSERT INTO rs_attempts (id, outcome_key, number, fence, state, result,"
                       " holder_host, lease_expires, context, started_at, ended_at)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                       (attempt_id, out.key, number, number, AttemptState.FINISHED.value,
                        "recovered", "recovered", dumps({}), at, at))
            if out.accepted:
                tx.run("UPDATE rs_outcomes SET accepted_attempt = ? WHERE key = ?",
                       (out.accepted, out.key))
            for step in out.steps.values():
                skey = step_key(out.key, step.name, step.item or None)
                attempt = step.attempt if any(step.attempt == a for _, a, _, _ in out.attempts) \
                    else None
                tx.run("INSERT INTO rs_steps (step_key, outcome_key, name, item, kind, state,"
                       " attempt_id, evidence, artifact, checksum, reason, created_at, updated_at)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (skey, out.key, step.name, step.item, step.kind, step.state, attempt,
                        step.evidence, step.artifact, step.checksum, step.reason, now, now))
                tx.run(_HISTORY, (out.key, step_suffix(out.key, skey), now, None, 0, _ACTOR,
                                  "step", "", step.state, step.reason
                                  or f"rebuilt from the attempt folders: {step.evidence}"))
            tx.run(_HISTORY, (out.key, "", now, None, 0, _ACTOR, "outcome", "", out.state,
                              out.reason))
    return True


def _is_rebuild(tx: Tx, recovered: Recovered) -> bool:
    """Whether the ledger holds the outcomes ``recovered`` names, as :func:`write`
    left them: every attempt one it rebuilt, no outcome or step changed since."""
    for sql in ("SELECT 1 AS one FROM rs_attempts WHERE result <> 'recovered' LIMIT 1",
                "SELECT 1 AS one FROM rs_outcomes WHERE updated_at <> created_at LIMIT 1",
                "SELECT 1 AS one FROM rs_steps WHERE updated_at <> created_at LIMIT 1"):
        if tx.one(sql) is not None:
            return False
    keys = {r["key"] for r in tx.rows("SELECT key FROM rs_outcomes")}
    return keys == {o.key for o in recovered.outcomes}
