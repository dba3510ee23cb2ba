"""Notifications: a human hears that an outcome needs them.

Configured as ``[notify]`` in ``retrysafe.toml`` (:mod:`retrysafe.notify.config`),
globally and per job; sent through a webhook, email (the email connector), a
healthchecks-style ping URL, OpenClaw (``openclaw message send``) or apprise
(:mod:`retrysafe.notify.channels`). A notification is an effect of its own
(:mod:`retrysafe.notify.outbox`): recorded in the ledger before it is sent,
sent once per transition and channel, tried again later when it fails, and
never the reason a run fails.

Close-out and ``retrysafe missed`` call in here only when the job has a plan
(``job.notify``), so a run with nothing configured imports none of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Job
    from ..ledger import Ledger, OutcomeRecord

__all__ = ["notify_missed", "notify_started", "notify_transition"]


def notify_started(job: Job, key: str, attempt: int) -> None:
    """An attempt of ``key`` began: ping channels get ``/start``; never raises."""
    from .outbox import notify_started as run

    run(job, key, attempt)


def notify_transition(ledger: Ledger, job: Job, out: OutcomeRecord) -> None:
    """After close-out: notify ``out``'s new state to the job's channels; never raises."""
    from .outbox import notify_transition as run

    run(ledger, job, out)


def notify_missed(ledger: Ledger, job: Job, rows: Sequence[Mapping[str, Any]],
                  given: Mapping[str, str], occurrence_param: str) -> None:
    """After ``retrysafe missed`` listed ``rows``: notify each missed occurrence once;
    ``given`` and ``occurrence_param`` make the backfill command. Never raises."""
    from .outbox import notify_missed as run

    run(ledger, job, rows, given, occurrence_param)
