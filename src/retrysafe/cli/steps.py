"""``retrysafe step`` and ``retrysafe generate``: steps inside the current attempt."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from .. import envvars, tracing
from ..attempt import Run, artifact_name
from ..connectors import build_connector
from ..connectors.base import ABSENT, Ambiguous, EffectFailed, Found, LookupResult
from ..donestep import done_step_evidence
from ..errors import EXIT_BUSY, InvalidInput
from ..fsio import lstat_no_link, open_output
from ..keys import check_name, parse_assignments, slug, step_key
from ..process import group_alive
from ..states import StepState
from ._common import SECONDS, emit_json, json_option, state

if TYPE_CHECKING:
    import subprocess


EVIDENCE_MAX = 4096
"""At most this many bytes (UTF-8) of a command's last output line become its evidence."""
NO_EVIDENCE = "(no evidence: the command printed nothing)"
_CUT = " [...]"
_BLOCK = 65536
KILL_GRACE = 2.0
"""Seconds a timed-out command's process group gets between SIGTERM and SIGKILL."""
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _timed_out(what: str, seconds: float) -> TimeoutError:
    """A command ran past its timeout; its whole process group was killed."""
    return TimeoutError(f"{what} timed out after {seconds:g} s; its process group was killed")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def last_line_evidence(fh: BinaryIO) -> str:
    """The last non-empty line of a binary file as evidence: decoded as UTF-8
    with errors replaced, at most :data:`EVIDENCE_MAX` bytes (a longer line is
    cut and ends in ``[...]``); ``""`` when the file holds no such line.

    The file is read from its end, so a huge output costs no more than its
    last line."""
    end = fh.seek(0, os.SEEK_END)
    pos, stop = end, -1
    while pos > 0 and stop < 0:  # the end of the last non-whitespace byte
        size = min(_BLOCK, pos)
        pos -= size
        fh.seek(pos)
        kept = fh.read(size).rstrip()
        if kept:
            stop = pos + len(kept)
    if stop < 0:
        return ""
    pos, start = stop, 0
    while pos > 0:  # the start of that line
        size = min(_BLOCK, pos)
        pos -= size
        fh.seek(pos)
        nl = fh.read(size).rfind(b"\n")
        if nl >= 0:
            start = pos + nl + 1
            break
    fh.seek(start)
    raw = fh.read(min(stop - start, EVIDENCE_MAX + 1)).strip()
    text = raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    if stop - start <= EVIDENCE_MAX:
        text = _last_line(text)  # other line breaks (\r, U+2028...) split as before
    encoded = text.encode("utf-8")
    if len(encoded) > EVIDENCE_MAX:
        text = encoded[:EVIDENCE_MAX - len(_CUT)].decode("utf-8", errors="ignore") + _CUT
    return text


def output_file(run: Run, name: str, item: str | None, suffix: str = ".log") -> Path:
    """Where a step's command output is kept: ``attempt-N/step-NAME[+ITEM].log``."""
    run.folder.create()
    path = run.dir / f"step-{slug(name)}{'+' + slug(item) if item else ''}{suffix}"
    lstat_no_link(path)  # a link there is refused before the step records anything
    return path


def check_command(argv0: str, env: Mapping[str, str]) -> None:
    """Refuse a command that cannot start (exit 2) before anything is recorded."""
    if os.sep in argv0:
        path = Path(argv0)
        if not path.exists():
            raise InvalidInput(f"command not found: {argv0}")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise InvalidInput(f"{argv0} exists but is not executable")
        return
    search = env.get("PATH", os.defpath)
    if shutil.which(argv0, path=search):
        return
    for folder in search.split(os.pathsep):
        candidate = Path(folder or ".") / argv0
        if candidate.is_file():
            raise InvalidInput(f"{argv0} exists ({candidate}) but is not executable")
    raise InvalidInput(f"command not found: {argv0}")


