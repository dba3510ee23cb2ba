"""/metrics and ``retrysafe metrics``: read by prometheus_client's own parser and
checked against what the ledger holds, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from dashsite import KEY, make_site, start_server, stop_server
from prometheus_client.parser import text_string_to_metric_families
from support import Home

from retrysafe.metrics import HistoryCounts


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_endpoint_and_textfile_match_the_ledger(any_home: Home, tmp_path: Path) -> None:
    """Outcomes by job and state, executions, lookups, skips, blocks and the oldest
    waiting outcome, as the ledger's own records count them; the endpoint and the
    textfile agree."""
    site = make_site(any_home)
    server = start_server(any_home)
    try:
        got = server.client().get("/metrics")
        assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
        endpoint = samples(got.text)
    finally:
        stop_server(server)
    textfile = tmp_path / "retrysafe.prom"
    written = any_home.run("metrics", "--textfile", str(textfile))
    assert written.returncode == 0, written.stderr
    assert textfile.stat().st_mode & 0o644 == 0o644
    from_file = samples(textfile.read_text())

    with any_home.open_ledger() as ledger:
        outcomes = ledger.outcomes()
        by_state = Counter(o.state for o in outcomes)
        events = [e for o in outcomes for e in ledger.history(o.key)]
        blocked = ledger.require_outcome(KEY)
    intents = sum(1 for e in events if e.kind == "step" and e.to_state == "running")
    blocks = sum(1 for e in events if e.kind == "step" and e.to_state == "blocked")
    assert (intents, blocks, by_state["done"], by_state["blocked"]) == (2, 1, 1, 1)

    for figures in (endpoint, from_file):
        for state in ("done", "blocked", "unknown", "failed"):
            assert figures[("retrysafe_outcomes", (("job", "report"), ("state", state)))] == by_state[state]
        assert figures[("retrysafe_executions_total", (("job", "report"), ("kind", "effect")))] == intents
        assert figures[("retrysafe_blocks_total", (("job", "report"),))] == blocks
        assert figures[("retrysafe_lookups_found_total", (("job", "report"),))] == 0
        assert figures[("retrysafe_needs_attention", (("state", "blocked"),))] == 1
        age = figures[("retrysafe_oldest_needs_attention_age_seconds", ())]
        assert age > 0
    # the endpoint was read first: the outcome has waited at least as long since
    assert from_file[("retrysafe_oldest_needs_attention_age_seconds", ())] >= \
        endpoint[("retrysafe_oldest_needs_attention_age_seconds", ())]
    assert blocked.state == "blocked"

    # a re-run after a lookup-free resolve: the skip of a done step is counted
    assert any_home.run("resolve", KEY, "send", "--found", "msg-4711").returncode == 0
    assert site.run("2026-W32").returncode == 0
    assert site.run("2026-W31").returncode == 0  # done: no attempt, nothing skipped
    after = samples(any_home.run("metrics").stdout)
    assert after[("retrysafe_needs_attention", (("state", "blocked"),))] == 0
    assert after[("retrysafe_oldest_needs_attention_age_seconds", ())] == 0
    assert after[("retrysafe_skips_total", (("job", "report"),))] == 1
    assert after[("retrysafe_outcomes", (("job", "report"), ("state", "done")))] == 2


def test_metrics_textfile_into_a_missing_folder_is_one_line_exit_2(home: Home, tmp_path: Path) -> None:
    """A textfile that cannot be written: one line, exit 2."""
    make_site(home)
    got = home.run("metrics", "--textfile", str(tmp_path / "no" / "such" / "file.prom"))
    assert got.returncode == 2 and got.stderr.startswith("retrysafe: cannot write")


HISTORY = ("retrysafe_executions_total", "retrysafe_lookups_found_total", "retrysafe_skips_total",
           "retrysafe_blocks_total", "retrysafe_attempts", "retrysafe_outcomes")


def history(figures: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[object, float]:
    """The counters and the attempts and outcomes gauges, the figures carried on from
    the history (zeros left out)."""
    return {k: v for k, v in figures.items() if k[0] in HISTORY and v}


def recount(home: Home) -> dict[object, float]:
    """The same figures counted afresh from the whole ledger, by the listing's own totals."""
    from retrysafe.ledger.listing import Listing

    with home.open_ledger() as ledger:
        t = Listing(ledger.backend).totals()
    out: dict[object, float] = {}
    for (job, kind), n in t.executions.items():
        out[("retrysafe_executions_total", (("job", job), ("kind", kind)))] = n
    for name, values in (("retrysafe_lookups_found_total", t.lookups_found),
                         ("retrysafe_skips_total", t.skips), ("retrysafe_blocks_total", t.blocks)):
        for job, n in values.items():
            out[(name, (("job", job),))] = n
    for (job, state), n in t.attempts.items():
        out[("retrysafe_attempts", (("job", job), ("state", state)))] = n
    for (job, state), n in t.outcomes.items():
        out[("retrysafe_outcomes", (("job", job), ("state", state)))] = n
    return {k: v for k, v in out.items() if v}


