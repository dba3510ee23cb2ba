"""The ``retrysafe`` command line. Every command maps to one library call.

Exit codes: 0 done or skipped; 1 the work failed (state recorded); 2 usage,
config or input error (nothing changed); 3 blocked, a human must act;
75 busy or stale lease, try later.
"""

from __future__ import annotations

import os
import sys

import click

from ..errors import EXIT_FAILED, EXIT_USAGE, RetrysafeError
from ._common import State
from .admin import demo, doctor, migrate
from .human import approve, resolve, retry
from .jobs import job, jobs
from .read import history, ls, status, verify
from .run import run
from .steps import generate, step

__all__ = ["cli", "main"]


class _Ordered(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_Ordered, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", envvar="RETRYSAFE_HOME", metavar="DIR",
              help="Home folder (runs/, ledger, config). Env RETRYSAFE_HOME; "
                   "default: the per-user state folder.")
@click.option("--config", envvar="RETRYSAFE_CONFIG", metavar="FILE",
              help="Config file. Env RETRYSAFE_CONFIG; default: HOME/retrysafe.toml.")
@click.option("--ledger", envvar="RETRYSAFE_LEDGER", metavar="URL",
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


for command in (run, step, generate, status, ls, history, verify, resolve, approve, retry,
                jobs, job, migrate, doctor, demo):
    cli.add_command(command)


def _optional_commands() -> None:
    """Commands whose modules may be absent in a trimmed install."""
    try:
        from .agent import AGENT_COMMANDS
    except ImportError:
        AGENT_COMMANDS = []
    for command in AGENT_COMMANDS:
        cli.add_command(command)
    try:
        from .openclaw import openclaw
    except ImportError:
        pass
    else:
        cli.add_command(openclaw)
    try:
        from .drill import drill
    except ImportError:
        pass
    else:
        cli.add_command(drill)


_optional_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line and a documented exit code, never a traceback."""
    try:
        code = cli.main(args=argv, prog_name="retrysafe", standalone_mode=False)
    except RetrysafeError as exc:
        click.echo(f"retrysafe: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("retrysafe: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"retrysafe: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("retrysafe: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("RETRYSAFE_DEBUG"):
            import traceback

            traceback.print_exc()
        click.echo(f"retrysafe: internal error: {type(exc).__name__}: {exc} "
                   "(set RETRYSAFE_DEBUG=1 for the traceback)", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(code if isinstance(code, int) else 0)
