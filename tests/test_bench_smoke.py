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
    ("scale.py", ["--outcomes", "5", "--small", "300", "--large", "2000", "--runs", "1"]),
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