def test_incremental_counters_equal_a_full_recount_after_more_runs(any_home: Home,
                                                                  tmp_path: Path) -> None:
    """The dashboard and the textfile count only the history written since their last
    scrape; after more runs (a resolve, a skip, a new outcome, another crash and block)
    they hold what a full recount of the ledger gives, as do a fresh
    ``retrysafe metrics``."""
    site = make_site(any_home)
    textfile = tmp_path / "retrysafe.prom"
    server = start_server(any_home)
    try:
        client = server.client()
        first = history(samples(client.get("/metrics").text))
        assert any_home.run("metrics", "--textfile", str(textfile)).returncode == 0
        assert (tmp_path / ".retrysafe.prom.state").is_file()
        assert first == recount(any_home)

        assert any_home.run("resolve", KEY, "send", "--found", "msg-4711").returncode == 0
        assert site.run("2026-W32").returncode == 0  # finds send done: a skip
        assert site.run("2026-W33").returncode == 0
        assert site.run("2026-W34", env={"RETRYSAFE_CRASH_AT": "send:after-execute"}).returncode != 0
        assert site.run("2026-W34").returncode == 3

        second = history(samples(client.get("/metrics").text))
    finally:
        stop_server(server)
    assert any_home.run("metrics", "--textfile", str(textfile)).returncode == 0
    from_file = history(samples(textfile.read_text()))
    fresh = history(samples(any_home.run("metrics").stdout))
    full = recount(any_home)
    assert second == from_file == fresh == full
    blocks = ("retrysafe_blocks_total", (("job", "report"),))
    executions = ("retrysafe_executions_total", (("job", "report"), ("kind", "effect")))
    assert (second[blocks], second[executions]) == (first[blocks] + 1, first[executions] + 2)
    assert second[("retrysafe_skips_total", (("job", "report"),))] == 1