def _stop_group(proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
    """Send ``first`` to the command's whole process group, then SIGKILL what is
    left after :data:`KILL_GRACE` seconds; returns once the command has ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, first)
    deadline = time.monotonic() + KILL_GRACE
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_bounded(argv: list[str], env: Mapping[str, str], *, stdout: Any, stderr: Any,
                timeout: float | None, what: str, pass_on: bool = False) -> int:
    """Run ``argv`` and return its exit status (negative: killed by that signal).

    With a ``timeout`` the command runs in a session (process group) of its
    own: past ``timeout`` seconds the whole group is stopped (SIGTERM, then
    SIGKILL after :data:`KILL_GRACE` seconds) and :class:`TimeoutError` is
    raised; SIGTERM, SIGINT and SIGHUP sent to this process are passed on to
    the group, so what a scheduler or ``retrysafe run`` sends still reaches it.
    Without one it stays in our process group, as any child does; with
    ``pass_on`` (an effect) those signals are passed on to it alone and we wait
    for it to end, never leaving it running behind a retry's back. A command
    that cannot start raises :class:`EffectFailed`: nothing ran.
    """
    import subprocess

    own_group = timeout is not None
    try:
        proc = subprocess.Popen(argv, env=dict(env), stdout=stdout, stderr=stderr,
                                start_new_session=own_group)
    except OSError as exc:
        raise EffectFailed(f"{what} could not start: {argv[0]}: {exc.strerror or exc}") from None
    main = threading.current_thread() is threading.main_thread()
    if not own_group:
        def to_command(signum: int, _frame: FrameType | None) -> None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

        passed: dict[int, Any] = {}
        if main and pass_on:
            passed = {sig: signal.signal(sig, to_command) for sig in _FORWARDED}
        try:
            return proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            for signum, handler in passed.items():
                signal.signal(signum, handler)
    got: list[threading.Timer] = []

    def kill_late() -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)
        if not got:
            got.append(threading.Timer(KILL_GRACE, kill_late))
            got[0].daemon = True
            got[0].start()

    previous: dict[int, Any] = {}
    if main:
        previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            assert timeout is not None
            raise _timed_out(what, timeout) from None
        except BaseException:
            _stop_group(proc)
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if got:
            got[0].cancel()
            _stop_group(proc, 0)  # a signal came: what is left of the group goes too


def shell_lookup(check: str, env: Mapping[str, str], out: Path | None = None,
                 timeout: float | None = None) -> Any:
    """A ``--check`` command as a lookup: exit 0 found, 1 absent, else ambiguous.

    Its stdout is kept in ``out`` (or a temporary file); a check that runs past
    ``timeout`` seconds is ambiguous."""

    def lookup(step_key: str) -> LookupResult:
        import tempfile

        with (open_output(out) if out else tempfile.TemporaryFile()) as fh, \
                tempfile.TemporaryFile() as err:
            try:
                rc = run_bounded(["/bin/sh", "-c", check], {**env, envvars.STEP_KEY: step_key},
                                 stdout=fh, stderr=err, timeout=timeout, what="check command")
            except TimeoutError as exc:
                return Ambiguous(f"check command {check!r} {str(exc).removeprefix('check command ')}")
            except EffectFailed as exc:
                return Ambiguous(str(exc))
            if rc == 0:
                return Found(last_line_evidence(fh) or "found by check")
            if rc == 1:
                return ABSENT
            tail = last_line_evidence(err) or last_line_evidence(fh)
        return Ambiguous(f"check command {check!r} exited {rc}" + (f" ({tail})" if tail else ""))

    return lookup


_FOLLOW_PAUSE = 0.05
"""Seconds the follower of a step's log waits for more output when it has read all."""


class _Follower:
    """Passes on to our stderr, bytes as they are, what a command appends to its
    log file, as it comes: the command writes the file itself (no pipe), so it
    never blocks on us nor dies of a broken pipe if we go away, and a reader of
    the log sees the same bytes live. Only a block of output is in memory."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - closed by stop()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="step-output", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        target = getattr(sys.stderr, "buffer", None)
        while True:
            ended = self._done.is_set()  # read once more after the command ended
            chunk = self._fh.read(_BLOCK)
            if chunk:
                if target is not None:
                    target.write(chunk)
                    target.flush()
                else:
                    sys.stderr.write(chunk.decode("utf-8", errors="replace"))
                    sys.stderr.flush()
            elif ended:
                return
            else:
                self._done.wait(_FOLLOW_PAUSE)

    def stop(self) -> None:
        """The command ended: pass on the rest of its output, then stop."""
        self._done.set()
        self._thread.join()
        self._fh.close()


def command_execute(cmd: tuple[str, ...], env: Mapping[str, str], out: Path,
                    timeout: float | None = None) -> Any:
    """CMD as an effect: exit 0 done (last stdout line = evidence), 75 failed, else unknown.

    Its stdout is written whole to ``out`` (``step-NAME.log``) by the command
    itself and passed on to our stderr as it comes; the evidence is read from
    the end of that file (at most :data:`EVIDENCE_MAX` bytes). The exit status
    alone decides, whatever bytes it printed. Past ``timeout`` seconds its
    process group is killed and the step is unknown."""

    def execute(step_key: str) -> str:
        with open_output(out) as fh:
            sys.stderr.flush()
            follower = _Follower(out)
            try:
                rc = run_bounded(list(cmd), {**env, envvars.STEP_KEY: step_key}, stdout=fh,
                                 stderr=None, timeout=timeout, what="command", pass_on=True)
            finally:
                follower.stop()
            if rc == 0:
                return last_line_evidence(fh) or NO_EVIDENCE
        if rc == EXIT_BUSY:
            raise EffectFailed(f"command exited {EXIT_BUSY}: nothing happened")
        if rc < 0:
            raise RuntimeError(f"command killed by signal {-rc}")
        raise RuntimeError(f"command exited {rc}")

    return execute


def drill_faults(name: str, execute: Any) -> Any:
    """Wrap ``execute`` with the faults a drill trial asks for (``retrysafe drill``).

    Only inside a drill trial (its own ``~TRIAL`` outcome), so a stray variable
    in a real run's environment never fakes a failure:
    ``RETRYSAFE_DRILL_FAIL=STEP`` is a definite failure without running the
    effect (a permission error); ``RETRYSAFE_DRILL_CUT=STEP`` runs the effect
    and then loses the answer (a network cut), leaving the step ``unknown``.
    """
    if not os.environ.get(envvars.DRILL_TRIAL):
        return execute
    if name in os.environ.get(envvars.DRILL_FAIL, "").split(","):
        def refuse(step_key: str) -> str:
            raise EffectFailed(f"drill: {name} refused ({envvars.DRILL_FAIL}); nothing happened")
        return refuse
    if name in os.environ.get(envvars.DRILL_CUT, "").split(","):
        def cut(step_key: str) -> str:
            execute(step_key)
            raise ConnectionError(f"drill: the answer of {name} was lost ({envvars.DRILL_CUT})")
        return cut
    return execute


def _payload(payload_file: str | None, pairs: tuple[str, ...]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if payload_file:
        try:
            loaded = json.loads(Path(payload_file).read_text("utf-8"))
        except OSError as exc:
            raise InvalidInput(f"payload {payload_file}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"payload {payload_file} is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise InvalidInput(f"payload {payload_file} must hold a JSON object")
        data.update(loaded)
    data.update(parse_assignments(pairs, "--with"))
    return data


_CMD_SETTINGS = {"ignore_unknown_options": True}


@click.command(context_settings=_CMD_SETTINGS)
@click.argument("name")
@click.option("--class", "effect_class", metavar="CLASS",
              help="Effect class: read, local_write, git_commit, message, publish, payment, delete.")
@click.option("--item", metavar="ID", help="Per-item work: the step key gets /ID.")
@click.option("--check", metavar="SHELL", help="Lookup command: exit 0 found (stdout = evidence), 1 absent, "
              "else ambiguous.")
@click.option("--connector", metavar="INSTANCE", help="A connector declared as [connectors.INSTANCE].")
@click.option("--payload", "payload_file", metavar="FILE.json", help="Connector payload (JSON object).")
@click.option("--with", "with_pairs", multiple=True, metavar="KEY=VALUE", help="Connector payload field.")
@click.option("--allow-update", is_flag=True,
              help="Let an updatable connector replace a changed payload in place.")
@click.option("--timeout", type=SECONDS, metavar="SECONDS",
              help="Kill CMD's process group after this long (the step is then unknown); a "
              "--check running this long is ambiguous. Default: the job's step_timeout and "
              "check_timeout.")
@click.option("--attempt", "attempt_id", metavar="ID", help="Attempt id (default: $RETRYSAFE_ATTEMPT_ID).")
@json_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def step(name: str, effect_class: str | None, item: str | None, check: str | None,
         connector: str | None, payload_file: str | None, with_pairs: tuple[str, ...],
         allow_update: bool, timeout: float | None, attempt_id: str | None, as_json: bool,
         cmd: tuple[str, ...]) -> None:
    """Perform an effect step at most once, inside the current attempt.

    \b
    CMD gets RETRYSAFE_STEP_KEY to hand to the provider. Exit 0: done, the
    last line of its stdout is the evidence (printed; at most 4 KiB). Its
    stdout streams to stderr and to step-NAME.log in the attempt folder as it
    comes. Exit 75: failed, nothing happened. Anything else, or --timeout:
    unknown; the next try runs --check first. --json: the result as JSON.

    \b
    Examples:
      retrysafe step publish --class publish --check './find-post.sh' -- ./publish.sh
      retrysafe step send --connector mail --with to=ops@example.com --with subject=Report
    """
    check_name("step", name)
    if bool(cmd) == bool(connector):
        raise InvalidInput("give either a command after -- or --connector INSTANCE")
    if not connector and not effect_class:
        raise InvalidInput("--class CLASS is required for a command step")
    if not connector and (payload_file or with_pairs):
        raise InvalidInput("--payload and --with need --connector")
    if connector and timeout is not None:
        raise InvalidInput("--timeout is for a command step; a connector has its own")
    if not connector:
        assert effect_class is not None
        opts = state()
        done = None if as_json else done_step_evidence(name, effect_class, item=item, attempt_id=attempt_id,
                                  home=opts.home, config=opts.config, ledger=opts.ledger)
        if done is not None:  # the answer the console script gives (retrysafe._entry)
            click.echo(done)
            return
        check_command(cmd[0], os.environ)  # a command that cannot start records nothing
    engine = state().engine
    run: Run = engine.attach(attempt_id)
    env = {**os.environ, **run.env()}
    if connector:
        conn = build_connector(connector, engine.config.connector_table(connector))
        data = _payload(payload_file, with_pairs)
        with tracing.step_span(run.key, step_key(run.key, name, item), str(effect_class)):
            evidence = run.effect(name, effect_class, connector=conn, connector_name=connector,
                                  execute=drill_faults(name, lambda skey: conn.execute(skey, data)),
                                  payload=data, item=item, allow_update=allow_update)
    else:
        step_limit = timeout if timeout is not None else run.job.step_timeout
        check_limit = timeout if timeout is not None else run.job.check_timeout
        execute = command_execute(cmd, env, output_file(run, name, item), step_limit)
        lookup = shell_lookup(check, env, output_file(run, name, item, ".check.out"),
                              check_limit) if check else None
        with tracing.step_span(run.key, step_key(run.key, name, item), str(effect_class)):
            evidence = run.effect(name, effect_class, execute=drill_faults(name, execute),
                                  lookup=lookup, item=item, check=check)
    if as_json:
        emit_json({"key": run.key, "step": name, "item": item, "step_key": step_key(run.key, name, item),
                   "state": StepState.DONE.value, "evidence": evidence, "attempt": run.number})
    else:
        click.echo(evidence)


@click.command(context_settings=_CMD_SETTINGS)
@click.argument("name")
@click.option("--output", metavar="FILE",
              help="File name of the artifact in the attempt folder (default NAME; with "
              "--item, NAME+ITEM).")
@click.option("--validate", metavar="SHELL", help="Command that must exit 0 for the artifact to be accepted.")
@click.option("--item", metavar="ID", help="Per-item work: the step key gets /ID.")
@click.option("--timeout", type=SECONDS, metavar="SECONDS",
              help="Kill CMD's (or --validate's) process group after this long: the step "
              "fails. Default: the job's step_timeout (check_timeout for --validate).")
@click.option("--attempt", "attempt_id", metavar="ID", help="Attempt id (default: $RETRYSAFE_ATTEMPT_ID).")
@click.option("--prompt", metavar="FILE", help="The prompt file given to CMD: its checksum (and a copy) "
              "are kept with the artifact.")
@click.option("--model", metavar="NAME", help="The model CMD calls (default: $RETRYSAFE_MODEL).")
@click.option("--model-version", metavar="VERSION",
              help="The model's version (default: $RETRYSAFE_MODEL_VERSION).")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def generate(name: str, output: str | None, validate: str | None, item: str | None,
             timeout: float | None, attempt_id: str | None, prompt: str | None, model: str | None,
             model_version: str | None, as_json: bool, cmd: tuple[str, ...]) -> None:
    """Produce an artifact once (CMD writes $RETRYSAFE_OUTPUT) and print its path.

    \b
    If an accepted artifact exists, its path is printed and CMD is not run:
    a retry delivers the text the model wrote the first time. CMD's stdout
    streams to stderr and to step-NAME.log in the attempt folder.

    \b
    Example:
      DRAFT=$(retrysafe generate draft --output draft.md -- ./write-draft.sh)
    """
    check_name("step", name)
    engine = state().engine
    run = engine.attach(attempt_id)
    skey = step_key(run.key, name, item)
    accepted = run.ledger.step(skey)
    if accepted is None or accepted.state != StepState.DONE:
        run.artifact_file(name, item, output)  # another item's artifact is refused, exit 2
        check_command(cmd[0], os.environ)  # a command that cannot start records nothing
    env = {**os.environ, **run.env()}
    produce_limit = timeout if timeout is not None else run.job.step_timeout
    validate_limit = timeout if timeout is not None else run.job.check_timeout

    def produce(out: Path) -> None:
        # the generator's stdout goes to its log and our stderr as it comes, bytes as they are
        log = output_file(run, name, item)
        with open_output(log) as fh:
            sys.stderr.flush()
            follower = _Follower(log)
            try:
                rc = run_bounded(list(cmd), {**env, envvars.OUTPUT: str(out),
                                             envvars.STEP_KEY: skey},
                                 stdout=fh, stderr=None, timeout=produce_limit, what="command")
            except TimeoutError as exc:
                raise EffectFailed(str(exc)) from None
            finally:
                follower.stop()
        if rc != 0:
            raise EffectFailed(f"command exited {rc}")

    def check_valid(out: Path) -> bool:
        assert validate is not None
        rc = run_bounded(["/bin/sh", "-c", validate], {**env, envvars.OUTPUT: str(out)},
                         stdout=sys.stderr, stderr=None, timeout=validate_limit,
                         what="validate command")
        return rc == 0

    provenance = None
    if accepted is None or accepted.state != StepState.DONE:
        from ..provenance import declared_inputs  # the declared inputs, before CMD runs

        provenance = declared_inputs(prompt, model, model_version, os.environ, run.dir,
                                     artifact_name(name, item))  # NAME[+ITEM].prompt
    path = run.generate(name, produce, filename=output, item=item,
                        validate=check_valid if validate else None, provenance=provenance)
    if as_json:
        emit_json({"key": run.key, "step": name, "item": item, "step_key": skey,
                   "state": StepState.DONE.value, "path": str(path), "attempt": run.number})
    else:
        click.echo(str(path))
