"""Scripting habits: shell completion loaded in a real bash, and missed --fail-if-missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import Home


@pytest.fixture
def completing(home: Home, tmp_path: Path) -> Home:
    """A home with two jobs and two outcomes, and a ``retrysafe`` on PATH."""
    home.path.mkdir(parents=True)
    home.config(
        """
        [jobs.weekly-report]
        key = "weekly-report:{n}"
        params = { n = "int" }

        [jobs.billing]
        key = "billing:{n}"
        params = { n = "int" }
        """
    )
    for job, n in (("weekly-report", "1"), ("billing", "7")):
        assert home.run("run", job, "-p", f"n={n}", "--", "true").returncode == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "retrysafe"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m retrysafe "$@"\n')
    exe.chmod(0o755)
    home.env["PATH"] = f"{bin_dir}:{home.env.get('PATH', '')}"
    return home


def complete(home: Home, script: Path, *words: str) -> list[str]:
    """What bash offers for ``retrysafe WORDS...`` (the last word being completed)."""
    line = " ".join(["retrysafe", *words])
    prog = (f"source {script}\n"
            f"COMP_WORDS=(retrysafe {' '.join(words)}); COMP_CWORD={len(words)}; COMP_LINE='{line}'\n"
            "_retrysafe_completion retrysafe\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], env=home.env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [ln for ln in proc.stdout.splitlines() if ln]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_offers_commands_jobs_keys_and_states(completing: Home, tmp_path: Path) -> None:
    """The bash script, sourced in a real bash, completes command names, job names from the
    config, outcome keys from the ledger and outcome states."""
    src = completing.run("completion", "bash")
    assert src.returncode == 0, src.stderr
    assert "complete -o nosort -F _retrysafe_completion retrysafe" in src.stdout
    script = tmp_path / "retrysafe.bash"
    script.write_text(src.stdout)
    assert "needs-attention" in complete(completing, script, "ne")
    assert complete(completing, script, "run", "wee") == ["weekly-report"]
    assert complete(completing, script, "status", "bil") == ["billing:7"]
    assert complete(completing, script, "ls", "--state", "bl") == ["blocked"]
    assert "--older-than" in complete(completing, script, "prune", "--ol")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_ask_retrysafe_for_answers(completing: Home, shell: str) -> None:
    """The zsh and fish scripts define their completion and call 'retrysafe completion SHELL
    --complete', which answers from the ledger for that shell's protocol."""
    src = completing.run("completion", shell)
    assert src.returncode == 0, src.stderr
    assert f"completion {shell} --complete" in src.stdout
    env = {"COMP_WORDS": "retrysafe status bil", "COMP_CWORD": "bil" if shell == "fish" else "2"}
    answer = completing.run("completion", shell, "--complete", env=env)
    assert answer.returncode == 0, answer.stderr
    assert "billing:7" in answer.stdout


def test_missed_fails_only_when_asked_and_an_occurrence_is_missing(home: Home) -> None:
    """missed --fail-if-missing exits 1 while an occurrence never ran, 0 once all are done;
    without the flag missed exits 0 either way."""
    home.path.mkdir(parents=True)
    home.config(
        """
        [jobs.weekly]
        key = "weekly:{occurrence}"
        schedule = "0 7 * * 1"
        tz = "UTC"
        params = { occurrence = "occurrence" }
        """
    )
    span = ("--since", "2026-11-01", "--until", "2026-11-10")
    assert home.run("run", "weekly", "-p", "occurrence=2026-11-02", "--", "true").returncode == 0
    assert home.run("missed", "weekly", *span).returncode == 0
    missing = home.run("missed", "weekly", *span, "--fail-if-missing", "--json")
    assert missing.returncode == 1
    assert [r["state"] for r in json.loads(missing.stdout)] == ["missing"]
    assert home.run("run", "weekly", "-p", "occurrence=2026-11-09", "--", "true").returncode == 0
    assert home.run("missed", "weekly", *span, "--fail-if-missing").returncode == 0