def test_prune_never_lowers_a_counter_and_another_ledger_starts_over(home: Home,
                                                                    tmp_path: Path) -> None:
    """Pruning removes history rows, but a counter already counted stays (the attempts
    gauge follows the ledger); counting goes on from there. The same textfile written
    for another ledger (another identity) counts that ledger from scratch."""
    site = make_site(home)
    textfile = tmp_path / "retrysafe.prom"
    assert home.run("metrics", "--textfile", str(textfile)).returncode == 0
    before = history(samples(textfile.read_text()))

    time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
    pruned = home.run("prune", "--older-than", "1s", "--state", "done")
    assert pruned.returncode == 0, pruned.stderr
    executions = ("retrysafe_executions_total", (("job", "report"), ("kind", "effect")))
    finished = ("retrysafe_attempts", (("job", "report"), ("state", "finished")))
    assert recount(home).get(executions, 0) < before[executions]  # the history did shrink

    assert home.run("metrics", "--textfile", str(textfile)).returncode == 0
    after = history(samples(textfile.read_text()))
    gauges = ("retrysafe_attempts", "retrysafe_outcomes")
    assert {k: v for k, v in after.items() if k[0] not in gauges} == \
        {k: v for k, v in before.items() if k[0] not in gauges}
    assert after.get(finished, 0) == recount(home).get(finished, 0) < before[finished]
    assert {k: v for k, v in after.items() if k[0] == "retrysafe_outcomes"} == \
        {k: v for k, v in recount(home).items() if k[0] == "retrysafe_outcomes"}

    assert site.run("2026-W35").returncode == 0
    assert home.run("metrics", "--textfile", str(textfile)).returncode == 0
    later = history(samples(textfile.read_text()))
    assert later[executions] == before[executions] + 1
    assert later[finished] == recount(home)[finished]

    other = Home(tmp_path / "other")
    other.path.mkdir()
    other.config("[jobs.report]\nkey = \"report:{week}\"\nparams = { week = \"isoweek\" }\n")
    assert other.run("run", "report", "-p", "week=2026-W40", "--", "true").returncode == 0
    assert other.run("metrics", "--textfile", str(textfile)).returncode == 0
    theirs = history(samples(textfile.read_text()))
    done = ("retrysafe_outcomes", (("job", "report"), ("state", "done")))
    assert theirs == recount(other) == {finished: 1, done: 1}


def test_plain_metrics_carries_its_counts_in_the_home(home: Home) -> None:
    """Plain ``retrysafe metrics`` keeps its counts in ``runs/.metrics.state``: the
    next call starts from them (a count planted in the file shows up, so it did not
    recount) and adds only the history written since. A state file that is not one,
    or cannot be written, costs a full recount, never a wrong or failed call."""
    import json

    site = make_site(home)
    state = home.path / "runs" / ".metrics.state"
    first = home.run("metrics")
    assert first.returncode == 0, first.stderr
    assert history(samples(first.stdout)) == recount(home)
    kept = json.loads(state.read_text())
    with home.open_ledger() as ledger:
        top = max(e.id for o in ledger.outcomes() for e in ledger.history(o.key))
    assert kept["last_id"] == top

    blocks = ("retrysafe_blocks_total", (("job", "report"),))
    done = ("retrysafe_outcomes", (("job", "report"), ("state", "done")))
    kept["blocks"]["report"] += 100  # what a recount would not find
    kept["outcomes"] = [[j, st, n + 100 if st == "done" else n] for j, st, n in kept["outcomes"]]
    state.write_text(json.dumps(kept))
    assert site.run("2026-W33").returncode == 0
    carried = history(samples(home.run("metrics").stdout))
    full = recount(home)
    assert (carried[blocks], carried[done]) == (full[blocks] + 100, full[done] + 100)
    assert {k: v for k, v in carried.items() if k not in (blocks, done)} == \
        {k: v for k, v in full.items() if k not in (blocks, done)}

    # a prune removes outcomes without history rows: the gauges are read whole again
    # (the planted count goes), the counters keep what they counted
    time.sleep(1.1)  # older than 1s ("0s" is refused: it would keep nothing)
    assert home.run("prune", "--older-than", "1s", "--state", "done").returncode == 0
    pruned = history(samples(home.run("metrics").stdout))
    assert done not in pruned and pruned[blocks] == carried[blocks]
    assert {k: v for k, v in pruned.items() if k[0] == "retrysafe_outcomes"} == \
        {k: v for k, v in recount(home).items() if k[0] == "retrysafe_outcomes"}

    state.write_bytes(b"\xff not a state file")
    assert history(samples(home.run("metrics").stdout)) == recount(home)
    assert json.loads(state.read_text())["last_id"] >= top  # written anew

    state.unlink()
    state.symlink_to("/dev/zero")  # read through, it would never end
    linked = home.run("metrics", timeout=60)
    assert linked.returncode == 0 and history(samples(linked.stdout)) == recount(home)
    assert not state.is_symlink() and json.loads(state.read_text())["last_id"] >= top

    state.unlink()
    state.mkdir()  # neither readable nor replaceable as a file
    stuck = home.run("metrics")
    assert stuck.returncode == 0 and stuck.stderr == ""
    assert history(samples(stuck.stdout)) == recount(home)


