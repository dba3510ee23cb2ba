"""Scale: what one outcome leaves behind, and every command and API call on a large ledger.

* Bytes per outcome with one guarded effect, written through the API (one
  engine reused): the ledger file's growth over ``--outcomes`` outcomes (WAL
  checkpointed before each measure), and the ``runs/`` tree's size on disk
  (allocated blocks, folders included) and its files and folders per outcome.
* Latency against ledger size. The ledgers are the ones ``bench/dashboard.py``
  builds and keeps under ``bench/results/cache/`` (four jobs, each outcome one
  attempt, one step and its history, one in a thousand blocked or unknown),
  built here if missing: ``--small`` (2,000), ``--middle`` (100,000; ``0``
  leaves it out) and ``--large`` (1,000,000) outcomes. Building the million
  takes about 50 seconds once (1 GB; 2 cores, shared), the 100,000 about 5.

  Commands, wall time with cached bytecode (as ``bench/skip_latency.py``):
  ``retrysafe ls --job J`` (its first page of 100; ``ls`` has no paging
  option, ``--limit`` only), ``ls --state blocked``, ``needs-attention
  --limit 20``, ``status KEY`` and ``history KEY`` on a done outcome that is in
  every ledger, ``run JOB -p ... -- true`` on that outcome (already done) and
  on a new outcome (a fresh key each time), ``metrics --textfile FILE`` and
  plain ``metrics`` after their first scrape (which counts the whole history,
  untimed; the counts are kept beside FILE and in the home's
  ``runs/.metrics.state``), and, fewer rounds (``--slow-runs``), ``doctor``
  (an integrity check that reads the whole file). Each
  command runs on every ledger back to back, the order of the ledgers
  rotating every round. (``missed`` needs a job with a schedule; these jobs
  have none.)

  API calls, in this process, one ``Engine`` opened on each home (outside the
  clock), ``--calls`` calls per round and ledger, each timed: the first run of
  a new outcome with one guarded effect (``with engine.start(job, params) as
  run: run.effect("send", "local_write", execute=...)``) and the re-run of a
  done outcome, spread over the whole ledger (the effect comes back from the
  ledger, nothing executes). A round's figure is the mean per call.

  Reported: the median of each side's rounds and the median of the per-round
  ratios large/small. The outcomes this benchmark writes (keys
  ``weekly-report:scale-...``, and that job's ``runs/`` folder, which only
  writes make) are deleted from the cached homes again at the end, so the
  ledgers keep their sizes from run to run. Once the ledgers are built, a
  run takes about two minutes, most of it ``doctor`` on the million.

``--plot PNG`` (default ``docs/img/scale.png``) draws latency against ledger
size with matplotlib, from the peers' environment of ``bench/per_outcome.py``
(``bench/.venv-peers``) when this interpreter has no matplotlib; without
either, no chart.

Targets (issue "performance"): ledger at most 1 KB per outcome with one
effect, ``runs/`` at most 4 KB on disk per outcome without artifacts, every
command and API call at 1,000,000 outcomes within 1.5x of its time at 1,000.

    python bench/scale.py [--outcomes 200] [--small 2000] [--middle 100000] [--large 1000000] [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
from _util import RESULTS, log, machine, median, paired_ratio, verdict, write_json  # noqa: E402

TARGET_LEDGER_BYTES = 1024
TARGET_RUNS_BYTES = 4096
TARGET_RATIO = 1.5
CONFIG = '[jobs.bench]\nkey = "bench:{run}"\nparams = { run = "slug" }\n'
PLOT = HERE.parent / "docs" / "img" / "scale.png"
PEERS_PY = HERE / ".venv-peers" / "bin" / "python"

WRITE_JOB = "weekly-report"
"""the job the writing rows use (``bench/dashboard.py``'s first); their keys start
with ``weekly-report:scale-``, after every key of the bulk load (digits)"""
PREFIX = "scale-"


def done_number(small: int) -> int:
    """The outcome ``status``, ``history`` and ``run`` (done) read: number 1000 (fewer
    in a smaller ledger), done and of the job ``weekly-report`` in every ledger."""
    return min(1000, small // 2) // 4 * 4
ATTENTION_LIMIT = 20

#: row name -> label; the order of the table and the chart
LABELS = {
    "ls_job": "`retrysafe ls --job J`",
    "ls_state": "`retrysafe ls --state blocked`",
    "needs_attention": f"`retrysafe needs-attention --limit {ATTENTION_LIMIT}`",
    "status": "`retrysafe status KEY`, done",
    "history": "`retrysafe history KEY`, done",
    "run_done": "`retrysafe run JOB -p ... -- true`, done",
    "run_new": "`retrysafe run JOB -p ... -- true`, new outcome",
    "metrics_textfile": "`retrysafe metrics --textfile FILE`, a later scrape",
    "doctor": "`retrysafe doctor`",
    "metrics": "`retrysafe metrics`, a later call",
    "api_first": "`engine.start` + one `run.effect`, new outcome",
    "api_rerun": "`engine.start` + one `run.effect`, done outcome",
}
SLOW = ("doctor",)


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


# --- the cached ledgers ---------------------------------------------------------------


def forget_written(home: Path) -> int:
    """Delete what this benchmark wrote into a cached home: the outcomes whose keys
    start with ``weekly-report:scale-`` (every table keyed by outcome, ranges of
    their indexes) and the job's ``runs/`` folder (the bulk load makes none)."""
    lo, hi = f"{WRITE_JOB}:{PREFIX}", f"{WRITE_JOB}:{PREFIX[:-1]}."  # "." sorts after "-"
    conn = sqlite3.connect(home / "ledger.sqlite3", timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM rs_history WHERE outcome IN (SELECT id FROM rs_outcomes"
                     " WHERE key >= ? AND key < ?)", (lo, hi))
        for table in ("rs_steps", "rs_attempts", "rs_notifications"):
            conn.execute(f"DELETE FROM {table} WHERE outcome_key >= ? AND outcome_key < ?",
                         (lo, hi))
        gone = conn.execute("DELETE FROM rs_outcomes WHERE key >= ? AND key < ?", (lo, hi)).rowcount
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    shutil.rmtree(home / "runs" / WRITE_JOB, ignore_errors=True)
    return int(gone)


def _done_index(i: int, n: int) -> int:
    """The nearest done outcome at or before number ``i`` (one in a thousand waits)."""
    i = min(max(i, 0), n - 1)
    return i - 1 if i % 1000 == 999 else i


# --- commands -----------------------------------------------------------------------


def cli_latency(homes: dict[str, Path], done: int, runs: int, slow_runs: int, warmup: int,
                work: Path) -> dict[str, dict[str, list[float]]]:
    """Seconds per run of each command on each home: every command runs on every home
    back to back, the order of the homes rotating every round."""
    from dashboard import JOBS
    from skip_latency import child_env, retrysafe_cmd, timed

    rs = retrysafe_cmd()
    envs = {}
    for name, home in homes.items():
        envs[name] = child_env(home, "", work / "pycache")
        del envs[name]["RETRYSAFE_ATTEMPT_ID"]
    counter = iter(range(10**9))
    done_key = f"{WRITE_JOB}:{done:07d}"
    commands: dict[str, Callable[[str], list[str]]] = {
        "ls_job": lambda _h: [*rs, "ls", "--job", JOBS[1]],
        "ls_state": lambda _h: [*rs, "ls", "--state", "blocked"],
        "needs_attention": lambda _h: [*rs, "needs-attention", "--limit", str(ATTENTION_LIMIT)],
        "status": lambda _h: [*rs, "status", done_key],
        "history": lambda _h: [*rs, "history", done_key],
        "run_done": lambda _h: [*rs, "run", WRITE_JOB, "-p", f"n={done:07d}", "--", "true"],
        "run_new": lambda _h: [*rs, "run", WRITE_JOB, "-p", f"n={PREFIX}c{next(counter)}", "--",
                               "true"],
        # a later scrape: the counts of the history so far are kept beside the file, or
        # in the home's runs/.metrics.state
        "metrics_textfile": lambda h: [*rs, "metrics", "--textfile", str(work / f"{h}.prom")],
        "metrics": lambda _h: [*rs, "metrics"],
        "doctor": lambda _h: [*rs, "doctor"],
    }
    names = list(homes)
    for name in names:  # the first write: the home's runs/.ledger-id, which the fast paths check
        timed(commands["run_new"](name), envs[name])
    for cmd_name in list(commands):  # once each: bytecode; is the command there at all
        try:
            timed(commands[cmd_name](names[0]), envs[names[0]])
        except RuntimeError as exc:  # e.g. `metrics` without the ui extra: that row is left out
            log(f"   {cmd_name}: left out ({str(exc).splitlines()[-1][:200]})")
            del commands[cmd_name]
    for scrape in ("metrics_textfile", "metrics"):
        if scrape in commands:
            for name in names[1:]:  # the first scrape counts the whole history: not timed
                timed(commands[scrape](name), envs[name])
    for _ in range(warmup):  # the page cache (doctor and metrics read the whole ledger anyway)
        for cmd_name, make in commands.items():
            if cmd_name not in SLOW:
                for name in names:
                    timed(make(name), envs[name])
    times: dict[str, dict[str, list[float]]] = {c: {h: [] for h in names} for c in commands}
    for i in range(runs):
        order = names[i % len(names):] + names[:i % len(names)]
        for cmd_name, make in commands.items():
            if cmd_name in SLOW and i >= slow_runs:
                continue
            for name in order:
                times[cmd_name][name].append(timed(make(name), envs[name]))
        log(f"   commands, round {i + 1}/{runs}")
    return times


# --- API calls ------------------------------------------------------------------------


def api_latency(homes: dict[str, Path], sizes: dict[str, int], done: int, rounds: int,
                calls: int) -> dict[str, dict[str, list[float]]]:
    """Mean seconds per call in each round, on each home: the first run of a new
    outcome with one guarded effect, and the re-run of a done one."""
    from dashboard import JOBS

    from retrysafe.engine import Engine

    names = list(homes)
    times: dict[str, dict[str, list[float]]] = {p: {h: [] for h in names}
                                                for p in ("api_first", "api_rerun")}
    executed = [0]

    def execute(_key: str) -> str:
        executed[0] += 1
        return "ok"

    def one(engine: Any, job: str, params: dict[str, str], cls: str) -> float:
        t0 = time.perf_counter()
        with engine.start(job, params) as run:
            run.effect("send", cls, execute=execute)
        return time.perf_counter() - t0

    engines = {name: Engine.open(home) for name, home in homes.items()}
    try:
        for engine in engines.values():  # warm: the first open's reads, the code
            one(engine, WRITE_JOB, {"n": f"{PREFIX}warm"}, "local_write")
            one(engine, WRITE_JOB, {"n": f"{done:07d}"}, "message")
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                before = executed[0]
                spent = [one(engines[name], WRITE_JOB, {"n": f"{PREFIX}a{r}-{k}"}, "local_write")
                         for k in range(calls)]
                if executed[0] - before != calls:
                    raise RuntimeError(f"{name}: {executed[0] - before} of {calls} new outcomes "
                                       "executed their effect")
                times["api_first"][name].append(sum(spent) / calls)
            for name in order:
                n = sizes[name]
                before = executed[0]
                spent = []
                for k in range(calls):  # spread over the whole ledger, a new set each round
                    i = _done_index(k * n // calls + 7 * r, n)
                    spent.append(one(engines[name], JOBS[i % len(JOBS)], {"n": f"{i:07d}"},
                                     "message"))
                if executed[0] != before:
                    raise RuntimeError(f"{name}: a re-run of a done outcome executed its effect")
                times["api_rerun"][name].append(sum(spent) / calls)
            log(f"   API calls, round {r + 1}/{rounds}")
    finally:
        for engine in engines.values():
            engine.close()
    return times


# --- the chart ------------------------------------------------------------------------


def draw(result: dict[str, Any], path: Path) -> None:
    """Latency of each command and API call against ledger size (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    sizes = result["sizes"]
    order = sorted(sizes, key=sizes.__getitem__)
    xs = [sizes[s] for s in order]
    rows = {row["name"]: row for row in result["rows"]}
    panels = [("commands, wall time (cached bytecode)", [n for n in rows if not n.startswith("api_")]),
              ("API calls, in-process (one engine per ledger)", [n for n in rows if n.startswith("api_")])]
    panels = [(t, ns) for t, ns in panels if ns]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels) + 0.4, 5.6), squeeze=False,
                             gridspec_kw={"width_ratios": [len(ns) + 3 for _t, ns in panels]})
    markers = "osD^v<>phX*"
    ms = FuncFormatter(lambda v, _p: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    for ax, (title, names) in zip(axes[0], panels, strict=True):
        for k, name in enumerate(names):
            row = rows[name]
            ys = [row[f"{s}_ms"] for s in order]
            ax.plot(xs, ys, marker=markers[k % len(markers)], linewidth=1.4, markersize=5,
                    label=f"{row['label'].replace('`', '')}: {row['ratio']:.2f}x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs, [f"{x:,}" for x in xs], fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ms)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("outcomes in the ledger (log scale)", fontsize=8)
        ax.set_ylabel("milliseconds, median (log scale)", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.suptitle(f"Latency against ledger size; in the legend, {xs[-1]:,} outcomes against "
                 f"{xs[0]:,} (target <= {TARGET_RATIO:g}x)", fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(result: dict[str, Any], path: Path) -> str:
    """Draw the chart here, or with the peers' interpreter when this one has no
    matplotlib; the path written, or ``""``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not PEERS_PY.exists():
            log("   no chart: matplotlib is missing (python bench/per_outcome.py --setup makes "
                "bench/.venv-peers with it)")
            return ""
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "scale.json"
            data.write_text(json.dumps(result), "utf-8")
            proc = subprocess.run([str(PEERS_PY), str(Path(__file__).resolve()), "--plot-from",
                                   str(data), "--plot", str(path)], check=False)
        return str(path) if proc.returncode == 0 else ""
    draw(result, path)
    return str(path)


# --- command line ---------------------------------------------------------------------


def latency(args: argparse.Namespace) -> dict[str, Any]:
    from dashboard import cached_home

    sizes = {"small": args.small, **({"middle": args.middle} if args.middle else {}),
             "large": args.large}
    homes = {}
    for name, n in sizes.items():
        t0 = time.perf_counter()
        homes[name] = cached_home(args.cache, n)
        if time.perf_counter() - t0 > 1:
            log(f"   built {n:,} outcomes in {time.perf_counter() - t0:.0f} s")
    for home in homes.values():
        forget_written(home)  # left by a run that did not finish
    work = Path(tempfile.mkdtemp(prefix="retrysafe-scale-cli-"))
    try:
        done = done_number(args.small)
        times = cli_latency(homes, done, args.runs, args.slow_runs, args.warmup, work)
        times.update(api_latency(homes, sizes, done, args.runs, args.calls))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for home in homes.values():
            forget_written(home)
    rows = []
    for name, label in LABELS.items():
        if name not in times:
            continue
        t = times[name]
        row: dict[str, Any] = {"name": name, "label": label, "runs": len(t["small"]),
                               "ratio": paired_ratio(t["large"], t["small"])}
        for side in sizes:
            row[f"{side}_ms"] = median(t[side]) * 1000
            row[f"{side}_all_ms"] = [v * 1000 for v in t[side]]
        if "middle" in sizes:
            row["middle_ratio"] = paired_ratio(t["middle"], t["small"])
        row["meets_target"] = row["ratio"] <= TARGET_RATIO
        rows.append(row)
    return {"sizes": sizes, "runs": args.runs, "slow_runs": min(args.slow_runs, args.runs),
            "calls": args.calls, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--outcomes", type=int, default=200, help="outcomes written per measure")
    ap.add_argument("--small", type=int, default=2000, help="the small ledger's outcomes")
    ap.add_argument("--middle", type=int, default=100_000,
                    help="a ledger between the two, for the chart (0: none)")
    ap.add_argument("--large", type=int, default=1_000_000, help="the large ledger's outcomes")
    ap.add_argument("--runs", type=int, default=9, help="rounds of each command and API call")
    ap.add_argument("--slow-runs", type=int, default=3, help="rounds of doctor")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of each command")
    ap.add_argument("--calls", type=int, default=50, help="API calls per round and ledger")
    ap.add_argument("--cache", type=Path, default=RESULTS / "cache")
    ap.add_argument("--plot", metavar="PNG", type=Path, default=PLOT,
                    help="the chart (default docs/img/scale.png)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--plot-from", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plot_from:  # the peers' interpreter drawing for another run
        draw(json.loads(Path(args.plot_from).read_text("utf-8")), args.plot)
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    foot = footprint(args.outcomes)
    lat = latency(args)
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
    sizes = lat["sizes"]
    print(f"Latency against ledger size, medians of interleaved rounds ({lat['runs']}; doctor "
          f"{lat['slow_runs']}; API: mean of {lat['calls']} calls per round), ratio "
          f"{sizes['large']:,} to {sizes['small']:,} outcomes:")
    head = "".join(f"{n:>12,}" for n in sizes.values())
    print(f"  {'':<52}{head}   ratio")
    for row in lat["rows"]:
        cells = "".join(f"{row[f'{s}_ms']:9.2f} ms" for s in sizes)
        print(f"  {row['label'].replace('`', ''):<52}{cells}  {row['ratio']:5.2f}x  "
              f"({verdict(row['ratio'], TARGET_RATIO, False)} <= {TARGET_RATIO:g}x)")
    result: dict[str, Any] = {"footprint": foot, **lat, "machine": machine(),
                              "targets": {"ledger_bytes": TARGET_LEDGER_BYTES,
                                          "runs_disk_bytes": TARGET_RUNS_BYTES,
                                          "ratio": TARGET_RATIO}}
    result["plot"] = "" if args.no_plot else plot(result, args.plot)
    if result["plot"]:
        print(f"chart: {result['plot']}")
    write_json(args.json, result)
    log("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
