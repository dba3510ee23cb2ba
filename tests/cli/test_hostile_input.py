"""Hostile and odd parameters: printed commands paste safely, one spelling is one outcome."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import Home, can_map_an_unknown_uid

CONFIG = """
[jobs.team]
key = "{name}"
params = { name = "str" }
"""


def _configure(home: Home) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG)


def _blocked_step(home: Home, tmp_path: Path, name: str) -> str:
    """Run a job whose step may have happened and has no lookup: it blocks; the
    'to unblock' line is returned as printed."""
    _configure(home)
    script = tmp_path / "job.sh"
    # the effect "happens" and then the step command dies without an answer
    script.write_text("#!/bin/sh\nexec \"$RETRYSAFE_PY\" -m retrysafe step send --class message"
                      " -- sh -c 'kill -9 $$'\n")
    script.chmod(0o755)
    env = {"RETRYSAFE_PY": sys.executable}
    first = home.run("run", "team", "-p", f"name={name}", "--", str(script), env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    second = home.run("run", "team", "-p", f"name={name}", "--", str(script), env=env)
    assert second.returncode == 3, second.stdout + second.stderr
    hint = next(ln for ln in second.stdout.splitlines() if ln.startswith("to unblock: "))
    return hint.removeprefix("to unblock: ")


@pytest.mark.parametrize("name", ["x$(touch owned)", "-rf", "a'b \"c\" `d`", "ops; touch owned"])
def test_a_printed_unblock_command_pasted_into_a_shell_does_exactly_what_it_says(
        home: Home, tmp_path: Path, name: str) -> None:
    """Keys from hostile parameters are quoted (and put after ``--`` when they start
    with a dash): pasting the hint runs nothing else and settles the right step."""
    hint = _blocked_step(home, tmp_path, name)
    first_choice = hint.split(" | ")[0].replace("<EVIDENCE>", "msg-1")
    bindir = str(Path(sys.executable).parent)
    proc = subprocess.run(["sh", "-c", first_choice], cwd=tmp_path, capture_output=True, text=True,
                          env={**home.env, "PATH": f"{bindir}:{os.environ['PATH']}"}, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "owned").exists()
    with home.open_ledger() as ledger:
        step = ledger.step(f"{name}/send")
        assert step is not None and (step.state, step.evidence) == ("done", "msg-1")


def test_precomposed_and_decomposed_spellings_are_one_outcome(home: Home, tmp_path: Path) -> None:
    """'Café' typed precomposed (U+00E9) or decomposed (e + U+0301) names one outcome."""
    _configure(home)
    sent = tmp_path / "sent.log"
    cmd = ["sh", "-c", f"echo once >> {sent}"]
    first = home.run("run", "team", "-p", "name=Caf\u00e9 Ltd", "--", *cmd)
    again = home.run("run", "team", "-p", "name=Cafe\u0301 Ltd", "--", *cmd)
    assert first.returncode == 0 and again.returncode == 0, again.stdout + again.stderr
    assert "already done" in again.stdout
    assert sent.read_text() == "once\n"


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2066", "\u00ad", "\x1b", "\u2028",
                                  "\u2029"])
def test_invisible_and_control_characters_in_parameters_are_refused_and_never_printed(
        home: Home, tmp_path: Path, char: str) -> None:
    """Bidirectional overrides, zero-width and control characters: exit 2, one line
    naming the code point, the character itself never echoed, nothing recorded."""
    _configure(home)
    before = home.snapshot()
    proc = home.run("run", "team", "-p", f"name=ab{char}cd", "--", "true")
    assert proc.returncode == 2
    assert f"U+{ord(char):04X}" in proc.stderr and char not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1
    assert home.snapshot() == before


def test_two_outcomes_whose_old_step_keys_collided_each_run_their_own_effect(
        home: Home, tmp_path: Path) -> None:
    """Outcome ``team/send`` with step ``mail`` and outcome ``team`` with step ``send``
    for item ``mail`` once shared the key ``team/send/mail``: the second was skipped
    with the first one's evidence and its effect never ran. A step belongs to its
    outcome, and its key says so."""
    _configure(home)
    effects = tmp_path / "effects.txt"
    env = {"RETRYSAFE_PY": sys.executable, "OUT": str(effects)}
    append = "echo \"$RETRYSAFE_STEP_KEY\" >> \"$OUT\""
    first = tmp_path / "first.sh"
    first.write_text(f"#!/bin/sh\nexec \"$RETRYSAFE_PY\" -m retrysafe step mail --class message"
                     f" -- sh -c '{append}'\n")
    second = tmp_path / "second.sh"
    second.write_text(f"#!/bin/sh\nexec \"$RETRYSAFE_PY\" -m retrysafe step send --item mail"
                      f" --class message -- sh -c '{append}'\n")
    for script in (first, second):
        script.chmod(0o755)
    for name, script in (("team/send", first), ("team", second), ("team/send", first),
                         ("team", second)):
        proc = home.run("run", "team", "-p", f"name={name}", "--", str(script), env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert effects.read_text().splitlines() == ["team/send//mail", "team/send/mail"]
    with home.open_ledger() as ledger:
        one, two = ledger.step("team/send//mail"), ledger.step("team/send/mail")
        assert one is not None and (one.outcome_key, one.name, one.item) == ("team/send", "mail", "")
        assert two is not None and (two.outcome_key, two.name, two.item) == ("team", "send", "mail")


def test_a_tilde_which_marks_drill_trials_is_refused_in_parameters_and_key_templates(
        home: Home, tmp_path: Path) -> None:
    """``KEY~TRIAL`` is a drill trial's key: listings leave such keys out and drill
    clean-ups delete them, so a real outcome whose key held a ``~`` (a parameter
    ``~alice/docs``) would be hidden from needs-attention and deleted by
    ``drill --cleanup`` or ``prune --drills``. Refused in one line, nothing recorded."""
    _configure(home)
    before = home.snapshot()
    sent = tmp_path / "sent"
    proc = home.run("run", "team", "-p", "name=~alice", "--", "sh", "-c", f"echo x >> {sent}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "parameter 'name'" in proc.stderr and "drill" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not sent.exists()
    assert home.snapshot() == before
    added = home.run("job", "add", "other", "--key", "a~{n}", "--param", "n=int")
    assert added.returncode == 2 and "reserved for drill" in added.stderr, added.stderr
    assert "other" not in (home.path / "retrysafe.toml").read_text()


def test_parameters_that_render_another_outcomes_key_are_refused_not_answered_done(
        home: Home, tmp_path: Path) -> None:
    """``{user}:{topic}`` renders ``bob`` + ``billing:overdue`` and ``bob:billing`` +
    ``overdue`` as one key: the second piece of work must not be answered "already
    done" (its command never ran); it is refused, exit 2, on the fast path too."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config("""
    [jobs.notify]
    key = "notify:{user}:{topic}"
    params = { user = "str", topic = "str" }
    """)
    sent = tmp_path / "sent"
    cmd = ["sh", "-c", f"echo \"$RETRYSAFE_OUTCOME_KEY\" >> {sent}"]
    first = home.run("run", "notify", "-p", "user=bob", "-p", "topic=billing:overdue", "--", *cmd)
    assert first.returncode == 0, first.stdout + first.stderr
    other = home.run("run", "notify", "-p", "user=bob:billing", "-p", "topic=overdue", "--", *cmd)
    assert other.returncode == 2, other.stdout + other.stderr
    assert "made by other parameters" in other.stderr and "already done" not in other.stdout
    assert len(other.stderr.strip().splitlines()) == 1
    again = home.run("run", "notify", "-p", "user=bob", "-p", "topic=billing:overdue", "--", *cmd)
    assert again.returncode == 0 and "already done" in again.stdout
    assert sent.read_text() == "notify:bob:billing:overdue\n"


