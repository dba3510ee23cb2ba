"""Drilling the content pipeline example (seed 002) against its real loopback targets."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from example_targets import BIN, CONTENT, ContentTargets, example_env, retrysafe

OCCURRENCE = "2026-11-30T0900"


def _drill(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return retrysafe("drill", "content-pipeline", "-p", f"occurrence={OCCURRENCE}",
                     "-p", "target=blog", *args, "--", str(CONTENT / "pipeline.sh"),
                     env=example_env(home), cwd=CONTENT, timeout=timeout)


def _assert_once_everywhere(targets: ContentTargets, trials: list[dict[str, object]]) -> None:
    counts = targets.counts()
    for system, per_key in counts.items():
        dupes = {k: n for k, n in per_key.items() if n != 1}
        assert not dupes, f"{system} holds duplicates: {dupes}"
    for trial in trials:
        key = str(trial["outcome_key"])
        for system, step in (("cms", "publish"), ("sheet", "sheet-row"), ("chat", "notify")):
            assert counts[system].get(f"{key}/{step}") == 1, (system, key)


# --points seed narrowed to publish: one trial of each kind of scenario (before-intent,
# after-record, failed, cut); the whole set (12 trials) is the heavy tier's
SEED_ALL = {("publish", "before-intent"), ("publish", "after-record"),
            ("notify", "after-record"), ("publish", "failed"), ("publish", "cut"),
            ("notify", "cut")}
SEED_NARROWED = {("publish", "before-intent"), ("publish", "after-record"),
                 ("publish", "failed"), ("publish", "cut")}


@pytest.mark.parametrize(("only", "points", "trials"), [
    pytest.param(("publish:*",), SEED_NARROWED, 6, id="each-kind"),
    pytest.param((), SEED_ALL, 12, id="all", marks=pytest.mark.heavy),
])
def test_seed_scenarios_pass_and_every_effect_lands_once(
        content_targets: ContentTargets, tmp_path: Path, only: tuple[str, ...],
        points: set[tuple[str, str]], trials: int) -> None:
    """--points seed: every named scenario ends done with one post, one row, one message."""
    home = content_targets.home(tmp_path / "home")
    report_file = tmp_path / "drill.json"
    narrow = [arg for pattern in only for arg in ("--only", pattern)]
    proc = _drill(home, "--points", "seed", *narrow, "--json", str(report_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_file.read_text())
    assert report["ok"] and report["summary"]["failed"] == 0
    seen = {(t["step"], t["point"]) for t in report["trials"]}
    assert points <= seen
    if only:
        assert seen - {("-", "clean"), ("-", "clean-again")} == points
    _assert_once_everywhere(content_targets, report["trials"])
    assert "drill: [" in proc.stderr  # progress went to stderr
    assert f"{trials} passed, 0 failed" in proc.stdout


def test_crash_points_of_publish_and_the_run_pass_and_the_frozen_draft_is_published(
        content_targets: ContentTargets, tmp_path: Path) -> None:
    """--points all, narrowed with --only (a pattern and exact points): publish at every
    crash point, the draft after its record and the run's close-out (every point of every
    step: the heavy test below). After each crash, between publish and record included,
    the post holds the first accepted draft."""
    home = content_targets.home(tmp_path / "home")
    report_file = tmp_path / "drill.json"
    proc = _drill(home, "--only", "publish:*", "--only", "draft:after-record",
                  "--only", "run:before-closeout", "--json", str(report_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for point in ("before-intent", "after-intent", "after-execute", "after-record",
                  "before-closeout"):
        assert point in proc.stdout
    assert "after-begin" not in proc.stdout
    assert "8 trials, 8 passed, 0 failed" in proc.stdout  # the two clean runs and six trials
    report = json.loads(report_file.read_text())
    posts = {p["key"]: p for p in content_targets.state()["cms"]}
    labels = {(t["step"], t["point"]) for t in report["trials"]}
    assert {("publish", "after-execute"), ("draft", "after-record")} <= labels
    for trial in report["trials"]:
        key = trial["outcome_key"]
        status = json.loads(retrysafe("status", key, "--json", env=example_env(home)).stdout)
        draft = next(s for s in status["steps"] if s["name"] == "draft")
        assert posts[f"{key}/publish"]["body"] == Path(draft["artifact"]).read_text()


@pytest.mark.slow
@pytest.mark.heavy
def test_every_crash_point_passes(content_targets: ContentTargets, tmp_path: Path) -> None:
    """--points all: every step at every crash point, and the run's points."""
    home = content_targets.home(tmp_path / "home")
    proc = _drill(home, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "20 passed, 0 failed" in proc.stdout


def _as_from_a_terminal() -> None:
    """The drill starts as from a shell: SIGINT at its default and not blocked, whatever
    the test process inherited or set (a test runner's worker may ignore or block it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_masks(pid: int) -> str:
    """The drill's blocked, ignored and caught signals, to say why a SIGINT was lost."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "(no /proc status)"
    return " ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_ctrl_c_leaves_nothing_running_and_a_real_run_follows(
        content_targets: ContentTargets, tmp_path: Path) -> None:
    """SIGINT mid-drill: exit 130, no running step or active attempt, a real run then works."""
    home = content_targets.home(tmp_path / "home")
    env = example_env(home)
    proc = subprocess.Popen(
        [str(BIN / "retrysafe"), "drill", "content-pipeline", "-p", f"occurrence={OCCURRENCE}",
         "-p", "target=blog", "--", str(CONTENT / "pipeline.sh")],
        env=env, cwd=CONTENT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_as_from_a_terminal)
    # wait until the crash trials have begun, then interrupt in the middle of one
    deadline = time.monotonic() + 120
    seen = ""
    assert proc.stderr is not None
    while "[3/" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    time.sleep(1.5)
    signals = _signal_masks(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, f"{signals}\n{out}{seen}{err}"
    assert "interrupted" in out
    listing = json.loads(retrysafe("ls", "--drills", "--json", env=env).stdout)
    assert listing, "the drill recorded its trials"
    for outcome in listing:
        status = json.loads(retrysafe("status", outcome["key"], "--json", env=env).stdout)
        assert all(s["state"] != "running" for s in status["steps"]), status
        assert all(a["state"] != "active" for a in status["attempts"]), status
        assert "~" in outcome["key"]  # trial outcomes never share a real run's key
    real = retrysafe("run", "content-pipeline", "-p", f"occurrence={OCCURRENCE}",
                     "-p", "target=blog", "--", str(CONTENT / "pipeline.sh"), env=env, cwd=CONTENT)
    assert real.returncode == 0, real.stdout + real.stderr
    key = f"content-pipeline:{OCCURRENCE}:blog"
    counts = content_targets.counts()
    assert counts["cms"][f"{key}/publish"] == 1
    assert counts["chat"][f"{key}/notify"] == 1
