"""Notifications as effects: recorded in the ledger first, sent once, tried again.

:func:`notify_transition` (close-out) and :func:`notify_missed` (``retrysafe
missed``) record one row per channel for the transition, then
:func:`flush` sends what is due for the job. A send that fails leaves its row
pending for the next close-out of the job, the next ``missed``, or
``retrysafe notify flush``. None of this ever raises into a run or changes its
exit code: a failure is one line on stderr.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..keys import DRILL_MARK
from ..ledger.notifications import NewNotification, NotificationRecord, Notifications
from ..timefmt import iso
from .config import Channel, NotifyPlan

if TYPE_CHECKING:
    from ..config import Config, Job
    from ..ledger import Ledger, OutcomeRecord

__all__ = ["FlushResult", "body_for", "flush", "notify_missed", "notify_started",
           "notify_transition", "plans_of", "send_test", "warn"]

CLAIM_MARGIN = 30.0
"""seconds a taken row stays taken beyond the channel's timeout"""
PlanFor = Callable[[str], NotifyPlan | None]
"""The plan naming a job's channels, by job name."""
FLUSH_LIMIT = 50
"""rows one close-out sends at most (``notify flush`` sends every due row)"""


def warn(line: str) -> None:
    """One line on stderr; never raises (a closed stderr is not the run's problem)."""
    try:
        sys.stderr.write(f"retrysafe: notify: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _host() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # not every platform has uname
        return socket.gethostname()


def body_for(event: str, key: str, job: str, state: str, reason: str, unblock: str,
             at: float, transition: int) -> dict[str, Any]:
    """What every channel says: the webhook's JSON body."""
    return {"id": f"{key}@{transition}/{event}", "event": event, "key": key, "job": job,
            "state": state, "reason": reason, "unblock": unblock, "host": _host(),
            "time": iso(at)}


def outcome_event(out: OutcomeRecord, job: Job) -> str | None:
    """The event an outcome's close-out is, or ``None`` (a failure with attempts left)."""
    if out.state in ("blocked", "unknown", "done"):
        return str(out.state)
    if out.state == "failed" and out.attempts - out.budget_base >= job.max_attempts:
        return "failed"
    return None


def settle_command(ledger: Ledger, out: OutcomeRecord) -> str:
    """The command a human runs about ``out`` (as ``needs-attention`` prints it)."""
    from ..engine import settle_hint

    return settle_hint(out, ledger.steps(out.key))


def notify_transition(ledger: Ledger, job: Job, out: OutcomeRecord) -> None:
    """Close-out's call: record and send the notifications of ``out``'s new state,
    and what is still due for the job. Never raises."""
    plan = job.notify
    if plan is None or DRILL_MARK in out.key:  # drill trials break runs on purpose
        return
    try:
        event = outcome_event(out, job)
        channels = plan.channels_for(event) if event else []
        store = Notifications(ledger.backend)
        if channels:
            assert event is not None
            transition = store.transition_id(out.key, out.state)
            body = body_for(event, out.key, job.name, out.state, out.reason,
                            settle_command(ledger, out), out.updated_at, transition)
            store.record(NewNotification(out.key, job.name, transition, event, c.name, body)
                         for c in channels)
        flush(store, lambda name: plan if name == job.name else None, job=job.name,
              limit=FLUSH_LIMIT)
    except Exception as exc:  # noqa: BLE001 - a notification never fails the run
        warn(f"could not record or send notifications for {out.key}: {type(exc).__name__}: {exc}")


def notify_started(job: Job, key: str, attempt: int) -> None:
    """An attempt began: ping channels get ``/start`` (healthchecks measure the run's
    duration from it, and notice a run that never ends). Sent once, now, not recorded:
    a lost start ping loses a duration, not a message. Never raises."""
    plan = job.notify
    if plan is None or DRILL_MARK in key:
        return
    pings = [c for c in plan.channels if c.type == "ping"]
    if not pings:
        return
    from .channels import SendFailed, send

    body = body_for("start", key, job.name, "running", f"attempt {attempt} started", "",
                    time.time(), 0)
    for channel in pings:
        try:
            send(channel, body, plan.timeout)
        except SendFailed as exc:
            warn(f"{channel.describe()}: start ping for {key} not sent: {exc}")


def notify_missed(ledger: Ledger, job: Job, rows: Sequence[Mapping[str, Any]],
                  given: Mapping[str, str], occurrence_param: str) -> None:
    """``retrysafe missed``'s call: one notification per missed occurrence, ever.

    ``rows`` are what ``missed`` lists; an occurrence that waits for a human
    (blocked, unknown) was notified at its own transition and is left out, as
    are done and running ones. ``given`` (the job's other parameters) and
    ``occurrence_param`` make the backfill command. Never raises.
    """
    plan = job.notify
    if plan is None:
        return
    try:
        backfill = {str(r["key"]): _backfill(job.name, given, occurrence_param, r["occurrence"])
                    for r in rows}
        channels = plan.channels_for("missed")
        store = Notifications(ledger.backend)
        now = time.time()
        new = [
            NewNotification(r["key"], job.name, 0, "missed", c.name,
                            body_for("missed", r["key"], job.name, r["state"],
                                     r.get("reason") or f"occurrence {r['occurrence']} "
                                     + ("never ran" if r["state"] == "missing" else
                                        f"is {r['state']}"),
                                     backfill.get(r["key"], ""), now, 0))
            for r in rows if r["state"] in MISSED_STATES and DRILL_MARK not in r["key"]
            for c in channels
        ]
        store.record(new)
        flush(store, lambda name: plan if name == job.name else None, job=job.name,
              limit=FLUSH_LIMIT)
    except Exception as exc:  # noqa: BLE001 - listing what was missed must still work
        warn(f"could not record or send notifications of missed occurrences: "
             f"{type(exc).__name__}: {exc}")


def _backfill(job: str, given: Mapping[str, str], param: str, occurrence: str) -> str:
    """The line ``retrysafe missed`` prints to backfill one occurrence."""
    from shlex import quote

    extra = "".join(f" -p {quote(f'{k}={v}')}" for k, v in given.items())
    return f"retrysafe run {quote(job)}{extra} -p {quote(f'{param}={occurrence}')} -- CMD"


MISSED_STATES = frozenset({"missing", "planned", "failed"})
"""Occurrence states notified as missed: never ran, or failed and left there."""


@dataclass
class FlushResult:
    """What a flush did, per row."""

    sent: list[NotificationRecord] = field(default_factory=list)
    pending: list[tuple[NotificationRecord, str]] = field(default_factory=list)
    failed: list[tuple[NotificationRecord, str]] = field(default_factory=list)
    skipped: int = 0
    """rows left for later: their channel already failed in this flush, or another
    process took them"""


def flush(store: Notifications, plan_for: PlanFor, *, job: str | None = None,
          failed: bool = False, limit: int = 10_000, quiet: bool = False) -> FlushResult:
    """Send the due notifications (of ``job``, or every job); ``plan_for(job)`` gives
    the plan that names their channels. A channel that fails once is not tried
    again in the same flush, so one receiver that is down costs one timeout."""
    from .channels import SendFailed, send

    result = FlushResult()
    down: set[tuple[str, str]] = set()
    for rec in store.due(job=job, failed=failed, limit=limit):
        plan: NotifyPlan | None = plan_for(rec.job)
        channel: Channel | None = plan.channel(rec.channel) if plan else None
        if plan is None or channel is None:
            taken = store.take(rec, CLAIM_MARGIN, failed=failed)
            if taken is not None:
                why = f"channel {rec.channel!r} is no longer configured for job {rec.job!r}"
                store.try_failed(taken, why, give_up=True)
                result.failed.append((taken, why))
            continue
        if (rec.job, rec.channel) in down:
            result.skipped += 1
            continue
        taken = store.take(rec, plan.timeout + CLAIM_MARGIN, failed=failed)
        if taken is None:
            result.skipped += 1
            continue
        try:
            send(channel, taken.body, plan.timeout)
        except SendFailed as exc:
            down.add((rec.job, rec.channel))
            give_up = taken.tries >= plan.max_tries
            store.try_failed(taken, str(exc), give_up=give_up)
            (result.failed if give_up else result.pending).append((taken, str(exc)))
            if not quiet:
                warn(f"{channel.describe()} did not take the {taken.event} notification of "
                     f"{taken.outcome_key}: {exc}; "
                     + ("giving up after " + str(taken.tries) + " tries" if give_up else
                        f"it stays pending (try {taken.tries} of {plan.max_tries})"))
            continue
        store.sent(taken)
        result.sent.append(taken)
    return result


def plans_of(config: Config) -> PlanFor:
    """``plan_for`` over every job of ``config`` (the global plan for a job no longer declared)."""
    from .config import global_plan

    base = global_plan(config.raw, config.settings.config_path)

    def plan_for(name: str) -> NotifyPlan | None:
        job = config.jobs.get(name)
        return job.notify if job is not None else base

    return plan_for


def send_test(channel: Channel, plan: NotifyPlan) -> str:
    """Send a test message through ``channel`` (nothing is recorded); returns the
    error, or ``""`` when the receiver took it."""
    from .channels import SendFailed, send

    now = time.time()
    body = body_for("test", "retrysafe-notify-test", "", "test",
                    f"a test of the channel {channel.name} from 'retrysafe notify test'", "",
                    now, int(now))
    try:
        send(channel, body, plan.timeout)
    except SendFailed as exc:
        return str(exc)
    return ""
