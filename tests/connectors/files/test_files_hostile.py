"""The file connector fed careless or hostile settings and targets, through the real CLI."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, EffectFailed, build_connector
from retrysafe.connectors.files import FileConnector


def _publish(home: Any, www: Path, source: Path, mode: str) -> Any:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.site]
        type = "file"
        target = "{www}/{{key}}.html"
        mode = "{mode}"
        """
    )
    inner = (
        f"{shlex.quote(sys.executable)} -m retrysafe step publish --connector site "
        f"--with source={shlex.quote(str(source))}"
    )
    return home.run("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)


@pytest.mark.parametrize("mode", ["-1", "4755", "1777777"])
def test_cli_a_mode_beyond_permission_bits_is_a_config_error(
    home: Any, tmp_path: Path, mode: str
) -> None:
    """'-1' used to publish the file 07777 (setuid, world-writable); now nothing is published."""
    source = tmp_path / "report.html"
    source.write_text("<h1>Week 32</h1>\n")
    www = tmp_path / "www"
    www.mkdir()
    done = _publish(home, www, source, mode)
    # the step exits 2 (a config error), so the run's command failed
    assert done.returncode == 1 and "command exited 2" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "mode must be octal permission bits" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(www.iterdir()) == []


def test_cli_a_permission_mode_is_applied(home: Any, tmp_path: Path) -> None:
    source = tmp_path / "report.html"
    source.write_text("<h1>Week 32</h1>\n")
    www = tmp_path / "www"
    www.mkdir()
    done = _publish(home, www, source, "640")
    assert done.returncode == 0, done.stdout + done.stderr
    [target] = list(www.iterdir())
    assert target.stat().st_mode & 0o7777 == 0o640


def test_a_dangling_link_at_the_target_is_named_as_such(tmp_path: Path) -> None:
    """A link to nowhere is not a file that 'appeared while publishing': say what it is."""
    source = tmp_path / "report.html"
    source.write_text("<h1>Week 32</h1>\n")
    target = tmp_path / "report-out.html"
    target.symlink_to(tmp_path / "nowhere")
    conn = build_connector("site", {"type": "file", "target": str(target)})
    assert isinstance(conn, FileConnector)
    assert conn.lookup("weekly:2026-W32/publish", {"source": str(source)}) == ABSENT
    with pytest.raises(EffectFailed, match="symbolic link to a missing file"):
        conn.execute("weekly:2026-W32/publish", {"source": str(source)})
    assert target.is_symlink() and not (tmp_path / "nowhere").exists()
