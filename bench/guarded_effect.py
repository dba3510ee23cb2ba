"""Throughput of a guarded effect against the same durable writes done by hand.

Library side: one attempt (``retrysafe.start``), then N calls of
``run.effect(f"s{i}", "local_write", execute=lambda k: "ok")``. Each call writes
``running`` durably (the intent: fenced, only if the step is new), executes,
and writes ``done`` durably (the record: fenced, only from ``running``), each
with its history row and an attempt-log line.

Baseline side: plain ``sqlite3`` (or ``psycopg``) doing the writes a careful
hand-written script would do for the same guarantee: per effect one
transaction that reads the step and inserts a ``running`` row plus a history
row, then one transaction that updates it to ``done`` plus a history row. Two
commits per effect, the same as the library. SQLite is opened alike on both
sides (WAL, ``synchronous=FULL``), PostgreSQL with the server's defaults.

Only the N effect calls are timed (not opening the ledger or claiming the
attempt). Rounds alternate which side goes first; medians are reported.

    python bench/guarded_effect.py                      # SQLite
    python bench/guarded_effect.py --ledger postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import interleave, log, machine, median, paired_ratio, verdict, write_json

import retrysafe

TARGET = 0.8
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
CONFIG = """\
[jobs.bench]
key = "bench:{run}"
params = { run = "slug" }
"""

# The baseline's tables: the columns a hand-written step ledger needs, with an
# index on the outcome like the library's, so both write comparable rows.
BASE_DDL = [
    """CREATE TABLE IF NOT EXISTS base_steps (
        step_key TEXT PRIMARY KEY, outcome_key TEXT NOT NULL, name TEXT NOT NULL,
        kind TEXT NOT NULL, effect_class TEXT NOT NULL, state TEXT NOT NULL,
        attempt_id TEXT, fence BIGINT NOT NULL, evidence TEXT, reason TEXT NOT NULL,
        runner_host TEXT, runner_pid INTEGER, tries INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS base_steps_outcome ON base_steps (outcome_key)",
    """CREATE TABLE IF NOT EXISTS base_events (
        id {serial}, outcome_key TEXT NOT NULL, step_key TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL, attempt_id TEXT, fence BIGINT NOT NULL,
        actor TEXT NOT NULL, kind TEXT NOT NULL, from_state TEXT NOT NULL,
        to_state TEXT NOT NULL, reason TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS base_events_outcome ON base_events (outcome_key, id)",
]
SEL = "SELECT state, evidence FROM base_steps WHERE step_key = {p}"
INS_STEP = (
    "INSERT INTO base_steps (step_key, outcome_key, name, kind, effect_class, state, attempt_id,"
    " fence, evidence, reason, runner_host, runner_pid, tries, created_at, updated_at)"
    " VALUES ({p}, {p}, {p}, 'effect', 'local_write', 'running', {p}, 1, NULL, 'started', {p},"
    " {p}, 1, {p}, {p})"
)
UPD_STEP = (
    "UPDATE base_steps SET state = 'done', evidence = {p}, reason = '', updated_at = {p}"
    " WHERE step_key = {p}"
)
INS_EVENT = (
    "INSERT INTO base_events (outcome_key, step_key, at, attempt_id, fence, actor, kind,"
    " from_state, to_state, reason) VALUES ({p}, {p}, {p}, {p}, 1, 'attempt-1', 'step', {p},"
    " {p}, '')"
)


def _sql(template: str, mark: str) -> str:
    return template.replace("{p}", mark)


def _execute(_step_key: str) -> str:
    return "ok"


# --- SQLite -----------------------------------------------------------------------


#: CPU time per effect (this process, user + system) of the last rounds, per side:
#: steadier than wall time on a loaded machine, and what several workers compete for.
CPU_MS: dict[str, list[float]] = {"library": [], "baseline": []}


def library_sqlite(n: int, workdir: Path) -> float:
    """Effects per second through ``run.effect`` on the default SQLite ledger."""
    home = Path(tempfile.mkdtemp(prefix="lib-", dir=workdir))
    (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
    try:
        with retrysafe.start("bench", {"run": "r"}, home=home) as run:
            run.effect("warm", "local_write", execute=_execute)  # first-effect work off the clock
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(n):
                run.effect(f"s{i}", "local_write", execute=_execute)
            elapsed = time.perf_counter() - t0
            CPU_MS["library"].append((time.process_time() - c0) * 1000 / n)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return n / elapsed


def _base_effect(conn: Any, mark: str, outcome: str, name: str, attempt: str,
                 begin: Callable[[], None], commit: Callable[[], None]) -> None:
    skey = f"{outcome}/{name}"
    now = time.time()
    begin()
    if conn.execute(_sql(SEL, mark), (skey,)).fetchone() is not None:
        raise RuntimeError(f"{skey} exists")
    conn.execute(_sql(INS_STEP, mark),
                 (skey, outcome, name, attempt, "host", os.getpid(), now, now))
    conn.execute(_sql(INS_EVENT, mark), (outcome, skey, now, attempt, "", "running"))
    commit()
    evidence = _execute(skey)
    now = time.time()
    begin()
    conn.execute(_sql(UPD_STEP, mark), (evidence, now, skey))
    conn.execute(_sql(INS_EVENT, mark), (outcome, skey, now, attempt, "running", "done"))
    commit()


def baseline_sqlite(n: int, workdir: Path) -> float:
    """Effects per second for the same two durable commits with plain ``sqlite3``."""
    folder = Path(tempfile.mkdtemp(prefix="base-", dir=workdir))
    conn = sqlite3.connect(folder / "base.sqlite3", isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        for ddl in BASE_DDL:
            conn.execute(ddl.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))

        def begin() -> None:
            conn.execute("BEGIN IMMEDIATE")

        def commit() -> None:
            conn.execute("COMMIT")

        attempt = uuid.uuid4().hex
        _base_effect(conn, "?", "bench:r", "warm", attempt, begin, commit)
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            _base_effect(conn, "?", "bench:r", f"s{i}", attempt, begin, commit)
        elapsed = time.perf_counter() - t0
        CPU_MS["baseline"].append((time.process_time() - c0) * 1000 / n)
    finally:
        conn.close()
        shutil.rmtree(folder, ignore_errors=True)
    return n / elapsed


class _Counter:
    """Counts what one side does per effect: statements by kind, fsyncs of plain files.

    A write outside ``BEGIN`` commits on its own (an implicit transaction).
    SQLite's trace repeats a statement's text for each trigger it fires; a
    repeat of the previous statement is therefore not counted again (each
    statement here has its own step key, so a real repeat never happens).
    History rows written by triggers are counted from the table instead
    (``history_rows``, set by the caller).
    """

    def __init__(self, autocommit: bool = True) -> None:
        self.kinds: dict[str, int] = {}
        self.fsyncs = 0
        self.implicit = 0
        self.history_inserts = 0
        self.history_rows: int | None = None
        self._in_tx = False
        self._last = ""
        #: False where statements are counted before the BEGIN that preceded them
        #: (psycopg's implicit transactions, counted at commit)
        self.autocommit = autocommit

    def statement(self, sql: str) -> None:
        if sql == self._last and not sql.startswith(("BEGIN", "COMMIT")):
            return
        self._last = sql
        words = sql.split()
        if not words:
            return
        kind = " ".join(words[:2]).upper() if words[0] == "BEGIN" else words[0].upper()
        if kind.startswith("BEGIN"):
            self._in_tx = True
        elif kind in ("COMMIT", "ROLLBACK"):
            self._in_tx = False
        elif kind in ("INSERT", "UPDATE", "DELETE", "WITH") and self.autocommit \
                and not self._in_tx:
            self.implicit += 1
        if sql.startswith(("INSERT INTO rs_history", "INSERT INTO base_events")):
            self.history_inserts += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def per_effect(self, n: int) -> dict[str, float]:
        k = {name: count / n for name, count in self.kinds.items()}
        begins = sum(v for name, v in k.items() if name.startswith("BEGIN"))
        implicit = self.implicit / n
        writes = k.get("BEGIN IMMEDIATE", 0.0) + implicit
        rows = self.history_rows if self.history_rows is not None else self.history_inserts
        return {
            "transactions": begins + implicit,
            "write_transactions": writes,
            "read_transactions": begins - k.get("BEGIN IMMEDIATE", 0.0),
            "statements": sum(v for name, v in k.items()
                              if not name.startswith(("BEGIN", "COMMIT", "ROLLBACK"))),
            "selects": k.get("SELECT", 0.0),
            "writes": k.get("INSERT", 0.0) + k.get("UPDATE", 0.0) + k.get("WITH", 0.0),
            "trigger_writes": (rows - self.history_inserts) / n,
            # SQLite syncs its WAL once per write commit (synchronous=FULL)
            "durable_syncs": writes + self.fsyncs / n,
            "file_fsyncs": self.fsyncs / n,
            # on a client/server database every statement, BEGIN and COMMIT is a round trip
            "round_trips": sum(k.values()),
        }


@contextmanager
def _counting_fsyncs(counting: list[_Counter]) -> Iterator[None]:
    """Count ``os.fsync`` calls (the attempt log's appends) into ``counting[0]``."""
    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        if counting:
            counting[0].fsyncs += 1
        real_fsync(fd)

    os.fsync = fsync  # fsio calls os.fsync through the module attribute
    try:
        yield
    finally:
        os.fsync = real_fsync


def anatomy(n: int, workdir: Path) -> dict[str, dict[str, float]]:
    """Per effect, on each side: SQL statements by kind, commits, fsyncs of other files.

    Counted, not timed: SQLite's trace callback sees every statement the
    connection runs; ``os.fsync`` is wrapped to count the syncs of files
    outside the database (SQLite's own WAL syncs are one per write commit).
    """
    stack = ExitStack()
    lib, base = _Counter(), _Counter()
    home = Path(tempfile.mkdtemp(prefix="lib-", dir=workdir))
    (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
    counting: list[_Counter] = []
    try:
        stack.enter_context(_counting_fsyncs(counting))
        with retrysafe.start("bench", {"run": "r"}, home=home, heartbeat=False) as run:
            run.effect("warm", "local_write", execute=_execute)
            backend: Any = run.ledger.backend
            conn = backend._conn()  # the SQLite connection this thread's transactions use
            before = conn.execute("SELECT COUNT(*) FROM rs_history").fetchone()[0]
            conn.set_trace_callback(lib.statement)
            counting.append(lib)
            for i in range(n):
                run.effect(f"s{i}", "local_write", execute=_execute)
            counting.clear()
            conn.set_trace_callback(None)
            lib.history_rows = conn.execute("SELECT COUNT(*) FROM rs_history").fetchone()[0] - before
        bconn = sqlite3.connect(home / "base.sqlite3", isolation_level=None)
        bconn.execute("PRAGMA journal_mode = WAL")
        bconn.execute("PRAGMA synchronous = FULL")
        for ddl in BASE_DDL:
            bconn.execute(ddl.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
        bconn.set_trace_callback(base.statement)
        counting.append(base)
        def begin() -> None:
            bconn.execute("BEGIN IMMEDIATE")

        def commit() -> None:
            bconn.execute("COMMIT")

        for i in range(n):
            _base_effect(bconn, "?", "bench:r", f"s{i}", "a", begin, commit)
        counting.clear()
        bconn.close()
    finally:
        stack.close()
        shutil.rmtree(home, ignore_errors=True)
    return {"library": lib.per_effect(n), "baseline": base.per_effect(n)}


def run_sqlite(n: int, rounds: int, workdir: Path) -> dict[str, Any]:
    CPU_MS["library"].clear()
    CPU_MS["baseline"].clear()
    lib, base = interleave(rounds, lambda: library_sqlite(n, workdir),
                           lambda: baseline_sqlite(n, workdir))
    ratio = paired_ratio(lib, base)
    return {
        "backend": "sqlite",
        "ratio_of_medians": median(lib) / median(base),
        "effects_per_round": n,
        "rounds": rounds,
        "library_per_s": lib,
        "baseline_per_s": base,
        "library_median": median(lib),
        "baseline_median": median(base),
        "ratio": ratio,
        "target": TARGET,
        "meets_target": ratio >= TARGET,
        "cpu_ms_per_effect": {"library": median(CPU_MS["library"]),
                              "baseline": median(CPU_MS["baseline"])},
        "per_effect": anatomy(50, workdir),
    }


# --- PostgreSQL ---------------------------------------------------------------------


def _with_db(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def _worker_library(url: str, home: str, run_id: str, n: int, barrier: Barrier,
                    out: Any) -> None:
    try:
        with retrysafe.start("bench", {"run": run_id}, home=home, ledger=url) as run:
            run.effect("warm", "local_write", execute=_execute)
            barrier.wait()
            t0 = time.perf_counter()
            for i in range(n):
                run.effect(f"s{i}", "local_write", execute=_execute)
            t1 = time.perf_counter()
        out.put((t0, t1, ""))
    except BaseException as exc:  # report, never hang the parent
        barrier.abort()
        out.put((0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def _worker_baseline(url: str, run_id: str, n: int, barrier: Barrier, out: Any) -> None:
    import psycopg

    try:
        with psycopg.connect(url) as conn:
            outcome, attempt = f"bench:{run_id}", uuid.uuid4().hex
            _base_effect(conn, "%s", outcome, "warm", attempt, lambda: None, conn.commit)
            barrier.wait()
            t0 = time.perf_counter()
            for i in range(n):
                _base_effect(conn, "%s", outcome, f"s{i}", attempt, lambda: None, conn.commit)
            t1 = time.perf_counter()
        out.put((t0, t1, ""))
    except BaseException as exc:
        barrier.abort()
        out.put((0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def _concurrent(target: Callable[..., None], args_for: Callable[[int], tuple[Any, ...]],
                workers: int, n: int) -> float:
    """Aggregate effects/s of ``workers`` processes, from the first start to the last end."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_for(w), n, barrier, out))
             for w in range(workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r[2] for r in results if r[2]]
    if errors:
        raise RuntimeError(f"a worker failed: {errors[0]}")
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes
    start = min(float(r[0]) for r in results)
    end = max(float(r[1]) for r in results)
    return workers * n / (end - start)


def pg_anatomy(url: str, home: Path, n: int = 30) -> dict[str, dict[str, float]]:
    """Per effect on PostgreSQL: statements by kind, transactions, round trips.

    Counted by wrapping psycopg's ``Connection.execute``, ``transaction`` and
    ``commit`` in this process: each statement is a round trip, each
    transaction adds two (BEGIN and COMMIT).
    """
    import psycopg

    lib, base = _Counter(), _Counter(autocommit=False)
    counting: list[_Counter] = []
    real_execute = psycopg.Connection.execute
    real_transaction = psycopg.Connection.transaction
    real_commit = psycopg.Connection.commit

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if counting:
            counting[0].statement(str(query) if isinstance(query, str) else "COMPOSED")
        return real_execute(self, query, *args, **kwargs)

    def transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        if counting:
            counting[0].statement("BEGIN")
            counting[0].statement("COMMIT")
        return real_transaction(self, *args, **kwargs)

    def commit(self: Any) -> None:
        if counting:
            counting[0].statement("BEGIN")  # psycopg sent it before the first statement
            counting[0].statement("COMMIT")
        real_commit(self)

    patched: Any = psycopg.Connection
    patched.execute, patched.transaction, patched.commit = execute, transaction, commit
    fsyncs = _counting_fsyncs(counting)
    fsyncs.__enter__()
    try:
        with retrysafe.start("bench", {"run": "anatomy"}, home=home, ledger=url,
                             heartbeat=False) as run:
            run.effect("warm", "local_write", execute=_execute)
            counting.append(lib)
            for i in range(n):
                run.effect(f"s{i}", "local_write", execute=_execute)
            counting.clear()
        with psycopg.connect(url) as conn:
            counting.append(base)
            for i in range(n):
                _base_effect(conn, "%s", "bench:anatomy", f"s{i}", "a", lambda: None, conn.commit)
            counting.clear()
    finally:
        fsyncs.__exit__(None, None, None)
        patched.execute, patched.transaction, patched.commit = (real_execute, real_transaction,
                                                                real_commit)
    out = {"library": lib.per_effect(n), "baseline": base.per_effect(n)}
    for side in out.values():
        # reads outside BEGIN run in autocommit: every transaction here is a write
        side["write_transactions"] = side["transactions"]
        side["read_transactions"] = 0.0
        side["durable_syncs"] = side["file_fsyncs"]  # the server's commit syncs are its own
    return out


def run_postgres(admin_url: str, total: int, rounds: int, concurrency: list[int],
                 workdir: Path) -> dict[str, Any]:
    import psycopg

    dbname = f"retrysafe_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
        server = admin.execute("SHOW server_version").fetchone()
        sync = admin.execute("SHOW synchronous_commit").fetchone()
        fsync = admin.execute("SHOW fsync").fetchone()
    url = _with_db(admin_url, dbname)
    home = Path(tempfile.mkdtemp(prefix="lib-pg-", dir=workdir))
    (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
    per: list[dict[str, Any]] = []
    try:
        retrysafe.open_ledger(url).close()  # migrate once, outside the clock
        with psycopg.connect(url, autocommit=True) as conn:
            for ddl in BASE_DDL:
                conn.execute(ddl.replace("{serial}", "BIGSERIAL PRIMARY KEY"))
        anat = pg_anatomy(url, home)
        seq = iter(range(1_000_000))
        for workers in concurrency:
            n = max(20, total // workers)

            def lib(workers: int = workers, n: int = n) -> float:
                tag = next(seq)
                return _concurrent(_worker_library,
                                   lambda w: (url, str(home), f"c{workers}-t{tag}-w{w}"),
                                   workers, n)

            def base(workers: int = workers, n: int = n) -> float:
                tag = next(seq)
                return _concurrent(_worker_baseline, lambda w: (url, f"c{workers}-t{tag}-w{w}"),
                                   workers, n)

            log(f"postgres: {workers} worker(s), {n} effects each, {rounds} rounds")
            lib_r, base_r = interleave(rounds, lib, base)
            ratio = paired_ratio(lib_r, base_r)
            per.append({
                "ratio_of_medians": median(lib_r) / median(base_r),
                "workers": workers,
                "effects_per_worker": n,
                "library_per_s": lib_r,
                "baseline_per_s": base_r,
                "library_median": median(lib_r),
                "baseline_median": median(base_r),
                "ratio": ratio,
                "meets_target": ratio >= TARGET,
            })
    finally:
        shutil.rmtree(home, ignore_errors=True)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return {
        "backend": "postgresql",
        "server_version": server[0] if server else "?",
        "synchronous_commit": sync[0] if sync else "?",
        "fsync": fsync[0] if fsync else "?",
        "rounds": rounds,
        "target": TARGET,
        "concurrency": per,
        "per_effect": anat,
    }


# --- command line -------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ledger", metavar="URL",
                    help="postgresql://... to measure PostgreSQL (a throwaway database is "
                         "created and dropped); 'pg' uses $RETRYSAFE_BENCH_PG_DSN or "
                         f"{DEFAULT_PG}. Default: SQLite.")
    ap.add_argument("--effects", type=int, default=None,
                    help="effects per round (SQLite, default 300) or per round over all "
                         "workers (PostgreSQL, default 800)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per side (default 7; 5 on PG)")
    ap.add_argument("--workers", default="1,4,16", help="PostgreSQL concurrency levels")
    ap.add_argument("--dir", help="where the ledgers go (default: the temp folder); use the "
                                  "disk you mean to measure")
    ap.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="retrysafe-bench-", dir=args.dir))
    try:
        if args.ledger:
            admin = args.ledger
            if admin == "pg":
                admin = os.environ.get("RETRYSAFE_BENCH_PG_DSN") or DEFAULT_PG
            levels = [int(w) for w in args.workers.split(",") if w.strip()]
            result = run_postgres(admin, args.effects or 800, args.rounds or 5, levels, workdir)
            print(f"guarded effect, PostgreSQL {result['server_version']} "
                  f"(synchronous_commit={result['synchronous_commit']}), "
                  f"medians of {result['rounds']} rounds:")
            for row in result["concurrency"]:
                print(f"  {row['workers']:>2} worker(s): retrysafe {row['library_median']:8.0f}/s"
                      f"  psycopg {row['baseline_median']:8.0f}/s  ratio {row['ratio']:.2f}"
                      f"  ({verdict(row['ratio'], TARGET)} >= {TARGET})")
            lib, base = result["per_effect"]["library"], result["per_effect"]["baseline"]
            print("  per effect       retrysafe  psycopg")
            for key in ("round_trips", "transactions", "statements", "selects", "file_fsyncs"):
                print(f"    {key:<18} {lib[key]:6.1f}  {base[key]:6.1f}")
        else:
            result = run_sqlite(args.effects or 300, args.rounds or 7, workdir)
            print(f"guarded effect, SQLite (WAL, synchronous=FULL), medians of "
                  f"{result['rounds']} rounds x {result['effects_per_round']} effects:")
            print(f"  retrysafe {result['library_median']:8.0f} effects/s")
            print(f"  sqlite3   {result['baseline_median']:8.0f} effects/s")
            print(f"  ratio     {result['ratio']:8.2f}  ({verdict(result['ratio'], TARGET)} "
                  f">= {TARGET})")
            cpu = result["cpu_ms_per_effect"]
            print(f"  CPU per effect: retrysafe {cpu['library']:.3f} ms, sqlite3 "
                  f"{cpu['baseline']:.3f} ms")
            print("  per effect       retrysafe  sqlite3")
            lib, base = result["per_effect"]["library"], result["per_effect"]["baseline"]
            for key in ("transactions", "read_transactions", "statements", "selects",
                        "trigger_writes", "durable_syncs", "file_fsyncs"):
                print(f"    {key:<17} {lib[key]:6.1f}  {base[key]:6.1f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["machine"] = machine()
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
