"""One outcome with one guarded effect per key: retrysafe against its peers.

The unit a user pays for is an outcome (a cron run, an item), not an effect
inside a long attempt. Each contestant handles N keys, one outcome with one
guarded effect each, first run (the effect executes) and re-run (the recorded
result comes back, nothing executes). Everything a user pays per key is inside
the clock: claiming the outcome, the attempt folder, close-out; opening a
store happens once per round, before the clock (one warm-up key too).

SQLite contestants, in one process, the order rotating every round:

* ``retrysafe start()`` per key (the one-line convenience call) and one
  ``Engine`` reused for every key (``Engine.start``), each at
  ``synchronous=FULL`` (the default) and ``NORMAL``;
* exactly-once (``once(store, key=...)`` as a context manager), justonce
  (``Idempotent(store).run``) and idemkey (``guard(fn, store=...)``), each on
  its own SQLite store in WAL mode, at ``synchronous=FULL`` and ``NORMAL``
  (exactly-once's default is NORMAL, the others' the library default, FULL).

PostgreSQL contestants, 1 and 4 worker processes, the order rotating:
retrysafe (``start()`` per key, a reused ``Engine``), DBOS (one workflow per
key, ``SetWorkflowID(key)``, with one ``@DBOS.step``) and a careful
hand-written psycopg script in autocommit (``INSERT ... ON CONFLICT DO
NOTHING RETURNING`` as the intent, an ``UPDATE`` as the record; a re-run finds
the row with one ``SELECT``).

Durable syncs per outcome are counted, not timed: each SQLite contestant runs
in a child process under ``strace -f`` for two sizes, and the difference
divided by the difference in keys is the count per outcome (``fsync`` and
``fdatasync``, SQLite's WAL syncs included), so set-up costs cancel out. The
same traces count the pages each outcome appends to the write-ahead log: every
commit writes each page it changed, so more tables and indexes touched per
commit means more bytes written and synced.

The peers live in the benchmark's own environment (``bench/.venv-peers``,
ignored by git); ``--setup`` creates it. Without it only retrysafe runs.

    python bench/per_outcome.py --setup          # once: the peers' environment
    python bench/per_outcome.py                  # SQLite and PostgreSQL
    python bench/per_outcome.py --no-pg --rounds 5 --keys 50
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_VENV = HERE / ".venv-peers"
PEERS_PY = PEERS_VENV / "bin" / "python"
PEER_PACKAGES = ["exactly-once", "justonce", "idemkey", "dbos", "matplotlib",
                 "psycopg[binary]", "psycopg-pool"]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
from _util import RESULTS, log, machine, median, write_json  # noqa: E402

import retrysafe  # noqa: E402
from retrysafe.engine import Engine  # noqa: E402
from retrysafe.ledger.migrations import WORDS  # noqa: E402

W = {w: code for code, w in enumerate(WORDS)}
"""the codes of the history's kinds and states (schema 12), for the floor's statements"""

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
CONFIG = """\
[ledger]
sqlite_synchronous = "{sync}"

