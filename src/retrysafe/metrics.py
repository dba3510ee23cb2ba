"""The ledger's health as Prometheus metrics: ``/metrics`` and ``retrysafe metrics``.

What waits for a human is read from the ledger's indexes when asked (a short
range). Everything else is carried on from the history (:class:`HistoryCounts`):
the counters (executions, lookups found, skips, blocks), the attempts by state
and the outcomes by job and state (each outcome move writes a history row, from
and to). The first scrape reads them whole; each later one reads only the
history rows written since (a range of their primary key), so a scrape costs
what happened since the last one, not the size of the ledger. Writes that add or
remove outcomes or attempts without history (prune, recover, import) change the
ledger's mark (``listing.UNLOGGED``), and the gauges are then read whole again.
The dashboard keeps the counts in memory; ``retrysafe metrics --textfile FILE``
keeps them in a state file next to FILE, plain ``retrysafe metrics`` in the
home's ``runs/.metrics.state``. Pruning never lowers a counter; a counter starts
again from what the history holds only when the ledger is another one (its
identity, :mod:`retrysafe.identity`).

Needs the ``ui`` extra (``prometheus_client``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .ledger.listing import WHOLE_MARK, HistoryDelta, Listing
from .states import OutcomeState

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["HOME_STATE", "HistoryCounts", "LedgerCollector", "render", "render_kept", "state_path",
           "write_textfile"]

GAP_WINDOW = 1000
"""On PostgreSQL a history row id can become visible after higher ones (ids are
drawn when a transaction writes, rows seen when it commits): ids missing among
the newest this many are remembered and looked for again at the next scrapes."""
GAP_TTL = 600.0
"""Seconds after which a missing id is taken as a rolled-back transaction's."""
_MAX_GAPS = 10_000
_STATE_VERSION = 2  # 2: the outcome gauges too


def _add(into: dict[Any, int], delta: dict[Any, int]) -> None:
    for k, n in delta.items():
        into[k] = into.get(k, 0) + n


