"""The OpenClaw plugin's guard, run by Node's own test runner against a real retrysafe CLI.

Skipped when Node is not installed (scripts/e2e-openclaw runs it with the
Node it fetches). The JavaScript tests are in tests/openclaw/plugin/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retrysafe.openclaw.plugin import plugin_dir

HERE = Path(__file__).parent
NODE = os.environ.get("RETRYSAFE_E2E_NODE_BIN", "")
NODE_EXE = str(Path(NODE) / "node") if NODE else shutil.which("node")


def test_plugin_manifest_names_its_entry_and_schema() -> None:
    """The manifest has an id and an inline config schema; package.json points at index.js."""
    manifest = json.loads((plugin_dir() / "openclaw.plugin.json").read_text())
    assert manifest["id"] == "retrysafe"
    assert manifest["configSchema"]["type"] == "object"
    package = json.loads((plugin_dir() / "package.json").read_text())
    assert package["type"] == "module"
    for entry in package["openclaw"]["extensions"]:
        assert (plugin_dir() / entry).is_file()


@pytest.mark.skipif(NODE_EXE is None, reason="Node is not installed (scripts/e2e-openclaw runs this)")
@pytest.mark.timeout(300)
def test_plugin_guard_under_node_test_runner(tmp_path: Path) -> None:
    """Every case in tests/openclaw/plugin/*.test.mjs passes against the real CLI."""
    retrysafe = Path(sys.executable).parent / "retrysafe"
    assert retrysafe.is_file(), "the retrysafe console script is not installed beside python"
    assert NODE_EXE is not None
    env = {**os.environ, "RETRYSAFE_BIN": str(retrysafe), "TMPDIR": str(tmp_path)}
    env.pop("RETRYSAFE_HOME", None)
    done = subprocess.run(
        [NODE_EXE, "--test", *sorted(str(p) for p in (HERE / "plugin").glob("*.test.mjs"))],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
