"""Turn ``bench/results/latest.json`` into Markdown (for the terminal and the docs)."""

from __future__ import annotations

from typing import Any


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}/s"


def _ok(flag: bool) -> str:
    return "meets target" if flag else "**misses target**"


def summary_table(results: dict[str, Any]) -> list[str]:
    """One row per measured figure: retrysafe, baseline, ratio, target."""
    lines = [
        "| benchmark | retrysafe | baseline | ratio | target | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    sq = results.get("guarded_effect_sqlite")
    if sq:
        lines.append(
            f"| guarded effect, SQLite (WAL, synchronous=FULL) | "
            f"{_fmt_rate(sq['library_median'])} | {_fmt_rate(sq['baseline_median'])} "
            f"(plain sqlite3) | {sq['ratio']:.2f} | >= {sq['target']} | "
            f"{_ok(sq['meets_target'])} |"
        )
    pg = results.get("guarded_effect_postgres")
    if pg and "concurrency" in pg:
        for row in pg["concurrency"]:
            lines.append(
                f"| guarded effect, PostgreSQL, {row['workers']} worker process"
                f"{'es' if row['workers'] > 1 else ''} | {_fmt_rate(row['library_median'])} | "
                f"{_fmt_rate(row['baseline_median'])} (plain psycopg) | {row['ratio']:.2f} | "
                f">= {pg['target']} | {_ok(row['meets_target'])} |"
            )
    elif pg:
        lines.append(f"| guarded effect, PostgreSQL | - | - | - | >= 0.8 | "
                     f"not run: {pg.get('skipped', '?')} |")
    sk = results.get("skip_latency")
    if sk:
        lines.append(
            f"| `retrysafe step` on a done step (wall time) | {sk['step_ms']:.1f} ms | "
            f"{sk['bare_ms']:.1f} ms (`python -c pass`) | {sk['ratio']:.1f}x | "
            f"< {sk['target']:g}x | {_ok(sk['meets_target'])} |"
        )
    return lines


def anatomy_table(results: dict[str, Any]) -> list[str]:
    sq = results.get("guarded_effect_sqlite") or {}
    per = sq.get("per_effect")
    if not per:
        return []
    lib, base = per["library"], per["baseline"]
    labels = [
        ("transactions", "transactions"),
        ("read_transactions", "of which read-only"),
        ("statements", "SQL statements (without BEGIN/COMMIT)"),
        ("selects", "of which SELECT"),
        ("writes", "of which INSERT/UPDATE"),
        ("trigger_writes", "history rows written by a trigger, inside those"),
        ("file_fsyncs", "fsync of files outside the database"),
        ("durable_syncs", "durable syncs in all (WAL commits + fsyncs)"),
    ]
    lines = ["| per guarded effect (SQLite, counted) | retrysafe | plain sqlite3 |",
             "|---|---:|---:|"]
    for key, label in labels:
        lines.append(f"| {label} | {lib.get(key, 0):g} | {base.get(key, 0):g} |")
    return lines


def pg_anatomy_table(results: dict[str, Any]) -> list[str]:
    pg = results.get("guarded_effect_postgres") or {}
    per = pg.get("per_effect")
    if not per:
        return []
    lib, base = per["library"], per["baseline"]
    labels = [
        ("round_trips", "round trips to the server (statements + BEGIN/COMMIT)"),
        ("transactions", "transactions"),
        ("statements", "SQL statements (without BEGIN/COMMIT)"),
        ("selects", "of which SELECT"),
        ("writes", "of which INSERT/UPDATE"),
        ("file_fsyncs", "fsync of local files"),
    ]
    lines = ["| per guarded effect (PostgreSQL, counted) | retrysafe | plain psycopg |",
             "|---|---:|---:|"]
    for key, label in labels:
        lines.append(f"| {label} | {lib[key]:g} | {base[key]:g} |")
    return lines


def import_table(results: dict[str, Any], top: int = 15) -> list[str]:
    sk = results.get("skip_latency") or {}
    rows = sk.get("import_profile") or []
    if not rows:
        return []
    lines = ["| module (import tree depth) | cumulative | self |", "|---|---:|---:|"]
    for row in rows[:top]:
        name = "&nbsp;&nbsp;" * min(int(row["depth"]), 6) + f"`{row['module']}`"
        lines.append(f"| {name} | {row['cumulative_ms']:.1f} ms | {row['self_ms']:.1f} ms |")
    return lines


def machine_line(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    return (f"Measured {results.get('measured_at', '?')} at commit "
            f"`{results.get('commit', '?')}` on {m.get('cpus', '?')} CPU cores, "
            f"{m.get('system', '?')}, {m.get('implementation', 'Python')} "
            f"{m.get('python', '?')}, SQLite {m.get('sqlite', '?')}"
            + (f", PostgreSQL {results['guarded_effect_postgres']['server_version']} on the "
               "same machine"
               if "server_version" in results.get("guarded_effect_postgres", {}) else "")
            + ".")


def details(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    sq = results.get("guarded_effect_sqlite")
    if sq:
        out.append(f"SQLite: medians of {sq['rounds']} alternating rounds of "
                   f"{sq['effects_per_round']} effects per side; per round, retrysafe "
                   + ", ".join(f"{v:,.0f}" for v in sq["library_per_s"]) + "/s and sqlite3 "
                   + ", ".join(f"{v:,.0f}" for v in sq["baseline_per_s"]) + "/s. "
                   "The ratio is the median of the per-round ratios (each round's two sides "
                   f"ran back to back); the ratio of the medians is {sq['ratio_of_medians']:.2f}. "
                   f"CPU time per effect (median): retrysafe "
                   f"{sq['cpu_ms_per_effect']['library']:.3f} ms, sqlite3 "
                   f"{sq['cpu_ms_per_effect']['baseline']:.3f} ms.")
    pg = results.get("guarded_effect_postgres")
    if pg and "concurrency" in pg:
        out.append(f"PostgreSQL (synchronous_commit={pg['synchronous_commit']}, "
                   f"fsync={pg['fsync']}): medians of {pg['rounds']} alternating rounds; "
                   "throughput is all workers' effects over the time from the first worker's "
                   "start to the last one's end; "
                   + "; ".join(f"{r['workers']} worker(s) x {r['effects_per_worker']} effects"
                               for r in pg["concurrency"]) + ".")
    sk = results.get("skip_latency")
    if sk:
        out.append(f"Skip: medians of {sk['runs']} interleaved runs each, {sk['bytecode']} "
                   f"bytecode; `python -c \"from retrysafe.cli import main\"` (the full command line's imports) alone took "
                   f"{sk['imports_ms']:.1f} ms.")
    return out


def markdown(results: dict[str, Any], *, with_profiles: bool = True) -> str:
    parts = [machine_line(results), ""]
    if results.get("per_outcome", {}).get("sqlite"):
        parts += ["### Per outcome", "", *per_outcome_lines(results["per_outcome"]), ""]
        if results["per_outcome"].get("plot"):
            parts += ["![outcomes per second against the peers](img/per-outcome.png)", ""]
    parts += cli_lines(results.get("cli_latency") or {})
    parts += dashboard_lines(results.get("dashboard") or {})
    parts += scale_lines(results.get("scale") or {})
    parts += ["### Per guarded effect and per CLI skip", ""]
    parts += [*summary_table(results), ""]
    parts += [f"- {line}" for line in details(results)]
    if with_profiles:
        for anat in (anatomy_table(results), pg_anatomy_table(results)):
            if anat:
                parts += ["", *anat]
        imp = import_table(results)
        if imp:
            parts += ["", "Import time of `retrysafe step` (median of 5 runs, "
                      "`python -X importtime`, largest first):", "", *imp]
    return "\n".join(parts) + "\n"


_PEER_NAMES = {"eo": "exactly-once", "jo": "justonce", "ik": "idemkey", "dbos": "DBOS",
               "base": "hand-written psycopg"}


def _syncs(counts: dict[str, Any], name: str, phase: str) -> str:
    row = counts.get(name) or {}
    if phase not in row:
        return "-"
    return (f"{row[phase]:.1f} ({row[phase + '_fdatasync']:.1f} fdatasync, "
            f"{row[phase + '_fsync']:.1f} fsync)")


def _target_cell(row: dict[str, Any]) -> str:
    if row.get("target") is None:
        return "-"
    return f">= {row['target']:g} | {_ok(bool(row['meets_target']))}"


def per_outcome_lines(result: dict[str, Any]) -> list[str]:
    """The per-outcome benchmark as Markdown: throughput, syncs, ratios to the peers."""
    lines: list[str] = []
    sq = result.get("sqlite") or {}
    counts = result.get("syncs") or {}
    if sq.get("contestants"):
        lines += [f"One outcome with one guarded effect per key, SQLite (WAL); medians of "
                  f"{sq['rounds']} rounds of {sq['keys_per_round']} keys, the order rotating "
                  "every round. Durable syncs and the pages appended to the write-ahead log "
                  "per outcome counted with strace.", "",
                  "| contestant | synchronous | first run | re-run | durable syncs, first run "
                  "| durable syncs, re-run | WAL pages, first run |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for name, row in sq["contestants"].items():
            pages = (counts.get(name) or {}).get("first_wal_pages")
            lines.append(f"| {row['label']} | {row['synchronous']} | "
                         f"{_fmt_rate(row['first_median'])} | {_fmt_rate(row['rerun_median'])} | "
                         f"{_syncs(counts, name, 'first')} | {_syncs(counts, name, 'rerun')} | "
                         f"{'-' if pages is None else f'{pages:.1f}'} |")
        st = result.get("statements") or {}
        if st:
            calls = st.get("once_first") is not None
            lines += ["", "| per outcome, SQLite, one engine reused (counted) | first run | re-run |"
                      + (" `once`, first run | `once`, re-run |" if calls else ""),
                      "|---|---:|---:|" + ("---:|---:|" if calls else "")]
            for field, label in (("statements", "SQL statements (without BEGIN/COMMIT)"),
                                 ("selects", "of which SELECT"),
                                 ("write_transactions", "write transactions")):
                lines.append(f"| {label} | {st['first'][field]:g} | {st['rerun'][field]:g} |"
                             + (f" {st['once_first'][field]:g} | {st['once_rerun'][field]:g} |"
                                if calls else ""))
        lines += ["", "| retrysafe | against | phase | ratio | target | |",
                  "|---|---|---|---:|---:|---|"]
        for t in sq["targets"]:
            me = sq["contestants"][t["retrysafe"]]
            peer = t["peer"].split("_")[0]
            lines.append(f"| {me['label']} ({me['synchronous']}) | {_PEER_NAMES[peer]} | "
                         f"{t['phase']} | {t['ratio']:.2f} | {_target_cell(t)} |")
    pg = result.get("postgres") or {}
    if pg.get("concurrency"):
        lines += ["", f"PostgreSQL {pg['server_version']} (synchronous_commit="
                  f"{pg['synchronous_commit']}), {pg['keys_per_round']} keys per round over all "
                  f"processes (re-run: {pg.get('rerun_passes', 1)} passes over them), medians of "
                  f"{pg['rounds']} rounds, the order rotating.", "",
                  "| processes | contestant | first run | re-run |", "|---:|---|---:|---:|"]
        for row in pg["concurrency"]:
            for c in row["contestants"].values():
                lines.append(f"| {row['workers']} | {c['label']} | "
                             f"{_fmt_rate(c['first_median'])} | {_fmt_rate(c['rerun_median'])} |")
        lines += ["", "| processes | retrysafe | against | phase | ratio | target | |",
                  "|---:|---|---|---|---:|---:|---|"]
        for row in pg["concurrency"]:
            for t in row["targets"]:
                label = row["contestants"][t["retrysafe"]]["label"]
                lines.append(f"| {row['workers']} | {label} | {_PEER_NAMES[t['peer']]} | "
                             f"{t['phase']} | {t['ratio']:.2f} | {_target_cell(t)} |")
        per = pg.get("per_outcome") or {}
        if per:
            lines += ["", "| per outcome on PostgreSQL (counted) | first run | re-run |",
                      "|---|---:|---:|"]
            for who, label in (("rs_engine", "retrysafe `start()`, round trips"),
                               ("rs_engine_once", "retrysafe `once()`, round trips"),
                               ("base", "hand-written psycopg, round trips")):
                if f"{who}_first" in per:
                    lines.append(f"| {label} | {per[who + '_first']['round_trips']:g} | "
                                 f"{per[who + '_rerun']['round_trips']:g} |")
    elif pg.get("skipped"):
        lines += ["", f"PostgreSQL: not run ({pg['skipped']})."]
    return lines


def cli_lines(cli: dict[str, Any]) -> list[str]:
    """``bench/cli_latency.py`` as Markdown."""
    if not cli.get("commands"):
        return []
    lines = ["### Per CLI call", "",
             f"Wall time, medians of {cli['runs']} interleaved runs, cached bytecode; "
             f"`python -c pass` took {cli['bare_ms']:.1f} ms.", "",
             "| command | wall time | ratio to `python -c pass` | target | |", "|---|---:|---:|---:|---|"]
    for row in cli["commands"].values():
        if "target" not in row:  # the same command through the full CLI (--full): reference
            lines.append(f"| {row['label']} | {row['ms']:.1f} ms | {row['ratio']:.1f}x | - | |")
            continue
        lines.append(f"| {row['label']} | {row['ms']:.1f} ms | {row['ratio']:.1f}x | "
                     f"< {row['target']:g}x | {_ok(row['meets_target'])} |")
    return [*lines, ""]


def _ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else f"{value:,.1f} ms" if value < 1000 else f"{value:,.0f} ms"


def scale_lines(scale: dict[str, Any]) -> list[str]:
    """``bench/scale.py`` as Markdown: bytes per outcome, then each command and API
    call on every ledger size with the ratio of the largest to the smallest."""
    foot, rows, t = scale.get("footprint"), scale.get("rows"), scale.get("targets") or {}
    if not foot or not rows:
        return []
    w1, w2 = foot["widest_folder"]
    sizes = dict(sorted(scale["sizes"].items(), key=lambda kv: int(kv[1])))
    lines = [
        "### At scale", "",
        f"Per outcome with one effect (the growth over {foot['outcomes']} more outcomes, one "
        "engine reused):", "",
        "| measure | figure | target | |", "|---|---:|---:|---|",
        f"| ledger bytes per outcome | {foot['ledger_bytes']:,.0f} | <= {t['ledger_bytes']:,} "
        f"| {_ok(foot['ledger_bytes'] <= t['ledger_bytes'])} |",
        f"| `runs/` bytes on disk per outcome ({foot['runs_files']:g} files, "
        f"{foot['runs_folders']:g} folders) | {foot['runs_disk_bytes']:,.0f} "
        f"| <= {t['runs_disk_bytes']:,} | {_ok(foot['runs_disk_bytes'] <= t['runs_disk_bytes'])} |",
        f"| widest folder under `runs/`, after {foot['outcomes']} and {2 * foot['outcomes']} "
        f"outcomes | {w1:,} and {w2:,} entries | does not grow | {_ok(w2 <= w1)} |", "",
        f"Latency on the ledgers `bench/dashboard.py` builds, medians of {scale['runs']} "
        f"interleaved rounds ({scale['slow_runs']} for `doctor`); commands are "
        "wall time with cached bytecode, API calls the mean of "
        f"{scale['calls']} calls per round in one process. The ratio is the median of the "
        f"per-round ratios, {max(sizes.values()):,} outcomes to {min(sizes.values()):,}.", "",
        "| command or API call | " + " | ".join(f"{n:,} outcomes" for n in sizes.values())
        + " | ratio | target | |",
        "|---|" + "---:|" * len(sizes) + "---:|---:|---|",
    ]
    for row in rows:
        lines.append(f"| {row['label']} | " + " | ".join(_ms(row[f'{s}_ms']) for s in sizes)
                     + f" | {row['ratio']:.2f}x | <= {t['ratio']:g}x | {_ok(row['meets_target'])} |")
    if scale.get("plot"):
        lines += ["", "![latency of each command and API call against ledger size](img/scale.png)"]
    return [*lines, ""]


def dashboard_lines(dash: dict[str, Any]) -> list[str]:
    """``bench/dashboard.py`` as Markdown."""
    if not dash.get("pages"):
        return []
    lines = ["### Dashboard pages", "",
             f"Median of {dash['rounds']} fetches over HTTP on a SQLite ledger with "
             f"{dash['outcomes']:,} outcomes, interleaved with a static file of the same server "
             f"({dash['baseline_median_ms']:.1f} ms).", "",
             "| page | median | slowest | target | |", "|---|---:|---:|---:|---|"]
    for name, row in dash["pages"].items():
        target = "-" if name == "metrics" else f"< {dash['target_ms']:g} ms"
        lines.append(f"| {name.replace('_', ' ')} | {row['median_ms']:.1f} ms | {row['max_ms']:.1f} ms"
                     f" | {target} | {_ok(row['meets_target']) if name != 'metrics' else ''} |")
    return [*lines, ""]
