"""The drill refuses to call a job safe when its effects cannot be told apart."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from example_targets import example_env, retrysafe

CONFIG = """\
[jobs.careless]
key = "careless:{week}"
params = { week = "isoweek" }
"""


def _job(tmp_path: Path, effect: str, check: str) -> tuple[Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG)
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        set -e
        retrysafe step send --class message --check '{check}' -- sh -c '{effect}'
        """))
    script.chmod(0o755)
    return home, script


def test_effect_that_ignores_the_step_key_is_bad_input(tmp_path: Path) -> None:
    """An effect and lookup that ignore RETRYSAFE_STEP_KEY: exit 2 and why, never a pass."""
    sent = tmp_path / "sent.log"
    home, script = _job(tmp_path, f"echo sent >> {sent}; echo ok",
                        f"test -s {sent} && cat {sent}")
    report = tmp_path / "drill.json"
    proc = retrysafe("drill", "careless", "-p", "week=2026-W10", "--points", "seed",
                     "--json", str(report), "--", str(script), env=example_env(home))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ignores RETRYSAFE_STEP_KEY" in proc.stdout
    data = json.loads(report.read_text())
    assert not data["ok"] and data["problems"]
    assert len(data["trials"]) == 2  # nothing is crashed once the keys are known to be useless


def test_lookup_that_sees_another_outcomes_effect_is_bad_input(tmp_path: Path) -> None:
    """A keyed effect with a lookup that returns any effect: trial 2 sees trial 1's, exit 2."""
    sent = tmp_path / "sent.log"
    home, script = _job(tmp_path, f'echo "$RETRYSAFE_STEP_KEY" >> {sent}; echo ok',
                        f"test -s {sent} && head -n 1 {sent}")
    proc = retrysafe("drill", "careless", "-p", "week=2026-W10", "--points", "seed",
                     "--", str(script), env=example_env(home))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "step send" in proc.stdout and "problem:" in proc.stdout


def test_step_without_a_lookup_cannot_be_drilled(tmp_path: Path) -> None:
    """No --check and no connector: the drill says it cannot count, exit 2."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nset -e\nretrysafe step send --class message -- true\n")
    script.chmod(0o755)
    proc = retrysafe("drill", "careless", "-p", "week=2026-W10", "--", str(script),
                     env=example_env(home))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot count" in proc.stdout


def test_unknown_job_is_bad_input(tmp_path: Path) -> None:
    """A job that is not declared: one line, exit 2."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text(CONFIG)
    proc = retrysafe("drill", "nope", "--", "true", env=example_env(home))
    assert proc.returncode == 2
    assert proc.stderr.startswith("retrysafe: unknown job")
