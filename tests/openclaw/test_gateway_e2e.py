"""retrysafe under a real OpenClaw gateway: automation command jobs and the skill.

Run by ``scripts/e2e-openclaw`` only (it fetches Node 24 and OpenClaw and sets
RETRYSAFE_E2E_OPENCLAW=1). A gateway listens on loopback in a scratch HOME;
every automation wraps ``retrysafe run`` around a script whose effect is real
(a line appended to a file) and guarded by ``retrysafe step --check``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import retrysafe
from retrysafe.engine import Engine
from retrysafe.schedule import resolve_occurrence

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("RETRYSAFE_E2E_OPENCLAW") != "1",
        reason="needs a real OpenClaw gateway: run scripts/e2e-openclaw",
    ),
]

SCHEDULE, TZ = "0 7 * * 1", "Europe/Warsaw"
SRC = Path(retrysafe.__file__).resolve().parent.parent

EFFECT = r"""#!/bin/sh
# One real effect per step key: a line in the outbox, found again by --check.
set -eu
if [ -n "${E2E_CRASH_ONCE:-}" ] && [ ! -e "$E2E_CRASH_ONCE" ]; then
  : > "$E2E_CRASH_ONCE"
  # the line lands, then the step process is killed before it records anything
  export RETRYSAFE_CRASH_AT=send:after-execute