def test_a_printed_unblock_line_pasted_whole_runs_nothing(home: Home, tmp_path: Path) -> None:
    """The line offers two commands (found, with a placeholder for the evidence, or
    absent). Pasted whole, unedited, the shell refuses it: the step is never recorded
    found with the placeholder as its evidence (nothing was checked)."""
    hint = _blocked_step(home, tmp_path, "pasted")
    assert "--found <EVIDENCE> | " in hint
    bindir = str(Path(sys.executable).parent)
    for shell in ("sh", "bash"):
        proc = subprocess.run([shell, "-c", hint], cwd=tmp_path, capture_output=True, text=True,
                              env={**home.env, "PATH": f"{bindir}:{os.environ['PATH']}"},
                              check=False)
        assert proc.returncode != 0 and "syntax error" in proc.stderr.lower(), proc.stderr
    with home.open_ledger() as ledger:
        step = ledger.step("pasted/send")
        assert step is not None and step.state == "blocked" and step.evidence != "EVIDENCE"


def test_a_config_holding_a_tilde_template_still_runs_its_other_jobs(home: Home) -> None:
    """A config written before '~' was refused loads: only that job's runs are refused
    (exit 2, one line); every other job runs as before."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(CONFIG + """
    [jobs.old]
    key = "old~{n}"
    params = { n = "int" }
    """)
    ok = home.run("run", "team", "-p", "name=ops", "--", "true")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    refused = home.run("run", "old", "-p", "n=1", "--", "true")
    assert refused.returncode == 2 and "reserved for drill" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not can_map_an_unknown_uid(), reason="needs unshare -U --map-user")
def test_a_decision_under_a_uid_with_no_user_name_is_recorded_as_uid_n(home: Home) -> None:
    """A container's arbitrary uid (no passwd entry, no USER): a deciding command records
    its actor as uidN@host instead of failing with an internal error (KeyError)."""
    import json

    home.path.mkdir(parents=True, exist_ok=True)
    home.config('[jobs.once]\nkey = "once:{n}"\nparams = { n = "int" }\nmax_attempts = 1\n')
    assert home.run("run", "once", "-p", "n=1", "--", "false").returncode == 1
    assert home.run("run", "once", "-p", "n=1", "--", "false").returncode == 3
    env = {k: v for k, v in home.env.items() if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    retried = subprocess.run(["unshare", "-U", "--map-user=4242", "--map-group=4242",
                              *home.cmd("retry", "once:1", "--note", "checked")],
                             env=env, capture_output=True, text=True, check=False)
    assert retried.returncode == 0, retried.stderr
    history = json.loads(home.run("history", "once:1", "--json").stdout)
    assert any(e["actor"].startswith("uid4242@") for e in history), history
