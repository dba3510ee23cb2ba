"""The ``retrysafe`` command line. Every command maps to one library call.

Exit codes: 0 done or skipped; 1 the work failed (state recorded); 2 usage,
config or input error (nothing changed); 3 blocked, a human must act;
75 busy or stale lease, try later.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from .. import envvars
from ..errors import EXIT_FAILED, EXIT_USAGE, HomeNotWritable, RetrysafeError, StorageFull
from ._common import State

__all__ = ["cli", "main"]


# name -> "module:object". Each command's module is imported only when that
# command runs (or when help lists it), so `retrysafe step` on a done step
# does not pay for the drill, the agent protocol or the scheduler.
_COMMANDS: dict[str, str] = {
    "run": "run:run",
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
        module = importlib.import_module(f"{__name__}.{module_name}")
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


def _storage_error(exc: OSError) -> RetrysafeError | None:
    """Disk full or read-only storage, as one line; the ledger's own writes are
    transactions, so nothing is half-written by the failure."""
    import errno

    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StorageFull(f"no space left to write{where}: {exc.strerror}; free some space and "
                           "run again (what was recorded so far is intact)")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return HomeNotWritable(f"cannot write{where}: {exc.strerror}")
    return None


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
        storage = _storage_error(exc) if isinstance(exc, OSError) else None
        if storage is not None:
            click.echo(f"retrysafe: {storage.message}", err=True)
            sys.exit(storage.exit_code)
        if os.environ.get(envvars.DEBUG):
            import traceback

            traceback.print_exc()
        click.echo(f"retrysafe: internal error: {type(exc).__name__}: {exc} "
                   "(set RETRYSAFE_DEBUG=1 for the traceback)", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(code if isinstance(code, int) else 0)
