"""The landing page lists scheduled occurrences of the last week that never ran,
each with the command that runs it; ones that ran are not listed."""

from __future__ import annotations

import json
from pathlib import Path

from dashsite import start_server, stop_server
from support import Home

CONFIG = """
[jobs.daily]
key = "daily:{occurrence}"
params = { occurrence = "occurrence" }
schedule = "0 9 * * *"
tz = "UTC"
"""


def test_missed_occurrences_are_on_the_landing_page(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.path.mkdir()
    home.config(CONFIG)
    listed = home.run("missed", "daily", "--since", "7d", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) >= 6 and all(r["state"] == "missing" for r in rows)
    ran = rows[-1]["occurrence"]
    assert home.run("run", "daily", "-p", f"occurrence={ran}", "--", "true").returncode == 0
    server = start_server(home)
    try:
        with server.client() as client:
            page = client.get("/")
        text = page.text
        assert page.status_code == 200, text[:500]
        assert "Missed" in text
        for row in rows[:-1]:
            assert row["key"] in text
            assert f"retrysafe run daily -p occurrence={row['occurrence']} -- CMD" in text
        assert f"daily:{ran}" not in text
    finally:
        stop_server(server)
