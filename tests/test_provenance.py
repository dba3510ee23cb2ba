"""Generation provenance (seed 002): `generate` records the prompt file (checksum and a kept
copy) and the model with the artifact; `status` shows them; `verify` re-checks the prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support import Home

KEY = "post:2026-W32"


def _setup(home: Home, tmp_path: Path) -> tuple[Path, Path]:
    home.path.mkdir(mode=0o700, parents=True)
    home.config("""
        [jobs.post]
        key = "post:{week}"
        params = { week = "isoweek" }
    """)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Write the weekly post.\n")
    job = tmp_path / "job.sh"
    job.write_text(f"""#!/bin/sh
set -e
{sys.executable} -m retrysafe generate draft --output draft.md --prompt {prompt} --model-version 2026-05 \\
  -- /bin/sh -c 'date +%s%N > "$RETRYSAFE_OUTPUT"'
""")
    job.chmod(0o755)
    return prompt, job


def test_generate_records_its_declared_inputs_and_status_shows_them(home: Home, tmp_path: Path) -> None:
    """--prompt and --model-version on the command line, the model from RETRYSAFE_MODEL."""
    prompt, job = _setup(home, tmp_path)
    proc = home.run("run", "post", "-p", "week=2026-W32", "--", str(job), env={"RETRYSAFE_MODEL": "writer-xl"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [step] = json.loads(home.run("status", KEY, "--json").stdout)["steps"]
    fields = step["evidence_fields"]
    assert step["evidence"] == step["checksum"]  # the value is still the artifact's checksum
    assert fields["model"] == "writer-xl" and fields["model_version"] == "2026-05"
    assert fields["prompt"] == str(prompt)
    import hashlib
    assert fields["prompt_sha256"] == "sha256:" + hashlib.sha256(prompt.read_bytes()).hexdigest()
    assert Path(fields["prompt_copy"]).read_bytes() == prompt.read_bytes()
    text = home.run("status", KEY).stdout
    assert "draft.model = writer-xl" in text and f"draft.prompt = {prompt}" in text


def test_verify_rechecks_the_prompt_and_says_when_it_changed(home: Home, tmp_path: Path) -> None:
    prompt, job = _setup(home, tmp_path)
    assert home.run("run", "post", "-p", "week=2026-W32", "--", str(job)).returncode == 0
    ok = home.run("verify", KEY)
    assert ok.returncode == 0, ok.stdout
    assert "step draft prompt" in ok.stdout
    prompt.write_text("Write something else.\n")
    changed = home.run("verify", KEY, "--json")
    assert changed.returncode == 1
    [check] = [c for c in json.loads(changed.stdout)["checks"] if c["subject"] == "step draft prompt"]
    assert not check["ok"] and "changed since generation" in check["detail"]
    assert "the prompt used is kept at" in check["detail"]
    # a retry still gets the first draft: the recorded provenance is not rewritten
    again = home.run("run", "post", "-p", "week=2026-W32", "--", str(job))
    assert again.returncode == 0 and "already done" in again.stdout


def test_a_missing_prompt_file_is_refused_and_nothing_is_generated(home: Home, tmp_path: Path) -> None:
    prompt, job = _setup(home, tmp_path)
    prompt.unlink()
    proc = home.run("run", "post", "-p", "week=2026-W32", "--", str(job))
    assert proc.returncode != 0
    assert f"retrysafe: --prompt {prompt}: no such file" in proc.stderr
    steps = json.loads(home.run("status", KEY, "--json").stdout)["steps"]
    assert steps == []
