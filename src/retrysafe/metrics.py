"""The ledger's health as Prometheus metrics: ``/metrics`` and ``retrysafe metrics``.

Every figure is read from the ledger when it is asked for (no process keeps
counters), so the dashboard, a textfile written by cron and the ledger
always agree, whichever machine ran the work. Counters count what the history
holds; pruning old outcomes lowers them, which Prometheus reads as a reset.

Needs the ``ui`` extra (``prometheus_client``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .ledger.listing import Listing
from .states import OutcomeState

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["LedgerCollector", "render", "write_textfile"]


class LedgerCollector(Collector):
    """Collects the ledger's figures each time it is scraped."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        totals = Listing(self.ledger.backend).totals()
        waiting = self.ledger.retention.attention_counts()
        first = self.ledger.retention.attention_page(limit=1).waiting

        outcomes = GaugeMetricFamily("retrysafe_outcomes", "Outcomes in the ledger, by job and state.",
                                     labels=["job", "state"])
        jobs = sorted({job for job, _ in totals.outcomes})
        for job in jobs:
            for state in OutcomeState:  # every state, zeros too: an alert rule sees 0, not nothing
                outcomes.add_metric([job, state.value], totals.outcomes.get((job, state.value), 0))
        yield outcomes

        attempts = GaugeMetricFamily("retrysafe_attempts", "Attempts in the ledger, by job and state "
                                     "(active, finished, superseded).", labels=["job", "state"])
        for (job, how), n in sorted(totals.attempts.items()):
            attempts.add_metric([job, how], n)
        yield attempts

        executions = CounterMetricFamily(
            "retrysafe_executions", "Step intents written (an effect executed or a generate step "
            "produced), by job and step kind.", labels=["job", "kind"])
        for (job, kind), n in sorted(totals.executions.items()):
            executions.add_metric([job, kind], n)
        yield executions

        for name, doc, values in (
            ("retrysafe_lookups_found", "Steps a lookup found done instead of executing them again.",
             totals.lookups_found),
            ("retrysafe_skips", "Later attempts that found an effect step already done (and did "
             "not repeat it).", totals.skips),
            ("retrysafe_blocks", "Times a step was blocked for a human.", totals.blocks),
        ):
            family = CounterMetricFamily(name, doc, labels=["job"])
            for job in jobs:
                family.add_metric([job], values.get(job, 0))
            yield family

        attention = GaugeMetricFamily("retrysafe_needs_attention",
                                      "Outcomes waiting for a human (blocked, or unknown with no "
                                      "live attempt).", labels=["state"])
        for state in (OutcomeState.BLOCKED, OutcomeState.UNKNOWN):
            attention.add_metric([state.value], waiting[state.value])
        yield attention

        oldest = first[0].outcome.updated_at if first else None
        yield GaugeMetricFamily(
            "retrysafe_oldest_needs_attention_age_seconds",
            "How long the oldest outcome waiting for a human has waited (0: none waits).",
            value=max(0.0, time.time() - oldest) if oldest is not None else 0.0)
        yield GaugeMetricFamily("retrysafe_metrics_collect_seconds",
                                "How long reading these figures from the ledger took.",
                                value=time.perf_counter() - t0)


def render(ledger: Ledger) -> bytes:
    """The metrics in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger))
    return generate_latest(registry)


def write_textfile(ledger: Ledger, path: Path) -> None:
    """Write :func:`render` to ``path`` for node-exporter's textfile collector:
    a temporary file in the same folder, renamed over it, so the collector never
    reads half a file."""
    from .fsio import atomic_write_bytes

    atomic_write_bytes(path, render(ledger), mode=0o644)  # the collector runs as its own user