fi
exec "$E2E_RETRYSAFE" step send --class message \
  --check 'test -f "$E2E_OUTBOX" || exit 1
           n=$(grep -nxF "$RETRYSAFE_STEP_KEY" "$E2E_OUTBOX") || exit 1
           echo "outbox-line-${n%%:*}"' \
  -- sh -c 'echo "$RETRYSAFE_STEP_KEY" >> "$E2E_OUTBOX"
            sleep "${E2E_EFFECT_SLEEP:-0}"
            echo "outbox-line-$(grep -c "" "$E2E_OUTBOX")"'
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _json(text: str) -> Any:
    """The JSON document in a CLI's stdout (skipping any banner line before it)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise AssertionError(f"no JSON in output: {text[-500:]!r}")
    return json.loads(text[start:])


@dataclass
class Gateway:
    """A running gateway and the environment its CLI needs."""

    openclaw: str
    env: dict[str, str]
    port: int
    token: str
    scratch: Path
    proc: subprocess.Popen[bytes]

    @property
    def state_dir(self) -> Path:
        return Path(self.env["OPENCLAW_STATE_DIR"])

    def cli(self, *args: str, gateway: bool = True, timeout: float = 120) -> Any:
        extra = ["--port", str(self.port), "--token", self.token] if gateway else []
        done = subprocess.run(
            [self.openclaw, *args, *extra],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"openclaw {args}: {done.stderr[-2000:]}"
        return _json(done.stdout)

    def add_command_job(self, name: str, command: str, env: dict[str, str]) -> str:
        args = [
            "cron",
            "add",
            "--name",
            name,
            "--every",
            "1h",
            "--command",
            command,
            "--no-deliver",
            "--timeout-seconds",
            "180",
        ]
        for key, value in env.items():
            args += ["--command-env", f"{key}={value}"]
        job: dict[str, Any] = self.cli(*args)
        return str(job["id"])

    def force_run(self, job_id: str) -> None:
        answer = self.cli("cron", "run", job_id)
        assert answer.get("ok") and answer.get("enqueued"), answer

    def run_now(self, job_id: str, timeout: float = 300) -> dict[str, Any]:
        """Force a run and wait for it to finish (``cron run --wait``): its history entry.

        One CLI process that polls the gateway for this run id, instead of one
        'cron runs' process per poll (each takes seconds to start)."""
        done = subprocess.run(
            [self.openclaw, "cron", "run", job_id, "--wait", "--poll-interval", "500ms",
             "--wait-timeout", f"{int(timeout)}s", "--port", str(self.port), "--token", self.token],
            env=self.env, capture_output=True, text=True, timeout=timeout + 60, check=False,
        )
        # exit 1: the run finished with an error (the entry says which)
        assert done.returncode in (0, 1), f"cron run --wait {job_id}: {done.stderr[-2000:]}"
        answer = _json(done.stdout)
        assert answer.get("completed") and answer.get("run"), answer
        run: dict[str, Any] = answer["run"]
        assert done.returncode == (0 if run["status"] == "ok" else 1), (done.returncode, run)
        return run

    def finished_runs(self, job_id: str, count: int, timeout: float = 180) -> list[dict[str, Any]]:
        """The job's finished runs, oldest first, once there are ``count`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            history = self.cli("cron", "runs", "--id", job_id, "--json")
            runs = [e for e in history["entries"] if e.get("action") == "finished"]
            if len(runs) >= count:
                return sorted(runs, key=lambda e: e["runAtMs"])
            assert time.monotonic() < deadline, f"{job_id}: {len(runs)} of {count} runs finished"
            time.sleep(1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the gateway's process group, then SIGKILL whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def scratch_env(scratch: Path) -> dict[str, str]:
    """A scratch HOME for OpenClaw, Node and OpenClaw on PATH, and a ``retrysafe`` wrapper.

    The wrapper runs this checkout's retrysafe with this Python: on PATH for
    the skill's requirement check, and named by absolute path everywhere else.
    """
    openclaw = os.environ["RETRYSAFE_E2E_OPENCLAW_BIN"]
    node_bin = os.environ["RETRYSAFE_E2E_NODE_BIN"]
    (scratch / "home" / ".openclaw").mkdir(parents=True)
    (scratch / "tmp").mkdir()
    bin_dir = scratch / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "retrysafe"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH={shlex.quote(str(SRC))} exec {shlex.quote(sys.executable)} -m retrysafe "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "RETRYSAFE_"))}
    env.update(
        HOME=str(scratch / "home"),
        OPENCLAW_STATE_DIR=str(scratch / "home" / ".openclaw"),
        TMPDIR=str(scratch / "tmp"),
        NO_COLOR="1",
        PATH=os.pathsep.join([node_bin, str(Path(openclaw).parent), str(bin_dir), env["PATH"]]),
    )
    return env


def openclaw_cli(env: dict[str, str], *args: str) -> str:
    """Run the openclaw CLI without a gateway (configuration, installs); its stdout."""
    done = subprocess.run(
        [os.environ["RETRYSAFE_E2E_OPENCLAW_BIN"], *args],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, f"openclaw {args}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done.stdout


@contextlib.contextmanager
def launch(scratch: Path, env: dict[str, str]) -> Iterator[Gateway]:
    """Start a gateway on a free loopback port; stop its whole process group after."""
    openclaw = os.environ["RETRYSAFE_E2E_OPENCLAW_BIN"]
    port, token = _free_port(), secrets.token_hex(16)
    log = (scratch / "gateway.log").open("wb")
    proc = subprocess.Popen(
        [
            openclaw,
            "--no-color",
            "gateway",
            "run",
            "--bind",
            "loopback",
            "--port",
            str(port),
            "--auth",
            "token",
            "--token",
            token,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while b"[gateway] ready" not in (scratch / "gateway.log").read_bytes():
            if proc.poll() is not None:
                raise AssertionError(
                    f"gateway exited {proc.returncode}: "
                    f"{(scratch / 'gateway.log').read_text(errors='replace')[-3000:]}"
                )
            assert time.monotonic() < deadline, "gateway was not ready within 180 s"
            time.sleep(0.5)
        yield Gateway(openclaw, env, port, token, scratch, proc)
    finally:
        _stop(proc)
        log.close()
    assert proc.poll() is not None


@dataclass
class Case:
    """One retrysafe outcome driven by OpenClaw automations."""

    key: str
    outbox: Path
    job_env: dict[str, str]
    command: str
    home: Path

    def lines(self) -> list[str]:
        return self.outbox.read_text().splitlines() if self.outbox.exists() else []

    def ledger(self) -> dict[str, Any]:
        engine = Engine.open(self.home)
        try:
            led = engine.ledger
            out = led.require_outcome(self.key)
            return {
                "state": out.state,
                "attempts": [(a.number, a.result or a.state) for a in led.attempts(self.key)],
                "steps": {s.name: (s.state, s.evidence, s.reason) for s in led.steps(self.key)},
                "runners": [a.context.get("runner") for a in led.attempts(self.key)],
            }
        finally:
            engine.close()


@pytest.fixture(scope="module")
def rs_home(gateway: Gateway) -> Path:
    home = gateway.scratch / "rs-home-commands"
    home.mkdir()
    (home / "retrysafe.toml").write_text(
        "[jobs.e2e]\n"
        'key = "e2e-{case}:{occurrence}"\n'
        f'schedule = "{SCHEDULE}"\n'
        f'tz = "{TZ}"\n'
        'params = { case = "slug", occurrence = "occurrence" }\n'
    )
    effect = gateway.scratch / "effect.sh"
    effect.write_text(EFFECT)
    effect.chmod(0o755)
    return home


def make_case(gateway: Gateway, home: Path, case: str, **extra_env: str) -> Case:
    outbox = gateway.scratch / f"outbox-{case}.txt"
    rs = gateway.scratch / "bin" / "retrysafe"
    job_env = {
        "RETRYSAFE_HOME": str(home),
        "E2E_RETRYSAFE": str(rs),
        "E2E_OUTBOX": str(outbox),
        **extra_env,
    }
    # Absolute paths: OpenClaw runs the command through 'sh -lc', which resets PATH.
    command = shlex.join(
        [str(rs), "run", "e2e", "-p", f"case={case}", "--", str(gateway.scratch / "effect.sh")]
    )
    key = f"e2e-{case}:{resolve_occurrence(SCHEDULE, TZ, None)}"
    return Case(key, outbox, job_env, command, home)


def exit_codes(run: dict[str, Any]) -> list[int]:
    return [e["exitCode"] for e in run.get("diagnostics", {}).get("entries", []) if "exitCode" in e]


# --- the tests ----------------------------------------------------------------------------


def test_forced_run_twice_second_skips(gateway: Gateway, rs_home: Path) -> None:
    """Two forced runs of one automation: one effect; the second run says done and skips."""
    case = make_case(gateway, rs_home, "twice")
    job = gateway.add_command_job("rs-twice", case.command, case.job_env)
    first = gateway.run_now(job)
    second = gateway.run_now(job)
    assert [r["runAtMs"] for r in gateway.finished_runs(job, 2)] == [first["runAtMs"], second["runAtMs"]]

    assert case.lines() == [f"{case.key}/send"]
    assert first["status"] == "ok", first
    assert f"done: {case.key} (attempt 1)" in first["summary"]
    assert second["status"] == "ok", second
    assert f"done: {case.key} is already done" in second["summary"]
    ledger = case.ledger()
    assert ledger["state"] == "done"
    assert ledger["attempts"] == [(1, "done")]
    assert ledger["steps"]["send"][:2] == ("done", "outbox-line-1")
    # the attempt knows OpenClaw started it (and never holds the gateway token)
    assert ledger["runners"] == ["openclaw:command"]
    for path in case.home.rglob("*"):
        if path.is_file():
            assert gateway.token.encode() not in path.read_bytes(), path


def test_two_automations_at_once_one_effect(gateway: Gateway, rs_home: Path) -> None:
    """Two automations fire the same job together: one sends, the other is busy (75)."""
    case = make_case(gateway, rs_home, "together", E2E_EFFECT_SLEEP="5")
    jobs = [gateway.add_command_job(f"rs-together-{n}", case.command, case.job_env) for n in ("a", "b")]
    finished: dict[str, dict[str, Any]] = {}
    threads = [threading.Thread(target=lambda j: finished.update({j: gateway.run_now(j)}), args=(j,))
               for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = [finished[j] for j in jobs]

    assert case.lines() == [f"{case.key}/send"]
    ok = [r for r in runs if r["status"] == "ok"]
    busy = [r for r in runs if r["status"] != "ok"]
    assert len(ok) == 1 and len(busy) == 1, runs
    assert f"done: {case.key} (attempt 1)" in ok[0]["summary"]
    assert f"busy: {case.key} is held by attempt 1" in busy[0]["summary"]
    assert exit_codes(busy[0]) == [75]
    ledger = case.ledger()
    assert ledger["state"] == "done" and ledger["attempts"] == [(1, "done")]

    # The automation that was busy, forced again, finds the work done.
    loser = jobs[runs.index(busy[0])]
    again = gateway.run_now(loser)
    assert again["status"] == "ok" and "is already done" in again["summary"]
    assert case.lines() == [f"{case.key}/send"]


def test_killed_after_effect_rerun_finds_it(gateway: Gateway, rs_home: Path) -> None:
    """The effect lands, the step is SIGKILLed before recording; the re-run looks and skips.

    OpenClaw's history shows the failed run and then the good one, and the
    ledger agrees: attempt 1 unknown, attempt 2 done with the evidence the
    lookup found, and the outbox holds one line.
    """
    marker = gateway.scratch / "crash-once"
    case = make_case(gateway, rs_home, "crash", E2E_CRASH_ONCE=str(marker))
    job = gateway.add_command_job("rs-crash", case.command, case.job_env)
    crashed = gateway.run_now(job)
    assert marker.exists()
    assert case.lines() == [f"{case.key}/send"]
    assert crashed["status"] == "error", crashed
    assert f"unknown: {case.key} (attempt 1)" in crashed["summary"]
    assert exit_codes(crashed) == [1]
    mid = case.ledger()
    assert mid["state"] == "unknown" and mid["steps"]["send"][0] == "unknown"

    rerun = gateway.run_now(job)
    assert rerun["status"] == "ok", rerun
    assert f"done: {case.key} (attempt 2)" in rerun["summary"]
    assert case.lines() == [f"{case.key}/send"]
    after = case.ledger()
    assert after["state"] == "done"
    assert after["attempts"] == [(1, "unknown"), (2, "done")]
    state, evidence, reason = after["steps"]["send"]
    assert (state, evidence) == ("done", "outbox-line-1")
    assert "lookup" in reason


def test_skill_is_loaded_by_openclaw(gateway: Gateway) -> None:
    """The installed skill parses in OpenClaw and is eligible with retrysafe on PATH."""
    rs = gateway.scratch / "bin" / "retrysafe"
    done = subprocess.run(
        [str(rs), "openclaw", "install-skill", "--global"],
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    info = gateway.cli("skills", "info", "retrysafe", "--json", gateway=False)
    assert info["name"] == "retrysafe"
    assert info["filePath"] == str(gateway.state_dir / "skills" / "retrysafe" / "SKILL.md")
    assert info["requirements"]["bins"] == ["retrysafe"]
    assert info["eligible"] is True and info["missing"]["bins"] == []
    assert info["description"].startswith("Do each side effect once")


def test_doctor_reads_command_jobs_through_the_gateway(gateway: Gateway, rs_home: Path) -> None:
    """openclaw doctor lists OpenClaw's command jobs through the real gateway: an absolute
    retrysafe and this home are ok, the missing --command-cwd is the line's warning."""
    case = make_case(gateway, rs_home, "doctor")
    gateway.add_command_job("rs-doctor", case.command, case.job_env)
    env = {**gateway.env, "OPENCLAW_GATEWAY_PORT": str(gateway.port),
           "OPENCLAW_GATEWAY_TOKEN": gateway.token}
    done = subprocess.run(
        [str(gateway.scratch / "bin" / "retrysafe"), "--home", str(rs_home), "openclaw", "doctor",
         "--openclaw", gateway.openclaw],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if "cron job rs-doctor:" in ln]
    assert line.startswith("warn cron job rs-doctor: has no --command-cwd"), done.stdout


def test_doc_command_jobs_run_on_the_real_gateway(gateway: Gateway, tmp_path: Path) -> None:
    """Every 'openclaw cron add' line of docs/openclaw.md and the README, only paths
    substituted, is added to the real gateway as written and forced twice: the weekly job
    does the work once and then says it is done, the catch-up job backfills each missing
    occurrence once and then has nothing to do; sent.log never holds a key twice."""
    from test_docs_commands import MAIL, README, RETRYSAFE, blocks, commands, setup_world, sub

    world = {"/opt/retrysafe/bin/retrysafe": RETRYSAFE, "/srv/retrysafe": tmp_path / "rs-home",
             "/srv/reports": tmp_path / "reports", "tmp": tmp_path}
    world["/srv/retrysafe"].mkdir()
    world["/srv/reports"].mkdir()
    (tmp_path / "user" / ".openclaw" / "workspace").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    setup_world(world)
    assert "mail-report.sh" in (world["/srv/reports"] / "send-report.sh").read_text()
    assert (world["/srv/reports"] / "mail-report.sh").read_text() == sub(MAIL, world)
    # command jobs (the page's agent job line needs a model: the agent tests cover that path)
    lines = [c for b in blocks("sh") if not b.startswith("#!/bin/sh") for c, _ in commands(b)
             if c.startswith("openclaw cron add ") and " --command " in c]
    (readme,) = re.findall(r"In an OpenClaw cron job:\n`([^`]+)`", README)
    lines.append(readme)
    assert len(lines) >= 3, lines
    sent = world["/srv/reports"] / "sent.log"
    for line in lines:
        argv = shlex.split(sub(line, world))
        assert argv[:3] == ["openclaw", "cron", "add"], line
        job = gateway.cli(*argv[1:])
        job_id = str(job["id"])
        before = sent.read_text().splitlines() if sent.exists() else []
        first = gateway.run_now(job_id)
        second = gateway.run_now(job_id)
        assert first["status"] == "ok" and second["status"] == "ok", (line, first, second)
        after = sent.read_text().splitlines()
        assert len(after) == len(set(after)), after
        if " missed " in line:
            assert re.search(r"missed --run: (\d+) run, \1 done, 0 blocked, 0 not done",
                             first["summary"]), first["summary"]
            assert "missed --run: 0 run" in second["summary"], second["summary"]
        else:
            fresh = re.findall(r"done: (weekly-ops-report:\S+) \(attempt 1\)", first["summary"])
            found = re.findall(r"done: (weekly-ops-report:\S+) is already done", first["summary"])
            (key,) = fresh if not before else found  # the first weekly line does the work
            assert key, (line, first["summary"])
            assert f"done: {key} is already done" in second["summary"], second["summary"]
            assert after.count(f"{key}/send") == 1, after
