"""SIGKILL at random moments during real runs of the content pipeline, then the audit.

Each trial starts ``retrysafe run`` (in a process group of its own), does
one kind of harm after a random delay, and re-runs until the outcome is done:

* ``group``: SIGKILL of the whole group (the run, the pipeline script and any
  ``retrysafe step`` child at once);
* ``pair``: two runs of the same outcome started together, one killed so;
* ``run-only``: SIGKILL of the ``retrysafe run`` process alone, as an OOM
  kill does, while its command and step live on as orphans; the re-runs start
  at once, while the orphans still work;
* ``stop``: SIGSTOP of the group, then a re-run whose clock is two hours
  ahead (libfaketime), so the frozen attempt's lease looks long expired; then
  SIGCONT, and the frozen run goes on;
* ``clock``: while the run works, re-runs whose clocks are two hours ahead
  and two hours behind.

Trials run a few at a time, so runs of different outcomes overlap too. The
audit then reads the external systems and the ledger, per kind of harm.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from example_targets import BIN, CONTENT, ContentTargets, example_env

OCCURRENCE = "2026-11-30T0900"
MAX_RERUNS = 12
MAX_DELAY = 2.0  # the longest wait before the harm, whatever a run takes
MIN_DELAY = 0.2  # the shortest span the harm is drawn from
MISSED_KILL_RETRIES = 4  # a ledger-loss run that finished before its kill is harmed again, sooner
BUSY_PATIENCE = 180.0
KINDS = ("group", "pair", "run-only", "stop", "clock")


@dataclass
class Figures:
    """What a chaos run did and found; the audit fields must all be zero."""

    backend: str
    trials: int = 0
    kills: int = 0
    concurrent_pairs: int = 0
    busy_answers: int = 0
    reruns: int = 0
    effects_checked: int = 0
    duplicates: int = 0
    missing_effects: int = 0
    outcomes_lost: int = 0
    outcomes_stuck: int = 0
    json_files: int = 0
    torn_json: int = 0
    verify_failed: int = 0
    wrong_draft: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    # per kind of harm: trials, duplicates, missing effects, outcomes lost or stuck
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Chaos:
    """A chaos run against one home (and ledger)."""

    def __init__(self, targets: ContentTargets, home: Path, backend: str, seed: int) -> None:
        self.targets = targets
        self.home = home
        self.env = example_env(home)
        self.figures = Figures(backend)
        self.random = random.Random(seed)
        self.token = uuid.uuid4().hex[:6]
        self.lock = threading.Lock()
        self.keys: list[str] = []
        self.kind_of: dict[str, str] = {}
        self.faketime = shutil.which("faketime")
        self._span: float | None = None
        self._calibrating = threading.Lock()

    def span(self) -> float:
        """How long after its start a run is harmed, at most: as long as one clean run
        of this home takes here (measured once), so that the harm falls on a live run
        anywhere in it, however fast or slow the machine; between MIN_DELAY and
        MAX_DELAY."""
        with self._calibrating:  # once, by the first trial; the others wait for it
            if self._span is None:
                started = time.monotonic()
                self._popen(f"calibrate{self.token}").wait(timeout=300)
                self._span = min(MAX_DELAY, max(MIN_DELAY, time.monotonic() - started))
            return self._span

    def _popen(self, target: str, shift: str | None = None) -> subprocess.Popen[bytes]:
        argv = [str(BIN / "retrysafe"), "run", "content-pipeline", "-p",
                f"occurrence={OCCURRENCE}", "-p", f"target={target}", "--",
                str(CONTENT / "pipeline.sh")]
        if shift is not None and self.faketime:
            argv = [self.faketime, "-f", shift, *argv]
        return subprocess.Popen(argv, env=self.env, cwd=CONTENT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    def kinds(self) -> list[str]:
        """The kinds of harm this machine can do (stop and clock need libfaketime)."""
        return [k for k in KINDS if self.faketime or k not in ("stop", "clock")]

    def _kind(self, i: int) -> str:
        kinds = self.kinds()
        if i < len(kinds):
            return kinds[i]  # the first trials do every kind once, so a short run has them all
        if i % 5 == 0:
            return "pair"
        others = [k for k in kinds if k != "pair"]
        return others[i % len(others)] if i % 5 in (1, 2) else self.random.choice(others)

    def _busy_or_done(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.wait(timeout=300) == 75:
            self._count(busy_answers=1)

    def _count(self, **delta: int) -> None:
        with self.lock:
            for name, n in delta.items():
                setattr(self.figures, name, getattr(self.figures, name) + n)

    def trial(self, i: int) -> None:
        target = f"c{self.token}-{i}"
        span = self.span()
        with self.lock:
            delay = self.random.uniform(0, span)
            kind = self._kind(i)
            key = f"content-pipeline:{OCCURRENCE}:{target}"
            self.keys.append(key)
            self.kind_of[key] = kind
        victim = self._popen(target)
        twin = self._popen(target) if kind == "pair" else None
        time.sleep(delay)
        if victim.poll() is None:
            self._count(kills=1)
            if kind in ("group", "pair"):
                os.killpg(victim.pid, signal.SIGKILL)
            elif kind == "run-only":
                victim.kill()  # the run alone: its command and step live on as orphans
            elif kind == "stop":
                os.killpg(victim.pid, signal.SIGSTOP)
                self._busy_or_done(self._popen(target, shift="+2h"))
                os.killpg(victim.pid, signal.SIGCONT)
            else:  # clock: runs whose clocks disagree, while the first one works
                for shift in ("+2h", "-2h"):
                    self._busy_or_done(self._popen(target, shift=shift))
        victim.wait()
        if twin is not None:
            self._count(concurrent_pairs=1)
            self._busy_or_done(twin)
        # re-run like a scheduler would: at least MAX_RERUNS times, and on "busy"
        # (a live twin, or a ledger that is briefly unreachable) keep backing off
        # for up to BUSY_PATIENCE seconds
        deadline = time.monotonic() + BUSY_PATIENCE
        tries, wait = 0, 0.3
        while True:
            rc = self._popen(target).wait(timeout=300)
            tries += 1
            self._count(reruns=1)
            if rc == 0:
                break
            if rc == 75:
                self._count(busy_answers=1)
                time.sleep(wait)
                wait = min(wait * 2, 10.0)
            if tries >= MAX_RERUNS and (rc != 75 or time.monotonic() > deadline):
                break
        self._count(trials=1)

    def run(self, trials: int, workers: int = 3) -> Figures:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(self.trial, range(trials)))
        self.audit()
        self.figures.seconds = round(time.monotonic() - started, 1)
        return self.figures

    def ledger_loss(self, trials: int) -> Figures:
        """One after another: a run killed at a random moment, then the ledger deleted.
        The next run must refuse (the home knows its ledger) rather than start over;
        ``retrysafe recover`` rebuilds it from the attempt folders, and the re-runs
        finish every outcome without repeating an effect."""
        started = time.monotonic()
        ledger = self.home / "ledger.sqlite3"
        span = self.span()  # (measured before any victim starts, not while one runs)
        for i in range(trials):
            for retry in range(MISSED_KILL_RETRIES):
                # a victim that finished before its kill is followed by another (a new
                # outcome), harmed sooner: the deletion below must follow a kill
                target = f"l{self.token}-{i}-{retry}"
                key = f"content-pipeline:{OCCURRENCE}:{target}"
                self.keys.append(key)
                self.kind_of[key] = "ledger-deleted"
                victim = self._popen(target)
                time.sleep(self.random.uniform(0, span / (1 << retry)))
                killed = victim.poll() is None
                if killed:
                    os.killpg(victim.pid, signal.SIGKILL)
                    self._count(kills=1)
                victim.wait()
                if killed:
                    break
            for suffix in ("", "-wal", "-shm"):
                ledger.with_name(ledger.name + suffix).unlink(missing_ok=True)
            for _ in range(MAX_RERUNS):
                rc = self._popen(target).wait(timeout=300)
                self._count(reruns=1)
                if rc == 0:
                    break
                if rc == 2:
                    subprocess.run([str(BIN / "retrysafe"), "recover"], env=self.env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   check=False, timeout=300)
            self._count(trials=1)
        self.audit()
        self.figures.seconds = round(time.monotonic() - started, 1)
        return self.figures

    # --- the audit ----------------------------------------------------------------

    def audit(self) -> None:
        from retrysafe.engine import Engine
        from retrysafe.verify import verify_outcome

        fig = self.figures
        counts = self.targets.counts()
        for kind in sorted(set(self.kind_of.values())):
            fig.by_kind[kind] = {"trials": 0, "duplicates": 0, "missing": 0, "lost": 0, "stuck": 0}
        for key in self.keys:
            fig.by_kind[self.kind_of[key]]["trials"] += 1

        def bad(key: str, what: str, n: int = 1) -> None:
            outcome = key.rsplit("/", 1)[0]
            kind = self.kind_of.get(outcome)
            if kind is not None:
                fig.by_kind[kind][what] += n

        for system, per_key in counts.items():
            for key, n in per_key.items():
                if n > 1:
                    fig.duplicates += n - 1
                    bad(key, "duplicates", n - 1)
                    fig.problems.append(f"{system}: {n} effects for {key}")
        posts = {p["key"]: p for p in self.targets.state()["cms"]}
        saved = dict(os.environ)
        os.environ.update(self.env)
        engine = Engine.open(self.home)
        try:
            for key in self.keys:
                for system, step in (("cms", "publish"), ("sheet", "sheet-row"),
                                     ("chat", "notify")):
                    fig.effects_checked += 1
                    if counts[system].get(f"{key}/{step}", 0) == 0:
                        fig.missing_effects += 1
                        bad(f"{key}/{step}", "missing")
                        fig.problems.append(f"{system}: no effect for {key}")
                out = engine.ledger.outcome(key)
                if out is None:
                    fig.outcomes_lost += 1
                    bad(f"{key}/-", "lost")
                    fig.problems.append(f"{key}: no outcome in the ledger")
                    continue
                if out.state != "done":
                    fig.outcomes_stuck += 1
                    bad(f"{key}/-", "stuck")
                    fig.problems.append(f"{key}: {out.state} ({out.reason or 'no reason'})")
                    continue
                bad = [c for c in verify_outcome(engine, key) if not c.ok]
                if bad:
                    fig.verify_failed += 1
                    fig.problems.append(f"{key}: verify: {bad[0].subject}: {bad[0].detail}")
                draft = engine.ledger.step(f"{key}/draft")
                post = posts.get(f"{key}/publish")
                if draft is None or post is None or draft.artifact is None or \
                        post["body"] != Path(draft.artifact).read_text():
                    fig.wrong_draft += 1
                    fig.problems.append(f"{key}: the published body is not the accepted draft")
        finally:
            engine.close()
            os.environ.clear()
            os.environ.update(saved)
        # retrysafe's own files; the pipeline's scratch files are the job's business
        for path in [*(self.home / "runs").rglob("status.json"),
                     *(self.home / "runs").rglob("summary.json")]:
            fig.json_files += 1
            try:
                json.loads(path.read_text())
            except (ValueError, OSError) as exc:
                fig.torn_json += 1
                fig.problems.append(f"{path}: {exc}")


def write_figures(figures: Figures) -> None:
    """Leave the figures where scripts/reliability-report collects them."""
    folder = os.environ.get("RETRYSAFE_CHAOS_REPORT")
    if folder:
        path = Path(folder) / f"chaos-{figures.backend}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures.to_json(), indent=2) + "\n")