[jobs.bench]
key = "bench:{{run}}"
params = {{ run = "slug" }}
"""
PG_CONFIG = """\
[jobs.bench]
key = "bench:{run}"
params = { run = "slug" }
"""
TARGET_FULL = 1.0
TARGET_NORMAL = 0.5
TARGET_PG_DBOS = 1.0
TARGET_PG_BASE = 0.8


def _execute(_key: str) -> str:
    return "ok"


# --- SQLite contestants ------------------------------------------------------------
# Each takes a fresh folder and the keys; returns (first-run seconds, re-run seconds).
# Opening the store and one warm-up key happen before the clock.

Contestant = Callable[[Path, list[str]], tuple[float, float]]


def _home(folder: Path, sync: str) -> Path:
    home = folder / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG.format(sync=sync), "utf-8")
    return home


def _timed_twice(keys: list[str], one: Callable[[str], object]) -> tuple[float, float]:
    t0 = time.perf_counter()
    for k in keys:
        one(k)
    t1 = time.perf_counter()
    for k in keys:
        one(k)
    return t1 - t0, time.perf_counter() - t1


def _start_effect(api: Any, **where: Any) -> Callable[[str], None]:
    """One outcome per key as ``start()`` and ``effect()`` on ``api`` (the module, with
    ``where`` naming the home, or an engine)."""
    def one(k: str) -> None:
        with api.start("bench", {"run": k}, **where) as r:
            r.effect("send", "local_write", execute=_execute)
    return one


def _once(api: Any, **where: Any) -> Callable[[str], None]:
    """One outcome per key as one ``once()`` call on ``api`` (as :func:`_start_effect`)."""
    def one(k: str) -> None:
        api.once("bench", {"run": k}, "send", "local_write", execute=_execute, **where)
    return one


def _close_all() -> None:
    from retrysafe import engine

    closer = getattr(engine, "close_all", None)  # (a version without it closes nothing)
    if closer is not None:
        closer()


def rs_per_key(sync: str, calls: Callable[..., Callable[[str], None]]) -> Contestant:
    """The module-level call per key (``start()`` finds its kept engine each time)."""
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        one = calls(retrysafe, home=_home(folder, sync))
        one("warm")
        try:
            return _timed_twice(keys, one)
        finally:
            _close_all()
    return run


def rs_reused(sync: str, calls: Callable[..., Callable[[str], None]]) -> Contestant:
    """One ``Engine`` opened before the clock and used for every key."""
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        with Engine.open(_home(folder, sync)) as engine:
            one = calls(engine)
            one("warm")
            return _timed_twice(keys, one)
    return run


def rs_floor(sync: str) -> Contestant:
    """Not a way to use retrysafe: the ledger writes of one outcome as the engine makes
    them (the claim, the intent, the record, the finish: four transactions, the claim's
    and the finish's without a sync of their own, the same rows, history and triggers),
    as plain sqlite3 statements on retrysafe's schema, with no engine, no lease, no
    attempt folder, no checks. Against the peers it shows what the design's durable
    phases cost before any of the code that runs them."""
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        import sqlite3

        home = _home(folder, sync)
        # the schema, migrated as a first run makes it
        with Engine.open(home) as engine, engine.start("bench", {"run": "schema"}) as r:
            r.effect("send", "local_write", execute=_execute)
        conn = sqlite3.connect(home / "ledger.sqlite3", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        quiet, durable = "PRAGMA synchronous = NORMAL", f"PRAGMA synchronous = {sync.upper()}"
        started = "b4f72abc946b:223332"  # a boot id (as recorded, 12 digits) and start ticks
        x = conn.execute

        def one(k: str) -> None:
            key, step = f"bench:{k}", f"bench:{k}/send"
            row = x("SELECT state FROM rs_outcomes WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] == "done":
                return
            aid, now, pid = uuid.uuid4().hex[:20], time.time(), os.getpid()
            x(quiet)
            x("BEGIN IMMEDIATE")
            x("INSERT INTO rs_outcomes (key, job, params, state, fence, attempts, current_attempt,"
              " created_at, updated_at) VALUES (?, 'bench', ?, 'running', 1, 1, ?, ?, ?)",
              (key, f'{{"run":"{k}"}}', aid, now, now))
            x("INSERT INTO rs_attempts (id, outcome_key, number, fence, state, holder_host,"
              " holder_pid, holder_started, lease_expires, context, started_at)"
              " VALUES (?, ?, 1, 1, 'active', 'host', ?, ?, ?, '{}', ?)",
              (aid, key, pid, started, now + 900, now))
            oid = x("SELECT id FROM rs_outcomes WHERE key = ?", (key,)).fetchone()[0]
            x("INSERT INTO rs_history (outcome, at, attempt, fence, kind, from_state, to_state,"
              " reason) VALUES (?, ?, 1, 1, ?, 0, ?, NULL), (?, ?, 1, 1, ?, ?, ?, '')",
              (oid, now, W["attempt"], W["active"], oid, now, W["outcome"], W["planned"],
               W["running"]))
            x("COMMIT")
            x(durable)
            x("INSERT INTO rs_steps (step_key, outcome_key, name, kind, effect_class, state,"
              " attempt_id, fence, reason, tries, created_at, updated_at, runner_host, runner_pid,"
              " runner_started) VALUES (?, ?, 'send', 'effect', 'local_write', 'running', ?, 1,"
              " 'attempt 1 started it', 1, ?, ?, 'host', ?, ?)",
              (step, key, aid, now, now, pid, started))
            result = _execute(key)
            x("BEGIN IMMEDIATE")
            x("UPDATE rs_steps SET previous_state = state, state = 'done', reason = '',"
              " evidence = ?, updated_at = ? WHERE step_key = ? AND state = 'running'",
              (result, now, step))
            x("INSERT INTO rs_history (outcome, at, attempt, fence, kind, from_state, to_state)"
              " VALUES (?, ?, 1, 1, ?, ?, ?)",
              (oid, now, W["outcome"], W["running"], W["delivered"]))
            x("UPDATE rs_outcomes SET state = 'delivered', updated_at = ? WHERE key = ?",
              (now, key))
            x("COMMIT")
            x(quiet)
            x("BEGIN IMMEDIATE")
            x("UPDATE rs_attempts SET state = 'finished', result = 'done', ended_at = ?"
              " WHERE id = ?", (now, aid))
            x("UPDATE rs_outcomes SET state = 'done', updated_at = ?, current_attempt = NULL,"
              " accepted_attempt = ? WHERE key = ?", (now, aid, key))
            x("INSERT INTO rs_history (outcome, at, attempt, fence, kind, from_state, to_state,"
              " reason) VALUES (?, ?, 1, 1, ?, ?, ?, 'result done'), (?, ?, 1, 1, ?, ?, ?, '')",
              (oid, now, W["attempt"], W["active"], W["finished"], oid, now, W["outcome"],
               W["delivered"], W["done"]))
            x("COMMIT")
            x(durable)

        one("warm")
        try:
            return _timed_twice(keys, one)
        finally:
            conn.close()
    return run


def exactly_once(sync: str | None) -> Contestant:
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        from exactly_once import Store, once

        store = Store.sqlite(str(folder / "eo.sqlite3"))
        if sync:
            store._conn.execute(f"PRAGMA synchronous={sync}")  # type: ignore[attr-defined]

        def one(k: str) -> None:
            with once(store, key=k) as guard:
                if guard.fresh:
                    guard.result = _execute(k)

        one("warm")
        try:
            return _timed_twice(keys, one)
        finally:
            store.close()
    return run


def justonce(sync: str | None) -> Contestant:
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        from justonce import Idempotent
        from justonce.stores import SqliteStore

        store = SqliteStore(folder / "jo.sqlite3")
        if sync:
            store._conn.execute(f"PRAGMA synchronous={sync}")
        idem = Idempotent(store)

        def one(k: str) -> None:
            idem.run(k, lambda: _execute(k))

        one("warm")
        try:
            return _timed_twice(keys, one)
        finally:
            store.close()
    return run


def idemkey(sync: str | None) -> Contestant:
    def run(folder: Path, keys: list[str]) -> tuple[float, float]:
        from idemkey import DedupStore, guard

        store = DedupStore(str(folder / "ik.sqlite3"))
        if sync:
            store._conn.execute(f"PRAGMA synchronous={sync}")

        def effect() -> str:
            return "ok"

        guarded = guard(effect, store=store)

        def one(k: str) -> None:
            guarded(idemkey=k)

        one("warm")
        try:
            return _timed_twice(keys, one)
        finally:
            store.close()
    return run


FLOOR_LABEL = "retrysafe's ledger writes alone, plain SQL (the floor; not a way to use it)"

#: name -> (label, contestant, needs a peer package, synchronous)
SQLITE: dict[str, tuple[str, Contestant, str, str]] = {
    "rs_start_full": ("retrysafe `start()` per key", rs_per_key("full", _start_effect), "", "FULL"),
    "rs_engine_full": ("retrysafe, one `Engine` reused", rs_reused("full", _start_effect), "", "FULL"),
    "rs_once_full": ("retrysafe `once()` per key", rs_per_key("full", _once), "", "FULL"),
    "rs_engine_once_full": ("retrysafe, `Engine.once` reused", rs_reused("full", _once), "",
                            "FULL"),
    "rs_floor_full": (FLOOR_LABEL, rs_floor("full"), "", "FULL"),
    "eo_full": ("exactly-once", exactly_once("FULL"), "exactly_once", "FULL"),
    "jo_full": ("justonce", justonce("FULL"), "justonce", "FULL"),
    "ik_full": ("idemkey", idemkey("FULL"), "idemkey", "FULL"),
    "rs_start_normal": ("retrysafe `start()` per key", rs_per_key("normal", _start_effect), "", "NORMAL"),
    "rs_engine_normal": ("retrysafe, one `Engine` reused", rs_reused("normal", _start_effect), "", "NORMAL"),
    "rs_once_normal": ("retrysafe `once()` per key", rs_per_key("normal", _once), "", "NORMAL"),
    "rs_engine_once_normal": ("retrysafe, `Engine.once` reused", rs_reused("normal", _once), "",
                              "NORMAL"),
    "rs_floor_normal": (FLOOR_LABEL, rs_floor("normal"), "", "NORMAL"),
    "eo_normal": ("exactly-once (its default)", exactly_once(None), "exactly_once", "NORMAL"),
    "jo_normal": ("justonce", justonce("NORMAL"), "justonce", "NORMAL"),
    "ik_normal": ("idemkey", idemkey("NORMAL"), "idemkey", "NORMAL"),
}


def _available(module: str) -> bool:
    if not module:
        return True
    import importlib.util

    return importlib.util.find_spec(module) is not None


def run_sqlite(keys: int, rounds: int, workdir: Path) -> dict[str, Any]:
    names = [n for n, (_l, _c, mod, _s) in SQLITE.items() if _available(mod)]
    first: dict[str, list[float]] = {n: [] for n in names}
    rerun: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        ks = [f"r{r}-k{i}" for i in range(keys)]
        for name in order:
            folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
            try:
                a, b = SQLITE[name][1](folder, ks)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            first[name].append(keys / a)
            rerun[name].append(keys / b)
        log(f"sqlite round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {first[n][-1]:,.0f}/{rerun[n][-1]:,.0f}" for n in names))
    rows = {}
    for n in names:
        label, _c, _m, sync = SQLITE[n]
        rows[n] = {"label": label, "synchronous": sync,
                   "first_per_s": first[n], "rerun_per_s": rerun[n],
                   "first_median": median(first[n]), "rerun_median": median(rerun[n])}
    return {"keys_per_round": keys, "rounds": rounds, "contestants": rows,
            "targets": _sqlite_targets(rows, first, rerun)}


def _paired(a: list[float], b: list[float]) -> float:
    return median([x / y for x, y in zip(a, b, strict=True)])


def _sqlite_targets(rows: dict[str, Any], first: dict[str, list[float]],
                    rerun: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Each retrysafe contestant against each peer at the same synchronous setting
    (the median of the per-round ratios: each round's contestants ran back to back)."""
    out = []
    for mine in ("rs_start", "rs_engine", "rs_once", "rs_engine_once", "rs_floor"):
        for sync in ("full", "normal"):
            me = f"{mine}_{sync}"
            if me not in rows:
                continue
            for peer in ("eo", "jo", "ik"):
                other = f"{peer}_{sync}"
                if other not in rows:
                    continue
                target = TARGET_FULL if sync == "full" else (TARGET_NORMAL if peer == "eo"
                                                             else None)
                for phase, data in (("first", first), ("rerun", rerun)):
                    t = target if phase == "first" else (TARGET_FULL if sync == "full"
                                                         else None)
                    if mine == "rs_floor":  # what the design's writes cost: no target of its own
                        t = None
                    ratio = _paired(data[me], data[other])
                    out.append({"retrysafe": me, "peer": other, "phase": phase,
                                "ratio": ratio, "target": t,
                                "meets_target": None if t is None else ratio >= t})
    return out


# --- SQL statements per outcome, counted -------------------------------------------------


def count_statements(workdir: Path, n: int = 20) -> dict[str, Any]:
    """SQL statements per outcome on SQLite with a reused engine, first run and re-run:
    every statement the library hands the connection, counted by a proxy around it
    (what a trigger writes inside a statement is not a statement of its own)."""
    folder = workdir / "statements"
    folder.mkdir()
    home = _home(folder, "full")
    calls: list[str] = []

    class Counting:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            calls.append(sql)
            return self._conn.execute(sql, *args)

        def cursor(self) -> Any:  # a statement run on a cursor of its own counts too
            return Counting(self._conn.cursor())

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "_conn":
                object.__setattr__(self, name, value)
            else:
                setattr(self._conn, name, value)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    out: dict[str, Any] = {}
    with Engine.open(home) as engine:
        backend: Any = engine.ledger.backend
        backend._local.conn = Counting(backend._conn())

        for prefix, f in (("", _start_effect(engine)), ("once-", _once(engine))):
            f(f"{prefix}count-warm")
            for phase in ("first", "rerun"):
                calls.clear()
                for i in range(n):
                    f(f"{prefix}count-{i}")
                words = [c.split(None, 1)[0].upper() for c in calls]
                # a write transaction joined to a shared commit is a savepoint in it
                out[prefix.replace("-", "_") + phase] = {
                    "statements": sum(w not in _TX_WORDS for w in words) / n,
                    "selects": words.count("SELECT") / n,
                    "write_transactions": words.count("BEGIN") / n,
                }
    return out


_TX_WORDS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


# --- durable syncs, counted with strace ----------------------------------------------

_TRACE_LINE = re.compile(
    r"^\d+\s+(fsync|fdatasync|pwrite64)\(\d+<([^>]*)>(?:, [^,]*, (\d+), \d+)?\)\s*=\s*(-?\d+)")


def _strace_syncs(name: str, keys: int, rerun: bool, workdir: Path) -> dict[str, int]:
    """fsync/fdatasync calls of one child running ``name`` on ``keys`` outcomes, and the
    pages it appended to a SQLite write-ahead log (``pwrite64`` of a whole page to a
    ``-wal`` file; a frame's 24-byte header is written apart)."""
    out = workdir / f"strace-{name}-{keys}-{int(rerun)}.txt"
    cmd = ["strace", "-f", "-qq", "-y", "-s", "0", "-e", "trace=fsync,fdatasync,pwrite64",
           "-o", str(out), sys.executable, str(Path(__file__).resolve()), "--count-child",
           name, "--keys", str(keys), "--dir", str(workdir)] + (["--rerun"] if rerun else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"strace child {name} exited {proc.returncode}: {proc.stderr[-500:]}")
    counts = {"fsync": 0, "fdatasync": 0, "wal_pages": 0}
    for line in out.read_text(errors="replace").splitlines():
        m = _TRACE_LINE.match(line)
        if not m:
            continue
        call, path, size = m.group(1), m.group(2), m.group(3)
        if call != "pwrite64":
            counts[call] += 1
        elif path.endswith("-wal") and size is not None and int(size) >= 512:
            counts["wal_pages"] += 1
    out.unlink()
    return counts


def count_syncs(workdir: Path, small: int = 4, large: int = 24) -> dict[str, Any]:
    """Durable syncs per outcome, first run and re-run, for each SQLite contestant."""
    if shutil.which("strace") is None:
        return {"skipped": "strace is not installed"}
    out: dict[str, Any] = {}
    for name, (_l, _c, mod, _s) in SQLITE.items():
        if not _available(mod):
            continue
        try:
            a = _strace_syncs(name, small, False, workdir)
            b = _strace_syncs(name, large, False, workdir)
            c = _strace_syncs(name, small, True, workdir)
        except RuntimeError as exc:
            out[name] = {"skipped": str(exc)}
            continue
        span = large - small
        out[name] = {
            "first_fsync": (b["fsync"] - a["fsync"]) / span,
            "first_fdatasync": (b["fdatasync"] - a["fdatasync"]) / span,
            "rerun_fsync": (c["fsync"] - a["fsync"]) / small,
            "rerun_fdatasync": (c["fdatasync"] - a["fdatasync"]) / small,
        }
        row = out[name]
        row["first_wal_pages"] = (b["wal_pages"] - a["wal_pages"]) / span
        row["rerun_wal_pages"] = (c["wal_pages"] - a["wal_pages"]) / small
        row["first"] = row["first_fsync"] + row["first_fdatasync"]
        row["rerun"] = row["rerun_fsync"] + row["rerun_fdatasync"]
    return out


def _count_child(name: str, keys: int, rerun: bool, workdir: Path) -> None:
    """Run one contestant for the strace counter (no timing is reported)."""
    folder = Path(tempfile.mkdtemp(prefix=f"count-{name}-", dir=workdir))
    contestant = SQLITE[name][1]
    ks = [f"c{i}" for i in range(keys)]
    if rerun:
        contestant(folder, ks)  # first and re-run both: the parent subtracts the first
    else:
        _first_only(name, folder, ks)
    shutil.rmtree(folder, ignore_errors=True)


def _first_only(name: str, folder: Path, keys: list[str]) -> None:
    """The contestant on ``keys``, first run only (its re-run replaced by nothing)."""
    global _timed_twice
    real = _timed_twice

    def once_only(ks: list[str], one: Callable[[str], object]) -> tuple[float, float]:
        for k in ks:
            one(k)
        return 1.0, 1.0

    _timed_twice = once_only
    try:
        SQLITE[name][1](folder, keys)
    finally:
        _timed_twice = real


# --- PostgreSQL ------------------------------------------------------------------------


def _with_db(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


BASE_DDL = ("CREATE TABLE IF NOT EXISTS base_effects (key TEXT PRIMARY KEY, state TEXT NOT NULL,"
            " result TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
            " updated_at TIMESTAMPTZ NOT NULL DEFAULT now())")


def _base_one(conn: Any, k: str) -> str:
    """The careful script for one key: intent with INSERT ... ON CONFLICT DO NOTHING
    RETURNING, then the record; a key already there is read (done: its result comes
    back)."""
    if conn.execute("INSERT INTO base_effects (key, state) VALUES (%s, 'running')"
                    " ON CONFLICT (key) DO NOTHING RETURNING 1", (k,)).fetchone():
        result = _execute(k)
        conn.execute("UPDATE base_effects SET state = 'done', result = %s,"
                     " updated_at = now() WHERE key = %s AND state = 'running'", (result, k))
        return result
    row = conn.execute("SELECT state, result FROM base_effects WHERE key = %s", (k,)).fetchone()
    if row is None or row[0] != "done":
        raise RuntimeError(f"{k} is {row}")
    return str(row[1])


def _pg_base_worker(url: str, keys: list[str], barrier: Any, out: Any) -> None:
    """The careful script (:func:`_base_one`) in autocommit, one connection."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            def one(k: str) -> str:
                return _base_one(conn, k)

            one(f"warm-{keys[0]}")
            _pg_timed(keys, one, barrier, out)
    except BaseException as exc:
        barrier.abort()
        out.put((0.0, 0.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


RERUN_PASSES = 5
"""Passes over its keys a PostgreSQL worker re-runs: one pass of a few dozen keys lasts a
few milliseconds, shorter than the noise of waking processes at a barrier."""


def _pg_timed(keys: list[str], one: Callable[[str], object], barrier: Any, out: Any) -> None:
    barrier.wait()
    t0 = time.perf_counter()
    for k in keys:
        one(k)
    t1 = time.perf_counter()
    barrier.wait()
    t2 = time.perf_counter()
    for _ in range(RERUN_PASSES):
        for k in keys:
            one(k)
    t3 = time.perf_counter()
    out.put((t0, t1, t2, t3, ""))


def _pg_rs_worker(mode: str, url: str, home: str, keys: list[str], barrier: Any,
                  out: Any) -> None:
    try:
        if mode == "engine":
            with Engine.open(home, ledger=url) as engine:
                one = _start_effect(engine)
                one(f"warm-{keys[0]}")
                _pg_timed(keys, one, barrier, out)
        else:
            one = (_once if mode == "once" else _start_effect)(retrysafe, home=home, ledger=url)
            one(f"warm-{keys[0]}")
            _pg_timed(keys, one, barrier, out)
    except BaseException as exc:
        barrier.abort()
        out.put((0.0, 0.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def _pg_dbos_worker(url: str, keys: list[str], barrier: Any, out: Any) -> None:
    try:
        import logging

        from dbos import DBOS, SetWorkflowID

        @DBOS.step()
        def effect(k: str) -> str:
            return _execute(k)

        @DBOS.workflow()
        def workflow(k: str) -> str:
            return effect(k)

        DBOS(config={"name": "retrysafe-bench", "system_database_url": url,
                     "run_admin_server": False, "log_level": "WARNING"})
        DBOS.launch()
        logging.getLogger("dbos").setLevel(logging.WARNING)
        try:
            def one(k: str) -> None:
                with SetWorkflowID(k):
                    workflow(k)

            one(f"warm-{keys[0]}")
            _pg_timed(keys, one, barrier, out)
        finally:
            DBOS.destroy()
    except BaseException as exc:
        barrier.abort()
        out.put((0.0, 0.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def _pg_round(target: Callable[..., None], args: tuple[Any, ...], workers: int,
              keys: list[str]) -> tuple[float, float]:
    """Aggregate keys/s of ``workers`` processes, first run and re-run."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    out = ctx.Queue()
    shares = [keys[w::workers] for w in range(workers)]
    procs = [ctx.Process(target=target, args=(*args, shares[w], barrier, out))
             for w in range(workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r[4] for r in results if r[4]]
    if errors:
        raise RuntimeError(f"a worker failed: {errors[0]}")
    first = len(keys) / (max(r[1] for r in results) - min(r[0] for r in results))
    rerun = len(keys) * RERUN_PASSES / (max(r[3] for r in results) - min(r[2] for r in results))
    return first, rerun


def run_postgres(admin_url: str, keys: int, rounds: int, concurrency: list[int],
                 workdir: Path) -> dict[str, Any]:
    import psycopg

    tag = uuid.uuid4().hex[:10]
    db, dbos_db = f"retrysafe_bench_{tag}", f"retrysafe_bench_dbos_{tag}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
        server = admin.execute("SHOW server_version").fetchone()
        sync = admin.execute("SHOW synchronous_commit").fetchone()
    url, dbos_url = _with_db(admin_url, db), _with_db(admin_url, dbos_db)
    home = workdir / "pg-home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(PG_CONFIG, "utf-8")
    contestants: dict[str, tuple[str, Callable[..., None], tuple[Any, ...]]] = {
        "rs_start": ("retrysafe `start()` per key", _pg_rs_worker, ("start", url, str(home))),
        "rs_engine": ("retrysafe, one `Engine` reused", _pg_rs_worker,
                      ("engine", url, str(home))),
        "rs_once": ("retrysafe `once()` per key", _pg_rs_worker, ("once", url, str(home))),
        "base": ("psycopg, INSERT ... ON CONFLICT in autocommit", _pg_base_worker, (url,)),
    }
    if _available("dbos"):
        contestants["dbos"] = ("DBOS (one workflow, one step)", _pg_dbos_worker, (dbos_url,))
    per: list[dict[str, Any]] = []
    try:
        retrysafe.open_ledger(url).close()  # migrate once, outside the clock
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BASE_DDL)
        names = list(contestants)
        for workers in concurrency:
            first: dict[str, list[float]] = {n: [] for n in names}
            rerun: dict[str, list[float]] = {n: [] for n in names}
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    # keys of its own: the two retrysafe contestants share one ledger,
                    # and the second must not find the first's outcomes already done
                    ks = [f"{name.replace('_', '-')}-p{workers}-r{r}-k{i}" for i in range(keys)]
                    _label, target, args = contestants[name]
                    a, b = _pg_round(target, args, workers, ks)
                    first[name].append(a)
                    rerun[name].append(b)
                log(f"postgres {workers} process(es), round {r + 1}/{rounds}: " + ", ".join(
                    f"{n} {first[n][-1]:,.0f}/{rerun[n][-1]:,.0f}" for n in names))
            row: dict[str, Any] = {"workers": workers, "contestants": {}}
            for n in names:
                row["contestants"][n] = {"label": contestants[n][0],
                                         "first_per_s": first[n], "rerun_per_s": rerun[n],
                                         "first_median": median(first[n]),
                                         "rerun_median": median(rerun[n])}
            ratios = []
            for mine in ("rs_start", "rs_engine", "rs_once"):
                for peer, t in (("dbos", TARGET_PG_DBOS), ("base", TARGET_PG_BASE)):
                    if peer not in first:
                        continue
                    for phase, data in (("first", first), ("rerun", rerun)):
                        ratio = _paired(data[mine], data[peer])
                        ratios.append({"retrysafe": mine, "peer": peer, "phase": phase,
                                       "ratio": ratio, "target": t,
                                       "meets_target": ratio >= t})
            row["targets"] = ratios
            per.append(row)
        counts = pg_counts(url, home)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for name in (db, dbos_db):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {"server_version": server[0] if server else "?",
            "synchronous_commit": sync[0] if sync else "?", "keys_per_round": keys,
            "rerun_passes": RERUN_PASSES,
            "rounds": rounds, "concurrency": per, "per_outcome": counts}


_TX_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SET LOCAL", "SELECT extract(epoch FROM now())")


def pg_counts(url: str, home: Path, n: int = 20) -> dict[str, Any]:
    """Round trips and statements per outcome on PostgreSQL (retrysafe and the
    hand-written script), counted by wrapping psycopg in this process: every message
    sent is a round trip; a message without parameters may hold several statements
    (the simple query protocol), of which BEGIN, COMMIT and what opens a transaction
    (its settings, the server's clock) are not counted as statements."""
    import psycopg

    counts = {"round_trips": 0, "statements": 0, "transactions": 0}
    # every statement goes through a cursor's execute (the connection's own execute
    # opens a cursor for it), so that is where messages are counted
    real_execute = psycopg.Cursor.execute
    counting = [False]

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = str(query)
        if counting[0] and text:  # (an empty query is the pool's ping, not ours)
            counts["round_trips"] += 1
            # several statements only without parameters; the benchmark's values
            # hold no semicolons
            params = args[0] if args else kwargs.get("params")
            parts = [p.strip() for p in text.split(";")] if not params else [text]
            counts["statements"] += sum(1 for p in parts if p and not p.startswith(_TX_CONTROL))
            counts["transactions"] += sum(1 for p in parts if p.startswith("BEGIN"))
        return real_execute(self, query, *args, **kwargs)

    patched: Any = psycopg.Cursor
    patched.execute = execute
    out: dict[str, Any] = {}
    try:
        with Engine.open(home, ledger=url) as engine:
            def one(k: str) -> None:
                with engine.start("bench", {"run": k}) as r:
                    r.effect("send", "local_write", execute=_execute)

            with psycopg.connect(url, autocommit=True) as base:
                def base_one(k: str) -> None:
                    _base_one(base, k)

                for name, f in (("rs_engine", one), ("rs_engine_once", _once(engine)),
                                ("base", base_one)):
                    f(f"count-warm-{name.replace('_', '-')}")
                    for phase in ("first", "rerun"):
                        counts.update(round_trips=0, statements=0, transactions=0)
                        counting[0] = True
                        for i in range(n):
                            f(f"count-{name.replace('_', '-')}-{i}")
                        counting[0] = False
                        out[f"{name}_{phase}"] = {
                            "round_trips": counts["round_trips"] / n,
                            "transactions_blocks": counts["transactions"] / n,
                            "statements": counts["statements"] / n}
    finally:
        patched.execute = real_execute
    return out


# --- plots ------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """A bar chart of keys/s per contestant (first run and re-run); needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sq = result.get("sqlite", {}).get("contestants", {})
    pg = result.get("postgres", {}).get("concurrency", [])
    panels = [("SQLite, synchronous=FULL", {n: r for n, r in sq.items() if n.endswith("_full")}),
              ("SQLite, synchronous=NORMAL",
               {n: r for n, r in sq.items() if n.endswith("_normal")})]
    for row in pg:
        panels.append((f"PostgreSQL, {row['workers']} process(es)", row["contestants"]))
    panels = [(t, p) for t, p in panels if p]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.2 * len(panels) + 0.6))
    if len(panels) == 1:
        axes = [axes]
    for ax, (title, rows) in zip(axes, panels, strict=True):
        labels = [r["label"].replace("`", "") for r in rows.values()]
        ys = range(len(labels))
        ax.barh([y + 0.2 for y in ys], [r["first_median"] for r in rows.values()], height=0.4,
                label="first run", color="#4c72b0")
        ax.barh([y - 0.2 for y in ys], [r["rerun_median"] for r in rows.values()], height=0.4,
                label="re-run", color="#dd8452")
        ax.set_yticks(list(ys), labels, fontsize=8)
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].legend(fontsize=8, loc="lower right")
    axes[-1].set_xlabel("outcomes per second (median, log scale)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- command line ---------------------------------------------------------------------


def setup_peers() -> int:
    """Create ``bench/.venv-peers`` with the peers, DBOS and matplotlib."""
    if not PEERS_PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    (PEERS_VENV / ".gitignore").write_text("*\n", "utf-8")
    deps = ["click", "platformdirs", "tomlkit", "cronsim", "httpx", "tenacity", "psutil",
            "tzdata"]
    return subprocess.run([str(PEERS_PY), "-m", "pip", "install", "-q", *PEER_PACKAGES, *deps],
                          check=False).returncode


@contextlib.contextmanager
def _workdir(where: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="retrysafe-outcome-", dir=where))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--setup", action="store_true", help="create bench/.venv-peers and exit")
    ap.add_argument("--keys", type=int, default=100, help="keys per round (default 100)")
    ap.add_argument("--rounds", type=int, default=9, help="rounds (default 9)")
    ap.add_argument("--pg-keys", type=int, default=100, help="keys per PostgreSQL round")
    ap.add_argument("--pg-rounds", type=int, default=5)
    ap.add_argument("--workers", default="1,4", help="PostgreSQL processes (default 1,4)")
    ap.add_argument("--ledger", metavar="URL", default=os.environ.get("RETRYSAFE_BENCH_PG_DSN")
                    or DEFAULT_PG, help="PostgreSQL server (a throwaway database is created)")
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--no-counts", action="store_true", help="skip counting syncs")
    ap.add_argument("--dir", help="where the stores go (default: the temp folder)")
    ap.add_argument("--plot", metavar="PNG", help="write the chart here")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--count-child", help=argparse.SUPPRESS)
    ap.add_argument("--rerun", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.setup:
        return setup_peers()
    if args.count_child:
        _count_child(args.count_child, args.keys, args.rerun, Path(args.dir))
        return 0
    if PEERS_PY.exists() and Path(sys.prefix).resolve() != PEERS_VENV.resolve() \
            and not os.environ.get("RETRYSAFE_BENCH_NO_PEERS"):
        # the peers live in their own environment: run there (retrysafe from src/)
        return subprocess.run([str(PEERS_PY), str(Path(__file__).resolve()),
                               *(argv if argv is not None else sys.argv[1:])],
                              check=False).returncode
    result: dict[str, Any] = {"machine": machine()}
    with _workdir(args.dir) as work:
        result["sqlite"] = run_sqlite(args.keys, args.rounds, work)
        result["statements"] = count_statements(work)
        if not args.no_counts:
            result["syncs"] = count_syncs(work)
        if not args.no_pg:
            try:
                import psycopg

                with psycopg.connect(args.ledger, connect_timeout=3) as c:
                    c.execute("SELECT 1")
            except Exception as exc:  # noqa: BLE001 - reported, the rest still runs
                result["postgres"] = {"skipped": f"cannot use {args.ledger}: {exc}"}
            else:
                levels = [int(w) for w in args.workers.split(",") if w.strip()]
                result["postgres"] = run_postgres(args.ledger, args.pg_keys, args.pg_rounds,
                                                  levels, work)
    png = Path(args.plot) if args.plot else None
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        result["plot"] = str(plot(result, png) or "")
    from _report import per_outcome_lines

    print("\n".join(per_outcome_lines(result)))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    RESULTS.mkdir(exist_ok=True)
    sys.exit(main())
