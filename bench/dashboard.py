"""Latency of the dashboard's pages on a ledger with a million outcomes.

The ledger (SQLite) is built once per size and kept under ``bench/results/cache/``:
``--outcomes`` outcomes of four jobs over the last year, each with one attempt,
one step and its history, and one in a thousand blocked or unknown (what the
landing page lists). The dashboard runs as ``retrysafe ui`` does (uvicorn on a
loopback port, in a thread of this process); each page is fetched over HTTP,
alternating with the baseline: a static file from the same server, the floor
of any answer it gives. Reported: median milliseconds of each page, the
baseline's, and their ratio. The target is absolute, as the issue states it:
each page well under a second (``--target-ms``, default 250).

    python bench/dashboard.py [--outcomes 1000000] [--rounds 15] [--metrics-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import RESULTS, interleave, log, machine, median, paired_ratio, write_json  # noqa: E402

JOBS = ("weekly-report", "invoice", "publish", "sync")
CONFIG = "".join(f'[jobs.{j}]\nkey = "{j}:{{n}}"\nparams = {{ n = "slug" }}\n' for j in JOBS)
TOKEN = "bench-token-0123456789abcdef"
_BATCH = 20_000


def build(home: Path, n: int) -> None:
    """A home whose ledger holds ``n`` outcomes (written in bulk, then migrated indexes)."""
    from retrysafe.ledger import open_ledger
    from retrysafe.ledger.migrations import WORDS

    W = {w: code for code, w in enumerate(WORDS)}
    home.mkdir(parents=True, exist_ok=True)
    (home / "retrysafe.toml").write_text(CONFIG)
    db = home / "ledger.sqlite3"
    with open_ledger(f"sqlite:///{db}"):
        pass  # every migration, the listing indexes included
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    rng = random.Random(7)
    now = time.time()
    conn.execute("BEGIN")
    for start in range(0, n, _BATCH):
        outcomes, attempts, steps, events = [], [], [], []
        for i in range(start, min(n, start + _BATCH)):
            job = JOBS[i % len(JOBS)]
            key = f"{job}:{i:07d}"
            t = now - 365 * 86400 * (1 - i / n) - rng.random()
            waiting = i % 1000 == 999
            state = ("blocked" if i % 2000 == 1999 else "unknown") if waiting else "done"
            step_state = state if waiting else "done"
            reason = "step send: check the external system" if waiting else ""
            aid = f"a{i:07d}"
            outcomes.append((key, job, f'{{"n":"{i:07d}"}}', state, reason, "no_lookup" if state == "blocked" else "",
                             1, 1, aid, None if waiting else aid, t, t + 5))
            attempts.append((aid, key, 1, 1, "finished", state, "bench-host", 4242, t, t + 5))
            steps.append((f"{key}/send", key, "send", "effect", "message", step_state, aid, 1,
                          None if waiting else f"msg-{i}", reason, "no_lookup" if state == "blocked" else "",
                          1, t + 1, t + 4))
            events += [(key, "", t, W["attempt"], 0, W["active"], ""),
                       (key, "/send", t + 1, W["step"], 0, W["running"], ""),
                       (key, "/send", t + 4, W["step"], W["running"], W[step_state], reason)]
        conn.executemany("INSERT INTO rs_outcomes (key, job, params, state, reason, cause, fence, attempts,"
                         " current_attempt, accepted_attempt, created_at, updated_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", outcomes)
        conn.executemany("INSERT INTO rs_attempts (id, outcome_key, number, fence, state, result, holder_host,"
                         " holder_pid, lease_expires, started_at, ended_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [(a, k, nb, f, s, r, h, p, t, t, t) for a, k, nb, f, s, r, h, p, t, _ in attempts])
        conn.execute("DROP TRIGGER IF EXISTS rs_steps_created")  # bulk rows carry their history
        conn.executemany("INSERT INTO rs_steps (step_key, outcome_key, name, kind, effect_class, state,"
                         " attempt_id, fence, evidence, reason, cause, tries, created_at, updated_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", steps)
        # the history as the ledger stores it (migrations 11 and 12): by the outcome's id,
        # attempt 1, the kinds and states by their codes
        conn.executemany("INSERT INTO rs_history (outcome, step, at, attempt, fence, kind, from_state,"
                         " to_state, reason) VALUES ((SELECT id FROM rs_outcomes WHERE key = ?), ?, ?,"
                         " 1, 1, ?, ?, ?, ?)", events)
        log(f"   built {min(n, start + _BATCH):,} of {n:,} outcomes")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    # the trigger the bulk load dropped, as the ledger has it (the latest migration's)
    from retrysafe.ledger import open_backend
    from retrysafe.ledger.migrations import MIGRATIONS, statements

    backend = open_backend(f"sqlite:///{db}")
    try:
        trigger = [stmt for _, _, script in MIGRATIONS for stmt in statements(backend, script)
                   if stmt.startswith("CREATE TRIGGER rs_steps_created")][-1]
        with backend.transaction() as tx:
            tx.run(trigger)
    finally:
        backend.close()
    # the identity a ledger gets from its first use, recorded in the home as a command
    # records it: without one, the dashboard's /metrics counts the whole history again
    # at every scrape (it cannot tell this ledger from another)
    from retrysafe.identity import ledger_identity, record_identity

    with open_ledger(f"sqlite:///{db}") as led:
        identity = ledger_identity(led)
    assert identity is not None
    (home / "runs").mkdir(exist_ok=True)
    record_identity(home, identity)
    (home / "built").write_text(_built(n))


def _built(n: int) -> str:
    """What a finished cache's ``built`` file holds; a cache built by an older version of
    this script (its parameters did not render its keys) is built again."""
    return f"{n} v5"


def cached_home(cache: Path, n: int) -> Path:
    home = cache / f"dashboard-{n}"
    built = home / "built"
    if not built.is_file() or built.read_text() != _built(n):
        import shutil

        shutil.rmtree(home, ignore_errors=True)
        log(f"== building a ledger with {n:,} outcomes in {home} (once; kept for later runs)")
        build(home, n)
    return home


def serve(home: Path) -> tuple[str, Any]:
    """The dashboard over ``home``, as ``retrysafe ui`` serves it, on a free loopback port."""
    import uvicorn

    from retrysafe.engine import Engine
    from retrysafe.ui.app import Settings, create_app

    engine = Engine.open(home)
    app = create_app(engine, Settings(token=TOKEN, allow_actions=False, operator="bench"))
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outcomes", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--metrics-rounds", type=int, default=3,
                    help="rounds of /metrics after its first scrape (which counts the whole history)")
    ap.add_argument("--target-ms", type=float, default=250.0)
    ap.add_argument("--cache", type=Path, default=RESULTS / "cache")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    import httpx

    home = cached_home(args.cache, args.outcomes)
    url, server = serve(home)
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600)
    mid = args.outcomes // 2 + 1
    middle = f"{JOBS[mid % len(JOBS)]}:{mid:07d}"
    pages = {
        "needs_attention": "/",
        "outcome": "/outcome?key=" + middle,
        "outcomes_first_page": "/outcomes",
        "outcomes_job_and_state": f"/outcomes?job={JOBS[2]}&state=done",
        "metrics": "/metrics",
    }
    import html
    import re

    landing = client.get("/").text
    nxt = re.search(r'rel="next" href="([^"]+)"', landing)
    if nxt:  # the landing page's second page: a cursor into the state index
        pages = {"needs_attention": "/", "needs_attention_next_page": html.unescape(nxt.group(1)),
                 **{k: v for k, v in pages.items() if k != "needs_attention"}}

    def fetch(path: str) -> float:
        t0 = time.perf_counter()
        got = client.get(path)
        elapsed = time.perf_counter() - t0
        if got.status_code != 200:
            raise SystemExit(f"{path} answered {got.status_code}: {got.text[:200]}")
        return elapsed * 1000

    # the first /metrics counts the whole history; later ones only what was written since
    first_metrics_ms = fetch("/metrics")
    log(f"   metrics, first scrape    {first_metrics_ms:8.1f} ms")
    for path in pages.values():
        fetch(path)  # warm: templates compiled, pages of the database cached
    baseline_ms: list[float] = []
    results: dict[str, Any] = {}
    for name, path in pages.items():
        rounds = args.metrics_rounds if name == "metrics" else args.rounds
        page, base = interleave(rounds, lambda p=path: fetch(p), lambda: fetch("/static/style.css"))
        baseline_ms += base
        results[name] = {"median_ms": median(page), "max_ms": max(page),
                         "ratio": paired_ratio(page, base),
                         "meets_target": median(page) < args.target_ms}
        log(f"   {name:24s} {median(page):8.1f} ms  (x{results[name]['ratio']:.1f} a static file)")
    server.should_exit = True
    out = {
        "outcomes": args.outcomes,
        "rounds": args.rounds,
        "target_ms": args.target_ms,
        "baseline": "GET of a static file from the same server",
        "baseline_median_ms": median(baseline_ms),
        "pages": results,
        "metrics_first_scrape_ms": first_metrics_ms,
        "meets_target": all(r["meets_target"] for r in results.values()),
        "machine": machine(),
    }
    write_json(args.json, out)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
