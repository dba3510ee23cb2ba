"""/metrics and ``retrysafe metrics``: read by prometheus_client's own parser and
checked against what the ledger holds, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from conftest import KEY, make_site, start_server, stop_server
from prometheus_client.parser import text_string_to_metric_families
from support import Home


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
