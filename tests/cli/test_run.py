"""`retrysafe run`, `step`, `generate` and the human commands, as a user drives them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pipeline import Pipeline
from support import Home

PY = sys.executable


def simple_job(home: Home, extra: str = "") -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(f"""
        [jobs.report]
        key = "report:{{week}}"
        params = {{ week = "isoweek" }}
        max_attempts = 3
        lease_seconds = 60
        {extra}
    """)


def test_run_passes_the_attempt_environment(home: Home, tmp_path: Path) -> None:
    """CMD sees the key, the attempt number, its id and its own folder."""
    simple_job(home)
    dump = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    proc = home.run("run", "report", "-p", "week=2026-W32", "--", PY, "-c", code)
    assert proc.returncode == 0, proc.stderr
    env = json.loads(dump.read_text())
    assert env["RETRYSAFE_OUTCOME_KEY"] == "report:2026-W32"
    assert env["RETRYSAFE_JOB"] == "report" and env["RETRYSAFE_ATTEMPT"] == "1"
    assert env["RETRYSAFE_HOME"] == str(home.path)
    attempt_dir = Path(env["RETRYSAFE_ATTEMPT_DIR"])
    assert attempt_dir == home.path / "runs" / "report" / "report+2026-W32" / "attempt-1"
    status = json.loads((attempt_dir / "status.json").read_text())
    assert status["state"] == "done" and status["attempt_id"] == env["RETRYSAFE_ATTEMPT_ID"]
    summary = json.loads((attempt_dir.parent / "summary.json").read_text())
    assert summary["accepted_attempt"] == "attempt-1" and summary["state"] == "done"


def test_done_outcome_does_not_run_the_command_again(home: Home, tmp_path: Path) -> None:
    """The second run of a done outcome says so, exits 0 and runs nothing."""
    simple_job(home)
    marker = tmp_path / "ran"
    cmd = ["--", "sh", "-c", f"echo x >> {marker}"]
    assert home.run("run", "report", "-p", "week=2026-W32", *cmd).returncode == 0
    second = home.run("run", "report", "-p", "week=2026-W32", *cmd)
    assert second.returncode == 0 and "already done" in second.stdout
    assert marker.read_text() == "x\n"


def test_different_cwd_same_ledger(home: Home, tmp_path: Path) -> None:
    """The ledger follows the home, never the working directory."""
    simple_job(home)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert home.run("run", "report", "-p", "week=2026-W32", "--", "true", cwd=a).returncode == 0
    again = home.run("run", "report", "-p", "week=2026-W32", "--", "false", cwd=b)
    assert again.returncode == 0 and "already done" in again.stdout


def test_failed_command_then_attempt_limit_blocks_until_retry(home: Home) -> None:
    """Failures count attempts; past the limit: blocked, exit 3, and the unblock command."""
    simple_job(home)
    for n in range(3):
        proc = home.run("run", "report", "-p", "week=2026-W01", "--", "false")
        assert proc.returncode == 1 and proc.stdout.startswith("failed:"), n
    blocked = home.run("run", "report", "-p", "week=2026-W01", "--", "true")
    assert blocked.returncode == 3
    assert "attempts exhausted" in blocked.stdout
    assert "retrysafe retry report:2026-W01" in blocked.stdout
    assert home.run("retry", "report:2026-W01").returncode == 0
    assert home.run("run", "report", "-p", "week=2026-W01", "--", "true").returncode == 0


def test_step_without_lookup_after_unknown_blocks_and_resolve_unblocks(home: Home) -> None:
    """A message whose fate is unclear and cannot be looked up stops in blocked."""
    simple_job(home)
    script = "retrysafe step send --class message -- sh -c 'exit 9'"
    first = home.run("run", "report", "-p", "week=2026-W02", "--", "sh", "-c",
                     script.replace("retrysafe", f"{PY} -m retrysafe"))
    assert first.returncode == 1 and first.stdout.startswith("unknown:")
    ok_script = f"{PY} -m retrysafe step send --class message -- echo msg-1"
    second = home.run("run", "report", "-p", "week=2026-W02", "--", "sh", "-c", ok_script)
    assert second.returncode == 3
    assert "resolve report:2026-W02 send" in second.stdout
    assert home.run("resolve", "report:2026-W02", "send", "--absent").returncode == 0
    third = home.run("run", "report", "-p", "week=2026-W02", "--", "sh", "-c", ok_script)
    assert third.returncode == 0, third.stdout + third.stderr
    status = json.loads(home.run("status", "report:2026-W02", "--json").stdout)
    assert status["steps"][0]["evidence"] == "msg-1"


def test_ambiguous_check_blocks_with_what_to_check(home: Home) -> None:
    """A check that can't tell (exit 2) blocks instead of guessing, after an unclear
    try and before the first execution (lookup_first) alike."""
    simple_job(home)
    rs = f"{PY} -m retrysafe"
    first = home.run("run", "report", "-p", "week=2026-W03", "--", "sh", "-c",
                     f"{rs} step pub --class publish --check 'exit 1' -- sh -c 'exit 9'")
    assert first.returncode == 1
    fresh = home.run("run", "report", "-p", "week=2026-W09", "--", "sh", "-c",
                     f"{rs} step pub --class publish --check 'echo no index >&2; exit 2' -- echo p1")
    assert fresh.returncode == 3 and "no index" in fresh.stdout
    second = home.run("run", "report", "-p", "week=2026-W03", "--", "sh", "-c",
                      f"{rs} step pub --class publish --check 'echo two drafts >&2; exit 2' -- echo p1")
    assert second.returncode == 3
    assert "two drafts" in second.stdout and "resolve" in second.stdout


def test_payment_needs_approval(home: Home, tmp_path: Path) -> None:
    """Payments block awaiting approval; after approve the re-run pays once."""
    simple_job(home)
    paid = tmp_path / "paid"
    script = f"{PY} -m retrysafe step charge --class payment -- sh -c 'echo c >> {paid}; echo ch_1'"
    first = home.run("run", "report", "-p", "week=2026-W04", "--", "sh", "-c", script)
    assert first.returncode == 3 and "approve report:2026-W04 charge" in first.stdout
    assert not paid.exists()
    typo = home.run("approve", "report:2026-W04", "chrage")
    assert typo.returncode == 2 and "known: charge" in typo.stderr and "--new" in typo.stderr
    assert home.run("approve", "report:2026-W04", "charge", "--note", "ok").returncode == 0
    assert home.run("run", "report", "-p", "week=2026-W04", "--", "sh", "-c", script).returncode == 0
    assert paid.read_text() == "c\n"


def test_a_payment_approved_before_its_outcome_exists_runs_once_without_blocking(
        home: Home, tmp_path: Path) -> None:
    """``approve --new --job`` approves a step ahead of the outcome's first run, as
    docs/cli.md promises: the first run pays at once. Parameters that name another
    key, or a step name that is not a name, are refused and change nothing."""
    simple_job(home)
    paid = tmp_path / "paid"
    script = f"{PY} -m retrysafe step charge --class payment -- sh -c 'echo c >> {paid}; echo ch_1'"
    wrong = home.run("approve", "report:2026-W07", "charge", "--new", "--job", "report",
                     "-p", "week=2026-W08")
    assert wrong.returncode == 2 and "names outcome report:2026-W08" in wrong.stderr
    no_new = home.run("approve", "report:2026-W07", "charge", "--job", "report", "-p", "week=2026-W07")
    assert no_new.returncode == 2 and "--new" in no_new.stderr
    assert home.run("status", "report:2026-W07").returncode == 2  # still no such outcome
    ok = home.run("approve", "report:2026-W07", "charge", "--new", "--job", "report",
                  "-p", "week=2026-W07", "--note", "budgeted")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    first = home.run("run", "report", "-p", "week=2026-W07", "--", "sh", "-c", script)
    assert first.returncode == 0, first.stdout + first.stderr
    assert paid.read_text() == "c\n"
    again = home.run("run", "report", "-p", "week=2026-W07", "--", "sh", "-c", script)
    assert again.returncode == 0 and paid.read_text() == "c\n"


def test_acceptance_checks_gate_done(home: Home) -> None:
    """exit 0 is not done: a missing expected artifact or failing accept command keeps it open."""
    simple_job(home, 'expected_artifacts = ["report.md"]\n        accept = ["grep -q OK report.md"]')
    bad = home.run("run", "report", "-p", "week=2026-W05", "--", "sh", "-c",
                   'echo nope > "$RETRYSAFE_ATTEMPT_DIR/report.md"')
    assert bad.returncode == 1 and "acceptance check" in bad.stdout
    none = home.run("run", "report", "-p", "week=2026-W05", "--", "true")
    assert none.returncode == 1 and "expected artifact report.md" in none.stdout
    good = home.run("run", "report", "-p", "week=2026-W05", "--", "sh", "-c",
                    'echo OK > "$RETRYSAFE_ATTEMPT_DIR/report.md"')
    assert good.returncode == 0, good.stdout
    assert home.run("verify", "report:2026-W05").returncode == 0
    os.remove(home.path / "runs/report/report+2026-W05/attempt-3/report.md")
    failed = home.run("verify", "report:2026-W05")
    assert failed.returncode == 1 and "expected artifact report.md" in failed.stdout


def test_generate_is_frozen_across_attempts(pipeline: Pipeline) -> None:
    """A later attempt reuses the accepted draft and never calls the generator again."""
    first = pipeline.run(env={"EFFECT_FAIL": "publish"})
    assert first.returncode == 1
    assert pipeline.run().returncode == 0
    assert pipeline.count("generator") == 1
    draft = (pipeline.home.path / "runs/content/content+2026-W32/attempt-1/draft.md").read_text()
    assert {draft.splitlines()[0]} == pipeline.bodies()


def test_verify_detects_a_changed_artifact(pipeline: Pipeline) -> None:
    """The parent verifies the child: an edited artifact fails verify."""
    assert pipeline.run().returncode == 0
    draft = pipeline.home.path / "runs/content/content+2026-W32/attempt-1/draft.md"
    draft.write_text("tampered\n")
    proc = pipeline.home.run("verify", pipeline.key)
    assert proc.returncode == 1 and "changed" in proc.stdout


def test_log_has_one_line_per_action(pipeline: Pipeline) -> None:
    """log.jsonl: time, attempt id, step key, action, result for every action."""
    assert pipeline.run().returncode == 0
    log = pipeline.home.path / "runs/content/content+2026-W32/attempt-1/log.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert {"time", "attempt_id", "step_key", "action", "result"} <= set(lines[0])
    actions = [(ln["step_key"].rsplit("/", 1)[-1], ln["action"]) for ln in lines]
    for step in ("publish", "row", "notify"):
        assert (step, "intent") in actions and (step, "record") in actions
    assert lines[-1]["action"] == "closeout" and lines[-1]["result"] == "done"


def test_status_ls_history_json(pipeline: Pipeline) -> None:
    """Reading commands answer in JSON with the same facts."""
    assert pipeline.run().returncode == 0
    home = pipeline.home
    listed = json.loads(home.run("ls", "--json").stdout)
    assert [o["key"] for o in listed] == [pipeline.key]
    assert json.loads(home.run("ls", "--state", "blocked", "--json").stdout) == []
    hist = json.loads(home.run("history", pipeline.key, "--json").stdout)
    assert hist[-1]["to_state"] == "done" and all("fence" in e for e in hist)
    text = home.run("status", pipeline.key)
    assert "state     done" in text.stdout and "publish" in text.stdout


def test_job_add_and_jobs(home: Home) -> None:
    """job add writes a validated job into the config; jobs lists it."""
    add = home.run("job", "add", "weekly", "--key", "weekly:{week}", "--param", "week=isoweek")
    assert add.returncode == 0, add.stderr
    listed = json.loads(home.run("jobs", "--json").stdout)
    assert listed["weekly"]["key"] == "weekly:{week}"
    dup = home.run("job", "add", "weekly", "--key", "weekly:{week}", "--param", "week=isoweek")
    assert dup.returncode == 2 and "--replace" in dup.stderr
    assert home.run("run", "weekly", "-p", "week=2026-W10", "--", "true").returncode == 0


def test_job_add_writes_catch_up_and_keep(home: Home) -> None:
    """--catch-up alone is the default window (true), with a value a count or an age;
    --keep an age. A window or age the config would refuse is refused before anything
    is written (exit 2), as is catch-up for a job without a schedule."""
    common = ["--param", "at=occurrence", "--schedule", "0 3 * * *"]
    assert home.run("job", "add", "a", "--key", "a:{at}", *common, "--catch-up", "3",
                    "--keep", "90d").returncode == 0
    assert home.run("job", "add", "b", "--key", "b:{at}", *common, "--catch-up").returncode == 0
    assert home.run("job", "add", "c", "--key", "c:{at}", "--catch-up", "36h", *common
                    ).returncode == 0
    listed = json.loads(home.run("jobs", "--json").stdout)
    assert {n: (j["catch_up"], j["keep"]) for n, j in listed.items()} == {
        "a": ("3", 90 * 86400.0), "b": ("7d", None), "c": ("36h", None)}
    text = (home.path / "retrysafe.toml").read_text()
    assert "catch_up = 3\n" in text and "catch_up = true\n" in text and 'keep = "90d"' in text
    for bad in (["--catch-up", "0"], ["--keep", "soon"], ["--catch-up", "-2d"],
                ["--catch-up", "\u00b2"], ["--catch-up", "\u2460"], ["--catch-up", "9" * 5000],
                # digits of other scripts (Arabic-Indic three, fullwidth three)
                ["--catch-up", "\u0663"], ["--catch-up", "\uff13"], ["--catch-up", "\u0663d"],
                ["--keep", "\u0663d"]):
        proc = home.run("job", "add", "d", "--key", "d:{at}", *common, *bad)
        assert proc.returncode == 2 and proc.stderr.startswith("retrysafe: "), bad
    unscheduled = home.run("job", "add", "e", "--key", "e:{w}", "--param", "w=isoweek",
                           "--catch-up")
    assert unscheduled.returncode == 2 and "needs a schedule" in unscheduled.stderr
    assert (home.path / "retrysafe.toml").read_text() == text


def test_demo_runs(home: Home, tmp_path: Path) -> None:
    """The README's first command works and shows each effect once."""
    proc = home.run("demo", "--keep", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one outcome, as intended" in proc.stdout
    assert proc.stdout.count("once") == 4


def test_done_step_answers_from_the_ledger_and_logs_the_skip(home: Home, tmp_path: Path) -> None:
    """Re-running a done step prints its evidence, runs nothing, and says so in the log."""
    simple_job(home)
    marker = tmp_path / "ran"
    rs = f"{PY} -m retrysafe"
    twice = (f"{rs} step send --class message -- sh -c 'echo x >> {marker}; echo msg-7' && "
             f"{rs} step send --class message -- sh -c 'echo x >> {marker}; echo msg-8'")
    proc = home.run("run", "report", "-p", "week=2026-W20", "--", "sh", "-c", twice)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["msg-7", "msg-7"]
    assert marker.read_text() == "x\n"
    log = home.path / "runs/report/report+2026-W20/attempt-1/log.jsonl"
    actions = [json.loads(x)["action"] + ":" + json.loads(x)["result"] for x in log.read_text().splitlines()]
    assert "check:skip" in actions


def test_a_finished_attempt_cannot_use_its_id_again(home: Home) -> None:
    """A step call with the id of an attempt that already ended is refused, done step or not."""
    simple_job(home)
    rs = f"{PY} -m retrysafe"
    proc = home.run("run", "report", "-p", "week=2026-W21", "--", "sh", "-c",
                    f"{rs} step send --class message -- echo m1 && echo $RETRYSAFE_ATTEMPT_ID")
    attempt_id = proc.stdout.splitlines()[1]
    late = home.run("step", "send", "--class", "message", "--attempt", attempt_id, "--", "echo", "m2",
                    env={"RETRYSAFE_LEDGER": f"sqlite:///{home.path / 'ledger.sqlite3'}"})
    assert late.returncode == 75 and "finished" in late.stderr


def test_accept_sees_an_artifact_accepted_by_an_earlier_attempt(home: Home) -> None:
    """accept commands run in the attempt folder, where a reused artifact is copied."""
    simple_job(home, 'accept = ["grep -q frozen draft.md"]')
    rs = f"{PY} -m retrysafe"
    gen = f"{rs} generate draft --output draft.md -- sh -c 'echo frozen > \"$RETRYSAFE_OUTPUT\"'"
    first = home.run("run", "report", "-p", "week=2026-W22", "--", "sh", "-c", f"{gen} && exit 1")
    assert first.returncode == 1
    second = home.run("run", "report", "-p", "week=2026-W22", "--", "sh", "-c", gen)
    assert second.returncode == 0, second.stdout + second.stderr
    printed = second.stdout.splitlines()[0]
    assert printed.endswith("attempt-1/draft.md")  # the accepted artifact is the recorded one
    copy = home.path / "runs/report/report+2026-W22/attempt-2/draft.md"
    assert copy.read_text() == "frozen\n"
    assert home.run("verify", "report:2026-W22").returncode == 0


def test_commands_get_the_fencing_token_and_it_grows_with_each_attempt(
        home: Home, tmp_path: Path) -> None:
    """RETRYSAFE_FENCE reaches the job's command and its steps' commands; a later
    attempt's token is higher, so a provider with conditional writes can refuse
    the stale one."""
    simple_job(home)
    seen = tmp_path / "fences"
    script = (f'echo "run $RETRYSAFE_FENCE" >> {seen}; '
              f"{PY} -m retrysafe step send --class message -- "
              f"sh -c 'echo \"step $RETRYSAFE_FENCE\" >> {seen}; echo m1'; exit 1")
    for _ in range(2):
        assert home.run("run", "report", "-p", "week=2026-W20", "--", "sh", "-c", script).returncode == 1
    with home.open_ledger() as ledger:
        fences = [a.fence for a in ledger.attempts("report:2026-W20")]
    assert len(fences) == 2 and fences[0] < fences[1]
    # the second attempt skips the step, done by the first
    assert seen.read_text().splitlines() == [f"run {fences[0]}", f"step {fences[0]}",
                                             f"run {fences[1]}"]


def test_acceptance_checks_are_bounded_in_time_and_read_as_bytes(home: Home, tmp_path: Path) -> None:
    """An acceptance command that prints bytes that are not UTF-8 passes on its exit
    status alone; one that hangs (with a child of its own) is stopped, whole group,
    after the job's check_timeout, and the outcome is not done."""
    marker = tmp_path / "grandchild-alive"
    simple_job(home, f"""check_timeout = 1
        accept = ["printf '\\\\377\\\\376 ok\\\\n'", "test -e {tmp_path}/hang && (sleep 30; touch {marker}) & test -e {tmp_path}/hang && sleep 30 || true"]""")
    done = home.run("run", "report", "-p", "week=2026-W21", "--", "true")
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "hang").touch()
    hung = home.run("run", "report", "-p", "week=2026-W22", "--", "true", timeout=60)
    assert hung.returncode == 1, hung.stdout + hung.stderr
    assert "did not finish within 1 s" in hung.stdout
    # nothing of the check's process group lives on
    assert _carriers(b"RETRYSAFE_OUTCOME_KEY=report:2026-W22") == []
    assert not marker.exists()


def _carriers(needle: bytes) -> list[int]:
    """Processes whose environment holds ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
