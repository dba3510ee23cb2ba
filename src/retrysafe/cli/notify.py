"""``retrysafe notify``: try the configured channels, send what is pending, list what was sent."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import EXIT_FAILED, ConfigError
from ..timefmt import when
from ._common import emit_json, json_option, state, table

if TYPE_CHECKING:
    from ..ledger.notifications import Notifications

__all__ = ["notify"]


def _store() -> Notifications | None:
    """The ledger's notifications; ``None`` when there is no ledger yet (a SQLite
    file not created): nothing was ever recorded, and nothing is created here."""
    from pathlib import Path

    from ..ledger.notifications import Notifications

    engine = state().engine
    url = engine.config.settings.ledger_url
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return None
    return Notifications(engine.existing_ledger().backend)


@click.group()
def notify() -> None:
    """Notifications: test the channels, send what is pending, list them.

    Channels and events are configured as [notify] in retrysafe.toml
    (docs/notifications.md). Each transition is notified once per channel and
    recorded in the ledger; one that could not be sent stays pending and is
    sent by the job's next close-out or by 'retrysafe notify flush'.

    \b
    Example:
      retrysafe notify test
      retrysafe notify flush
      retrysafe notify ls --state pending
    """


@notify.command("test")
@click.option("--job", "job_name", metavar="JOB", help="Only the channels JOB notifies.")
@json_option
def test(job_name: str | None, as_json: bool) -> None:
    """Send a test message through each configured channel and say how each went.

    Nothing is recorded in the ledger. Exit 0 when every channel took its
    message, 1 when one did not, 2 when no channel is configured. A ping
    channel gets the test on its /log URL, which leaves the check's state alone.

    \b
    Example:
      retrysafe notify test
      retrysafe notify test --job weekly-ops-report
    """
    from ..notify.config import all_channels
    from ..notify.outbox import send_test

    config = state().engine.config
    if job_name is not None:
        plan = config.job(job_name).notify
        pairs = [(f"jobs.{job_name}", c, plan) for c in plan.channels] if plan else []
    else:
        pairs = all_channels(config.raw, config.jobs, config.settings.config_path)
    if not pairs:
        where = f"for job {job_name!r}" if job_name else "in " + str(config.settings.config_path)
        raise ConfigError(f"no notification channel is configured {where}: add a "
                          "[notify.channels.NAME] table (see docs/notifications.md)")
    results: list[dict[str, Any]] = []
    for where, channel, plan in pairs:
        error = send_test(channel, plan)
        results.append({"channel": channel.name, "type": channel.type, "declared": where,
                        "ok": not error, "error": error})
        if not as_json:
            line = f"{'ok' if not error else 'failed':<7} {channel.describe()}  [{where}]"
            click.echo(line + (f": {error}" if error else ""))
    if as_json:
        emit_json(results)
    sys.exit(EXIT_FAILED if any(not r["ok"] for r in results) else 0)


@notify.command("flush")
@click.option("--failed", "retry_failed", is_flag=True,
              help="Try again the notifications that gave up after their last try too.")
@json_option
def flush(retry_failed: bool, as_json: bool) -> None:
    """Send every pending notification now, for every job.

    A notification whose channel did not take it stays pending (exit 1); the
    job's next close-out or the next flush tries again. Run it from cron to
    deliver soon after a receiver recovers.

    \b
    Example:
      retrysafe notify flush
    """
    from ..notify.outbox import FlushResult, plans_of
    from ..notify.outbox import flush as send_due

    store = _store()
    result = (send_due(store, plans_of(state().engine.config), failed=retry_failed, quiet=as_json)
              if store is not None else FlushResult())
    left = len(result.pending) + len(result.failed)
    if as_json:
        emit_json({"sent": [r.to_json() for r in result.sent],
                   "pending": [{**r.to_json(), "last_error": e} for r, e in result.pending],
                   "failed": [{**r.to_json(), "last_error": e} for r, e in result.failed],
                   "skipped": result.skipped})
    else:
        click.echo(f"sent {len(result.sent)}, still pending {len(result.pending)}, "
                   f"given up {len(result.failed)}"
                   + (f", left for later {result.skipped}" if result.skipped else ""))
    sys.exit(EXIT_FAILED if left else 0)


@notify.command("ls")
@click.option("--state", "states", multiple=True,
              type=click.Choice(["pending", "sending", "sent", "failed"]),
              help="Only notifications in this state (repeat for several).")
@click.option("--key", metavar="KEY", help="Only the notifications of this outcome.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=200, show_default=True)
@json_option
def ls(states: tuple[str, ...], key: str | None, limit: int, as_json: bool) -> None:
    """List notifications, newest first: what was sent, what is pending and why.

    \b
    Example:
      retrysafe notify ls --state pending --state failed
    """
    store = _store()
    rows = store.listing(states=states, key=key, limit=limit) if store is not None else []
    if as_json:
        emit_json([r.to_json() for r in rows])
        return
    if not rows:
        click.echo("no notifications")
        return
    table(["id", "state", "event", "channel", "tries", "key", "at", "last error"],
          [(r.id, r.state, r.event, r.channel, r.tries, r.outcome_key,
            when(r.sent_at or r.updated_at), r.last_error[:80]) for r in rows])
