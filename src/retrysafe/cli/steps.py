"""``retrysafe step`` and ``retrysafe generate``: steps inside the current attempt."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from .. import envvars
from ..attempt import Run
from ..connectors import build_connector
from ..connectors.base import ABSENT, Ambiguous, EffectFailed, Found, LookupResult
from ..donestep import done_step_evidence
from ..errors import EXIT_BUSY, InvalidInput
from ..keys import check_name, parse_assignments, step_key
from ._common import state


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def shell_lookup(check: str, env: Mapping[str, str]) -> Any:
    """A ``--check`` command as a lookup: exit 0 found, 1 absent, else ambiguous."""

    def lookup(step_key: str) -> LookupResult:
        import subprocess

        proc = subprocess.run(["/bin/sh", "-c", check], env={**env, envvars.STEP_KEY: step_key},
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return Found(_last_line(proc.stdout) or "found by check")
        if proc.returncode == 1:
            return ABSENT
        tail = _last_line(proc.stderr) or _last_line(proc.stdout)
        return Ambiguous(f"check command {check!r} exited {proc.returncode}"
                         + (f" ({tail})" if tail else ""))

    return lookup


def command_execute(cmd: tuple[str, ...], env: Mapping[str, str]) -> Any:
    """CMD as an effect: exit 0 done (last stdout line = evidence), 75 failed, else unknown."""

    def execute(step_key: str) -> str:
        import subprocess

        try:
            proc = subprocess.run(list(cmd), env={**env, envvars.STEP_KEY: step_key},
                                  stdout=subprocess.PIPE, text=True, check=False)
        except FileNotFoundError:
            raise EffectFailed(f"command not found: {cmd[0]}") from None
        if proc.stdout:
            sys.stderr.write(proc.stdout)
        if proc.returncode == 0:
            return _last_line(proc.stdout)
        if proc.returncode == EXIT_BUSY:
            raise EffectFailed(f"command exited {EXIT_BUSY}: nothing happened")
        if proc.returncode < 0:
            raise RuntimeError(f"command killed by signal {-proc.returncode}")
        raise RuntimeError(f"command exited {proc.returncode}")

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
@click.option("--attempt", "attempt_id", metavar="ID", help="Attempt id (default: $RETRYSAFE_ATTEMPT_ID).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def step(name: str, effect_class: str | None, item: str | None, check: str | None,
         connector: str | None, payload_file: str | None, with_pairs: tuple[str, ...],
         allow_update: bool, attempt_id: str | None, cmd: tuple[str, ...]) -> None:
    """Perform an effect step at most once, inside the current attempt.

    \b
    CMD gets RETRYSAFE_STEP_KEY to hand to the provider. Exit 0: done, the
    last line of its stdout is the evidence (printed). Exit 75: failed,
    nothing happened. Anything else: unknown; the next try runs --check first.

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
    if not connector:
        assert effect_class is not None
        opts = state()
        done = done_step_evidence(name, effect_class, item=item, attempt_id=attempt_id,
                                  home=opts.home, config=opts.config, ledger=opts.ledger)
        if done is not None:  # the answer the console script gives (retrysafe._entry)
            click.echo(done)
            return
    engine = state().engine
    run: Run = engine.attach(attempt_id)
    env = {**os.environ, **run.env()}
    if connector:
        conn = build_connector(connector, engine.config.connector_table(connector))
        data = _payload(payload_file, with_pairs)
        evidence = run.effect(name, effect_class, connector=conn, connector_name=connector,
                              execute=drill_faults(name, lambda skey: conn.execute(skey, data)),
                              payload=data, item=item, allow_update=allow_update)
    else:
        evidence = run.effect(name, effect_class,
                              execute=drill_faults(name, command_execute(cmd, env)),
                              lookup=shell_lookup(check, env) if check else None,
                              item=item, check=check)
    click.echo(evidence)


@click.command(context_settings=_CMD_SETTINGS)
@click.argument("name")
@click.option("--output", metavar="FILE",
              help="File name of the artifact in the attempt folder (default NAME).")
@click.option("--validate", metavar="SHELL", help="Command that must exit 0 for the artifact to be accepted.")
@click.option("--item", metavar="ID", help="Per-item work: the step key gets /ID.")
@click.option("--attempt", "attempt_id", metavar="ID", help="Attempt id (default: $RETRYSAFE_ATTEMPT_ID).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def generate(name: str, output: str | None, validate: str | None, item: str | None,
             attempt_id: str | None, cmd: tuple[str, ...]) -> None:
    """Produce an artifact once (CMD writes $RETRYSAFE_OUTPUT) and print its path.

    \b
    If an accepted artifact exists, its path is printed and CMD is not run:
    a retry delivers the text the model wrote the first time.

    \b
    Example:
      DRAFT=$(retrysafe generate draft --output draft.md -- ./write-draft.sh)
    """
    import subprocess

    check_name("step", name)
    engine = state().engine
    run = engine.attach(attempt_id)
    env = {**os.environ, **run.env()}

    def produce(out: Path) -> None:
        try:
            proc = subprocess.run(list(cmd), env={**env, envvars.OUTPUT: str(out),
                                                  envvars.STEP_KEY: step_key(run.key, name, item)},
                                  stdout=sys.stderr, check=False)
        except FileNotFoundError:
            raise EffectFailed(f"command not found: {cmd[0]}") from None
        if proc.returncode != 0:
            raise EffectFailed(f"command exited {proc.returncode}")

    def check_valid(out: Path) -> bool:
        assert validate is not None
        proc = subprocess.run(["/bin/sh", "-c", validate], env={**env, envvars.OUTPUT: str(out)},
                              stdout=sys.stderr, check=False)
        return proc.returncode == 0

    path = run.generate(name, produce, filename=output, item=item,
                        validate=check_valid if validate else None)
    click.echo(str(path))