def test_outcome_gauges_carried_on_from_the_history_equal_the_ledger(any_home: Home,
                                                                    tmp_path: Path) -> None:
    """The outcomes by job and state are carried on from the history between calls, and
    after each kind of write equal what the ledger holds: new outcomes, a block and its
    resolution, an outcome approved ahead of its first run (planned: inserted without a
    history row), a drill trial (never counted), outcomes merged in by an import (the
    ledger's mark of writes without history changes, so the gauges are read whole)."""
    site = make_site(any_home)

    def gauges() -> dict[object, float]:
        got = any_home.run("metrics")
        assert got.returncode == 0, got.stderr
        return {k: v for k, v in history(samples(got.stdout)).items()
                if k[0] == "retrysafe_outcomes"}

    def ledger() -> dict[object, float]:
        return {k: v for k, v in recount(any_home).items() if k[0] == "retrysafe_outcomes"}

    def outcome(state: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return ("retrysafe_outcomes", (("job", "report"), ("state", state)))

    first = gauges()
    assert first == ledger() and first[outcome("done")] == 1 and first[outcome("blocked")] == 1

    assert any_home.run("resolve", KEY, "send", "--found", "msg-4711").returncode == 0
    assert site.run("2026-W32").returncode == 0
    assert site.run("2026-W33").returncode == 0
    approved = any_home.run("approve", "report:2026-W40", "send", "--new", "--job", "report",
                            "-p", "week=2026-W40")
    assert approved.returncode == 0, approved.stderr
    trial = site.run("2026-W41", env={"RETRYSAFE_DRILL_TRIAL": "t1"})
    assert trial.returncode == 0, trial.stderr
    second = gauges()
    assert second == ledger()
    assert (second[outcome("done")], second[outcome("planned")]) == (3, 1)
    assert outcome("blocked") not in second

    assert site.run("2026-W40").returncode == 0  # the planned one runs: planned -> done
    third = gauges()
    assert third == ledger() and outcome("planned") not in third
    assert third[outcome("done")] == 4

    other = Home(tmp_path / "other", ledger=any_home.ledger)
    other.path.mkdir()
    other.config("[jobs.other]\nkey = \"other:{n}\"\nparams = { n = \"int\" }\n")
    if any_home.ledger is None:  # a SQLite ledger of its own, exported and merged in
        assert other.run("run", "other", "-p", "n=1", "--", "true").returncode == 0
        assert other.run("run", "other", "-p", "n=2", "--", "false").returncode == 1
        dump = tmp_path / "other.jsonl"
        assert other.run("export", str(dump)).returncode == 0
        assert any_home.run("import", "--merge", str(dump)).returncode == 0
        merged = gauges()
        assert merged == ledger()
        assert merged[("retrysafe_outcomes", (("job", "other"), ("state", "done")))] == 1
        assert merged[("retrysafe_outcomes", (("job", "other"), ("state", "failed")))] == 1


def _carried(counts: HistoryCounts) -> dict[object, float]:
    """What HistoryCounts carries, in the names of ``recount``."""
    out: dict[object, float] = {}
    for (job, kind), n in counts.executions.items():
        out[("retrysafe_executions_total", (("job", job), ("kind", kind)))] = n
    for name, values in (("retrysafe_lookups_found_total", counts.lookups_found),
                         ("retrysafe_skips_total", counts.skips),
                         ("retrysafe_blocks_total", counts.blocks)):
        for job, n in values.items():
            out[(name, (("job", job),))] = n
    for (job, state, drill), n in counts.attempts.items():
        if not drill:
            out[("retrysafe_attempts", (("job", job), ("state", state)))] = n
    for (job, state), n in counts.outcomes.items():
        out[("retrysafe_outcomes", (("job", job), ("state", state)))] = n
    return {k: v for k, v in out.items() if v}


def test_a_ledger_restored_under_the_counts_is_counted_afresh(home: Home, tmp_path: Path) -> None:
    """A ledger put back behind the counts' back, with its identity: restored from a
    copy of its file (its history goes back below what was counted), or rebuilt
    whole by an import of an older export (the import marks it). The next counts
    are what the restored ledger holds, not the old counts carried on over ids the
    restored history uses again. A ledger without an identity is counted whole."""
    import shutil

    from retrysafe.ledger import open_ledger
    from retrysafe.ledger.listing import Listing
    from retrysafe.ledger.transfer import dump, load

    site = make_site(home)
    db = home.path / "ledger.sqlite3"
    with home.open_ledger() as ledger:
        ledger.backend.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        older = list(dump(ledger))
    shutil.copy(db, tmp_path / "copy.sqlite3")
    for week in ("2026-W33", "2026-W34", "2026-W35"):
        assert site.run(week).returncode == 0
    counts = HistoryCounts()
    with home.open_ledger() as ledger:
        counts.update(ledger)
        assert _carried(counts) == recount(home)
    for f in home.path.glob("ledger.sqlite3*"):
        f.unlink()
    shutil.copy(tmp_path / "copy.sqlite3", db)  # the copy: fewer history rows
    assert home.run("run", "report", "-p", "week=2026-W36", "--", "false").returncode == 1
    with home.open_ledger() as ledger:
        counts.update(ledger)
    assert _carried(counts) == recount(home)

    # put back again, and grown past what was counted before the next count
    grown_from = counts.last_id
    for f in home.path.glob("ledger.sqlite3*"):
        f.unlink()
    shutil.copy(tmp_path / "copy.sqlite3", db)
    for week in ("2026-W37", "2026-W38", "2026-W39", "2026-W44", "2026-W45"):
        assert home.run("run", "report", "-p", f"week={week}", "--", "false").returncode == 1
    with home.open_ledger() as ledger:
        assert Listing(ledger.backend).horizon()[0] > grown_from
        counts.update(ledger)
    assert _carried(counts) == recount(home)

    # rebuilt whole from the older export, into an empty ledger, then run on
    rebuilt = tmp_path / "rebuilt.sqlite3"
    url = f"sqlite:///{rebuilt}"
    with open_ledger(url) as ledger:
        load(ledger, older)
    for week in ("2026-W40", "2026-W41", "2026-W42", "2026-W43"):
        assert home.run("run", "report", "-p", f"week={week}", "--", "false",
                        env={"RETRYSAFE_LEDGER": url}).returncode == 1
    with open_ledger(url) as ledger:
        counts.update(ledger)
    with open_ledger(url) as ledger:
        t = Listing(ledger.backend).totals()
    assert {(j, s): n for (j, s), n in counts.outcomes.items()} == t.outcomes
    assert counts.executions == t.executions

    # ledgers without an identity cannot be told apart: each is counted whole
    keep = "report:2026-W31"
    one = [r for r in older if "table" not in r
           or (r["row"].get("outcome_key") or r["row"].get("key")) == keep]
    bare = HistoryCounts()
    for name, rows in (("a", older), ("b", one)):
        url = f"sqlite:///{tmp_path / name}.sqlite3"
        with open_ledger(url) as ledger:
            load(ledger, rows, merge=True)  # a merge gives the ledger no identity
            bare.update(ledger)
            assert bare.identity is None
            assert bare.outcomes == Listing(ledger.backend).totals().outcomes
    assert bare.outcomes == {("report", "done"): 1}


def test_textfile_written_when_its_counts_cannot_be_kept(home: Home, tmp_path: Path) -> None:
    """FILE is written even when the state beside it cannot be (a folder in its place):
    exit 0, and one warning line saying the next run counts the whole history."""
    make_site(home)
    textfile = tmp_path / "m.prom"
    (tmp_path / ".m.prom.state").mkdir()
    got = home.run("metrics", "--textfile", str(textfile))
    assert got.returncode == 0, got.stderr
    assert history(samples(textfile.read_text())) == recount(home)
    (line,) = got.stderr.strip().splitlines()
    assert line.startswith("retrysafe: warning: ") and ".m.prom.state" in line
