"""Every Python example of docs/python-api.md runs as written.

Each fenced ``python`` block of the page is written to a file and run by this
checkout's interpreter in a process of its own, in a fresh temporary folder, with
``RETRYSAFE_HOME`` naming a fresh home whose ``retrysafe.toml`` is the page's own
(its first ``toml`` block), the connector's target folder moved into the temporary
folder. A block passes when it exits 0; the examples assert what they show.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import retrysafe

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
TEXT = PAGE.read_text("utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)

# the page's connector publishes into a folder of another machine; here, the test's own
TARGET = "/srv/www/reports"


def blocks(lang: str) -> list[tuple[int, str]]:
    """The page's fenced blocks of ``lang``: (line number, text)."""
    return [(TEXT.count("\n", 0, m.start()) + 1, m.group(2))
            for m in FENCE.finditer(TEXT) if m.group(1) == lang]


CONFIG = blocks("toml")[0][1]
EXAMPLES = blocks("python")


def run_example(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` run as a script in ``tmp_path/work``, its home ``tmp_path/home``."""
    home, work, www = tmp_path / "home", tmp_path / "work", tmp_path / "www"
    for folder in (home, work, www):
        folder.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG.replace(TARGET, str(www)))
    script = work / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")}
    env.update(RETRYSAFE_HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, str(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("code", [code for _, code in EXAMPLES],
                         ids=[f"line-{line}" for line, _ in EXAMPLES])
def test_each_python_example_runs(code: str, tmp_path: Path) -> None:
    done = run_example(code, tmp_path)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def test_the_page_has_its_config_and_examples() -> None:
    """The config the examples use declares their job and connector, and every block of
    Python is marked ``python`` (so it runs here), none ``py``, ``pycon`` or unmarked."""
    assert "[jobs.weekly-ops-report]" in CONFIG and TARGET in CONFIG
    assert len(EXAMPLES) >= 10
    unrun = [lang for lang, _ in FENCE.findall(TEXT) if lang in ("", "py", "pycon", "python3")]
    assert unrun == []


def test_every_public_name_is_on_the_page() -> None:
    """Each name ``import retrysafe`` exports is named on the page."""
    missing = [name for name in retrysafe.__all__ if f"`{name}" not in TEXT]
    assert missing == []


def test_an_example_that_breaks_fails(tmp_path: Path) -> None:
    """The runner tells a broken example: a block whose assertion fails exits non-zero."""
    code = EXAMPLES[0][1].replace("== 1  # sent once", "== 2  # sent once")
    assert code != EXAMPLES[0][1]
    assert run_example(code, tmp_path).returncode != 0
