"""Scale: what one outcome leaves behind, and ``ls --job`` on a large ledger.

* Bytes per outcome with one guarded effect, written through the API (one
  engine reused): the ledger file's growth over ``--outcomes`` outcomes (WAL
  checkpointed before each measure), and the ``runs/`` tree's size on disk
  (allocated blocks, folders included) and its files and folders per outcome.
* ``retrysafe ls --job J`` (its first page of 100), wall time on the ledger of
  ``--large`` outcomes against the same command on ``--small`` outcomes,
  interleaved. Both ledgers are the ones ``bench/dashboard.py`` builds and keeps
  under ``bench/results/cache/`` (four jobs, each outcome one attempt, one step
  and its history), built here if missing.

Targets (issue "performance"): ledger at most 1 KB per outcome with one
effect, ``runs/`` at most 4 KB on disk per outcome without artifacts, every
command at 1,000,000 outcomes within 1.5x of its time at 1,000.

    python bench/scale.py [--outcomes 200] [--small 2000] [--large 1000000] [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
from _util import RESULTS, log, machine, median, paired_ratio, verdict, write_json  # noqa: E402
from dashboard import JOBS, cached_home  # noqa: E402
from skip_latency import child_env, retrysafe_cmd, timed  # noqa: E402

TARGET_LEDGER_BYTES = 1024
TARGET_RUNS_BYTES = 4096
TARGET_LS_RATIO = 1.5
CONFIG = '[jobs.bench]\nkey = "bench:{run}"\nparams = { run = "slug" }\n'


def _ledger_bytes(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db.stat().st_size


def _tree(root: Path) -> tuple[int, int, int, int]:
    """Bytes allocated on disk, files and folders under ``root`` (itself included),
    and the most entries any one folder holds."""
    disk, files, folders, widest = root.lstat().st_blocks * 512, 0, 1, 0
    for base, dirs, names in os.walk(root):
        widest = max(widest, len(dirs) + len(names))
        for name in dirs:
            disk, folders = disk + (Path(base) / name).lstat().st_blocks * 512, folders + 1
        for name in names:
            disk, files = disk + (Path(base) / name).lstat().st_blocks * 512, files + 1
    return disk, files, folders, widest


def footprint(n: int) -> dict[str, Any]:
    """Ledger and ``runs/`` bytes per outcome with one effect, over ``n`` outcomes
    (the growth between ``n`` and ``2n``, so the empty ledger's pages do not count)."""
    from retrysafe.engine import Engine

    work = Path(tempfile.mkdtemp(prefix="retrysafe-scale-"))
    try:
        home = work / "home"
        home.mkdir()
        (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
        sizes = []
        with Engine.open(home) as engine:
            for batch in range(2):
                for i in range(batch * n, (batch + 1) * n):
                    with engine.start("bench", {"run": f"k{i}"}) as run:
                        run.effect("send", "local_write", execute=lambda _k: "ok")
                sizes.append((_ledger_bytes(home / "ledger.sqlite3"), _tree(home / "runs")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (l1, (d1, f1, o1, w1)), (l2, (d2, f2, o2, w2)) = sizes
    return {"outcomes": n, "ledger_bytes": (l2 - l1) / n, "runs_disk_bytes": (d2 - d1) / n,
            "runs_files": (f2 - f1) / n, "runs_folders": (o2 - o1) / n,
            "widest_folder": [w1, w2]}


def ls_latency(cache: Path, small: int, large: int, runs: int) -> dict[str, Any]:
    """``retrysafe ls --job J`` on the small and on the large ledger, interleaved."""
    homes = {"small": cached_home(cache, small), "large": cached_home(cache, large)}
    work = Path(tempfile.mkdtemp(prefix="retrysafe-scale-ls-"))
    rs = retrysafe_cmd()
    times: dict[str, list[float]] = {"small": [], "large": []}
    try:
        envs = {}
        for name, home in homes.items():
            envs[name] = child_env(home, "", work / "pycache")
            del envs[name]["RETRYSAFE_ATTEMPT_ID"]
        cmd = [*rs, "ls", "--job", JOBS[1]]
        for name in ("small", "large", "small", "large"):  # warm: bytecode, page cache
            timed(cmd, envs[name])
        for i in range(runs):
            for name in (("small", "large") if i % 2 == 0 else ("large", "small")):
                times[name].append(timed(cmd, envs[name]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"small": small, "large": large, "runs": runs,
            "small_ms": median(times["small"]) * 1000, "large_ms": median(times["large"]) * 1000,
            "ratio": paired_ratio(times["large"], times["small"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--outcomes", type=int, default=200, help="outcomes written per measure")
    ap.add_argument("--small", type=int, default=2000, help="the small ledger's outcomes")
    ap.add_argument("--large", type=int, default=1_000_000, help="the large ledger's outcomes")
    ap.add_argument("--runs", type=int, default=9, help="timed runs of ls per ledger")
    ap.add_argument("--cache", type=Path, default=RESULTS / "cache")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    foot = footprint(args.outcomes)
    ls = ls_latency(args.cache, args.small, args.large, args.runs)
    print(f"Per outcome with one effect ({foot['outcomes']} outcomes, growth of a second batch):")
    print(f"  ledger     {foot['ledger_bytes']:8.0f} bytes  "
          f"({verdict(foot['ledger_bytes'], TARGET_LEDGER_BYTES, False)} <= {TARGET_LEDGER_BYTES})")
    print(f"  runs/      {foot['runs_disk_bytes']:8.0f} bytes on disk, {foot['runs_files']:g} files, "
          f"{foot['runs_folders']:g} folders  "
          f"({verdict(foot['runs_disk_bytes'], TARGET_RUNS_BYTES, False)} <= {TARGET_RUNS_BYTES})")
    w1, w2 = foot["widest_folder"]
    print(f"  the widest folder under runs/ holds {w1:,} entries after {foot['outcomes']:,} "
          f"outcomes, {w2:,} after {2 * foot['outcomes']:,}"
          + (" (it grows with the outcomes)" if w2 > w1 else ""))
    print(f"ls --job {JOBS[1]}, medians of {ls['runs']} interleaved runs:")
    print(f"  {ls['small']:>9,} outcomes {ls['small_ms']:7.1f} ms")
    print(f"  {ls['large']:>9,} outcomes {ls['large_ms']:7.1f} ms  {ls['ratio']:.2f}x  "
          f"({verdict(ls['ratio'], TARGET_LS_RATIO, False)} <= {TARGET_LS_RATIO:g}x)")
    write_json(args.json, {"footprint": foot, "ls": ls, "machine": machine(),
                           "targets": {"ledger_bytes": TARGET_LEDGER_BYTES,
                                       "runs_disk_bytes": TARGET_RUNS_BYTES,
                                       "ls_ratio": TARGET_LS_RATIO}})
    log("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
