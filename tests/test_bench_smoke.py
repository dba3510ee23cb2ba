"""The benchmarks still run against the code as it is (tiny sizes, figures not judged).

Benchmarks are not timed here (their ratios live in bench/ and docs/performance.md);
this only keeps them from rotting when an API they drive changes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize(("script", "args"), [
    ("guarded_effect.py", ["--effects", "5", "--rounds", "1"]),
    ("skip_latency.py", ["--runs", "2", "--warmup", "1"]),
    ("cli_latency.py", ["--runs", "1", "--warmup", "1"]),
    ("dashboard.py", ["--outcomes", "300", "--rounds", "1"]),
    ("per_outcome.py", ["--keys", "2", "--rounds", "1", "--no-pg", "--no-counts"]),
])
def test_a_benchmark_runs_to_the_end_and_writes_its_figures(
        tmp_path: Path, script: str, args: list[str]) -> None:
    """Each SQLite/CLI benchmark completes on small sizes and writes its JSON result."""
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data and "Traceback" not in proc.stderr



def test_scale_times_every_command_and_api_call_on_each_ledger_and_the_docs_render_them(
        tmp_path: Path) -> None:
    """bench/scale.py on tiny ledgers: a row per command and API call with each size's
    median and the ratio, rendered in the docs' generated block; the outcomes it wrote
    are gone from the cached ledgers afterwards."""
    import sqlite3

    sys.path.insert(0, str(BENCH))
    from _report import markdown
    from update_docs import BEGIN, END, render

    out, cache = tmp_path / "result.json", tmp_path / "cache"
    proc = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--outcomes", "5",
                           "--small", "300", "--middle", "0", "--large", "1200", "--runs", "1",
                           "--warmup", "0", "--slow-runs", "1", "--calls", "2",
                           "--cache", str(cache), "--no-plot", "--json", str(out)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["sizes"] == {"small": 300, "large": 1200}
    names = [row["name"] for row in data["rows"]]
    assert {"ls_job", "ls_state", "needs_attention", "status", "history", "run_done", "run_new",
            "doctor", "api_first", "api_rerun"} <= set(names)
    for row in data["rows"]:
        assert row["small_ms"] > 0 and row["large_ms"] > 0 and row["ratio"] > 0, row
        assert isinstance(row["meets_target"], bool), row
    block = markdown({"scale": data})
    for row in data["rows"]:
        assert f"| {row['label']} | " in block
    assert "| 300 outcomes | 1,200 outcomes | ratio |" in block
    doc = render(f"# Performance\n\n{BEGIN}\nSTALE FIGURES\n{END}\n", {"scale": data})
    assert "### At scale" in doc and "STALE FIGURES" not in doc
    for n in (300, 1200):  # what the benchmark wrote is deleted again
        conn = sqlite3.connect(cache / f"dashboard-{n}" / "ledger.sqlite3")
        try:
            assert conn.execute("SELECT COUNT(*) FROM rs_outcomes").fetchone()[0] == n
        finally:
            conn.close()


def _scale_result(sizes: dict[str, int]) -> dict[str, object]:
    rows = [{"name": name, "label": f"`{name}`", "ratio": 1.1, "meets_target": True,
             **{f"{side}_ms": 1.0 + k + i for i, side in enumerate(sizes)}}
            for k, name in enumerate(["ls_job", "doctor", "api_first", "api_rerun"])]
    return {"sizes": sizes, "rows": rows, "runs": 9, "slow_runs": 3, "calls": 50,
            "plot": "docs/img/scale.png", "targets": {"ratio": 1.5, "ledger_bytes": 1024,
                                                      "runs_disk_bytes": 4096},
            "footprint": {"outcomes": 5, "ledger_bytes": 900.0, "runs_disk_bytes": 800.0,
                          "runs_files": 0, "runs_folders": 0, "widest_folder": [2, 2]}}


def test_scale_renders_three_ledger_sizes_in_order_and_draws_its_chart(tmp_path: Path) -> None:
    """The sizes come out smallest first whatever the order of the JSON; the chart is
    drawn from a result file by the peers' matplotlib (when bench/.venv-peers exists)."""
    sys.path.insert(0, str(BENCH))
    from _report import scale_lines

    result = _scale_result({"large": 1_000_000, "middle": 100_000, "small": 2000})
    lines = "\n".join(scale_lines(result))
    assert "| 2,000 outcomes | 100,000 outcomes | 1,000,000 outcomes | ratio |" in lines
    assert "| `api_rerun` | 6.00 ms | 5.00 ms | 4.00 ms | 1.10x | <= 1.5x | meets target |" in lines
    assert "](img/scale.png)" in lines
    peers = BENCH / ".venv-peers" / "bin" / "python"
    if not peers.exists():
        pytest.skip("no bench/.venv-peers (python bench/per_outcome.py --setup)")
    data, png = tmp_path / "scale.json", tmp_path / "scale.png"
    data.write_text(json.dumps(result))
    subprocess.run([str(peers), str(BENCH / "scale.py"), "--plot-from", str(data),
                    "--plot", str(png)], check=True, timeout=120)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
