"""Run every benchmark and write ``bench/results/latest.json`` (see ``bench/run_all``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _report import markdown  # noqa: E402
from _util import RESULTS, machine  # noqa: E402
from guarded_effect import DEFAULT_PG  # noqa: E402

PLOTS = HERE.parent / "docs" / "img"
"""where the benchmarks' charts go (committed with the figures)"""


def _run(script: str, *args: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(HERE / script), *args, "--json", str(out)],
                              check=False)
        seconds = time.monotonic() - t0
        print(f"   ({seconds:.0f} s)", flush=True)
        if proc.returncode != 0 or not out.is_file():
            return {"skipped": f"{script} exited {proc.returncode}"}
        data: dict[str, Any] = json.loads(out.read_text("utf-8"))
        data["seconds"] = seconds
        return data


def _pg_reachable(dsn: str) -> str | None:
    """None when PostgreSQL answers, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"cannot connect ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc})"
    return None


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                          capture_output=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src"],
                           cwd=HERE.parent, text=True, capture_output=True, check=False)
    head = proc.stdout.strip() or "?"
    return head + ("+changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run every retrysafe benchmark.")
    ap.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL benchmark")
    ap.add_argument("--pg-dsn", default=os.environ.get("RETRYSAFE_BENCH_PG_DSN") or DEFAULT_PG,
                    help="PostgreSQL server to use (a throwaway database is created there); "
                         "default $RETRYSAFE_BENCH_PG_DSN, else %(default)s")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    args = ap.parse_args(argv)

    results: dict[str, Any] = {
        "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "machine": machine(),
    }
    print("== guarded effect, SQLite", flush=True)
    results["guarded_effect_sqlite"] = _run("guarded_effect.py")
    if args.no_pg:
        results["guarded_effect_postgres"] = {"skipped": "--no-pg"}
    else:
        why = _pg_reachable(args.pg_dsn)
        if why:
            print(f"== guarded effect, PostgreSQL: skipped, {why}", flush=True)
            results["guarded_effect_postgres"] = {"skipped": why}
        else:
            print("== guarded effect, PostgreSQL", flush=True)
            results["guarded_effect_postgres"] = _run("guarded_effect.py", "--ledger", args.pg_dsn)
    print("== one outcome per key, against the peers", flush=True)
    per_outcome = ["--plot", str(PLOTS / "per-outcome.png")]
    results["per_outcome"] = _run("per_outcome.py", *per_outcome,
                                  *(["--no-pg"] if args.no_pg else ["--ledger", args.pg_dsn]))
    print("== everyday commands of the CLI", flush=True)
    results["cli_latency"] = _run("cli_latency.py")
    print("== skip latency of the CLI", flush=True)
    results["skip_latency"] = _run("skip_latency.py", "--profile")
    print("== dashboard pages on a million outcomes", flush=True)
    results["dashboard"] = _run("dashboard.py")
    results["dashboard"].pop("machine", None)
    print("== scale: bytes per outcome, every command at 2,000, 100,000 and a million outcomes",
          flush=True)
    results["scale"] = _run("scale.py")
    for key in ("guarded_effect_sqlite", "guarded_effect_postgres", "skip_latency",
                "per_outcome", "cli_latency", "scale"):
        results[key].pop("machine", None)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", "utf-8")
    print()
    print(markdown(results, with_profiles=False))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
