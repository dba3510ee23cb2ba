"""The click group of :mod:`retrysafe.cli`, its lazily loaded commands, and :func:`main`."""

from __future__ import annotations

import importlib
import os
import sys

import click

from .. import envvars
from ._common import State
from ._output import exit_for

__all__ = ["cli", "main"]


# name -> "module:object". Each command's module is imported only when that
# command runs (or when help lists it), so `retrysafe step` on a done step
# does not pay for the drill, the agent protocol or the scheduler.
_COMMANDS: dict[str, str] = {
    "run": "run_command:run",
    "step": "steps:step",
    "generate": "steps:generate",
    "status": "read:status",
    "ls": "read:ls",
    "history": "read:history",
    "verify": "read:verify",
    "missed": "missed:missed",
    "resolve": "human:resolve",
    "approve": "human:approve",
    "retry": "human:retry",
    "break-lease": "lease:break_lease",
    "forget": "human:forget",
    "jobs": "jobs:jobs",
    "job": "jobs:job",
    "migrate": "admin:migrate",
    "doctor": "admin:doctor",
    "demo": "admin:demo",
    "drill": "drill:drill",
    "begin": "agent:begin",
    "check": "agent:check",
    "intent": "agent:intent",
    "record": "agent:record",
    "unknown": "agent:unknown",
    "block": "agent:block",
    "close": "agent:close",
    "openclaw": "openclaw:openclaw",
    "needs-attention": "attention:needs_attention",
    "prune": "retention:prune",
    "export": "transfer:export",
    "import": "transfer:import_",
    "completion": "completion:completion",
    "resume": "human:resume",
    "each": "each:each",
    "notify": "notify:notify",
    "ui": "ui:ui",
    "metrics": "metrics:metrics",
    "recover": "recover:recover",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(f"{__package__}.{module_name}")
        command: click.Command = getattr(module, attr)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar=envvars.HOME, metavar="DIR",
              help="Home folder (runs/, ledger, config). Env RETRYSAFE_HOME; "
                   "default: the per-user state folder.")
@click.option("--config", envvar=envvars.CONFIG, metavar="FILE",
              help="Config file. Env RETRYSAFE_CONFIG; default: HOME/retrysafe.toml.")
@click.option("--ledger", envvar=envvars.LEDGER, metavar="URL",
              help="Ledger URL (sqlite:///PATH or postgresql://...). Env RETRYSAFE_LEDGER.")
@click.version_option(package_name="retrysafe")
@click.pass_context
def cli(ctx: click.Context, home: str | None, config: str | None, ledger: str | None) -> None:
    """Make automations retry-safe: one intended outcome per key.

    \b
    Example:
      retrysafe job add weekly-ops-report --key 'weekly-ops-report:{week}' --param week=isoweek
      retrysafe run weekly-ops-report -p week=2026-W32 -- ./send-report.sh
    """
    ctx.obj = State(home, config, ledger)
    ctx.call_on_close(ctx.obj.close)
    _name_the_home(ctx, home, config, ledger)


def _name_the_home(ctx: click.Context, home: str | None, config: str | None,
                   ledger: str | None) -> None:
    """The home, config and ledger given as options (not from the environment) named
    in every printed command (:func:`retrysafe.location.name_given`)."""
    from click.core import ParameterSource

    def given(name: str, value: str | None) -> str | None:
        return value if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE else None

    if given("home", home) or given("config", config) or given("ledger", ledger):
        from ..location import name_given

        name_given(given("home", home), given("config", config), given("ledger", ledger))
    elif os.environ.get(envvars.ATTEMPT_ID) and os.environ.get(envvars.HOME):
        _name_the_attempts_home()


def _name_the_attempts_home() -> None:
    """A command of an attempt (a ``retrysafe step`` in CMD) has its home, config and
    ledger from the run that started it, not from the shell a line it prints is pasted
    in: it names them, each unless it is the home's default (the config in the home,
    its SQLite ledger there). A server's ledger whose password came apart from its URL
    (``PGPASSWORD``) is left to the config, which names it whole."""
    from ..location import CONFIG_NAME, name_given

    env = os.environ.get
    home = env(envvars.HOME, "")
    config = env(envvars.CONFIG)
    ledger = env(envvars.LEDGER)
    if config and os.path.join(home, CONFIG_NAME) == config:
        config = None
    if ledger and (env("PGPASSWORD") or ledger == f"sqlite:///{home}/ledger.sqlite3"):
        ledger = None
    name_given(home, config, ledger)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line and a documented exit code, never a traceback."""
    try:
        code = cli.main(args=argv, prog_name="retrysafe", standalone_mode=False)
    except (Exception, KeyboardInterrupt) as exc:
        exit_for(exc)
    sys.exit(code if isinstance(code, int) else 0)