@dataclass
class HistoryCounts:
    """The history counted so far: the counters, attempts by state, and the last
    history row id counted (``-1``: nothing yet), for one ledger (``identity``)."""

    identity: str | None = None
    last_id: int = -1
    executions: dict[tuple[str, str], int] = field(default_factory=dict)
    lookups_found: dict[str, int] = field(default_factory=dict)
    skips: dict[str, int] = field(default_factory=dict)
    blocks: dict[str, int] = field(default_factory=dict)
    attempts: dict[tuple[str, str, bool], int] = field(default_factory=dict)
    """attempts by ``(job, attempt state, drill)``"""
    outcomes: dict[tuple[str, str], int] = field(default_factory=dict)
    """outcomes by ``(job, state)``, drill trials and ``planned`` left out (those are
    counted from their index at each scrape: a short range)"""
    unlogged: str = ""
    """the ledger's mark of changes without history (listing.UNLOGGED) when the
    gauges were last read whole"""
    last_row: str = ""
    """what marked the history row ``last_id`` (listing.ROW_MARK): another row under
    that id means a ledger put back from a copy and grown again"""
    gaps: dict[int, float] = field(default_factory=dict)
    """history row ids not seen yet below ``last_id``, with when they were first missed"""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, ledger: Ledger, now: float | None = None) -> HistoryCounts:
        """Count what the history gained since the last update (everything, the
        first time or when ``ledger`` is not the ledger counted so far); returns
        a copy of the counts, for reading while another update runs."""
        from .identity import ledger_identity

        now = time.time() if now is None else now
        listing = Listing(ledger.backend)
        identity = ledger_identity(ledger, create=False)
        with self.lock:
            if self.last_id < 0 or identity is None or identity != self.identity:
                # the first count, or another ledger (one without an identity cannot
                # be told from another: it is counted whole each time)
                self._whole(listing, identity, now, fresh=True)
            else:
                hw, unlogged, seen, top = listing.horizon(self.last_id)
                if unlogged != self.unlogged:
                    # outcomes or attempts removed (prune, which may remove the newest
                    # history too) or added without history (a merged import): read the
                    # gauges again, and the counters keep what they counted, so none goes
                    # down; but a ledger replaced whole (recover, an import into an empty
                    # ledger) is counted afresh
                    self._whole(listing, identity, now, fresh=unlogged.startswith(WHOLE_MARK))
                elif hw < self.last_id or (self.last_row and seen != self.last_row):
                    # the history went back with no mark, or the row counted last is
                    # another row now: the file was put back from a copy
                    self._whole(listing, identity, now, fresh=True)
                else:
                    self._since(listing, hw, now)
                    self.last_row = top
            return HistoryCounts(self.identity, self.last_id, dict(self.executions),
                                 dict(self.lookups_found), dict(self.skips), dict(self.blocks),
                                 dict(self.attempts), dict(self.outcomes), self.unlogged,
                                 self.last_row, dict(self.gaps))

    # --- the steps of an update ---------------------------------------------------------

    def _whole(self, listing: Listing, identity: str | None, now: float, *, fresh: bool) -> None:
        """Read the gauges whole, and count what the history holds that the counters
        have not counted yet (``fresh``: everything, from nothing). The gauges come
        from one snapshot, with the history ids near its top and among the gaps that
        it holds (PostgreSQL commits ids out of order): an id the snapshot holds is
        in the gauges and only counted; one it lacks becomes a gap, applied to the
        gauges too when it appears."""
        if fresh:
            self.identity, self.last_id, self.gaps = identity, 0, {}
            self.executions, self.lookups_found, self.skips, self.blocks = {}, {}, {}, {}
        after = max(self.last_id, 0)
        sqlite = listing.backend.name == "sqlite"
        pending = sorted(self.gaps)
        gauges = listing.gauges(after=None if sqlite else after,
                                window=GAP_WINDOW, ids=pending)
        self.attempts, self.outcomes, self.unlogged = (gauges.attempts, gauges.outcomes,
                                                       gauges.unlogged)
        self.last_row = gauges.top
        held = None if sqlite else set(gauges.visible)
        if held is not None:  # gaps the snapshot holds: in the gauges, not yet counted
            found = [i for i in pending if i in held]
            self._apply(listing.history_delta(ids=found, attempts=False), attempts=False)
            for i in found:
                del self.gaps[i]
        self._count(listing, after, gauges.hw, now, attempts=False, held=held)
        # a prune may have taken the newest rows: go on from the highest there is (ids
        # are never drawn again), the row last_row marks
        self.last_id = gauges.hw

    def _since(self, listing: Listing, hw: int, now: float) -> None:
        if self.gaps:  # late commits (PostgreSQL) below what was counted
            found = listing.present(sorted(self.gaps))
            self._apply(listing.history_delta(ids=found), attempts=True)
            for i in found:
                self.gaps.pop(i, None)
            for i, since in list(self.gaps.items()):
                if now - since > GAP_TTL:
                    del self.gaps[i]
        self._count(listing, self.last_id, hw, now, attempts=True)

    def _count(self, listing: Listing, after: int, upto: int, now: float, *,
               attempts: bool, held: set[int] | None = None) -> None:
        """Count the history rows in ``(after, upto]`` and move ``last_id`` to ``upto``;
        ``held``: the ids near the top that the gauges' snapshot held (on PostgreSQL,
        those it lacked become gaps)."""
        if upto <= after:
            return
        if listing.backend.name == "sqlite":
            # one writer at a time, ids never reused: every id up to a max seen is committed
            self._apply(listing.history_delta(after=after, upto=upto, attempts=attempts),
                        attempts=attempts)
        else:
            edge = max(after, upto - GAP_WINDOW)
            self._apply(listing.history_delta(after=after, upto=edge, attempts=attempts),
                        attempts=attempts)
            seen = (listing.event_ids(edge, upto) if held is None
                    else sorted(i for i in held if edge < i <= upto))
            self._apply(listing.history_delta(ids=seen, attempts=attempts), attempts=attempts)
            have = set(seen)
            self.gaps.update((i, now) for i in range(edge + 1, upto + 1) if i not in have)
            if len(self.gaps) > _MAX_GAPS:
                for i in sorted(self.gaps)[:len(self.gaps) - _MAX_GAPS]:
                    del self.gaps[i]
        self.last_id = upto

    def _apply(self, delta: HistoryDelta, *, attempts: bool) -> None:
        _add(self.executions, delta.executions)
        _add(self.lookups_found, delta.lookups_found)
        _add(self.skips, delta.skips)
        _add(self.blocks, delta.blocks)
        if attempts:
            _add(self.attempts, delta.attempts)
            for k in [k for k, n in self.attempts.items() if n == 0]:
                del self.attempts[k]
            _add(self.outcomes, delta.outcomes)
            for o in [o for o, n in self.outcomes.items() if n == 0]:
                del self.outcomes[o]

    # --- kept in a file (retrysafe metrics --textfile) ----------------------------------

    def to_json(self) -> bytes:
        return json.dumps({
            "version": _STATE_VERSION, "identity": self.identity, "last_id": self.last_id,
            "executions": [[*k, n] for k, n in sorted(self.executions.items())],
            "lookups_found": self.lookups_found, "skips": self.skips, "blocks": self.blocks,
            "attempts": [[j, s, d, n] for (j, s, d), n in sorted(self.attempts.items())],
            "outcomes": [[j, s, n] for (j, s), n in sorted(self.outcomes.items())],
            "unlogged": self.unlogged, "last_row": self.last_row,
            "gaps": [[i, t] for i, t in sorted(self.gaps.items())],
        }, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> HistoryCounts:
        """The counts a state file holds; nothing counted yet when it is not one."""
        try:
            d = json.loads(data)
            if d.get("version") != _STATE_VERSION:
                return cls()
            return cls(
                identity=d["identity"], last_id=int(d["last_id"]),
                executions={(str(j), str(k)): int(n) for j, k, n in d["executions"]},
                lookups_found={str(j): int(n) for j, n in d["lookups_found"].items()},
                skips={str(j): int(n) for j, n in d["skips"].items()},
                blocks={str(j): int(n) for j, n in d["blocks"].items()},
                attempts={(str(j), str(s), bool(dr)): int(n) for j, s, dr, n in d["attempts"]},
                outcomes={(str(j), str(s)): int(n) for j, s, n in d["outcomes"]},
                unlogged=str(d["unlogged"]), last_row=str(d.get("last_row", "")),
                gaps={int(i): float(t) for i, t in d["gaps"]},
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


class LedgerCollector(Collector):
    """Collects the ledger's figures each time it is scraped; ``history`` carries
    the counters from one scrape to the next (without it, each scrape counts the
    whole history)."""

    def __init__(self, ledger: Ledger, history: HistoryCounts | None = None) -> None:
        self.ledger = ledger
        self.history = history if history is not None else HistoryCounts()

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        listing = Listing(self.ledger.backend)
        h = self.history.update(self.ledger)
        counted = dict(h.outcomes)
        counted.update({(job, OutcomeState.PLANNED.value): n
                        for job, n in listing.planned_counts().items()})
        waiting = self.ledger.retention.attention_counts()
        first = self.ledger.retention.attention_page(limit=1).waiting

        outcomes = GaugeMetricFamily("retrysafe_outcomes", "Outcomes in the ledger, by job and state.",
                                     labels=["job", "state"])
        jobs = sorted({job for job, _ in counted})
        for job in jobs:
            for state in OutcomeState:  # every state, zeros too: an alert rule sees 0, not nothing
                outcomes.add_metric([job, state.value], counted.get((job, state.value), 0))
        yield outcomes

        attempts = GaugeMetricFamily("retrysafe_attempts", "Attempts in the ledger, by job and state "
                                     "(active, finished, superseded).", labels=["job", "state"])
        for (job, how, drill), n in sorted(h.attempts.items()):
            if not drill:
                attempts.add_metric([job, how], n)
        yield attempts

        executions = CounterMetricFamily(
            "retrysafe_executions", "Step intents written (an effect executed or a generate step "
            "produced), by job and step kind.", labels=["job", "kind"])
        for (job, kind), n in sorted(h.executions.items()):
            executions.add_metric([job, kind], n)
        yield executions

        for name, doc, values in (
            ("retrysafe_lookups_found", "Steps a lookup found done instead of executing them again.",
             h.lookups_found),
            ("retrysafe_skips", "Later attempts that found an effect step already done (and did "
             "not repeat it).", h.skips),
            ("retrysafe_blocks", "Times a step was blocked for a human.", h.blocks),
        ):
            family = CounterMetricFamily(name, doc, labels=["job"])
            for job in sorted(set(jobs) | set(values)):  # a pruned job's counter stays
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


def render(ledger: Ledger, history: HistoryCounts | None = None) -> bytes:
    """The metrics in the Prometheus text format; ``history`` (updated in place)
    makes the counters incremental."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger, history))
    return generate_latest(registry)


def state_path(textfile: Path) -> Path:
    """Where ``retrysafe metrics --textfile FILE`` keeps its counts: ``.FILE.state``
    beside it (node-exporter reads only ``*.prom``)."""
    return textfile.with_name(f".{textfile.name}.state")


HOME_STATE = ".metrics.state"
"""The file under a home's ``runs/`` where plain ``retrysafe metrics`` keeps its counts."""


_STATE_MAX = 16 << 20
"""Bytes read of a state file at most (one holds at most _MAX_GAPS missing ids)."""


def _kept(state: Path) -> HistoryCounts:
    """The counts a state file holds: nothing counted yet without a readable one, or
    when the name is a link or not a regular file (a link to a device would never
    end)."""
    import os
    import stat

    try:
        fd = os.open(state, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return HistoryCounts()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return HistoryCounts()
        return HistoryCounts.from_json(os.read(fd, _STATE_MAX + 1))
    except OSError:
        return HistoryCounts()
    finally:
        os.close(fd)


def render_kept(ledger: Ledger, home: Path) -> bytes:
    """:func:`render`, with the counts carried from one call to the next in the
    home's ``runs/.metrics.state``, so a call counts the history written since the
    last one. A home whose ``runs/`` does not exist or cannot be written keeps
    nothing: each call then counts the whole history, and the figures are the same."""
    from .fsio import atomic_write_bytes

    state = home / "runs" / HOME_STATE
    history = _kept(state)
    text = render(ledger, history)
    if state.parent.is_dir():
        with contextlib.suppress(OSError):
            atomic_write_bytes(state, history.to_json(), mode=0o600)
    return text


def write_textfile(ledger: Ledger, path: Path) -> str | None:
    """Write :func:`render` to ``path`` for node-exporter's textfile collector:
    a temporary file in the same folder, renamed over it, so the collector never
    reads half a file. The counts carried to the next run go to
    :func:`state_path`, written the same way, after the textfile (a run killed
    between the two counts the same rows again next time, from the older state).
    Returns a warning when the state cannot be written (FILE is, all the same)."""
    from .fsio import atomic_write_bytes

    state = state_path(path)
    history = _kept(state)
    atomic_write_bytes(path, render(ledger, history), mode=0o644)  # the collector runs as its own user
    try:
        atomic_write_bytes(state, history.to_json(), mode=0o600)
    except OSError as exc:  # FILE is written; only its counts are not carried on
        return (f"{path} is written, but its counts cannot be kept in {state} "
                f"({exc.strerror or exc}): the next run counts the whole history again")
    return None
