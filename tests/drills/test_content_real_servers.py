"""The content pipeline (seed 002) on real servers: WordPress, the Sheets stand-in, Synapse.

WordPress (``tests/connectors/wpserver.py``) and Synapse
(``tests/connectors/synapseserver.py``) are the test session's shared
servers, started once for every test that needs them; the Sheets v4 stand-in
runs here on loopback. ``examples/content-pipeline/real/servers.py`` writes
the description its ``config`` and ``count`` read, as its ``serve`` does.

The full drills take minutes and run only when asked for::

    python -m pytest -m real_drill tests/drills/test_content_real_servers.py
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from example_targets import CONTENT, example_env, retrysafe

REAL = CONTENT / "real"
sys.path.insert(0, str(Path(__file__).parents[1] / "connectors"))

from cases_servers import synapse_server, wordpress_site  # noqa: E402, F401  (fixtures)

OCCURRENCE = "2026-11-30T0900"
STEPS = (("cms", "publish"), ("sheet", "sheet-row"), ("chat", "notify"))
BEGIN, END = "<!-- fault-points:begin (written by real/fault_points.py) -->", "<!-- fault-points:end -->"

pytestmark = pytest.mark.slow


def _load_servers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("content_real_servers", REAL / "servers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


servers = _load_servers()


@pytest.fixture(scope="module")
def folder(wordpress_site: Any, synapse_server: Any,  # noqa: F811  (the imported fixtures)
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The servers' description (as ``servers.py serve`` writes it), a room of its own."""
    path = tmp_path_factory.mktemp("servers")
    with servers.sheets_standin(path) as sheets:
        servers.write(path, servers.describe(wordpress_site, synapse_server, synapse_server.new_room(),
                                             sheets))
        yield path


def _home(folder: Path, path: Path) -> dict[str, str]:
    """A home configured by ``servers.py config``; the environment with the secrets of ``env``."""
    path.mkdir(parents=True)
    config = subprocess.run([sys.executable, str(REAL / "servers.py"), "config", str(folder)],
                            capture_output=True, text=True, check=True).stdout
    (path / "retrysafe.toml").write_text(config)
    return example_env(path, servers.secrets_env(servers.load(folder)))


def _readme_table() -> str:
    """What stands between the README's fault-points markers (fault_points.py --write)."""
    text = (CONTENT / "README.md").read_text()
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END)].lstrip("\n")


def test_one_run_lands_once_in_wordpress_the_sheet_and_the_room(folder: Path, tmp_path: Path) -> None:
    """The same job and pipeline.sh, the real connectors: one post, one row, one message, with
    their ids and links in the evidence; a second run with the same key sends nothing."""
    env = _home(folder, tmp_path / "home")
    target = f"t{uuid.uuid4().hex[:8]}"
    key = f"content-pipeline:{OCCURRENCE}:{target}"
    run = ("run", "content-pipeline", "-p", f"occurrence={OCCURRENCE}", "-p", f"target={target}",
           "--", "./pipeline.sh")
    first = retrysafe(*run, env=env, cwd=REAL)
    assert first.returncode == 0, first.stdout + first.stderr
    status = json.loads(retrysafe("status", key, "--json", env=env).stdout)
    steps = {s["name"]: s for s in status["steps"]}
    site = servers.load(folder)["wordpress"]["url"]
    post = steps["publish"]["evidence_fields"]
    assert post["status"] == "draft" and post["url"] == f"{site}/?p={post['id']}"
    assert steps["notify"]["evidence_fields"]["event_id"].startswith("$")
    assert steps["sheet-row"]["evidence_fields"]["worksheet"] == "Log"
    again = retrysafe(*run, env=env, cwd=REAL)
    assert again.returncode == 0, again.stdout + again.stderr
    counts = servers.count(folder)
    assert [counts[system].get(f"{key}/{step}") for system, step in STEPS] == [1, 1, 1]


def test_the_readme_shows_the_fault_points_of_a_real_run(folder: Path) -> None:
    """fault_points.py kills a run at each of seed 002's three points and re-runs it; its table
    (counts after the kill and after the re-run) is the one in the README."""
    proc = subprocess.run([sys.executable, str(REAL / "fault_points.py"), str(folder)],
                          capture_output=True, text=True, timeout=600,
                          env=example_env(folder), check=False)  # it makes a home of its own
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1 ") or
            line.startswith("| 2 ") or line.startswith("| 3 ")]
    assert [row.split(" | ")[3:] for row in rows] == [
        ["0 / 0 / 0", "failed", "1 / 1 / 1", "done", "yes |"],
        ["1 / 0 / 0", "unknown", "1 / 1 / 1", "done", "yes |"],
        ["1 / 1 / 0", "unknown", "1 / 1 / 1", "done", "yes |"],
    ]
    assert _readme_table() == proc.stdout, "rewrite the table: python3 fault_points.py SERVERS --write ../README.md"


def _selected(config: pytest.Config) -> bool:
    return "real_drill" in str(config.getoption("markexpr") or "")


@pytest.mark.real_drill
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(("points", "trials"), [("all", 20), ("seed", 12)])
def test_drill_passes_on_real_servers(folder: Path, tmp_path: Path, request: pytest.FixtureRequest,
                                      points: str, trials: int) -> None:
    """retrysafe drill --points all (every step at every crash point) and --points seed
    (the story's scenarios, a permission error and a network cut included) pass, and every
    trial's post, row and message exists once."""
    if not _selected(request.config):
        pytest.skip("minutes long: run with -m real_drill")
    env = _home(folder, tmp_path / "home")
    report_file = tmp_path / "drill.json"
    proc = retrysafe("drill", "content-pipeline", "-p", f"occurrence={OCCURRENCE}", "-p", "target=blog",
                     "--points", points, "--json", str(report_file), "--", str(REAL / "pipeline.sh"),
                     env=env, cwd=REAL, timeout=3000)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{trials} passed, 0 failed" in proc.stdout
    counts = servers.count(folder)
    for trial in json.loads(report_file.read_text())["trials"]:
        key = trial["outcome_key"]
        assert [counts[system].get(f"{key}/{step}") for system, step in STEPS] == [1, 1, 1], key

