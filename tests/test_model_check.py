"""The protocol model (model/retrysafe.pml) checked by SPIN: every check of model/configs.

The main configurations must explore their whole state space without an error; each
mutant and each dropped assumption must give a counterexample on the property it
names, so the checker is known to bite. A failure prints the trail, readably.

The default run explores ``pg-message`` whole and finds every counterexample (those
with an unoptimised ``pan``: the same search, found in seconds, compiled in a tenth of
the time); the two SQLite state spaces, seconds each to explore and to compile, are the
heavy tier's (``-m heavy``), and ``model/check`` runs every check as listed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

MODEL = Path(__file__).parent.parent / "model"

#: the text of each property's assertion, as pan reports a violation
PROPERTIES = {
    "once": "effects<=1",
    "twice": "zombie_called",
    "stale_write": "o_fence==myfence[w]",
    "progress": "o_state==",
}


def _configs() -> list[tuple[str, str, list[str]]]:
    out = []
    for line in (MODEL / "configs").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, expect, *flags = line.split()
            out.append((name, expect, flags))
    return out


CONFIGS = _configs()


def _tools() -> None:
    missing = [t for t in ("spin", "gcc") if shutil.which(t) is None]
    assert not missing, f"{missing} not installed: run scripts/setup --test"


def _check(tmp_path: Path, flags: list[str], optimise: bool = True) -> str:
    """Generate, compile and run the verifier; its report. A search expected to stop at a
    counterexample needs no optimised ``pan`` (-O0 compiles in a tenth of the time)."""
    for pml in MODEL.glob("*.pml"):
        shutil.copy(pml, tmp_path)
    subprocess.run(["spin", "-a", *flags, "retrysafe.pml"], cwd=tmp_path, check=True,
                   capture_output=True, text=True, timeout=60)
    subprocess.run(["gcc", "-O2" if optimise else "-O0", "-DSAFETY", "-o", "pan", "pan.c"],
                   cwd=tmp_path, check=True, capture_output=True, text=True, timeout=120)
    done = subprocess.run(["./pan", "-m100000"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, check=False)
    return done.stdout + done.stderr


def trail(tmp_path: Path, flags: list[str], tail: int = 25) -> str:
    """The counterexample: the model's own event lines, then the last raw steps (spin -t -p)."""
    events = subprocess.run(["spin", "-t", *flags, "retrysafe.pml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False).stdout
    story = [re.sub(r" {2,}", " ", ln.strip()) for ln in events.splitlines()
             if "MSC:" in ln or "assertion" in ln]
    steps = subprocess.run(["spin", "-t", "-p", *flags, "retrysafe.pml"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, check=False).stdout
    raw = [ln.rstrip() for ln in steps.splitlines() if re.match(r"\s*\d+:\s+proc", ln)]
    return "\n".join(["events:", *story, f"last {tail} steps:", *raw[-tail:]])


def _errors(report: str) -> int:
    found = re.search(r"errors: (\d+)", report)
    assert found, f"pan gave no verdict:\n{report}"
    return int(found.group(1))


def _run(tmp_path: Path, name: str) -> None:
    _tools()
    expect, flags = next((e, f) for n, e, f in CONFIGS if n == name)
    report = _check(tmp_path, flags, optimise=expect == "pass")
    errors = _errors(report)
    stored = re.search(r"(\S+) states, stored", report)
    print(f"{name}: errors {errors}, {stored.group(1) if stored else '?'} states stored")
    if expect == "pass":
        assert "max search depth too small" not in report, report
        assert errors == 0, f"{name} {flags}: the model has a counterexample\n" + trail(
            tmp_path, flags)
    else:
        assert errors > 0, f"{name} {flags}: no counterexample, so the checker does not bite"
        violated = re.search(r"assertion violated (.*)", report)
        assert violated and PROPERTIES[expect] in violated.group(1), (
            f"{name}: expected property {expect!r} to fail, got:\n{report}\n"
            + trail(tmp_path, flags))


def test_model_configs_lists_the_main_checks_mutants_and_assumptions() -> None:
    """model/configs has the three main checks and a failing check for each mutant and assumption."""
    names = {n for n, _, _ in CONFIGS}
    flags = {f for _, _, fs in CONFIGS for f in fs}
    assert {n for n, e, _ in CONFIGS if e == "pass"} == {
        "sqlite-message", "sqlite-payment", "pg-message"}
    for switch in ("-DNO_CHECK_BEFORE_ACT", "-DNO_FENCE", "-DNO_SAME_HOST_RULE",
                   "-DNO_LOOKUP_FIRST", "-DWRONG_ABSENT", "-DBREAK_WITHOUT_STOP",
                   "-DRESOLVE_BY_LEASE"):
        assert switch in flags
    assert all(e in PROPERTIES or e == "pass" for _, e, _ in CONFIGS)
    assert len(names) == len(CONFIGS)


#: the whole state space the default run explores; the others are the heavy tier's
DEFAULT_PASS = {"pg-message"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in DEFAULT_PASS else [pytest.mark.heavy])
                                  for n, e, _ in CONFIGS if e == "pass"])
def test_protocol_model_has_no_counterexample(tmp_path: Path, name: str) -> None:
    """SPIN explores every interleaving of the bounded model and finds no violation."""
    _run(tmp_path, name)


@pytest.mark.parametrize("name", [n for n, e, _ in CONFIGS if e != "pass"])
def test_mutant_or_dropped_assumption_gives_a_counterexample(tmp_path: Path, name: str) -> None:
    """Each mutant, and each assumption switched off, breaks the property it names."""
    _run(tmp_path, name)


def test_trail_of_a_counterexample_reads_as_events(tmp_path: Path) -> None:
    """A counterexample's trail names workers, writes and calls in words."""
    _tools()
    flags = ["-DPG", "-DNO_FENCE"]
    assert _errors(_check(tmp_path, flags, optimise=False)) > 0
    text = trail(tmp_path, flags)
    assert "claims at its t=" in text and "writes step" in text and "freezes" in text
    assert "assertion violated" in text


@pytest.mark.slow
def test_model_check_script_runs_as_documented() -> None:
    """model/check (the command docs/reliability.md gives) passes for a named check, and
    prints the counterexample it found as events."""
    _tools()
    done = subprocess.run([str(MODEL / "check"), "mutant-no-fence"], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PAN_CFLAGS": "-O0"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" ok") == 1 and "mutant-no-fence" in done.stdout
    assert "assertion violated" in done.stdout
